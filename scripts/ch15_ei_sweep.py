"""Expert iteration under one setting, measured and judged as `arl reproduce ch15` does.

Runs the chapter's expert-iteration section from the seed's weak base (4 rounds of 16
episodes per training task, each round evaluated on 240 train and 120 held-out episodes)
with the settings given, and prints one JSON line: the train pass from the weak base round
by round, held-out, the read fraction, the last round's init pass, and whether the table's
expert-iteration rule holds. The closing notes of issue 8 show sweeps made with it.

usage: python scripts/ch15_ei_sweep.py SEED [--lr 1e-3] [--batch 16] [--steps 15]
       [--blind 4] [--unskilled 4] [--quick]   (set ARL_CACHE to share the weak bases)
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from arl.bugfix.tasks import tasks_for
from arl.experiments.ch15 import Ch15Config, eval_weak, section_rft
from arl.experiments.ch15_table import expert_iteration_holds
from arl.train.bases import weak_base


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seed", type=int)
    p.add_argument("--lr", type=float, help="default: the chapter's (1e-3)")
    p.add_argument("--batch", type=int, help="default: the chapter's (16)")
    p.add_argument("--steps", type=int, help="SFT steps per round; default: the chapter's (15)")
    p.add_argument("--blind", type=int, default=4, help="weak base: blind episodes per task")
    p.add_argument(
        "--unskilled", type=int, default=4, help="weak base: read-then-guess episodes per task"
    )
    p.add_argument("--quick", action="store_true", help="the tests' reduced settings")
    a = p.parse_args()
    torch.set_num_threads(1)  # as each seed of a run
    cfg = Ch15Config().quick() if a.quick else Ch15Config()
    base = replace(
        cfg.base, seed=a.seed, weak_blind_per_task=a.blind, weak_unskilled_per_task=a.unskilled
    )
    given = {"lr": a.lr, "batch_size": a.batch, "steps_per_round": a.steps}
    rft = replace(cfg.rft, **{k: v for k, v in given.items() if v is not None})
    cfg = replace(cfg, base=base, rft=rft)
    t0 = time.time()
    weak = weak_base(cfg.base)
    w = eval_weak(cfg, weak)  # the weak base's numbers in the table
    rounds = section_rft(cfg, weak)["rounds"]
    n_tr = len(tasks_for("train")) * cfg.eval_samples  # episodes behind a train pass rate
    row = {
        "seed": a.seed,
        "lr": rft.lr,
        "batch": rft.batch_size,
        "steps": rft.steps_per_round,
        "blind": a.blind,
        "unskilled": a.unskilled,
        "weak_read": w["train_read"],
        "train": [round(q, 3) for q in [w["train"]] + [r["train"] for r in rounds]],
        "heldout": [round(r["heldout"], 3) for r in rounds],
        "read": [round(r["train_read"], 3) for r in rounds],
        "init_last": rounds[-1]["train_family"]["init"],
        "holds": expert_iteration_holds(w["train"], rounds, n_tr),
        "seconds": round(time.time() - t0),
    }
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

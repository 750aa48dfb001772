"""Oracle SFT's speed and level under one setting, measured as `arl reproduce ch15` does.

Runs the chapter's SFT section (weak base, then oracle SFT evaluated on 240 train and 120
held-out episodes every 10 steps) with the oracle-SFT settings given, and prints one JSON line:
the convergence step by the table's rule, the train curve, train and init pass at step 40,
the final pass rates and the cold start. The closing notes of issue 8 show sweeps made with it.

usage: python scripts/ch15_sft_sweep.py SEED [--lr 2e-3] [--batch 40] [--warmup 0]
       [--decay constant] [--beta2 0.999] [--blind 4] [--unskilled 4] [--quick]
       (set ARL_CACHE to share the weak bases; --blind and --unskilled change the weak base's
       data: blind and read-then-guess episodes per training task)
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from arl.experiments.ch15 import Ch15Config, section_sft
from arl.experiments.ch15_table import CONVERGED_BY, converged_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seed", type=int)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch", type=int, default=40)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--decay", default="constant")
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--blind", type=int, default=4, help="weak base: blind episodes per task")
    p.add_argument(
        "--unskilled", type=int, default=4, help="weak base: read-then-guess episodes per task"
    )
    p.add_argument("--quick", action="store_true", help="the tests' reduced settings")
    a = p.parse_args()
    cfg = Ch15Config().quick() if a.quick else Ch15Config()
    base = replace(
        cfg.base,
        seed=a.seed,
        sft_lr=a.lr,
        sft_batch=a.batch,
        sft_warmup=a.warmup,
        sft_decay=a.decay,
        sft_beta2=a.beta2,
        weak_blind_per_task=a.blind,
        weak_unskilled_per_task=a.unskilled,
    )
    t0 = time.time()
    out, *_ = section_sft(replace(cfg, base=base))
    curve = out["oracle_sft_curve"]
    due = [q for q in curve if q["step"] <= CONVERGED_BY][-1]
    row = {
        "seed": a.seed,
        "lr": a.lr,
        "batch": a.batch,
        "warmup": a.warmup,
        "decay": a.decay,
        "beta2": a.beta2,
        "blind": a.blind,
        "unskilled": a.unskilled,
        "weak_read": out["weak_base"]["train_read"],
        "weak_pass": out["weak_base"]["train"],
        "weak_heldout": out["weak_base"]["heldout"],
        "weak_entropy": out["weak_base"]["train_entropy"],
        "converged": converged_step(curve),
        "train": [round(q["train"], 3) for q in curve],
        "train_40": due["train"],
        "init_40": due["train_family"]["init"],
        "final_train": curve[-1]["train"],
        "final_heldout": curve[-1]["heldout"],
        "cold_start": out["cold_start"],
        "copy_probe": out["copy_probe"],
        "seconds": round(time.time() - t0),
    }
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

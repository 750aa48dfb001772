"""Benchmark: padded vs length-bucketed training steps, and the sweep that chose BUCKET_TOKENS.

Not a test: it prints figures (and with --json, writes them). `arl.losses.token_logprobs`
runs the model on length buckets (rows sorted by length, at most `budget` padded tokens a
forward; `arl.batch.bucket_plan`) and assembles the padded (B, T) log-probs; budget None is
the one padded forward of before. Each workload is one optimizer step as its recipe runs it
(forward, loss, backward, grad-norm clip 1.0, AdamW), on Chapter 15's batches:

- DPO: the weak-base pairs of Section 15.4 (16 weak-base episodes per training task, seed 41,
  `build_pairs` with seed 0): chosen + rejected rows, reference log-probs computed once.
- RL: an update of Section 15.5's minimal REINFORCE on 64 weak-base episodes (8 tasks x G=8):
  `arl.train.pg.accumulate_policy_gradient`, advantages r - mean(group).
- SFT oracle: minibatches of 40 from the oracle demonstrations (the oracle-SFT step).
- SFT weak: minibatches of 32 from the weak-base data (the weak-base SFT step).
- ref forward: the frozen forward (no grad) of the RL batch: a reference, pi_prox, a teacher.

The weak base is seed 0's (`arl.train.bases.weak_base`, cached under ~/.cache/arl or
$ARL_CACHE; built once if missing). Every contender (padded, and each budget) steps its own
copy of the model; they run one after another within each repetition, the step times are
medians over repetitions, and each speedup is the median of the per-repetition ratios
padded / bucketed (benchmarks/_common.py). The budget printed as "chosen" minimizes the summed
median step time of the four training steps.

    python benchmarks/buckets.py              # about 2 minutes on a quiet machine
    python benchmarks/buckets.py --quick      # 3 repetitions, three budgets
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    interleaved,
    machine_line,
    median,
    median_ratio,
    setup_threads,
    write_json,
)

from arl import losses  # noqa: E402
from arl.batch import BUCKET_TOKENS, Batch, bucket_plan, collate, row_extents  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.eval.metrics import run_policy  # noqa: E402
from arl.losses import dpo_loss, episode_logp, sft_loss, token_logprobs  # noqa: E402
from arl.train import pg  # noqa: E402
from arl.train.bases import BaseConfig, oracle_sft_data, weak_base, weak_base_data  # noqa: E402
from arl.train.common import make_optimizer, optimizer_step  # noqa: E402
from arl.train.dpo import build_pairs  # noqa: E402
from arl.train.pg_config import minimal_reinforce  # noqa: E402

BUDGETS = (256, 512, 1024, 2048, 4096)
QUICK_BUDGETS = (512, BUCKET_TOKENS, 4096)
TRAIN = ("DPO", "RL", "SFT oracle", "SFT weak")


@contextmanager
def pg_budget(budget: int | None):
    """accumulate_policy_gradient with token_logprobs at `budget` (the benchmark's instrument)."""
    real = pg.token_logprobs
    pg.token_logprobs = partial(losses.token_logprobs, budget=budget)
    try:
        yield
    finally:
        pg.token_logprobs = real


def workloads(weak, reps: int) -> dict[str, list[Batch]]:
    """Each workload's batches, one per repetition (DPO and RL: the same batch every step)."""
    samples = run_policy(weak, tasks_for("train"), 16, seed=41)
    pairs = build_pairs(samples, random.Random(0))
    dpo = collate([c for c, _ in pairs] + [r for _, r in pairs])
    rl = collate(run_policy(weak, tasks_for("train")[:8], 8, seed=2))
    gen = torch.Generator().manual_seed(1)

    def minibatches(data, size):
        return [collate([data[i] for i in torch.randint(len(data), (size,), generator=gen)])]

    oracle, weak_data = oracle_sft_data(), weak_base_data()
    return {
        "DPO": [dpo] * reps,
        "RL": [rl] * reps,
        "SFT oracle": [minibatches(oracle, 40)[0] for _ in range(reps)],
        "SFT weak": [minibatches(weak_data, 32)[0] for _ in range(reps)],
        "ref forward": [rl] * reps,
    }


def step_fn(kind: str, weak, batches: list[Batch], budget: int | None):
    """fn(rep): one optimizer step (or frozen forward) of `kind` at `budget`, on its own model."""
    model = copy.deepcopy(weak).train()
    opt = make_optimizer(model, 1e-4)
    batch0, config = batches[0], minimal_reinforce()
    if kind == "DPO":  # the reference's summed log-probs, once (the pairs are fixed)
        with torch.no_grad():
            ref = episode_logp(token_logprobs(weak, batch0, budget=None), batch0.action_mask)
        P = batch0.input_ids.size(0) // 2
    if kind == "RL":  # (64,) r - mean(group) over the 8 groups of 8
        rewards = batch0.rewards.view(8, 8)
        adv = (rewards - rewards.mean(1, keepdim=True)).flatten()

    def loss_of(batch: Batch):
        if kind == "DPO":
            seq = episode_logp(token_logprobs(model, batch, budget=budget), batch.action_mask)
            return dpo_loss(seq[:P], seq[P:], ref[:P], ref[P:], 0.1)
        if kind == "RL":

            def backward() -> float:
                with pg_budget(budget):
                    return pg.accumulate_policy_gradient(model, batch, adv, config)["loss"]

            return backward
        return sft_loss(token_logprobs(model, batch, budget=budget), batch.action_mask)

    def fn(rep: int) -> None:
        batch = batches[rep]
        if kind == "ref forward":
            with torch.no_grad():
                token_logprobs(weak, batch, budget=budget)
            return
        optimizer_step(model, opt, loss_of(batch), 1.0, kind)

    return fn


def shape(batch: Batch, budget: int | None) -> dict:
    """Rows, padded width, the share of real positions, and buckets at `budget`."""
    B, T = batch.input_ids.shape
    ext = row_extents(batch).tolist()
    plan = bucket_plan(ext, budget) if budget else [(list(range(B)), T)]
    return {
        "rows": B,
        "T": T,
        "real_share": sum(ext) / (B * T),
        "buckets": len(plan),
        "computed_share": sum(ext) / sum(len(r) * w for r, w in plan),
    }


def measure(weak, reps: int, budgets: tuple[int, ...]) -> dict:
    """Step times of every workload, padded and at each budget, interleaved per repetition."""
    data = workloads(weak, reps + 1)
    out: dict = {}
    for kind, batches in data.items():
        contenders = [None, *budgets]
        fns = {str(b): step_fn(kind, weak, batches, b) for b in contenders}
        for fn in fns.values():
            fn(reps)  # warm-up, on the spare batch
        times = interleaved(fns, reps)
        out[kind] = {
            "shape": shape(batches[0], BUCKET_TOKENS),
            "ms": {k: 1000 * median(v) for k, v in times.items()},
            "speedup": {k: median_ratio(times["None"], v) for k, v in times.items()},
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=7, help="steps timed per contender")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--quick", action="store_true", help="3 repetitions, three budgets")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON ('-': stdout)")
    args = p.parse_args(argv)
    setup_threads(args.threads)
    budgets = QUICK_BUDGETS if args.quick else BUDGETS
    reps = 3 if args.quick else args.reps
    weak = weak_base(BaseConfig())
    results = {"machine": machine_line(), "reps": reps, "default": BUCKET_TOKENS}
    results["workloads"] = measure(weak, reps, budgets)
    totals = {str(b): sum(results["workloads"][k]["ms"][str(b)] for k in TRAIN) for b in budgets}
    results["chosen"] = int(min(totals, key=totals.get))
    padded = sum(results["workloads"][k]["ms"]["None"] for k in TRAIN)
    results["train_ms_total"] = totals | {"None": padded}
    print_table(results, budgets)
    write_json(args.json, results)
    return results


def print_table(results: dict, budgets: tuple[int, ...]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    console.print(f"[bold]machine[/]: {results['machine']}")
    t = Table(
        title=f"padded vs bucketed steps (ms, median of {results['reps']}; speedup = median "
        f"of padded/bucketed per repetition); buckets at the default {results['default']}"
    )
    for col in ("workload", "rows x T", "real", "buckets", "padded", *map(str, budgets)):
        t.add_column(col, justify="right")
    for kind, r in results["workloads"].items():
        s = r["shape"]
        cells = [f"{r['ms'][str(b)]:.0f} ({r['speedup'][str(b)]:.2f}x)" for b in budgets]
        t.add_row(
            kind,
            f"{s['rows']} x {s['T']}",
            f"{s['real_share']:.0%}",
            str(s["buckets"]),
            f"{r['ms']['None']:.0f}",
            *cells,
        )
    console.print(t)
    tot = results["train_ms_total"]
    line = ", ".join(f"{b}: {tot[str(b)]:.0f}" for b in budgets)
    console.print(
        f"summed training-step time (ms): padded {tot['None']:.0f}; {line}; "
        f"chosen budget: {results['chosen']} (default now {results['default']})"
    )


if __name__ == "__main__":
    main()

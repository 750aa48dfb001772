"""Benchmark: CodeFix episodes against the BugFix gym's at batch 64 (rollouts per second).

Not a test: it prints figures (and with --json, writes them). `rollout_batch` at batch 64 on
the training tasks (cycled), each environment's RL cold start (arl.experiments.bases, cached
under ~/.cache/arl or $ARL_CACHE; built once, minutes, if missing), the two environments
interleaved repetition by repetition in one process:

- `menu`: the BugFix gym (edit ops; the edited function runs in-process, our own code);
- `codefix`: CodeFix (replace edits; every test run in the sandbox's warm pool), with its
  verdict cache cleared before every repetition (`cold cache`: every module is run) and kept
  (`warm cache`: what RL sees once its episodes repeat an edit).

Reported: episodes per second, tokens per episode, sandbox jobs per episode and the share of
the rollout spent waiting for them, and the cost of a CodeFix episode in menu episodes (target:
at most 3x). The sandbox's own throughput, warm pool against a launch per job, is
benchmarks/sandbox.py.

    ARL_CACHE=... python benchmarks/codefix.py            # about a minute once the bases exist
    python benchmarks/codefix.py --quick --json -
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    interleaved,
    machine_line,
    median,
    median_ratio,
    setup_threads,
    write_json,  # noqa: E402
)

from arl.codefix import grade  # noqa: E402
from arl.env import get_environment  # noqa: E402
from arl.rollout import rollout_batch  # noqa: E402
from arl.train.bases import BaseConfig, cold_start  # noqa: E402


class SandboxClock:
    """Seconds spent in grade.run_jobs (cache lookups and sandbox jobs; grade.run goes
    through it) while it is installed."""

    def __init__(self) -> None:
        self.seconds, self.real = 0.0, grade.run_jobs

    def __enter__(self):
        def timed(*a):
            t = time.perf_counter()
            try:
                return self.real(*a)
            finally:
                self.seconds += time.perf_counter() - t

        grade.run_jobs = timed
        return self

    def __exit__(self, *exc) -> None:
        grade.run_jobs = self.real


def measure(batch: int, reps: int, quick: bool) -> dict:
    config = BaseConfig().quick() if quick else BaseConfig()
    models = {name: cold_start(config, name).eval() for name in ("bugfix", "codefix")}
    tasks = {n: get_environment(n).tasks("train") for n in models}
    jobs = {n: [ts[i % len(ts)] for i in range(batch)] for n, ts in tasks.items()}
    out: dict[str, list] = {}
    clock = {"cold": 0.0, "warm": 0.0}
    counts = {"cold": 0, "warm": 0}

    def menu(r: int) -> None:
        out["menu"] = rollout_batch(models["bugfix"], jobs["bugfix"], seed=r)

    def codefix(cache: str):
        def run(r: int) -> None:
            if cache == "cold":
                grade.clear_cache()
            before = grade.stats["jobs"] - grade.stats["cache_hits"]
            with SandboxClock() as c:
                out[cache] = rollout_batch(models["codefix"], jobs["codefix"], seed=r)
            clock[cache] += c.seconds
            counts[cache] += grade.stats["jobs"] - grade.stats["cache_hits"] - before

        return run

    menu(0), codefix("warm")(0)  # warm-up: the sandbox pool starts, first-call allocations
    clock, counts = {"cold": 0.0, "warm": 0.0}, {"cold": 0, "warm": 0}
    fns = {"menu": menu, "cold": codefix("cold"), "warm": codefix("warm")}
    times = interleaved(fns, reps)
    rows = {}
    for name, label in (
        ("menu", "menu (BugFix)"),
        ("cold", "codefix, cold cache"),
        ("warm", "codefix, warm cache"),
    ):
        t = median(times[name])
        trajs = out[name]
        row = {
            "label": label,
            "seconds": t,
            "episodes_per_s": batch / t,
            "tokens_per_episode": sum(len(x) for x in trajs) / batch,
            "pass_rate": sum(x.passed for x in trajs) / batch,
        }
        if name != "menu":
            row["sandbox_runs_per_episode"] = counts[name] / (reps * batch)
            row["sandbox_share"] = clock[name] / sum(times[name])
            row["cost_vs_menu"] = median_ratio(times[name], times["menu"])
        rows[name] = row
    return {"machine": machine_line(), "batch": batch, "reps": reps, "rows": rows}


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]machine[/]: {results['machine']}")
    t = Table(
        title=f"rollout_batch at batch {results['batch']}, cold starts "
        f"(median of {results['reps']} reps)"
    )
    cols = (
        "environment",
        "episodes/s",
        "tokens/episode",
        "train pass",
        "sandbox runs/episode",
        "time in sandbox",
        "cost per episode vs menu",
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "environment" else "right")
    for row in results["rows"].values():
        extra = ("-", "-", "1.00x")
        if "cost_vs_menu" in row:
            extra = (
                f"{row['sandbox_runs_per_episode']:.2f}",
                f"{row['sandbox_share']:.0%}",
                f"{row['cost_vs_menu']:.2f}x",
            )
        t.add_row(
            row["label"],
            f"{row['episodes_per_s']:.1f}",
            f"{row['tokens_per_episode']:.0f}",
            f"{row['pass_rate']:.2f}",
            *extra,
        )
    console.print(t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="the quick bases, 2 reps")
    p.add_argument("--json", help="write the figures to this file ('-': stdout)")
    args = p.parse_args()
    setup_threads(args.threads)
    results = measure(args.batch, 2 if args.quick else args.reps, args.quick)
    if args.json:
        write_json(args.json, results)
    if args.json != "-":
        print_table(results)


if __name__ == "__main__":
    main()

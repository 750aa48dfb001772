"""Appendix B problems reproduced on the gym: `arl reproduce problem N [--quick] [--seed S]`.

Each problem is one function `(ctx) -> (results, conclusion)` that measures its
mechanism on the BugFix gym and TinyAgent, draws a figure into ctx.out, and states
its conclusion with the numbers it measured (book numbers only as labelled references).
"""

from __future__ import annotations

import time
from pathlib import Path

from arl.checks import check_seed
from arl.errors import ArlError
from arl.experiments.problems import dynamics, estimators, rewards, systems
from arl.experiments.problems.common import Ctx, set_threads
from arl.runio import atomic_write_json, claim_output_dir, plain

PROBLEMS = {
    1: estimators.problem_1,
    2: estimators.problem_2,
    3: estimators.problem_3,
    4: estimators.problem_4,
    7: rewards.problem_7,
    8: rewards.problem_8,
    9: rewards.problem_9,
    12: rewards.problem_12,
    13: rewards.problem_13,
    16: systems.problem_16,
    17: systems.problem_17,
    26: dynamics.problem_26,
    28: dynamics.problem_28,
}


def run(
    number: int,
    quick: bool = False,
    seed: int = 0,
    out: str | Path | None = None,
    overwrite: bool = False,
) -> dict:
    """Run one problem; writes results.json and problem-N.png under out; returns the results.

    The folder is claimed first (locked; a folder of another run refused unless
    `overwrite`); a rerun of the same problem replaces its two files.
    """
    if number not in PROBLEMS:
        avail = ", ".join(str(n) for n in PROBLEMS)
        raise ArlError(f"problem {number}: not reproduced (available: {avail})")
    check_seed("--seed", seed)
    ctx = Ctx(number=number, quick=quick, seed=seed, out=Path(out or f"runs/problem-{number}"))
    owned = ("results.json", f"problem-{number}.png")
    kind = f"reproduce problem {number}"
    with claim_output_dir(ctx.out, kind, owned, overwrite=overwrite, reuse=True):
        t0 = time.perf_counter()
        results, conclusion = PROBLEMS[number](ctx)
        results = {
            "problem": number,
            "quick": quick,
            "seed": seed,
            **results,
            "conclusion": conclusion,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        atomic_write_json(ctx.out / "results.json", plain(results, ndigits=6))
    return results


def main(args) -> int:
    """CLI entry: args has .number, .quick, .seed, .out, .overwrite."""
    set_threads()
    results = run(args.number, args.quick, args.seed, args.out, args.overwrite)
    out = Path(args.out or f"runs/problem-{args.number}")
    print(f"Problem {args.number}{' (quick)' if args.quick else ''}: {results['conclusion']}")
    print(f"[{results['seconds']} s; {out / 'results.json'}, {out / f'problem-{args.number}.png'}]")
    return 0

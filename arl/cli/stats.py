"""`arl stats compare` and `arl stats passk`: paired comparisons and pass@k of per-episode
result files (arl.eval.stats does the statistics; this module parses and prints)."""

from __future__ import annotations

import argparse

import numpy as np

from arl.cli.args import float_in, nonempty_path, positive_int, positive_int_max, seed_int
from arl.cli.output import emit
from arl.errors import ArlError
from arl.eval import stats

MAX_BOOTSTRAP = 1_000_000  # bootstrap resamples (about a second per 100k over 30 tasks)
BOOTSTRAP = positive_int_max(MAX_BOOTSTRAP)
BOOTSTRAP_HELP = f"bootstrap resamples over tasks (at most {MAX_BOOTSTRAP:,})"


def _stats_compare(args: argparse.Namespace) -> int:
    a, b = stats.load_results(args.a), stats.load_results(args.b)
    tasks, drop_a, drop_b = stats.align_tasks(a, b, intersect=args.intersect)
    ra, rb = stats.pass_rates(a, tasks), stats.pass_rates(b, tasks)
    cmp = stats.paired_comparison(ra, rb, n_boot=args.bootstrap, seed=args.seed, level=args.level)
    n_a = [len(a[t]) for t in tasks]
    n_b = [len(b[t]) for t in tasks]
    d = cmp.to_dict()
    ci = d.pop("ci_diff")
    out = {
        "title": "paired comparison, B - A",
        "inputs": {
            "A": str(args.a),
            "B": str(args.b),
            "bootstrap": args.bootstrap,
            "seed": args.seed,
        },
        "results": {
            **d,
            "ci_lo": ci["lo"],
            "ci_hi": ci["hi"],
            "ci_level": ci["level"],
            "samples_per_task_a_min": min(n_a),
            "samples_per_task_a_max": max(n_a),
            "samples_per_task_b_min": min(n_b),
            "samples_per_task_b_max": max(n_b),
            "dropped_only_in_a": drop_a,
            "dropped_only_in_b": drop_b,
        },
        "comments": [],
    }
    if drop_a or drop_b:
        out["comments"].append(
            f"note: compared {len(tasks)} common tasks; dropped {drop_a} "
            f"only in A and {drop_b} only in B (--intersect)"
        )
    out["comments"].append(
        "se_paired = sqrt(sum d_i^2)/N (sqrt(b+c)/N with one sample per "
        "task); b, c count tasks where B's / A's pass rate is higher"
    )
    emit(out, args.json)
    return 0


def _default_ks(n_min: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to the fewest samples of any task."""
    ks, base = [], 1
    while base <= n_min:
        ks += [k for k in (base, 2 * base, 5 * base) if k <= n_min]
        base *= 10
    return ks


def _stats_passk(args: argparse.Namespace) -> int:
    res = stats.load_results(args.file)
    names, n, c = stats.task_counts(res)
    n_min = int(n.min())
    ks = list(range(1, n_min + 1)) if args.curve else args.k or _default_ks(n_min)
    too_big = [k for k in ks if k > n_min]
    if too_big:
        raise ArlError(
            f"--k {too_big[0]}: pass@k needs at least k samples of every task, and "
            f"{args.file} has {n_min} of some task (use --k up to {n_min}, or evaluate with "
            f"more: arl eval ... --samples {max(too_big)})"
        )
    rows = []
    for k in ks:
        per_task = stats.per_task_pass_at_k(n, c, k)
        ci = stats.bootstrap_mean_ci(per_task, n_boot=args.bootstrap, seed=args.seed)
        rows.append(
            {
                "k": k,
                "pass@k": ci.estimate,
                "plugin": float(np.mean(stats.per_task_pass_at_k_plugin(n, c, k))),
                "ci_lo": ci.lo,
                "ci_hi": ci.hi,
            }
        )
    emit(
        {
            "title": "pass@k (unbiased, mean over tasks; bootstrap over tasks)",
            "inputs": {
                "file": str(args.file),
                "tasks": len(names),
                "samples_min": int(n.min()),
                "samples_max": int(n.max()),
                "bootstrap": args.bootstrap,
                "seed": args.seed,
            },
            "table": rows,
        },
        args.json,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `stats` (compare, passk) to the `arl` parser."""
    p = sub.add_parser("stats", help="pass@k and paired comparisons of per-episode result files")
    ss = p.add_subparsers(dest="stats_command", required=True)

    c = ss.add_parser("compare", help="paired comparison of run B against run A on the same tasks")
    c.add_argument("a", type=nonempty_path, help="JSONL results of run A (task, sample, passed)")
    c.add_argument("b", type=nonempty_path, help="JSONL results of run B")
    c.add_argument(
        "--intersect",
        action="store_true",
        help="compare only tasks present in both files (default: error)",
    )
    c.add_argument("--bootstrap", type=BOOTSTRAP, default=2000, help=BOOTSTRAP_HELP)
    c.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    c.add_argument(
        "--level", type=float_in(0, 1, True, True), default=0.95, help="confidence level"
    )
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_stats_compare)

    k = ss.add_parser("passk", help="unbiased pass@k with bootstrap intervals over tasks")
    k.add_argument("file", type=nonempty_path, help="JSONL results (task, sample, passed)")
    k.add_argument(
        "--k", type=positive_int, nargs="+", help="values of k (default 1, 2, 5, 10, ...)"
    )
    k.add_argument("--curve", action="store_true", help="every k from 1 to the fewest samples")
    k.add_argument("--bootstrap", type=BOOTSTRAP, default=2000, help=BOOTSTRAP_HELP)
    k.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(func=_stats_passk)

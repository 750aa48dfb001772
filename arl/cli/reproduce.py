"""`arl reproduce ch15`, `problem N` and `exercise N`: the book's experiments, measured.

The experiments compute and write files; here the flags become their arguments and their
results become the tables printed.
"""

from __future__ import annotations

import argparse
import sys

from arl.cli.args import add_ray_flag, int_in, positive_int, seed_int

# the keys of arl.experiments.problems.PROBLEMS (a test checks), here so --help stays fast
PROBLEM_NUMBERS = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
    9,
    10,
    11,
    12,
    13,
    14,
    16,
    17,
    20,
    23,
    24,
    25,
    26,
    27,
    28,
    29,
    30,
)

# the keys of arl.experiments.exercises.EXERCISES (a test checks): Chapter 15's exercises
EXERCISE_NUMBERS = (1, 2, 3, 4, 5, 6)

# `reproduce problem` and `exercise`: (help, description), {valid} standing for the numbers
PROBLEM_TEXTS = (
    "an Appendix B problem reproduced on the gym over seeds (N: {valid}, or all)",
    "Reproduce Appendix B's Problem N on the gym over seeds: each claim judged by its locked "
    "rule on a paired per-seed effect (the one-sided 97.5% Student-t bound over seeds), on "
    "the locked judged seeds unless --seed/--seeds say otherwise; N is one of {valid}, or "
    "`all` for every problem in sequence with one summary table.",
)
EXERCISE_TEXTS = (
    "a Chapter 15 exercise run on the gym over seeds (N: {valid}, or all)",
    "Run Chapter 15's Exercise N on the gym over seeds: each claim judged by its locked rule "
    "on a per-seed effect (the one-sided 97.5% Student-t bound over seeds), on the locked "
    "judged seeds unless --seed/--seeds say otherwise; N is one of {valid}, or `all` for every "
    "exercise in sequence with one summary table. (Exercise 7, the design review, is worked "
    "in docs/ch15.md with `arl reproduce problem 29`.)",
)


def log(line: str) -> None:
    """A progress line, to stderr at once."""
    print(line, file=sys.stderr, flush=True)


def seeds_of(args: argparse.Namespace) -> list[int]:
    """--seed and --seeds as the list of seeds (Chapter 15: seed 0 and one seed by default)."""
    first = 0 if args.seed is None else args.seed
    return [first + i for i in range(1 if args.seeds is None else args.seeds)]


def cmd_ch15(args: argparse.Namespace) -> int:
    """Run the seeds (or recompute the table of a finished run), then print the results."""
    import os
    from pathlib import Path

    from arl.experiments import ch15, ch15_seeds

    cfg = ch15.Ch15Config()
    cfg = cfg.quick() if args.quick else cfg
    seeds = seeds_of(args)
    # a seed's sections run as tasks side by side (ch15_plan): up to 8 at once per seed
    workers = args.workers or min(8 * len(seeds), os.cpu_count() or 1)
    if args.retable:
        payload = ch15_seeds.retable(Path(args.out))
    else:
        plural = "es" if workers > 1 else ""
        where = f"Ray tasks ({args.ray})" if args.ray else f"{workers} process{plural}"
        which = f"seeds {seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
        quick = " (quick settings)" if args.quick else ""
        header = f"arl reproduce ch15: {which} in {where}{quick}; progress lines follow"
        flags = dict(quick=args.quick, workers=workers, ray=args.ray, overwrite=args.overwrite)
        payload = ch15_seeds.run_seeds(cfg, seeds, Path(args.out), **flags, log=log, header=header)
    print_ch15(payload, Path(args.out))
    return 0


def print_ch15(payload: dict, out) -> None:
    """The table with its verdicts, what each recipe consumed, and where the files went."""
    from rich.console import Console
    from rich.table import Table

    from arl.experiments.ch15_summary import COSTS, with_se

    table, runs, seeds = payload["table"], payload["runs"], payload["seeds"]
    title = f"Chapter 15 reproduced (seeds {seeds[0]}..{seeds[-1]})"
    if payload["quick"]:
        title += " -- QUICK settings: too small to reproduce anything; verdicts are not results"
    view = Table(title=title, show_lines=True)
    for col in ("quantity", "book", "measured (seed mean)", "reproduced"):
        view.add_column(col, overflow="fold")
    for row in table:
        ok = "[green]yes[/]" if row["reproduced"] else "[red]no[/]"
        k, n = row["seeds_holding"], row["seeds"]
        view.add_row(row["quantity"], row["book"], with_se(row), f"{ok} ({k}/{n})")
    console = Console()
    console.print(view)
    costs = Table(title="What each recipe consumed (evaluation episodes not counted)")
    costs.add_column("recipe", justify="left")
    for col in COSTS:
        costs.add_column(col.replace("_", " "), justify="right")
    for recipe, c in runs[0]["recipes"]["cost"].items():
        costs.add_row(recipe, *(str(c[k]) for k in COSTS))
    console.print(costs)
    times = sorted(round(sum(R["timings_s"].values())) for R in runs)
    span = f"{times[0]}" if times[0] == times[-1] else f"{times[0]}-{times[-1]}"
    console.print(f"time per seed: {span} s of compute")
    figures = ", ".join(payload["figures"])
    console.print(f"wrote {out / 'results.json'}, {out / 'table.md'}, {figures} and checkpoints/")


def add_seed_flags(p: argparse.ArgumentParser, seeds: str, what: str) -> None:
    """--seed, --seeds, --workers and --ray: which seeds, and where they run."""
    p.add_argument("--seed", type=seed_int, default=None, help=f"first seed ({seeds})")
    p.add_argument(
        "--seeds",
        type=int_in(1, 100),
        default=None,
        help=f"N seeds (seed .. seed+N-1, N <= 100): {what}",
    )
    p.add_argument(
        "--workers",
        type=int_in(1, 64),
        default=None,
        help="parallel processes (default: one per core, at most one per seed; ch15 runs "
        "each seed's sections side by side as soon as their inputs are ready)",
    )
    add_ray_flag(p)


def problem_number(text: str) -> str:
    """`all`, or a positive integer (whether it is a reproduced problem is checked later)."""
    if text == "all":
        return text
    return str(positive_int(text))


def cmd_problem(args: argparse.Namespace, kind: str = "problem") -> int:
    """Run one problem (or exercise), or every one (`all`), over the seeds; then print the
    verdicts."""
    import os
    from pathlib import Path

    from arl.experiments import problems
    from arl.experiments.problems.common import set_threads
    from arl.parallel import Where

    set_threads()
    n_seeds = args.seeds or 8  # the locked seeds are 8 for every problem and exercise
    where = Where(workers=args.workers or min(n_seeds, os.cpu_count() or 1), ray=args.ray)
    flags = dict(quick=args.quick, overwrite=args.overwrite, where=where, log=log, kind=kind)
    if args.number == "all":
        out = Path(args.out or f"runs/{kind}s")
        payload = problems.run_all(args.seed, args.seeds, out=out, **flags)
        print_problems(payload, out, kind)
        return 0
    number = int(args.number)
    out = Path(args.out or f"runs/{kind}-{number}")
    seeds = problems.seeds_for(problems.get(number, kind), args.seed, args.seeds)
    print_problem(problems.run(number, seeds, out=out, **flags), out, kind)
    return 0


def cmd_exercise(args: argparse.Namespace) -> int:
    """Run one Chapter 15 exercise, or every one (`all`), over the seeds."""
    return cmd_problem(args, "exercise")


def print_problem(results: dict, out, kind: str = "problem") -> None:
    """One problem: each claim (its source) with its verdict over seeds, the book and lab
    counts, each seed's line, the lock, the files."""
    from arl.experiments.problems import count_line

    n = results[kind]
    title = f"{kind.capitalize()} {n}{' (quick)' if results['quick'] else ''}"
    rule = results["rule"]
    seeds = results["seeds"]
    which = "the locked seeds" if results["on_locked_seeds"] else "NOT the locked seeds"
    print(f"{title}: {count_line(results['counts'])}")
    print(f"  rule {rule['fingerprint']} locked {rule['locked']}; seeds {seeds} ({which})")
    for c in results["claims"]:
        print(f"  [{c['claim']['source']}] {c['claim']['text']}: {c['conclusion']}")
    for r in results["per_seed"]:
        print(f"  seed {r['seed']}: {r['detail']}")
    files = f"{out / 'results.json'}, {out / f'{kind}-{n}.png'}"
    print(f"[{results['seconds']} s of compute; {files}]")


def print_problems(payload: dict, out, kind: str = "problem") -> None:
    """Every problem: one row each (claim, effect, interval, seeds, shown or its cause)."""
    from rich.console import Console
    from rich.table import Table

    from arl.experiments.problems import count_line

    q = " -- QUICK settings: verdicts are not results" if payload["quick"] else ""
    what = "Appendix B problems" if kind == "problem" else "Chapter 15 exercises"
    title = f"{what}: {count_line(payload['counts'])}{q}"
    table = Table(title=title, show_lines=True)
    cols = (kind, "source", "claim", "effect", "mean +- SE [t bounds]", "seeds", "verdict")
    for col in cols:
        table.add_column(col, overflow="fold")
    for r in payload["rows"]:
        if r["shown"]:
            verdict = "[green]shown[/]"
        else:
            verdict = f"[red]{r['status']}[/]" + (f": {r['cause']}" if r["cause"] else "")
        cells = (r["source"], r["claim"], r["effect"], r["measured"], r["seeds"], verdict)
        table.add_row(str(r[kind]), *cells)
    console = Console()
    console.print(table)
    console.print(f"wrote {out / 'summary.json'}, {out / 'summary.md'} and {kind}-N/ folders")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `reproduce` with its experiments to the `arl` parser."""
    p = sub.add_parser("reproduce", help="reproduce a chapter's or a problem's experiment")
    rs = p.add_subparsers(dest="experiment", required=True, parser_class=type(p))

    c = rs.add_parser("ch15", help="Chapter 15: SFT, RFT and expert iteration, DPO, four recipes")
    c.add_argument(
        "--quick",
        action="store_true",
        help="a reduced run that only checks every section runs (no verdicts)",
    )
    add_seed_flags(c, "default 0, one seed", "numbers as mean +- SE, rows as k/N")
    c.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a finished or different run in --out (default: refuse; a "
        "partial run with the same settings is resumed)",
    )
    c.add_argument(
        "--retable",
        action="store_true",
        help="recompute the table and figures of the finished run in --out from its "
        "results.json (after a rule changed); runs nothing",
    )
    c.add_argument("--out", default="runs/ch15", help="output directory")
    c.set_defaults(func=cmd_ch15)

    add_judged(rs, "problem", PROBLEM_NUMBERS, cmd_problem, PROBLEM_TEXTS)
    add_judged(rs, "exercise", EXERCISE_NUMBERS, cmd_exercise, EXERCISE_TEXTS)


def add_judged(rs, kind: str, numbers: tuple[int, ...], func, texts: tuple[str, str]) -> None:
    """`reproduce problem|exercise N` (N among `numbers`, or all), judged over seeds: the
    parser, its texts, and the flags both share (N, --quick, the seeds, --out, --overwrite)."""
    valid = ", ".join(str(n) for n in numbers)
    help_, description = (text.format(valid=valid) for text in texts)
    q = rs.add_parser(kind, help=help_, description=description)
    q.set_defaults(func=func)
    q.add_argument(
        "number", type=problem_number, metavar="N", help=f"the {kind}: one of {valid}, or all"
    )
    q.add_argument(
        "--quick", action="store_true", help="a reduced run (checks it runs; no results)"
    )
    add_seed_flags(
        q,
        "default: the locked judged seeds, 10-17 (tuning used other seeds: 0-3 or 100+)",
        "the effects as mean +- SE with t bounds, k/N seeds",
    )
    q.add_argument(
        "--out", default=None, help=f"output directory (default runs/{kind}-N; runs/{kind}s)"
    )
    q.add_argument(
        "--overwrite",
        action="store_true",
        help="replace another run's files in --out (default: refuse; a partial or "
        "finished run with the same settings is resumed or read back)",
    )

"""`arl reproduce ch15` and `arl reproduce problem N`: the book's experiments, measured."""

from __future__ import annotations

import argparse

from arl.cli.args import int_in, positive_int, seed_int

# the keys of arl.experiments.problems.PROBLEMS (a test checks), here so --help stays fast
PROBLEM_NUMBERS = (1, 2, 3, 4, 7, 8, 9, 12, 13, 16, 17, 26, 28)


def cmd_ch15(args: argparse.Namespace) -> int:
    from arl.experiments import ch15

    return ch15.main(args)


def cmd_problem(args: argparse.Namespace) -> int:
    from arl.experiments import problems

    return problems.main(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `reproduce` with its experiments to the `arl` parser."""
    p = sub.add_parser("reproduce", help="reproduce a chapter's or a problem's experiment")
    rs = p.add_subparsers(dest="experiment", required=True, parser_class=type(p))

    c = rs.add_parser("ch15", help="Chapter 15: SFT, RFT and expert iteration, DPO, four recipes")
    c.add_argument("--quick", action="store_true", help="a reduced run (minutes -> seconds)")
    c.add_argument("--seed", type=seed_int, default=0)
    c.add_argument("--seeds", type=int_in(1, 100), default=1, help="repeat over N seeds (<= 100)")
    c.add_argument("--out", default="runs/ch15", help="output directory")
    c.set_defaults(func=cmd_ch15)

    valid = ", ".join(str(n) for n in PROBLEM_NUMBERS)
    q = rs.add_parser(
        "problem",
        help=f"an Appendix B problem reproduced on the gym (N: {valid})",
        description=f"Reproduce Appendix B's Problem N on the gym; N is one of {valid}.",
    )
    q.add_argument("number", type=positive_int, metavar="N", help=f"the problem: one of {valid}")
    q.add_argument("--quick", action="store_true", help="a reduced run")
    q.add_argument("--seed", type=seed_int, default=0)
    q.add_argument("--out", default=None, help="output directory (default runs/problem-N)")
    q.add_argument("--overwrite", action="store_true", help="replace another run's --out files")
    q.set_defaults(func=cmd_problem)

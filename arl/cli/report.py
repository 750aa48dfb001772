"""`arl report RUN [--out FILE.html]`: one self-contained HTML page of a run's panels and the
doctor's findings (or of a reproduction's table and figures); prints the file's path."""

from __future__ import annotations

import argparse

from arl.cli.args import nonempty_path

HELP = (
    "RUN: an arl run folder (train pg, sft, rft, dpo, distill), a TRL or verl log the doctor "
    "reads, or an `arl reproduce` output (ch15, one problem, or `problem all`'s folder). The "
    "page holds every figure inline (no server, no network) and opens in any browser."
)


def cmd_report(args: argparse.Namespace) -> int:
    from arl.doctor.report import write_report

    path = write_report(args.run, args.out, overwrite=args.overwrite)
    print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `report` to the `arl` parser."""
    p = sub.add_parser(
        "report",
        help="one self-contained HTML page: a run's standing panels beside the doctor's findings",
        description=HELP,
    )
    p.add_argument("run", type=nonempty_path, metavar="RUN", help="the run folder or log file")
    p.add_argument(
        "--out",
        type=nonempty_path,
        default=None,
        metavar="FILE.html",
        help="where to write the page (default: RUN.report.html beside RUN, not inside it)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing FILE.html")
    p.set_defaults(func=cmd_report)

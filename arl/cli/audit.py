"""`arl audit env NAME`: the leak audit of an environment (arl.eval.audit computes; this
module parses and prints). Exit status 0: no answer leaked and no canary was solved; 1: a leak
was found; 2: bad input (an unknown environment)."""

from __future__ import annotations

import argparse
import json

from arl.cli.args import positive_int_max

EXIT_CLEAN, EXIT_LEAK = 0, 1


def _audit_env(args: argparse.Namespace) -> int:
    from arl.eval.audit import audit

    report = audit(args.name, seeds=args.seeds, canary_seeds=args.canary_seeds)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(report)
    return EXIT_LEAK if report["leak_found"] else EXIT_CLEAN


def _row(table, what: str, tally: dict) -> None:
    example = tally["examples"][0] if tally["examples"] else ""
    table.add_row(
        what, str(tally["episodes"]), str(tally["answers"]), str(tally["leaking"]), example
    )


def print_report(report: dict) -> None:
    """Every probe and policy's leaking answers, the canary, and the verdict."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"leak audit of {report['env']} ({report['tasks']} tasks x {report['seeds']} seeds)"
    )
    for col in ("probe", "episodes", "answers", "leaking", "first leak"):
        table.add_column(col)
    for word, tally in report["probes"].items():
        _row(table, f"tool {word}", tally)
    for name, tally in report["policies"].items():
        _row(table, f"policy {name}", tally)
    console.print(table)
    tools = ", ".join(f"{w} ({a})" for w, a in report["tools"].items())
    console.print(f"one-word calls it answers: {tools}")
    c = report["canary"]
    if not c["defined"]:
        console.print("canary: none (the environment has no task only a leak can solve)")
    else:
        for role in ("legitimate", "leak_user"):
            r = c[role]
            console.print(
                f"canary ({c['family']}, {c['tasks']} tasks), {role.replace('_', ' ')} solver "
                f"{r['policy']}: solved {r['solved']} of {r['episodes']}"
            )
    verdict = "LEAK FOUND" if report["leak_found"] else "clean"
    console.print(
        f"{verdict}: {report['leaking_answers']} leaking answers"
        + (f", canary {'open' if c.get('open') else 'closed'}" if c["defined"] else "")
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add `audit env` to the `arl` parser."""
    from arl.env import NAMES

    p = sub.add_parser("audit", help="audits of an environment (leaks of hidden information)")
    ss = p.add_subparsers(dest="audit_command", required=True)
    e = ss.add_parser(
        "env",
        help="try every tool answer for what a policy should not know (the fix, hidden tests) "
        "and play the canary; exit 0 clean, 1 leak found",
    )
    e.add_argument("name", help=f"a registered environment ({', '.join(NAMES)})")
    e.add_argument(
        "--seeds",
        type=positive_int_max(100),
        default=2,
        help="episodes per task and policy (default 2)",
    )
    e.add_argument(
        "--canary-seeds",
        type=positive_int_max(1000),
        default=8,
        help="episodes per canary task and solver (default 8)",
    )
    e.add_argument("--json", action="store_true", help="print the report as one JSON object")
    e.set_defaults(func=_audit_env)

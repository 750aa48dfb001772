"""`arl doctor RUN`: read a run's metrics (arl, TRL or verl) and print one line per finding:
the symptom with its numbers, the Appendix B problem, the likely causes in order and the
check that tells them apart; then the rules the log could not support and what to log.
arl.doctor computes; this module parses and prints."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from arl.cli.args import nonempty


def finding_line(f) -> str:
    """One finding on one line."""
    if f.problem == 0:
        return f"{f.rule}: {f.symptom}"  # healthy, or unjudged (too little logged)
    causes = "; ".join(f"({i}) {c}" for i, c in enumerate(f.causes, start=1))
    return f"Problem {f.problem} [{f.rule}]: {f.symptom}. Likely causes: {causes}. Check: {f.check}"


def gap_line(g) -> str:
    """One rule the log could not support, on one line."""
    lacks = ", ".join(g.missing)
    what = "checked by inference only" if g.partial else "could not check"
    return f"{what} [{g.rule}] (Problem {g.problem}), lacks {lacks}: {g.hint}"


def _doctor(args: argparse.Namespace) -> int:
    from arl.cli.output import print_json
    from arl.doctor import diagnose, load_run, unchecked

    run = load_run(args.run)
    findings, gaps = diagnose(run), unchecked(run)
    steps = sorted({s for p in run.series.values() for s, _ in p})
    if args.json:
        print_json(
            {
                "path": run.path,
                "source": run.source,
                "recipe": run.recipe,
                "steps": len(steps),
                "metrics": sorted(run.series),
                "unmapped": list(run.unmapped),
                "findings": [asdict(f) for f in findings],
                "could_not_check": [asdict(g) for g in gaps],
            }
        )
        return 0
    span = f"steps {steps[0]}-{steps[-1]}" if steps else "no steps"
    print(
        f"{run.path}: {run.source} {run.recipe} run, {span}, {len(run.series)} metrics in arl's "
        f"names" + (f", {len(run.unmapped)} without one" if run.unmapped else "")
    )
    for f in findings:
        print(finding_line(f))
    for g in gaps:
        print(gap_line(g))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `doctor` to the `arl` parser."""
    p = sub.add_parser(
        "doctor",
        help="diagnose a run from its metrics (arl, TRL or verl): Appendix B's problems",
        description=__doc__,
    )
    p.add_argument(
        "run",
        type=nonempty,
        help="a run folder or log: arl's (metrics.jsonl), TRL's (trainer_state.json or its "
        "output_dir) or verl's file-logger JSONL",
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.set_defaults(func=_doctor)

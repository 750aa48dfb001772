"""`arl lock`: the locked rules of the reproductions, checked, locked or relocked with a reason.

arl lock                                    every experiment's rule: locked, changed, unlocked
arl lock problem 6 --reason "why"           lock (or relock) one experiment's rule
arl lock all --reason "why"                 every experiment whose rule is not as locked
"""

from __future__ import annotations

import argparse

from arl.errors import ArlError


def _names(tokens: list[str]) -> list[str]:
    """Experiment names from KIND [N|all] tokens: ch15, problem N, exercise N, all."""
    from arl.experiments import rulebook

    every = rulebook.names()
    if not tokens:
        return every
    if tokens == ["all"]:
        return every
    if tokens == ["ch15"]:
        return ["ch15"]
    if len(tokens) == 2 and tokens[0] in ("problem", "exercise"):
        kind, n = tokens
        if n == "all":
            return [x for x in every if x.startswith(kind + " ")]
        name = f"{kind} {n}"
        if name not in every:
            have = ", ".join(x.split()[1] for x in every if x.startswith(kind + " "))
            raise ArlError(f"{name}: no such experiment (a {kind} is one of {have})")
        return [name]
    raise ArlError(f"{' '.join(tokens)}: name ch15, problem N, exercise N, KIND all, or all")


def cmd_lock(args: argparse.Namespace) -> int:
    from arl.experiments import locks, rulebook

    names = _names(args.experiment)
    if args.reason is None:
        table = locks.load()
        for name in names:
            state, diffs = rulebook.status(name, table)
            when = (
                f" {table[name]['fingerprint']} on {table[name]['locked']}" if name in table else ""
            )
            extra = f": {'; '.join(diffs)}" if diffs else ""
            print(f"{name}: {state}{when}{extra}")
        return 0
    for name, what in rulebook.relock(names, args.reason):
        print(f"{name}: {what}")
    print(f"wrote {locks.lock_path()}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `lock` to the `arl` parser."""
    p = sub.add_parser(
        "lock",
        help="the reproductions' locked rules: check them, or lock a rule with a reason",
        description="Every claim's rule (text, source, effect, threshold, premise, settings, "
        "tuning seeds, judged seeds) is locked before its judged seeds run; judging refuses a "
        "rule that differs from its lock. Without --reason: each experiment's state (locked, "
        "changed with what differs, unlocked). With --reason: lock or relock the named "
        "experiments, keeping the earlier lock and its reason in the history.",
    )
    p.add_argument(
        "experiment",
        nargs="*",
        metavar="NAME",
        help="ch15, problem N, exercise N, problem all, exercise all, or all (default: all)",
    )
    p.add_argument("--reason", default=None, help="why the rule is locked or changed")
    p.set_defaults(func=cmd_lock)

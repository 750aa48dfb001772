"""The catalogue of locked rules: every experiment's name and its rule record today, so that
`arl lock` and the tests can check, lock or relock them (arl.experiments.locks keeps the file).

It sits above the experiments it lists; the experiments themselves build their own records
(problems.common.rule_record, ch15_seeds.rule_record) and call locks.require before they run.
"""

from __future__ import annotations

from arl.errors import ArlError
from arl.experiments import ch15_seeds, locks, problems
from arl.experiments.problems.common import rule_record


def names() -> list[str]:
    """Every experiment with a rule: ch15, then the problems and the exercises."""
    return ["ch15"] + [
        f"{kind} {n}" for kind in ("problem", "exercise") for n in problems.registry(kind).entries
    ]


def record(name: str) -> dict:
    """The rule record of one experiment ("ch15", "problem N", "exercise N"), as JSON data."""
    if name == "ch15":
        return ch15_seeds.rule_record()
    kind, _, number = name.partition(" ")
    if kind not in problems.KINDS or not number.isdigit():
        raise ArlError(f"unknown experiment {name!r} (ch15, problem N or exercise N)")
    return rule_record(name, problems.get(int(number), kind))


def status(name: str, table: dict | None = None) -> tuple[str, list[str]]:
    """("locked", []), ("changed", differences) or ("unlocked", []) for one experiment."""
    return locks.status(name, record(name), table)


def require(name: str) -> dict:
    """The lock of an experiment whose rule is as locked (else one ArlError line)."""
    return locks.require(name, record(name))


def relock(names_: list[str], reason: str, today: str | None = None) -> list[tuple[str, str]]:
    """Lock or relock the named experiments with `reason` (see locks.relock)."""
    return locks.relock({n: record(n) for n in names_}, reason, today)

"""The doctor's two types: a run's metrics in arl's names, and one finding about them.

Readers (arl, TRL, verl) produce a `Run`; rules read a `Run` and return `Finding`s; the
report draws a `Run`'s panels with each panel's findings beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    """One run's logged scalars, renamed to arl's metric names."""

    path: str  # the folder or file it was read from
    source: str  # "arl", "trl" or "verl"
    recipe: str  # "pg", "sft", "rft", "dpo", "distill", or "unknown"
    series: dict[str, tuple[tuple[int, float], ...]]  # arl name -> ((step, value), ...)
    config: dict = field(default_factory=dict)  # the run's config as logged, if any
    unmapped: tuple[str, ...] = ()  # the source's metric names arl has no name for


@dataclass(frozen=True)
class Finding:
    """One diagnosis: the symptom with its numbers, the book's problem, causes and the check."""

    rule: str  # short id, e.g. "entropy-collapse"
    problem: int  # Appendix B problem number (0: healthy / no problem)
    symptom: str  # one line with the numbers, e.g. "entropy fell 80% in 50 steps while ..."
    causes: tuple[str, ...]  # likely causes, most likely first
    check: str  # the measurement that tells the causes apart
    metrics: tuple[str, ...]  # arl metric names the finding reads (the report's panels)


@dataclass(frozen=True)
class Gap:
    """A rule the doctor could not run on this log: what it lacks and what to log to enable it."""

    rule: str  # the rule's id, as in Finding.rule
    problem: int  # its Appendix B problem
    missing: tuple[str, ...]  # arl metric names absent from the log (or "steps" when too short)
    hint: str  # what to log, in the source's own terms, to enable the rule
    partial: bool = False  # True: the rule ran, by inference, without this sharper metric

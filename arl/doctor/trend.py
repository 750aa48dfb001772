"""What the rules read off a series: its finite points, the mean of its first and last
quarter, and changes between them (pure functions of a `Run`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from arl.doctor.types import Run

MIN_POINTS = 4  # a trend needs a head and a tail window that do not overlap: 4 steps at least
MIN_EVALS = 2  # an evaluation series (eval/...) is logged every N steps: first and last suffice
WINDOW = 0.25  # the head and the tail: the first and the last quarter of the logged steps
TINY = 1e-12  # the divisor's floor when a ratio's start is zero
# a 99th percentile of |log rho| under 0.1 nats (a ratio within 1.1 of 1) is harmless even if
# it grows; the cap of the truncated weight (C = 2) only bites past log 2 = 0.69
KL_TAIL_FLOOR = 0.1

Points = Sequence[tuple[int, float]]  # ((step, value), ...) sorted by step


def finite(points: Points) -> list[tuple[int, float]]:
    """The points whose value is a finite number."""
    return [(s, v) for s, v in points if math.isfinite(v)]


def needed(name: str) -> int:
    """How many finite points a rule needs of `name` to read a trend."""
    return MIN_EVALS if name.startswith("eval/") else MIN_POINTS


def pts(run: Run, name: str, after: int | None = None) -> list[tuple[int, float]]:
    """`name`'s finite points (those after step `after` only, when given)."""
    out = finite(run.series.get(name, ()))
    return [(s, v) for s, v in out if after is None or s > after]


def present(run: Run, name: str) -> bool:
    """`name` (or, ending in "/", a family of names) has enough finite points for a trend."""
    if name.endswith("/"):
        return any(present(run, k) for k in run.series if k.startswith(name))
    return len(pts(run, name)) >= needed(name)


def first_of(run: Run, names: Sequence[str]) -> str | None:
    """The first of `names` the run logs with enough points (None: none of them)."""
    return next((n for n in names if present(run, n)), None)


def head_tail(points: Points) -> tuple[float, float]:
    """Means of the first and the last quarter of the points (at least one each)."""
    k = max(1, math.ceil(len(points) * WINDOW))
    head = [v for _, v in points[:k]]
    tail = [v for _, v in points[-k:]]
    return sum(head) / len(head), sum(tail) / len(tail)


def ratio(end: float, start: float) -> float:
    """end / start, with start floored at TINY (a growth from zero is large, not infinite)."""
    return end / max(abs(start), TINY)


def span(points: Points) -> str:
    """The text "steps A-B" of the points."""
    return f"steps {points[0][0]}-{points[-1][0]}"


def late(points: Points) -> list[tuple[int, float]]:
    """The second half of the points (a plateau is read there)."""
    return list(points[len(points) // 2 :])


def cfg(run: Run, key: str, default=None):
    """A config value (env.NAME reads config["env"]["NAME"]), or `default`."""
    node = run.config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def knobs(run: Run, *keys: str) -> str:
    """The text " (k=v, ...)" for the config values the run logged among `keys`, else ""."""
    said = [f"{k}={v}" for k in keys if (v := cfg(run, k)) is not None]
    return f" ({', '.join(said)})" if said else ""


def staleness(run: Run) -> int | None:
    """How many steps old the rollouts' weights are (None: the log does not say)."""
    k = cfg(run, "staleness")
    if isinstance(k, bool) or not isinstance(k, int):
        return None
    return k

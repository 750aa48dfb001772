"""One way to check a number: finite, of the right kind, in range, or an ArlError naming it.

Configs, calculators and CLI flags all call `check`, so every bad value reads the same:
`lr: must be a finite number > 0, got inf`.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from arl.errors import ArlError

SEED_MAX = 2**32 - 1  # a seed from the user: numpy, torch and random all accept 0..2^32-1
DERIVED_SEED_MAX = 2**48  # room for the seeds derived from it (seed * 100 + round, ...)


def describe(lo: float | None, hi: float | None, open_lo: bool, open_hi: bool) -> str:
    """The range in words: '> 0', '<= 1', 'in [0, 1)'."""
    if lo is not None and hi is not None:
        return f"in {'(' if open_lo else '['}{lo:g}, {hi:g}{')' if open_hi else ']'}"
    if lo is not None:
        return f"{'>' if open_lo else '>='} {lo:g}"
    if hi is not None:
        return f"{'<' if open_hi else '<='} {hi:g}"
    return ""


def check(
    name: str,
    value,
    lo: float | None = None,
    hi: float | None = None,
    *,
    open_lo: bool = False,
    open_hi: bool = False,
    integer: bool = False,
):
    """Return `value` if it is a finite number (an integer if asked) in the range; else raise.

    NaN and infinities always fail, so `lr=inf` or `p=nan` never reach the arithmetic.
    """
    kind = "an integer" if integer else "a finite number"
    what = f"{kind} {describe(lo, hi, open_lo, open_hi)}".rstrip()
    ok_type = isinstance(value, Integral) if integer else isinstance(value, Real)
    if isinstance(value, bool) or not ok_type:
        raise ArlError(f"{name}: must be {what}, got {value!r}")
    v = float(value) if not integer else value
    bad = (
        (not integer and not math.isfinite(v))
        or (lo is not None and (v <= lo if open_lo else v < lo))
        or (hi is not None and (v >= hi if open_hi else v > hi))
    )
    if bad:
        raise ArlError(f"{name}: must be {what}, got {value!r}")
    return value


def check_seed(name: str, value, hi: int = SEED_MAX) -> int:
    """A seed: an integer in [0, 2^32 - 1] (2^63 overflows torch's seeder, -1 numpy's)."""
    return check(name, value, 0, hi, integer=True)

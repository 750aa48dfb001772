"""Argument types shared by the subcommands: bad values become one-line usage errors."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _checked(text: str, convert: Callable[[str], float], ok: Callable[[float], bool], what: str):
    """Convert `text` and check it; either failure is one line naming what was expected."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _checked(text, int, lambda v: v >= 1, "a positive integer")


def unit_float(text: str) -> float:
    return _checked(text, float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")


def nonneg_float(text: str) -> float:
    return _checked(text, float, lambda v: v >= 0.0, "a number >= 0")

"""`arl train pg`: the policy-gradient trainer (filled in by the trainer issue)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train` to the `arl` parser."""

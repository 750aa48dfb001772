"""Subcommands `arl stats`, `arl calc`, `arl sim` (filled in by the statistics issue)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to the `arl` parser."""

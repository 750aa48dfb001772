"""How `arl stats`, `arl calc` and `arl sim` print a result: rich tables, or one JSON object."""

from __future__ import annotations

import math

import numpy as np

from arl.runio import dumps_finite, plain


def fmt(v) -> str:
    """Short human form of a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    if not math.isfinite(v):
        return "n/a"
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.3e}"
    if float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.4g}"


def print_json(obj) -> None:
    """One indented JSON object on stdout (numpy made plain, NaN and inf as null)."""
    print(dumps_finite(plain(obj), indent=2))


def emit(obj: dict, as_json: bool) -> None:
    """Print a result: one JSON object, or rich tables (the `inputs` line, a `table` list, then
    `results` with their `notes`, then `comments`)."""
    if as_json:
        print_json(obj)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if obj.get("inputs"):
        shown = (
            f"{k}={fmt(v) if not isinstance(v, list) else ' '.join(fmt(x) for x in v)}"
            for k, v in obj["inputs"].items()
        )
        console.print(f"[bold]{obj.get('title', '')}[/bold]  " + ", ".join(shown))
    rows = obj.get("table")
    if rows:
        t = Table(title=obj.get("table_title"))
        for col, v in rows[0].items():
            numeric = isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
            t.add_column(col, justify="right" if numeric else "left")
        for r in rows:
            t.add_row(*(fmt(v) for v in r.values()))
        console.print(t)
    results = obj.get("results")
    if results:
        t = Table(title=obj.get("results_title"))
        t.add_column("quantity")
        t.add_column("value", justify="right")
        notes = obj.get("notes", {})
        if notes:
            t.add_column("note")
        for k, v in results.items():
            t.add_row(k, fmt(v), *([notes.get(k, "")] if notes else []))
        console.print(t)
    for line in obj.get("comments", []):
        console.print(line)

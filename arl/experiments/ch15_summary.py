"""Chapter 15's table over seeds, and its Markdown: each claim's numbers as mean +- standard
error over seeds and its rule's verdict as k of N seeds (from ch15_table's per-seed rows),
then table.md's two tables (the claims, and what each recipe consumed)."""

from __future__ import annotations

import math

import numpy as np

from arl.eval.stats import seed_se
from arl.experiments.ch15_book import SOURCES
from arl.experiments.ch15_table import Row

REPRODUCED_SHARE = 0.8  # a row reproduces when its rule holds on at least this share of seeds


def aggregate(per_seed: list[list[Row]]) -> list[dict]:
    """One row per claim: each number's mean and standard error over seeds (None with one
    seed: the table prints no spread), and k of N."""
    table = []
    for same in zip(*per_seed, strict=True):
        first, n = same[0], len(same)
        vals = {k: np.array([r.measured[k] for r in same], dtype=float) for k in first.measured}
        mean = {k: float(v.mean()) for k, v in vals.items()}
        k = sum(r.reproduced for r in same)
        table.append(
            {
                "key": first.key,
                "source": SOURCES[first.key][0],
                "quantity": first.quantity,
                "book": first.book,
                "measured": first.fmt.format(**mean),
                "mean": mean,
                "se": {k: seed_se(v) if n > 1 else None for k, v in vals.items()},
                "per_seed": {key: v.tolist() for key, v in vals.items()},
                "seeds_holding": k,
                "seeds": n,
                "reproduced": k >= math.ceil(REPRODUCED_SHARE * n),
                "rule": first.rule,
            }
        )
    return table


def with_se(row: dict) -> str:
    """The measured cell: means, then every number's mean +- SE when there are several seeds."""
    if row["seeds"] < 2:
        return row["measured"]
    spread = ", ".join(f"{k} {row['mean'][k]:.2f} +- {row['se'][k]:.2f}" for k in row["mean"])
    return f"{row['measured']} [{spread}]"


QUICK_NOTE = (
    "**Quick settings: far too few steps and samples to reproduce anything; the verdicts "
    "below only show that every section runs.**"
)
COLUMNS = (
    "source",
    "quantity",
    "book",
    "measured (mean [mean +- SE over seeds])",
    "reproduced (seeds)",
    "rule",
)
COSTS = ("demonstrations", "sampled_episodes", "verifier_calls")  # what a recipe consumed


def _markdown_row(cells) -> str:
    """One Markdown table row of the cells' texts."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def count_line(table: list[dict]) -> str:
    """Book rows and lab rows counted apart: how many reproduce."""
    parts = []
    for source, word in (("book", "book claims"), ("lab", "lab hypotheses")):
        rows = [r for r in table if r["source"] == source]
        parts.append(f"{word}: {sum(r['reproduced'] for r in rows)} of {len(rows)} reproduce")
    return "; ".join(parts) + "."


def markdown(table: list[dict], quick: bool = False) -> str:
    """The table as Markdown, after the book and lab counts; quick runs say that their
    verdicts mean nothing."""
    lines = [QUICK_NOTE, ""] if quick else []
    lines += [count_line(table), ""]
    lines += [_markdown_row(COLUMNS), _markdown_row(["---"] * len(COLUMNS))]
    for row in table:
        k, n = row["seeds_holding"], row["seeds"]
        verdict = f"{'yes' if row['reproduced'] else 'no'} ({k}/{n})"
        cells = (row["source"], row["quantity"], row["book"], with_se(row), verdict, row["rule"])
        lines.append(_markdown_row(cells))
    return "\n".join(lines) + "\n"


def cost_table(cost: dict) -> str:
    """What each recipe consumed (Section 15.5), as Markdown; evaluation episodes not counted."""
    head = ("recipe", *(name.replace("_", " ") for name in COSTS))
    lines = [_markdown_row(head), _markdown_row(["---"] * len(head))]
    lines += [_markdown_row((recipe, *(c[k] for k in COSTS))) for recipe, c in cost.items()]
    return "\n".join(lines) + "\n"

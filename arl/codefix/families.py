"""CodeFix's data: seven bug families, the functions they are injected into, and decoys.

The five families of the BugFix gym, on the same functions (arl.envkit.families), and two that
no op of its menu can fix (the menu's coverage limit, Problem 14):

| family | correct        | buggy              | cue in the function |
|--------|----------------|--------------------|---------------------|
| arith  | `total += x`   | `total -= x`       | `-=`                |
| slice  | `xs[:t]`       | `xs[:t + 1]`       | `+ 1`               |

Each task is a module: the function to fix between helper functions (decoys). Every module
holds a decoy with its own family's cue (`= None`, `- 1`, `//`, `max(`, ...), so the one-token
edit a policy could guess without reading (`//` -> `/`) matches twice and does not apply: the
replace must quote the function's own line, with the names this episode gave it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from arl.envkit.families import NAME_NOUNS, NAME_VERBS, SPLITS, TEMPLATES, Template
from arl.envkit.families import inject_bug as inject_menu_bug

FAMILIES: tuple[str, ...] = ("init", "range", "compare", "minmax", "div", "arith", "slice")
MENU_FAMILIES: tuple[str, ...] = FAMILIES[:5]  # what the BugFix menu has an op for
NEW_FAMILIES: tuple[str, ...] = FAMILIES[5:]  # what only a free-form edit fixes
# Function names: VERB_NOUN from the gym's inventories and one more of each (42 tasks).
VERBS: tuple[str, ...] = NAME_VERBS + ("prepare",)
NOUNS: tuple[str, ...] = NAME_NOUNS + ("records",)
# The list argument's name, drawn per episode (as the accumulator's is): a replace that quotes
# a line must copy it from the listing.
LIST_NAMES: tuple[str, ...] = ("xs", "seq", "arr", "nums")


def inject_bug(family: str, source: str) -> str:
    """A correct function's buggy version (the inverse of the fix)."""
    if family == "arith":
        return source.replace(" += ", " -= ", 1)
    if family == "slice":
        for good, bad in ((":t]", ":t + 1]"), ("[t:", "[t + 1:")):
            if good in source:
                return source.replace(good, bad, 1)
        return source
    return inject_menu_bug(family, source)


def _t(family: str, split: str, kinds: tuple[str, ...], listing: str) -> Template:
    return Template(family, split, kinds, listing)


# A table of listings, kept as the formatter would not lay it out: one template a paragraph,
# each listing as the code it is.
# fmt: off
NEW_TEMPLATES: tuple[Template, ...] = (
    # --- arith: the accumulator is decreased where it should grow ---
    _t("arith", "train", ("xs",), """
        def sum_cubes(xs):
            total = 0
            for x in xs:
                total += x * x * x
            return total
    """),
    _t("arith", "train", ("xs", "t"), """
        def sum_scaled(xs, t):
            total = 0
            for x in xs:
                total += x * t
            return total
    """),
    _t("arith", "train", ("xs", "t+"), """
        def count_multiples(xs, t):
            count = 0
            for x in xs:
                if x % t == 0:
                    count += 1
            return count
    """),
    _t("arith", "train", ("xs",), """
        def sum_plus_index(xs):
            total = 0
            for i in range(len(xs)):
                total += xs[i] + i
            return total
    """),
    _t("arith", "heldout", ("xs",), """
        def sum_triples(xs):
            acc = 0
            for x in xs:
                acc += 3 * x
            return acc
    """),
    _t("arith", "heldout", ("xs", "t"), """
        def count_equal(xs, t):
            count = 0
            for x in xs:
                if x == t:
                    count += 1
            return count
    """),
    # --- slice: the slice takes one element too many (or skips one too many) ---
    _t("slice", "train", ("xs", "t+"), """
        def sum_first(xs, t):
            total = 0
            for x in xs[:t]:
                total += x
            return total
    """),
    _t("slice", "train", ("xs", "t+"), """
        def take_first(xs, t):
            out = []
            for x in xs[:t]:
                out.append(x)
            return out
    """),
    _t("slice", "train", ("xs", "t+"), """
        def drop_first(xs, t):
            out = []
            for x in xs[t:]:
                out.append(x)
            return out
    """),
    _t("slice", "train", ("xs", "t+"), """
        def sum_rest(xs, t):
            total = 0
            for x in xs[t:]:
                total += x
            return total
    """),
    _t("slice", "heldout", ("xs", "t+"), """
        def double_first(xs, t):
            out = []
            for x in xs[:t]:
                out.append(2 * x)
            return out
    """),
    _t("slice", "heldout", ("xs", "t+"), """
        def square_rest(xs, t):
            out = []
            for x in xs[t:]:
                out.append(x * x)
            return out
    """),
)
# fmt: on
TEMPLATES_ALL: tuple[Template, ...] = TEMPLATES + NEW_TEMPLATES

# Decoys: correct helpers, never tested. DECOYS[family] holds that family's cue in a line of
# the same shape as the bug's (a one-word replace of the cue matches twice).
DECOYS: dict[str, str] = {
    "init": """
        def reset_state(xs):
            found = None
            for x in xs:
                found = x
            return found
    """,
    "range": """
        def last_index(xs):
            return len(xs) - 1
    """,
    "compare": """
        def clamp_range(x, lo, hi):
            if x < lo:
                return lo
            if x > hi:
                return hi
            return x
    """,
    "minmax": """
        def pick_bounds(a, b):
            return min(a, b), max(a, b)
    """,
    "div": """
        def halve_count(n):
            return n // 2
    """,
    "arith": """
        def take_away(total, x):
            total -= x
            return total
    """,
    "slice": """
        def head_of(xs, t):
            return xs[:t + 1]
    """,
}


def decoy(family: str) -> str:
    """A decoy's listing, dedented."""
    return textwrap.dedent(DECOYS[family]).strip("\n") + "\n"


@dataclass(frozen=True)
class Layout:
    """Which decoys a task's module holds, and where the function to fix sits among them."""

    decoys: tuple[str, str]  # its own family's, and one other family's
    position: int  # 0, 1 or 2: the function's place among the three


def layout(index: int, family: str) -> Layout:
    """A fixed layout for the index-th task: the other decoy and the position vary by task, so
    neither names the family nor marks the function."""
    others = [f for f in FAMILIES if f != family]
    other = others[(index * 5 + 3) % len(others)]
    first = (family, other) if index % 2 == 0 else (other, family)
    return Layout(first, (index * 7) % 3)


__all__ = ["FAMILIES", "SPLITS", "TEMPLATES_ALL", "Template"]

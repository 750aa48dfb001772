"""The five bug families and the functions they are injected into: the gym's data.

Each family has one textual bug pattern and one fixing edit op. The bug's cue is
visible only in the source listing (a read observation), never in the issue, and each
family's cue is exclusive to it:

| family    | correct           | buggy                  | cue in listing | fixing op          |
|-----------|-------------------|------------------------|----------------|--------------------|
| init      | `acc = 0`         | `acc = None`           | `None`         | `edit init <acc>`  |
| range     | `range(len(xs))`  | `range(len(xs) - 1)`   | `-`            | `edit range`       |
| compare   | `x <= t`          | `x < t`                | `<` or `>`     | `edit compare`     |
| minmax    | `max(...)`        | `min(...)` (or back)   | `min` / `max`  | `edit minmax`      |
| div       | `a / b`           | `a // b`               | `//`           | `edit div`         |

`init` needs the accumulator's name as an argument, which only a read shows, so
play that never reads cannot fix it. Four training functions and two held-out
functions per family, written below as correct listings; `inject_bug` makes them buggy.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from arl.errors import ArlError

FAMILIES: tuple[str, ...] = ("init", "range", "compare", "minmax", "div")
SPLITS: tuple[str, ...] = ("train", "heldout")
# Function names are VERB_NOUN; both inventories are shared by every family.
NAME_VERBS: tuple[str, ...] = ("compute", "process", "update", "apply", "build", "handle")
NAME_NOUNS: tuple[str, ...] = ("values", "items", "data", "numbers", "entries")
# What a numeric accumulator (`total = 0`) is called in one episode.
ACCUMULATORS: tuple[str, ...] = ("total", "count", "acc", "result", "tally", "score")


@dataclass(frozen=True)
class Template:
    """One function of a family: its split, its argument kinds and its correct listing.

    Argument kinds: "xs" a list of ints, "xs+" a non-empty list, "t" an int threshold,
    "t+" a positive int.
    """

    family: str
    split: str
    kinds: tuple[str, ...]
    listing: str

    @property
    def about(self) -> str:
        """What the function does, as its listing names it (e.g. "sum_list")."""
        return self.source.split("(", 1)[0].removeprefix("def ")

    @property
    def source(self) -> str:
        """The correct listing, dedented, under its descriptive name."""
        return textwrap.dedent(self.listing).lstrip("\n")


def inject_bug(family: str, source: str) -> str:
    """Turn a correct source into its family's buggy version (the inverse of the fixing op)."""
    if family == "init":  # the accumulator is never set to a number
        return source.replace(" = 0\n", " = None\n", 1)
    if family == "range":
        return source.replace("range(len(xs))", "range(len(xs) - 1)", 1)
    if family == "compare":
        return source.replace("<=", "<", 1) if "<=" in source else source.replace(">=", ">", 1)
    if family == "minmax":
        return (
            source.replace("max(", "min(", 1)
            if "max(" in source
            else source.replace("min(", "max(", 1)
        )
    if family == "div":
        return source.replace(" / ", " // ", 1)
    raise ArlError(f"unknown family {family!r}")


# The order fixes the name draw (`naming.assign_names`) and, train first, the task order.
# A table of listings, kept as the formatter would not lay it out: one template a paragraph,
# each listing as the code it is.
# fmt: off
TEMPLATES: tuple[Template, ...] = (
    # --- init: the accumulator starts at None instead of 0 ---
    Template("init", "train", ("xs",), """
        def sum_list(xs):
            total = 0
            for x in xs:
                total += x
            return total
    """),
    Template("init", "train", ("xs",), """
        def count_even(xs):
            count = 0
            for x in xs:
                if x % 2 == 0:
                    count += 1
            return count
    """),
    Template("init", "train", ("xs",), """
        def sum_squares(xs):
            acc = 0
            for x in xs:
                acc += x * x
            return acc
    """),
    Template("init", "train", ("xs",), """
        def count_nonzero(xs):
            count = 0
            for x in xs:
                if x != 0:
                    count += 1
            return count
    """),
    Template("init", "heldout", ("xs",), """
        def sum_doubled(xs):
            acc = 0
            for x in xs:
                acc += 2 * x
            return acc
    """),
    Template("init", "heldout", ("xs",), """
        def count_odd(xs):
            total = 0
            for x in xs:
                if x % 2 != 0:
                    total += 1
            return total
    """),
    # --- range: the loop stops one element early ---
    Template("range", "train", ("xs",), """
        def weighted_sum(xs):
            total = 0
            for i in range(len(xs)):
                total += i * xs[i]
            return total
    """),
    Template("range", "train", ("xs",), """
        def copy_list(xs):
            out = []
            for i in range(len(xs)):
                out.append(xs[i])
            return out
    """),
    Template("range", "train", ("xs",), """
        def sum_even_index(xs):
            total = 0
            for i in range(len(xs)):
                if i % 2 == 0:
                    total += xs[i]
            return total
    """),
    Template("range", "train", ("xs",), """
        def square_all(xs):
            out = []
            for i in range(len(xs)):
                out.append(xs[i] * xs[i])
            return out
    """),
    Template("range", "heldout", ("xs",), """
        def index_weighted(xs):
            total = 0
            for i in range(len(xs)):
                total += 2 * i * xs[i]
            return total
    """),
    Template("range", "heldout", ("xs",), """
        def double_all(xs):
            out = []
            for i in range(len(xs)):
                out.append(2 * xs[i])
            return out
    """),
    # --- compare: a strict comparison where the bound is inclusive ---
    Template("compare", "train", ("xs", "t"), """
        def count_at_most(xs, t):
            count = 0
            for x in xs:
                if x <= t:
                    count += 1
            return count
    """),
    Template("compare", "train", ("xs", "t"), """
        def count_at_least(xs, t):
            count = 0
            for x in xs:
                if x >= t:
                    count += 1
            return count
    """),
    Template("compare", "train", ("xs", "t"), """
        def filter_at_most(xs, t):
            out = []
            for x in xs:
                if x <= t:
                    out.append(x)
            return out
    """),
    Template("compare", "train", ("xs", "t"), """
        def sum_at_least(xs, t):
            total = 0
            for x in xs:
                if x >= t:
                    total += x
            return total
    """),
    Template("compare", "heldout", ("xs", "t"), """
        def keep_at_least(xs, t):
            out = []
            for x in xs:
                if x >= t:
                    out.append(x)
            return out
    """),
    Template("compare", "heldout", ("xs", "t"), """
        def sum_at_most(xs, t):
            total = 0
            for x in xs:
                if x <= t:
                    total += x
            return total
    """),
    # --- minmax: min where max is meant, or the reverse ---
    Template("minmax", "train", ("xs+",), """
        def largest(xs):
            best = xs[0]
            for x in xs:
                best = max(best, x)
            return best
    """),
    Template("minmax", "train", ("xs+",), """
        def smallest(xs):
            best = xs[0]
            for x in xs:
                best = min(best, x)
            return best
    """),
    Template("minmax", "train", ("xs", "t"), """
        def cap_values(xs, t):
            out = []
            for x in xs:
                out.append(min(x, t))
            return out
    """),
    Template("minmax", "train", ("xs", "t"), """
        def floor_values(xs, t):
            out = []
            for x in xs:
                out.append(max(x, t))
            return out
    """),
    Template("minmax", "heldout", ("xs+",), """
        def largest_square(xs):
            best = xs[0] * xs[0]
            for x in xs:
                best = max(best, x * x)
            return best
    """),
    Template("minmax", "heldout", ("xs", "t"), """
        def cap_doubled(xs, t):
            out = []
            for x in xs:
                out.append(min(2 * x, t))
            return out
    """),
    # --- div: floor division where true division is meant ---
    Template("div", "train", ("xs+",), """
        def mean(xs):
            total = 0
            for x in xs:
                total += x
            return total / len(xs)
    """),
    Template("div", "train", ("xs",), """
        def halve_all(xs):
            out = []
            for x in xs:
                out.append(x / 2)
            return out
    """),
    Template("div", "train", ("xs", "t+"), """
        def scale_down(xs, t):
            out = []
            for x in xs:
                out.append(x / t)
            return out
    """),
    Template("div", "train", ("xs",), """
        def half_sum(xs):
            total = 0
            for x in xs:
                total += x
            return total / 2
    """),
    Template("div", "heldout", ("xs+",), """
        def twice_mean(xs):
            total = 0
            for x in xs:
                total += x
            return 2 * total / len(xs)
    """),
    Template("div", "heldout", ("xs", "t+"), """
        def scale_doubled(xs, t):
            out = []
            for x in xs:
                out.append(2 * x / t)
            return out
    """),
)
# fmt: on

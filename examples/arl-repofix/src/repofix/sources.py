"""The three repositories RepoFix's tasks are cut from, as their authors wrote them (correct),
and the bugs put into them: (function, family) -> (the correct line, the buggy line).

Each repository is a package of four modules; tests/test_public.py is written per task
(repofix.repos). A function a bug is put in holds no cue of any family but its bug, so a reader
who finds the function can tell its bug from its lines; each repository's checks.py holds
correct code with every family's cue (a strict comparison, `min`, `= 1`, `-=`, `range(... -
1)`, `or`), so that grepping for a cue, without finding the function, hits a decoy first. Imports
nothing of arl.
"""

from __future__ import annotations

INVENTORY = {
    "inventory/__init__.py": """\
NAME = 'inventory'
""",
    "inventory/items.py": """\
def unit_price(item):
    return item['price']


def total_value(items):
    total = 0
    for item in items:
        total += item['price'] * item['qty']
    return total


def heaviest(items):
    best = 0
    for item in items:
        best = max(best, item['weight'])
    return best


def names_in_stock(items):
    return [item['name'] for item in items if item['qty'] >= 1]
""",
    "inventory/stock.py": """\
def restock(levels, amount):
    out = []
    for level in levels:
        out.append(level + amount)
    return out


def low_stock(levels, limit):
    return [k for k in range(len(levels)) if levels[k] <= limit]


def count_between(levels, lo, hi):
    count = 0
    for level in levels:
        if level >= lo and level <= hi:
            count += 1
    return count


def shortfall(levels, target):
    missing = 0
    for level in levels:
        missing += max(target - level, 0)
    return missing
""",
    "inventory/report.py": """\
from inventory.items import total_value
from inventory.stock import low_stock


def summary(items):
    return {'value': total_value(items), 'count': len(items)}


def reorder_list(items, limit):
    levels = [item['qty'] for item in items]
    return [items[k]['name'] for k in low_stock(levels, limit)]


def average_price(items):
    total = 0
    for item in items:
        total += item['price']
    return total / len(items)
""",
    "inventory/checks.py": """\
def cheapest(items):
    low = items[0]['price']
    for item in items:
        low = min(low, item['price'])
    return low


def after_sales(levels, sold):
    left = []
    for level in levels:
        level -= sold
        left.append(level)
    return left


def gaps(levels):
    return [levels[k + 1] - levels[k] for k in range(len(levels) - 1)]


def flagged(levels, limit):
    return [k for k in range(len(levels)) if levels[k] < 1 or levels[k] > limit]


def product(levels):
    result = 1
    for level in levels:
        result *= level
    return result
""",
}

TEXTKIT = {
    "textkit/__init__.py": """\
NAME = 'textkit'
""",
    "textkit/counts.py": """\
def count_long(words, n):
    count = 0
    for word in words:
        if len(word) >= n:
            count += 1
    return count


def longest_length(words):
    best = 0
    for word in words:
        best = max(best, len(word))
    return best


def total_letters(words):
    total = 0
    for word in words:
        total += len(word)
    return total
""",
    "textkit/filters.py": """\
def starts_with(words, letter):
    return [w for w in words if w[0] == letter]


def short_words(words, n):
    return [w for w in words if len(w) <= n]


def between(words, lo, hi):
    return [w for w in words if len(w) >= lo and len(w) <= hi]


def first_indexes(words, letter):
    return [k for k in range(len(words)) if words[k][0] == letter]
""",
    "textkit/layout.py": """\
from textkit.counts import longest_length


def pad_all(words):
    width = longest_length(words)
    return [w.ljust(width, '.') for w in words]


def joined_length(words):
    total = 0
    for w in words:
        total += len(w) + 1
    return total


def widest(words):
    return max([len(w) for w in words])
""",
    "textkit/checks.py": """\
def shortest_length(words):
    low = len(words[0])
    for word in words:
        low = min(low, len(word))
    return low


def letters_left(words, budget):
    left = budget
    for word in words:
        left -= len(word)
    return left


def pairs(words):
    return [words[k] + words[k + 1] for k in range(len(words) - 1)]


def odd_ones(words, n):
    return [w for w in words if len(w) < 4 or len(w) > n]


def count_from_one(words):
    count = 1
    for word in words:
        count += 1
    return count
""",
}

STATS = {
    "stats/__init__.py": """\
NAME = 'stats'
""",
    "stats/basic.py": """\
def total(xs):
    acc = 0
    for x in xs:
        acc += x
    return acc


def mean(xs):
    return total(xs) / len(xs)


def peak(xs):
    top = xs[0]
    for x in xs:
        top = max(top, x)
    return top
""",
    "stats/ranges.py": """\
def spread(xs):
    return max(xs) - min(xs)


def count_in(xs, lo, hi):
    n = 0
    for x in xs:
        if x >= lo and x <= hi:
            n += 1
    return n


def running_totals(xs):
    out = []
    acc = 0
    for k in range(len(xs)):
        acc += xs[k]
        out.append(acc)
    return out
""",
    "stats/scores.py": """\
from stats.basic import total


def passed(scores, mark):
    return [s for s in scores if s >= mark]


def sum_squares(xs):
    acc = 0
    for x in xs:
        acc += x * x
    return acc


def best_gain(xs):
    gain = 0
    for k in range(len(xs)):
        gain = max(gain, xs[k] - xs[0])
    return gain


def share_passed(scores, mark):
    return len(passed(scores, mark)) / total([1 for s in scores])
""",
    "stats/checks.py": """\
def lowest(xs):
    low = xs[0]
    for x in xs:
        low = min(low, x)
    return low


def countdown(xs, start):
    left = start
    for x in xs:
        left -= x
    return left


def steps(xs):
    return [xs[k + 1] - xs[k] for k in range(len(xs) - 1)]


def outliers(xs, lo, hi):
    return [x for x in xs if x < lo or x > hi]


def product_of(xs):
    result = 1
    for x in xs:
        result *= x
    return result
""",
}

REPOS = {"inventory": INVENTORY, "textkit": TEXTKIT, "stats": STATS}

# what each function's arguments are drawn as (repofix.repos.draw_args)
SIGNATURES = {
    "unit_price": ("item",), "total_value": ("items",), "heaviest": ("items",),
    "names_in_stock": ("items",), "restock": ("levels", "small"), "low_stock": ("levels", "small"),
    "count_between": ("levels", "lo", "hi"), "shortfall": ("levels", "small"),
    "summary": ("items",), "reorder_list": ("items", "small"), "average_price": ("items",),
    "count_long": ("words", "small"), "longest_length": ("words",), "total_letters": ("words",),
    "starts_with": ("words", "letter"), "short_words": ("words", "small"),
    "between": ("words", "lo", "hi"), "first_indexes": ("words", "letter"), "pad_all": ("words",),
    "joined_length": ("words",), "widest": ("words",), "total": ("levels",), "mean": ("levels",),
    "peak": ("levels",), "spread": ("levels",), "count_in": ("levels", "lo", "hi"),
    "running_totals": ("levels",), "passed": ("levels", "small"), "sum_squares": ("levels",),
    "best_gain": ("levels",), "share_passed": ("levels", "small"),
    # the decoys (checks.py): correct code that holds every family's cue
    "cheapest": ("items",), "after_sales": ("levels", "small"), "gaps": ("levels",),
    "flagged": ("levels", "small"), "product": ("levels",), "shortest_length": ("words",),
    "letters_left": ("words", "small"), "pairs": ("words",), "odd_ones": ("words", "small"),
    "count_from_one": ("words",), "lowest": ("levels",), "countdown": ("levels", "small"),
    "steps": ("levels",), "outliers": ("levels", "lo", "hi"), "product_of": ("levels",),
}  # fmt: skip

# (function, family) -> (the correct line, the buggy line), each stripped of its indentation
BUGS: dict[tuple[str, str], tuple[str, str]] = {
    ("total_value", "init"): ("total = 0", "total = 1"),
    ("total_value", "arith"): (
        "total += item['price'] * item['qty']",
        "total -= item['price'] * item['qty']",
    ),
    ("heaviest", "minmax"): (
        "best = max(best, item['weight'])",
        "best = min(best, item['weight'])",
    ),
    ("names_in_stock", "compare"): (
        "return [item['name'] for item in items if item['qty'] >= 1]",
        "return [item['name'] for item in items if item['qty'] > 1]",
    ),
    ("low_stock", "range"): (
        "return [k for k in range(len(levels)) if levels[k] <= limit]",
        "return [k for k in range(len(levels) - 1) if levels[k] <= limit]",
    ),
    ("low_stock", "compare"): (
        "return [k for k in range(len(levels)) if levels[k] <= limit]",
        "return [k for k in range(len(levels)) if levels[k] < limit]",
    ),
    ("count_between", "andor"): (
        "if level >= lo and level <= hi:",
        "if level >= lo or level <= hi:",
    ),
    ("count_between", "init"): ("count = 0", "count = 1"),
    ("shortfall", "minmax"): (
        "missing += max(target - level, 0)",
        "missing += min(target - level, 0)",
    ),
    ("shortfall", "arith"): (
        "missing += max(target - level, 0)",
        "missing -= max(target - level, 0)",
    ),
    ("average_price", "init"): ("total = 0", "total = 1"),
    ("average_price", "arith"): ("total += item['price']", "total -= item['price']"),
    ("count_long", "compare"): ("if len(word) >= n:", "if len(word) > n:"),
    ("count_long", "init"): ("count = 0", "count = 1"),
    ("longest_length", "minmax"): ("best = max(best, len(word))", "best = min(best, len(word))"),
    ("total_letters", "arith"): ("total += len(word)", "total -= len(word)"),
    ("total_letters", "init"): ("total = 0", "total = 1"),
    ("short_words", "compare"): (
        "return [w for w in words if len(w) <= n]",
        "return [w for w in words if len(w) < n]",
    ),
    ("between", "andor"): (
        "return [w for w in words if len(w) >= lo and len(w) <= hi]",
        "return [w for w in words if len(w) >= lo or len(w) <= hi]",
    ),
    ("between", "compare"): (
        "return [w for w in words if len(w) >= lo and len(w) <= hi]",
        "return [w for w in words if len(w) > lo and len(w) <= hi]",
    ),
    ("first_indexes", "range"): (
        "return [k for k in range(len(words)) if words[k][0] == letter]",
        "return [k for k in range(len(words) - 1) if words[k][0] == letter]",
    ),
    ("joined_length", "arith"): ("total += len(w) + 1", "total -= len(w) + 1"),
    ("widest", "minmax"): (
        "return max([len(w) for w in words])",
        "return min([len(w) for w in words])",
    ),
    ("total", "init"): ("acc = 0", "acc = 1"),
    ("total", "arith"): ("acc += x", "acc -= x"),
    ("peak", "minmax"): ("top = max(top, x)", "top = min(top, x)"),
    ("count_in", "andor"): ("if x >= lo and x <= hi:", "if x >= lo or x <= hi:"),
    ("count_in", "compare"): ("if x >= lo and x <= hi:", "if x >= lo and x < hi:"),
    ("count_in", "init"): ("n = 0", "n = 1"),
    ("running_totals", "range"): ("for k in range(len(xs)):", "for k in range(len(xs) - 1):"),
    ("running_totals", "arith"): ("acc += xs[k]", "acc -= xs[k]"),
    ("passed", "compare"): (
        "return [s for s in scores if s >= mark]",
        "return [s for s in scores if s > mark]",
    ),
    ("sum_squares", "init"): ("acc = 0", "acc = 1"),
    ("sum_squares", "arith"): ("acc += x * x", "acc -= x * x"),
    ("best_gain", "minmax"): (
        "gain = max(gain, xs[k] - xs[0])",
        "gain = min(gain, xs[k] - xs[0])",
    ),
    ("best_gain", "range"): ("for k in range(len(xs)):", "for k in range(len(xs) - 1):"),
}

# (the function the issue names, family) -> the function it calls that holds the bug
# BUGS[(that function, family)]: the bug is one call away, in another function (and file)
CALLED_BUGS: dict[tuple[str, str], str] = {
    ("summary", "arith"): "total_value",  # inventory/report.py -> inventory/items.py
    ("reorder_list", "range"): "low_stock",  # inventory/report.py -> inventory/stock.py
    ("pad_all", "minmax"): "longest_length",  # textkit/layout.py -> textkit/counts.py
    ("mean", "init"): "total",  # stats/basic.py, the same file
}

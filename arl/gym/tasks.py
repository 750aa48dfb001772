"""BugFix tasks: small Python functions, each with one injected bug from a family.

Five families, each with one textual bug pattern and one fixing edit op. The bug's
cue is visible only in the source listing (a read observation), never in the
issue, and each family's cue is exclusive to it:

| family    | correct           | buggy                  | cue in listing | fixing op          |
|-----------|-------------------|------------------------|----------------|--------------------|
| init      | `acc = 0`         | `acc = 1`              | `= 1`          | `edit init <acc>`  |
| range     | `range(len(xs))`  | `range(len(xs) - 1)`   | `-`            | `edit range`       |
| compare   | `x <= t`          | `x < t`                | `<` or `>`     | `edit compare`     |
| minmax    | `max(...)`        | `min(...)` (or back)   | `min` / `max`  | `edit minmax`      |
| div       | `a / b`           | `a // b`               | `//`           | `edit div`         |

`init` needs the accumulator's name as an argument, which only a read shows, so
play that never reads cannot fix it. Four training functions and two held-out
functions per family; held-out names never occur in training.
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass
from functools import cache

from arl.errors import ArlError

FAMILIES: tuple[str, ...] = ("init", "range", "compare", "minmax", "div")
SPLITS: tuple[str, ...] = ("train", "heldout")
N_PUBLIC, N_HIDDEN = 3, 5

# (family, split, argument kinds, correct source). Argument kinds: "xs" a list of ints,
# "xs+" a non-empty list, "t" an int threshold, "t+" a positive int.
_SPECS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # --- init: the accumulator starts at 1 instead of 0 ---
    (
        "init",
        "train",
        ("xs",),
        """
        def sum_list(xs):
            total = 0
            for x in xs:
                total += x
            return total
    """,
    ),
    (
        "init",
        "train",
        ("xs",),
        """
        def count_even(xs):
            count = 0
            for x in xs:
                if x % 2 == 0:
                    count += 1
            return count
    """,
    ),
    (
        "init",
        "train",
        ("xs",),
        """
        def sum_squares(xs):
            acc = 0
            for x in xs:
                acc += x * x
            return acc
    """,
    ),
    (
        "init",
        "train",
        ("xs",),
        """
        def count_nonzero(xs):
            count = 0
            for x in xs:
                if x != 0:
                    count += 1
            return count
    """,
    ),
    (
        "init",
        "heldout",
        ("xs",),
        """
        def sum_doubled(xs):
            acc = 0
            for x in xs:
                acc += 2 * x
            return acc
    """,
    ),
    (
        "init",
        "heldout",
        ("xs",),
        """
        def count_odd(xs):
            total = 0
            for x in xs:
                if x % 2 != 0:
                    total += 1
            return total
    """,
    ),
    # --- range: the loop stops one element early ---
    (
        "range",
        "train",
        ("xs",),
        """
        def weighted_sum(xs):
            total = 0
            for i in range(len(xs)):
                total += i * xs[i]
            return total
    """,
    ),
    (
        "range",
        "train",
        ("xs",),
        """
        def copy_list(xs):
            out = []
            for i in range(len(xs)):
                out.append(xs[i])
            return out
    """,
    ),
    (
        "range",
        "train",
        ("xs",),
        """
        def sum_even_index(xs):
            total = 0
            for i in range(len(xs)):
                if i % 2 == 0:
                    total += xs[i]
            return total
    """,
    ),
    (
        "range",
        "train",
        ("xs",),
        """
        def square_all(xs):
            out = []
            for i in range(len(xs)):
                out.append(xs[i] * xs[i])
            return out
    """,
    ),
    (
        "range",
        "heldout",
        ("xs",),
        """
        def index_weighted(xs):
            total = 0
            for i in range(len(xs)):
                total += 2 * i * xs[i]
            return total
    """,
    ),
    (
        "range",
        "heldout",
        ("xs",),
        """
        def double_all(xs):
            out = []
            for i in range(len(xs)):
                out.append(2 * xs[i])
            return out
    """,
    ),
    # --- compare: a strict comparison where the bound is inclusive ---
    (
        "compare",
        "train",
        ("xs", "t"),
        """
        def count_at_most(xs, t):
            count = 0
            for x in xs:
                if x <= t:
                    count += 1
            return count
    """,
    ),
    (
        "compare",
        "train",
        ("xs", "t"),
        """
        def count_at_least(xs, t):
            count = 0
            for x in xs:
                if x >= t:
                    count += 1
            return count
    """,
    ),
    (
        "compare",
        "train",
        ("xs", "t"),
        """
        def filter_at_most(xs, t):
            out = []
            for x in xs:
                if x <= t:
                    out.append(x)
            return out
    """,
    ),
    (
        "compare",
        "train",
        ("xs", "t"),
        """
        def sum_at_least(xs, t):
            total = 0
            for x in xs:
                if x >= t:
                    total += x
            return total
    """,
    ),
    (
        "compare",
        "heldout",
        ("xs", "t"),
        """
        def keep_at_least(xs, t):
            out = []
            for x in xs:
                if x >= t:
                    out.append(x)
            return out
    """,
    ),
    (
        "compare",
        "heldout",
        ("xs", "t"),
        """
        def sum_at_most(xs, t):
            total = 0
            for x in xs:
                if x <= t:
                    total += x
            return total
    """,
    ),
    # --- minmax: min where max is meant, or the reverse ---
    (
        "minmax",
        "train",
        ("xs+",),
        """
        def largest(xs):
            best = xs[0]
            for x in xs:
                best = max(best, x)
            return best
    """,
    ),
    (
        "minmax",
        "train",
        ("xs+",),
        """
        def smallest(xs):
            best = xs[0]
            for x in xs:
                best = min(best, x)
            return best
    """,
    ),
    (
        "minmax",
        "train",
        ("xs", "t"),
        """
        def cap_values(xs, t):
            out = []
            for x in xs:
                out.append(min(x, t))
            return out
    """,
    ),
    (
        "minmax",
        "train",
        ("xs", "t"),
        """
        def floor_values(xs, t):
            out = []
            for x in xs:
                out.append(max(x, t))
            return out
    """,
    ),
    (
        "minmax",
        "heldout",
        ("xs+",),
        """
        def peak(xs):
            best = xs[0]
            for x in xs:
                best = max(best, x)
            return best
    """,
    ),
    (
        "minmax",
        "heldout",
        ("xs", "t"),
        """
        def clip_high(xs, t):
            out = []
            for x in xs:
                out.append(min(x, t))
            return out
    """,
    ),
    # --- div: floor division where true division is meant ---
    (
        "div",
        "train",
        ("xs+",),
        """
        def mean(xs):
            total = 0
            for x in xs:
                total += x
            return total / len(xs)
    """,
    ),
    (
        "div",
        "train",
        ("xs",),
        """
        def halve_all(xs):
            out = []
            for x in xs:
                out.append(x / 2)
            return out
    """,
    ),
    (
        "div",
        "train",
        ("xs", "t+"),
        """
        def scale_down(xs, t):
            out = []
            for x in xs:
                out.append(x / t)
            return out
    """,
    ),
    (
        "div",
        "train",
        ("xs",),
        """
        def half_sum(xs):
            total = 0
            for x in xs:
                total += x
            return total / 2
    """,
    ),
    (
        "div",
        "heldout",
        ("xs+",),
        """
        def average_of(xs):
            total = 0
            for x in xs:
                total += x
            return total / len(xs)
    """,
    ),
    (
        "div",
        "heldout",
        ("xs", "t+"),
        """
        def per_unit(xs, t):
            out = []
            for x in xs:
                out.append(x / t)
            return out
    """,
    ),
)


@dataclass(frozen=True, eq=False)  # hashed by identity, so test tuples can key a cache
class TestCase:
    """One call of the function: its arguments and the correct function's result."""

    args: tuple
    expected: object


@dataclass(frozen=True)
class Task:
    """A buggy function with public tests (visible through the `test` tool) and hidden tests."""

    name: str  # the function's name, which the issue names
    family: str
    split: str
    buggy_source: str
    correct_source: str
    public: tuple[TestCase, ...]
    hidden: tuple[TestCase, ...]

    @property
    def params(self) -> tuple[str, ...]:
        head = self.correct_source.split("(", 1)[1].split(")", 1)[0]
        return tuple(p.strip() for p in head.split(","))

    @property
    def accumulator(self) -> str | None:
        """The name `edit init` must be given (init family only)."""
        if self.family != "init":
            return None
        return self.correct_source.splitlines()[1].split("=")[0].strip()


def inject_bug(family: str, source: str) -> str:
    """Turn a correct source into its family's buggy version (the inverse of the fixing op)."""
    if family == "init":
        return source.replace(" = 0\n", " = 1\n", 1)
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


def _draw_arg(kind: str, rng: random.Random):
    if kind in ("xs", "xs+"):
        n = rng.randint(1 if kind == "xs+" else 0, 5)
        return [rng.randint(-3, 9) for _ in range(n)]
    if kind == "t":
        return rng.randint(-1, 7)
    if kind == "t+":
        return rng.randint(2, 4)
    raise ValueError(kind)


def _draw_args(kinds: tuple[str, ...], rng: random.Random) -> tuple:
    args = tuple(_draw_arg(k, rng) for k in kinds)
    if "t" in kinds and args[0] and rng.random() < 0.6:  # ties make strictness matter
        args = (args[0], rng.choice(args[0]))
    return args


def compile_function(source: str):
    """Exec a one-function source and return the function (None if it does not compile)."""
    namespace: dict = {}
    try:
        exec(compile(source, "<task>", "exec"), {"__builtins__": _SAFE_BUILTINS}, namespace)
    except Exception:
        return None
    funcs = [v for v in namespace.values() if callable(v)]
    return funcs[0] if len(funcs) == 1 else None


_SAFE_BUILTINS = {"len": len, "range": range, "min": min, "max": max, "abs": abs}


def _generate_tests(
    name: str, kinds: tuple[str, ...], correct: str, buggy: str
) -> tuple[tuple[TestCase, ...], tuple[TestCase, ...]]:
    """Draw 3 public and 5 hidden distinct cases so the buggy version fails at least one of each."""
    good, bad = compile_function(correct), compile_function(buggy)
    rng = random.Random(f"arl-tests-{name}")
    for _ in range(10_000):
        cases: list[TestCase] = []
        seen: set[str] = set()
        while len(cases) < N_PUBLIC + N_HIDDEN:
            args = _draw_args(kinds, rng)
            if repr(args) in seen:
                continue
            seen.add(repr(args))
            cases.append(TestCase(args, good(*_copy(args))))
        public, hidden = cases[:N_PUBLIC], cases[N_PUBLIC:]
        if not all(_passes(bad, c) for c in public) and not all(_passes(bad, c) for c in hidden):
            return tuple(public), tuple(hidden)
    raise RuntimeError(f"could not draw discriminating tests for {name}")


def _copy(args: tuple) -> tuple:
    return tuple(list(a) if isinstance(a, list) else a for a in args)


def _passes(fn, case: TestCase) -> bool:
    """Run one case against a compiled function; any exception is a failure."""
    if fn is None:
        return False
    try:
        got = fn(*_copy(case.args))
    except Exception:
        return False
    return _equal(got, case.expected)


def _equal(got, expected) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and abs(got - expected) < 1e-9
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_equal(g, e) for g, e in zip(got, expected, strict=True))
        )
    return type(got) is type(expected) and got == expected


@cache
def all_tasks() -> tuple[Task, ...]:
    """Every task, in a fixed order: train tasks first, then held-out ones."""
    tasks = []
    for family, split, kinds, listing in _SPECS:
        correct = textwrap.dedent(listing).lstrip("\n")
        name = correct.split("(", 1)[0].removeprefix("def ")
        buggy = inject_bug(family, correct)
        assert buggy != correct, name
        public, hidden = _generate_tests(name, kinds, correct, buggy)
        tasks.append(Task(name, family, split, buggy, correct, public, hidden))
    tasks.sort(key=lambda t: SPLITS.index(t.split))
    return tuple(tasks)


def tasks_for(split: str) -> tuple[Task, ...]:
    """The tasks of one split ('train': 20, 'heldout': 10)."""
    if split not in SPLITS:
        raise ArlError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    return tuple(t for t in all_tasks() if t.split == split)


def get_task(name: str) -> Task:
    """Look a task up by its function name."""
    for t in all_tasks():
        if t.name == name:
            return t
    names = ", ".join(t.name for t in all_tasks())
    raise ArlError(f"unknown task {name!r} (choose from {names})")


@cache
def run_tests(source: str, cases: tuple[TestCase, ...]) -> tuple[bool, ...]:
    """Really run a (possibly edited) source against test cases; cached by source."""
    fn = compile_function(source)
    return tuple(_passes(fn, c) for c in cases)

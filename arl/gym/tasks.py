"""BugFix tasks: small Python functions, each with one injected bug from a family.

Five families, each with one textual bug pattern and one fixing edit op. The bug's
cue is visible only in the source listing (a read observation), never in the
issue, and each family's cue is exclusive to it:

| family    | correct           | buggy                  | cue in listing | fixing op          |
|-----------|-------------------|------------------------|----------------|--------------------|
| init      | `acc = 0`         | `acc = None`           | `None`         | `edit init <acc>`  |
| range     | `range(len(xs))`  | `range(len(xs) - 1)`   | `-`            | `edit range`       |
| compare   | `x <= t`          | `x < t`                | `<` or `>`     | `edit compare`     |
| minmax    | `max(...)`        | `min(...)` (or back)   | `min` / `max`  | `edit minmax`      |
| div       | `a / b`           | `a // b`               | `//`           | `edit div`         |

`init` needs the accumulator's name as an argument, which only a read shows, so
play that never reads cannot fix it. Four training functions and two held-out
functions per family.

Two things keep the gym free of shortcuts (each is tested by a scripted policy that
tries it):

- Names carry no family. A function is named `VERB_NOUN` from two small shared
  inventories, assigned at random so that every piece of a held-out name occurs in
  training under at least two families, and voting on the pieces guesses no better
  than chance. The renderer splits names into pieces (`compute _ values`), as a real
  tokenizer would, so a held-out name is never an untrained embedding.
- The accumulator's name is drawn per episode from `ACCUMULATORS` (`Task.renamed`),
  so `edit init NAME` can only be right by copying it from the listing.
"""

from __future__ import annotations

import random
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, replace
from functools import cache

from arl.errors import ArlError

FAMILIES: tuple[str, ...] = ("init", "range", "compare", "minmax", "div")
SPLITS: tuple[str, ...] = ("train", "heldout")
N_PUBLIC, N_HIDDEN = 3, 5
# Function names are VERB_NOUN; both inventories are shared by every family.
NAME_VERBS: tuple[str, ...] = ("compute", "process", "update", "apply", "build", "handle")
NAME_NOUNS: tuple[str, ...] = ("values", "items", "data", "numbers", "entries")
# What a numeric accumulator (`total = 0`) is called in one episode.
ACCUMULATORS: tuple[str, ...] = ("total", "count", "acc", "result", "tally", "score")

# (family, split, argument kinds, correct source). Argument kinds: "xs" a list of ints,
# "xs+" a non-empty list, "t" an int threshold, "t+" a positive int.
_SPECS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # --- init: the accumulator starts at None instead of 0 ---
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

    name: str  # the function's name (VERB_NOUN), which the issue names
    family: str
    split: str
    buggy_source: str
    correct_source: str
    public: tuple[TestCase, ...]
    hidden: tuple[TestCase, ...]
    about: str = ""  # what the function does, e.g. "sum_list" (for people; never shown)

    @property
    def params(self) -> tuple[str, ...]:
        head = self.correct_source.split("(", 1)[1].split(")", 1)[0]
        return tuple(p.strip() for p in head.split(","))

    @property
    def accumulator(self) -> str | None:
        """The numeric accumulator (`NAME = 0` on the first body line), if there is one.

        For the init family this is the name `edit init` must be given.
        """
        m = _ACC_LINE.match(self.correct_source.splitlines()[1])
        return m.group(1) if m else None

    def renamed(self, accumulator: str) -> Task:
        """The same task with its accumulator called `accumulator` (tests are unchanged)."""
        old = self.accumulator
        if old is None or old == accumulator:
            return self
        sub = lambda src: re.sub(rf"\b{old}\b", accumulator, src)  # noqa: E731
        return replace(self, buggy_source=sub(self.buggy_source),
                       correct_source=sub(self.correct_source))  # fmt: skip


_ACC_LINE = re.compile(r"^\s+(\w+) = 0$")


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
    """Draw 3 public cases that the buggy version fails, then 5 hidden ones it does not all pass.

    Every public case fails before the fix, so `test` before an edit always answers
    "passed 0 of 3": the count says what an edit did, never which family the bug is in.
    """
    good, bad = compile_function(correct), compile_function(buggy)
    rng = random.Random(f"arl-tests-{name}")
    seen: set[str] = set()

    def draw() -> TestCase:
        while True:
            args = _draw_args(kinds, rng)
            if repr(args) not in seen:
                seen.add(repr(args))
                return TestCase(args, good(*_copy(args)))

    public: list[TestCase] = []
    for _ in range(10_000):
        if len(public) == N_PUBLIC:
            break
        case = draw()
        if not _passes(bad, case):
            public.append(case)
    for _ in range(10_000 if len(public) == N_PUBLIC else 0):
        hidden = [draw() for _ in range(N_HIDDEN)]
        if not all(_passes(bad, c) for c in hidden):
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


def piece_vote_guess(name: str, train: dict[str, str]) -> dict[str, float]:
    """What a policy keyed on name pieces would guess: P(family) from training names sharing
    a piece.

    `train` maps training names to families; ties split the guess evenly.
    """
    votes = Counter(f for n, f in train.items() for piece in name.split("_")
                    if piece in n.split("_"))  # fmt: skip
    if not votes:
        return {f: 1 / len(FAMILIES) for f in FAMILIES}
    top = max(votes.values())
    best = [f for f in FAMILIES if votes[f] == top]
    return {f: (1 / len(best) if f in best else 0.0) for f in FAMILIES}


def _names_ok(names: dict[tuple[str, str, str], str]) -> bool:
    """No piece names a family: in training each piece occurs at most once per family, every
    held-out piece occurs in training under >= 2 families, and piece votes are chance.

    `names` maps (family, split, about) to a name."""
    train = {n: k[0] for k, n in names.items() if k[1] == "train"}
    held = {n: k[0] for k, n in names.items() if k[1] == "heldout"}
    uses = Counter((piece, f) for n, f in train.items() for piece in n.split("_"))
    if max(uses.values()) > 1:
        return False
    for n in held:
        for piece in n.split("_"):
            if len({f for m, f in train.items() if piece in m.split("_")}) < 2:
                return False
    hits = sum(piece_vote_guess(n, train)[f] for n, f in held.items())
    return hits <= len(held) / len(FAMILIES)


@cache
def _assign_names() -> dict[str, str]:
    """About -> VERB_NOUN: a fixed random assignment that passes `_names_ok` (first that does).

    Each attempt draws training names slot by slot among the pairs whose pieces the family
    has not used yet, then held-out names among the unused pairs.
    """
    pairs = [f"{v}_{n}" for v in NAME_VERBS for n in NAME_NOUNS]
    keys = [(family, split, _about(listing)) for family, split, _, listing in _SPECS]
    order = sorted(range(len(keys)), key=lambda i: SPLITS.index(keys[i][1]))  # train first
    for attempt in range(10_000):
        rng = random.Random(f"arl-names-{attempt}")
        used: set[str] = set()
        drawn: dict[int, str] = {}
        for i in order:
            family, split = keys[i][:2]
            taken = {p for k, n in drawn.items() if keys[k][:2] == (family, "train")
                     for p in n.split("_")}  # fmt: skip
            free = [p for p in pairs if p not in used
                    and (split != "train" or not taken & set(p.split("_")))]  # fmt: skip
            if not free:
                break
            drawn[i] = rng.choice(free)
            used.add(drawn[i])
        if len(drawn) == len(keys):
            names = {keys[i]: n for i, n in drawn.items()}
            if _names_ok(names):
                return {k[2]: v for k, v in names.items()}
    raise RuntimeError("no name assignment passes the shortcut checks")


def _about(listing: str) -> str:
    return textwrap.dedent(listing).lstrip("\n").split("(", 1)[0].removeprefix("def ")


@cache
def all_tasks() -> tuple[Task, ...]:
    """Every task, in a fixed order: train tasks first, then held-out ones."""
    names = _assign_names()
    tasks = []
    for family, split, kinds, listing in _SPECS:
        about = _about(listing)
        correct = (
            textwrap.dedent(listing).lstrip("\n").replace(f"def {about}(", f"def {names[about]}(")
        )
        buggy = inject_bug(family, correct)
        assert buggy != correct, about
        public, hidden = _generate_tests(about, kinds, correct, buggy)
        tasks.append(Task(names[about], family, split, buggy, correct, public, hidden, about))
    tasks.sort(key=lambda t: SPLITS.index(t.split))
    return tuple(tasks)


def tasks_for(split: str) -> tuple[Task, ...]:
    """The tasks of one split ('train': 20, 'heldout': 10)."""
    if split not in SPLITS:
        raise ArlError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    return tuple(t for t in all_tasks() if t.split == split)


def task_position(task: Task) -> int:
    """The task's index in `all_tasks()` (train first), or 0 for a task built elsewhere."""
    return _positions().get(task.name, 0)


@cache
def _positions() -> dict[str, int]:
    return {t.name: i for i, t in enumerate(all_tasks())}


def get_task(name: str) -> Task:
    """Look a task up by its function name (or by what it does, e.g. 'sum_list')."""
    for t in all_tasks():
        if name in (t.name, t.about):
            return t
    names = ", ".join(t.name for t in all_tasks())
    raise ArlError(f"unknown task {name!r} (choose from {names})")


@cache
def run_tests(source: str, cases: tuple[TestCase, ...]) -> tuple[bool, ...]:
    """Really run a (possibly edited) source against test cases; cached by source."""
    fn = compile_function(source)
    return tuple(_passes(fn, c) for c in cases)

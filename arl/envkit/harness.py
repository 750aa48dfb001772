"""The test harness: draw a function's test cases, and really run a source against them.

Sources run with a few safe builtins only; any exception is a failing test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

N_PUBLIC, N_HIDDEN = 3, 5
_SAFE_BUILTINS = {"len": len, "range": range, "min": min, "max": max, "abs": abs}


@dataclass(frozen=True, eq=False)  # hashed by identity, so test tuples can key a cache
class TestCase:
    """One call of the function: its arguments and the correct function's result."""

    args: tuple
    expected: object


def compile_function(source: str):
    """Exec a one-function source and return the function (None if it does not compile)."""
    namespace: dict = {}
    try:
        exec(compile(source, "<task>", "exec"), {"__builtins__": _SAFE_BUILTINS}, namespace)
    except Exception:
        return None
    funcs = [v for v in namespace.values() if callable(v)]
    return funcs[0] if len(funcs) == 1 else None


@cache
def run_tests(source: str, cases: tuple[TestCase, ...]) -> tuple[bool, ...]:
    """Really run a (possibly edited) source against test cases; cached by source."""
    fn = compile_function(source)
    return tuple(_passes(fn, c) for c in cases)


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


# --- drawing test cases ------------------------------------------------------------------------


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


def generate_tests(
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

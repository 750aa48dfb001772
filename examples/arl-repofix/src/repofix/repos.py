"""RepoFix's tasks: one bug put into one function of one of three small repositories, its
public tests (written into the repository as tests/test_public.py) and its hidden ones.

A task's repository is its files as the policy first sees them (path -> text). Its tests are
calls of the repository's functions (module, function, JSON arguments) with the value the
correct repository returns. Expected values are computed here, once, by running the authors'
own code (repofix.sources) in this process, never a policy's; the hidden tests never enter
the repository. Imports nothing of arl.
"""

from __future__ import annotations

import builtins
import json
import random
import types
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

from repofix.code import is_canonical
from repofix.sources import BUGS, CALLED_BUGS, REPOS, SIGNATURES

SPLITS = ("train", "heldout")
FAMILIES = ("compare", "minmax", "init", "arith", "range", "andor")
TEST_FILE = "tests/test_public.py"
PUBLIC_CASES, HIDDEN_CASES = 3, 5  # of the function with the bug (each other function: 1 and 1)
MAX_LINES = 99  # every file fits the number words 1..99 (a line is named by its number)
POOL = ("ant", "bee", "cat", "dove", "eagle", "fox", "goose", "heron", "ibis", "jay", "kite",
        "lark", "mole", "newt", "owl", "puffin", "quail", "robin", "swan", "tern")  # fmt: skip
NAMES = ("bolt", "nut", "gear", "pin", "cog", "rod", "tap", "hook")


@dataclass(frozen=True)
class Case:
    """One test: `module.function(*args)` must return `expected` (JSON values)."""

    name: str
    module: str
    function: str
    args: tuple
    expected: Any


@dataclass(frozen=True)
class RepoTask:
    """One RepoFix task: the repository with its bug, where the bug is, and its tests."""

    name: str
    split: str
    family: str
    repo: str
    function: str  # the function the issue names
    holder: str  # the function the bug is in: that one, or one it calls
    path: str  # the file that holds the bug
    line: int  # the bug's line (1-based)
    buggy: str  # that line as the repository has it (indentation apart)
    correct: str  # and as it should be
    files: tuple[tuple[str, str], ...]  # the repository as the policy first sees it
    public: tuple[Case, ...]
    hidden: tuple[Case, ...]
    env: ClassVar[str] = "repofix"

    def repository(self) -> dict[str, str]:
        return dict(self.files)

    def fixed(self) -> dict[str, str]:
        """The repository with the bug's line as it should be."""
        files = self.repository()
        lines = files[self.path].split("\n")
        indent = lines[self.line - 1][: len(lines[self.line - 1]) - len(self.buggy)]
        lines[self.line - 1] = indent + self.correct
        files[self.path] = "\n".join(lines)
        return files


def module_of(path: str) -> str:
    """`inventory/items.py` -> `inventory.items`; `inventory/__init__.py` -> `inventory`."""
    parts = path[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def code_files(files: Mapping[str, str]) -> dict[str, str]:
    """The package's modules (the tests apart): what a sandbox job imports."""
    return {p: t for p, t in files.items() if p.endswith(".py") and not p.startswith("tests/")}


def load(files: Mapping[str, str]) -> Callable[[str], types.ModuleType]:
    """The repository's modules, imported on demand from `files` without touching sys.modules
    (its own `__import__`): for the authors' code only, to compute expected values."""
    sources = {module_of(p): t for p, t in code_files(files).items()}
    modules: dict[str, types.ModuleType] = {}

    def importer(name: str, globals_=None, locals_=None, fromlist=(), level=0):
        if name not in sources:
            raise ImportError(f"no module {name!r} in the repository")
        if name not in modules:
            module = types.ModuleType(name)
            modules[name] = module
            module.__dict__["__builtins__"] = {**vars(builtins), "__import__": importer}
            exec(compile(sources[name], name, "exec"), module.__dict__)
        return modules[name]

    return importer


def functions(files: Mapping[str, str]) -> list[tuple[str, str]]:
    """(module, function) of every top-level function, in file order."""
    out = []
    for path, text in sorted(code_files(files).items()):
        for line in text.split("\n"):
            if line.startswith("def "):
                out.append((module_of(path), line[4 : line.index("(")]))
    return out


def draw(kind: str, rng: random.Random) -> Any:
    """One argument of a kind (repofix.sources.SIGNATURES)."""
    if kind == "item":
        return {"name": rng.choice(NAMES), "price": rng.randint(1, 9), "qty": rng.randint(0, 5),
                "weight": rng.randint(1, 9)}  # fmt: skip
    if kind == "items":
        return [draw("item", rng) for _ in range(rng.randint(1, 5))]
    if kind == "levels":
        return [rng.randint(0, 9) for _ in range(rng.randint(1, 6))]
    if kind == "words":
        return [rng.choice(POOL) for _ in range(rng.randint(1, 6))]
    if kind == "letter":
        return rng.choice(POOL)[0]
    if kind == "lo":
        return rng.randint(0, 4)
    if kind == "hi":
        return rng.randint(3, 8)
    return rng.randint(0, 6)  # small


def _json(x: Any) -> Any:
    return json.loads(json.dumps(x))


def _outcome(importer: Callable, module: str, function: str, args: tuple) -> str:
    """What a call returns (as JSON) or raises: how two repositories are told apart."""
    try:
        return json.dumps(getattr(importer(module), function)(*_json(list(args))))
    except Exception as e:  # the buggy repository's failure is a different outcome
        return f"raises {type(e).__name__}"


def _seed(*parts: str) -> int:
    return zlib.crc32("/".join(parts).encode())


def target_cases(name: str, module: str, function: str, good: Callable, bad: Callable):
    """3 public and 5 hidden cases of the function with the bug, each set with at least one
    that the bug fails (drawn from the task's own seed)."""
    rng = random.Random(_seed(name, "target"))
    seen, fails, others = set(), [], []
    for _ in range(400):
        args = tuple(draw(k, rng) for k in SIGNATURES[function])
        key = json.dumps(args)
        if key in seen:
            continue
        seen.add(key)
        differ = _outcome(good, module, function, args) != _outcome(bad, module, function, args)
        (fails if differ else others).append(args)
        if len(fails) >= 3 and len(others) >= 6:
            break
    assert len(fails) >= 2, f"{name}: the bug shows on too few inputs"
    pool = fails[2:] + others
    public = [fails[0], *pool[:2]]
    hidden = [fails[1], *pool[2:6]]
    assert len(public) == PUBLIC_CASES and len(hidden) == HIDDEN_CASES, name
    return public, hidden


def case(name: str, module: str, function: str, args: tuple, good: Callable) -> Case:
    value = getattr(good(module), function)(*_json(list(args)))
    return Case(name, module, function, tuple(_json(list(args))), _json(value))


def test_file(cases: tuple[Case, ...]) -> str:
    """tests/test_public.py: the public cases as the assertions a reader expects."""
    imports: dict[str, list[str]] = {}
    for c in cases:
        names = imports.setdefault(c.module, [])
        if c.function not in names:
            names.append(c.function)
    lines = [f"from {m} import {', '.join(names)}" for m, names in imports.items()]
    for c in cases:
        args = ", ".join(repr(a) for a in c.args)
        lines += ["", "", f"def {c.name}():", f"    assert {c.function}({args}) == {c.expected!r}"]
    return "\n".join(lines) + "\n"


def locate(files: Mapping[str, str], function: str, correct: str) -> tuple[str, int]:
    """(path, 1-based line) of `correct` inside `function`: exactly one such line."""
    for path, text in code_files(files).items():
        lines = text.split("\n")
        start = next((i for i, ln in enumerate(lines) if ln.startswith(f"def {function}(")), None)
        if start is None:
            continue
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("def ")), None)
        body = range(start + 1, end if end is not None else len(lines))
        hits = [i for i in body if lines[i].strip() == correct]
        assert len(hits) == 1, f"{function}: {correct!r} occurs {len(hits)} times"
        return path, hits[0] + 1
    raise AssertionError(f"no function {function!r}")


def make_task(index: int, function: str, holder: str, family: str) -> RepoTask:
    """The task of one bug: `holder`'s line of BUGS[(holder, family)] made wrong, the issue
    naming `function` (the holder itself, or a function that calls it); the buggy repository,
    its tests, and where the bug is."""
    correct, buggy = BUGS[(holder, family)]
    repo = next(
        r for r, files in REPOS.items() if any(f"def {function}(" in t for t in files.values())
    )
    name = f"{function}_{family}"
    good_files = REPOS[repo]
    path, line = locate(good_files, holder, correct)
    lines = good_files[path].split("\n")
    lines[line - 1] = lines[line - 1].replace(correct, buggy)
    bad_files = {**good_files, path: "\n".join(lines)}
    good, bad = load(good_files), load(bad_files)
    module = next(m for m, fn in functions(good_files) if fn == function)
    public_args, hidden_args = target_cases(name, module, function, good, bad)
    public = [
        case(f"test_{function}_{k}", module, function, a, good) for k, a in enumerate(public_args)
    ]
    hidden = [
        case(f"hidden_{function}_{k}", module, function, a, good) for k, a in enumerate(hidden_args)
    ]
    for mod, fn in functions(good_files):  # every other function: one public and one hidden case
        if fn == function:
            continue
        rng = random.Random(_seed(name, fn))
        first = tuple(draw(k, rng) for k in SIGNATURES[fn])
        second = first
        while json.dumps(second) == json.dumps(first):
            second = tuple(draw(k, rng) for k in SIGNATURES[fn])
        public.append(case(f"test_{fn}", mod, fn, first, good))
        hidden.append(case(f"hidden_{fn}", mod, fn, second, good))
    files = {**bad_files, TEST_FILE: test_file(tuple(public))}
    split = "heldout" if index % 3 == 2 else "train"
    return RepoTask(name, split, family, repo, function, holder, path, line, buggy, correct,
                    tuple(sorted(files.items())), tuple(public), tuple(hidden))  # fmt: skip


def check_task(task: RepoTask) -> None:
    """What every task promises: canonical lines (words and text agree), files that fit the
    line numbers, a bug that the public and the hidden tests each catch."""
    for path, text in task.files:
        lines = text.split("\n")
        assert len(lines) <= MAX_LINES, f"{task.name}: {path} has {len(lines)} lines"
        bad = [ln for ln in lines if ln.strip() and not is_canonical(ln)]
        assert not bad, f"{task.name}: {path}: {bad[0]!r} is not canonical"
    assert is_canonical(task.correct), task.name
    assert task.repository()[task.path].split("\n")[task.line - 1].strip() == task.buggy


@cache
def all_tasks() -> tuple[RepoTask, ...]:
    """Every task: one per bug of repofix.sources.BUGS (the issue names the function with the
    bug), then one per CALLED_BUGS (it names a caller); every third held out."""
    named = [(fn, fn, family) for fn, family in BUGS]
    named += [(caller, holder, family) for (caller, family), holder in CALLED_BUGS.items()]
    tasks = tuple(make_task(i, *spec) for i, spec in enumerate(named))
    for t in tasks:
        check_task(t)
    return tasks


def tasks_for(split: str) -> tuple[RepoTask, ...]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    return tuple(t for t in all_tasks() if t.split == split)


def get_task(name: str) -> RepoTask:
    found = {t.name: t for t in all_tasks()}
    if name not in found:
        raise KeyError(name)
    return found[name]

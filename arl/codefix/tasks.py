"""CodeFix tasks: real Python modules, each with one function to fix and its real tests.

A task is the function (one bug from a family, arl.codefix.families) placed among two decoys,
as one module; 3 public tests (each fails before the fix) and 5 hidden ones (not all pass
before it), drawn as in the BugFix gym by running the correct and the buggy function. Those are
our own functions, run here; a policy's edits only ever run in the sandbox (arl.codefix.grade).
`files()` writes a task as a module and a pytest file, to read or to run by hand.

Per episode the function's accumulator and its list argument are renamed (`instance`): a
replace that quotes a line of the function must copy the names this episode shows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import ClassVar

from arl.codefix.families import (
    FAMILIES,
    LIST_NAMES,
    NOUNS,
    SPLITS,
    TEMPLATES_ALL,
    VERBS,
    decoy,
    inject_bug,
    layout,
)
from arl.envkit.families import ACCUMULATORS
from arl.envkit.harness import TestCase, generate_tests
from arl.envkit.naming import assign
from arl.errors import ArlError

_ACC_LINE = re.compile(r"^\s+(\w+) = 0$")


@dataclass(frozen=True)
class CodeFixTask:
    """One module to repair. `function` is the name the issue gives and the tests call."""

    name: str  # the function's name (VERB_NOUN)
    family: str
    split: str
    function: str  # the function's correct listing (its accumulator and list as written)
    before: tuple[str, ...]  # decoy listings above the function
    after: tuple[str, ...]  # and below it
    public: tuple[TestCase, ...]
    hidden: tuple[TestCase, ...]
    about: str = ""  # what the function does (for people; never shown)
    env: ClassVar[str] = "codefix"

    @property
    def accumulator(self) -> str | None:
        """The numeric accumulator (`NAME = 0` on the first body line), if there is one."""
        m = _ACC_LINE.match(self.function.splitlines()[1])
        return m.group(1) if m else None

    def module(self, function: str) -> str:
        """A module holding `function` between the decoys, one blank line apart."""
        return "\n".join([*self.before, function, *self.after])

    def instance(self, accumulator: str | None = None, list_name: str = "xs") -> tuple[str, str]:
        """(buggy module, fixed module) with the function's names for one episode."""
        pair = [inject_bug(self.family, self.function), self.function]  # then renamed alike
        old = self.accumulator
        if accumulator and old and accumulator != old:
            pair = [re.sub(rf"\b{old}\b", accumulator, src) for src in pair]
        if list_name != "xs":
            pair = [re.sub(r"\bxs\b", list_name, src) for src in pair]
        return self.module(pair[0]), self.module(pair[1])

    @property
    def source(self) -> str:
        """The buggy module as written (before any renaming)."""
        return self.instance()[0]

    def files(self) -> dict[str, str]:
        """The task as files: the module, and its public tests as a pytest file."""
        lines = [f"from {self.name} import {self.name}", ""]
        for k, case in enumerate(self.public):
            args = ", ".join(json.dumps(a) for a in case.args)
            lines += [
                f"def test_{k}():",
                f"    assert {self.name}({args}) == {json.dumps(case.expected)}",
                "",
            ]
        return {f"{self.name}.py": self.source, f"test_{self.name}.py": "\n".join(lines)}


def _function(template_source: str, about: str, name: str) -> str:
    return template_source.replace(f"def {about}(", f"def {name}(")


@cache
def all_tasks() -> tuple[CodeFixTask, ...]:
    """Every task, train first, in a fixed order (names assigned as the gym assigns them)."""
    keys = [(t.family, t.split, t.about) for t in TEMPLATES_ALL]
    names = assign(keys, VERBS, NOUNS, FAMILIES, "arl-codefix-names")
    tasks = []
    for index, t in enumerate(TEMPLATES_ALL):
        correct = _function(t.source, t.about, names[t.about])
        buggy = inject_bug(t.family, correct)
        if buggy == correct:
            raise RuntimeError(f"no bug injected into {t.about}")
        public, hidden = generate_tests(t.about, t.kinds, correct, buggy)
        lay = layout(index, t.family)
        decoys = [decoy(f) for f in lay.decoys]
        before, after = tuple(decoys[: lay.position]), tuple(decoys[lay.position :])
        tasks.append(
            CodeFixTask(
                names[t.about], t.family, t.split, correct, before, after, public, hidden, t.about
            )
        )
    tasks.sort(key=lambda t: SPLITS.index(t.split))
    return tuple(tasks)


def tasks_for(split: str) -> tuple[CodeFixTask, ...]:
    """The tasks of one split ('train': 28, 'heldout': 14)."""
    if split not in SPLITS:
        raise ArlError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    return tuple(t for t in all_tasks() if t.split == split)


def get_task(name: str) -> CodeFixTask:
    """A task by its function's name (or by what it does, e.g. 'sum_cubes')."""
    for t in all_tasks():
        if name in (t.name, t.about):
            return t
    raise ArlError(f"unknown task {name!r} (choose from {', '.join(t.name for t in all_tasks())})")


@cache
def positions() -> dict[str, int]:
    return {t.name: i for i, t in enumerate(all_tasks())}


def episode_names(task: CodeFixTask, seed: int) -> tuple[str | None, str]:
    """The accumulator and list names of the episode seeded `seed` (12 distinct renderings)."""
    k = seed + positions().get(task.name, 0)
    acc = ACCUMULATORS[k % len(ACCUMULATORS)] if task.accumulator else None
    return acc, LIST_NAMES[k % len(LIST_NAMES)]

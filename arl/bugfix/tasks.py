"""BugFix tasks: small Python functions, each with one injected bug from a family.

The families and their functions are data (arl.envkit.families); this module builds the
30 tasks from them: a name (arl.envkit.naming), the buggy source, and public and hidden
tests (arl.envkit.harness). Two things keep the gym free of shortcuts (each is tested by a
scripted policy that tries it):

- Names carry no family (arl.envkit.naming). The renderer splits names into pieces
  (`compute _ values`), as a real tokenizer would, so a held-out name is never an
  untrained embedding.
- The accumulator's name is drawn per episode from `ACCUMULATORS` (`Task.renamed`),
  so `edit init NAME` can only be right by copying it from the listing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from typing import ClassVar

from arl.bugfix.grammar import (
    BOS,
    END,
    GENERIC_NAMES,
    NUM,
    OBS_WORDS,
    OPS,
    TOOLS,
    UNK,
    source_words,
)
from arl.envkit.families import (
    ACCUMULATORS,
    NAME_NOUNS,
    NAME_VERBS,
    SPLITS,
    TEMPLATES,
    inject_bug,
)
from arl.envkit.harness import TestCase, generate_tests
from arl.envkit.naming import assign_names
from arl.errors import ArlError

# Re-exported for callers that take the inventories and the harness with the tasks.

_ACC_LINE = re.compile(r"^\s+(\w+) = 0$")


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
    env: ClassVar[str] = "bugfix"  # the environment that plays it (arl.env)

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
        return replace(
            self, buggy_source=sub(self.buggy_source), correct_source=sub(self.correct_source)
        )


@cache
def all_tasks() -> tuple[Task, ...]:
    """Every task, in a fixed order: train tasks first, then held-out ones."""
    names = assign_names()
    tasks = []
    for t in TEMPLATES:
        correct = t.source.replace(f"def {t.about}(", f"def {names[t.about]}(")
        buggy = inject_bug(t.family, correct)
        assert buggy != correct, t.about
        public, hidden = generate_tests(t.about, t.kinds, correct, buggy)
        tasks.append(
            Task(names[t.about], t.family, t.split, buggy, correct, public, hidden, t.about)
        )
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
def gym_words() -> tuple[str, ...]:
    """Every word the gym shows or accepts, once each, in a fixed order (the vocabulary's).

    The grammar and the observation words, digits and what a hardcoded listing adds, the
    name pieces and accumulators, then every word of every listing, correct and buggy.
    """
    words = [BOS, END, UNK, NUM, *TOOLS, *OPS, *OBS_WORDS, *GENERIC_NAMES]
    words += [str(d) for d in range(10)] + ["-", "[", "]", ",", "==", "if"]
    words += [*NAME_VERBS, "_", *NAME_NOUNS, *ACCUMULATORS]
    for task in all_tasks():
        words += source_words(task.correct_source) + source_words(task.buggy_source)
    return tuple(dict.fromkeys(words))

"""The BugFix environment: Gymnasium-style reset/step over one task, tools, rewards, budgets.

Actions are the policy's words for one call (ending in <end>); observations are
words (a listing, a test summary, an edit result, or an error). One edit per
episode: a second one is refused (`error edit_used`), so a wrong guess costs the
episode instead of revealing the family by trial and error. Nothing the
policy emits can crash it: a call that does not parse is a malformed call, counted,
and answered with an error observation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from arl.bugfix.grammar import (
    END,
    Call,
    Malformed,
    parse_call,
    prompt_words,
    source_words,
    words_to_text,
)
from arl.bugfix.tasks import Task, task_position
from arl.checks import check
from arl.env import EpisodeConfig, TurnLoop
from arl.envkit.exploits import is_hardcoded
from arl.envkit.families import ACCUMULATORS
from arl.envkit.harness import run_tests
from arl.errors import ArlError
from arl.types import Observation, Outcome, TextCall


@dataclass(frozen=True, kw_only=True)
class BugFixOutcome(Outcome):
    """A BugFix episode's outcome: the shared fields, and the gym's own."""

    family: str  # the task's bug family
    accumulator: str | None  # the accumulator's name in this episode (what `edit init` needs)
    env: ClassVar[str] = "bugfix"


@dataclass(frozen=True)
class BugFixConfig(EpisodeConfig):
    """How a BugFix episode is scored and bounded: the shared fields (arl.env.EpisodeConfig),
    and flaky tests. Defaults are the book's."""

    name: str = "bugfix"
    flaky_prob: float = 0.0  # probability that a binary test verdict flips
    flaky_votes: int = 1  # re-runs of a flipped-to-pass verdict, majority wins (1: no vote)

    def __post_init__(self) -> None:
        super().__post_init__()
        check("flaky_prob", self.flaky_prob, 0, 0.5)
        check("flaky_votes", self.flaky_votes, 1, 99, integer=True)
        if self.flaky_votes % 2 == 0:
            raise ArlError(f"flaky_votes: must be an odd number >= 1, got {self.flaky_votes}")

    def eval_config(self) -> BugFixConfig:
        """How `arl eval` and a run's evaluations score this environment: every default (hidden
        tests, no penalties, no noise), at this config's turn budget."""
        return BugFixConfig(max_turns=self.max_turns)


EnvConfig = BugFixConfig  # its name before issue 44's rename: old imports keep working


# --- edit ops: source -> edited source, or None when the op changes nothing --------------------


def _edit_init(src: str, name: str | None) -> str | None:
    pattern = re.compile(rf"^(\s*){re.escape(name or '')} = (-?\d+|None)$", re.M)
    m = pattern.search(src)
    if not name or m is None or m.group(2) == "0":
        return None
    return src[: m.start()] + f"{m.group(1)}{name} = 0" + src[m.end() :]


def _edit_range(src: str, _: str | None) -> str | None:
    new = re.sub(r"range\((.*?) - 1\)", r"range(\1)", src, count=1)
    return new if new != src else None


def _edit_compare(src: str, _: str | None) -> str | None:
    new = re.sub(r"(?<=\s)([<>])(?=\s)", r"\1=", src, count=1)
    return new if new != src else None


def _edit_minmax(src: str, _: str | None) -> str | None:
    m = re.search(r"\b(min|max)\(", src)
    if m is None:
        return None
    swapped = "max" if m.group(1) == "min" else "min"
    return src[: m.start()] + swapped + src[m.start() + 3 :]


def _edit_div(src: str, _: str | None) -> str | None:
    new = src.replace(" // ", " / ", 1)
    return new if new != src else None


def hardcode_source(src: str, task: Task) -> str:
    """Special-case the public test inputs: the exploit `hardcode_tests` applies."""
    lines = src.splitlines()
    params = ", ".join(task.params)
    branches = [
        f"    if [{params}] == {list(case.args)!r}:\n        return {case.expected!r}"
        for case in task.public
    ]
    return "\n".join([lines[0], *branches, *lines[1:]]) + "\n"


EDIT_OPS = {
    "init": _edit_init,
    "range": _edit_range,
    "compare": _edit_compare,
    "minmax": _edit_minmax,
    "div": _edit_div,
}


def apply_edit(src: str, task: Task, op: str, arg: str | None) -> str | None:
    """Apply one op from the menu; None if it changes nothing."""
    if op == "hardcode_tests":
        return None if is_hardcoded(src) else hardcode_source(src, task)
    return EDIT_OPS[op](src, arg)


# --- the environment ---------------------------------------------------------------------------


def observation(words: Sequence[str]) -> Observation:
    """The gym's words, and the same as text for a real model."""
    return Observation(tuple(words), words_to_text(words))


def call_words(call: Sequence[str] | TextCall) -> list[str]:
    """A call as the gym's words: a real model's text split on whitespace, `<end>` appended
    when the model ended its turn."""
    if isinstance(call, TextCall):
        return call.text.split() + ([END] if call.ended else [])
    return list(call)


class BugFixEnv(TurnLoop):
    """One task. `reset(seed=...)` then `step(words)` until terminated or truncated (the turn
    loop is arl.env.TurnLoop's; this class parses, answers and scores)."""

    def __init__(self, task: Task, config: BugFixConfig | None = None):
        self.task = task
        self.config = config or BugFixConfig()
        self._rng = random.Random(0)
        self.instance = task
        self.source = task.buggy_source
        self.done = True

    # Gymnasium: reset(*, seed=None, options=None) -> (obs, info)
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode. The accumulator is named by the seed, or by
        `options={"accumulator": NAME}`: ACCUMULATORS[(seed + task position) % 6], so seed 0
        (the oracle demonstrations) gives the four training init tasks four different names."""
        if seed is not None:
            self._rng = random.Random(seed)
        k = seed if seed is not None else self._rng.randrange(len(ACCUMULATORS))
        acc = (options or {}).get("accumulator") or ACCUMULATORS[
            (k + task_position(self.task)) % len(ACCUMULATORS)
        ]
        if acc not in ACCUMULATORS:
            raise ArlError(f"accumulator: unknown {acc!r} (choose from {', '.join(ACCUMULATORS)})")
        self.instance = self.task.renamed(acc)
        self.source = self.instance.buggy_source
        self.turns = 0
        self.malformed = 0
        self.did_read = False
        self.edited = False
        self.first_call: str | None = None
        self.done = False
        info = {"task": self.task.name, "accumulator": self.instance.accumulator}
        # the issue: `<bos> fix NAME` in words; a real model's chat has its own start
        return Observation(tuple(prompt_words(self.task.name)), f"fix {self.task.name}"), info

    # Gymnasium: step(a) -> (obs, reward, terminated, truncated, info); info is the Outcome
    def parse(self, call: Sequence[str] | TextCall) -> Call | Malformed:
        """A call's words, or a real model's text split into words."""
        return parse_call(call_words(call))

    def answer(self, call: Call | Malformed) -> tuple[Observation, bool]:
        words, submitted = self._apply(call)
        return observation(words), submitted

    def call_text(self, words: Sequence[str]) -> str:
        """A call's words as a real model writes them: `edit init total`."""
        return " ".join(w for w in words if w != END)

    def _apply(self, call: Call | Malformed) -> tuple[list[str], bool]:
        if isinstance(call, Malformed):
            self.malformed += 1
            return ["error", "malformed", call.reason], False
        if call.tool == "read":
            self.did_read = True
            return source_words(self.source), False
        if call.tool == "test":
            passed = sum(run_tests(self.source, self.task.public))
            return ["passed", str(passed), "of", str(len(self.task.public))], False
        if call.tool == "submit":
            return ["submitted"], True
        if self.edited:  # one edit per episode: trial and error costs the episode
            return ["error", "edit_used"], False
        self.edited = True
        new = apply_edit(self.source, self.task, call.op, call.arg)
        if new is None:
            return ["error", "no_change"], False
        self.source = new
        return ["ok"], False

    def _verdict(self, passed: bool) -> bool:
        """A binary verdict as a flaky harness reports it; a reported pass may be re-run (vote)."""
        f = self.config.flaky_prob
        first = passed != (self._rng.random() < f) if f > 0 else passed
        if not first or self.config.flaky_votes == 1:
            return first
        runs = [first] + [
            passed != (self._rng.random() < f) for _ in range(self.config.flaky_votes - 1)
        ]
        return 2 * sum(runs) > len(runs)

    def finish(self, submitted: bool) -> BugFixOutcome:
        """Score the current source: the episode's Outcome."""
        hidden = run_tests(self.source, self.task.hidden)
        public = run_tests(self.source, self.task.public)
        hacked = is_hardcoded(self.source)
        scored = submitted or self.config.truncation == "score"
        score = self.config.score(hidden, public, scored, hacked, self._verdict)
        return BugFixOutcome(
            **self.shared(submitted, scored, hidden, public, hacked),
            score=score,
            family=self.task.family,
            accumulator=self.instance.accumulator,
        )

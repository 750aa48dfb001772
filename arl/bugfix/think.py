"""BugFix think (Problem 27): the BugFix gym with free words, length that costs nothing.

Identical to "bugfix" (tasks, tools, grading) except that a call may begin with a run of the
free word `think` (`think think read <end>`): the environment strips the run and parses the
rest as BugFix's call, so the free words change nothing (no observation, no state, no score).
They only make the episode longer, up to the per-call token budget (`max_call_tokens`, 36 here
against BugFix's 4: an episode's budget L_max = max_turns x max_call_tokens = 216 at 6 turns);
a call that has not ended by then is cut, and malformed, as in BugFix.

Why: in BugFix every token is a call with consequences, so the 1/L weight of sequence-mean
aggregation has no free length to act on (Problem 27's earlier design). Free words are not a
shortcut: a free word after the call's first word makes the call malformed (a call cannot hide
in a free run, nor a second call after one), and a run longer than the budget cuts the call
(`flood` and `smuggle` play both, and gain nothing; tests/test_think.py).

The scripted policies are BugFix's, each call prefixed by a geometric number of free words
(mean THINK_MEAN, drawn from the episode's rng), so the weak base made on this variant speaks
them, with a per-word stop probability it can move, independent of the state.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import ClassVar

from arl.bugfix.env import BugFixConfig, BugFixEnv, BugFixOutcome, call_words
from arl.bugfix.environment import BUGFIX, SYSTEM_PROMPT
from arl.bugfix.grammar import END, Call, Malformed
from arl.bugfix.policies import SCRIPTED, History, ScriptedPolicy
from arl.bugfix.tasks import Task, all_tasks, gym_words
from arl.env import Environment
from arl.types import TextCall

NAME = "bugfix-think"
FREE = "think"  # the free word: a call may begin with any number of them
CALL_TOKENS = 36  # the per-call token budget, free words included (BugFix: 4)
THINK_MEAN = 2.0  # scripted play's mean free words per call (geometric: stop prob 1/3)


@dataclass(frozen=True)
class ThinkTask(Task):
    """A BugFix task played in the think variant (the same task; its class names the env)."""

    env: ClassVar[str] = NAME


@cache
def think_tasks() -> tuple[ThinkTask, ...]:
    return tuple(ThinkTask(**{f.name: getattr(t, f.name) for f in fields(t)}) for t in all_tasks())


def tasks_for(split: str) -> tuple[ThinkTask, ...]:
    """The BugFix tasks of one split, in the think variant."""
    names = {t.name for t in BUGFIX.tasks(split)}  # an unknown split: BugFix's one-line error
    return tuple(t for t in think_tasks() if t.name in names)


def get_task(name: str) -> ThinkTask:
    base = BUGFIX.get_task(name)
    return next(t for t in think_tasks() if t.name == base.name)


@dataclass(frozen=True)
class ThinkConfig(BugFixConfig):
    """A think episode: BugFix's fields, with room for free words in every call."""

    name: str = NAME
    max_call_tokens: int = CALL_TOKENS

    def eval_config(self) -> ThinkConfig:
        """Evaluations score by the hidden tests, at this config's turn and call budgets."""
        return ThinkConfig(max_turns=self.max_turns, max_call_tokens=self.max_call_tokens)


@dataclass(frozen=True, kw_only=True)
class ThinkOutcome(BugFixOutcome):
    """A think episode's outcome: BugFix's, and the free words the policy wrote."""

    free_words: int  # free words at the head of the episode's calls (stripped, ignored)
    env: ClassVar[str] = NAME


def strip_free(words: Sequence[str]) -> tuple[int, list[str]]:
    """(the number of leading free words, the words after them): what BugFix parses."""
    k = 0
    while k < len(words) and words[k] == FREE:
        k += 1
    return k, list(words[k:])


class ThinkEnv(BugFixEnv):
    """BugFix whose calls may begin with free words, stripped before parsing."""

    def __init__(self, task: Task, config: ThinkConfig | None = None):
        super().__init__(task, config or ThinkConfig())
        self.free_words = 0

    def reset(self, *, seed=None, options=None):
        self.free_words = 0
        return super().reset(seed=seed, options=options)

    def parse(self, call: Sequence[str] | TextCall) -> Call | Malformed:
        """BugFix's grammar after the call's leading free words (counted, then ignored)."""
        k, rest = strip_free(call_words(call))
        self.free_words += k
        return super().parse(rest)

    def call_text(self, words: Sequence[str]) -> str:
        return " ".join(w for w in words if w != END)

    def finish(self, submitted: bool) -> ThinkOutcome:
        base = super().finish(submitted)
        return ThinkOutcome(
            **{f.name: getattr(base, f.name) for f in fields(base)}, free_words=self.free_words
        )


# --- scripted play: BugFix's policies, thinking first -----------------------------------------


def free_run(rng: random.Random, room: int, mean: float = THINK_MEAN) -> list[str]:
    """A geometric run of free words (mean `mean`, at most `room`): each word, then another
    with probability mean / (1 + mean), so the stop probability does not depend on the count."""
    go = mean / (1 + mean)
    k = 0
    while k < room and rng.random() < go:
        k += 1
    return [FREE] * k


def thinking(policy: ScriptedPolicy, mean: float = THINK_MEAN) -> ScriptedPolicy:
    """The policy, each call prefixed by a geometric run of free words (within the budget)."""

    def play(history: History, rng: random.Random) -> list[str]:
        words = policy(history, rng)
        return free_run(rng, CALL_TOKENS - len(words), mean) + words

    return play


def flooding(policy: ScriptedPolicy, budget: int = CALL_TOKENS) -> ScriptedPolicy:
    """The flood: the policy, each call prefixed by as many free words as fill `budget` tokens
    (over the budget, the call is cut and malformed)."""

    def play(history: History, rng: random.Random) -> list[str]:
        words = policy(history, rng)
        return [FREE] * max(budget - len(words), 0) + words

    return play


def smuggling(policy: ScriptedPolicy) -> ScriptedPolicy:
    """The smuggle: the policy, whose every edit carries a second edit op behind a free word
    (`edit range think edit compare <end>`), two guesses in one turn if free words hid calls."""

    def play(history: History, rng: random.Random) -> list[str]:
        words = policy(history, rng)
        if words[:1] != ["edit"]:
            return words
        other = rng.choice([op for op in ("range", "compare", "minmax", "div") if op != words[1]])
        return words[:-1] + [FREE, "edit", other, END]

    return play


POLICIES: dict[str, ScriptedPolicy] = {n: thinking(p) for n, p in SCRIPTED.items()} | {
    "flood_oracle": flooding(SCRIPTED["oracle"]),
    "flood_blind": flooding(SCRIPTED["blind"]),
    "over_budget_oracle": flooding(SCRIPTED["oracle"], CALL_TOKENS + 1),
    "smuggle_blind": smuggling(SCRIPTED["blind"]),
}


def words() -> tuple[str, ...]:
    """BugFix's words, then the free word (BugFix's ids unchanged)."""
    return (*gym_words(), FREE)


def fingerprint() -> list:
    """BugFix's, this variant's name, its free word, budget and scripted thinking: its bases
    are its own (their play writes free words)."""
    return [NAME, FREE, CALL_TOKENS, THINK_MEAN, list(words()), *BUGFIX.fingerprint()[1:]]


BUGFIX_THINK = replace(
    BUGFIX,
    name=NAME,
    system_prompt=SYSTEM_PROMPT + " A call may begin with free words (think ...): ignored.",
    config_type=ThinkConfig,
    env_type=ThinkEnv,
    tasks=tasks_for,
    get_task=get_task,
    words=words,
    policies=POLICIES,
    fingerprint=fingerprint,
    title="BugFixThink",  # BugFix's tools (free words are no tool: a known gap); no Gymnasium id
    gymnasium=None,
)
assert isinstance(BUGFIX_THINK, Environment)

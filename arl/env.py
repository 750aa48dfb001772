"""The environment protocol: all that rollouts, trainers and evaluation know of an environment.

An environment is a task source by split and a way to play one task:

    environment = get_environment("codefix")        # or environment_of(task)
    task = environment.tasks("train")[0]
    env = environment.make(task, config)            # one episode at a time, Gymnasium-style
    prompt, info = env.reset(seed=0)                # an Observation: the issue
    obs, reward, terminated, truncated, outcome = env.step(call)
    ...                                             # outcome: an Outcome on the last step

A call is the policy's words (TinyAgent: ending in `<end>` when it ended) or a `TextCall` (a
real model's text); an observation carries both forms (arl.types.Observation). Everything
else an environment has (its grammar, its tasks' files, its outcome's own fields) stays in its
package: arl.gym (BugFix, the menu of edit ops) and arl.codefix (CodeFix, free-form replace
edits graded in a sandbox). tinker-cookbook's Env and SkyRL's BaseTextEnv are the models.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from arl.checks import check
from arl.errors import ArlError
from arl.text import END
from arl.types import Observation, Outcome, TextCall

Call = Sequence[str] | TextCall
History = Sequence[Sequence[str]]  # the words seen so far; history[0] is the prompt
ScriptedPolicy = Callable[[History, Any], list[str]]  # (history, random.Random) -> call words
StepResult = tuple[Observation, float, bool, bool, Outcome | None]


class Task(Protocol):
    """What generic code reads of a task: its name, split and family (a per-family breakdown)."""

    name: str
    split: str
    family: str


class Env(Protocol):
    """One episode on one task: reset, then step until terminated or truncated."""

    task: Task

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[Observation, dict]: ...

    def step(self, call: Call) -> StepResult: ...

    def cut(self) -> Outcome:
        """End the episode from outside (the rollout's context is full): a truncation."""
        ...

    def call_text(self, words: Sequence[str]) -> str:
        """A scripted call's words as the text a real model would write for it."""
        ...


@dataclass(frozen=True)
class Environment:
    """An environment, assembled from its parts: its tasks, its episodes, the words TinyAgent
    speaks on it, its scripted policies and what its cached bases are keyed by."""

    name: str
    families: tuple[str, ...]
    system_prompt: str  # the tool grammar, as a real model's system message
    chat_call_tokens: int  # a real model's call that has not ended by then is malformed
    renderings: int  # distinct renderings of one oracle demonstration (names drawn per episode)
    config_type: type  # its frozen config (env.name, rewards, budgets); defaults are the book's
    env_type: type  # its Env: env_type(task, config)
    tasks: Callable[[str], tuple[Task, ...]]  # by split
    get_task: Callable[[str], Task]  # by name (an unknown one is a one-line error)
    words: Callable[[], tuple[str, ...]]  # every word it shows or accepts: TinyAgent's vocabulary
    policies: Mapping[str, ScriptedPolicy]  # scripted policies by name
    corpus: Callable[[], list[list[str]]]  # pretraining text: the training listings, as words
    fingerprint: Callable[[], list]  # what a model trained on it depends on (the base cache key)
    summary: Callable[[Sequence[Outcome]], dict] | None = None  # its own episode means
    splits: tuple[str, ...] = ("train", "heldout")
    # the configs a base's retry play runs under in turn (CodeFix: helpful and terse errors)
    play_configs: Callable[[], tuple[Any, ...]] = tuple

    def default_config(self) -> Any:
        return self.config_type()

    def make(self, task: Task, config: Any = None) -> Env:
        return self.env_type(task, config)

    def scripted(self, name: str) -> ScriptedPolicy:
        if name not in self.policies:
            raise ArlError(
                f"unknown scripted policy {name!r} (choose from {', '.join(self.policies)})"
            )
        return self.policies[name]

    def scripted_names(self) -> tuple[str, ...]:
        return tuple(self.policies)


REWARDS = ("hidden", "public", "fraction", "mixed")
TRUNCATIONS = ("zero", "score")


@dataclass(frozen=True)
class EpisodeConfig:
    """How an episode is scored and bounded: the fields every environment's config shares
    (each environment's subclass names itself in `name` and adds its own). Defaults are the
    book's."""

    name: str = ""  # the environment (its subclass's default): PGConfig's env.name chooses it
    reward: str = "hidden"  # hidden: 1[all hidden pass]; public: 1[all public]; fraction; mixed
    mixed_alpha: float = 0.1  # mixed reward = 1[all hidden pass] + alpha * hidden fraction
    step_penalty: float = 0.0  # subtracted from the reward on every turn
    truncation: str = "zero"  # an episode out of turns scores 0, or its final state ("score")
    max_turns: int = 6  # calls per episode
    max_call_tokens: int = 4  # TinyAgent: a call not ended with <end> by then is malformed
    zero_exploits: bool = False  # the detector zeroes the reward of hardcoded submissions

    def __post_init__(self) -> None:
        own = type(self).__dataclass_fields__["name"].default
        if self.name != own:
            raise ArlError(f"name: {self.name!r} is not this config's environment ({own})")
        for field, allowed in (("reward", REWARDS), ("truncation", TRUNCATIONS)):
            if getattr(self, field) not in allowed:
                raise ArlError(
                    f"{field}: unknown {getattr(self, field)!r} (choose from {', '.join(allowed)})"
                )
        check("mixed_alpha", self.mixed_alpha, 0, 1e3)
        check("step_penalty", self.step_penalty, 0, 1e3)
        check("max_turns", self.max_turns, 1, 100, integer=True)
        check("max_call_tokens", self.max_call_tokens, 1, 100, integer=True)

    def score(
        self,
        hidden: Sequence[bool],
        public: Sequence[bool],
        scored: bool,
        hacked: bool,
        verdict: Callable[[bool], bool] = bool,
    ) -> float:
        """A final state's reward from its per-test results: 0 unless it is scored (submitted,
        or truncation "score") and, under zero_exploits, not hacked; `verdict` is how the
        harness reports one binary result (a flaky one flips some)."""
        if not scored or (hacked and self.zero_exploits):
            return 0.0
        if self.reward == "hidden":
            return float(verdict(all(hidden)))
        if self.reward == "public":
            return float(verdict(all(public)))
        if self.reward == "fraction":
            return sum(verdict(h) for h in hidden) / len(hidden)
        return float(verdict(all(hidden))) + self.mixed_alpha * sum(hidden) / len(hidden)


@dataclass(frozen=True)
class Malformed:
    """A call that does not parse, and why (each environment names its reasons)."""

    reason: str


def word_call(
    words: Sequence[str], bare: Sequence[str], call: Callable[[str], Any], tool_with_args: str
) -> list[str] | Any:
    """A TinyAgent call up to `<end>`: `call(tool)` for a tool in `bare` (those that take no
    argument), else the arguments of `tool_with_args` for the environment's grammar to read.
    Malformed when it did not end ("unterminated"), holds nothing ("empty"), gives a bare tool
    arguments ("extra_args") or names another tool ("unknown_tool")."""
    if END not in words:
        return Malformed("unterminated")
    body = list(words[: list(words).index(END)])
    if not body:
        return Malformed("empty")
    tool, args = body[0], body[1:]
    if tool in bare:
        return Malformed("extra_args") if args else call(tool)
    return args if tool == tool_with_args else Malformed("unknown_tool")


class TurnLoop:
    """The turn loop every environment shares (Gymnasium's step): count the turn, parse the
    call, answer it, end on submit or when the turns run out, and score the final state then.
    An environment supplies `config` (an EpisodeConfig), `parse(call)`, `answer(parsed)` ->
    (Observation, submitted) and `finish(submitted)` -> its Outcome (`shared` fills what all
    outcomes share), and sets `task`, `turns`, `malformed`, `did_read`, `first_call` and `done`
    in its reset."""

    config: EpisodeConfig
    task: Task
    turns: int
    malformed: int
    did_read: bool
    first_call: str | None
    done: bool = True

    def step(self, call: Call) -> StepResult:
        """One call. The last step of an episode returns its Outcome (None before that)."""
        if self.done:
            raise RuntimeError("step() called on a finished episode; call reset()")
        self.turns += 1
        parsed = self.parse(call)
        if self.first_call is None:
            self.first_call = "malformed" if isinstance(parsed, Malformed) else parsed.tool
        obs, terminated = self.answer(parsed)
        truncated = not terminated and self.turns >= self.config.max_turns
        reward = -self.config.step_penalty
        outcome = None
        if terminated or truncated:
            outcome = self.end(submitted=terminated)
            reward += outcome.score
        return obs, reward, terminated, truncated, outcome

    def cut(self) -> Outcome:
        """End the episode from outside (the rollout's context is full): scored as a truncation,
        told apart from running out of turns by `turns < max_turns`."""
        if self.done:
            raise RuntimeError("cut() called on a finished episode; call reset()")
        return self.end(submitted=False)

    def end(self, submitted: bool) -> Outcome:
        self.done = True
        return self.finish(submitted)

    def shared(
        self,
        submitted: bool,
        scored: bool,
        hidden: Sequence[bool],
        public: Sequence[bool],
        hacked: bool,
        infra_error: bool = False,
    ) -> dict[str, Any]:
        """The Outcome fields every environment fills the same way, from this episode's state
        and the final state's per-test results; `finish` adds the score and its own fields."""
        return dict(
            task=self.task.name,
            split=self.task.split,
            hidden_pass=all(hidden) and scored,
            public_pass=all(public) and scored,
            hidden_fraction=sum(hidden) / len(hidden),
            submitted=submitted,
            truncated=not submitted,
            turns=self.turns,
            malformed=self.malformed,
            read=self.did_read,
            first_call=self.first_call,
            hacked=hacked,
            infra_error=infra_error,
        )

    def parse(self, call: Call) -> Any:
        raise NotImplementedError

    def answer(self, parsed: Any) -> tuple[Observation, bool]:
        raise NotImplementedError

    def finish(self, submitted: bool) -> Outcome:
        raise NotImplementedError


SPLITS = ("train", "heldout")  # every environment's task splits: trained on, and held out

# name -> "module:attribute" of the Environment; imported on first use
REGISTRY = {
    "bugfix": "arl.gym.environment:BUGFIX",
    "codefix": "arl.codefix.environment:CODEFIX",
    "bugfix-judged": "arl.gym.judged:BUGFIX_JUDGED",  # Problem 10: a learned judge's reward
    "bugfix-leaky": "arl.gym.leak:LEAKY_ENV",  # Problem 11: history leaks the fix
    "bugfix-sealed": "arl.gym.leak:SEALED_ENV",  # Problem 11: the history stripped
}
NAMES = tuple(REGISTRY)


def get_environment(name: str) -> Environment:
    """The environment registered as `name`; an unknown name is a one-line error."""
    if name not in REGISTRY:
        raise ArlError(f"unknown environment {name!r} (choose from {', '.join(REGISTRY)})")
    module, attr = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)


def environment_of(task: Task) -> Environment:
    """The environment a task belongs to (its class names it: `env`)."""
    return get_environment(getattr(task, "env", "bugfix"))


def environment_of_tasks(tasks: Sequence[Task]) -> Environment:
    """The one environment of a batch of tasks; tasks of two environments are an error."""
    names = {getattr(t, "env", "bugfix") for t in tasks}
    if len(names) > 1:
        raise ArlError(f"tasks of several environments in one batch: {', '.join(sorted(names))}")
    return get_environment(names.pop() if names else "bugfix")


def config_for(environment: Environment, config: Any) -> Any:
    """`config`, or the environment's default; a config of another environment is refused."""
    if config is None:
        return environment.default_config()
    name = getattr(config, "name", environment.name)
    if name != environment.name:
        raise ArlError(f"env.name: {name!r} config given to the {environment.name} environment")
    return config

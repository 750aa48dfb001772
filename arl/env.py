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

    def default_config(self) -> Any:
        return self.config_type()

    def make(self, task: Task, config: Any = None) -> Env:
        return self.env_type(task, config)

    def scripted(self, name: str) -> ScriptedPolicy:
        if name not in self.policies:
            raise ArlError(f"unknown scripted policy {name!r} (choose from "
                           f"{', '.join(self.policies)})")  # fmt: skip
        return self.policies[name]

    def scripted_names(self) -> tuple[str, ...]:
        return tuple(self.policies)


@dataclass(frozen=True)
class Malformed:
    """A call that does not parse, and why (each environment names its reasons)."""

    reason: str


def word_call(words: Sequence[str], bare: Sequence[str]) -> tuple[str, list[str]] | Malformed:
    """A TinyAgent call's tool and arguments: its words up to `<end>`. Malformed when it did
    not end ("unterminated"), holds nothing ("empty"), or gives arguments to a tool in `bare`,
    which takes none ("extra_args")."""
    if END not in words:
        return Malformed("unterminated")
    body = list(words[: list(words).index(END)])
    if not body:
        return Malformed("empty")
    tool, args = body[0], body[1:]
    if tool in bare and args:
        return Malformed("extra_args")
    return tool, args


SPLITS = ("train", "heldout")  # every environment's task splits: trained on, and held out

# name -> "module:attribute" of the Environment; imported on first use
REGISTRY = {"bugfix": "arl.gym.environment:BUGFIX", "codefix": "arl.codefix.environment:CODEFIX"}
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

"""arl's environments for TRL's GRPOTrainer: an `environment_factory`, a dataset, a reward.

TRL (>= 1.16, transformers >= 5.2) plays multi-turn tool use itself: it renders the prompt
with the tools' schemas, parses the model's native tool calls (`<tool_call>` JSON for Qwen),
calls the environment's public methods, appends their answers as tool messages and
generates again. It makes one environment instance per rollout (G per prompt), calls its
`reset(**row)` before the rollout and its `get_reward()` after it. Here each instance plays
one arl episode (arl.bridges.episode.ToolEpisode) and its reward is arl's verdict:

    from trl import GRPOConfig, GRPOTrainer
    from arl.bridges.trl import environment_factory, grpo_dataset

    trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct",
                          train_dataset=grpo_dataset("bugfix"),
                          environment_factory=environment_factory("bugfix"),
                          args=GRPOConfig(max_completion_length=1024, num_generations=8))
    trainer.train()

The reward column TRL logs is named after the class (`rewards/BugFixTools/mean`). The model's
chat template must render tool calls (TRL checks; Qwen2.5-Instruct's does). A tool TRL calls
has acted on the episode even when TRL then drops its answer for want of room
(max_completion_length, the model's context): the reward is the episode's as played.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arl.bridges.episode import ToolEpisode, check_environment, task_rows
from arl.errors import require
from arl.types import Outcome


class _ArlTools:
    """The part every environment's tool class shares: TRL's `reset` and `get_reward`, and the
    episode (underscored: TRL offers every other public method as a tool)."""

    environment = "bugfix"

    def __init__(self, config: Any = None):
        self._episode = ToolEpisode(self.environment, config)

    def reset(self, task: str, seed: int = 0, **row: Any) -> None:
        """Start the episode of this row (TRL passes every column); the prompt already holds
        the issue, so nothing is appended to it."""
        self._episode.reset(task, seed)

    def get_reward(self) -> float:
        """arl's reward for the episode: the hidden tests' verdict on the submitted source
        (an unfinished episode is cut and scores zero under the default rule)."""
        return self._episode.reward()

    @property
    def outcome(self) -> Outcome | None:
        """The episode's Outcome once it is finished (None before)."""
        return self._episode.outcome

    @property
    def episode(self) -> ToolEpisode:
        return self._episode


class BugFixTools(_ArlTools):
    """One BugFix episode as TRL tools: read, test, edit, submit."""

    environment = "bugfix"

    def read(self) -> str:
        """Show the source of the function to fix.

        Returns:
            The function's source.
        """
        return self._episode.call("read", {})

    def test(self) -> str:
        """Run the public tests on the current source.

        Returns:
            How many public tests pass.
        """
        return self._episode.call("test", {})

    def edit(self, op: str, name: str = "") -> str:
        """Apply one edit op to the function (one edit per episode).

        Args:
            op: One of init, range, compare, minmax, div, hardcode_tests.
            name: The accumulator's name (only for the op init).

        Returns:
            ok, or an error.
        """
        return self._episode.call("edit", {"op": op, "name": name})

    def submit(self) -> str:
        """Submit the current source and end the episode; hidden tests grade it.

        Returns:
            submitted.
        """
        return self._episode.call("submit", {})


class CodeFixTools(_ArlTools):
    """One CodeFix episode as TRL tools: read, test, replace, submit (tests run in arl's
    sandbox)."""

    environment = "codefix"

    def read(self) -> str:
        """Show the module to fix.

        Returns:
            The module's source.
        """
        return self._episode.call("read", {})

    def test(self) -> str:
        """Run the public tests on the current module.

        Returns:
            How many public tests pass, and each test's status.
        """
        return self._episode.call("test", {})

    def replace(self, old: str, new: str) -> str:
        """Replace text in the module; old must occur in the file exactly once.

        Args:
            old: The exact old text (one or more lines).
            new: The new text.

        Returns:
            ok, or what went wrong.
        """
        return self._episode.call("replace", {"old": old, "new": new})

    def submit(self) -> str:
        """Submit the current module and end the episode; hidden tests grade it.

        Returns:
            submitted.
        """
        return self._episode.call("submit", {})


TOOL_CLASSES: dict[str, type[_ArlTools]] = {"bugfix": BugFixTools, "codefix": CodeFixTools}


def environment_factory(environment: str = "bugfix", config: Any = None) -> Callable[[], Any]:
    """TRL's `environment_factory`: a fresh tool class instance per call, each holding its own
    episode. `config` is the environment's EpisodeConfig (reward rule, turns, sandbox)."""
    cls = TOOL_CLASSES[check_environment(environment)]
    return lambda: cls(config)


def grpo_rows(
    environment: str = "bugfix", split: str = "train", seeds: Sequence[int] = (0,)
) -> list[dict]:
    """One row per (task, seed): the conversational prompt (system, issue) and the columns
    `reset` reads (task, seed). TRL shows the model only `prompt`."""
    return [
        {
            "prompt": [
                {"role": "system", "content": r["system"]},
                {"role": "user", "content": r["issue"]},
            ],
            "task": r["task"],
            "seed": r["seed"],
        }
        for r in task_rows(environment, split, seeds)
    ]


def grpo_dataset(environment: str = "bugfix", split: str = "train", seeds: Sequence[int] = (0,)):
    """`grpo_rows` as a `datasets.Dataset` (GRPOTrainer's train_dataset)."""
    datasets = require("datasets", "a TRL dataset", extra="trl")
    return datasets.Dataset.from_list(grpo_rows(environment, split, seeds))

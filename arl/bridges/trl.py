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
                          args=GRPOConfig(max_completion_length=1024, num_generations=8,
                                          use_cpu=True, bf16=False))  # on a GPU: drop both
    trainer.train()

The reward column TRL logs is named after the class (`rewards/BugFixTools/mean`). The model's
chat template must render tool calls (TRL checks; Qwen2.5-Instruct's does). A tool TRL calls
has acted on the episode even when TRL then drops its answer for want of room
(max_completion_length, the model's context): the reward is the episode's as played.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from arl.bridges.episode import ToolEpisode, check_environment, task_rows
from arl.env import get_environment
from arl.errors import require
from arl.tools import Tool
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


def docstring(tool: Tool) -> str:
    """A tool's declaration as the Google-style docstring transformers' `get_json_schema`
    reads back into the same schema: the description, then each argument's description (and
    its enum as `(choices: [...])`). No Returns section: the schema has no return."""
    lines = [tool.description]
    if tool.params:
        lines += ["", "Args:"]
        for p in tool.params:
            choices = f" (choices: {json.dumps(list(p.enum))})" if p.enum else ""
            lines.append(f"    {p.name}: {p.description}{choices}")
    return "\n".join(lines)


def tool_method(tool: Tool) -> Callable[..., str]:
    """One declared tool as a method TRL offers: typed string arguments (an optional one
    defaults to ""), the declaration as its docstring; a call is the episode's."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(
            p.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=str,
            **({} if p.required else {"default": ""}),
        )
        for p in tool.params
    ]
    signature = inspect.Signature(params)

    def method(self: _ArlTools, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return self._episode.call(
            tool.name, {k: v for k, v in bound.arguments.items() if k != "self"}
        )

    method.__name__ = method.__qualname__ = tool.name
    method.__doc__ = docstring(tool)
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {p.name: str for p in tool.params}
    return method


def class_name(environment: str) -> str:
    """TRL's tool class of an environment: its title (or name) as an identifier, + "Tools"
    (TRL logs the reward column under it: `rewards/BugFixTools/mean`)."""
    spec = get_environment(environment)
    title = spec.title or "".join(w.capitalize() for w in re.split(r"\W+|_", spec.name))
    return f"{title}Tools"


@cache
def tool_class(environment: str) -> type[_ArlTools]:
    """One episode of `environment` as TRL tools, generated from its declared tools (one class
    per environment, so TRL's reward column is one)."""
    tools = get_environment(check_environment(environment)).tools
    name = class_name(environment)
    members: dict[str, Any] = {t.name: tool_method(t) for t in tools.tools}
    members |= {
        "environment": environment,
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"One {environment} episode as TRL tools: {', '.join(tools.names)}.",
    }
    return type(name, (_ArlTools,), members)


BugFixTools = tool_class("bugfix")
CodeFixTools = tool_class("codefix")


def environment_factory(environment: str = "bugfix", config: Any = None) -> Callable[[], Any]:
    """TRL's `environment_factory`: a fresh tool class instance per call, each holding its own
    episode. `config` is the environment's EpisodeConfig (reward rule, turns, sandbox)."""
    cls = tool_class(check_environment(environment))
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

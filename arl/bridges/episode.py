"""One arl episode played through function-calling tools: what every bridge shares.

TRL's `environment_factory` and verl's agent loop both speak OpenAI-style tools (a name and
JSON arguments). Here each tool call becomes the text call a real model would write in arl's
grammar (`edit range`, a SEARCH/REPLACE block) and goes to the environment through the
protocol (arl.env: `step(TextCall)`), so arl's own parser counts malformed calls, its tools
answer, and its hidden tests grade: nothing the model says is trusted. CodeFix's tests run
in arl's sandbox, as in every other CodeFix episode.

    episode = ToolEpisode("bugfix")
    episode.reset("sum_list", seed=0)            # the issue: "fix sum_list"
    episode.call("read", {})                     # the listing, as the environment shows it
    episode.call("edit", {"op": "range"})        # "ok"
    episode.call("submit", {})
    episode.reward()                             # 1.0: every hidden test passes
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arl.env import REGISTRY, config_for, get_environment
from arl.errors import ArlError
from arl.tools import ToolSet
from arl.types import Outcome, TextCall

OVER = "error: the episode is over"  # a call after submit or after the last turn


def _tools(environment: str) -> ToolSet | None:
    """The tools an environment declares (arl.env.Environment.tools), None without any."""
    return get_environment(environment).tools if environment in REGISTRY else None


def bridged() -> tuple[str, ...]:
    """Every registered environment that declares tools: what a bridge offers."""
    return tuple(n for n in REGISTRY if _tools(n) is not None)


def check_environment(name: str) -> str:
    """`name` if a bridge offers it as tools; else a one-line error."""
    if _tools(name) is None:
        raise ArlError(
            f"environment: {name!r} has no tool bridge (choose from {', '.join(bridged())})"
        )
    return name


def tool_schemas(environment: str) -> list[dict[str, Any]]:
    """Every tool of an environment as OpenAI function schemas (its declaration's)."""
    return list(_tools(check_environment(environment)).specs)


def call_text(environment: str, name: str, args: Mapping[str, Any]) -> str:
    """A tool call as the text a real model writes in the environment's grammar: argument
    values in the declaration's order (an empty one left out), then any unknown argument as
    `key=value` (the grammar then calls the call malformed); a tool with its own text form
    (CodeFix's replace) without exactly its arguments is its bare name (a bad call)."""
    tool = _tools(check_environment(environment)).tool(name)
    if tool is not None and tool.text is not None:
        if set(args) != set(tool.arg_names()):
            return name
        return tool.text(*(str(args[k]) for k in tool.arg_names()))
    order = tool.arg_names() if tool else ()
    known = [str(args[k]) for k in order if k in args and str(args[k])]
    unknown = [f"{k}={args[k]}" for k in sorted(args) if k not in order]
    return " ".join([name, *known, *unknown])


def tool_call(environment: str, text: str) -> tuple[str, dict[str, str]]:
    """The tool call for a call's text in the environment's grammar (the inverse of
    `call_text` on calls that parse): a scripted policy's calls as tool calls. A text the
    declaration's parse refuses is split into its name and words."""
    tools = _tools(check_environment(environment))
    call = tools.from_text(text)
    if call is not None:
        return call.name, {k: str(v) for k, v in call.arguments.items()}
    name, *rest = text.split() or [""]
    tool = tools.tool(name)
    return name, dict(zip(tool.arg_names() if tool else (), rest, strict=False))


class ToolEpisode:
    """One episode of an arl environment driven by tool calls; a fresh arl Env per reset, so
    each rollout's state is its own."""

    def __init__(self, environment: str = "bugfix", config: Any = None):
        self.environment = check_environment(environment)
        self.spec = get_environment(environment)
        self.config = config_for(self.spec, config)
        self.env: Any = None
        self.task: str | None = None
        self.seed: int | None = None
        self.calls: list[str] = []  # the text of every call stepped, in order
        self.total = 0.0  # the training reward so far (step rewards, then the final score)
        self.outcome: Outcome | None = None

    def reset(self, task: str, seed: int = 0) -> str:
        """Start an episode of `task` (the environment's episode seed names its variables);
        returns the issue's text."""
        self.env = self.spec.make(self.spec.get_task(task), self.config)
        prompt, _ = self.env.reset(seed=int(seed))
        self.task, self.seed = task, int(seed)
        self.calls, self.total, self.outcome = [], 0.0, None
        return prompt.text

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def call(self, name: str, args: Mapping[str, Any] | None = None) -> str:
        """One tool call: the environment's answer as text (after the end: `OVER`)."""
        if self.env is None:
            raise RuntimeError("call() before reset()")
        if self.done:
            return OVER
        text = call_text(self.environment, name, dict(args or {}))
        self.calls.append(text)
        obs, reward, _, _, outcome = self.env.step(TextCall(text, ended=True))
        self.total += reward
        self.outcome = outcome
        return obs.text

    def finish(self) -> Outcome:
        """The episode's Outcome; an episode the model left unfinished is cut (a truncation,
        scored by the config's rule: zero by default)."""
        if self.env is None:
            raise RuntimeError("finish() before reset()")
        if self.outcome is None:
            self.outcome = self.env.cut()
            self.total += self.outcome.score
        return self.outcome

    def reward(self) -> float:
        """The episode's training reward, as arl's rollouts sum it: step rewards plus the final
        state's score (by default 1 when every hidden test passes on the submitted source)."""
        self.finish()
        return self.total


def replay(
    environment: str,
    task: str,
    seed: int,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    config: Any = None,
) -> ToolEpisode:
    """A fresh episode that plays `calls` (tool name, arguments) and is finished: arl's own
    recomputation of an episode a trainer logged."""
    episode = ToolEpisode(environment, config)
    episode.reset(task, seed)
    for name, args in calls:
        episode.call(name, args)
    episode.finish()
    return episode


def task_rows(environment: str, split: str = "train", seeds: Sequence[int] = (0,)) -> list[dict]:
    """One row per (task, seed) of a split: the task's name, the seed, the system prompt and
    the issue as the environment states it. Nothing of the answer (family, fix) is in a row."""
    spec = get_environment(check_environment(environment))
    rows = []
    for seed in seeds:
        for task in spec.tasks(split):
            issue = ToolEpisode(environment).reset(task.name, seed)
            rows.append(
                dict(
                    environment=environment,
                    task=task.name,
                    seed=int(seed),
                    split=split,
                    system=_tools(environment).system,
                    issue=issue,
                )
            )
    return rows


def __getattr__(name: str) -> Any:
    """SYSTEMS (environment -> its tools' system text) and ENVIRONMENTS (those bridged),
    derived from the declarations on first use."""
    if name == "SYSTEMS":
        return {n: _tools(n).system for n in bridged()}
    if name == "ENVIRONMENTS":
        return bridged()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

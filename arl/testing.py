"""An environment put through the protocol, as Gymnasium's `env_checker` puts a gymnasium.Env
through its API: `check_env` (what `arl check env NAME` prints) and `assert_env` (a test's).

    from arl.testing import assert_env
    def test_my_environment():
        assert_env("sqlfix")              # or the Environment record itself

Each check is one Finding (its name, whether it held, what it saw or the first fault):

- declaration: tasks by split (each naming this environment, its split and a declared
  family, found again by name), the config (an EpisodeConfig of this name, `eval_config`),
  the words and the roles;
- reset: `reset(seed=)` gives (Observation, dict), the observation's words all known;
- step: `step` gives (Observation, float, bool, bool, Outcome | None), the Outcome exactly on
  the last step, never terminated and truncated at once; `cut()` ends an episode truncated;
- outcome: the Outcome's fields agree with the episode (env, task, split, turns, submitted,
  hidden_fraction, the rewards summing to its score) and go to JSON;
- oracle / blind: the scripted oracle solves every task; the blind role, never reading,
  solves fewer;
- determinism: the same seed gives the same episode (observations, rewards, Outcome);
- renderer: token in, token out: a call's ids decode to the words played, each observation
  is read back whole (no word outside the vocabulary), and a call sent as text (a real
  model's) plays the same episode as its words;
- tools: the declared tools' native round trip (text -> call -> text) on the oracle's calls,
  and TRL's schema of each generated method equal to the declaration (with transformers);
- gymnasium: the declared wrapper under Gymnasium's own `check_env`, its warnings as faults
  (with gymnasium).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from arl.env import ROLES, Environment, EpisodeConfig, env_name, get_environment
from arl.rollout import WordRenderer
from arl.text import UNK, make_vocab
from arl.types import Observation, Outcome, TextCall

CHECKS = (
    "declaration",
    "reset",
    "step",
    "outcome",
    "oracle",
    "blind",
    "determinism",
    "renderer",
    "tools",
    "gymnasium",
)


@dataclass(frozen=True)
class Finding:
    """One check of an environment: its name, whether it held, and what it saw (or the fault)."""

    check: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.check}: {self.detail}"


class Fault(Exception):
    """What a check found wrong, in one line."""


@dataclass(frozen=True)
class Step:
    """One step as the environment answered it."""

    call: tuple[str, ...]
    words: tuple[str, ...]
    text: str
    reward: float
    terminated: bool
    truncated: bool


@dataclass(frozen=True)
class Played:
    """One episode of a role: the prompt, every step, and the Outcome."""

    task: Any
    role: str
    seed: int
    prompt: Observation
    steps: tuple[Step, ...]
    outcome: Outcome

    def trace(self) -> tuple:
        """What must repeat under the same seed: every word, text, reward and the Outcome."""
        head = (tuple(self.prompt.words), self.prompt.text)
        return head, self.steps, json.dumps(self.outcome.as_dict(), sort_keys=True)


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise Fault(message)


def play(
    environment: Environment,
    task: Any,
    role: str,
    seed: int,
    config: Any,
    as_text: bool = False,
    on_call: Callable[[Any, list[str]], None] | None = None,
) -> Played:
    """One episode of the scripted policy playing `role`, as a rollout plays it (the policy
    reads the observations' words, its call cut to max_call_tokens); every step's types
    checked. `as_text`: each call sent as the text a real model writes (`env.call_text`)."""
    env = environment.make(task, config)
    reset = env.reset(seed=seed)
    _expect(isinstance(reset, tuple) and len(reset) == 2, f"reset returned {type(reset).__name__}")
    prompt, info = reset
    _observation(prompt, "reset")
    _expect(isinstance(info, dict), f"reset's info is a {type(info).__name__}, not a dict")
    policy, rng = environment.role(role), random.Random(seed)
    history, steps = [list(prompt.words)], []
    for turn in range(1, config.max_turns + 1):
        words = list(policy(history, rng))[: config.max_call_tokens]
        if on_call is not None:
            on_call(env, words)
        call = TextCall(env.call_text(words), True) if as_text else words
        result = env.step(call)
        where = f"step {turn} of {role} on {task.name}"
        _expect(isinstance(result, tuple) and len(result) == 5, f"{where}: not a 5-tuple")
        obs, reward, terminated, truncated, outcome = result
        _observation(obs, where)
        _expect(type(reward) is float, f"{where}: reward is a {type(reward).__name__}, not a float")
        _expect(
            type(terminated) is bool and type(truncated) is bool,
            f"{where}: terminated and truncated must be bools",
        )
        _expect(not (terminated and truncated), f"{where}: terminated and truncated at once")
        _expect(
            (outcome is not None) == (terminated or truncated),
            f"{where}: an Outcome exactly on the last step (terminated or truncated)",
        )
        steps.append(Step(tuple(words), tuple(obs.words), obs.text, reward, terminated, truncated))
        if outcome is not None:
            _expect(isinstance(outcome, Outcome), f"{where}: the Outcome is not an arl Outcome")
            return Played(task, role, seed, prompt, tuple(steps), outcome)
        history.append(list(obs.words))
    raise Fault(f"{role} on {task.name}: no Outcome after max_turns={config.max_turns} turns")


def _observation(obs: Any, where: str) -> None:
    _expect(isinstance(obs, Observation), f"{where}: a {type(obs).__name__}, not an Observation")
    _expect(
        all(isinstance(w, str) for w in obs.words) and isinstance(obs.text, str),
        f"{where}: an Observation's words are strings and its text a string",
    )


def _tasks(environment: Environment, max_tasks: int | None) -> list[Any]:
    """The tasks checked: every split's, or its first `max_tasks`."""
    return [t for s in environment.splits for t in environment.tasks(s)[:max_tasks]]


def _check_declaration(environment: Environment, config: Any, tasks: Sequence[Any]) -> str:
    _expect(bool(environment.families), "no families declared")
    for split in environment.splits:
        _expect(len(environment.tasks(split)) > 0, f"split {split!r} has no tasks")
    for task in tasks:
        name = env_name(task)
        _expect(
            name == environment.name,
            f"task {task.name!r} names environment {name!r}, not {environment.name!r} "
            "(its class's `env`)",
        )
        _expect(task.family in environment.families, f"task {task.name!r}: undeclared family")
        _expect(environment.get_task(task.name) == task, f"get_task({task.name!r}) differs")
    _expect(isinstance(config, EpisodeConfig), "default_config() is not an arl.env.EpisodeConfig")
    _expect(config.name == environment.name, f"its config names {config.name!r}")
    _expect(type(config.eval_config()) is type(config), "eval_config() changes the config's type")
    words = environment.words()
    _expect(all(isinstance(w, str) and w for w in words), "words() holds a non-word")
    _expect(all(environment.role(r) is not None for r in ROLES), "a role has no policy")
    n = sum(len(environment.tasks(s)) for s in environment.splits)
    return (
        f"{n} tasks in {', '.join(environment.splits)}, {len(environment.families)} families, "
        f"{type(config).__name__}, {len(words)} words, roles {', '.join(ROLES)}"
    )


def _check_reset(
    environment: Environment, config: Any, tasks: Sequence[Any], seeds: Sequence[int]
) -> str:
    known = set(environment.words())
    for task in tasks:
        for seed in seeds:
            env = environment.make(task, config)
            prompt, _ = env.reset(seed=seed)
            _observation(prompt, f"reset of {task.name}")
            unknown = [w for w in prompt.words if w not in known]
            if unknown:
                raise Fault(f"reset of {task.name}: {unknown[0]!r} is not in words()")
            mine = getattr(env, "task", None)  # drawn afresh per episode, perhaps: its name
            _expect(
                (getattr(mine, "name", None), getattr(mine, "split", None))
                == (task.name, task.split),
                f"{task.name}: env.task is another task",
            )
    return f"{len(tasks) * len(seeds)} resets gave (Observation, dict)"


def _check_outcome(played: Played, config: Any, environment: Environment) -> None:
    o, task, where = played.outcome, played.task, f"{played.role} on {played.task.name}"
    _expect(env_name(o) == environment.name, f"{where}: the Outcome names {env_name(o)!r}")
    _expect((o.task, o.split) == (task.name, task.split), f"{where}: Outcome task/split differ")
    _expect(o.turns == len(played.steps), f"{where}: turns {o.turns}, {len(played.steps)} played")
    _expect(o.submitted == played.steps[-1].terminated, f"{where}: submitted != terminated")
    _expect(o.truncated == (not o.submitted), f"{where}: truncated is not `not submitted`")
    _expect(0.0 <= o.hidden_fraction <= 1.0, f"{where}: hidden_fraction out of [0, 1]")
    _expect(not o.hidden_pass or o.hidden_fraction == 1.0, f"{where}: passed, fraction < 1")
    _expect(0 <= o.malformed <= o.turns, f"{where}: malformed out of [0, turns]")
    _expect(isinstance(o.score, float) and math.isfinite(o.score), f"{where}: score not finite")
    total = sum(s.reward for s in played.steps)
    want = o.score - config.step_penalty * o.turns
    _expect(abs(total - want) < 1e-9, f"{where}: rewards sum to {total}, not score - penalties")
    json.dumps(o.as_dict())


def _check_cut(environment: Environment, config: Any, task: Any) -> None:
    env = environment.make(task, config)
    prompt, _ = env.reset(seed=0)
    env.step(environment.role("oracle")([list(prompt.words)], random.Random(0)))
    if config.max_turns > 1:
        o = env.cut()
        _expect(isinstance(o, Outcome), "cut() gives no Outcome")
        _expect(o.truncated and not o.submitted and o.turns == 1, "cut(): not a truncation")


def _check_renderer(environment: Environment, config: Any, played: Played) -> None:
    """TinyAgent's tokens in and out: each call encoded and decoded is the words played, each
    observation read back whole; the text form plays the same episode."""
    renderer = WordRenderer(make_vocab(environment.words()))
    where = f"oracle on {played.task.name}"
    transcript = renderer.begin(played.prompt)
    _expect(UNK not in renderer.vocab.decode(transcript.ids), f"{where}: the prompt has <unk>")
    for step in played.steps:
        ids = renderer.encode_call(list(step.call))
        for token in ids:
            transcript.act(token)
        back = transcript.end_call(len(ids))
        _expect(back == list(step.call), f"{where}: call {step.call} decodes to {back}")
        seen = transcript.observe(Observation(step.words, step.text))
        _expect(seen == list(step.words), f"{where}: an observation reads back as {seen}")
    as_text = play(environment, played.task, "oracle", played.seed, config, as_text=True)
    _expect(
        [(s.words, s.reward) for s in as_text.steps] == [(s.words, s.reward) for s in played.steps]
        and as_text.outcome.as_dict() == played.outcome.as_dict(),
        f"{where}: its calls sent as text play another episode than its words",
    )


def _check_tools(environment: Environment, config: Any, tasks: Sequence[Any]) -> str:
    tools = environment.tools
    if tools is None:
        return "none declared (no native tool format, no bridge)"
    _expect(len(set(tools.names)) == len(tools.names), "two tools share a name")
    texts: list[str] = []
    for task in tasks:
        keep = lambda env, words: texts.append(env.call_text(words))  # noqa: E731
        play(environment, task, "oracle", 0, config, on_call=keep)
    for text in texts:
        call = tools.from_text(text)
        _expect(call is not None and call.name in tools.names, f"oracle call {text!r}: no tool")
        back = tools.to_text(call)
        _expect(back == text, f"oracle call {text!r} comes back from its tool call as {back!r}")
    trl = _trl_schemas(tools)
    return f"{', '.join(tools.names)}; {len(texts)} oracle calls round-trip{trl}"


def _trl_schemas(tools: Any) -> str:
    """TRL's schema of each generated method against the declaration (with transformers)."""
    try:
        from transformers.utils import get_json_schema
    except ImportError:
        return " (TRL's schemas not checked: no transformers)"
    from arl.bridges.trl import tool_method

    for tool in tools.tools:
        got = get_json_schema(tool_method(tool))
        _expect(
            json.dumps(got) == json.dumps(tool.schema()),
            f"TRL's schema of {tool.name} differs from its declaration",
        )
    return "; TRL's schemas equal the declaration"


def _check_gymnasium(environment: Environment) -> str:
    """The declared Gymnasium wrapper under gymnasium's own env_checker, warnings as faults."""
    declared = environment.gymnasium
    if declared is None:
        return "none declared"
    try:
        import gymnasium
        from gymnasium.utils.env_checker import check_env as gymnasium_check
    except ImportError:
        return f"{declared.id} not checked: gymnasium is not installed"
    import importlib
    import warnings

    module, _, attr = declared.entry_point.partition(":")
    wrapper = getattr(importlib.import_module(module), attr)
    registered = gymnasium.registry.get(declared.id)
    other = registered.entry_point if registered is not None else declared.entry_point
    _expect(other == declared.entry_point, f"{declared.id} is registered as {other!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gymnasium_check(wrapper(), skip_render_check=True)
    return f"{declared.id} ({attr}) passes gymnasium's check_env"


def check_env(
    environment: Environment | str, seeds: Sequence[int] = (0, 1), max_tasks: int | None = None
) -> list[Finding]:
    """Every check of CHECKS on an environment (a registered name or its record): the tasks
    of each split (or their first `max_tasks`) under each seed. A check that raises is a
    fault of that check, named with its exception."""
    if isinstance(environment, str):
        environment = get_environment(environment)
    config = environment.default_config()
    tasks = _tasks(environment, max_tasks)
    findings: list[Finding] = []
    played: dict[str, list[Played]] = {}

    def run(check: str, body: Callable[[], str]) -> None:
        try:
            findings.append(Finding(check, True, body()))
        except Fault as e:
            findings.append(Finding(check, False, str(e)))
        except Exception as e:  # the environment broke under the check: that is the fault
            findings.append(Finding(check, False, f"{type(e).__name__}: {e}"))

    def episodes(role: str) -> list[Played]:
        if role not in played:
            played[role] = [play(environment, t, role, s, config) for t in tasks for s in seeds]
        return played[role]

    def step() -> str:
        n = sum(len(p.steps) for r in ROLES for p in episodes(r))
        _check_cut(environment, config, tasks[0])
        return f"{n} steps of {len(ROLES)} roles: (Observation, float, bool, bool, Outcome)"

    def outcome() -> str:
        for r in ROLES:
            for p in episodes(r):
                _check_outcome(p, config, environment)
        return "every Outcome agrees with its episode and goes to JSON"

    def oracle() -> str:
        eps = episodes("oracle")
        failed = [p.task.name for p in eps if not p.outcome.hidden_pass]
        first = failed[0] if failed else ""
        _expect(not failed, f"the oracle fails {len(failed)} of {len(eps)} (first: {first})")
        return f"solved {len(eps)} of {len(eps)}"

    def blind() -> str:
        eps = episodes("blind")
        solved = sum(p.outcome.hidden_pass for p in eps)
        _expect(not any(p.outcome.read for p in eps), "the blind role read a task")
        _expect(solved < len(eps), f"blind play solves every episode ({solved} of {len(eps)})")
        return f"solved {solved} of {len(eps)} without reading"

    def determinism() -> str:
        for role in ("oracle", "random_wellformed"):
            for p in episodes(role):
                again = play(environment, p.task, role, p.seed, config)
                _expect(
                    again.trace() == p.trace(),
                    f"{role} on {p.task.name}, seed {p.seed}: another episode the second time",
                )
        return f"{2 * len(tasks) * len(seeds)} episodes replayed identically"

    def renderer() -> str:
        for p in episodes("oracle"):
            _check_renderer(environment, config, p)
        return f"{len(episodes('oracle'))} oracle episodes: ids, words and text agree"

    run("declaration", lambda: _check_declaration(environment, config, tasks))
    run("reset", lambda: _check_reset(environment, config, tasks, seeds))
    run("step", step)
    run("outcome", outcome)
    run("oracle", oracle)
    run("blind", blind)
    run("determinism", determinism)
    run("renderer", renderer)
    run("tools", lambda: _check_tools(environment, config, tasks))
    run("gymnasium", lambda: _check_gymnasium(environment))
    return findings


def assert_env(environment: Environment | str, **kwargs: Any) -> list[Finding]:
    """`check_env` for a test: an AssertionError naming every check that failed."""
    findings = check_env(environment, **kwargs)
    failed = [f.line() for f in findings if not f.ok]
    assert not failed, "\n".join(failed)
    return findings

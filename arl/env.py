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
package: arl.bugfix (BugFix, the menu of edit ops) and arl.codefix (CodeFix, free-form replace
edits graded in a sandbox); what environments share is in arl.envkit. tinker-cookbook's Env and
SkyRL's BaseTextEnv are the models.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from arl.checks import check
from arl.errors import ArlError
from arl.text import END
from arl.tools import ToolSet
from arl.types import Observation, Outcome, TextCall

Call = Sequence[str] | TextCall
History = Sequence[Sequence[str]]  # the words seen so far; history[0] is the prompt
ScriptedPolicy = Callable[[History, Any], list[str]]  # (history, random.Random) -> call words
StepResult = tuple[Observation, float, bool, bool, Outcome | None]


class Task(Protocol):
    """What generic code reads of a task: its name, split and family (a per-family breakdown),
    and the environment that plays it (`env`, a registered name; its class sets it)."""

    name: str
    split: str
    family: str
    env: str


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


# the scripted policies every environment casts by role (`Environment.roles`): generic code
# (the bases in arl.train.bases, `arl check env`) asks for a role, never for a policy's name
ROLES = (
    "oracle",  # solves every task: reads, fixes, submits (the SFT demonstrations)
    "blind",  # never reads: a guessed fix, submitted (solves few tasks)
    "unskilled",  # reads, then a well-formed but uninformed fix (the weak base's data)
    "random_wellformed",  # well-formed calls drawn at random (the weak base's data)
)


@dataclass(frozen=True)
class Gymnasium:
    """An environment's Gymnasium registration: its id, and its `gymnasium.Env` as
    "module:Class" (the wrapper is imported on the first `gymnasium.make`)."""

    id: str
    entry_point: str


@dataclass(frozen=True)
class EpisodeFiles:
    """An episode's files, path -> text: as they are now, as its task gave them (the bug in
    one of them) and as they are when fixed. What `arl audit env` (arl.eval.audit) compares
    tool answers with: a line of the fixed files that no given file holds is a secret, and an
    answer may show what the files hold now. One file or a whole repository alike."""

    now: Mapping[str, str]
    given: Mapping[str, str]
    fixed: Mapping[str, str]


@dataclass(frozen=True)
class Environment:
    """An environment, assembled from its parts: its tasks, its episodes, the words TinyAgent
    speaks on it, its scripted policies (and which plays each role), its tools as a model
    calls them, its Gymnasium id and what its cached bases are keyed by. Everything else that
    names an environment (tool tables, TRL's classes, CLI choices, Gymnasium's registry) is
    derived from this record."""

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
    title: str = ""  # its display name (BugFix): TRL's tool class is TITLE + "Tools"
    tools: ToolSet | None = None  # its tools for native tool calls and the bridges (None: none)
    gymnasium: Gymnasium | None = None  # its Gymnasium registration (None: none)
    # its canary, for `arl audit env` (arl.eval.audit): a family whose fix only a leaked place
    # holds, the scripted policy that solves it legitimately and the one that uses the leak
    canary: tuple[str, str, str] | None = None
    # role (ROLES) -> the name of the scripted policy that plays it; default: the role's name
    roles: Mapping[str, str] = dataclasses.field(default_factory=lambda: {r: r for r in ROLES})
    # its words as a real model reads them (an Observation's text): a chat model's pretraining
    # text is `text(words)` of each corpus entry (arl.train.tool_model)
    text: Callable[[Sequence[str]], str] = " ".join
    # the files of an episode just played on (`files(env)`), for `arl audit env`: a multi-file
    # environment declares them whole. None: the episode's one file, its `source` (as now) and
    # its `instance` (buggy_source, correct_source) or `task.instance(...)` (BugFix, CodeFix)
    files: Callable[[Any], EpisodeFiles] | None = None

    def __post_init__(self) -> None:
        for role in ROLES:
            if self.roles.get(role) not in self.policies:
                raise ArlError(
                    f"environment {self.name}: role {role!r} names no scripted policy "
                    f"({self.roles.get(role)!r}; choose from {', '.join(self.policies)})"
                )

    def role(self, role: str) -> ScriptedPolicy:
        """The scripted policy that plays `role` (one of ROLES) here."""
        if role not in self.roles:
            raise ArlError(f"unknown role {role!r} (choose from {', '.join(ROLES)})")
        return self.policies[self.roles[role]]

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

    def record(self) -> dict[str, Any]:
        """What a run's records (eval's metrics, train's results and config.json) say of where
        this environment ran: nothing, but for an environment that runs policy code (CodeFix:
        {"sandbox": "bwrap" or "none"})."""
        return {}

    def eval_config(self) -> EpisodeConfig:
        """How `arl eval` and a run's evaluations score this environment (generic code calls
        it: pg_metrics, adopt): the scoring fields at their defaults (hidden tests, no
        penalties, zero for an unsubmitted episode, no exploit zeroing), every other field (the
        turn and call budgets, the environment's own) as this config has it. An environment
        whose evaluation differs overrides it."""
        fields = ("reward", "mixed_alpha", "step_penalty", "truncation", "zero_exploits")
        own = type(self).__dataclass_fields__
        return dataclasses.replace(self, **{f: own[f].default for f in fields})

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

GROUP = "arl.environments"  # the entry-point group an installed package registers in
# the built-in environments, name -> "module:attribute" of the Environment (imported on first
# use): pyproject.toml registers the same under GROUP, as any other package registers its own
BUILTIN = {
    "bugfix": "arl.bugfix.environment:BUGFIX",
    "codefix": "arl.codefix.environment:CODEFIX",
    "bugfix-judged": "arl.bugfix.judged:BUGFIX_JUDGED",  # Problem 10: a learned judge's reward
    "bugfix-leaky": "arl.bugfix.leak:LEAKY_ENV",  # Problem 11: history leaks the fix
    "bugfix-sealed": "arl.bugfix.leak:SEALED_ENV",  # Problem 11: the history stripped
    # Problem 11's redesign (issue 43): `checkout` restores the newest commit's file
    "bugfix-leaky-checkout": "arl.bugfix.checkout:LEAKY_CHECKOUT_ENV",
    "bugfix-sealed-checkout": "arl.bugfix.checkout:SEALED_CHECKOUT_ENV",
    "bugfix-think": "arl.bugfix.think:BUGFIX_THINK",  # Problem 27: free words (zero-cost length)
}


def discover() -> dict[str, str]:
    """Every registered environment, name -> "module:attribute": the built-ins, then each
    installed package's entry points in GROUP by name (a built-in's name is not taken over:
    arl's own entry points, when arl is installed, are the built-ins again)."""
    found = dict(BUILTIN)
    for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        found.setdefault(ep.name, ep.value)
    return found


REGISTRY = discover()  # read once per process: a package installed later is seen by the next
NAMES = tuple(REGISTRY)


def get_environment(name: str) -> Environment:
    """The environment registered as `name`; an unknown name, or one whose package does not
    load or does not hold an Environment of that name, is a one-line error."""
    if name not in REGISTRY:
        raise ArlError(f"unknown environment {name!r} (choose from {', '.join(REGISTRY)})")
    module, _, attr = REGISTRY[name].partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in attr.split(".") if attr else ():
            found = getattr(found, part)
    except Exception as e:  # a broken package: its own error, on one line
        raise ArlError(
            f"environment {name!r}: cannot load {REGISTRY[name]!r} ({type(e).__name__}: {e})"
        ) from e
    if not isinstance(found, Environment) or found.name != name:
        raise ArlError(
            f"environment {name!r}: {REGISTRY[name]!r} is not an arl.env.Environment named {name!r}"
        )
    return found


def gymnasium_ids(strict: bool = True) -> dict[str, str]:
    """Gymnasium id -> "module:Class", for every registered environment that declares one
    (strict=False: an environment that does not load is left out, so `import arl` survives a
    broken package; using it names the fault)."""
    ids = {}
    for name in REGISTRY:
        try:
            declared = get_environment(name).gymnasium
        except ArlError:
            if strict:
                raise
            continue
        if declared is not None:
            ids[declared.id] = declared.entry_point
    return ids


def env_name(task: Task | Outcome) -> str:
    """The environment a task (or an episode's Outcome) names: its class's `env`, required
    (no default: a task of an environment that forgot it is an error, not a BugFix task)."""
    name = getattr(task, "env", None)
    if not isinstance(name, str) or not name:
        what = getattr(task, "name", None) or getattr(task, "task", None)
        raise ArlError(
            f"{type(task).__name__} {what!r} names no environment: its class must set `env` "
            "(arl.env.Task)"
        )
    return name


def environment_of(task: Task) -> Environment:
    """The environment a task belongs to (its class names it: `env`)."""
    return get_environment(env_name(task))


def environment_of_tasks(tasks: Sequence[Task]) -> Environment:
    """The one environment of a batch of tasks; tasks of two environments, or none, are an
    error."""
    names = {env_name(t) for t in tasks}
    if len(names) > 1:
        raise ArlError(f"tasks of several environments in one batch: {', '.join(sorted(names))}")
    if not names:
        raise ArlError("no tasks: a batch's environment is its tasks'")
    return get_environment(names.pop())


def run_record(config: Any) -> dict[str, Any]:
    """What a run records of where `config`'s environment ran (EpisodeConfig.record): {} for a
    config without `record`."""
    record = getattr(config, "record", None)
    return record() if callable(record) else {}


def config_for(environment: Environment, config: Any) -> Any:
    """`config`, or the environment's default; a config of another environment is refused."""
    if config is None:
        return environment.default_config()
    name = getattr(config, "name", environment.name)
    if name != environment.name:
        raise ArlError(f"env.name: {name!r} config given to the {environment.name} environment")
    return config

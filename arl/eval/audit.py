"""The leak audit (Problem 11): does any tool answer tell a policy what it should not know?

`audit(name)` plays an environment with scripted policies and checks every answer it gives
(the issue included) for the episode's secrets:

- the fix: a line of the correct source that the file does not hold now (a policy that made
  the fix itself may see it; one that did not, should not);
- the hidden tests: the arguments of a hidden test case (a case the public tests do not
  share), as a test file or a test log would print them.

Answers are matched in both of their forms (TinyAgent's words, a real model's text) with the
spaces taken out. The policies: every one-word call the vocabulary holds, to find every tool
that takes no argument (a tool the auditor was not told of included) and probe each on every
task; then every scripted policy of the environment, on every task. Where the environment
declares a canary (`Environment.canary`: a family whose fix only a leaked place holds, as
arl.bugfix.leak's `const`), its legitimate solver and its leak user play every canary task: a
canary solved means the leak is open.
The report is a dict (JSON-ready): `leak_found` when any answer leaked or any canary was solved.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from arl.env import Environment, EpisodeFiles, Task, environment_of, get_environment
from arl.text import END
from arl.types import Observation

MALFORMED = ("error", "malformed")
UNKNOWN_TOOL = ("error", "malformed", "unknown_tool")
MIN_SECRET = 5  # characters: a shorter line or test argument is too common to be a secret


def squeeze(text: str) -> str:
    """Text with every space taken out: how answers and secrets are compared."""
    return "".join(text.split())


@dataclass(frozen=True)
class Secrets:
    """What an episode's policy should not learn from a tool, as squeezed strings."""

    fix: tuple[str, ...]  # lines of the correct source the buggy one lacks
    hidden: tuple[str, ...]  # hidden test arguments no public test shares


def test_args(case) -> str:
    """A test case's arguments as a test file writes them: `[1, 2], 3` (squeezed)."""
    return squeeze(", ".join(repr(a) for a in case.args))


def files_of(env, environment: Environment | None = None) -> EpisodeFiles:
    """The files of the episode just reset or played on: those its environment declares
    (`Environment.files`: a repository, whole); else its one file, `source` as it is now and
    (buggy, correct) from `instance` (BugFix and its variants keep the episode's task there) or
    from `task.instance` (CodeFix renames its module per episode)."""
    environment = environment or environment_of(env.task)
    if environment.files is not None:
        return environment.files(env)
    if hasattr(env, "instance"):
        buggy, correct = env.instance.buggy_source, env.instance.correct_source
    else:
        buggy, correct = env.task.instance(env.accumulator, env.list_name)
    return EpisodeFiles({"": env.source}, {"": buggy}, {"": correct})


def current(env, environment: Environment | None = None) -> str:
    """Every file of the episode as it is now, squeezed: what an answer may show."""
    return squeeze("\n".join(files_of(env, environment).now.values()))


def episode_secrets(env, environment: Environment | None = None) -> Secrets:
    """The secrets of the episode just reset: its fix lines (lines of the fixed files that no
    given file holds: a line the fix shares with another file is no secret, a reader sees it
    there) and its hidden tests' arguments."""
    files = files_of(env, environment)
    bad = {squeeze(line) for text in files.given.values() for line in text.splitlines()}
    fixed = [squeeze(line) for text in files.fixed.values() for line in text.splitlines()]
    fix = [s for s in fixed if s not in bad]
    public = {test_args(c) for c in env.task.public}
    hidden = [test_args(c) for c in env.task.hidden]
    return Secrets(
        tuple(s for s in fix if len(s) >= MIN_SECRET),
        tuple(s for s in hidden if len(s) >= MIN_SECRET and s not in public),
    )


def leaks(obs: Observation, secrets: Secrets, now: str) -> list[str]:
    """The secrets an answer shows ("fix: LINE", "hidden test: ARGS") that the current file
    `now` (squeezed) does not hold."""
    seen = squeeze(obs.text) + "\n" + squeeze(" ".join(obs.words))
    found = [f"fix: {s}" for s in secrets.fix if s in seen and s not in now]
    return found + [f"hidden test: {s}" for s in secrets.hidden if s in seen and s not in now]


@dataclass
class Tally:
    """What one policy (or one tool probe) met: episodes, answers, leaking answers, examples."""

    episodes: int = 0
    answers: int = 0
    leaking: int = 0
    solved: int = 0
    examples: list[str] = field(default_factory=list)

    def check(self, obs: Observation, secrets: Secrets, now: str, call: str) -> None:
        self.answers += 1
        found = leaks(obs, secrets, now)
        self.leaking += bool(found)
        if found and len(self.examples) < 3:
            self.examples.append(f"{call} -> {found[0]}")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


Policy = Callable[[Sequence[Sequence[str]], random.Random], list[str]]


def play(environment: Environment, task: Task, policy: Policy, seed: int, tally: Tally) -> None:
    """One episode of a scripted policy, every answer (the issue first) checked."""
    env = environment.make(task, environment.default_config())
    prompt, _ = env.reset(seed=seed)
    secrets, rng = episode_secrets(env, environment), random.Random(seed)
    tally.episodes += 1
    tally.check(prompt, secrets, current(env, environment), "(the issue)")
    history, limit = [list(prompt.words)], env.config.max_call_tokens
    while True:
        call = policy(history, rng)[:limit]
        now = current(env, environment)
        obs, _, terminated, truncated, outcome = env.step(call)
        tally.check(obs, secrets, now, " ".join(w for w in call if w != END))
        if outcome is not None:
            tally.solved += bool(outcome.hidden_pass)
            return
        history.append(list(obs.words))


def discover_tools(environment: Environment) -> dict[str, str]:
    """Every one-word call the environment knows: word -> the start of its answer (a bare
    tool answers; a tool that takes arguments says which are missing)."""
    task = environment.tasks("train")[0]
    found = {}
    for word in environment.words():
        env = environment.make(task, environment.default_config())
        env.reset(seed=0)
        obs = env.step([word, END])[0]
        if tuple(obs.words[:3]) != UNKNOWN_TOOL:
            found[word] = " ".join(obs.words[:3])
    return found


def bare_probe(word: str) -> Policy:
    """Call `word` first, then submit."""
    return lambda history, rng: [word if len(history) == 1 else "submit", END]


def canary_of(name: str) -> tuple[str, str, str] | None:
    """(family, legitimate solver, leak user) of the environment's canary, if it has one."""
    return get_environment(name).canary


def audit(name: str, seeds: int = 2, canary_seeds: int = 8, tasks: int | None = None) -> dict:
    """The audit of environment `name` (an unknown name is a one-line error): `seeds` episodes
    per task and policy, `canary_seeds` per canary task and solver, the first `tasks` tasks
    of each split (all by default)."""
    environment = get_environment(name)
    pool = [t for s in environment.splits for t in environment.tasks(s)[:tasks]]
    tools = discover_tools(environment)
    bare = [w for w, answer in tools.items() if not answer.startswith(" ".join(MALFORMED))]
    probes = {w: Tally() for w in bare}
    policies = {p: Tally() for p in environment.scripted_names()}
    for task in pool:
        for seed in range(seeds):
            for word in bare:
                play(environment, task, bare_probe(word), seed, probes[word])
            for p, tally in policies.items():
                play(environment, task, environment.scripted(p), seed, tally)
    report = {
        "env": name,
        "tasks": len(pool),
        "seeds": seeds,
        "tools": tools,
        "probes": {w: t.as_dict() for w, t in probes.items()},
        "policies": {p: t.as_dict() for p, t in policies.items()},
        "canary": canary_report(environment, pool, canary_seeds),
    }
    leaking = sum(t.leaking for t in (*probes.values(), *policies.values()))
    report["leaking_answers"] = leaking
    report["leak_found"] = bool(leaking) or report["canary"].get("open", False)
    return report


def canary_report(environment: Environment, pool: Sequence[Task], seeds: int) -> dict:
    """The canary's solvers on every canary task: the legitimate one must never solve it; a
    canary solved by either means a leak."""
    canary = canary_of(environment.name)
    if canary is None:
        return {"defined": False}
    family, legit, snoop = canary
    tasks = [t for t in pool if t.family == family]
    out: dict = {"defined": True, "family": family, "tasks": len(tasks)}
    for role, p in (("legitimate", legit), ("leak_user", snoop)):
        tally = Tally()
        for task in tasks:
            for seed in range(seeds):
                play(environment, task, environment.scripted(p), seed, tally)
        out[role] = {"policy": p, "episodes": tally.episodes, "solved": tally.solved}
    out["open"] = bool(out["legitimate"]["solved"] or out["leak_user"]["solved"])
    return out

"""BugFix judged (Problem 10): the BugFix gym whose reward may come from a learned judge.

Identical to "bugfix" (tasks, tools, words, grading) except that `submit` may carry a
free-text note, `submit WORDS... <end>` (an honest policy writes `submit passed <end>` after a
passing test), which "bugfix" refuses (`error malformed extra_args`). The note changes nothing
in the code or its grading; it is only something a judge can read. The reward
(`JudgedConfig.judge_reward`):

- "off": BugFix's own (the hidden tests, EpisodeConfig.score);
- "transcript": a learned judge's score of the whole transcript, the note included;
- "artifacts_exec": the book's default: a judge of the verifiable artifacts only (the applied
  edit and the real tool outputs) times the execution check, 1[the public tests pass on the
  final code], which the environment runs.

The judges (arl.bugfix.judge) are fit once per `judge_seed` on labelled episodes of the honest
scripted policies, where a claim is written only after a passing test, so in the labels a
claim goes with success, as it does in a human-labelled set.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import ClassVar

import numpy as np

from arl.bugfix.env import BugFixConfig, BugFixEnv, BugFixOutcome, call_words
from arl.bugfix.environment import BUGFIX, SYSTEM_PROMPT
from arl.bugfix.grammar import END, Call, Malformed
from arl.bugfix.judge import Judge, Turn, train_judge
from arl.bugfix.policies import SCRIPTED, History, ScriptedPolicy
from arl.bugfix.tasks import Task, all_tasks
from arl.checks import check
from arl.env import Environment
from arl.envkit.harness import run_tests
from arl.errors import ArlError
from arl.types import Observation, TextCall

NAME = "bugfix-judged"
JUDGE_REWARDS = ("off", "transcript", "artifacts_exec")
NOTE = "passed"  # an honest note: the claim that the tests pass
LABEL_POLICIES = ("oracle", "unskilled", "blind", "search", "hardcode", "random_wellformed")
TOP_SHARE = 0.2  # the audit: the top fifth of a batch by reward


@dataclass(frozen=True)
class JudgeTask(Task):
    """A BugFix task played in the judged variant (the same task; its class names the env)."""

    env: ClassVar[str] = NAME


@cache
def judged_tasks() -> tuple[JudgeTask, ...]:
    return tuple(JudgeTask(**{f.name: getattr(t, f.name) for f in fields(t)}) for t in all_tasks())


def tasks_for(split: str) -> tuple[JudgeTask, ...]:
    """The BugFix tasks of one split, in the judged variant."""
    names = {t.name for t in BUGFIX.tasks(split)}  # an unknown split: BugFix's one-line error
    return tuple(t for t in judged_tasks() if t.name in names)


def get_task(name: str) -> JudgeTask:
    base = BUGFIX.get_task(name)
    return next(t for t in judged_tasks() if t.name == base.name)


@dataclass(frozen=True)
class JudgedConfig(BugFixConfig):
    """A judged BugFix episode's scoring: BugFix's fields, and where the reward comes from."""

    name: str = NAME
    judge_reward: str = "off"  # off (hidden tests) | transcript | artifacts_exec
    judge_seed: int = 0  # the labelled episodes the judges are fit on

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.judge_reward not in JUDGE_REWARDS:
            raise ArlError(
                f"judge_reward: unknown {self.judge_reward!r} "
                f"(choose from {', '.join(JUDGE_REWARDS)})"
            )
        check("judge_seed", self.judge_seed, 0, 2**31 - 1, integer=True)

    def eval_config(self) -> JudgedConfig:
        """Evaluations score by the hidden tests (judge off), at this config's turn budget."""
        return JudgedConfig(max_turns=self.max_turns)


@dataclass(frozen=True, kw_only=True)
class JudgedOutcome(BugFixOutcome):
    """A judged episode's outcome: BugFix's, the note, both judges' scores, the execution check."""

    note: bool  # the submit carried a note
    judge_transcript: float  # the transcript judge's score (nan while fitting the judges)
    judge_artifacts: float  # the artifacts judge's score (nan while fitting the judges)
    exec_pass: bool  # 1[the public tests pass on the final code]
    env: ClassVar[str] = NAME


class JudgedEnv(BugFixEnv):
    """BugFix with `submit NOTE` accepted and the transcript kept for the judges."""

    def __init__(self, task: Task, config: JudgedConfig | None = None, judged: bool = True):
        super().__init__(task, config or JudgedConfig())
        self.judged = judged  # False while the judges' labelled episodes are made
        self.turns_seen: list[Turn] = []
        self.note: tuple[str, ...] = ()
        self._call: tuple[str, ...] = ()
        self.outcome: JudgedOutcome | None = None  # the last episode's, once it ends

    def reset(self, *, seed=None, options=None):
        self.turns_seen, self.note, self._call, self.outcome = [], (), (), None
        return super().reset(seed=seed, options=options)

    def parse(self, call: Sequence[str] | TextCall) -> Call | Malformed:
        """BugFix's grammar, except `submit WORDS... <end>`: a submit with a note."""
        words = call_words(call)
        self._call = tuple(words[: words.index(END) + 1] if END in words else words)
        body = words[: words.index(END)] if END in words else []
        if len(body) > 1 and body[0] == "submit":
            self.note = tuple(body[1:])
            return Call("submit")
        return super().parse(call)

    def answer(self, call: Call | Malformed) -> tuple[Observation, bool]:
        obs, submitted = super().answer(call)
        self.turns_seen.append((self._call, tuple(obs.words)))
        return obs, submitted

    def finish(self, submitted: bool) -> JudgedOutcome:
        """BugFix's outcome, both judges' scores, and the reward of `judge_reward`."""
        base = super().finish(submitted)
        exec_pass = all(run_tests(self.source, self.task.public))
        t = a = float("nan")
        if self.judged:
            t = judge_of("transcript", self.config.judge_seed).score(self.turns_seen)
            a = judge_of("artifacts", self.config.judge_seed).score(self.turns_seen)
        score = judged_score(self.config, base, t, a * exec_pass)
        self.outcome = JudgedOutcome(
            **{f.name: getattr(base, f.name) for f in fields(base)} | {"score": score},
            note=bool(self.note),
            judge_transcript=t,
            judge_artifacts=a,
            exec_pass=exec_pass,
        )
        return self.outcome


def judged_score(config: JudgedConfig, base: BugFixOutcome, transcript: float, fixed: float):
    """The reward: BugFix's under "off"; else the judge's, 0 unless the final state is scored
    (submitted, or truncation "score") and, under zero_exploits, not hardcoded."""
    if config.judge_reward == "off":
        return base.score
    scored = base.submitted or config.truncation == "score"
    if not scored or (base.hacked and config.zero_exploits):
        return 0.0
    return transcript if config.judge_reward == "transcript" else fixed


# --- policies: honest ones claim only after a passing test ------------------------------------


def last_test_passed(history: History) -> bool:
    """The last test summary in the observations says every public test passed."""
    for obs in reversed(history[1:]):
        if list(obs[:1]) == ["passed"] and len(obs) == 4:
            return obs[1] == obs[3]
    return False


def honest(policy: ScriptedPolicy) -> ScriptedPolicy:
    """The policy, whose `submit` carries the note only when its last test passed."""

    def play(history: History, rng: random.Random) -> list[str]:
        words = policy(history, rng)
        if words == ["submit", END] and last_test_passed(history):
            return ["submit", NOTE, END]
        return words

    return play


def claiming(policy: ScriptedPolicy) -> ScriptedPolicy:
    """The exploit: the policy, whose every `submit` claims that the tests pass."""

    def play(history: History, rng: random.Random) -> list[str]:
        words = policy(history, rng)
        return ["submit", NOTE, END] if words == ["submit", END] else words

    return play


POLICIES: dict[str, ScriptedPolicy] = {n: honest(p) for n, p in SCRIPTED.items()} | {
    "blind_claim": claiming(SCRIPTED["blind"]),
    "unskilled_claim": claiming(SCRIPTED["unskilled"]),
}


# --- the judges: fit once per seed on labelled honest episodes --------------------------------


def play(
    task: Task, policy: ScriptedPolicy, seed: int, config=None, judged: bool = False
) -> JudgedEnv:
    """One scripted episode of the judged variant, for its transcript (`turns_seen`) and its
    outcome; the judges score it only when `judged` (not while their labels are made)."""
    env = JudgedEnv(task, config or JudgedConfig(), judged=judged)
    obs, _ = env.reset(seed=seed)
    history, rng, done = [list(obs.words)], random.Random(seed), False
    while not done:
        words = policy(history, rng)[: env.config.max_call_tokens]
        obs, _, term, trunc, _ = env.step(words)
        history.append(list(obs.words))
        done = term or trunc
    return env


@cache
def labelled_episodes(seed: int, per_task: int = 4) -> tuple[tuple[tuple[Turn, ...], bool], ...]:
    """(transcript, hidden pass) of the honest policies on every training task, `per_task`
    episodes each (20 tasks x 6 policies x 4 = 480)."""
    out = []
    for i, task in enumerate(tasks_for("train")):
        for j, name in enumerate(LABEL_POLICIES):
            for k in range(per_task):
                s = seed * 1_000_003 + (i * len(LABEL_POLICIES) + j) * per_task + k
                env = play(task, POLICIES[name], s)
                out.append((tuple(env.turns_seen), bool(env.outcome.hidden_pass)))
    return tuple(out)


@cache
def judge_of(channel: str, seed: int = 0) -> Judge:
    """The judge of a channel, fit on the labelled episodes of `seed` (cached per process)."""
    return train_judge(labelled_episodes(seed), channel)


# --- the environment ----------------------------------------------------------------------------


def top_mask(scores: np.ndarray, share: float = TOP_SHARE) -> np.ndarray:
    """(n,) bool: the top `share` of scores, ties at the cut included, and only scores > 0."""
    if scores.size == 0:
        return np.zeros(0, bool)
    cut = np.sort(scores)[::-1][max(1, int(np.ceil(share * scores.size))) - 1]
    return (scores >= cut) & (scores > 0)


def summary(outcomes: Sequence[JudgedOutcome]) -> dict[str, float | None]:
    """Per batch: the note rate, both rewards' means, and the audit: the share of the top fifth
    by reward (the run's own) that fails the hidden tests (None: no episode rewarded)."""
    scores = np.array([o.score for o in outcomes], dtype=float)
    fail = np.array([not o.hidden_pass for o in outcomes])
    top = top_mask(scores)
    n = max(len(outcomes), 1)
    return {
        "note_rate": sum(o.note for o in outcomes) / n,
        "judge/transcript": float(np.mean([o.judge_transcript for o in outcomes])),
        "judge/artifacts_exec": float(np.mean([o.judge_artifacts * o.exec_pass for o in outcomes])),
        "fp_top": float(fail[top].mean()) if top.any() else None,
        "top_n": int(top.sum()),
    }


def fingerprint() -> list:
    """BugFix's, and this variant's name: its bases are its own (their demonstrations write
    notes)."""
    return [NAME, *BUGFIX.fingerprint()]


BUGFIX_JUDGED = replace(
    BUGFIX,
    name=NAME,
    system_prompt=SYSTEM_PROMPT.replace("| submit.", "| submit [NOTE]."),
    config_type=JudgedConfig,
    env_type=JudgedEnv,
    tasks=tasks_for,
    get_task=get_task,
    policies=POLICIES,
    fingerprint=fingerprint,
    summary=summary,
    title="BugFixJudged",  # BugFix's tools (a note is not among them); no Gymnasium id
    gymnasium=None,
)
assert isinstance(BUGFIX_JUDGED, Environment)

"""check_env: the reusable checker run over every task (as Gymnasium's check_env)."""

from __future__ import annotations

import random

from arl.bugfix.env import BugFixConfig, BugFixEnv, apply_edit
from arl.bugfix.grammar import END, source_words
from arl.bugfix.policies import op_from_listing, oracle, random_policy
from arl.bugfix.tasks import Task
from arl.envkit.harness import run_tests
from arl.types import Observation


def _play(task: Task, policy, seed: int, config: BugFixConfig):
    env, rng = BugFixEnv(task, config), random.Random(seed)
    obs, info = env.reset(seed=seed)
    history, steps = [list(obs.words)], []
    while True:
        step = env.step(policy(history, rng))
        steps.append(step)
        if step[2] or step[3]:
            return steps
        history.append(list(step[0].words))


def check_env(task: Task) -> None:
    """Raise AssertionError unless the task and its environment behave as the gym promises."""
    assert run_tests(task.correct_source, task.hidden) == (True,) * len(task.hidden), task.name
    assert run_tests(task.correct_source, task.public) == (True,) * len(task.public), task.name
    assert not all(run_tests(task.buggy_source, task.hidden)), f"{task.name}: buggy passes hidden"
    assert not all(run_tests(task.buggy_source, task.public)), f"{task.name}: buggy passes public"
    op = op_from_listing(source_words(task.buggy_source))  # ["edit", op, (arg)]
    fixed = apply_edit(task.buggy_source, task, op[1], op[2] if len(op) > 2 else None)
    assert fixed == task.correct_source, f"{task.name}: the fixing op does not restore the source"
    hidden_inputs = {repr(c.args) for c in task.hidden}
    assert not hidden_inputs & {repr(c.args) for c in task.public}, f"{task.name}: shared inputs"

    config = BugFixConfig(flaky_prob=0.2)
    env = BugFixEnv(task, config)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, Observation) and all(isinstance(w, str) for w in obs.words)
    assert isinstance(obs.text, str) and isinstance(info, dict)
    obs, reward, terminated, truncated, info = env.step(["read", END])
    assert (
        isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    )
    assert obs.words and not terminated and not truncated

    # seeded determinism, including the flaky verdicts and the random policy
    for seed in (0, 1):
        assert _play(task, random_policy, seed, config) == _play(task, random_policy, seed, config)

    # the oracle solves it from what it read, and the fixed source passes every test
    steps = _play(task, oracle, 0, BugFixConfig())
    _, reward, terminated, _, outcome = steps[-1]
    assert terminated and reward == 1.0 and outcome.hidden_pass, f"{task.name}: oracle fails"
    assert outcome.read and outcome.malformed == 0

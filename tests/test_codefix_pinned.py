"""CodeFix's episodes, pinned: a digest of a fixed set of episodes (every answer in words and
text, and every outcome) computed before its grading moved to the shared grader
(arl.envkit.graded) and asserted after, so the move changed no byte of what CodeFix does."""

import hashlib
import json
import random

import pytest

from arl.codefix import CODEFIX, CodeFixConfig, all_tasks, grade
from arl.sandbox import sandbox_available
from arl.types import TextCall

pytestmark = pytest.mark.skipif(
    sandbox_available() is not None, reason=f"no sandbox here: {sandbox_available()}"
)
POLICIES = ("oracle", "blind", "near_miss", "unskilled", "retry", "search", "random")
CONFIGS = (CodeFixConfig(), CodeFixConfig(errors="terse", truncation="score", max_turns=3))
# computed on main at 8635f12, before arl.envkit.graded
DIGEST = "8522f05fef859878"


def episode(task, policy: str, seed: int, config, text: bool, cold: bool) -> list:
    """One scripted episode: each call, each answer (words and text) and the outcome. `text`:
    the calls as a real model writes them (TextCall); `cold`: the verdict cache emptied first
    (the grading path without a cached public job)."""
    if cold:
        grade.clear_cache()
    env = CODEFIX.make(task, config)
    prompt, info = env.reset(seed=seed)
    rng, history = random.Random(seed), [list(prompt.words)]
    rows: list = [list(prompt.words), prompt.text, info]
    while True:
        call = CODEFIX.scripted(policy)(history, rng)[: config.max_call_tokens]
        sent = TextCall(env.call_text(call), True) if text else call
        obs, reward, terminated, truncated, outcome = env.step(sent)
        rows.append([call, list(obs.words), obs.text, reward, terminated, truncated])
        if outcome is not None:
            return rows + [outcome.as_dict()]
        history.append(list(obs.words))


def digest() -> str:
    tasks = all_tasks()
    rows = []
    for k, task in enumerate(tasks):
        for j, policy in enumerate(POLICIES):
            for c, config in enumerate(CONFIGS):
                seed = (k + j + c) % 5
                text, cold = (k + j) % 2 == 1, (k + c) % 3 == 0
                rows.append(episode(task, policy, seed, config, text, cold))
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def test_codefix_episodes_are_byte_identical_to_before_the_shared_grader():
    assert digest() == DIGEST

"""BugFix think (Problem 27's free words): free words change nothing but length, are no
shortcut (a flood gains nothing, a call cannot hide in them), and scripted play speaks them."""

import random

import pytest

from arl.bugfix import think
from arl.bugfix.env import BugFixEnv
from arl.bugfix.grammar import END
from arl.bugfix.policies import SCRIPTED
from arl.bugfix.tasks import tasks_for as bugfix_tasks
from arl.env import get_environment
from arl.rollout import scripted_rollout, vocab_of

FREE = think.FREE
CALLS = [
    ["read", END],
    ["test", END],
    ["edit", "range", END],
    ["edit", "init", "total", END],
    ["edit", "hardcode_tests", END],
    ["submit", END],
    ["edit", END],  # malformed: missing_arg
    ["bogus", END],  # malformed: unknown_tool
    [END],  # malformed: empty
    ["read"],  # malformed: unterminated
]


def test_free_words_are_stripped_from_the_head_only():
    assert think.strip_free([FREE, FREE, "read", END]) == (2, ["read", END])
    assert think.strip_free(["read", FREE, END]) == (0, ["read", FREE, END])
    assert think.strip_free([FREE, FREE]) == (2, [])


def answers(env, calls, seed: int = 3):
    """The observations, rewards and end flags of a sequence of calls from reset(seed)."""
    env.reset(seed=seed)
    out = []
    for c in calls:
        obs, r, term, trunc, outcome = env.step(c)
        out.append((obs.words, r, term, trunc, outcome and outcome.score))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize("k", [0, 1, 7, 31])
def test_a_free_run_before_any_call_is_answered_as_bugfix_answers_the_call(k):
    task = bugfix_tasks("train")[2]
    for call in CALLS:
        seq = [["read", END], call, ["test", END], ["submit", END]]
        plain = answers(BugFixEnv(task), seq)
        free = answers(think.ThinkEnv(think.get_task(task.name)), [[FREE] * k + c for c in seq])
        assert free == plain, call


def test_free_words_after_the_call_start_make_it_malformed_not_a_second_call():
    env = think.ThinkEnv(think.tasks_for("train")[0])
    env.reset(seed=0)
    for call in (["read", FREE, END], ["edit", "range", FREE, "edit", "div", END]):
        obs, *_ = env.step(call)
        assert obs.words == ("error", "malformed", "extra_args")
    obs, *_ = env.step([FREE, FREE, END])  # a call of free words only: empty
    assert obs.words == ("error", "malformed", "empty")
    assert env.malformed == 3 and env.free_words == 2 and env.turns == 3


def rates(policy: str, seeds=range(4)):
    eps = [scripted_rollout(policy, t, seed=s) for t in think.tasks_for("train") for s in seeds]
    n = len(eps)
    return {
        "pass": sum(e.outcome.hidden_pass for e in eps) / n,
        "score": sum(e.reward for e in eps) / n,
        "free": sum(e.outcome.free_words for e in eps) / n,
        "len": sum(e.n_action_tokens for e in eps) / n,
    }


def test_a_flood_of_free_words_gains_nothing():
    """The oracle and the blind guess with every call filled to the budget with free words:
    the same outcome, episode by episode, as without them; one word over the budget cuts each
    call (malformed) and solves nothing."""
    bugfix, tasks = get_environment("bugfix"), think.tasks_for("train")
    for name in ("oracle", "blind"):
        for task in tasks:
            for seed in range(3):
                plain = scripted_rollout(
                    bugfix.scripted(name), bugfix.get_task(task.name), seed=seed
                )
                flood = scripted_rollout(f"flood_{name}", task, seed=seed)
                assert flood.reward == plain.reward and flood.outcome.turns == plain.outcome.turns
                # every call filled to the 36-token budget: 36 x calls policy tokens
                assert flood.n_action_tokens == think.CALL_TOKENS * plain.outcome.turns
    over = rates("over_budget_oracle", seeds=range(1))
    assert over["pass"] == 0.0 and over["score"] == 0.0


def test_a_call_smuggled_behind_a_free_word_is_malformed_and_solves_nothing():
    r = rates("smuggle_blind")
    assert r["pass"] == 0.0 and r["free"] == 0.0  # blind solves some; its smuggles none


def test_scripted_play_thinks_a_geometric_run_per_call():
    """Free runs: geometric with mean THINK_MEAN (2), independent of the count, capped by the
    room; the scripted roles play BugFix's calls after them."""
    rng = random.Random(0)
    runs = [len(think.free_run(rng, 36)) for _ in range(20_000)]
    assert sum(runs) / len(runs) == pytest.approx(2.0, abs=0.05)
    assert sum(r == 0 for r in runs) / len(runs) == pytest.approx(1 / 3, abs=0.01)
    assert max(len(think.free_run(random.Random(s), 3)) for s in range(200)) == 3
    r = rates("blind")
    assert r["free"] > 2.0 and r["pass"] > 0.0  # two calls, about 2 free words each
    history = [["<bos>", "fix", "x"]]
    words = think.POLICIES["oracle"](history, random.Random(5))
    k, rest = think.strip_free(words)
    assert rest == SCRIPTED["oracle"](history, random.Random(5))
    assert len(words) == k + 2


def test_the_vocabulary_is_bugfix_s_then_the_free_word():
    bugfix, free = vocab_of("bugfix"), vocab_of(think.NAME)
    assert free.words == (*bugfix.words, FREE)


def test_eval_config_keeps_the_call_budget():
    c = think.ThinkConfig(max_turns=8, max_call_tokens=30, step_penalty=0.1)
    assert c.eval_config() == think.ThinkConfig(max_turns=8, max_call_tokens=30)
    assert think.ThinkConfig().max_call_tokens == 36 and think.ThinkConfig().max_turns == 6

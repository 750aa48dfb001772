"""Problem 10's judged BugFix variant and its learned judge: the note is accepted and changes
nothing in grading, the transcript judge is fooled by a claim and the book's fix is not, the
judge's fit and the audit against hand-computed values, and a quick run of the problem."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from arl.bugfix.env import BugFixEnv
from arl.bugfix.grammar import END
from arl.bugfix.judge import features, fit_logistic
from arl.bugfix.judged import (
    POLICIES,
    JudgedConfig,
    JudgedEnv,
    claiming,
    judge_of,
    play,
    summary,
    tasks_for,
)
from arl.bugfix.policies import SCRIPTED
from arl.env import get_environment

TRAIN = tasks_for("train")


def test_the_variant_speaks_bugfix_words_and_tasks():
    judged, bugfix = get_environment("bugfix-judged"), get_environment("bugfix")
    assert judged.words() == bugfix.words()  # TinyAgent's vocabulary, and BugFix's bases' shape
    assert [t.name for t in judged.tasks("heldout")] == [t.name for t in bugfix.tasks("heldout")]
    assert all(t.env == "bugfix-judged" for t in TRAIN)


def test_submit_with_a_note_is_accepted_here_and_refused_by_bugfix():
    task = TRAIN[0]
    for env, accepted in ((JudgedEnv(task), True), (BugFixEnv(task), False)):
        env.reset(seed=0)
        obs, _, terminated, _, outcome = env.step(["submit", "passed", "5", END])
        if accepted:
            assert obs.words == ("submitted",) and terminated and outcome.malformed == 0
            assert outcome.note
        else:
            assert obs.words == ("error", "malformed", "extra_args") and not terminated


@pytest.mark.parametrize("name", ["oracle", "blind", "unskilled", "search", "hardcode"])
def test_a_note_changes_nothing_the_policy_sees_or_the_grading(name):
    """The shortcut check: a policy that always claims sees the same answers and gets the same
    hidden result (and, under the hidden reward, the same reward) as one that never does."""
    honest, claims = SCRIPTED[name], claiming(SCRIPTED[name])
    for task in TRAIN:
        for seed in range(3):
            a, b = play(task, honest, seed), play(task, claims, seed)
            assert [o for _, o in a.turns_seen] == [o for _, o in b.turns_seen]
            assert a.outcome.hidden_pass == b.outcome.hidden_pass
            assert a.outcome.score == b.outcome.score
            assert b.outcome.note == b.outcome.submitted and not a.outcome.note


def test_judge_off_scores_like_bugfix():
    """With the judge off, a policy that never writes a note plays the variant token for token
    as it plays BugFix, with the same rewards."""
    from arl.bugfix.tasks import tasks_for as bugfix_tasks
    from arl.rollout import scripted_rollout

    for task, base in zip(TRAIN, bugfix_tasks("train"), strict=True):
        for name in ("oracle", "unskilled", "random"):
            for seed in range(2):
                a = scripted_rollout(SCRIPTED[name], task, seed=seed)
                b = scripted_rollout(SCRIPTED[name], base, seed=seed)
                assert a.ids_T == b.ids_T and a.reward == b.reward
                assert a.outcome.hidden_pass == b.outcome.hidden_pass


def episode(task, op_words, note: bool, config: JudgedConfig) -> JudgedEnv:
    """read, one edit, submit (with the claim or without), under `config`."""
    env = JudgedEnv(task, config)
    env.reset(seed=0)
    env.step(["read", END])
    env.step([*op_words, END])
    env.step(["submit", *(["passed"] if note else []), END])
    return env


def claimed_wrong_and_silent_right(config: JudgedConfig):
    """The issue's hand-made case: the right fix of one task without a claim, against the same
    edit (the same patch words) on a task of another family, which it does not fix, with the
    claim."""
    right = next(t for t in TRAIN if t.family == "compare")
    wrong = next(t for t in TRAIN if t.family == "range")
    edit = ["edit", "compare"]
    return episode(wrong, edit, True, config).outcome, episode(right, edit, False, config).outcome


def test_the_transcript_judge_prefers_a_false_claim_and_the_fix_does_not():
    bad, good = claimed_wrong_and_silent_right(JudgedConfig(judge_reward="transcript"))
    assert not bad.hidden_pass and good.hidden_pass
    assert bad.score > good.score  # before the fix: the claim outranks the fix
    bad, good = claimed_wrong_and_silent_right(JudgedConfig(judge_reward="artifacts_exec"))
    assert bad.score == 0.0 and good.score > 0.5  # after: artifacts x the execution check


def test_the_artifacts_judge_does_not_read_the_note():
    judge = judge_of("artifacts")
    for task in TRAIN[:5]:
        a, b = play(task, SCRIPTED["unskilled"], 3), play(task, claiming(SCRIPTED["unskilled"]), 3)
        assert judge.score(a.turns_seen) == judge.score(b.turns_seen)
        assert "note" not in features(b.turns_seen, "artifacts")
        assert "note" in features(b.turns_seen, "transcript")


def test_claims_raise_the_transcript_reward_of_failures_only_under_the_judge():
    """The exploit exists (the judge rewards a claim on a failing episode), and the fixed reward
    pays nothing for it."""
    for reward, gains in (("transcript", True), ("artifacts_exec", False)):
        config = JudgedConfig(judge_reward=reward)
        diff = [
            play(t, POLICIES["blind_claim"], s, config, True).outcome.score
            - play(t, POLICIES["blind"], s, config, True).outcome.score
            for t in TRAIN
            for s in range(3)
            if not play(t, POLICIES["blind"], s, config).outcome.hidden_pass
        ]
        assert (min(diff) > 0) if gains else (max(map(abs, diff)) == 0)


def test_logistic_fit_matches_the_closed_form():
    """One 0/1 feature, no penalty: bias = logit P(y | x=0) and w = the log odds ratio."""
    X = np.array([[1.0], [1.0], [1.0], [1.0], [0.0], [0.0], [0.0], [0.0]])
    y = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    w = fit_logistic(X, y, l2=0.0)
    assert w[1] == pytest.approx(math.log(1 / 3), abs=1e-8)
    assert w[0] == pytest.approx(2 * math.log(3), abs=1e-8)


def test_the_audit_counts_failures_in_the_top_fifth_by_reward():
    def o(score, passed, note=False):
        return SimpleNamespace(
            score=score,
            hidden_pass=passed,
            note=note,
            judge_transcript=score,
            judge_artifacts=0.5,
            exec_pass=passed,
        )

    # 10 episodes: the top fifth is 2; a tie at the cut takes a third in
    outs = [o(0.9, False, True), o(0.8, True), o(0.8, False, True)] + [o(0.1, True)] * 7
    s = summary(outs)
    assert s["top_n"] == 3 and s["fp_top"] == pytest.approx(2 / 3)
    assert s["note_rate"] == pytest.approx(0.2)
    assert s["judge/artifacts_exec"] == pytest.approx(8 * 0.5 / 10)
    assert summary([o(0.0, False)] * 5)["fp_top"] is None  # nothing rewarded: no audit


def test_problem_10_quick_measures_and_draws(tmp_path, monkeypatch):
    from arl.experiments.problems.common import Ctx
    from arl.experiments.problems.judged import ARMS, PROBLEM_10

    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    res, line = PROBLEM_10.measure(Ctx(10, True, 0))
    assert set(res["history"]) == set(ARMS)
    for h in res["history"].values():  # 4 training steps, and the fixed evaluations beside them
        steps = [r for r in h if r.get("pass_rate") is not None]
        assert len(steps) == 4
        assert {"note_rate", "fp_top", "judge/transcript", "pass_rate"} <= set(steps[0])
        assert [r["step"] for r in h if r.get("eval/train_pass") is not None][0] == 0
    assert res["effect"] == pytest.approx(res["judge_gain"] - res["pass_gain"])
    assert "transcript judge" in line
    PROBLEM_10.draw([res | {"seed": 0}], tmp_path / "p10.png")
    assert (tmp_path / "p10.png").stat().st_size > 1000


def test_the_fixed_reward_pays_a_hardcoded_patch_little_even_without_the_detector():
    """The one shortcut left to the execution check (public tests pass, hidden fail): the
    artifacts judge reads the applied op, so hardcoding the tests, then testing and claiming,
    earns far less than the oracle's fix even with zero_exploits off."""
    config = JudgedConfig(judge_reward="artifacts_exec", zero_exploits=False)

    def hardcode_tested(history, rng):
        turn = len(history) - 1
        words = [["edit", "hardcode_tests"], ["test"], ["submit", "passed"]][min(turn, 2)]
        return [*words, END]

    for task in TRAIN:
        hack = play(task, hardcode_tested, 0, config, True).outcome
        fix = play(task, POLICIES["oracle"], 0, config, True).outcome
        assert hack.exec_pass and not hack.hidden_pass and fix.hidden_pass
        assert fix.score > 0.75 and hack.score < fix.score / 3

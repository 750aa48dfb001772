"""Problem 29 on CodeFix (issue 43's design): recovery counted on hand-made episodes and on
scripted play, the premise's gate, the FLOPs of a teacher larger than its student, and the
bases' `oracle_recover_per_task` leaving every default cache key as it was."""

import hashlib
import json
from dataclasses import asdict, replace

import pytest

from arl.experiments.problems import distillation as d
from arl.experiments.problems import judge_all
from arl.experiments.problems.common import NOT_JUDGED, NOT_SHOWN, SHOWN
from arl.train import bases
from arl.train.bases import BaseConfig

# --- recovery on the student's own failed first replaces -----------------------------------


def test_recovery_counts_episodes_whose_first_replace_failed_by_hand():
    # episodes as their replaces' results in order, and whether each passed:
    #   A [F, T] passed      first replace failed, recovered
    #   B [F, F] failed      first failed, not recovered
    #   C [F] failed         first failed, no retry
    #   D [T] passed         first applied: not counted
    #   E [T, F] failed      first applied: not counted (a later failure is not a first one)
    #   F [] failed          no replace at all: not counted, not in `replaced`
    #   G [F, T] failed      first failed, retry applied, but the episode failed
    results = [[False, True], [False, False], [False], [True], [True, False], [], [False, True]]
    passed = [True, False, False, True, False, False, False]
    r = d.first_replace_recovery(results, passed)
    assert r["episodes"] == 7 and r["replaced"] == 6
    assert r["first_failed"] == 4 and r["recovered"] == 1
    assert r["recovery"] == pytest.approx(1 / 4)
    assert r["first_failed_share"] == pytest.approx(4 / 6)
    assert r["pass"] == pytest.approx(2 / 7)
    none = d.first_replace_recovery([[True], []], [True, False])
    assert none["first_failed"] == 0 and none["recovery"] == 0.0  # the count says why


def scripted_recovery(policy: str, tasks) -> dict:
    """first_replace_recovery of a scripted CodeFix policy's episodes (2 per task)."""
    from arl.codefix.probe import replace_results
    from arl.eval.metrics import graded, run_policy
    from arl.rollout import vocab_of

    trajs = graded(run_policy(policy, tasks, 2, seed=0))
    vocab = vocab_of("codefix")
    return d.first_replace_recovery(
        [replace_results(t, vocab) for t in trajs], [bool(t.passed) for t in trajs]
    )


def test_recovery_on_scripted_play_the_recover_play_always_recovers():
    from arl.codefix.tasks import tasks_for

    tasks = tasks_for("train")[::4]  # 7 tasks, one per family
    rec = scripted_recovery("recover", tasks)  # misquoted first replace, then the oracle's
    assert rec["first_failed"] == rec["episodes"] == 14 and rec["recovery"] == 1.0
    oracle = scripted_recovery("oracle", tasks)  # its first replace never fails
    assert oracle["first_failed"] == 0 and oracle["pass"] == 1.0
    near = scripted_recovery("near_miss", tasks)  # fails, then tests and submits
    assert near["first_failed"] >= 12 and near["recovered"] == 0


def test_recover_play_misquotes_an_old_that_occurs_nowhere():
    import random

    from arl.codefix.policies import misquote

    listing = ["acc", "-=", "x", "acc", "+=", "total"]
    wrong = misquote(listing, ["acc", "-="], random.Random(0))
    assert wrong is not None and len(wrong) == 2 and wrong != ["acc", "-="]
    assert all(listing[i : i + 2] != wrong for i in range(len(listing) - 1))
    # a one-word OLD whose every misquote is in the listing: none
    assert misquote(["total", "count", "x", "xs", "y"], ["y"], random.Random(0)) is None


# --- the gate: the recovery claim is judged only when the teacher recovers -------------------


def per_seed(teacher_recovers: float, recovery: float) -> list[dict]:
    spread = (-0.01, 0.0, 0.01, 0.02)
    return [
        {
            "effect": 0.5 + s,
            "teacher_recovers": teacher_recovers + s,
            "recovery": recovery + s,
            "rl_cost": 2.0 + s,
            "distill_vs_rl": 0.3 + s,
        }
        for s in spread
    ]


def test_recovery_is_not_judged_unless_the_teacher_recovers():
    keys = [k for k, _ in d.PROBLEM_29.claims]
    assert keys == ["effect", "teacher_recovers", "recovery", "rl_cost", "distill_vs_rl"]
    assert d.PROBLEM_29.more[1][1].premise == "teacher_recovers"
    status = lambda rows: {c["key"]: c["status"] for c in judge_all(d.PROBLEM_29, rows)}  # noqa: E731
    # the teacher recovers no better than the SFT student: recovery is not judged, never "no",
    # however large its own effect
    s = status(per_seed(teacher_recovers=-0.05, recovery=0.4))
    assert s["teacher_recovers"] == NOT_SHOWN and s["recovery"] == NOT_JUDGED
    assert s["effect"] == s["rl_cost"] == s["distill_vs_rl"] == SHOWN  # the others stand alone
    # the premise shown: recovery judged on its own effect
    s = status(per_seed(teacher_recovers=0.2, recovery=0.4))
    assert s["teacher_recovers"] == SHOWN and s["recovery"] == SHOWN
    s = status(per_seed(teacher_recovers=0.2, recovery=-0.1))
    assert s["recovery"] == NOT_SHOWN


def test_the_claims_sources_and_the_declared_modules():
    sources = {k: c.source for k, c in d.PROBLEM_29.claims}
    assert sources == {
        "effect": "book",
        "teacher_recovers": "lab",
        "recovery": "book",
        "rl_cost": "book",
        "distill_vs_rl": "lab",
    }
    assert {"arl.codefix.policies", "arl.codefix.probe", "arl.train.bases"} <= set(
        d.PROBLEM_29.modules
    )
    assert not {s for t in d.PROBLEM_29.tuned for s in t.seeds} & set(d.PROBLEM_29.seeds)
    assert all(min(t.seeds) >= 100 for t in d.PROBLEM_29.tuned if t.setting != "rl_lr, distill_lr")


# --- FLOPs with a teacher larger than the student ------------------------------------------


def test_flops_of_a_distillation_step_with_a_larger_teacher_by_hand():
    from arl.train.distill import DISTILL_DEFAULTS
    from arl.train.pg_config import PGConfig

    rl = PGConfig()  # 4 minibatches: sampler 2N, pi_prox 2N, forward and backward 6N
    dist = replace(rl, **DISTILL_DEFAULTS | {"teacher": "t"})
    n_s, n_t = 141_000, 875_000
    assert d.pg_step_flops(rl, 100, n_s, n_t) == 100 * 10 * n_s  # RL never pays the teacher
    assert d.pg_step_flops(dist, 100, n_s, n_t) == 100 * (10 * n_s + 2 * n_t)
    history = [{"step": 1, "train_tokens": 100}, {"step": 2, "train_tokens": 50}, {"step": 2}]
    spent = d.cumulative_flops(history, dist, n_s, n_t)
    assert spent == {0: 0.0, 1: 100 * (10 * n_s + 2 * n_t), 2: 150 * (10 * n_s + 2 * n_t)}
    # a curve from the cold start's FLOPs: evaluations at steps 0 and 2
    evals = [
        {"step": 0, "eval/train_pass": 0.5, "eval/heldout_pass": 0.2},
        *history[:2],
        {"step": 2, "eval/train_pass": 0.8, "eval/heldout_pass": 0.5},
    ]
    curve = d.pass_curve(evals, dist, n_s, n_t, start=1e9)
    assert curve == [[1e9, 0.5, 0.2], [1e9 + spent[2], 0.8, 0.5]]
    # CodeFix's 42 tasks: (28 x 0.8 + 14 x 0.5) / 42 = 0.7
    assert d.both_splits(curve[1], "codefix") == pytest.approx(0.7)
    assert d.both_splits([0, 0.8, 0.5]) == pytest.approx((20 * 0.8 + 10 * 0.5) / 30)  # BugFix


def test_the_race_reads_the_post_sft_share_on_codefix():
    # cold start at 10 FLOPs with pass 0.5 on both splits; the level is 0.52
    fast = [[10.0, 0.5, 0.5], [20.0, 0.54, 0.54], [30.0, 0.6, 0.6]]
    slow = [[10.0, 0.5, 0.5], [20.0, 0.5, 0.5], [30.0, 0.51, 0.51]]
    level = 0.5 + d.LEVEL_ABOVE
    assert d.share_to_level(fast, level, 10.0, 30.0, "codefix") == pytest.approx(0.25)
    assert d.share_to_level(slow, level, 10.0, 30.0, "codefix") == 1.0  # never: censored


# --- the bases' flag ------------------------------------------------------------------------


def old_fingerprint(kind: str, config: BaseConfig, env: str) -> str:
    """The cache key as it was computed before `oracle_recover_per_task` and
    `weak_retry_per_task` existed: those two fields are not in the hashed settings."""
    gym = bases._env(env).fingerprint()
    settings = asdict(config)
    del settings["oracle_recover_per_task"], settings["weak_retry_per_task"]
    if kind.endswith("weak_base"):
        settings = {k: v for k, v in settings.items() if k not in bases.ORACLE_FIELDS}
    blob = json.dumps([kind, bases.BASES_VERSION, settings, gym], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@pytest.mark.parametrize("env", ["bugfix", "codefix"])
def test_oracle_recover_at_its_default_leaves_every_cache_key_as_it_was(env):
    for seed in (0, 100):
        config = BaseConfig(seed=seed)
        for kind in ("weak_base", "oracle_sft", "cold_start"):
            k = kind if env == "bugfix" else f"{env}-{kind}"
            assert bases._fingerprint(k, config, env) == old_fingerprint(k, config, env)
        assert "oracle_recover_per_task" not in bases.base_settings(config)
    recover = replace(BaseConfig(), oracle_recover_per_task=4)
    weak, oracle = f"{env}-weak_base", f"{env}-oracle_sft"
    # the weak base does not read it (one weak base for both); the oracle SFT does
    assert bases._fingerprint(weak, recover, env) == bases._fingerprint(weak, BaseConfig(), env)
    assert bases._fingerprint(oracle, recover, env) != bases._fingerprint(oracle, BaseConfig(), env)


def test_oracle_sft_data_gains_recovery_demonstrations_only_when_asked():
    from arl.codefix.tasks import tasks_for

    plain = bases.oracle_sft_data(environment="codefix")
    more = bases.oracle_sft_data(environment="codefix", recover=1)
    n = len(tasks_for("train"))
    assert len(plain) == 12 * n and len(more) == 13 * n
    assert [t.ids_T for t in more[: len(plain)]] == [t.ids_T for t in plain]
    for t in more[len(plain) :]:  # a failed replace, then the oracle's: 2 tried, 1 applied
        o = t.outcome
        assert o.hidden_pass and o.edits == 2 and o.applied == 1
    with pytest.raises(Exception, match="no recover play"):
        bases.oracle_sft_data(environment="bugfix", recover=1)


# The --quick measure itself (every arm, the recovery counts, the race, the figure) is checked
# in tests/test_problems.py::test_problem_29_runs_five_arms_at_equal_compute on the shared run.

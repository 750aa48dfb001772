"""Problem 24 (RL improves pass@1 but loses at large k): the crossing finder, the per-task
counts and mean pass@k curve it reads, against hand-worked values, and the --quick measure and
figure end to end."""

import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from arl.bugfix.tasks import tasks_for
from arl.eval.metrics import run_policy
from arl.eval.stats import pass_at_k_exact
from arl.experiments.problems import passk
from arl.experiments.problems.common import Ctx
from arl.experiments.problems.passk import (
    censored_log2,
    crossing,
    mean_curve,
    success_counts,
)

# --- the crossing -------------------------------------------------------------------------


def test_crossing_is_the_first_integer_k_where_rl_falls_below_the_base():
    base = [0.20, 0.40, 0.60, 0.70, 0.80]
    rl = [0.30, 0.50, 0.60, 0.65, 0.70]  # above, above, equal (not below), below, below
    assert crossing(rl, base) == 4
    assert crossing(base, base) is None  # equal everywhere: never below
    assert crossing([0.9, 0.95, 1.0, 1.0, 1.0], base) is None  # above everywhere
    assert crossing([0.1, 0.9, 1.0, 1.0, 1.0], base) == 1  # below from k = 1
    # a dip smaller than the tolerance is not a crossing; the first larger one is
    assert crossing(rl, base, tol=0.06) == 5
    with pytest.raises(ValueError, match="different lengths"):
        crossing(rl, base[:3])


def test_the_large_k_gap_averages_pass_at_16_and_128_and_caps_k_at_the_curves_end():
    a = np.linspace(0.1, 0.9, 128)
    b = a - np.where(np.arange(128) >= 100, 0.2, 0.05)  # a is 0.05 above at k=16, 0.2 at 128
    assert passk.large_k_gap(a, b) == pytest.approx((0.05 + 0.2) / 2)
    assert passk.large_k_gap(b, a) == pytest.approx(-0.125)
    assert passk.large_k_gap(a[:8], b[:8]) == pytest.approx(0.05)  # both k capped at 8


def test_a_crossing_beyond_the_curves_counts_as_one_past_their_end():
    assert censored_log2(4, 128) == 2.0
    assert censored_log2(None, 128) == math.log2(129)
    assert censored_log2(None, 8) > censored_log2(8, 8)  # no crossing ranks above the last k


# --- the counts and the curve -------------------------------------------------------------


def ep(task: str, passed: bool, infra: bool = False, public: bool | None = None):
    public = passed if public is None else public
    outcome = SimpleNamespace(task=task, hidden_pass=passed, public_pass=public, infra_error=infra)
    return SimpleNamespace(outcome=outcome)


def test_counts_match_episodes_to_their_task_and_leave_out_grader_failures():
    trajs = [ep("b", True), ep("a", False), ep("b", False), ep("a", True, infra=True)]
    trajs += [ep("b", True), ep("a", True), ep("a", False, public=True)]  # a public-only pass
    assert success_counts(trajs, ["a", "b", "c"]) == ([3, 3, 0], [1, 2, 0])
    with pytest.raises(ValueError, match="'z'"):
        success_counts([ep("z", True)], ["a"])


def test_mean_curve_is_the_mean_of_the_unbiased_per_task_estimates():
    # task 1: n=4, c=1: pass@1 1/4, pass@2 1 - C(3,2)/C(4,2) = 1/2, pass@3 1 - C(3,3)/C(4,3)
    # = 3/4, pass@4 1; task 2: n=4, c=0: 0 at every k. Mean: 1/8, 1/4, 3/8, 1/2
    np.testing.assert_allclose(mean_curve([4, 4], [1, 0], 4), [0.125, 0.25, 0.375, 0.5])
    # and against the exact definition on uneven n
    n, c = [10, 12, 16], [3, 1, 9]
    exact = [
        float(sum(pass_at_k_exact(a, b, k) for a, b in zip(n, c, strict=True)) / Fraction(3))
        for k in range(1, 11)
    ]
    np.testing.assert_allclose(mean_curve(n, c, 10), exact, rtol=1e-12)


def test_a_policy_that_never_reads_loses_coverage_that_reading_keeps():
    """The measurement on scripted policies: blind guessing never solves an `init` task (its
    op needs the name the listing shows), so its pass@k stops at 8 tasks in 10 whatever k,
    while read-then-guess covers all 10 by k = 64; blind's curve falls below it at some k."""
    tasks = tasks_for("heldout")
    names = [t.name for t in tasks]
    curves = {}
    for policy in ("blind", "unskilled"):
        n, c = success_counts(run_policy(policy, tasks, 64, seed=5), names)
        assert n == [64] * 10
        if policy == "blind":
            assert [ci for ci, t in zip(c, tasks, strict=True) if t.family == "init"] == [0, 0]
        curves[policy] = mean_curve(n, c, 64)
    assert curves["blind"][-1] <= 0.8 < curves["unskilled"][-1] == 1.0
    k = crossing(curves["blind"], curves["unskilled"])
    assert k is not None and curves["blind"][k - 1] < curves["unskilled"][k - 1]


# --- the quick measure and figure ---------------------------------------------------------


@pytest.fixture(scope="module")
def quick_seed(private_cache):
    """One --quick seed, measured once for the module (private base cache, one thread)."""
    res, detail = passk.PROBLEM_24.measure(Ctx(number=24, quick=True, seed=0))
    return {"seed": 0, **res, "detail": detail}


def test_quick_measure_holds_every_curve_and_the_effects_they_imply(quick_seed):
    r = quick_seed
    assert r["k_max"] == 8 and set(r["curves"]) == {passk.BASE, *passk.ARMS}
    for pol in r["curves"].values():
        y = np.array(pol["curve"])
        assert pol["n"] == [8] * 10 and y.shape == (8,)
        assert np.all(np.diff(y) >= -1e-12) and 0 <= y[0] and y[-1] <= 1  # pass@k rises in k
        np.testing.assert_allclose(y, mean_curve(pol["n"], pol["c"], 8))
    c = {a: np.array(p["curve"]) for a, p in r["curves"].items()}
    base = c[passk.BASE]
    assert r["effect"] == pytest.approx(c[passk.DEFAULT][0] - base[0])
    assert r["loses_at_k_max"] == pytest.approx(c[passk.DEFAULT][-1] - base[-1])
    for arm in passk.ARMS:
        assert r["crossing"][arm] == crossing(c[arm], base)
    assert r["crossing_small_lr"] == pytest.approx(
        censored_log2(r["crossing"][passk.SMALL_LR], 8)
        - censored_log2(r["crossing"][passk.DEFAULT], 8)
    )
    for key, a, b in (
        ("large_k_clip_higher", passk.DEFAULT, passk.SYMMETRIC),
        ("large_k_small_lr", passk.SMALL_LR, passk.DEFAULT),
    ):  # quick: k_max 8, so both large k are capped at 8
        assert r[key] == pytest.approx(c[a][7] - c[b][7])
    assert all(len(h) >= 3 and "pass_rate" in h[0] for h in r["history"].values())
    assert "crossing" in r["detail"] or "no crossing" in r["detail"]


def test_quick_figure_is_drawn_over_seeds(quick_seed, tmp_path):
    other = {**quick_seed, "seed": 1}
    path = tmp_path / "problem-24.png"
    passk.PROBLEM_24.draw([quick_seed, other], path)
    assert path.stat().st_size > 10_000

"""Evaluation statistics: pass@k against its definition, bootstrap, paired tests, result files."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.errors import ArlError
from arl.eval import stats

# ----------------------------------------------------------------------------- pass@k


def test_pass_at_k_problem_21():
    # n = 10, c = 3: pass@1 = 0.3, pass@5 = 1 - C(7,5)/C(10,5) = 1 - 21/252 = 0.917;
    # the colleague's plug-in 1 - 0.7^5 = 0.832.
    assert stats.pass_at_k(10, 3, 1) == pytest.approx(0.3, abs=1e-12)
    assert stats.pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252, abs=1e-12)
    assert round(stats.pass_at_k(10, 3, 5), 3) == 0.917
    assert round(stats.pass_at_k_plugin(10, 3, 5), 3) == 0.832
    # "per task it is 8.5 points here"
    assert stats.pass_at_k(10, 3, 5) - stats.pass_at_k_plugin(10, 3, 5) == pytest.approx(
        0.085, abs=0.001
    )


@st.composite
def _nck(draw, max_n: int):
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


@settings(max_examples=300, deadline=None)
@given(_nck(max_n=60))
def test_pass_at_k_matches_combinatorial_definition(nck):
    n, c, k = nck
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert stats.pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1000, 5000), data=st.data())
def test_pass_at_k_finite_and_exact_for_large_n(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    got = stats.pass_at_k(n, c, k)
    assert math.isfinite(got)
    exact = float(stats.pass_at_k_exact(n, c, k))
    assert got == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_pass_at_k_small_values_keep_relative_precision():
    # 1 - C(4999, 1)/C(5000, 1) = 1/5000: the log1p/expm1 form keeps it to many digits.
    assert stats.pass_at_k(5000, 1, 1) == pytest.approx(1 / 5000, rel=1e-12)
    exact = float(stats.pass_at_k_exact(4000, 2, 3))
    assert stats.pass_at_k(4000, 2, 3) == pytest.approx(exact, rel=1e-10)


def test_pass_at_k_edges():
    assert stats.pass_at_k(7, 0, 3) == 0.0
    assert stats.pass_at_k(7, 5, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a pass
    assert stats.pass_at_k(7, 7, 1) == 1.0


def test_pass_at_k_is_unbiased_and_plugin_is_not():
    # E over c ~ Binomial(n, p) of the estimator equals 1 - (1-p)^k exactly (k <= n).
    n, k, p = 10, 5, Fraction(3, 10)
    pmf = [math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)]
    expected_unbiased = sum(w * stats.pass_at_k_exact(n, c, k) for c, w in enumerate(pmf))
    assert expected_unbiased == 1 - (1 - p) ** k
    expected_plugin = sum(float(w) * stats.pass_at_k_plugin(n, c, k) for c, w in enumerate(pmf))
    assert expected_plugin < float(1 - (1 - p) ** k) - 0.01  # Jensen: biased low


def test_pass_at_k_curve():
    curve = stats.pass_at_k_curve(10, 3)
    assert len(curve) == 10
    assert curve[0] == pytest.approx(0.3)
    assert np.all(np.diff(curve) >= 0)
    assert curve[-1] == 1.0
    assert np.all(curve[7:] == 1.0)  # k > n - c = 7


def test_mean_pass_at_k_averages_tasks():
    got = stats.mean_pass_at_k([10, 4], [3, 0], 1)
    assert got == pytest.approx((0.3 + 0.0) / 2)
    with pytest.raises(ArlError, match="k=5 exceeds"):
        stats.mean_pass_at_k([10, 4], [3, 0], 5)


@pytest.mark.parametrize("n,c,k", [(5, 6, 1), (5, 2, 0), (5, 2, 6), (0, 0, 1), (5, -1, 1)])
def test_pass_at_k_rejects_bad_input(n, c, k):
    with pytest.raises(ArlError):
        stats.pass_at_k(n, c, k)


# -------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_seeded():
    v = np.random.default_rng(1).random(200)
    a = stats.bootstrap_mean_ci(v, n_boot=500, seed=3)
    b = stats.bootstrap_mean_ci(v, n_boot=500, seed=3)
    c = stats.bootstrap_mean_ci(v, n_boot=500, seed=4)
    assert a == b
    assert (a.lo, a.hi) != (c.lo, c.hi)
    assert a.lo < a.estimate < a.hi


def test_bootstrap_covers_true_mean_and_shrinks_with_tasks():
    rng = np.random.default_rng(0)
    small = stats.bootstrap_mean_ci(rng.random(100) < 0.3, n_boot=1000, seed=0)
    large = stats.bootstrap_mean_ci(rng.random(6400) < 0.3, n_boot=1000, seed=0)
    assert small.lo <= 0.3 <= small.hi
    assert large.lo <= 0.3 <= large.hi
    # width ~ 1/sqrt(N): 64x the tasks, about 1/8 of the width
    ratio = (large.hi - large.lo) / (small.hi - small.lo)
    assert 0.08 < ratio < 0.2


def test_bootstrap_coverage_is_near_nominal():
    rng = np.random.default_rng(7)
    covered = 0
    for i in range(120):
        v = rng.random(80) < 0.4
        ci = stats.bootstrap_mean_ci(v, n_boot=400, seed=i)
        covered += ci.lo <= 0.4 <= ci.hi
    assert 0.85 <= covered / 120 <= 1.0


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ArlError):
        stats.bootstrap_mean_ci([], n_boot=10)
    with pytest.raises(ArlError):
        stats.bootstrap_mean_ci([1.0], level=1.5)


# ------------------------------------------------------------------- paired comparison


def test_mcnemar_exact_hand_case():
    # b=1, c=5: n=6, P(X <= 1) = (1 + 6)/64, two-sided 14/64.
    assert stats.mcnemar_exact_p(1, 5) == pytest.approx(14 / 64)
    assert stats.mcnemar_exact_p(5, 1) == pytest.approx(14 / 64)
    assert stats.mcnemar_exact_p(0, 6) == pytest.approx(2 / 64)
    assert stats.mcnemar_exact_p(3, 3) == 1.0
    assert stats.mcnemar_exact_p(0, 0) == 1.0


def test_mcnemar_exact_agrees_with_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for b, c in [(40, 30), (12, 2), (0, 9), (300, 250)]:
        ref = scipy_stats.binomtest(min(b, c), b + c, 0.5).pvalue
        assert stats.mcnemar_exact_p(b, c) == pytest.approx(ref, rel=1e-9)


def test_mcnemar_chi2():
    stat, p = stats.mcnemar_chi2(40, 30)
    assert stat == pytest.approx(100 / 70)
    assert p == pytest.approx(math.erfc(math.sqrt(stat / 2)))
    stat_cc, p_cc = stats.mcnemar_chi2(40, 30, correction=True)
    assert stat_cc == pytest.approx(81 / 70)
    assert p_cc > p


def test_problem_22_numbers():
    # 500 tasks, A 41.0%, B 43.0%, B-only 40, A-only 30.
    a, b = stats.runs_from_counts(500, 0.41, 40, 30)
    r = stats.paired_comparison(a, b, n_boot=500)
    assert (r.mean_a, r.mean_b) == (pytest.approx(0.41), pytest.approx(0.43))
    assert (r.b_better, r.a_better) == (40, 30)
    assert r.diff == pytest.approx(0.02)
    assert r.se_paired == pytest.approx(math.sqrt(70) / 500)
    assert round(r.se_paired, 4) == 0.0167
    assert round(r.z, 1) == 1.2
    assert round(r.se_unpaired, 3) == 0.031
    assert round(math.sqrt(0.42 * 0.58 / 500), 3) == 0.022  # the book's per-rate SE
    assert round(stats.unpaired_se(0.41, 0.43, 500, 500), 3) == 0.031
    # "still not significant", and McNemar agrees
    assert r.p_z > 0.05 and r.mcnemar_exact_p > 0.05 and r.chi2_p > 0.05
    assert r.z**2 == pytest.approx(r.chi2)  # uncorrected McNemar is the paired z squared
    assert r.ci_diff.lo < 0 < r.ci_diff.hi


def test_paired_se_beats_unpaired_when_runs_are_correlated():
    rng = np.random.default_rng(0)
    n = 400
    difficulty = rng.random(n)  # shared by both runs: outcomes correlate across runs
    a = (rng.random(n) < difficulty).astype(float)
    b = np.where(rng.random(n) < 0.9, a, (rng.random(n) < difficulty).astype(float))
    r = stats.paired_comparison(a, b, n_boot=200)
    assert r.se_paired < 0.6 * r.se_unpaired
    # independent runs: pairing buys nothing, the two SEs are close
    c = (rng.random(n) < 0.5).astype(float)
    d = (rng.random(n) < 0.5).astype(float)
    r2 = stats.paired_comparison(c, d, n_boot=200)
    assert r2.se_paired == pytest.approx(r2.se_unpaired, rel=0.15)


def test_paired_with_several_samples_per_task():
    a = [0.25, 0.5, 1.0, 0.0]
    b = [0.75, 0.5, 0.5, 0.25]
    r = stats.paired_comparison(a, b, n_boot=100)
    d = np.array(b) - np.array(a)
    assert (r.b_better, r.a_better, r.ties) == (2, 1, 1)
    assert r.diff == pytest.approx(d.mean())
    assert r.se_paired == pytest.approx(math.sqrt(np.sum(d**2)) / 4)
    assert r.mcnemar_exact_p == pytest.approx(stats.mcnemar_exact_p(2, 1))


def test_paired_rejects_mismatched_runs():
    with pytest.raises(ArlError):
        stats.paired_comparison([1.0, 0.0], [1.0])


# ------------------------------------------------------------------------ result files


def _write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_load_results_ignores_extra_keys(tmp_path):
    p = _write(
        tmp_path / "r.jsonl",
        [
            {"task": "t1", "sample": 0, "passed": True, "reward": 1.0, "turns": 4},
            {"task": "t1", "sample": 1, "passed": False},
            "",
            {"task": "t2", "sample": 0, "passed": False, "extra": {"x": 1}},
        ],
    )
    res = stats.load_results(p)
    assert res == {"t1": {0: True, 1: False}, "t2": {0: False}}
    names, n, c = stats.task_counts(res)
    assert names == ["t1", "t2"] and n.tolist() == [2, 1] and c.tolist() == [1, 0]


@pytest.mark.parametrize(
    "rows,match",
    [
        ([{"task": "t", "sample": 0, "passed": True}, "{not json"], r":2: invalid JSON"),
        ([{"task": "t", "sample": 0}], r":1: missing key 'passed'"),
        ([{"sample": 0, "passed": True}], r":1: missing key 'task'"),
        ([{"task": "t", "sample": "0", "passed": True}], r"'sample' must be int"),
        ([{"task": "t", "sample": 0, "passed": 1}], r"'passed' must be bool"),
        ([[1, 2]], r"expected a JSON object"),
        ([{"task": "t", "sample": 0, "passed": True}] * 2, r":2: duplicate episode"),
        ([""], r"no episodes"),
    ],
)
def test_load_results_errors(tmp_path, rows, match):
    p = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ArlError, match=match):
        stats.load_results(p)


def test_load_results_missing_file(tmp_path):
    with pytest.raises(ArlError, match="no such file"):
        stats.load_results(tmp_path / "absent.jsonl")


def test_align_tasks():
    a = {"t1": {0: True}, "t2": {0: False}}
    b = {"t1": {0: False}, "t3": {0: True}}
    with pytest.raises(ArlError, match="1 only in A .*1 only in B"):
        stats.align_tasks(a, b)
    assert stats.align_tasks(a, b, intersect=True) == (["t1"], 1, 1)
    assert stats.align_tasks(a, a) == (["t1", "t2"], 0, 0)


def test_t_critical_against_scipy_and_the_table():
    from scipy.stats import t

    from arl.eval.stats import t_critical

    # Student's t at one-sided 97.5%: 12.706 (df 1), 3.182 (df 3: four seeds), 2.365 (df 7:
    # eight seeds), 1.960 as df grows; the 2-SE rule was too lax below about 60 seeds
    assert t_critical(3) == pytest.approx(3.182446305, abs=1e-9)
    assert t_critical(7) == pytest.approx(2.364624252, abs=1e-9)
    assert t_critical(1) == pytest.approx(12.70620474, abs=1e-8)
    for df in (2, 5, 9, 30, 239):
        assert t_critical(df) == pytest.approx(float(t.ppf(0.975, df)), rel=1e-12)
    assert 1.96 < t_critical(10_000) < 1.961
    assert t_critical(0) == float("inf")  # one seed: no interval
    for bad in (2.5, True, "3"):
        with pytest.raises(ArlError):
            t_critical(bad)


def test_seed_effect_by_hand():
    from arl.eval.stats import seed_effect

    e = seed_effect([0.1, 0.3, 0.2], threshold=0.15)
    # mean 0.2; std(ddof=1) = 0.1; se = 0.1/sqrt(3); df 2: t = 4.302653
    assert e.mean == pytest.approx(0.2)
    assert e.se == pytest.approx(0.1 / 3**0.5)
    assert e.df == 2 and e.t == pytest.approx(4.302652730)
    assert e.lo == pytest.approx(0.2 - 4.302652730 * 0.1 / 3**0.5)
    assert e.hi == pytest.approx(0.2 + 4.302652730 * 0.1 / 3**0.5)
    assert e.k_above == 2 and e.n == 3
    one = seed_effect([0.4])
    assert one.se == 0.0 and one.df == 0 and one.lo == -float("inf") and one.hi == float("inf")
    with pytest.raises(ArlError):
        seed_effect([0.1, float("nan")])


def test_the_t_bound_keeps_its_false_positive_rate_at_four_seeds():
    """Null effects (mean 0, any spread) drawn for four seeds: the t bound clears 0 in 2.5% of
    draws; the old 2-SE bound did in about 7%."""
    from arl.eval.stats import seed_effect

    rng = np.random.default_rng(0)
    draws = rng.normal(0.0, 0.1, size=(20_000, 4))
    se = draws.std(1, ddof=1) / 2
    two_se = np.mean(draws.mean(1) - 2 * se > 0)
    t_rate = np.mean([seed_effect(d).lo > 0 for d in draws[:4000]])
    assert 0.06 < two_se < 0.08
    assert abs(t_rate - 0.025) < 0.008


def test_seed_se_by_hand_over_a_list_and_over_an_axis():
    # std(ddof=1) of 0.1, 0.3, 0.2 is 0.1, so the SE of their mean is 0.1/sqrt(3)
    assert stats.seed_se([0.1, 0.3, 0.2]) == pytest.approx(0.1 / 3**0.5)
    assert isinstance(stats.seed_se([0.1, 0.3]), float)
    # a (seeds, points) array: one SE per point, seeds along axis 0
    curves = np.array([[0.0, 1.0, 0.5], [0.2, 1.0, 0.1]])
    np.testing.assert_allclose(stats.seed_se(curves), [0.1, 0.0, 0.2])  # std/sqrt(2) = |a-b|/2
    # one seed measures no spread: 0, of the trailing shape
    assert stats.seed_se([0.4]) == 0.0
    np.testing.assert_array_equal(stats.seed_se(curves[:1]), np.zeros(3))
    assert stats.seed_effect([0.4]).se == 0.0  # the seed effect uses the same helper

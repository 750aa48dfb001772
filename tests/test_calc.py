"""Every number Appendix B computes, from the calculators, at the book's rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arl import calc
from arl.errors import ArlError


# ------------------------------------------------------------------------- Problem 3
@pytest.mark.parametrize(
    "p,G,book",
    [
        (0.1, 4, 0.656),
        (0.1, 8, 0.430),
        (0.1, 16, 0.185),
        (0.3, 4, 0.248),
        (0.3, 8, 0.058),
        (0.3, 16, 0.003),
    ],
)
def test_degenerate_group_problem_3(p, G, book):
    assert calc.degenerate_group_prob(p, G) == pytest.approx(book, abs=5e-4)


def test_degenerate_group_edges():
    assert calc.degenerate_group_prob(0.0, 8) == 1.0
    assert calc.degenerate_group_prob(0.5, 1) == 1.0  # a group of one never has a baseline
    with pytest.raises(ArlError, match="p: must be a finite number in"):
        calc.degenerate_group_prob(1.5, 4)
    with pytest.raises(ArlError, match="G: must be an integer"):
        calc.degenerate_group_prob(0.5, 0)


# ------------------------------------------------------------------------ Exercise 1
def test_uniform_pool_closed_form_matches_numeric_integral():
    grid = (np.arange(200_000) + 0.5) / 200_000 * 0.4  # midpoint rule
    for G in (2, 4, 8, 16):
        numeric = float(np.mean(grid**G + (1 - grid) ** G))
        assert calc.mean_degenerate_prob_uniform(G, 0.0, 0.4) == pytest.approx(numeric, rel=1e-8)
        pool = list((np.arange(200) + 0.5) / 200 * 0.4)  # an empirical pool of 200 tasks
        assert calc.mean_degenerate_prob(G, pool) == pytest.approx(numeric, rel=1e-3)


def test_best_group_size_exercise_1():
    # Uniform on [0, 0.4], 512 episodes: expected tasks with nonzero gradient per step is
    # (512 // G) * (1 - E[p^G + (1-p)^G]); for G = 2 and 3 it is 512 E[p(1-p)] = 75.09 either way
    # (170 whole prompts make G = 3 slightly worse), and it falls for larger G.
    G, value = calc.best_group_size(512, 0.0, 0.4)
    assert G == 2
    assert value == pytest.approx(512 * (0.2 - 0.16 / 3 * 1.0), rel=1e-9)  # 512 (E p - E p^2)
    vals = [
        calc.informative_tasks_per_step(g, 512, calc.mean_degenerate_prob_uniform(g, 0, 0.4))
        for g in (4, 8, 16, 32)
    ]
    assert vals == sorted(vals, reverse=True)
    assert vals[0] == pytest.approx(68.32, abs=0.01)
    # restricted to the problem's options, G = 4 wins under this metric
    assert calc.best_group_size(512, 0.0, 0.4, candidates=[4, 8, 16])[0] == 4


# ------------------------------------------------------------------------- Problem 4
def test_std_normalization_problem_4():
    adv = calc.group_advantages([1.0] + [0.0] * 7, std=True)
    assert adv[0] == pytest.approx(math.sqrt(7))
    assert round(adv[0], 2) == 2.65
    assert round(adv[1], 3) == -0.378
    assert adv[1] == pytest.approx(-1 / math.sqrt(7))
    raw = calc.group_advantages([1.0] + [0.0] * 7)  # the trainer's default: no std
    assert (raw[0], raw[1]) == (pytest.approx(0.875), pytest.approx(-0.125))
    assert round(math.sqrt(0.125 * 0.875), 3) == 0.331
    assert calc.std_norm_factor(0.5) == pytest.approx(2.0)
    assert round(calc.std_norm_factor(0.125), 2) == 3.02
    # normalization multiplies every advantage by the same factor
    assert adv[0] / raw[0] == pytest.approx(calc.std_norm_factor(0.125))


def test_std_normalization_rejects_degenerate_group():
    with pytest.raises(ArlError, match="degenerate"):
        calc.group_advantages([1.0, 1.0, 1.0], std=True)
    with pytest.raises(ArlError):
        calc.std_norm_factor(0.0)


# ------------------------------------------------------------------------- Problem 5
def test_kl_estimates_problem_5():
    est = calc.kl_estimates([-0.2, 0.1, -0.5])
    assert round(est["k1"], 3) == 0.200
    assert round(est["k2"], 3) == 0.050
    assert round(est["k3"], 4) == 0.0435
    per_k3 = [calc.kl_k3(x) for x in (-0.2, 0.1, -0.5)]
    assert [round(v, 4) for v in per_k3] == [0.0187, 0.0052, 0.1065]
    assert calc.kl_k1(0.1) < 0 <= min(per_k3)  # k1 can be negative, k3 never
    assert [calc.kl_k2(x) for x in (-0.2, 0.1, -0.5)] == pytest.approx([0.02, 0.005, 0.125])


# --------------------------------------------------------------- Problem 9, Exercise 3
def test_flip_noise_problem_9_and_exercise_3():
    f, p = 0.04, 0.3
    assert calc.gradient_factor(f) == pytest.approx(0.92)  # the 8% signal shrink
    assert round(1 - calc.gradient_factor(f), 2) == 0.08
    assert calc.observed_reward(p, f) == pytest.approx(f + (1 - 2 * f) * p)
    assert calc.observed_reward(p, f, one_sided=True) == pytest.approx((1 - f) * p)
    assert calc.gradient_factor(f, one_sided=True) == pytest.approx(0.96)
    # the factor is the derivative of the observed reward in the true one, in both cases
    h = 1e-6
    for one_sided in (False, True):
        slope = (
            calc.observed_reward(p + h, f, one_sided) - calc.observed_reward(p, f, one_sided)
        ) / h
        assert slope == pytest.approx(calc.gradient_factor(f, one_sided), rel=1e-6)


# ------------------------------------------------------------------------ Problem 12
def test_step_penalty_problem_12():
    low = calc.step_penalty_values(0.08)
    assert low["submit_now"] == pytest.approx(-0.02)
    assert low["attempt"] == pytest.approx(0.08 - 0.12)
    assert low["break_even_q"] == pytest.approx(0.10)
    assert low["submit_wins"] == 1.0
    assert calc.step_penalty_values(0.25)["submit_wins"] == 0.0


# ------------------------------------------------------------------------ Problem 15
def test_startup_share_problem_15():
    assert round(calc.startup_share(3, 8), 2) == 0.27


# ------------------------------------------------------------------------ Problem 18
def test_littles_law_problem_18():
    w = calc.episode_seconds(turns=50, tokens_per_turn=400, decode_tps=40, tool_s=8, startup_s=180)
    assert w == pytest.approx(18 * 60)
    in_flight = calc.episodes_in_flight(512, 30 * 60, w)
    assert round(in_flight) == 307


def test_kv_cache_bytes():
    # 2 (K, V) x 64 layers x 8 KV heads x 128 dims x 2 bytes = 256 KiB per token
    per_tok = calc.kv_bytes_per_token(64, 8, 128, 2)
    assert per_tok == 2 * 64 * 8 * 128 * 2 == 256 * 1024
    assert calc.kv_fleet_bytes(307, 64_000, per_tok) == pytest.approx(307 * 64_000 * 262_144)
    with pytest.raises(ArlError, match="n_kv_heads"):
        calc.kv_bytes_per_token(64, 0, 128, 2)


# ---------------------------------------------------------------- Problem 19, Exercise 2
def test_gpu_hours_problem_19():
    r = calc.rl_step_cost()  # defaults are the problem's numbers
    assert r["train_flops"] == pytest.approx(2.36e18, rel=5e-3)
    assert r["logprob_flops"] == pytest.approx(1.57e18, rel=5e-3)
    assert r["trainer_flops"] == pytest.approx(3.93e18, rel=5e-3)
    assert r["prefill_flops"] == pytest.approx(5.9e17, rel=5e-3)
    assert round(r["train_gpu_h"], 1) == 2.7
    assert round(r["decode_gpu_h"], 2) == 0.85
    assert round(r["prefill_gpu_h"], 1) == 0.4
    assert round(r["step_gpu_h"]) == 4
    assert round(r["gen_gpu_h_at_util"]) == 5
    # 2.73 + 5.05 = 7.78; the book adds its rounded 2.7 and 5 to get 7.7
    assert r["step_gpu_h_at_util"] == pytest.approx(7.7, abs=0.1)
    assert r["run_gpu_h_at_util"] == pytest.approx(2300, rel=0.02)


def test_gpu_hours_moe_exercise_2():
    dense = calc.rl_step_cost()
    moe = calc.rl_step_cost(n_total=200e9, n_active=20e9)
    for key in ("train_flops", "logprob_flops", "prefill_flops", "train_gpu_h", "prefill_gpu_h"):
        assert moe[key] / dense[key] == pytest.approx(20 / 32), key  # active parameters
    for key in ("weights_bytes", "train_state_bytes"):
        assert moe[key] / dense[key] == pytest.approx(200 / 32), key  # total parameters
    assert moe["decode_gpu_h"] == dense["decode_gpu_h"]  # a measured rate, not a FLOP count
    assert calc.SCALES_WITH["train_flops"] == "active"
    assert calc.SCALES_WITH["weights_bytes"] == "total"
    with pytest.raises(ArlError, match="n_active"):
        calc.rl_step_cost(n_total=20e9, n_active=200e9)


# ---------------------------------------------------------------- Problems 21 and 22
def test_pass_at_k_problem_21_via_calc():
    assert round(calc.pass_at_k(10, 3, 5)["unbiased"], 3) == 0.917
    assert round(calc.pass_at_k(10, 3, 5)["plugin"], 3) == 0.832
    assert calc.pass_at_k(10, 3, 1)["unbiased"] == pytest.approx(0.3)


def test_paired_problem_22_via_calc():
    r = calc.paired_vs_unpaired(500, 0.41, 40, 30)
    assert round(r.se_paired, 4) == 0.0167
    assert round(r.z, 1) == 1.2
    assert round(r.se_unpaired, 3) == 0.031
    assert r.diff == pytest.approx(10 / 500)
    with pytest.raises(ArlError, match="inconsistent"):
        calc.paired_vs_unpaired(100, 0.1, 50, 30)


def test_the_float_twins_agree_with_the_trainers_math():
    """calc's Problem 4 and 5 calculators compute what arl.losses computes (to rounding)."""
    import torch

    from arl import losses

    r = [1.0, 0.0, 0.0, 1.0, 0.5]
    t = torch.tensor(r, dtype=torch.float64)
    for std in (True, False):
        want = losses.group_advantages(t, "mean", std=std, eps=0.0).tolist()
        assert calc.group_advantages(r, std) == pytest.approx(want, rel=1e-12)
    assert calc.group_advantages(r) == pytest.approx(losses.group_advantages(t).tolist())
    for x in (-3.0, -0.2, 0.0, 0.1, 2.5):
        x_t = torch.tensor(x, dtype=torch.float64)
        for name in ("kl_k1", "kl_k2", "kl_k3"):
            want = float(getattr(losses, name)(x_t))
            assert getattr(calc, name)(x) == pytest.approx(want, rel=1e-12, abs=1e-15)

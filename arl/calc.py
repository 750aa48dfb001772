"""Closed-form design-review calculators: the arithmetic of Appendix B, one function each.

Every function is pure and names the problem it comes from; `arl calc NAME` runs them with
the problem's numbers as defaults. Invalid inputs raise ArlError naming the bad value.

The Problem 4 and 5 calculators are the float64 twins of the trainer's tensor math in
arl.losses (group_advantages, kl_k1/k2/k3), with the same conventions: advantages are
r - mean(group), divided by the population std when asked; the KL log-ratio is
log pi_ref - log pi_theta on tokens from pi_theta. They stay apart so that the numbers
they print are exact doubles (torch's expm1 and reductions differ from math's in the last
bit); tests/test_calc.py checks each twin against its arl.losses original.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from arl.checks import check
from arl.errors import ArlError
from arl.eval import stats

MAX_LOG_RATIO = 700.0  # exp(x) overflows a double just above 709
REALISTIC_LOG_RATIO = 20.0  # per token, |log pi_ref - log pi_theta| beyond: a ratio of e^20


def _prob(name: str, p: float) -> float:
    """Check that p is a probability."""
    return check(name, p, 0.0, 1.0)


def _pos(name: str, x: float) -> float:
    """Check that x is finite and strictly positive."""
    return check(name, x, 0.0, open_lo=True)


def _nonneg(name: str, x: float) -> float:
    """Check that x is finite and non-negative."""
    return check(name, x, 0.0)


def _group(G: int) -> int:
    """Check a group size."""
    if isinstance(G, float) and G.is_integer():
        G = int(G)
    return check("G", G, 1, integer=True)


# ------------------------------------------------------ Problem 3 and Exercise 1: group size


def degenerate_group_prob(p: float, G: int) -> float:
    """P(all G rewards equal) = p^G + (1-p)^G for binary reward with success rate p (Problem 3).

    Such a group has zero group-relative advantage, hence no gradient.
    """
    _prob("p", p)
    G = _group(G)
    return p**G + (1.0 - p) ** G


def mean_degenerate_prob_uniform(G: int, lo: float, hi: float) -> float:
    """E[p^G + (1-p)^G] for p ~ Uniform[lo, hi], in closed form (Exercise 1)."""
    _prob("lo", lo)
    _prob("hi", hi)
    G = _group(G)
    if hi < lo:
        raise ArlError(f"hi must be >= lo, got lo={lo}, hi={hi}")
    if hi == lo:
        return degenerate_group_prob(lo, G)
    integral = (hi ** (G + 1) - lo ** (G + 1)) + ((1 - lo) ** (G + 1) - (1 - hi) ** (G + 1))
    return integral / ((G + 1) * (hi - lo))


def mean_degenerate_prob(G: int, rates: Sequence[float]) -> float:
    """E[p^G + (1-p)^G] over an empirical pool of per-task success rates (Exercise 1)."""
    if len(rates) == 0:
        raise ArlError("the pool of success rates is empty")
    return float(np.mean([degenerate_group_prob(p, G) for p in rates]))


def informative_tasks_per_step(G: int, budget: int, mean_degenerate: float) -> float:
    """Expected tasks with nonzero gradient per step: (budget // G) prompts x P(mixed group).

    Exercise 1: each of the budget // G prompts draws a task from the pool.
    """
    G = _group(G)
    if budget < G:
        raise ArlError(f"budget ({budget}) must be at least G ({G})")
    return (budget // G) * (1.0 - _prob("mean_degenerate", mean_degenerate))


def best_group_size(
    budget: int, lo: float, hi: float, candidates: Sequence[int] | None = None
) -> tuple[int, float]:
    """G maximizing expected informative tasks per step for p ~ Uniform[lo, hi] (Exercise 1).

    Candidates default to every G from 2 to the budget; ties go to the smaller G.
    """
    gs = list(candidates) if candidates is not None else list(range(2, budget + 1))
    if not gs:
        raise ArlError("no candidate group sizes")
    scores = [
        (informative_tasks_per_step(G, budget, mean_degenerate_prob_uniform(G, lo, hi)), -G)
        for G in gs
    ]
    value, neg_g = max(scores)
    return -neg_g, value


# ------------------------------------------------- Problem 4: std-normalized advantages


def group_advantages(rewards: Sequence[float], std: bool = False, eps: float = 0.0) -> list:
    """r - mean, or (r - mean)/(std + eps) with the population std if `std` (Problem 4).

    losses.group_advantages(r, "mean", std, eps) in float64, with the same default (no
    normalization: PGConfig.std_norm False, the book's advice for verifier rewards). eps 0: a
    degenerate group is an error here, not a division by eps.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.size == 0:
        raise ArlError("need at least one reward")
    if not np.isfinite(r).all():
        raise ArlError("rewards: must be finite numbers")
    a = r - r.mean()
    if std:
        sd = r.std()
        if sd + eps == 0:
            raise ArlError("all rewards are equal: the std is 0 (a degenerate group)")
        a = a / (sd + eps)
    return a.tolist()


def std_norm_factor(p_hat: float) -> float:
    """Factor 1/sqrt(p(1-p)) by which std normalization scales binary advantages (Problem 4)."""
    _prob("p_hat", p_hat)
    if p_hat in (0.0, 1.0):
        raise ArlError("p_hat must be strictly between 0 and 1 (the std is 0 otherwise)")
    return 1.0 / math.sqrt(p_hat * (1.0 - p_hat))


# ------------------------------------------------------------ Problem 5: KL estimators


def _log_ratio(x: float) -> float:
    """A log-ratio: finite, and <= 700 so that rho = exp(x) is a double."""
    return check("log_ratio", x, None, MAX_LOG_RATIO)


def kl_k1(log_ratio: float) -> float:
    """k1 = -log rho, log rho = log pi_ref - log pi_theta on a token from pi_theta (Problem 5)."""
    return -_log_ratio(log_ratio)


def kl_k2(log_ratio: float) -> float:
    """k2 = (log rho)^2 / 2: biased, close to k3 for small log-ratios (Problem 5)."""
    return 0.5 * _log_ratio(log_ratio) ** 2


def kl_k3(log_ratio: float) -> float:
    """k3 = (rho - 1) - log rho: unbiased and never negative (Problem 5).

    Log-ratios above 700 are refused: rho = exp(x) overflows a double just above 709.
    """
    return math.expm1(_log_ratio(log_ratio)) - log_ratio


def kl_estimates(log_ratios: Sequence[float]) -> dict[str, float]:
    """Means of k1, k2, k3 over tokens sampled from pi_theta (Problem 5)."""
    if len(log_ratios) == 0:
        raise ArlError("need at least one log-ratio")
    return {
        name: float(np.mean([f(x) for x in log_ratios]))
        for name, f in (("k1", kl_k1), ("k2", kl_k2), ("k3", kl_k3))
    }


# ---------------------------------------------- Problem 9 and Exercise 3: flaky rewards


def observed_reward(p: float, f: float, one_sided: bool = False) -> float:
    """Expected observed reward under flips with probability f (Problem 9, Exercise 3).

    Symmetric flips: f + (1 - 2f) p. False negatives only (passes flip to fails): (1 - f) p.
    """
    _prob("p", p)
    _prob("f", f)
    return (1.0 - f) * p if one_sided else f + (1.0 - 2.0 * f) * p


def gradient_factor(f: float, one_sided: bool = False) -> float:
    """d(observed reward)/d(true reward): 1 - 2f symmetric, 1 - f one-sided (Problem 9, Ex. 3)."""
    _prob("f", f)
    return 1.0 - f if one_sided else 1.0 - 2.0 * f


# ---------------------------------------------------------- Problem 12: step penalty


def step_penalty_values(
    q: float,
    penalty: float = 0.02,
    attempt_turns: int = 6,
    submit_turns: int = 1,
    reward: float = 1.0,
) -> dict[str, float]:
    """Returns of submitting at once vs attempting, under a per-turn penalty (Problem 12).

    Attempt: q * reward - penalty * attempt_turns; submitting at once fails and pays for its
    turns. Submitting wins when q is below the break-even rate.
    """
    _prob("q", q)
    _nonneg("penalty", penalty)
    _pos("reward", reward)
    if attempt_turns < submit_turns or submit_turns < 1:
        raise ArlError("need 1 <= submit_turns <= attempt_turns")
    submit = -penalty * submit_turns
    attempt = q * reward - penalty * attempt_turns
    return {
        "submit_now": submit,
        "attempt": attempt,
        "break_even_q": penalty * (attempt_turns - submit_turns) / reward,
        "submit_wins": float(submit > attempt),
    }


# ---------------------------------------------------------------- Problem 15: start-up


def startup_share(startup_s: float, episode_s: float) -> float:
    """Share of an episode's wall-clock time spent starting its container (Problem 15)."""
    _nonneg("startup_s", startup_s)
    _pos("episode_s", episode_s)
    return startup_s / (startup_s + episode_s)


# ------------------------------------------------- Problem 18: Little's law and KV cache


def episode_seconds(
    turns: float, tokens_per_turn: float, decode_tps: float, tool_s: float, startup_s: float = 0.0
) -> float:
    """Wall-clock time of one episode: turns x (decode + tool) + start-up (Problem 18)."""
    _pos("turns", turns)
    _nonneg("tokens_per_turn", tokens_per_turn)
    _pos("decode_tps", decode_tps)
    _nonneg("tool_s", tool_s)
    _nonneg("startup_s", startup_s)
    return turns * (tokens_per_turn / decode_tps + tool_s) + startup_s


def episodes_in_flight(episodes_per_step: float, step_s: float, episode_s: float) -> float:
    """Little's law L = lambda W: episodes in flight at a throughput and duration (Problem 18)."""
    _pos("episodes_per_step", episodes_per_step)
    _pos("step_s", step_s)
    _pos("episode_s", episode_s)
    return episodes_per_step / step_s * episode_s


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, d_head: int, bytes_per_elem: float) -> float:
    """KV-cache bytes per token: 2 (K and V) x layers x KV heads x head dim x bytes (Problem 18)."""
    for name, v in (
        ("n_layers", n_layers),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("bytes_per_elem", bytes_per_elem),
    ):
        _pos(name, v)
    return 2.0 * n_layers * n_kv_heads * d_head * bytes_per_elem


def kv_fleet_bytes(n_seqs: float, tokens_per_seq: float, bytes_per_token: float) -> float:
    """KV-cache bytes for n_seqs resident sequences of tokens_per_seq tokens each (Problem 18)."""
    _nonneg("n_seqs", n_seqs)
    _nonneg("tokens_per_seq", tokens_per_seq)
    return n_seqs * tokens_per_seq * _pos("bytes_per_token", bytes_per_token)


# ---------------------------------------------- Problem 19 and Exercise 2: FLOPs, GPU-hours


def train_flops(n_params: float, tokens: float) -> float:
    """Forward plus backward: 6N FLOPs per token, attention ignored (Problem 19)."""
    return 6.0 * _pos("n_params", n_params) * _nonneg("tokens", tokens)


def forward_flops(n_params: float, tokens: float, passes: int = 1) -> float:
    """2N FLOPs per token per forward pass; old + reference log-probs: 2 passes, 4N (Problem 19)."""
    return 2.0 * passes * _pos("n_params", n_params) * _nonneg("tokens", tokens)


def gpu_hours(flops: float, peak_flops: float, mfu: float) -> float:
    """GPU-hours to do `flops` at a peak FLOP/s and a model FLOPs utilization (Problem 19)."""
    _pos("peak_flops", peak_flops)
    if not 0 < mfu <= 1:
        raise ArlError(f"mfu must be in (0, 1], got {mfu}")
    return _nonneg("flops", flops) / (peak_flops * mfu) / 3600.0


def decode_gpu_hours(tokens: float, tokens_per_s_per_gpu: float) -> float:
    """GPU-hours to decode `tokens` at an aggregate decode rate per GPU (Problem 19)."""
    return _nonneg("tokens", tokens) / _pos("tokens_per_s_per_gpu", tokens_per_s_per_gpu) / 3600.0


def rl_step_cost(
    n_total: float = 32e9,
    n_active: float | None = None,
    episodes: int = 512,
    tokens_per_episode: float = 24_000,
    policy_tokens_per_episode: float = 6_000,
    peak_flops: float = 1e15,
    mfu: float = 0.4,
    decode_tps_per_gpu: float = 1_000,
    gen_utilization: float = 0.25,
    steps: int = 300,
    weight_bytes: float = 2.0,
    train_state_bytes: float = 16.0,
) -> dict[str, float]:
    """Per-step FLOPs and GPU-hours of an RL run, dense or mixture-of-experts (Problem 19, Ex. 2).

    FLOPs scale with the active parameters (n_active, = n_total when dense); weights, trainer
    state (bf16 weights + fp32 master + Adam moments, ~16 B/param) and the weight sync scale with
    n_total. Prefill runs once per non-policy token (prefix caching) at the training MFU.
    Generation at `gen_utilization` costs (decode + prefill) / utilization.
    """
    n_act = n_total if n_active is None else n_active
    _pos("n_total", n_total)
    if not 0 < n_act <= n_total:
        raise ArlError(f"n_active must be in (0, n_total], got {n_act}")
    if not 0 < gen_utilization <= 1:
        raise ArlError(f"gen_utilization must be in (0, 1], got {gen_utilization}")
    if policy_tokens_per_episode > tokens_per_episode:
        raise ArlError("policy_tokens_per_episode must be <= tokens_per_episode")
    tokens = episodes * tokens_per_episode
    policy_tokens = episodes * policy_tokens_per_episode
    prefill_tokens = tokens - policy_tokens
    f_train = train_flops(n_act, tokens)
    f_logp = forward_flops(n_act, tokens, passes=2)
    f_prefill = forward_flops(n_act, prefill_tokens)
    h_train = gpu_hours(f_train + f_logp, peak_flops, mfu)
    h_decode = decode_gpu_hours(policy_tokens, decode_tps_per_gpu)
    h_prefill = gpu_hours(f_prefill, peak_flops, mfu)
    h_gen_low_util = (h_decode + h_prefill) / gen_utilization
    return {
        "train_flops": f_train,
        "logprob_flops": f_logp,
        "trainer_flops": f_train + f_logp,
        "prefill_flops": f_prefill,
        "train_gpu_h": h_train,
        "decode_gpu_h": h_decode,
        "prefill_gpu_h": h_prefill,
        "step_gpu_h": h_train + h_decode + h_prefill,
        "gen_gpu_h_at_util": h_gen_low_util,
        "step_gpu_h_at_util": h_train + h_gen_low_util,
        "run_gpu_h_at_util": steps * (h_train + h_gen_low_util),
        "weights_bytes": weight_bytes * n_total,
        "train_state_bytes": train_state_bytes * n_total,
    }


# Which parameter count each term of rl_step_cost scales with (Exercise 2).
SCALES_WITH = {
    "train_flops": "active",
    "logprob_flops": "active",
    "trainer_flops": "active",
    "prefill_flops": "active",
    "train_gpu_h": "active",
    "decode_gpu_h": "measured rate (memory-bound: total resident, active read per token)",
    "prefill_gpu_h": "active",
    "step_gpu_h": "mostly active",
    "gen_gpu_h_at_util": "measured rate + active",
    "step_gpu_h_at_util": "mostly active",
    "run_gpu_h_at_util": "mostly active",
    "weights_bytes": "total",
    "train_state_bytes": "total",
}


# ------------------------------------------------------ Problems 21 and 22 (via stats)


def pass_at_k(n: int, c: int, k: int) -> dict[str, float]:
    """Unbiased pass@k beside the plug-in 1 - (1 - c/n)^k for one task (Problem 21)."""
    return {"unbiased": stats.pass_at_k(n, c, k), "plugin": stats.pass_at_k_plugin(n, c, k)}


def paired_vs_unpaired(n_tasks: int, acc_a: float, b: int, c: int) -> stats.PairedComparison:
    """Paired comparison of Problem 22 from its counts: N tasks, A's accuracy, b (B only), c."""
    if n_tasks < 1:
        raise ArlError(f"n_tasks must be >= 1, got {n_tasks}")
    _prob("acc_a", acc_a)
    run_a, run_b = stats.runs_from_counts(n_tasks, acc_a, b, c)
    return stats.paired_comparison(run_a, run_b)

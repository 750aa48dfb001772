"""Problem 20: a training-inference mismatch that grows.

Three RL arms from the weak base (entropy about 0.4 nats, which RL then lowers), on-policy
(staleness 0: the sampler holds the trainer's current weights, so mu and pi_prox differ only
in numerics), at lr LR with 2 epochs x 2 minibatches (chosen once from the sweep in the docs):
the sampler in float32 (the trainer's own numerics), the sampler in bfloat16 (PGConfig
.sampler_dtype: a bf16 copy of the same weights, logits in bf16, log-softmax in fp32) with the
truncated importance weight min(pi_prox / mu, 2), and in bfloat16 without it. Each step logs
|log pi_prox - log mu| over its policy tokens: the mean and the 99.9th percentile
(`mismatch/mean`, `mismatch/p999`), beside entropy and the sampled pass rate; every 5 steps a
fixed evaluation (the same episodes' seeds every time) gives the train pass rate the arms are
compared on.
"""

from __future__ import annotations

import numpy as np

from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
    arms_figure,
    first_last,
    rl_config,
    series,
    start,
    tail_mean,
)
from arl.gym.tasks import tasks_for
from arl.train.pg import train_pg

LR = 1e-3  # chosen once by a sweep (docs/problems.md): entropy fell most (0.62 -> 0.32 nats)
TUNED = (
    Tuning(
        "lr",
        LR,
        (0,),
        "a sweep of RL learning rates from the weak base on seed 0: the one under which entropy "
        "fell most (0.62 -> 0.32 nats), so that the mismatch could grow as entropy falls",
    ),
)
PASS = "eval/train_pass"  # the fixed evaluation the pass effects are judged on
FP32, BF16_IS, BF16_NO = "fp32 sampler", "bf16 sampler, truncated IS", "bf16 sampler, no IS"
ARMS = {
    FP32: {"sampler_dtype": "float32"},
    BF16_IS: {"sampler_dtype": "bfloat16", "is_correction": True},
    BF16_NO: {"sampler_dtype": "bfloat16", "is_correction": False},
}
COMMON = {"staleness": 0, "lr": LR, "epochs": 2, "minibatches": 2}
KEYS = ("mismatch/mean", "mismatch/p999", "entropy", "pass_rate", "capped_frac", "grad_norm", PASS)
FP32_ZERO = 1e-5  # nats: the fp32 sampler's mismatch is kernel noise (cache vs whole forward)


def growth(res: dict, arm: str, key: str) -> float:
    """Last-quarter mean over first-quarter mean of a metric (1: flat)."""
    fl = res[arm][key]
    return fl["last"] / max(fl["first"], 1e-12)


def ranks(xs: list[float]) -> np.ndarray:
    """Ranks 0..n-1 of a series, ties given their mean rank."""
    a = np.asarray(xs, dtype=float)
    r = np.empty(len(a))
    r[a.argsort(kind="stable")] = np.arange(len(a))
    for v in np.unique(a):
        r[a == v] = r[a == v].mean()
    return r


def rank_corr(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation of two equal-length series (0 when either is constant)."""
    rx, ry = ranks(xs), ranks(ys)
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def problem_20(ctx: Ctx):
    """From the weak base: the same weights sampled in fp32 or bf16, with or without IS."""
    runs = {}
    for name, overrides in ARMS.items():
        config = rl_config(
            ctx, steps=ctx.pick(30, 4), eval_every=ctx.pick(5, 2), **COMMON, **overrides
        )
        runs[name] = train_pg(start(ctx, "weak"), config, tasks_for("train"))
    res = first_last(runs, KEYS)
    # step 1 (the first training record; step 0's is the evaluation): the same weights
    at1 = {n: {k: series(h, k)[0] for k in KEYS[:2]} for n, h in runs.items()}
    fp32_max = max(series(runs[FP32], "mismatch/mean"))
    res |= {"step1": at1, "fp32_mismatch_max": fp32_max, "holds": fp32_max < FP32_ZERO}
    res["effect"] = at1[BF16_IS]["mismatch/mean"] - at1[FP32]["mismatch/mean"]
    res["growth_p999"] = growth(res, BF16_IS, "mismatch/p999")
    res["growth_mean"] = growth(res, BF16_IS, "mismatch/mean")
    res["is_vs_none"] = tail_mean(runs[BF16_IS], PASS) - tail_mean(runs[BF16_NO], PASS)
    h = runs[BF16_IS]
    res["entropy_corr"] = {  # across steps: does the mismatch rise as entropy falls?
        k: rank_corr(series(h, "entropy"), series(h, k)) for k in KEYS[:2]
    }
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    def fl(arm: str, key: str, spec: str = ".2f") -> str:
        a = res[arm][key]
        return f"{a['first']:{spec}} -> {a['last']:{spec}}"

    s1 = res["step1"]
    arms = "; ".join(
        f"{n}: mismatch mean {fl(n, 'mismatch/mean', '.2e')}, p99.9 "
        f"{fl(n, 'mismatch/p999', '.2e')} nats, entropy {fl(n, 'entropy')}, pass "
        f"{fl(n, 'pass_rate')}, capped {fl(n, 'capped_frac', '.3f')}"
        for n in ARMS
    )
    corr = res["entropy_corr"]
    return (
        f"at step 1 (same weights) the mismatch's mean is {s1[FP32]['mismatch/mean']:.1e} nats "
        f"with the fp32 sampler (largest over the run {res['fp32_mismatch_max']:.1e}) and "
        f"{s1[BF16_IS]['mismatch/mean']:.1e} with bf16 (p99.9 {s1[BF16_IS]['mismatch/p999']:.1e})."
        f" First -> last quarter of the steps: {arms}. Across the bf16 run's steps, the rank "
        f"correlation of entropy with the mismatch is {corr['mismatch/mean']:+.2f} (mean) and "
        f"{corr['mismatch/p999']:+.2f} (p99.9): negative would mean it grows as entropy falls."
    )


PROBLEM_20 = Problem(
    problem_20,
    Claim(
        text="with identical weights the trainer's and the engine's log-probs differ (bf16 "
        "against fp32), and the fp32 sampler's do not (< 1e-5 nats, the identity checked)",
        effect="mismatch mean at step 1, bf16 minus fp32 sampler (nats)",
        source="book",
        passage="Numerical mismatch at fixed weights comes from different kernels, reduction "
        "orders, precision, and batch shapes in the two engines.",
        cause="bf16's rounding of TinyAgent's logits moved its log-probs by less than the "
        "seed-to-seed spread",
    ),
    arms_figure(
        [
            ("mismatch/mean", "mean |log pi_prox - log mu| (nats)"),
            ("mismatch/p999", "99.9th percentile of it (nats)"),
            ("entropy", "entropy on policy tokens (nats)"),
            (PASS, "train pass rate (fixed evaluation)"),
        ],
        "Problem 20: the sampler in fp32 or bf16, with or without the truncated IS weight",
        log_keys=("mismatch/mean", "mismatch/p999"),
    ),
    more=(
        (
            "growth_p999",
            Claim(
                text="the mismatch's tail grows as training lowers entropy (0.003 -> 0.03 in "
                "the book's run): a leading indicator of collapse",
                effect="p99.9 mismatch, last quarter over first quarter, bf16 with IS (ratio)",
                threshold=1.0,
                source="book",
                passage="investigate numerics as soon as the tail grows. Treat a growing mismatch "
                "as a leading indicator of collapse, not as noise.",
                cause="the tail moves 0.70-1.94x (seeds 0-3), not with entropy: seed 3's grew "
                "most (0.026 -> 0.051 nats) as its entropy rose (0.42 -> 0.48); "
                "TinyAgent is dense (no router to flip, the book's MoE source) and bf16 rounds "
                "each logit relatively, so the tail moves only with the logits' scale",
            ),
        ),
        (
            "growth_mean",
            Claim(
                text="the mean mismatch grows as entropy falls",
                effect="mean mismatch, last quarter over first quarter, bf16 with IS (ratio)",
                threshold=1.0,
                source="book",
                passage="A mismatch that grows over training suggests the policy has moved into "
                "regions where ... a lower-entropy policy makes a few large disagreements "
                "dominate the mean.",
                cause="the mean falls as entropy falls (per-step rank correlation with "
                "entropy +0.47 to +0.78 on seeds 0-3): most sampled tokens sit at p near 1, "
                "where a logit error e moves log p by about (1 - p) e, so a sharper policy "
                "shows less mismatch; a growing source (an MoE router near a tie) is absent",
            ),
        ),
        (
            "is_vs_none",
            Claim(
                text="the truncated importance weight bounds the damage: a run with it does "
                "at least as well as one without",
                effect="fixed-evaluation train pass, last quarter, bf16 with IS minus without "
                "(margin -0.05)",
                threshold=-0.05,
                source="book",
                passage="apply an importance correction against the engine's probabilities "
                "(Problem 16), which bounds the damage but does not remove the source",
                premise="effect",
                cause="the truncation never binds (capped fraction 0.000 in every arm and "
                "quarter: a p99.9 mismatch of at most 0.065 nats is a weight within 1 +- 7%, "
                "far under the cap 2), so it has no damage to bound; at lr 1e-3 the runs are "
                "chaotic and part after step 1: the IS arm's pass fell to 0 on seeds 1 and 2 "
                "(the arm without IS: on seed 2; fp32: on none), 0.58 without IS on seed 1",
            ),
        ),
    ),
    tuned=TUNED,
)

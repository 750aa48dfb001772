"""Problem 20: a training-inference mismatch that grows.

Three RL arms from the weak base, on-policy (staleness 0: the sampler holds the trainer's
current weights, so mu and pi_prox differ only in the sampler's numerics), at the trainer's
default lr 3e-4 with 2 epochs x 2 minibatches, paired (every arm the same seed: the same start,
tasks and sampling stream): an exact sampler (the trainer's own float32 numerics); a noisy
sampler (PGConfig.sampler_noise: Gaussian error of sd NOISE nats on every logit it samples
from, a coarse inference engine whose error is large enough that the truncated importance
weight min(pi_prox / mu, 2) binds) with that weight; the same noisy sampler without it. Each
step logs KL(mu || pi_prox) per policy token estimated with k3 (`kl/mu_k3`), the capped
fraction, and |log pi_prox - log mu| (`mismatch/mean`, `mismatch/p999`) beside entropy; every
5 steps a fixed evaluation (the same episodes' seeds every time) gives the train pass rate the
arms are compared on. The earlier design (a bf16 sampler at lr 1e-3, where the cap never bound)
is described in docs/problems.md with its measured table.
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

LR = 3e-4  # the trainer's default (Appendix B), not tuned: 1e-3 made the arms chaotic
NOISE = 1.0  # nats: the noisy sampler's logit error, chosen on seeds 100-101 (TUNED)
CAP_LEVEL = 0.005  # the capped fraction above which the truncated weight binds (locked level)
TUNED = (
    Tuning(
        "sampler_noise",
        NOISE,
        (100, 101),
        "the noisy sampler's logit sd, for a cap that binds on 1-5% of tokens: at step 1 on "
        "seed 100 (noisy arm with IS) sd 0.5, 1.0 and 1.5 capped 0.6%, 2.2% and 2.4% of the "
        "policy tokens; 1.0, the smallest in that range, then ran the full 30 steps on seeds "
        "100 and 101 (no evaluation): capped 1.06% and 1.15% of tokens over the run (steps "
        "1-8: 1.8%, 2.1%; steps 23-30: 0.3%, 0.6%, falling as entropy fell)",
    ),
)
PASS = "eval/train_pass"  # the fixed evaluation the pass effects are judged on
EXACT, NOISY_IS, NOISY_NO = "exact sampler", "noisy sampler, truncated IS", "noisy sampler, no IS"
ARMS = {
    EXACT: {"sampler_noise": 0.0, "is_correction": True},
    NOISY_IS: {"sampler_noise": NOISE, "is_correction": True},
    NOISY_NO: {"sampler_noise": NOISE, "is_correction": False},
}
COMMON = {"staleness": 0, "lr": LR, "epochs": 2, "minibatches": 2}
K3 = "kl/mu_k3"  # KL(mu || pi_prox) per policy token, the k3 estimate
KEYS = (
    K3,
    "mismatch/mean",
    "mismatch/p999",
    "capped_frac",
    "entropy",
    "pass_rate",
    "grad_norm",
    PASS,
)
EXACT_ZERO = 1e-5  # nats: the exact sampler's mismatch is kernel noise (cache vs whole forward)


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


def run_mean(history: list[dict], key: str) -> float:
    """A metric's mean over every training step of a run (nan when it was never logged)."""
    xs = series(history, key)
    return float(np.mean(xs)) if xs else float("nan")


def problem_20(ctx: Ctx):
    """From the weak base, paired: an exact sampler, and a noisy one with and without IS."""
    runs = {}
    for name, overrides in ARMS.items():
        config = rl_config(
            ctx, steps=ctx.pick(30, 4), eval_every=ctx.pick(5, 2), **COMMON, **overrides
        )
        runs[name] = train_pg(start(ctx, "weak"), config, tasks_for("train"))
    res = first_last(runs, KEYS)
    # step 1 (the first training record; step 0's is the evaluation): the same weights
    at1 = {n: {k: series(h, k)[0] for k in KEYS[:4]} for n, h in runs.items()}
    exact_max = max(series(runs[EXACT], "mismatch/mean"))
    res |= {"step1": at1, "exact_mismatch_max": exact_max, "holds": exact_max < EXACT_ZERO}
    res["effect"] = at1[NOISY_IS][K3] - at1[EXACT][K3]
    res["capped"] = run_mean(runs[NOISY_IS], "capped_frac")
    res["capped_no_is"] = run_mean(runs[NOISY_NO], "capped_frac")  # measured, not applied
    res["is_vs_none"] = tail_mean(runs[NOISY_IS], PASS) - tail_mean(runs[NOISY_NO], PASS)
    res["damage"] = tail_mean(runs[EXACT], PASS) - tail_mean(runs[NOISY_NO], PASS)
    res["growth_k3"] = growth(res, NOISY_IS, K3)
    res["growth_p999"] = growth(res, NOISY_IS, "mismatch/p999")
    h = runs[NOISY_IS]
    res["entropy_corr"] = {  # across steps: does the mismatch rise as entropy falls?
        k: rank_corr(series(h, "entropy"), series(h, k)) for k in (K3, "mismatch/p999")
    }
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    def fl(arm: str, key: str, spec: str = ".2f") -> str:
        a = res[arm][key]
        return f"{a['first']:{spec}} -> {a['last']:{spec}}"

    s1 = res["step1"]
    arms = "; ".join(
        f"{n}: k3 {fl(n, K3, '.2e')}, p99.9 {fl(n, 'mismatch/p999', '.2e')} nats, capped "
        f"{fl(n, 'capped_frac', '.3f')}, entropy {fl(n, 'entropy')}, fixed-eval train pass "
        f"{fl(n, PASS)}"
        for n in ARMS
    )
    corr = res["entropy_corr"]
    return (
        f"at step 1 (same weights) KL(mu || pi_prox) by k3 is {s1[EXACT][K3]:.1e} nats a token "
        f"with the exact sampler (its mean |log-ratio| at most {res['exact_mismatch_max']:.1e} "
        f"over the run) and {s1[NOISY_IS][K3]:.1e} with the noisy one (capped "
        f"{s1[NOISY_IS]['capped_frac']:.3f}); over the run the noisy arm with IS capped "
        f"{res['capped']:.3f} of its tokens. Train pass, last quarter: IS minus no IS "
        f"{res['is_vs_none']:+.3f}, exact minus noisy without IS {res['damage']:+.3f}. "
        f"First -> last quarter of the steps: {arms}. Across the noisy IS run's steps, the rank "
        f"correlation of entropy with the mismatch is {corr[K3]:+.2f} (k3) and "
        f"{corr['mismatch/p999']:+.2f} (p99.9): negative would mean it grows as entropy falls."
    )


PROBLEM_20 = Problem(
    problem_20,
    Claim(
        text="the sampler's and the trainer's log-probs differ at the same weights, and the "
        "mismatch is measured from step 1 as KL(mu || pi_prox) by k3 (the exact sampler's "
        "|log-ratio| < 1e-5 nats, the identity checked)",
        effect="KL(mu || pi_prox) per policy token by k3 at step 1, noisy minus exact sampler "
        "(nats)",
        source="book",
        passage="The book's default is to log the mismatch distribution (mean and the 99.9th "
        "percentile) from step 0, apply truncated importance weights, and investigate numerics "
        "as soon as the tail grows.",
    ),
    arms_figure(
        [
            (K3, "KL(mu || pi_prox) per token, k3 (nats)"),
            ("mismatch/p999", "99.9th percentile |log pi_prox - log mu| (nats)"),
            ("capped_frac", "capped fraction (weight > 2)"),
            ("entropy", "entropy on policy tokens (nats)"),
            (PASS, "train pass rate (fixed evaluation)"),
        ],
        "Problem 20: an exact sampler, and a noisy one with or without the truncated IS weight",
        log_keys=(K3, "mismatch/p999"),
    ),
    more=(
        (
            "capped",
            Claim(
                text=f"the truncated weight binds: the noisy arm with IS caps more than "
                f"{CAP_LEVEL} of its policy tokens (mean over its steps)",
                effect="capped fraction of policy tokens, mean over the steps, noisy with IS",
                threshold=CAP_LEVEL,
                source="lab",
                passage="the design's premise: a correction that never binds (the earlier "
                "design's capped fraction 0.000) cannot change a run; the book calls the "
                "truncated fraction the metric to watch",
                premise="effect",
            ),
        ),
        (
            "is_vs_none",
            Claim(
                text="the truncated importance weight bounds the damage: with it the noisy "
                "sampler's run ends with a higher fixed-evaluation pass rate than without",
                effect="fixed-evaluation train pass, last quarter, noisy with IS minus without",
                threshold=0.0,
                source="book",
                passage="apply an importance correction against the engine's probabilities "
                "(Problem 16), which bounds the damage but does not remove the source",
                premise="capped",
            ),
        ),
        (
            "damage",
            Claim(
                text="the mismatch does damage: without the correction the noisy sampler's run "
                "ends below the exact sampler's on the fixed evaluation",
                effect="fixed-evaluation train pass, last quarter, exact minus noisy without IS",
                threshold=0.0,
                source="lab",
                passage="the damage the book's correction bounds, measured: the lab's "
                "hypothesis that an uncorrected mismatch costs pass rate at this scale",
                premise="effect",
            ),
        ),
        (
            "growth_k3",
            Claim(
                text="the mismatch grows over training (the book's 0.003 -> 0.03)",
                effect="KL(mu || pi_prox) by k3, last quarter over first quarter, noisy with "
                "IS (ratio)",
                threshold=1.0,
                source="book",
                passage="A mismatch that grows over training suggests the policy has moved into "
                "regions where these discontinuities matter more",
                premise="effect",
            ),
        ),
        (
            "growth_p999",
            Claim(
                text="the mismatch's tail grows over training: a leading indicator of collapse",
                effect="p99.9 |log pi_prox - log mu|, last quarter over first quarter, noisy "
                "with IS (ratio)",
                threshold=1.0,
                source="book",
                passage="investigate numerics as soon as the tail grows. Treat a growing mismatch "
                "as a leading indicator of collapse, not as noise.",
                premise="effect",
            ),
        ),
    ),
    settings={
        "start": "weak",
        "steps": 30,
        "eval_every": 5,
        "arms": ARMS,
        "common": COMMON,
        "noise": NOISE,
        "cap_level": CAP_LEVEL,
    },
    tuned=TUNED,
)

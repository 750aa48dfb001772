"""Rules on the update's dynamics: entropy (26, 28), the KL to the reference (6), the KL to
the sampler and the mismatch's tail (16, 20), capped importance weights (16), groups with no
signal (3, 13), non-finite values. Each reads a `Run` and returns a Finding or None."""

from __future__ import annotations

import math

from arl.doctor import rules_episodes as epi
from arl.doctor.trend import (
    KL_TAIL_FLOOR,
    MIN_POINTS,
    cfg,
    first_of,
    head_tail,
    knobs,
    late,
    pts,
    ratio,
    span,
    staleness,
)
from arl.doctor.types import Finding, Run

# Problem 26: the book's run lost 94% of its entropy (0.9 -> 0.05 nats in 50 steps); a loss
# of 70% leaves no doubt the policy became nearly deterministic on the states it visits
COLLAPSE_DROP = 0.7
# Problem 28: "drops sharply" with the reward unchanged; half the starting entropy gone
SHARP_DROP = 0.5
# with the mask right, no masked-in target is a token the policy did not emit: any share
# above 0 is the bug itself, not a matter of degree
MASKED_IN_MAX = 0.0
# the reward moved less than this between the first and the last quarter: "unchanged"
REWARD_FLAT = 0.03
# the share of all-equal groups rose by at least 0.1: about one more group in ten carries no
# signal, the collapse's signature (Problem 26) rather than a mask's (Problem 28)
DEGENERATE_RISE = 0.1
# Problem 6: a KL below 1e-3 nats/token has not moved the policy far enough for a penalty to
# bind (the book's plateau sits at 0.02); over the run's second half a KL that changes by
# less than 25% is flat, and a reward that changes by less than 0.02 has stalled, unless it
# is already near its ceiling (0.95: nothing left to gain)
KL_FLOOR, KL_FLAT, REWARD_STALL, REWARD_CEILING = 1e-3, 0.25, 0.02, 0.95
# Problems 5, 16, 20: the "the tail tripled while the mean stayed flat": a tail 3x its
# start next to a mean within 1.5x of its start
TAIL_GROWTH, MEAN_FLAT = 3.0, 1.5
# Problem 20: an fp32 sampler's mismatch is ~1e-8 nats (summation order); a bf16 sampler's
# starts near 0.003 mean (the book's step 0) and 0.03 at the 99.9th percentile, so growth
# is read only where the tail passes 0.01 or the mean 0.003
MISMATCH_FLOOR, MISMATCH_MEAN_FLOOR = 0.01, 0.003
# Problem 16: the truncated fraction is "the metric to watch"; with one token in twenty
# capped, the update's bias is no longer a rounding error
CAPPED_MAX = 0.05
# Problem 3: the book's default keeps the degenerate-group probability below one half
DEGENERATE_MAX = 0.5
# Problem 13 is the first cause of no-signal groups where the truncation rule fires
# (epi.TRUNCATED_MAX)


def _change(run: Run, name: str) -> tuple[float, float] | None:
    """(head, tail) means of `name`, or None when it is not logged with enough points."""
    p = pts(run, name)
    return head_tail(p) if first_of(run, (name,)) else None


def _mask_signature(run: Run) -> bool:
    """Problem 28's signature: the reward unchanged and no rise of degenerate groups."""
    reward = first_of(run, ("reward", "pass_rate"))
    if reward is None:
        return False
    h, t = head_tail(pts(run, reward))
    degenerate = _change(run, "degenerate_frac")
    rose = degenerate is not None and degenerate[1] - degenerate[0] >= DEGENERATE_RISE
    return abs(t - h) < REWARD_FLAT and not rose


def _context(run: Run, name: str, label: str, sep: str = ", while ") -> str:
    """SEP + "LABEL went A -> B" for a logged series, else ""."""
    c = _change(run, name)
    return f"{sep}{label} went {c[0]:.2f} -> {c[1]:.2f}" if c else ""


def entropy_collapse(run: Run) -> Finding | None:
    """Entropy fell by COLLAPSE_DROP or more (unless it is Problem 28's signature)."""
    p = pts(run, "entropy")
    h, t = head_tail(p)
    drop = 1 - ratio(t, h)
    if drop < COLLAPSE_DROP or _mask_signature(run):
        return None
    return Finding(
        "entropy-collapse",
        26,
        f"entropy fell {drop:.0%} ({h:.3g} -> {t:.3g} nats, {span(p)})"
        + _context(run, "degenerate_frac", "the share of all-pass/all-fail groups")
        + _context(run, "reward", "reward", sep="; "),
        (
            "a learning rate too high for RL, or several epochs per batch"
            + knobs(run, "lr", "epochs"),
            "symmetric clipping: low-probability tokens cannot grow as fast as confident ones"
            + knobs(run, "clip", "clip_high"),
            "a reward that strongly favours one template response",
        ),
        "rerun from a checkpoint before the fall at half the learning rate with clip-higher: "
        "if entropy holds and degenerate_frac falls, it was the step size; if it falls again, "
        "read the rewarded trajectories for one template; judge by pass@k at moderate k",
        ("entropy", "degenerate_frac", "reward"),
    )


def entropy_wrong_positions(run: Run) -> Finding | None:
    """Masked-in targets the policy did not emit, or entropy dropping sharply while the
    reward and the degenerate share stay put (Problem 28)."""
    masked = pts(run, "masked_in_non_policy_share")
    worst = max((v for _, v in masked), default=0.0)
    if worst > MASKED_IN_MAX:
        symptom = f"{worst:.1%} of masked-in targets are tokens the policy did not emit"
    else:
        p = pts(run, "entropy")
        if not first_of(run, ("entropy",)) or not _mask_signature(run):
            return None
        h, t = head_tail(p)
        drop = 1 - ratio(t, h)
        if drop < SHARP_DROP:
            return None
        reward = first_of(run, ("reward", "pass_rate"))
        rh, rt = head_tail(pts(run, reward))
        symptom = (
            f"entropy dropped {drop:.0%} ({h:.3g} -> {t:.3g} nats, {span(p)}) while {reward} "
            f"stayed at {rh:.2f} -> {rt:.2f} and groups did not turn all-equal"
        )
    return Finding(
        "entropy-wrong-positions",
        28,
        symptom,
        (
            "the loss mask is shifted by one (aligned to ids, not ids[:, 1:]): observation "
            "tokens enter the loss and the entropy is read at their positions",
            "the entropy is averaged over non-policy positions (template, tool output)",
            "a genuine collapse (Problem 26) that has not yet reached the reward",
        ),
        "assert on a collated batch that the action mask is 0 wherever the owner is not the "
        "policy (arl's check_batch); log entropy on policy and on observation positions "
        "apart: a gap between them, or text like tool output in the policy's turns, is the mask",
        ("entropy", "masked_in_non_policy_share", "reward"),
    )


def kl_plateau(run: Run) -> Finding | None:
    """In the second half, the KL to the reference is flat while the reward stalls (6)."""
    kl_name = first_of(run, ("kl/ref_k3", "kl/ref_k1"))
    reward = first_of(run, ("reward", "pass_rate"))
    kl, rw = late(pts(run, kl_name)), late(pts(run, reward))
    (kh, kt), (rh, rt) = head_tail(kl), head_tail(rw)
    flat = abs(kt - kh) <= KL_FLAT * max(kh, KL_FLOOR) and kt >= KL_FLOOR
    if not flat or abs(rt - rh) >= REWARD_STALL or rt >= REWARD_CEILING:
        return None
    return Finding(
        "kl-plateau",
        6,
        f"the KL to the reference sat at {kh:.3g} -> {kt:.3g} nats/token ({span(kl)}) while "
        f"{reward} stalled at {rh:.2f} -> {rt:.2f}",
        (
            "the penalty binds: the policy moved as far as beta allows" + knobs(run, "kl_beta"),
            "the learning rate is too small to move it further",
            "no signal left: the groups are all-pass or all-fail (see degenerate_frac)",
        ),
        "continue from the stalled checkpoint with beta halved (or the KL off, or a reference "
        "reset) for a few steps: KL and reward both rising means the penalty bound; neither "
        "moving points at the learning rate or the groups. Decide on held-out curves, not on "
        "the KL's value",
        (kl_name, reward),
    )


def kl_tail(run: Run) -> Finding | None:
    """KL(mu || pi_prox): the mean k3 flat while the 99th percentile of |log rho| grows (16)."""
    k = staleness(run)
    if k == 0:  # on-policy: the mismatch rule reads the same tokens (Problem 20)
        return None
    mean, tail = pts(run, "kl/mu_k3", k), pts(run, "kl/mu_absq99", k)  # steps <= k: no lag yet
    if len(mean) < MIN_POINTS or len(tail) < MIN_POINTS:
        return None
    (mh, mt), (th, tt) = head_tail(mean), head_tail(tail)
    grew, flat = ratio(tt, th), ratio(mt, mh)
    if grew < TAIL_GROWTH or flat >= MEAN_FLAT or tt < KL_TAIL_FLOOR:
        return None
    return Finding(
        "kl-tail",
        16,
        f"the 99th percentile of |log mu - log pi_prox| grew x{grew:.1f} ({th:.3g} -> "
        f"{tt:.3g} nats, {span(tail)}) while the mean k3 stayed x{flat:.2f} ({mh:.3g} -> "
        f"{mt:.3g}): the mean hides the tail (Problem 5's pairing)",
        (
            "staleness: rollouts from older weights drift further as the policy moves faster"
            + knobs(run, "staleness"),
            "sampler-trainer numerics that grow as entropy falls (Problem 20)",
            "sampling transforms (temperature, top-p) the trainer does not reproduce",
        ),
        "rerun a few steps at staleness 0: if the tail vanishes it was the lag (bound "
        "staleness to 1-2, keep the truncated weight); if it stays, compare log-probs at "
        "identical weights (mismatch/*), then the sampler's temperature and top-p",
        ("kl/mu_k3", "kl/mu_absq99", "capped_frac"),
    )


def mismatch_growth(run: Run) -> Finding | None:
    """The mismatch |log pi - log mu| at fixed weights: its tail or mean grew TAIL_GROWTH (20)."""
    if (staleness(run) or 0) > 0:  # with stale rollouts the mismatch includes the lag (kl-tail)
        return None
    tail_name = first_of(run, ("mismatch/p999", "mismatch/max"))
    mean, tail = pts(run, "mismatch/mean"), pts(run, tail_name) if tail_name else []
    (mh, mt) = head_tail(mean)
    (th, tt) = head_tail(tail) if tail else (math.nan, math.nan)
    tail_grew = bool(tail) and ratio(tt, th) >= TAIL_GROWTH and tt >= MISMATCH_FLOOR
    mean_grew = ratio(mt, mh) >= TAIL_GROWTH and mt >= MISMATCH_MEAN_FLOOR
    if not (tail_grew or mean_grew):
        return None
    what = "99.9th percentile" if tail_name == "mismatch/p999" else "max"
    tail_text = f"the {what} of |log pi - log mu| went x{ratio(tt, th):.1f} ({th:.3g} -> {tt:.3g})"
    return Finding(
        "mismatch-growth",
        20,
        (tail_text + " and " if tail else "")
        + f"the mean went x{ratio(mt, mh):.1f} ({mh:.3g} -> {mt:.3g} nats, {span(mean)})",
        (
            "different kernels, reduction order or precision in sampler and trainer (bf16 "
            "sampling), worse where the policy sits near ties as entropy falls",
            "a mixture-of-experts router that picks different experts in the two engines",
            "weights not synced to the sampler (a stale engine)",
        ),
        "score one batch with the sampler in fp32 (or batch-invariant kernels): if the tail "
        "vanishes it is numerics; replay the router's choices for MoE; keep the truncated "
        "weight on meanwhile and treat the growth as a leading indicator of collapse",
        ("mismatch/mean", tail_name or "mismatch/p999"),
    )


def capped_share(run: Run) -> Finding | None:
    """The truncated importance weight hits its cap on CAPPED_MAX of tokens or more (16)."""
    p = pts(run, "capped_frac")
    h, t = head_tail(p)
    if t < CAPPED_MAX:
        return None
    return Finding(
        "capped-share",
        16,
        f"{t:.1%} of policy tokens hit the importance-weight cap in the last quarter "
        f"({h:.1%} in the first, {span(p)})" + knobs(run, "staleness", "is_cap"),
        (
            "rollouts too stale for the cap: per-token ratios spread with the lag",
            "long trajectories: per-token weights ignore the sequence's product of ratios",
            "sampler transforms (temperature, top-p) or numerics the trainer does not "
            "reproduce (Problem 20)",
        ),
        "rerun a few steps at staleness 0: a capped share near 0 means the lag; if it stays, "
        "compare sampler and trainer log-probs at identical weights, then temperature/top-p",
        ("capped_frac", "kl/mu_k3", "kl/mu_absq99"),
    )


def degenerate_groups(run: Run) -> Finding | None:
    """Half the groups or more are all-pass or all-fail: no gradient (3; 13 when truncated)."""
    p = pts(run, "degenerate_frac")
    h, t = head_tail(p)
    if t < DEGENERATE_MAX:
        return None
    group, rate = cfg(run, "group_size"), first_of(run, ("pass_rate",))
    truncated, entropy = _change(run, "truncated_frac"), _change(run, "entropy")
    expected = ""
    if rate and isinstance(group, int) and not isinstance(group, bool):
        q = min(max(head_tail(pts(run, rate))[1], 0.0), 1.0)
        e = q**group + (1 - q) ** group
        expected = f"; p^G+(1-p)^G at the mean pass rate {q:.2f}, G={group}: {e:.2f} (a floor)"
    causes = [
        "task difficulty: many tasks pass always or never at this group size",
        "the group size G is too small for the pool's median pass rate",
    ]
    if entropy and 1 - ratio(entropy[1], entropy[0]) >= SHARP_DROP:
        causes.insert(0, "near-identical trajectories after an entropy collapse (Problem 26)")
    cut = truncated is not None and truncated[1] >= epi.TRUNCATED_MAX
    if cut:
        causes.insert(0, f"truncated episodes all scored 0 ({truncated[1]:.0%} truncated)")
    problem = 13 if cut else 3
    return Finding(
        "no-signal-groups",
        problem,
        f"{t:.0%} of groups were all-pass or all-fail in the last quarter ({h:.0%} in the "
        f"first, {span(p)}){expected}",
        tuple(causes),
        "compare the measured share with the mean of p_i^G+(1-p_i)^G over tasks' own pass "
        "rates: equal means difficulty (filter tasks at 0 or 1, refill groups, raise G); "
        "higher means the groups lack diversity (entropy); count tasks_with_grad per 100 steps",
        ("degenerate_frac", "pass_rate", "truncated_frac", "tasks_with_grad"),
    )


def non_finite(run: Run) -> Finding | None:
    """A NaN or an infinity in any logged metric (the loss, the gradient, a ratio)."""
    bad = [(s, name) for name, p in run.series.items() for s, v in p if not math.isfinite(v)]
    if not bad:
        return None
    step = min(s for s, _ in bad)
    names = sorted({n for s, n in bad if s == step})
    before = {
        n: v
        for n in ("grad_norm", "mismatch/max", "mismatch/p999", "is_ratio/max")
        for s, v in pts(run, n)
        if s < step
    }
    seen = ", ".join(f"{n} {v:.3g}" for n, v in before.items())
    return Finding(
        "non-finite",
        20,
        f"{', '.join(names)} not finite from step {step} ({len(bad)} of the log's values)"
        + (f"; the last finite step before it: {seen}" if seen else ""),
        (
            "a step too large: the gradient norm spiked first (learning rate, grad_clip)",
            "numerics: bf16/fp16 overflow, or a sampler-trainer mismatch whose tail grew "
            "first (Problem 20)",
            "log of a zero probability: a token the sampler's top-p/top-k removed scores -inf "
            "in the trainer (Problem 16's third failure)",
            "a division by a zero std in an all-equal group (std normalization, Problem 4)",
        ),
        "read the step before the first non-finite value: a grad_norm spike means the step "
        "size; a growing mismatch tail, numerics; an infinite importance ratio, a sampling "
        "transform; then replay that batch in fp32",
        tuple(names),
    )

"""Rules on what the episodes did: the public-hidden gap (7), length growing in failures (27),
reward climbing while held-out is flat (25), immediate submission (12), truncation and
malformed calls (13), one family learning suspiciously fast (11)."""

from __future__ import annotations

import statistics

from arl.doctor.trend import (
    KL_TAIL_FLOOR,
    MIN_POINTS,
    cfg,
    first_of,
    head_tail,
    knobs,
    pts,
    ratio,
    span,
    staleness,
)
from arl.doctor.types import Finding, Run

# Problem 7: ten points more public than hidden passes in the last quarter (the book's run:
# 0.92 public vs 0.31 hidden); a gap that opened by 0.05 since the start is "widening"
GAP_MAX, GAP_WIDENING = 0.10, 0.05
# Problem 27: the failures' median length grew by half (the book: 1,800 -> 3,700 tokens,
# x2.06) while the successes' grew by less than 20%: the growth sits in the failures
LEN_GROWTH, SUCCESS_STEADY = 1.5, 1.2
# Problem 25: the training reward rose by 0.1 or more (the book: 0.18 -> 0.55) while the
# held-out metric rose by less than a quarter of that
REWARD_RISE, HELDOUT_SHARE = 0.10, 0.25
# Problem 12: half the episodes end on their first call (the book: 70% submit at once)
SUBMIT_MAX = 0.5
# Problem 13: three episodes in ten end at the turn or token limit (the book: 40%)
TRUNCATED_MAX = 0.3
# malformed calls: half a malformed call per episode; or a third of tool calls failing (TRL's
# and verl's share of calls, a different unit)
MALFORMED_MAX, TOOL_FAILURE_MAX = 0.5, 0.3
# Problem 11: one family's pass rate rose by 0.3 or more (the book: 0.2 -> 0.7 in 20 steps)
# and by at least twice the median rise of the others
FAMILY_JUMP, FAMILY_LEAD = 0.3, 2.0
NOISE = "the evaluation is too small to see the gain (Problem 22's noise)"


def _change(run: Run, name: str) -> tuple[float, float] | None:
    """(head, tail) means of `name` when it is logged with enough points."""
    return head_tail(pts(run, name)) if first_of(run, (name,)) else None


def public_hidden_gap(run: Run) -> Finding | None:
    """Public-test passes exceed hidden-test passes by GAP_MAX or more (7)."""
    p = pts(run, "public_hidden_gap")
    h, t = head_tail(p)
    if t < GAP_MAX:
        return None
    widening = " and widening" if t - h >= GAP_WIDENING else ""
    hacks = _change(run, "hack_rate")
    return Finding(
        "public-hidden-gap",
        7,
        f"public tests pass {t:.2f} more often than hidden ones in the last quarter ({h:.2f} in "
        f"the first, {span(p)}){widening}"
        + (f"; exploit edits {hacks[0]:.2f} -> {hacks[1]:.2f} per episode" if hacks else ""),
        (
            "the reward counts tests the agent can see" + knobs(run, "env.reward"),
            "an exploit that special-cases the public inputs, not zeroed or logged",
            "public tests weaker than the hidden ones (the fix passes few of them by luck)",
        ),
        "score the same episodes with hidden tests and read 20 whose public and hidden results "
        "differ: edits branching on the exact public inputs are the exploit; reward on hidden "
        "tests with exploit logging from the start",
        ("public_hidden_gap", "hack_rate", "pass_rate", "public_pass_rate"),
    )


def length_in_failures(run: Run) -> Finding | None:
    """Failed episodes grow LEN_GROWTH longer while successes do not (27); a mean length
    only (TRL, verl) is read as such, saying it cannot split by outcome."""
    fail = first_of(run, ("len_failure_p50", "len_failure_p90"))
    name = fail or "len_mean"
    p = pts(run, name)
    h, t = head_tail(p)
    if ratio(t, h) < LEN_GROWTH:
        return None
    success = _change(run, "len_success_p50")
    if fail and success and ratio(success[1], success[0]) >= SUCCESS_STEADY:
        return None  # everything grew: learned behaviour, or Problem 1's weighting on all
    where = f"failed episodes' {name[-3:]} length" if fail else "mean length"
    split = "" if fail else "; this log cannot split it by outcome"
    succ = f"; successes' p50 {success[0]:.0f} -> {success[1]:.0f}" if fail and success else ""
    trunc = _change(run, "truncated_frac")
    return Finding(
        "length-in-failures",
        27,
        f"{where} grew x{ratio(t, h):.2f} ({h:.0f} -> {t:.0f} tokens, {span(p)}{split}){succ}"
        + (f"; truncated {trunc[0]:.0%} -> {trunc[1]:.0%}" if trunc else ""),
        (
            "per-sequence mean aggregation spreads a failure's negative advantage over more "
            "tokens" + knobs(run, "aggregation"),
            "truncation scored like a short failure, so length costs nothing"
            + knobs(run, "env.truncation"),
            "a degenerate loop: repeated identical tool calls",
        ),
        "plot each trajectory's total loss weight against its length on one batch (Problem "
        "1); then split the growth by turn type: reasoning within turns, more turns, or "
        "repeated identical calls",
        (name, "len_success_p50", "truncated_frac"),
    )


def reward_vs_heldout(run: Run) -> Finding | None:
    """The training reward rose REWARD_RISE while held-out rose < HELDOUT_SHARE of it (25)."""
    reward = first_of(run, ("reward", "pass_rate"))
    held = first_of(run, ("eval/heldout_pass", "eval/heldout_reward"))
    rp, hp = pts(run, reward), pts(run, held)
    (rh, rt), (hh, ht) = head_tail(rp), head_tail(hp)
    rise = rt - rh
    if rise < REWARD_RISE or ht - hh >= HELDOUT_SHARE * rise:
        return None
    train = _change(run, "eval/train_pass")
    transfer = train is not None and train[1] - train[0] >= HELDOUT_SHARE * rise
    gamed = "the reward is not the evaluation metric (public tests, partial credit, a judge)"
    moved = "training and held-out tasks differ, or the evaluation harness does"
    return Finding(
        "reward-vs-heldout",
        25,
        f"{reward} rose {rh:.2f} -> {rt:.2f} ({span(rp)}) while {held} went {hh:.2f} -> "
        f"{ht:.2f}" + (f"; eval/train_pass {train[0]:.2f} -> {train[1]:.2f}" if train else ""),
        (*((moved, gamed) if transfer else (gamed, moved)), NOISE),
        "evaluate the reward and the evaluation metric on the same held-out tasks of the "
        "training distribution: both rising means transfer or the harness; only the reward, "
        "a gamed reward. Then read 20 high-reward training trajectories",
        (reward, held, "eval/train_pass"),
    )


def immediate_submit(run: Run) -> Finding | None:
    """Half the episodes or more end on their first call (12)."""
    p = pts(run, "immediate_submit_frac")
    h, t = head_tail(p)
    if t < SUBMIT_MAX:
        return None
    return Finding(
        "immediate-submit",
        12,
        f"{t:.0%} of episodes submit on their first call in the last quarter ({h:.0%} in the "
        f"first, {span(p)})" + _tail_of(run, "pass_rate", "pass rate"),
        (
            "a per-turn step penalty makes a quick failure worth more than a long attempt"
            + knobs(run, "env.step_penalty"),
            "the group baseline rewards short failures over long ones",
            "attempts rarely succeed, so nothing outweighs the penalty",
        ),
        "compare the return of submitting at once (-penalty) with a full attempt (q - turns x "
        "penalty) at the measured attempt success q; count zero-edit episodes and split length "
        "by outcome; remove the penalty or apply it among successes only",
        ("immediate_submit_frac", "pass_rate", "mean_turns"),
    )


def _tail_of(run: Run, name: str, label: str) -> str:
    """The text "; LABEL A -> B" for a logged series, else ""."""
    c = _change(run, name)
    return f"; {label} {c[0]:.2f} -> {c[1]:.2f}" if c else ""


def truncation(run: Run) -> Finding | None:
    """Three episodes in ten or more end at the limit (13)."""
    p = pts(run, "truncated_frac")
    h, t = head_tail(p)
    if t < TRUNCATED_MAX:
        return None
    final, passed = _change(run, "final_state_pass"), _change(run, "pass_rate")
    unsubmitted = final is not None and passed is not None and final[1] > passed[1]
    if cfg(run, "env.truncation") == "score":
        zero = "the policy stopped submitting: the final state is scored anyway"
    else:
        zero = "truncated episodes score 0" + knobs(run, "env.truncation")
        zero += ": correct work left unsubmitted is punished" if unsubmitted else ""
    causes = (
        zero,
        "the turn or token budget is too small" + knobs(run, "env.max_turns"),
        "malformed calls or loops burn the turns",
    )
    return Finding(
        "truncation",
        13,
        f"{t:.0%} of episodes end at the limit in the last quarter ({h:.0%} in the first, "
        f"{span(p)})"
        + (
            f"; final states pass {final[1]:.2f} against {passed[1]:.2f} submitted"
            if final and passed
            else ""
        ),
        causes if unsubmitted or final is None else (causes[1], causes[2], causes[0]),
        "measure the share of truncated episodes whose final state passes (final_state_pass "
        "vs pass_rate) and turns to the first passing state; score the final state at "
        "truncation (env.truncation=score) if the deployment artifact is the patch",
        ("truncated_frac", "final_state_pass", "pass_rate", "malformed_per_episode"),
    )


def lag_level(run: Run) -> float | None:
    """Stale rollouts (staleness > 0, or not said): the last-quarter mean of the 99th
    percentile of |log mu - log pi_prox| over the steps with a lag; None on-policy or unlogged."""
    k = staleness(run)
    tail = pts(run, "kl/mu_absq99", k)  # steps <= k sample the current weights: no lag yet
    if k == 0 or len(tail) < MIN_POINTS:
        return None
    return head_tail(tail)[1]


def malformed_calls(run: Run) -> Finding | None:
    """Half a malformed call per episode, or a third of tool calls failing (13)."""
    name = first_of(run, ("malformed_per_episode", "tool_failure_frac"))
    limit = MALFORMED_MAX if name == "malformed_per_episode" else TOOL_FAILURE_MAX
    p = pts(run, name)
    h, t = head_tail(p)
    if t < limit:
        return None
    what = (
        f"{t:.2f} malformed calls per episode in the last quarter ({h:.2f} in the first"
        if name == "malformed_per_episode"
        else f"{t:.0%} of tool calls failed in the last quarter ({h:.0%} in the first"
    )
    causes = (
        "updates too large for RL break the call grammar before anything else (Problem 26)",
        "a template or tokenizer different from the one SFT taught (Problem 29)",
        "the call-token budget cuts calls short" + knobs(run, "env.max_call_tokens"),
    )
    check = (
        "read 20 malformed calls: cut at the budget means the budget; another template's "
        "words, the template; garbage, the step size (rerun at half the learning rate)"
    )
    lag = lag_level(run)
    # Problem 16 on the tool model (issue 45): calls that break as training goes, under a
    # sampler one step behind, were the lag's (on-policy runs from the same start kept them)
    if t > h and lag is not None and lag >= KL_TAIL_FLOOR:
        causes = (
            "stale rollouts: the sampler's weights lag the trainer's (the 99th percentile of "
            f"|log mu - log pi_prox| {lag:.2g} nats in the last quarter), and a near-"
            "deterministic call grammar is where the lag's rare tokens show first (Problem 16)"
            + knobs(run, "staleness", "is_cap"),
            *causes,
        )
        check = (
            "rerun from the same start at staleness 0: calls that stay well-formed mean the "
            "lag; else " + check
        )
    return Finding(
        "malformed-calls",
        13,
        f"{what}, {span(p)})" + _tail_of(run, "truncated_frac", "truncated"),
        causes,
        check,
        (name, "truncated_frac", "entropy", "kl/mu_absq99"),
    )


def family_speed(run: Run) -> Finding | None:
    """One family learns FAMILY_JUMP faster than the others, or a canary is solved (11)."""
    fams = {k: pts(run, k) for k in run.series if k.startswith("pass/") and first_of(run, (k,))}
    rises = {k: head_tail(p)[1] - head_tail(p)[0] for k, p in fams.items()}
    canary = [v for _, v in pts(run, "canary_pass")]
    solved = bool(canary) and max(canary) > 0
    if len(rises) < 2 and not solved:
        return None
    top = max(rises, key=rises.get) if rises else None
    others = [v for k, v in rises.items() if k != top]
    median = statistics.median(others) if others else 0.0
    fast = (
        top is not None
        and rises[top] >= FAMILY_JUMP
        and rises[top] >= FAMILY_LEAD * max(median, 0.0)
    )
    if not (fast or solved):
        return None
    p = fams.get(top, ())
    symptom = (
        f"{top} rose {head_tail(p)[0]:.2f} -> {head_tail(p)[1]:.2f} ({span(p)}), the other "
        f"families {median:+.2f} (median)"
        if fast
        else ""
    )
    if solved:
        symptom += ("; " if symptom else "") + f"the canary was solved ({max(canary):.0%})"
    return Finding(
        "family-speed",
        11,
        symptom,
        (
            "a leak: the fix in the repository's history, hidden tests in the container, the "
            "issue text quoting the fix, or package caches",
            "a family genuinely easier than the others (compare its pass rate at the start)",
        ),
        "diff what the agent can see against what it should; add a canary whose only solution "
        "is in the leaked place; count history-inspection calls in successful trajectories "
        "(log_share_in_successes); arl audit env NAME runs these probes",
        (top or "canary_pass", "canary_pass", "log_share_in_successes"),
    )

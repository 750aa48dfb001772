"""Rules on runs that cannot learn at all, the commonest early failures of a real model: no
tool call parsed (13), no signal in any group with a zero update (3), and a distilled student
that matches its teacher's tokens without passing more (29). Each reads a `Run` and returns a
Finding or None."""

from __future__ import annotations

from arl.doctor.trend import MIN_POINTS, first_of, head_tail, pts, ratio, span
from arl.doctor.types import Finding, Run

# No tool calls: fewer than one parsed call in twenty episodes in the last quarter. An agent
# that calls tools at all makes one or more per episode (every scored episode ends in a call),
# so this is a model that never emits a call the parser reads, not a shy one
NO_CALLS_MAX = 0.05
# the turn end leads the causes when three episodes in ten are cut at the limit
# (epi.TRUNCATED_MAX) and fewer than half a call per episode is malformed (epi.MALFORMED_MAX):
# the model ran on without writing anything call-shaped; otherwise the format leads
CUT_SHARE, MALFORMED_SHARE = 0.3, 0.5
# Problem 3 taken to its end: 99% of groups or more all-equal (else, that share not logged, a
# reward std within 1e-6 of 0: every reward the same), with an update that did nothing (a
# gradient norm, else a loss, within 1e-6 of 0 in the last quarter)
ALL_EQUAL, STD_ZERO, UPDATE_ZERO = 0.99, 1e-6, 1e-6
# Problem 29: the student's KL to its teacher fell by 30% or more while its pass rate moved by
# less than 0.03 (REWARD_FLAT's "unchanged") and it still passes 0.03 less than its teacher
# (or, the teacher's pass not logged, less than 0.95: room left to gain)
DISTILL_KL_FALL, PASS_FLAT, PASS_CEILING = 0.3, 0.03, 0.95

CALLS = "tool_calls_per_episode"
DERIVED = "mean_turns - malformed_per_episode"  # arl: every turn is one call, parsed or not


def calls(run: Run) -> tuple[str, list[tuple[int, float]]] | None:
    """Parsed tool calls per episode: as logged (TRL's tools/call_frequency, verl's
    tool_call_counts/mean), else arl's turns less its malformed calls at each step."""
    if first_of(run, (CALLS,)):
        return CALLS, pts(run, CALLS)
    turns, bad = dict(pts(run, "mean_turns")), dict(pts(run, "malformed_per_episode"))
    derived = [(s, max(turns[s] - bad[s], 0.0)) for s in sorted(turns.keys() & bad.keys())]
    return (DERIVED, derived) if len(derived) >= MIN_POINTS else None


def _tail(run: Run, name: str) -> float | None:
    """The last quarter's mean of `name` when it is logged with enough points."""
    return head_tail(pts(run, name))[1] if first_of(run, (name,)) else None


FORMAT = (
    "the model writes its calls in a format the parser does not read (arl: --tool-format; "
    "TRL: the response schema its chat template implies)"
)
TEMPLATE = (
    "the chat template is not the one the model learned calls in, or the model never learned "
    "calls at all (a base or random model needs format SFT first: Problem 29)"
)
TURN_END = (
    "the turn does not end where the loop stops: a base checkpoint's EOS is not its template's "
    "turn end (arl: --turn-end), so completions run to the length limit with no call parsed"
)


def no_tool_calls(run: Run) -> Finding | None:
    """Fewer than NO_CALLS_MAX parsed tool calls per episode in the last quarter: nothing the
    environment can score, whatever else the log shows (13)."""
    found = calls(run)
    if found is None:
        return None
    name, p = found
    h, t = head_tail(p)
    if t >= NO_CALLS_MAX:
        return None
    cut, bad = _tail(run, "truncated_frac"), _tail(run, "malformed_per_episode")
    cut_first = cut is not None and cut >= CUT_SHARE and (bad or 0.0) < MALFORMED_SHARE
    causes = (TURN_END, FORMAT, TEMPLATE) if cut_first else (FORMAT, TEMPLATE, TURN_END)
    said = [f"{cut:.0%} truncated"] if cut is not None else []
    said += [f"{bad:.2f} malformed calls per episode"] if bad is not None else []
    return Finding(
        "no-tool-calls",
        13,
        f"{t:.2f} tool calls per episode in the last quarter ({h:.2f} in the first, {span(p)}"
        + (f", {name}" if name == DERIVED else "")
        + "): the model emits no call the parser reads, so no episode can be scored or submit"
        + (f"; {', '.join(said)}" if said else ""),
        causes,
        "read five raw completions: no call-shaped text means the model never learned the "
        "format (SFT on its native calls first); a call in another syntax, the parser "
        "(--tool-format); text running past the turn end to the limit, the turn end "
        "(--turn-end); `arl check template MODEL` prints the prompt the model sees",
        (CALLS, "malformed_per_episode", "mean_turns", "truncated_frac"),
    )


def zero_signal(run: Run) -> Finding | None:
    """Every group's rewards equal and an update of zero: the run cannot learn (3)."""
    # the share of all-equal groups first: some groups all-pass and the others all-fail have
    # a reward std above 0 and no signal in any group (TRL's reward_std is the batch's)
    equal_name = first_of(run, ("degenerate_frac", "reward_std"))
    std = equal_name == "reward_std"
    p = pts(run, equal_name)
    h, t = head_tail(p)
    if (t > STD_ZERO) if std else (t < ALL_EQUAL):
        return None
    update = first_of(run, ("grad_norm", "loss"))
    u = [(s, abs(v)) for s, v in pts(run, update)]
    uh, ut = head_tail(u)
    if ut > UPDATE_ZERO:
        return None
    what = f"the reward's std was {t:.2g}" if std else f"{t:.0%} of groups all-equal"
    causes = [
        "every episode scores the same: the model cannot reach a reward (no tool calls, "
        "every call malformed, or every episode truncated and scored 0)",
        "the tasks are all too hard (or all too easy) for this model at this group size",
        "a reward function that returns a constant (a wrong column, a grader that always fails)",
    ]
    if (c := calls(run)) is not None and head_tail(c[1])[1] < NO_CALLS_MAX:
        causes[0] = "no tool calls: no episode can score, so every reward is 0 (no-tool-calls)"
    return Finding(
        "zero-signal",
        3,
        f"{what} in the last quarter ({span(p)}) and {update} {uh:.2g} -> {ut:.2g}: no group "
        "carries a signal and the update is zero, so nothing is learned",
        tuple(causes),
        "print one group's rewards and completions: all equal with no call, fix the calls "
        "first (no-tool-calls); all 0 with calls, the tasks (easier tasks, a larger group, a "
        "partial-credit reward); a constant with varied completions, the reward function",
        (equal_name, "degenerate_frac", update, CALLS),
    )


def distill_kl_without_pass(run: Run) -> Finding | None:
    """The student's KL to its teacher fell DISTILL_KL_FALL while its pass rate stayed flat
    below the teacher's: it imitates the tokens, not the skill (29)."""
    p = pts(run, "teacher_kl")
    kh, kt = head_tail(p)
    fall = 1 - ratio(kt, kh)
    rate = first_of(run, ("pass_rate", "eval/heldout_pass", "reward"))
    ph, pt = head_tail(pts(run, rate))
    teacher = _tail(run, "teacher_pass_rate")
    room = pt < (teacher - PASS_FLAT if teacher is not None else PASS_CEILING)
    if kh <= 0 or fall < DISTILL_KL_FALL or abs(pt - ph) >= PASS_FLAT or not room:
        return None
    return Finding(
        "distill-kl-without-pass",
        29,
        f"the KL to the teacher fell {fall:.0%} ({kh:.3g} -> {kt:.3g} nats, {span(p)}) while "
        f"{rate} stayed at {ph:.2f} -> {pt:.2f}"
        + (f", below the teacher's {teacher:.2f}" if teacher is not None else ""),
        (
            "the KL falls on the easy tokens (template, boilerplate) while the few that decide "
            "the task (which tool, which edit) stay the student's own",
            "the student lacks the capacity or the context to follow the teacher where it "
            "matters: the teacher's choices depend on what the student cannot see",
            "too few steps: a KL that falls first and a pass rate that follows later",
        ),
        "read the per-token KL on a failed episode: high on the decision tokens and near 0 "
        "elsewhere means the mean hides them (weight or filter those positions, or add the "
        "task reward: reward_weight > 0); run longer only if the KL there falls too",
        ("teacher_kl", "teacher_kl_q99", rate, "teacher_pass_rate"),
    )

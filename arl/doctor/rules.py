"""The doctor's rules in one table: each with its Appendix B problem, the metrics it needs
(alternatives in a tuple, a trailing "/" for a family of names) and those that sharpen it;
`diagnose` runs those a log supports, `unchecked` says which it could not and what to log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from arl.doctor import rules_dynamics as dyn
from arl.doctor import rules_episodes as epi
from arl.doctor import rules_signal as sig
from arl.doctor.names import specific, to_log
from arl.doctor.trend import MIN_POINTS, first_of, needed, pts
from arl.doctor.types import Finding, Gap, Run


@dataclass(frozen=True)
class Rule:
    """One diagnosis: a pure function of a Run, and the metrics it reads."""

    name: str  # Finding.rule when it fires
    problem: int  # its Appendix B problem
    fn: Callable[[Run], Finding | None]
    needs: tuple[tuple[str, ...], ...] = ()  # every group needs one of its names logged
    sharper: tuple[str, ...] = ()  # logged, they make the rule direct rather than inferred
    recipes: tuple[str, ...] = ()  # the recipes it is about (none: every run)


# The order is the report's: a run that cannot learn at all (no call parsed, no signal and no
# update) is named before what follows from it (truncation, groups without signal)
RULES = (
    Rule(
        "no-tool-calls",
        13,
        sig.no_tool_calls,
        (("tool_calls_per_episode", "malformed_per_episode"),),
    ),
    Rule(
        "zero-signal",
        3,
        sig.zero_signal,
        (("degenerate_frac", "reward_std"), ("grad_norm", "loss")),
    ),
    Rule("entropy-collapse", 26, dyn.entropy_collapse, (("entropy",),), ("degenerate_frac",)),
    Rule(
        "entropy-wrong-positions",
        28,
        dyn.entropy_wrong_positions,
        (("masked_in_non_policy_share", "entropy"),),
        ("masked_in_non_policy_share",),
    ),
    Rule(
        "kl-plateau",
        6,
        dyn.kl_plateau,
        (("kl/ref_k3", "kl/ref_k1"), ("reward", "pass_rate")),
    ),
    Rule("kl-tail", 16, dyn.kl_tail, (("kl/mu_k3",), ("kl/mu_absq99",))),
    Rule(
        "mismatch-growth",
        20,
        dyn.mismatch_growth,
        (("mismatch/mean",),),
        ("mismatch/p999",),
    ),
    Rule("capped-share", 16, dyn.capped_share, (("capped_frac",),)),
    Rule("no-signal-groups", 3, dyn.degenerate_groups, (("degenerate_frac",),)),
    Rule("public-hidden-gap", 7, epi.public_hidden_gap, (("public_hidden_gap",),)),
    Rule(
        "length-in-failures",
        27,
        epi.length_in_failures,
        (("len_failure_p50", "len_failure_p90", "len_mean"),),
        ("len_failure_p50",),
    ),
    Rule(
        "reward-vs-heldout",
        25,
        epi.reward_vs_heldout,
        (("reward", "pass_rate"), ("eval/heldout_pass", "eval/heldout_reward")),
    ),
    Rule("immediate-submit", 12, epi.immediate_submit, (("immediate_submit_frac",),)),
    Rule("truncation", 13, epi.truncation, (("truncated_frac",),)),
    Rule(
        "malformed-calls",
        13,
        epi.malformed_calls,
        (("malformed_per_episode", "tool_failure_frac"),),
    ),
    Rule("family-speed", 11, epi.family_speed, (("pass/", "canary_pass"),)),
    Rule(
        "distill-kl-without-pass",
        29,
        sig.distill_kl_without_pass,
        (("teacher_kl",), ("pass_rate", "eval/heldout_pass", "reward")),
        recipes=("distill",),
    ),
    Rule("non-finite", 20, dyn.non_finite),
)


def applies(run: Run, rule: Rule) -> bool:
    """The rule is about this run: any recipe, the run's recipe, or its first metric logged
    (a distillation's teacher_kl in a log whose recipe is unknown)."""
    if not rule.recipes or run.recipe in rule.recipes:
        return True
    return any(n in run.series for n in rule.needs[0]) if rule.needs else False


def applicable(run: Run) -> tuple[Rule, ...]:
    """The rules about this run (a distillation rule is not about a PG run)."""
    return tuple(r for r in RULES if applies(run, r))


def runnable(run: Run, rule: Rule) -> bool:
    """The rule is about the run, and every group of its needs has a name the run logs with
    enough points."""
    return applies(run, rule) and all(first_of(run, group) for group in rule.needs)


def diagnose(run: Run) -> list[Finding]:
    """Every finding the run's log supports; one "healthy" (or "unjudged") finding when none
    fires."""
    found = [f for r in RULES if runnable(run, r) and (f := r.fn(run)) is not None]
    return found or [healthy(run)]


# A run is called healthy only when at least half the rules could read it: a log too short or
# too thin to run most of them is "unjudged", never healthy by default.
MIN_RULES_RUN = 0.5


def healthy(run: Run) -> Finding:
    """Problem 0: no rule fired, with what was and was not checked ("unjudged" when fewer
    than half the rules about this run could run)."""
    about = applicable(run)
    ran = [r.name for r in about if runnable(run, r)]
    gaps = [g.rule for g in unchecked(run) if not g.partial]
    steps = {s for p in run.series.values() for s, _ in p}
    verdict = "healthy" if len(ran) >= MIN_RULES_RUN * len(about) else "unjudged"
    return Finding(
        verdict,
        0,
        f"no rule fired on {len(steps)} logged steps, but {len(ran)} of {len(about)} rules ran "
        if verdict == "unjudged"
        else f"no rule fired on {len(steps)} logged steps: {len(ran)} of {len(about)} rules ran "
        f"({', '.join(ran)})" + (f"; could not check {', '.join(gaps)}" if gaps else ""),
        (),
        "keep the standing panels: reward beside held-out, entropy, degenerate groups, the KL "
        "mean beside its tail",
        (),
    )


def _hint(run: Run, names: tuple[str, ...]) -> str:
    """What to log for any of `names`: the table's specific hints, else the generic one."""
    hints = [specific(run.source, n) for n in names]
    found = [h for h in dict.fromkeys(hints) if h]
    return "; or ".join(found) if found else to_log(run.source, names[0], run.recipe, run.config)


def _missing(run: Run, group: tuple[str, ...]) -> Gap | None:
    """Why a need group is unmet: absent names, or too few steps of a logged one."""
    if first_of(run, group):
        return None
    logged = [n for n in group if pts(run, n)]
    if logged:
        n, want = len(pts(run, logged[0])), needed(logged[0])
        return Gap("", 0, ("steps",), f"{logged[0]}: {n} logged steps, a trend needs {want}")
    return Gap("", 0, group, _hint(run, group))


def unchecked(run: Run) -> list[Gap]:
    """The rules this log cannot run (what is missing, what to log), and those it runs only
    by inference (a sharper metric absent)."""
    out = []
    for r in applicable(run):
        gaps = [g for group in r.needs if (g := _missing(run, group)) is not None]
        if gaps:
            missing = tuple(dict.fromkeys(n for g in gaps for n in g.missing))
            hint = "; ".join(dict.fromkeys(g.hint for g in gaps))
            out.append(Gap(r.name, r.problem, missing, hint))
            continue
        blunt = tuple(n for n in r.sharper if not first_of(run, (n,)))
        if blunt:
            hint = _hint(run, blunt)
            out.append(Gap(r.name, r.problem, blunt, hint, partial=True))
    return out


__all__ = ["MIN_POINTS", "RULES", "Rule", "applicable", "diagnose", "healthy", "unchecked"]

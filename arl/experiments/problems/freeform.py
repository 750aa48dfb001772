"""Problem 14: free-form edits against a menu of edit ops (CodeFix against BugFix).

Four RL arms on one seed, each from a weak base made by Chapter 15's recipe in its own
environment (format without skill: pretraining on the training listings, then SFT on blind and
read-then-guess play; arl.train.bases):

- menu: RL on the BugFix gym (its weak base);
- free-form, terse errors: RL on CodeFix, a failed replace answered `error`;
- free-form, helpful errors: RL on CodeFix, a failed replace answered what went wrong;
- SFT cold start + free-form: oracle SFT on CodeFix's valid edit trajectories up to the cold
  start's state (train pass 0.75), then RL on CodeFix with helpful errors.

Per step each arm logs its sampled batch's solve rate (`pass_rate`) and, on CodeFix, its
edit-apply rate (`apply_rate`: replaces that applied over replaces tried). Every 10 steps (and
at step 0) a fixed evaluation, the same episodes' seeds every time, gives the train pass rate
and, on CodeFix, the apply rate the claims are judged on: the sampled batch is filtered (solved
tasks rest), so its rates drift with what is left in it. After RL, the cold-start arm is
evaluated on the two families no menu op can fix (arith, slice).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from arl.codefix.families import NEW_FAMILIES
from arl.codefix.tasks import all_tasks as codefix_tasks
from arl.eval.metrics import evaluate
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
    arms_figure,
    base_config,
    first_last,
    first_to_last,
    head_mean,
    rl_config,
    series,
    tail_mean,
)
from arl.train.bases import cold_start, weak_base
from arl.train.pg import train_pg

MENU, TERSE, HELPFUL, COLD = "menu", "free-form, terse", "free-form, helpful", "SFT + free-form"
# RL's learning rate for every arm, chosen once on seed 0 (lr 1e-4, 3e-4 and Chapter 15's
# REINFORCE at 2e-4, 60 steps): at the trainer's default 3e-4 RL breaks the cold start's call
# format on CodeFix (malformed calls 0.07 -> 0.35, train pass 0.82 -> 0.67); at 1e-4 the cold
# start improves (0.82 -> 0.90) and the menu arm learns (0.22 -> 0.38); REINFORCE's menu arm
# does not move (0.20 -> 0.19).
LR = 1e-4
PASS, APPLY = "eval/train_pass", "eval/train_apply_rate"  # the fixed evaluation's rates
KEYS = (
    "pass_rate",
    "apply_rate",
    "malformed_per_episode",
    "edits_per_episode",
    "reward",
    PASS,
    APPLY,
)


def new_family_pass(ctx: Ctx, model) -> float:
    """Pass rate on the families no menu op fixes (arith, slice: train and held-out tasks)."""
    tasks = [t for t in codefix_tasks() if t.family in NEW_FAMILIES]
    m, _ = evaluate(model, tasks, samples=ctx.pick(8, 1), seed=ctx.seed + 14)
    return m["pass_rate"]


def _gain(h: list[dict]) -> float:
    """The fixed evaluation's train pass, last quarter of its evaluations minus the first."""
    return tail_mean(h, PASS) - head_mean(h, PASS)


def problem_14(ctx: Ctx):
    """Free-form edits learn more slowly than a menu; errors and an SFT cold start help."""
    from arl.codefix.env import CodeFixConfig

    base = base_config(ctx)
    steps = ctx.pick(60, 4)
    rl = rl_config(ctx, steps=steps, lr=LR, eval_every=ctx.pick(10, 2))
    runs = {MENU: train_pg(weak_base(base), rl)}
    cold = None
    arms = ((TERSE, "weak", "terse"), (HELPFUL, "weak", "helpful"), (COLD, "cold", "helpful"))
    for name, kind, errors in arms:
        model = (weak_base if kind == "weak" else cold_start)(base, "codefix")
        env = CodeFixConfig(errors=errors, zero_exploits=True)
        runs[name] = train_pg(model, replace(rl, env=env))
        cold = model if kind == "cold" else cold
    res = first_last(runs, KEYS)
    early = head_mean(runs[HELPFUL], APPLY) if series(runs[HELPFUL], APPLY) else 0.0
    res["effect"] = early  # the main claim: early free-form edits mostly fail to apply
    res["slower"] = _gain(runs[MENU]) - _gain(runs[HELPFUL])
    res["helpful_apply"] = _mean(runs[HELPFUL], APPLY) - _mean(runs[TERSE], APPLY)
    res["cold_apply"] = _mean(runs[COLD], APPLY) - _mean(runs[HELPFUL], APPLY)
    res["cold_pass"] = tail_mean(runs[COLD], PASS) - tail_mean(runs[HELPFUL], PASS)
    res["new_families"] = new_family_pass(ctx, cold)
    fl = partial(first_to_last, res)
    conclusion = (
        f"fixed evaluation's edit-apply rate (first -> last quarter of its evaluations over "
        f"{steps} RL steps): terse {fl(TERSE, APPLY)}, helpful {fl(HELPFUL, APPLY)}, after the "
        f"SFT cold start {fl(COLD, APPLY)}; its train pass: menu "
        f"{fl(MENU, PASS)}, free-form terse {fl(TERSE, PASS)}, helpful "
        f"{fl(HELPFUL, PASS)}, SFT + free-form {fl(COLD, PASS)}; the "
        f"cold-start arm solves the families no menu op fixes at {res['new_families']:.2f}."
    )
    return res, conclusion


def _mean(h: list[dict], key: str) -> float:
    xs = series(h, key)
    return float(np.mean(xs)) if xs else 0.0


PROBLEM_14 = Problem(
    problem_14,
    Claim(
        text="early free-form edits mostly fail to apply (60% in the first 200 steps)",
        effect="fixed-evaluation edit-apply rate of RL on CodeFix with helpful errors, first "
        "quarter of its evaluations",
        threshold=0.5,
        below=True,
        source="book",
        passage="in the first 200 steps, 60% of edits fail to apply. ... Free-form diffs cover "
        "everything but make most random actions invalid",
        cause="the weak base already quotes the listing well enough for most of its edits to apply",
    ),
    arms_figure(
        [
            (PASS, "train pass rate (fixed evaluation)"),
            (APPLY, "edit-apply rate (fixed evaluation)"),
        ],
        "Problem 14: a menu of edit ops against free-form replace edits",
    ),
    more=(
        (
            "slower",
            Claim(
                text="free-form RL learns more slowly than RL on the menu",
                effect="fixed-evaluation train pass gain (last minus first quarter), menu minus "
                "free-form (helpful)",
                source="book",
                passage="RL with free-form diffs learns much more slowly: in the first 200 steps, "
                "60% of edits fail to apply.",
                cause="neither arm learned in the steps run, or the free-form arm learned as fast",
            ),
        ),
        (
            "helpful_apply",
            Claim(
                text="helpful errors raise the edit-apply rate",
                effect="fixed-evaluation apply rate over the run, helpful minus terse errors",
                source="book",
                passage="a forgiving edit tool (search-and-replace on exact strings, with a "
                "helpful error when the search string is not found), and a parser that returns "
                "specific error messages so that a failed edit is an informative observation "
                "rather than a dead turn.",
                cause="a failed edit is rarely followed by another: RL from the weak base makes "
                "about one replace per episode (0.7-1.0) in both arms, so what the error says is "
                "rarely read, and RL did not learn to retry within the steps run",
            ),
        ),
        (
            "cold_apply",
            Claim(
                text="an SFT cold start on valid edit trajectories removes the format bottleneck",
                effect="fixed-evaluation apply rate over the run, SFT + free-form minus "
                "free-form RL alone (helpful errors)",
                source="book",
                passage="The usual way through is to keep the free-form interface and remove the "
                "format bottleneck before RL: a short SFT stage on valid edit trajectories",
                cause="the cold start's replaces apply in 83-95% of episodes, far above the weak "
                "base's RL (0.1-0.5), but about one in ten still misquotes the function's line",
            ),
        ),
        (
            "cold_pass",
            Claim(
                text="so that RL learns the repair",
                effect="fixed-evaluation train pass, last quarter: SFT + free-form minus "
                "free-form RL alone",
                source="book",
                passage="Measure the edit-apply rate separately from the solve rate; RL should "
                "not have to learn the edit format and the repair at the same time.",
                premise="cold_apply",
                cause="RL from the weak base caught up within the steps run",
            ),
        ),
        (
            "new_families",
            Claim(
                text="free-form edits solve families the menu cannot (no op fixes them: 0)",
                effect="pass rate of the cold-start arm on arith and slice tasks after RL",
                source="book",
                passage="It also caps the solvable task set at what the menu covers ... Free-form "
                "diffs cover everything",
                cause="the policy did not learn the new families' edits",
            ),
        ),
    ),
    tuned=(
        Tuning(
            "lr",
            LR,
            (0,),
            "RL learning rates 1e-4 and 3e-4 and Chapter 15 REINFORCE at 2e-4, 60 steps on seed 0: "
            "at 3e-4 RL broke the cold start call format on CodeFix; at 1e-4 the cold start "
            "improved and the menu arm learned",
        ),
    ),
)

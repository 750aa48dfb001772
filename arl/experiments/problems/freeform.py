"""Problem 14: free-form edits against a menu of edit ops (CodeFix against BugFix).

Four RL arms on one seed, each from a weak base made by Chapter 15's recipe in its own
environment (format without skill: pretraining on the training listings, then SFT on blind and
read-then-guess play; arl.train.bases):

- menu: RL on the BugFix gym (its weak base);
- free-form, terse errors: RL on CodeFix, a failed replace answered `error`;
- free-form, helpful errors: RL on CodeFix, a failed replace answered what went wrong;
- SFT cold start + free-form: oracle SFT on CodeFix's valid edit trajectories up to the cold
  start's state (train pass 0.75), then RL on CodeFix with helpful errors.

Per step each arm logs its solve rate (`pass_rate`) and, on CodeFix, its edit-apply rate
(`apply_rate`: replaces that applied over replaces tried). After RL, the cold-start arm is
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
KEYS = ("pass_rate", "apply_rate", "malformed_per_episode", "edits_per_episode", "reward")


def new_family_pass(ctx: Ctx, model) -> float:
    """Pass rate on the families no menu op fixes (arith, slice: train and held-out tasks)."""
    tasks = [t for t in codefix_tasks() if t.family in NEW_FAMILIES]
    m, _ = evaluate(model, tasks, samples=ctx.pick(8, 1), seed=ctx.seed + 14)
    return m["pass_rate"]


def _gain(h: list[dict]) -> float:
    return tail_mean(h, "pass_rate") - head_mean(h, "pass_rate")


def problem_14(ctx: Ctx):
    """Free-form edits learn more slowly than a menu; errors and an SFT cold start help."""
    from arl.codefix.env import CodeFixConfig

    base = base_config(ctx)
    steps = ctx.pick(60, 4)
    runs = {MENU: train_pg(weak_base(base), rl_config(ctx, steps=steps, lr=LR))}
    cold = None
    arms = ((TERSE, "weak", "terse"), (HELPFUL, "weak", "helpful"), (COLD, "cold", "helpful"))
    for name, kind, errors in arms:
        model = (weak_base if kind == "weak" else cold_start)(base, "codefix")
        env = CodeFixConfig(errors=errors, zero_exploits=True)
        runs[name] = train_pg(model, replace(rl_config(ctx, steps=steps, lr=LR), env=env))
        cold = model if kind == "cold" else cold
    res = first_last(runs, KEYS)
    early = head_mean(runs[HELPFUL], "apply_rate") if series(runs[HELPFUL], "apply_rate") else 0.0
    res["effect"] = early  # the main claim: early free-form edits mostly fail to apply
    res["slower"] = _gain(runs[MENU]) - _gain(runs[HELPFUL])
    res["helpful_apply"] = _mean(runs[HELPFUL], "apply_rate") - _mean(runs[TERSE], "apply_rate")
    res["cold_apply"] = _mean(runs[COLD], "apply_rate")
    res["cold_pass"] = tail_mean(runs[COLD], "pass_rate") - tail_mean(runs[HELPFUL], "pass_rate")
    res["new_families"] = new_family_pass(ctx, cold)
    fl = partial(first_to_last, res)
    conclusion = (
        f"edit-apply rate (first -> last quarter of {steps} RL steps): terse "
        f"{fl(TERSE, 'apply_rate')}, helpful {fl(HELPFUL, 'apply_rate')}, after the "
        f"SFT cold start {fl(COLD, 'apply_rate')}; train pass: menu "
        f"{fl(MENU, 'pass_rate')}, free-form terse {fl(TERSE, 'pass_rate')}, helpful "
        f"{fl(HELPFUL, 'pass_rate')}, SFT + free-form {fl(COLD, 'pass_rate')}; the "
        f"cold-start arm solves the families no menu op fixes at {res['new_families']:.2f}."
    )
    return res, conclusion


def _mean(h: list[dict], key: str) -> float:
    xs = series(h, key)
    return float(np.mean(xs)) if xs else 0.0


PROBLEM_14 = Problem(
    problem_14,
    Claim(
        book="early free-form edits mostly fail to apply (60% in the first 200 steps)",
        effect="edit-apply rate of RL on CodeFix with helpful errors, first quarter of the steps",
        threshold=0.5,
        below=True,
        cause="the weak base already quotes the listing well enough for most of its edits to apply",
    ),
    arms_figure(
        [("pass_rate", "train pass rate (sampled)"), ("apply_rate", "edit-apply rate")],
        "Problem 14: a menu of edit ops against free-form replace edits",
    ),
    more=(
        (
            "slower",
            Claim(
                book="free-form RL learns more slowly than RL on the menu",
                effect="pass-rate gain (last minus first quarter), menu minus free-form (helpful)",
                cause="neither arm learned in the steps run, or the free-form arm learned as fast",
            ),
        ),
        (
            "helpful_apply",
            Claim(
                book="helpful errors raise the edit-apply rate",
                effect="apply rate over the run, helpful minus terse errors",
                cause="a failed edit is rarely followed by another: RL from the weak base makes "
                "about one replace per episode (0.7-1.0) in both arms, so what the error says is "
                "rarely read, and RL did not learn to retry within the steps run",
            ),
        ),
        (
            "cold_apply",
            Claim(
                book="an SFT cold start on valid edit trajectories removes the format bottleneck",
                effect="apply rate over the run after the SFT cold start (near 1: above 0.9)",
                threshold=0.9,
                cause="the cold start's replaces apply in 83-95% of episodes, far above the weak "
                "base's RL (0.1-0.5), but about one in ten still misquotes the function's line",
            ),
        ),
        (
            "cold_pass",
            Claim(
                book="so that RL learns the repair",
                effect="train pass, last quarter: SFT + free-form minus free-form RL alone",
                cause="RL from the weak base caught up within the steps run",
            ),
        ),
        (
            "new_families",
            Claim(
                book="free-form edits solve families the menu cannot (no op fixes them: 0)",
                effect="pass rate of the cold-start arm on arith and slice tasks after RL",
                cause="the policy did not learn the new families' edits",
            ),
        ),
    ),
)

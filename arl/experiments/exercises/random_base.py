"""Exercise 2: a weak base trained on the random policy's play only.

Section 15.2's weak base is SFT on well-formed unskilled play: blind guesses (a fixing op
without reading) and read-then-guess episodes, 4 + 4 per training task. Here the same recipe
(the same pretraining, steps and seed) is trained on 8 episodes per task of the well-formed
random policy instead (`random_wellformed`: any tool, any op, hardcode_tests included; `init`
with a generic name). Per seed, for both bases: which training tasks they solve (any success in
16 episodes per task), per family, and their pass rates; then expert iteration from each
(Section 15.3: 4 rounds x 16 episodes per task x 15 SFT steps, hidden-test filter), evaluated
after every round, with the tasks never kept.

The expected answer: random play makes an edit on only some turns, with an op drawn from all
ops, so its successes are rarer than a blind guesser's; the base's support shrinks, and expert
iteration, filtered cloning, converges within that support: lower, and never on `init`.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from arl.eval.metrics import graded, run_policy, summarize
from arl.experiments.exercises.common import ei_config, split_hook, trend
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    base_config,
    mean_band,
    new_figure,
    save_figure,
    seeds_label,
    sem,
)
from arl.gym.families import FAMILIES
from arl.gym.tasks import tasks_for
from arl.train.bases import weak_base
from arl.train.rft import expert_iteration

DEFAULT, RANDOM = "blind + read-then-guess (15.2)", "random policy only"


def random_only(ctx: Ctx):
    """The weak-base recipe on 8 well-formed random episodes per training task."""
    base = base_config(ctx)
    n = base.weak_blind_per_task + base.weak_unskilled_per_task + base.weak_random_per_task
    return replace(base, weak_blind_per_task=0, weak_unskilled_per_task=0, weak_random_per_task=n)


def support(model, ctx: Ctx, samples: int) -> dict:
    """Which training tasks the model solves in `samples` episodes each, per family, and its
    episode summary (pass rate, malformed calls, reads, hacks)."""
    trajs = graded(run_policy(model, tasks_for("train"), samples, seed=ctx.seed * 7 + 3))
    family = {t.name: t.family for t in tasks_for("train")}
    solved = sorted({t.task for t in trajs if t.passed})
    m = summarize(trajs)
    return {
        "solved": solved,
        "n_solved": len(solved),
        "solved_by_family": {f: sum(family[t] == f for t in solved) for f in FAMILIES},
        **{k: m[k] for k in ("pass_rate", "malformed_per_episode", "read_fraction", "hack_rate")},
    }


def iterate(model, ctx: Ctx) -> list[dict]:
    """Expert iteration from `model` (Section 15.3's settings), evaluated after each round."""
    hook = split_hook(ctx, 900, ctx.pick(12, 1))
    rounds = expert_iteration(copy.deepcopy(model), tasks_for("train"), ei_config(ctx), hook)
    keep = ("round", "sample_pass_rate", "kept", "tasks_never_kept", "train", "heldout")
    return [{k: r[k] for k in keep} for r in rounds]


def exercise_2(ctx: Ctx) -> tuple[dict, str]:
    bases = {DEFAULT: weak_base(base_config(ctx)), RANDOM: weak_base(random_only(ctx))}
    samples = ctx.pick(16, 4)
    res: dict = {"bases": {}, "runs": {}}
    for name, model in bases.items():
        res["bases"][name] = support(model, ctx, samples)
        res["runs"][name] = iterate(model, ctx)
    b, r = res["bases"], res["runs"]
    res["effect"] = b[DEFAULT]["n_solved"] - b[RANDOM]["n_solved"]
    res["plateau_gap"] = r[DEFAULT][-1]["train"] - r[RANDOM][-1]["train"]
    family = {t.name: t.family for t in tasks_for("train")}
    ever = set().union(*(set(family) - set(x["tasks_never_kept"]) for x in r[RANDOM]))
    res["init_kept"] = sum(family[t] == "init" for t in ever)
    res["outside_support"] = sorted(ever - set(b[RANDOM]["solved"]))
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    parts = []
    for name, b in res["bases"].items():
        h = res["runs"][name]
        fams = ", ".join(f"{f} {n}" for f, n in b["solved_by_family"].items())
        parts.append(
            f"{name}: solves {b['n_solved']} training tasks ({fams}), pass {b['pass_rate']:.2f}, "
            f"malformed {b['malformed_per_episode']:.2f}, reads {b['read_fraction']:.2f}, hacks "
            f"{b['hack_rate']:.2f}; expert iteration train "
            f"{trend(h, 'train')}, held-out "
            f"{h[-1]['heldout']:.2f}, {len(h[-1]['tasks_never_kept'])} tasks never kept"
        )
    extra = res["outside_support"]
    return (
        "; ".join(parts)
        + f". Tasks kept by expert iteration from the random base that it never solved at first: "
        f"{', '.join(extra) or 'none'}."
    )


def draw(per_seed: list[dict], path) -> None:
    """Left: training tasks each base solves, per family (mean +- SE). Right: train and
    held-out pass over expert-iteration rounds from each base (mean +- SE)."""
    from matplotlib.ticker import MaxNLocator

    fig, (a, b) = new_figure(2)
    names = list(per_seed[0]["bases"])
    x = np.arange(len(FAMILIES))
    for i, name in enumerate(names):
        v = np.array(
            [[s["bases"][name]["solved_by_family"][f] for f in FAMILIES] for s in per_seed]
        )
        a.bar(x + (i - 0.5) * 0.4, v.mean(0), 0.4, yerr=sem(v), color=f"C{i}", label=name)
        for key, style in (("train", "-"), ("heldout", "--")):
            h = np.array([[r[key] for r in s["runs"][name]] for s in per_seed])  # (seeds, rounds)
            t = np.arange(1, h.shape[1] + 1)
            mean_band(b, t, h, f"C{i}", f"{name}, {key}", style)
    a.set_xticks(x, FAMILIES, fontsize=8)
    a.set_ylabel("training tasks solved (of 4 per family)")
    a.set_ylim(0, 5.2)  # room above the 4-task ceiling for the legend
    a.legend(fontsize=7, loc="upper right")
    b.set_xlabel("expert-iteration round")
    b.xaxis.set_major_locator(MaxNLocator(integer=True))
    b.set_ylabel("pass rate (hidden tests)")
    b.legend(fontsize=6)
    save_figure(
        path, fig, f"Exercise 2: a weak base from random play only ({seeds_label(per_seed)})"
    )


EXERCISE_2 = Problem(
    exercise_2,
    Claim(
        text="a base trained on the random policy's play alone can solve fewer tasks than "
        "one trained on blind and random play",
        effect="training tasks with a success in 16 episodes each, 15.2's base minus the "
        "random-only base",
        source="lab",
        passage="the book asks how the set of tasks the base can solve changes with random play "
        "only; the lab predicts it shrinks",
        cause="random play's rare right edits still reach as many tasks as blind guessing",
    ),
    draw,
    more=(
        (
            "plateau_gap",
            Claim(
                text="expert iteration, filtered cloning, converges within the base's support: "
                "from the random-only base it plateaus lower",
                effect="train pass after the last round, from 15.2's base minus from the "
                "random-only base",
                source="book",
                passage="expert iteration can only sharpen behavior that already has support, "
                "which is the coverage limit of filtered cloning.",
                premise="effect",
                cause="expert iteration from the random-only base catches up within 4 rounds",
            ),
        ),
        (
            "init_kept",
            Claim(
                text="and never on init, whose fix needs a name random play never gives",
                effect="init training tasks ever kept by expert iteration from the random-only "
                "base (< 0.5: none)",
                threshold=0.5,
                below=True,
                source="book",
                passage="The four tasks the weak base never solved form one whole family, init. "
                "The kept set contains no example of it, so no round can learn it",
                cause="the random-only base learned to name the accumulator",
            ),
        ),
    ),
)

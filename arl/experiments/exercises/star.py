"""Exercise 3: STaR's rationalization for the gym, beside plain expert iteration.

Each round of expert iteration (Section 15.3: 16 episodes per training task, hidden-test
filter, 15 SFT steps) is run twice from the weak base. STaR adds, for every task with no
success in the round, 8 episodes of the current model with the correct edit forced as its
first call (`edit OP`, and for `init` the episode's accumulator name: the hint), the rest
sampled; the successes are kept with the forced call's tokens masked out of the loss (their
owner set to the environment's), so the model is trained only on what it produced itself.

The gym's edit turn is the first call here (run_policy forces only a first call; most of the
weak base's successes begin with an edit anyway). The expected answer: the forced tokens are
the skill (the op, and for init the name), so masking them leaves the model to learn only
what follows a correct edit (test, submit). The kept data covers every task, but the policy
is still filtered behaviour cloning of its own tokens, and init stays unlearnable.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import numpy as np

from arl.env import environment_of_tasks
from arl.eval.metrics import graded, run_policy
from arl.experiments.exercises.common import ei_config, split_hook, trend
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    mean_band,
    new_figure,
    save_figure,
    seeds_label,
    start,
)
from arl.gym.grammar import END
from arl.gym.tasks import tasks_for
from arl.rollout import episode_seed
from arl.train.rft import RFTConfig, select
from arl.train.sft import SFTConfig, sft_train
from arl.types import ENV, POLICY, Trajectory

EI, STAR = "expert iteration", "STaR rationalization"


def hint(task, seed: int) -> list[str]:
    """The correct edit for the episode run_policy seeds with `seed` (its first episode): the
    family's op, and for init the accumulator name that episode draws."""
    env = environment_of_tasks([task]).make(task)
    _, info = env.reset(seed=episode_seed(seed, 0))
    name = [info["accumulator"]] if task.family == "init" else []
    return ["edit", task.family, *name, END]


def mask_first_call(tr: Trajectory) -> Trajectory:
    """The episode with its first call's tokens owned by the environment: out of the loss."""
    s, e = tr.calls[0]
    owners = tuple(ENV if s <= i < e and o == POLICY else o for i, o in enumerate(tr.owners_T))
    return replace(tr, owners_T=owners)


def rationalize(model, tasks, per_task: int, seed: int) -> list[Trajectory]:
    """`per_task` hinted episodes of each task, the successes with the hint masked out."""
    out = []
    for i, task in enumerate(tasks):
        for k in range(per_task):
            s = seed * 1000 + i * per_task + k
            tr = graded(run_policy(model, [task], 1, seed=s, opening=hint(task, s)))
            out += [mask_first_call(t) for t in tr if t.passed]
    return out


def star_rounds(model, ctx: Ctx, config: RFTConfig, per_task: int, rationalized: bool, hook):
    """Expert iteration in place, with STaR's rationalization when `rationalized`."""
    tasks, rng, history = tasks_for("train"), random.Random(config.seed), []
    family = {t.name: t.family for t in tasks}
    for r in range(config.rounds):
        samples = run_policy(model, tasks, config.samples_per_task, seed=config.seed * 100 + r)
        kept = select(samples, config, rng)
        unsolved = [t for t in tasks if t.name not in {x.task for x in kept}]
        extra = rationalize(model, unsolved, per_task, ctx.seed * 10 + r) if rationalized else []
        data = kept + extra
        if data:
            sft = SFTConfig(
                config.steps_per_round, config.batch_size, config.lr, seed=ctx.seed * 100 + r
            )
            sft_train(model, data, sft, hook_every=0)
        record = {
            "round": r,
            "kept": len(kept),
            "rationalized": len(extra),
            "unsolved": len(unsolved),
            "covered": len({x.task for x in data}),
            "init_covered": len({x.task for x in data if family[x.task] == "init"}),
            "trained_tokens": sum(x.n_action_tokens for x in extra),
        }
        history.append(record | hook(r, model))
    return history


def init_pass(split: str, _m: dict, trajs: list) -> dict:
    """The split's pass rate on the init family alone."""
    family = {t.name: t.family for t in tasks_for(split)}
    init = [t.passed for t in trajs if family[t.task] == "init"]
    return {f"{split}_init": float(np.mean(init)) if init else 0.0}


def exercise_3(ctx: Ctx) -> tuple[dict, str]:
    weak = start(ctx, "weak")
    config = ei_config(ctx)
    samples, per_task = ctx.pick(12, 1), ctx.pick(8, 2)
    hook = split_hook(ctx, 800, samples, init_pass)
    runs = {
        name: star_rounds(copy.deepcopy(weak), ctx, config, per_task, on, hook)
        for name, on in ((EI, False), (STAR, True))
    }
    res: dict = {"runs": runs}
    last = {n: h[-1] for n, h in runs.items()}
    res["effect"] = last[STAR]["train_init"] - last[EI]["train_init"]
    res["coverage"] = last[STAR]["covered"] - last[EI]["covered"]
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    parts = []
    for name, h in res["runs"].items():
        parts.append(
            f"{name}: train pass {trend(h, 'train')}, init "
            f"{h[-1]['train_init']:.2f} (held-out {h[-1]['heldout']:.2f}, init "
            f"{h[-1]['heldout_init']:.2f}); tasks in the data per round "
            f"{', '.join(str(r['covered']) for r in h)} (init {h[-1]['init_covered']}), "
            f"rationalized {', '.join(str(r['rationalized']) for r in h)}"
        )
    return "; ".join(parts) + "."


def draw(per_seed: list[dict], path) -> None:
    """Left: training tasks in each round's data. Right: train pass overall and on init per
    round. Both arms, mean +- SE over seeds."""
    from matplotlib.ticker import MaxNLocator

    fig, (a, b) = new_figure(2)
    for i, arm in enumerate((EI, STAR)):
        for ax, keys in (
            (a, (("covered", "-", "all tasks"), ("init_covered", "--", "init tasks"))),
            (b, (("train", "-", "all tasks"), ("train_init", "--", "init tasks"))),
        ):
            for key, style, what in keys:
                v = np.array([[r[key] for r in s["runs"][arm]] for s in per_seed])
                t = np.arange(1, v.shape[1] + 1)
                mean_band(ax, t, v, f"C{i}", f"{arm}: {what}", style)
    a.set_ylabel("training tasks in the round's SFT data")
    b.set_ylabel("train pass rate (hidden tests)")
    for ax in (a, b):
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=6)
    save_figure(path, fig, f"Exercise 3: STaR rationalization ({seeds_label(per_seed)})")


EXERCISE_3 = Problem(
    exercise_3,
    Claim(
        text="with the forced tokens masked, init does not become learnable: the hint is the "
        "skill, and the loss never sees it",
        effect="init train pass after the last round, STaR minus expert iteration (< 0.05)",
        threshold=0.05,
        below=True,
        source="lab",
        passage="the book asks whether init becomes learnable when the forced tokens are masked "
        "out of the loss; the lab predicts not, the forced op being the skill",
        cause="the model's own tokens after a hinted edit carried the init skill",
    ),
    draw,
    more=(
        (
            "coverage",
            Claim(
                text="rationalization fills the coverage gap of the data: it holds episodes of "
                "the tasks filtering never keeps",
                effect="training tasks in the last round's SFT data, STaR minus expert iteration",
                source="book",
                passage='STaR\'s "rationalization" step, which regenerates a rationale given the '
                "correct answer for problems the model fails, addresses the coverage half of this "
                "problem",
                cause="the hinted episodes failed too (the model does not submit after the edit)",
            ),
        ),
    ),
)

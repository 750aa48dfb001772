"""Problems 26 and 28: entropy collapse at a high learning rate; the mask shifted by one."""

from __future__ import annotations

import numpy as np
import torch

from arl.batch import check_batch, collate
from arl.eval.metrics import action_entropy, run_policy
from arl.experiments.problems.common import (
    Ctx,
    first_last,
    head_mean,
    plot_runs,
    rl_config,
    start,
    tail_mean,
)
from arl.experiments.problems.mutations import collate_shifted, shifted_mask
from arl.gym.tasks import tasks_for
from arl.losses import token_logprobs
from arl.train.pg import train_pg
from arl.train.pg_config import PGConfig
from arl.types import POLICY


def problem_26(ctx: Ctx):
    """A 10x learning rate with several updates per batch; clip-higher and half the rate."""
    high = 10 * PGConfig().lr
    updates = {"epochs": 2, "minibatches": 2}
    variants = {
        f"lr {high:.0e}, clip 0.2/0.2": {"lr": high, "clip_high": 0.2, **updates},
        f"lr {high:.0e}, clip-higher 0.2/0.28": {"lr": high, "clip_high": 0.28, **updates},
        f"lr {high / 2:.1e}, clip-higher": {"lr": high / 2, "clip_high": 0.28, **updates},
        f"lr {PGConfig().lr:.0e} (default), clip-higher": {"clip_high": 0.28, **updates},
    }
    runs = {}
    for name, overrides in variants.items():
        config = rl_config(ctx, **overrides, steps=ctx.pick(12, 3))
        runs[name] = train_pg(start(ctx, "cold"), config, tasks_for("train"))
    keys = ("entropy", "pass_rate", "degenerate_frac", "clip_frac", "malformed_per_episode")
    res = {
        n: {
            k: {
                "first": head_mean(h, k),
                "last": tail_mean(h, k),
                "min": float(np.min([r[k] for r in h])),
            }
            for k in keys
        }
        for n, h in runs.items()
    }
    res["history"] = runs
    plot_runs(
        ctx,
        runs,
        [
            ("entropy", "entropy on policy tokens (nats)"),
            ("pass_rate", "pass rate"),
            ("malformed_per_episode", "malformed calls"),
        ],
        "Problem 26: learning rate and clip-higher against entropy collapse",
    )
    collapsed = [n for n in runs if res[n]["entropy"]["last"] < 0.5 * res[n]["entropy"]["first"]]
    exploded = [n for n in runs if res[n]["malformed_per_episode"]["last"] > 1.0]
    conclusion = (
        "from the cold start, 2 epochs x 2 minibatches, entropy and pass rate "
        "(first -> last quarter): "
        + "; ".join(
            f"{n}: H {res[n]['entropy']['first']:.2f} -> {res[n]['entropy']['last']:.2f}, pass "
            f"{res[n]['pass_rate']['first']:.2f} -> {res[n]['pass_rate']['last']:.2f}, malformed "
            f"{res[n]['malformed_per_episode']['last']:.2f}"
            for n in runs
        )
        + ". Entropy halved in: "
        + ("; ".join(collapsed) if collapsed else "none")
        + "; format broke (over 1 malformed call per episode) in: "
        + ("; ".join(exploded) if exploded else "none")
        + "."
        + (
            " With most episodes failing, a too-large step pushes the sampled tokens of "
            "failures down and spreads mass onto malformed calls (entropy rises) before any "
            "confident success can sharpen the policy."
            if exploded
            else ""
        )
    )
    return res, conclusion


@torch.no_grad()
def _observation_nll(model, trajs) -> float:
    """Mean NLL of the tokens the environment and template own (what a policy never emits)."""
    batch = collate(trajs)
    logp = token_logprobs(model, batch)
    obs = (batch.owners >= 0) & (batch.owners != POLICY) & (batch.owners != 0)
    return float(-(logp[obs]).mean())


def problem_28(ctx: Ctx):
    """The action mask aligned to ids instead of targets: dashboards lie, reward does not move."""
    probe = run_policy(start(ctx, "cold"), tasks_for("train"), 1, seed=ctx.seed + 5)
    shifted = shifted_mask(collate(probe))
    try:
        check_batch(shifted)
        caught = False
    except AssertionError:
        caught = True
    on = shifted.action_mask.bool()
    off_policy_share = float((shifted.owners[on] != POLICY).float().mean())
    missed_share = float(
        ((collate(probe).action_mask.bool()) & ~on).sum() / collate(probe).action_mask.sum()
    )
    runs, finals = {}, {}
    for name, collate_fn in (("correct mask", collate), ("mask shifted by one", collate_shifted)):
        model = start(ctx, "cold")
        before = _observation_nll(model, probe)
        config = rl_config(ctx, steps=ctx.pick(25, 4))
        runs[name] = train_pg(model, config, tasks_for("train"), collate_fn=collate_fn)
        ev = run_policy(model, tasks_for("train"), ctx.pick(2, 1), seed=ctx.seed + 7)
        finals[name] = {
            "true_policy_entropy": action_entropy(model, ev)[0],
            "observation_nll_before": before,
            "observation_nll_after": _observation_nll(model, probe),
        }
    keys = ("entropy", "pass_rate", "reward")
    res = first_last(runs, keys)
    res |= {
        "check_batch_catches_it": caught,
        "masked_in_non_policy_share": off_policy_share,
        "policy_tokens_masked_out_share": missed_share,
        "final": finals,
    }
    plot_runs(
        ctx,
        runs,
        [("entropy", "entropy on the loss mask (dashboard)"), ("pass_rate", "pass rate")],
        "Problem 28: the loss mask shifted by one",
    )
    c, s = "correct mask", "mask shifted by one"
    conclusion = (
        f"the shifted mask puts {off_policy_share:.0%} of its weight on non-policy targets (the "
        f"<obs> after each call) and drops {missed_share:.0%} of policy tokens (each call's first "
        f"word, the tool choice); check_batch {'catches' if caught else 'misses'} it. Over the run"
        f" the dashboard entropy reads {res[s]['entropy']['last']:.2f} nats against "
        f"{res[c]['entropy']['last']:.2f} with the correct mask, but the true entropy on policy "
        f"tokens ends at {finals[s]['true_policy_entropy']:.2f} (correct mask: "
        f"{finals[c]['true_policy_entropy']:.2f}); pass rate went "
        f"{res[s]['pass_rate']['first']:.2f} -> {res[s]['pass_rate']['last']:.2f} (correct: "
        f"{res[c]['pass_rate']['first']:.2f} -> {res[c]['pass_rate']['last']:.2f}); observation-"
        f"token NLL {finals[s]['observation_nll_before']:.3f} -> "
        f"{finals[s]['observation_nll_after']:.3f} nats (correct: "
        f"{finals[c]['observation_nll_after']:.3f})."
    )
    return res, conclusion

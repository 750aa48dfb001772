"""Problem 6: keep a KL penalty at all, in RL on a verifier's reward?

Four RL arms from an early oracle-SFT checkpoint (step SFT_STEP, train pass about 0.3-0.5: a
start below the ceiling, so that a penalty has room to bind), on the hidden tests' reward,
150 steps each on one seed: no KL; the k3 KL to the start in the loss at beta 0.05 and at 0.2;
and beta 0.05 with the reference reset to the policy every 10 steps. Per step: the KL to the
arm's reference (`kl/ref_k3`, on the step's own episodes), entropy, the reference forward's
time (`time/ref`) and, with a KL, the KL term's gradient norm over the policy gradient's
(`kl/grad_ratio`: how far the penalty binds, measured directly; `kl/grad_cos` their cosine).
Every 10 steps: the pass rates of a fixed evaluation (the same episodes' seeds every time) on
both splits, on which the pass effects are judged (the sampled batch is filtered, so it is
enriched in unsolved tasks), and a fixed probe of the KL to the start (`p6/kl_start`: k3 on
the policy's own episodes on fixed seeds, two per training task), logged for every arm.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import torch

from arl.batch import collate
from arl.eval.metrics import run_policy
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
    arms_figure,
    base_config,
    first_last,
    first_to_last,
    rl_config,
    series,
)
from arl.gym.tasks import tasks_for
from arl.losses import kl_k3
from arl.model import TinyAgent
from arl.train.bases import cold_start
from arl.train.common import Hook, frozen_logprobs
from arl.train.pg import train_pg
from arl.types import Trajectory

NONE, BIND, BETA, RESET = "no KL", "beta 0.2", "beta 0.05", "beta 0.05, reset every 10"
ARMS = {
    NONE: {"kl": "off"},
    BIND: {"kl": "k3", "kl_beta": 0.2},
    BETA: {"kl": "k3", "kl_beta": 0.05},
    RESET: {"kl": "k3", "kl_beta": 0.05, "ref_reset_every": 10},
}
SFT_STEP = 20  # the start: oracle SFT's checkpoint at this step (chosen on seeds 100-101)
STEPS, EVAL_EVERY = 150, 10
EVAL_SAMPLES = 8  # episodes per task in each evaluation (160 on the train split)
PROBE_SAMPLES = 2  # the KL probe's episodes per training task (40)
PROBE_SEED = 6_000  # + the seed: the probe's episode seeds, the same at every evaluation
PASS = "eval/train_pass"  # the fixed evaluation the pass effects are judged on
PROBE = "p6/kl_start"  # the probe's KL to the start, nats per policy token
RATIO = "kl/grad_ratio"  # the KL term's gradient norm over the policy gradient's
KEYS = (
    PASS,
    "eval/heldout_pass",
    "pass_rate",
    "entropy",
    "kl/ref_k3",
    PROBE,
    RATIO,
    "kl/grad_cos",
)


# --- the start and the probe --------------------------------------------------------------------


def early_start(ctx: Ctx) -> TinyAgent:
    """Oracle SFT's checkpoint at SFT_STEP (quick: at its first check), cached as a cold start
    chosen by step: the same weak base and SFT run as Chapter 15's, stopped early."""
    base = base_config(ctx)
    step = ctx.pick(SFT_STEP, base.cold_eval_every)
    return cold_start(replace(base, sft_steps=step, cold_start_step=step))


@torch.no_grad()
def kl_to(model: TinyAgent, ref: TinyAgent, trajs: Sequence[Trajectory]) -> float:
    """Mean k3 estimate of KL(model || ref) over the policy tokens of `trajs` (episodes the
    model sampled: k3 is unbiased under the model's own samples), nats per token."""
    batch = collate(trajs)
    on = batch.action_mask.bool()  # (B, T)
    if not bool(on.any()):
        return 0.0
    logp, ref_logp = frozen_logprobs(model, batch), frozen_logprobs(ref, batch)  # (B, T) each
    return float(kl_k3((ref_logp - logp)[on]).mean())


def probe_hook(start_model: TinyAgent, ctx: Ctx, env_config) -> Hook:
    """A hook logging the KL to the start (PROBE) on the policy's episodes of fixed seeds."""
    ref = copy.deepcopy(start_model).eval()
    tasks, samples = tasks_for("train"), ctx.pick(PROBE_SAMPLES, 1)

    def hook(step: int, model: TinyAgent) -> dict:
        trajs = run_policy(model, tasks, samples, seed=PROBE_SEED + ctx.seed, env_config=env_config)
        return {PROBE: kl_to(model, ref, trajs)}

    return hook


# --- the per-seed effects -----------------------------------------------------------------------


def late_median(history: list[dict], key: str, frac: float = 0.5) -> float:
    """The median of a metric over its last `frac` of values (at least one; a step without a
    value, a ratio whose policy gradient was 0, is left out; 0 when there is none)."""
    xs = series(history, key)
    if not xs:
        return 0.0
    return float(np.median(xs[-max(1, math.ceil(len(xs) * frac)) :]))


def last_quarter(history: list[dict], key: str) -> float:
    """The mean of a metric over the last quarter of its values (the evaluations' last four
    of sixteen), at least one."""
    xs = series(history, key)
    return float(np.mean(xs[-max(1, math.ceil(len(xs) / 4)) :])) if xs else float("nan")


def plateau_change(history: list[dict], key: str) -> float:
    """|median of the last quarter - median of the third| / median of the last: how far a
    metric still moves at the end of a run (0: flat). Medians, robust to a spike."""
    xs = series(history, key)
    q = max(1, math.ceil(len(xs) / 4))
    last, third = float(np.median(xs[-q:])), float(np.median(xs[-2 * q : -q] or xs[-q:]))
    return abs(last - third) / max(abs(last), 1e-12)


def ref_share(history: list[dict]) -> float:
    """The reference forward's share of the trainer's time (time/ref over time/train)."""
    ref, train = series(history, "time/ref"), series(history, "time/train")
    return float(np.sum(ref) / np.sum(train[: len(ref)])) if ref else 0.0


def effects(runs: dict[str, list[dict]]) -> dict[str, float]:
    """Every claim's per-seed effect from the four arms' histories."""
    p = {n: last_quarter(h, PASS) for n, h in runs.items()}
    return {
        "effect": p[NONE] - p[BIND],
        "binds": late_median(runs[BIND], RATIO),
        "small_beta": p[BETA] - p[BIND],
        "reset": late_median(runs[RESET], PROBE, 0.25) - late_median(runs[BETA], PROBE, 0.25),
        "reset_local": late_median(runs[RESET], "kl/ref_k3") - late_median(runs[BETA], "kl/ref_k3"),
        "kl_flat": plateau_change(runs[BIND], PROBE),
    }


def problem_6(ctx: Ctx):
    """From an early SFT checkpoint: no KL, beta 0.2 and 0.05, and 0.05 reset every 10."""
    runs = {}
    for name, overrides in ARMS.items():
        config = rl_config(
            ctx,
            steps=ctx.pick(STEPS, 4),
            eval_every=ctx.pick(EVAL_EVERY, 2),
            eval_samples=ctx.pick(EVAL_SAMPLES, 1),
            **overrides,
        )
        model = early_start(ctx)
        hook = probe_hook(model, ctx, config.env.eval_config())
        runs[name] = train_pg(
            model,
            config,
            tasks_for("train"),
            hook=hook,
            hook_every=config.eval_every,
            kl_grad=True,
        )
    res = first_last(runs, KEYS) | effects(runs)
    res["start_pass"] = series(runs[NONE], PASS)[0]
    res["ratio"] = {n: late_median(runs[n], RATIO) for n in (BIND, BETA, RESET)}
    res["ref_share"] = {n: ref_share(runs[n]) for n in (BIND, BETA, RESET)}
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    fl = partial(first_to_last, res)  # fl(arm, key): "first -> last" quarter means
    arms = "; ".join(
        f"{n}: train pass {fl(n, PASS)} (held-out {fl(n, 'eval/heldout_pass')}), entropy "
        f"{fl(n, 'entropy')}, KL to the start {fl(n, PROBE)}"
        + (f", gradient ratio {res['ratio'][n]:.2f}" if n != NONE else "")
        for n in ARMS
    )
    return (
        f"start: train pass {res['start_pass']:.2f}. First -> last quarter: {arms}. At beta 0.2 "
        f"the probe KL moves {res['kl_flat']:.0%} between the last two quarters. The reset "
        f"arm's KL to the start minus beta 0.05's: {res['reset']:+.3f}; to its own reference: "
        f"{res['reset_local']:+.3f} nats. The reference forward takes "
        f"{res['ref_share'][BETA]:.0%} of the trainer's time (beta 0.05): what dropping the KL "
        "saves, with the reference's memory."
    )


PASSAGE = (
    "The stall at a small, flat KL suggests the penalty is binding: the policy has moved as "
    "far as beta allows, and the reward gradient no longer outweighs the penalty gradient."
)
RESET_PASSAGE = (
    "or periodically reset the reference to a recent checkpoint (keeps a local trust region "
    "without anchoring to SFT)"
)

PROBLEM_6 = Problem(
    problem_6,
    Claim(
        text="dropping the KL lets a verifier-rewarded run learn where a binding beta (0.2) "
        "holds it back",
        effect="fixed-evaluation train pass, mean of the last quarter of the evaluations, no KL "
        "minus beta 0.2",
        source="book",
        passage=PASSAGE + " Options: ... drop KL and rely on clipping and a conservative "
        "learning rate ... The book's default for verifier-rewarded coding RL is to drop the "
        "penalty or set it small",
    ),
    arms_figure(
        [
            (PASS, "train pass rate (fixed evaluation)"),
            (PROBE, "KL to the start (fixed probe, nats/token)"),
            ("kl/ref_k3", "KL to the arm's reference (k3, nats/token)"),
            (RATIO, "KL gradient norm / PG gradient norm"),
            ("eval/heldout_pass", "held-out pass rate"),
        ],
        "Problem 6: from SFT step 20, no KL, beta 0.2, beta 0.05, and 0.05 reset every 10 steps",
        log_keys=(PROBE, "kl/ref_k3", RATIO),
    ),
    more=(
        (
            "binds",
            Claim(
                text="at beta 0.2 the penalty binds: the reward gradient no longer outweighs "
                "the penalty gradient",
                effect="the KL term's gradient norm over the policy gradient's (kl/grad_ratio, on "
                "each step's first update; none where the policy gradient is 0), median "
                "over the second half of the steps, beta 0.2 (> 1: the penalty's gradient at "
                "least the reward's)",
                threshold=1.0,
                source="book",
                passage=PASSAGE,
            ),
        ),
        (
            "small_beta",
            Claim(
                text="where the penalty binds, a lower beta (cheap; keeps a soft anchor) lets "
                "the run learn",
                effect="fixed-evaluation train pass, mean of the last quarter of the "
                "evaluations, beta 0.05 minus beta 0.2",
                source="book",
                passage=PASSAGE + " Options: lower beta (cheap; keeps a soft anchor)",
                premise="binds",
            ),
        ),
        (
            "reset",
            Claim(
                text="a reference reset every 10 steps does not anchor to SFT: the KL to the "
                "SFT start grows past the fixed-reference run's",
                effect="KL to the start on the fixed probe (k3, nats/token), median of the last "
                "quarter of the evaluations, reset every 10 minus fixed (both beta 0.05)",
                source="book",
                passage=RESET_PASSAGE,
            ),
        ),
        (
            "reset_local",
            Claim(
                text="while it keeps a local trust region: the KL to its moving reference stays "
                "at or below the fixed-reference run's KL to its reference",
                effect="per-step k3 KL to the arm's own reference (its own episodes), median over "
                "the second half of the steps, reset every 10 minus fixed (both beta 0.05; < 0)",
                below=True,
                source="book",
                passage=RESET_PASSAGE,
            ),
        ),
        (
            "kl_flat",
            Claim(
                text="the binding penalty shows as a KL flat near its plateau",
                effect="|median of the probe KL to the start over the last quarter of the "
                "evaluations - over the third| / last, beta 0.2 (< 0.25, the lab's bar for flat)",
                threshold=0.25,
                below=True,
                source="book",
                passage="its KL to the reference plateaued near 0.02 nats per token while reward "
                "stalled ... The stall at a small, flat KL suggests the penalty is binding",
                premise="binds",
            ),
        ),
    ),
    settings={
        "start": f"the seed's oracle SFT checkpoint at step {SFT_STEP} (cold_start_step)",
        "sft_step": SFT_STEP,
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "eval_samples": EVAL_SAMPLES,
        "probe_samples": PROBE_SAMPLES,
        "probe_seed": f"{PROBE_SEED} + seed",
        "grad_split": "the KL term's gradient apart on each step's first update (kl_grad)",
        "arms": ARMS,
        "trainer": "PGConfig defaults otherwise (lr 3e-4, 8 tasks x 8 episodes a step)",
    },
    tuned=(
        Tuning(
            "sft_step",
            SFT_STEP,
            (100, 101),
            "oracle SFT from each seed's weak base (Chapter 15's run), train pass on 8 episodes "
            "per training task at steps 10, 20, 30, 40, 50: seed 100 0.11, 0.46, 0.86, 0.94, "
            "0.96; seed 101 0.11, 0.33, 0.64, 0.89, 0.96. Step 20 is the checkpoint whose mean "
            "(0.40) is nearest 0.4, the middle of issue 43's 0.3-0.5 (on the two-core machine "
            "the judged runs use; a 16-core machine's other float rounding gave 0.58 and 0.40 "
            "at step 20, also nearest)",
        ),
    ),
)

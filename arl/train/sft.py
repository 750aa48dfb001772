"""Trajectory SFT (Section 15.1): AdamW on the masked action-token NLL of fixed trajectories.

One loop: sample a minibatch of trajectories with replacement, take one step on
sft_loss, and call an optional hook every `hook_every` steps, which can evaluate or
keep a checkpoint without restarting the optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from arl.batch import collate
from arl.checks import DERIVED_SEED_MAX, check, check_seed
from arl.errors import ArlError
from arl.logging_bridge import Sink, log_record
from arl.losses import AGGREGATIONS, pg_loss, sft_loss, token_logprobs
from arl.model import TinyAgent
from arl.train.common import Hook, hook_due, make_optimizer, optimizer_step
from arl.types import Trajectory

DECAYS = ("constant", "cosine")  # what the learning rate does after warmup


@dataclass(frozen=True)
class SFTConfig:
    """Settings of one SFT run."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"aggregation": AGGREGATIONS, "decay": DECAYS}
    steps: int = 40  # optimizer steps
    batch_size: int = 16  # trajectories per minibatch, sampled with replacement
    lr: float = 1e-3  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float = 1.0  # max global gradient norm (0: off)
    aggregation: str = "token_mean"  # how token terms are averaged (Problem 1)
    seed: int = 0  # minibatch sampling
    warmup_steps: int = 0  # linear warmup from lr/warmup_steps to lr (0: none)
    decay: str = "constant"  # after warmup: "constant", or "cosine" to 0 at the last step
    beta2: float = 0.999  # AdamW's second-moment decay (torch's default; GPT-style runs: 0.95)

    def __post_init__(self) -> None:
        check("steps", self.steps, 0, 10_000_000, integer=True)
        check("batch_size", self.batch_size, 1, 4096, integer=True)
        check("lr", self.lr, 0, 1.0, open_lo=True)
        check("weight_decay", self.weight_decay, 0, 1e6)
        check("grad_clip", self.grad_clip, 0, 1e6)
        check_seed("seed", self.seed, DERIVED_SEED_MAX)
        if self.aggregation not in AGGREGATIONS:
            raise ArlError(f"aggregation: unknown {self.aggregation!r}")
        check("warmup_steps", self.warmup_steps, 0, 10_000_000, integer=True)
        if self.decay not in DECAYS:
            raise ArlError(f"decay: unknown {self.decay!r} (choose from {', '.join(DECAYS)})")
        check("beta2", self.beta2, 0, 1, open_lo=True, open_hi=True)


def scheduled_lr(step: int, config: SFTConfig) -> float:
    """The learning rate of optimizer step `step` (1-based): linear warmup over warmup_steps,
    then constant or a cosine to 0 at the last step (the schedules of HF's Trainer)."""
    if step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if config.decay == "constant":
        return config.lr
    done = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * done))


def sft_train(
    model: TinyAgent,
    data: Sequence[Trajectory],
    config: SFTConfig = SFTConfig(),
    hook: Hook | None = None,
    hook_every: int = 10,
    optimizer: torch.optim.Optimizer | None = None,
    weights: Sequence[float] | None = None,
    sink: Sink | None = None,
) -> list[dict]:
    """Train in place; returns one record per step (loss, and the step's learning rate lr)
    plus whatever the hook returned; each record also goes to `sink` (--report-to).

    The hook runs at step 0 and then every `hook_every` steps (and after the last step).
    `weights`: one per trajectory, multiplying its tokens' terms (RFT with a group baseline
    trains on failures with negative weights); None: all 1, plain SFT.
    """
    if not data:
        raise ArlError("SFT needs at least one trajectory")
    if weights is not None and len(weights) != len(data):
        raise ArlError(f"weights: {len(weights)} for {len(data)} trajectories")
    opt = optimizer or make_optimizer(
        model, config.lr, config.weight_decay, betas=(0.9, config.beta2)
    )
    gen = torch.Generator().manual_seed(config.seed)
    history: list[dict] = []

    def run_hook(step: int) -> None:
        due = hook is not None and hook_due(step, hook_every, config.steps)
        out = hook(step, model) if due else None
        if out:
            history.append({"step": step, **out})
            log_record(sink, history[-1])

    run_hook(0)
    model.train()
    for step in range(1, config.steps + 1):
        # the data source: a minibatch of fixed trajectories; the weight: 1 on every action token
        idx = torch.randint(len(data), (config.batch_size,), generator=gen).tolist()
        batch = collate([data[i] for i in idx])
        logp = token_logprobs(model, batch)
        if weights is None:
            loss = sft_loss(logp, batch.action_mask, config.aggregation)
        else:  # sum_i w_i log pi(tau_i), aggregated as SFT's: sft_loss when every w_i = 1
            w = torch.tensor([float(weights[i]) for i in idx])  # (batch,)
            loss = pg_loss(logp, w, batch.action_mask, config.aggregation)
        if config.warmup_steps or config.decay != "constant":
            for group in opt.param_groups:
                group["lr"] = scheduled_lr(step, config)
        lr = float(opt.param_groups[0]["lr"])  # the step's, after the schedule set it
        value, _ = optimizer_step(model, opt, loss, config.grad_clip, f"SFT step {step}")
        history.append({"step": step, "loss": value, "lr": lr})
        log_record(sink, history[-1])
        run_hook(step)
    return history

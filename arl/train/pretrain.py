"""Next-token pretraining on plain token sequences: the stage a real policy had before SFT.

A pretrained LM arrives at agent post-training already able to copy a name it has just
read. TinyAgent starts from nothing, so the weak base first learns to predict source
listings token by token (every position weighted, no action mask); predicting the later
uses of a variable from its first one is the copying `edit init NAME` needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from arl.checks import DERIVED_SEED_MAX, check, check_seed
from arl.errors import ArlError
from arl.model import TinyAgent
from arl.train.common import make_optimizer, optimizer_step

IGNORE = -100  # the target of a padded position: no loss


@dataclass(frozen=True)
class PretrainConfig:
    """Settings of one pretraining run."""

    steps: int = 300  # optimizer steps
    batch_size: int = 32  # sequences per minibatch, sampled with replacement
    lr: float = 1e-3  # AdamW learning rate
    grad_clip: float = 1.0  # max global gradient norm (0: off)
    seed: int = 0  # minibatch sampling

    def __post_init__(self) -> None:
        check("steps", self.steps, 0, 10_000_000, integer=True)
        check("batch_size", self.batch_size, 1, 4096, integer=True)
        check("lr", self.lr, 0, 1.0, open_lo=True)
        check("grad_clip", self.grad_clip, 0, 1e6)
        check_seed("seed", self.seed, DERIVED_SEED_MAX)


def pad_batch(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets of right-padded sequences: x (B, L-1), y (B, L-1), with
    IGNORE where the target is padding."""
    L = max(len(s) for s in seqs)
    x = torch.tensor([list(s[:-1]) + [0] * (L - len(s)) for s in seqs])  # (B, L-1)
    y = torch.tensor([list(s[1:]) + [IGNORE] * (L - len(s)) for s in seqs])  # (B, L-1)
    return x, y


def lm_loss(model: TinyAgent, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the non-padded targets (every token alike)."""
    logits, _ = model(x)  # (B, L-1, V)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)


def lm_pretrain(
    model: TinyAgent,
    seqs: Sequence[Sequence[int]],
    config: PretrainConfig = PretrainConfig(),
    after_step: Callable[[int], None] | None = None,
) -> list[dict]:
    """Train in place on next-token prediction; returns one record (step, loss) per step.
    `after_step(step)` is called after each step (progress)."""
    if not seqs or min(len(s) for s in seqs) < 2:
        raise ArlError("pretraining needs sequences of at least two tokens")
    opt = make_optimizer(model, config.lr)
    gen = torch.Generator().manual_seed(config.seed)
    model.train()
    history = []
    for step in range(1, config.steps + 1):
        idx = torch.randint(len(seqs), (config.batch_size,), generator=gen).tolist()
        x, y = pad_batch([seqs[i] for i in idx])
        loss = lm_loss(model, x, y)
        value, _ = optimizer_step(model, opt, loss, config.grad_clip, f"pretrain step {step}")
        history.append({"step": step, "loss": value})
        if after_step is not None:
            after_step(step)
    return history

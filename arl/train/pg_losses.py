"""The PG trainer's token losses behind one seam: a loss is chosen by name (PGConfig.loss).

Every loss takes the same LossInputs (one microbatch's tensors) and the run's config, and
returns the microbatch's scalar loss, to backward, and its own statistics, which the trainer
logs without naming them. A new loss is a function and one LOSSES entry; its hyperparameters
are PGConfig fields. The math lives in arl.losses, where tests check it by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from arl.losses import gspo_token_loss, kl_to_reference, ppo_token_loss

PGConfig = Any  # arl.train.pg_config.PGConfig, which imports this module for its names


@dataclass(frozen=True, kw_only=True)
class LossInputs:
    """One microbatch of b episodes as a token loss sees it (T: the batch's padded length)."""

    logp: torch.Tensor  # (b, T) log pi_theta of each target, with its graph
    prox_logp: torch.Tensor  # (b, T) log pi_prox, the ratio's denominator (no graph)
    mu_logp: torch.Tensor  # (b, T) log mu, the sampler's, for the truncated IS weight
    adv: torch.Tensor  # (b,) each episode's advantage, or (b, T) each token's (a teacher's)
    mask: torch.Tensor  # (b, T) 1.0 on the policy's action tokens
    weights: torch.Tensor  # (b, T) each token's aggregation weight, normalized over the step
    entropy: torch.Tensor  # (b, T) the policy's entropy at each token, with its graph
    entropy_coef: float = 0.0  # the entropy bonus now (a target-entropy controller moves it)
    ref_logp: torch.Tensor | None = None  # (b, T) the KL reference's (None: no KL in the loss)


# (inputs, config) -> (scalar loss, {stat: its sum over the microbatch's policy tokens})
LossFn = Callable[[LossInputs, PGConfig], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class PGLoss:
    """A registered loss: its function and the statistics it returns.

    Each statistic is a sum over the microbatch's policy tokens (a count, for a fraction); the
    trainer divides the step's total by its policy tokens. A step logs the mean over its first
    pass (each episode once, against the fixed pi_prox) or, for `every_update`, over every
    update of the step (a clip fraction grows as the policy moves away from pi_prox)."""

    fn: LossFn
    stats: tuple[str, ...]  # the names fn returns, in the order they are logged
    every_update: tuple[str, ...] = ()  # those averaged over every update, not the first pass


def token_counts(inputs: LossInputs, **flags_BT: torch.Tensor) -> dict[str, float]:
    """{name: how many policy tokens a bool (b, T) flag marks}."""
    on = inputs.mask.bool()  # (b, T)
    return {name: float(f[on].sum()) for name, f in flags_BT.items()}


def ppo(inputs: LossInputs, config: PGConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO/GRPO's clipped token surrogate, importance-weighted against the sampler
    (arl.losses.ppo_token_loss): clip_frac, the tokens whose clipped branch is active;
    capped_frac, those whose weight min(pi_prox / mu, C) hit C."""
    tok, clipped, capped = ppo_token_loss(
        inputs.logp,
        inputs.prox_logp,
        inputs.mu_logp,
        inputs.adv,
        clip=config.clip,
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        is_correction=config.is_correction,
        is_cap=config.is_cap,
        ref_logp_BT=inputs.ref_logp,
        kl=config.kl,
        kl_beta=config.kl_beta,
        entropy_BT=inputs.entropy,
        entropy_coef=inputs.entropy_coef,
    )
    loss = (inputs.weights * tok).sum()
    return loss, token_counts(inputs, clip_frac=clipped, capped_frac=capped)


def gspo(inputs: LossInputs, config: PGConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO's sequence-level clipped surrogate (arl.losses.gspo_token_loss), clipped at
    1 - gspo_clip_low and 1 + gspo_clip_high: clip_frac, the tokens of episodes whose clipped
    branch is active; capped_frac as ppo's."""
    tok, clipped, capped = gspo_token_loss(
        inputs.logp,
        inputs.prox_logp,
        inputs.mu_logp,
        inputs.adv,
        inputs.mask,
        clip=config.clip,
        clip_low=config.gspo_clip_low,
        clip_high=config.gspo_clip_high,
        is_correction=config.is_correction,
        is_cap=config.is_cap,
        ref_logp_BT=inputs.ref_logp,
        kl=config.kl,
        kl_beta=config.kl_beta,
        entropy_BT=inputs.entropy,
        entropy_coef=inputs.entropy_coef,
    )
    loss = (inputs.weights * tok).sum()
    return loss, token_counts(inputs, clip_frac=clipped, capped_frac=capped)


def kl_part(inputs: LossInputs, config: PGConfig) -> torch.Tensor:
    """The KL term every loss adds (arl.losses.regularized's beta * KL_t), weighted as the loss
    weighs its tokens: the scalar whose gradient is the penalty's (Problem 6 measures it apart
    from the policy gradient's). 0 without a reference in the loss."""
    if inputs.ref_logp is None:
        return inputs.logp.new_zeros(())
    kl_BT = kl_to_reference(inputs.logp, inputs.ref_logp, config.kl)  # (b, T)
    return (inputs.weights * config.kl_beta * kl_BT).sum()


LOSSES: dict[str, PGLoss] = {
    "ppo": PGLoss(ppo, ("clip_frac", "capped_frac"), every_update=("clip_frac",)),
    "gspo": PGLoss(gspo, ("clip_frac", "capped_frac"), every_update=("clip_frac",)),
}

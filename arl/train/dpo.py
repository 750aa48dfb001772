"""DPO for agent trajectories (Section 15.4): offline pairs, masked summed log-probs.

The environment's terms cancel in the policy/reference ratio, so each log-ratio
is a sum over action tokens only (`episode_logp`). Full-batch steps on fixed
pairs; an optional NLL term on the chosen episodes (Iterative RPO) anchors them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from arl.batch import collate
from arl.checks import check
from arl.data import pairs_by_task
from arl.errors import ArlError
from arl.logging_bridge import Sink, log_record
from arl.losses import dpo_loss, episode_logp, sft_loss, token_logprobs
from arl.model import TinyAgent
from arl.train.common import Hook, frozen_logprobs, hook_due, make_optimizer, optimizer_step
from arl.types import Trajectory

Pair = tuple[Trajectory, Trajectory]  # (chosen, rejected), same task


@dataclass(frozen=True)
class DPOConfig:
    """Offline DPO. Defaults: beta 0.1, full-batch AdamW steps, no NLL term."""

    steps: int = 100  # full-batch optimizer steps
    beta: float = 0.1  # inverse temperature of the implicit reward
    lr: float = 1e-3  # AdamW learning rate
    nll_weight: float = 0.0  # weight of the NLL term on chosen episodes (1.0: DPO + NLL)
    grad_clip: float = 1.0  # max global gradient norm (0: off)

    def __post_init__(self) -> None:
        check("steps", self.steps, 0, 10_000_000, integer=True)
        check("beta", self.beta, 0, 1e6, open_lo=True)
        check("lr", self.lr, 0, 1.0, open_lo=True)
        check("nll_weight", self.nll_weight, 0, 1e6)
        check("grad_clip", self.grad_clip, 0, 1e6)


def build_pairs(trajs: Sequence[Trajectory], rng: random.Random) -> list[Pair]:
    """Pair every success with a random failure on the same task (tasks without both: none)."""
    return pairs_by_task(trajs, [tr.passed for tr in trajs], rng)


def dpo_train(
    model: TinyAgent,
    reference: TinyAgent,
    pairs: Sequence[Pair],
    config: DPOConfig = DPOConfig(),
    hook: Hook | None = None,
    hook_every: int = 25,
    sink: Sink | None = None,
    preference: bool = True,
) -> list[dict]:
    """Train in place on all pairs every step; log the change of chosen/rejected log-probs
    (and each step's loss and lr), in the history and to `sink` (--report-to).

    preference=False leaves the DPO term out: only the NLL term on the chosen episodes trains
    (SFT on the chosen episodes, the control that separates DPO's share from the NLL's)."""
    if not pairs:
        raise ArlError("DPO needs at least one (chosen, rejected) pair")
    if not preference and not config.nll_weight:
        raise ArlError("DPO without its preference term needs nll_weight > 0: nothing to train")
    chosen, rejected = [c for c, _ in pairs], [r for _, r in pairs]
    batch = collate(chosen + rejected)
    P = len(pairs)
    ref = episode_logp(frozen_logprobs(reference, batch), batch.action_mask)  # (2P,)
    opt = make_optimizer(model, config.lr)
    history: list[dict] = []
    for step in range(config.steps + 1):
        model.train()
        logp = token_logprobs(model, batch)  # (2P, T)
        seq = episode_logp(logp, batch.action_mask)  # (2P,)
        delta = (seq - ref).detach()
        record = {
            "step": step,
            "chosen_delta": float(delta[:P].mean()),  # nats vs the reference, mean over pairs
            "rejected_delta": float(delta[P:].mean()),
            "reward_accuracy": float((delta[:P] > delta[P:]).float().mean()),
        }
        if hook is not None and hook_due(step, hook_every, config.steps):
            record |= hook(step, model) or {}
        if step == config.steps:
            history.append(record)
            log_record(sink, record)
            break
        if preference:
            loss = dpo_loss(seq[:P], seq[P:], ref[:P], ref[P:], config.beta)
            if config.nll_weight:
                loss = loss + config.nll_weight * sft_loss(logp[:P], batch.action_mask[:P])
        else:  # the NLL term alone
            loss = config.nll_weight * sft_loss(logp[:P], batch.action_mask[:P])
        where = f"DPO step {step + 1}"
        record["lr"] = float(opt.param_groups[0]["lr"])
        record["loss"], _ = optimizer_step(model, opt, loss, config.grad_clip, where)
        history.append(record)
        log_record(sink, record)
    return history

"""What every recipe's loop shares: the hook type, the optimizer, one checked optimizer step,
and the log-probs of a frozen model. A recipe file keeps only its data source and its weight.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from arl.batch import Batch
from arl.errors import Diverged
from arl.losses import token_logprobs
from arl.model import TinyAgent

Hook = Callable[[int, TinyAgent], dict | None]  # (step, model) -> metrics to log, or None


def hook_due(step: int, every: int, last: int) -> bool:
    """A hook runs at step 0, every `every` steps and after the last step (every 0: never)."""
    return bool(every) and (step % every == 0 or step == last)


def make_optimizer(
    model: TinyAgent,
    lr: float,
    weight_decay: float = 0.0,
    fused: bool = True,
    betas: tuple[float, float] = (0.9, 0.999),
):
    """AdamW; fused (one kernel for all parameters, not a dozen ops per tensor) where torch can.

    Fused took an SFT step's optimizer update from 7 ms to 0.7 ms on two cores (about 5% of
    the step). Torch before 2.4 has no fused AdamW on CPU: the plain one then. The PG trainer
    asks for the plain one (fused=False): its logged runs were made with it, and fused Adam
    rounds differently.
    """
    params = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters only
    if fused:
        try:
            return torch.optim.AdamW(
                params, lr=lr, weight_decay=weight_decay, betas=betas, fused=True
            )
        except (RuntimeError, TypeError):
            pass
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)


def clip_and_check(model: TinyAgent, loss: float, max_norm: float, where: str) -> float:
    """Clip the gradient (max_norm 0: measure only) and return its norm; raise Diverged, before
    any optimizer step, when the loss or the norm is NaN or infinite."""
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm:
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    else:  # the same norm, without touching the gradients
        norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
    if not (math.isfinite(loss) and math.isfinite(norm)):
        raise Diverged(
            f"{where}: loss {loss:g}, gradient norm {norm:g}; stopped before the optimizer step"
        )
    return norm


def optimizer_step(
    model: TinyAgent,
    opt: torch.optim.Optimizer,
    loss: torch.Tensor | Callable[[], float],
    max_norm: float,
    where: str,
) -> tuple[float, float]:
    """zero_grad, backward, clip, check, step: the one optimizer step of every recipe.

    `loss` is a scalar tensor, or a function that runs the backward passes itself (accumulated
    microbatches) and returns the loss. Returns (loss, gradient norm).
    """
    opt.zero_grad(set_to_none=True)
    if isinstance(loss, torch.Tensor):
        loss.backward()
        value = float(loss.detach())
    else:
        value = loss()
    norm = clip_and_check(model, value, max_norm, where)
    opt.step()
    return value, norm


def reference_of(model: TinyAgent):
    """A frozen reference of the policy as it is now (DPO's, PG's KL): a copy in eval mode;
    for a LoRA policy the same model with its adapters disabled (arl.hf.lora.AdapterOff: the
    base, no second copy)."""
    if getattr(model, "is_lora", False):
        from arl.hf.lora import AdapterOff

        return AdapterOff(model)
    return copy.deepcopy(model).eval()


@torch.no_grad()
def frozen_logprobs(model: TinyAgent, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
    """Log-probs (B, T), in eval mode, of weights not being stepped (a reference, pi_prox)."""
    was = model.training
    model.eval()
    logp = token_logprobs(model, batch, temperature=temperature)
    model.train(was)
    return logp

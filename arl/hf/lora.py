"""LoRA on a real model, through peft: `--lora-rank R [--lora-alpha A] [--lora-targets M,...]`.

`add_lora(policy, rank)` wraps an HFPolicy's model with peft's `get_peft_model(LoraConfig)`:
the base weights are frozen and only the adapters' A and B matrices train (B starts at zero,
so the adapted model starts as the base). Saving writes peft's adapter folder
(`adapter_config.json`, `adapter_model.safetensors`) with the tokenizer and arl's files beside
it (HFPolicy.save); `load_hf` on such a folder loads the base its adapter_config names and the
adapter on it, trainable (`arl eval --model ADAPTER`, `arl train ... --model ADAPTER`).

A recipe's frozen reference (DPO's, PG's KL) on a LoRA policy is `AdapterOff`: the same model
with its adapters disabled (peft's `disable_adapter()`), the base, not a second copy.
`merge_adapter` writes the merged full model (peft's `merge_and_unload`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

from arl.errors import ArlError
from arl.hf.adapters import ADAPTER_CONFIG, is_adapter, quiet_peft, require_peft

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # the attention projections
ALL_LINEAR = "all-linear"  # peft's shorthand: every Linear but the output head


def parse_targets(text: str | None) -> tuple[str, ...]:
    """`q_proj,v_proj` -> ("q_proj", "v_proj"); None -> DEFAULT_TARGETS."""
    if text is None:
        return DEFAULT_TARGETS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ArlError(f"--lora-targets {text!r}: name at least one module (e.g. q_proj,v_proj)")
    return names


def is_lora(policy) -> bool:
    """A policy whose weights carry peft adapters (HFPolicy.is_lora; TinyAgent: never)."""
    return bool(getattr(policy, "is_lora", False))


def check_lora(
    rank: int, alpha: float | None, targets: str | None, model: str | None, init: str | None = None
) -> None:
    """The --lora-* flags, before any folder is claimed or model loaded: one line each."""
    if rank is None or rank == 0:
        if alpha is not None or targets is not None:
            flag = "--lora-alpha" if alpha is not None else "--lora-targets"
            raise ArlError(f"{flag} goes with --lora-rank R (R > 0)")
        return
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ArlError(f"--lora-rank: expected an integer >= 0, got {rank!r}")
    if not model:
        raise ArlError(
            "--lora-rank goes with --model (a transformers model); TinyAgent"
            + (f" ({init})" if init else "")
            + " trains in full"
        )
    if alpha is not None and not (math.isfinite(alpha) and alpha > 0):
        raise ArlError(f"--lora-alpha: expected a finite number > 0, got {alpha!r}")
    parse_targets(targets)
    if is_adapter(model):
        raise ArlError(
            f"--model {model} is a LoRA adapter already: it trains on as saved; drop "
            "--lora-rank (or merge it first: arl.hf.lora.merge_adapter)"
        )
    require_peft()


def linear_names(model: nn.Module) -> set[str]:
    """The last name component of every Linear module (what peft's target_modules match)."""
    return {
        name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)
    }


def add_lora(
    policy,
    rank: int,
    alpha: float | None = None,
    targets: Sequence[str] | str = DEFAULT_TARGETS,
):
    """Wrap `policy.model` (an HFPolicy's) in peft's LoRA: rank `rank`, scale alpha / rank
    (alpha 2 * rank by default), on the Linear modules named `targets` (or "all-linear").
    Only the adapters train. Returns the policy, changed in place."""
    peft = require_peft()
    if not hasattr(policy, "renderer"):
        raise ArlError("LoRA goes with a transformers model (--model); TinyAgent trains in full")
    if rank < 1:
        raise ArlError(f"--lora-rank: expected an integer >= 1 here, got {rank}")
    if is_lora(policy):
        raise ArlError("the model carries LoRA adapters already")
    alpha = float(alpha) if alpha is not None else 2.0 * rank
    if not (math.isfinite(alpha) and alpha > 0):
        raise ArlError(f"--lora-alpha: expected a finite number > 0, got {alpha!r}")
    targets = parse_targets(targets) if isinstance(targets, str) else tuple(targets)
    base = policy.model
    if targets != (ALL_LINEAR,):
        have = linear_names(base)
        missing = [t for t in targets if t not in have]
        if missing:
            raise ArlError(
                f"--lora-targets: {type(base).__name__} has no Linear module named "
                f"{missing[0]!r} (its Linear modules: {', '.join(sorted(have))})"
            )
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=ALL_LINEAR if targets == (ALL_LINEAR,) else list(targets),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    source = getattr(base, "name_or_path", None) or getattr(base.config, "_name_or_path", "")
    with quiet_peft():
        policy.model = peft.get_peft_model(base, config)
    if source and Path(source).expanduser().is_dir():  # reloadable from any working folder
        policy.model.peft_config["default"].base_model_name_or_path = str(
            Path(source).expanduser().resolve()
        )
    return policy


def trainable_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lora_note(policy) -> str:
    """' (LoRA rank R: N trainable)' for a LoRA policy's header line, '' otherwise."""
    if not is_lora(policy):
        return ""
    rank = policy.model.peft_config["default"].r
    return f" (LoRA rank {rank}: {trainable_params(policy):,} trainable)"


class AdapterOff:
    """A LoRA policy's base as a frozen reference: the policy's own model with its adapters
    disabled for the forward pass (peft's `disable_adapter()`), in eval mode and without
    gradients. No second copy of the weights: its state_dict is empty, so a checkpoint's
    trainer state does not carry the model twice. For a fresh adapter (B = 0) the base is the
    starting policy; for an adapter trained on from a saved one, it is still the base."""

    training = False

    def __init__(self, policy) -> None:
        if not is_lora(policy):
            raise ArlError("AdapterOff needs a policy with LoRA adapters")
        self.policy = policy

    @property
    def config(self):
        return self.policy.config

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.policy.parameters()

    def eval(self) -> AdapterOff:
        return self

    def train(self, mode: bool = True) -> AdapterOff:
        return self

    def state_dict(self) -> dict:
        return {}

    def __call__(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        was = self.policy.training
        self.policy.eval()
        try:
            with torch.no_grad(), self.policy.model.disable_adapter():
                return self.policy(idx, targets)
        finally:
            self.policy.train(was)


def merge_adapter(adapter: str | Path, out: str | Path, dtype: str = "float32") -> Path:
    """Write the adapter folder `adapter` merged into its base (peft's merge_and_unload) as a
    full `from_pretrained` folder `out`, with its tokenizer and chat settings (HFPolicy.save)."""
    from arl.hf.policy import load_hf

    if not is_adapter(adapter):
        raise ArlError(f"{adapter}: not a LoRA adapter folder (no {ADAPTER_CONFIG})")
    policy = load_hf(str(adapter), dtype=dtype)
    with quiet_peft():
        policy.model = policy.model.merge_and_unload()
    return policy.save(out)

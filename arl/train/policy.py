"""The starting policy of any command: `load_policy(spec)` with spec one of cold (the RL cold
start), weak (the weak base), untrained (a seeded random TinyAgent), or a checkpoint directory,
each for one environment (its vocabulary; BugFix by default); `load_any` adds a real model
(`--model PATH_OR_ID`, arl.hf); arl.train.checkpoint's `save_policy` writes either.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from arl.env import NAMES
from arl.errors import ArlError
from arl.model import TinyAgent
from arl.rollout import vocab_of
from arl.train import bases
from arl.train.bases import BaseConfig
from arl.train.checkpoint import load_checkpoint_dir

INITS = ("cold", "weak", "untrained")


def looks_like_path(spec: str) -> bool:
    """A spec meant as a folder: it has a separator, starts with . or ~, or exists."""
    return spec.startswith((".", "/", "~")) or os.sep in spec or Path(spec).exists()


def check_policy_spec(spec: str) -> None:
    """Refuse a spec that names nothing, before any folder is claimed or model built."""
    path = Path(os.path.expanduser(spec))
    if spec in INITS or path.is_dir():
        return
    if path.exists():
        raise ArlError(
            f"{spec!r} is a file, not a checkpoint directory (choose from "
            f"{', '.join(INITS)}, or a checkpoint)"
        )
    what = "no such checkpoint directory" if looks_like_path(spec) else "unknown policy"
    raise ArlError(f"{what} {spec!r} (choose from {', '.join(INITS)}, or a checkpoint)")


def check_vocab(model: TinyAgent, spec: str, env: str = "bugfix") -> TinyAgent:
    """A loaded policy must speak the environment's vocabulary, or every token id means
    something else."""
    size = len(vocab_of(env))
    if model.config.vocab_size != size:
        other = [n for n in NAMES if n != env and len(vocab_of(n)) == model.config.vocab_size]
        hint = f" (it speaks {other[0]}'s: --env {other[0]})" if other else ""
        raise ArlError(
            f"checkpoint {spec}: vocabulary size {model.config.vocab_size} "
            f"does not match the {env} environment's {size}{hint}"
        )
    return model


def load_policy_dir(spec: str, env: str = "bugfix") -> TinyAgent:
    """A checkpoint directory (or a one-line reason why not) in the environment's vocabulary."""
    return check_vocab(load_checkpoint_dir(spec), spec, env)


def load_policy(spec: str, seed: int = 0, env: str = "bugfix") -> TinyAgent:
    """cold / weak (cached on disk, built on first use), untrained, or a checkpoint directory,
    for the environment `env`."""
    if spec == "cold":
        return bases.cold_start(BaseConfig(seed=seed), env)
    if spec == "weak":
        return bases.weak_base(BaseConfig(seed=seed), env)
    if spec == "untrained":
        return bases.new_model(BaseConfig(seed=seed), env)
    check_policy_spec(spec)
    return load_policy_dir(spec, env)


def load_any(
    init: str | None,
    model: str | None = None,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    env: str = "bugfix",
    **chat: Any,
):
    """A `transformers` causal LM if `model` is given (arl.hf; `chat`: load_hf's tool_format
    and turn_end), else `load_policy(init)`."""
    if model:
        from arl.hf.policy import load_hf

        return load_hf(model, device=device, dtype=dtype, **chat)
    if chat.get("tool_format") not in (None, "words") or chat.get("turn_end"):
        raise ArlError("--tool-format and --turn-end go with --model (TinyAgent speaks words)")
    if dtype != "float32":
        raise ArlError(f"--dtype {dtype}: TinyAgent trains in float32 (use --model for bf16)")
    from arl.hf.policy import check_device  # imports torch only; transformers lazily

    check_device(device)
    return load_policy(init or "weak", seed, env).to(device)

"""The starting policy of any command: `load_policy(spec)` with spec one of cold (the RL cold
start), weak (the weak base), untrained (a seeded random TinyAgent), or a checkpoint directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from arl.errors import ArlError
from arl.experiments import bases
from arl.experiments.bases import BaseConfig
from arl.model import TinyAgent, load_checkpoint
from arl.text import default_vocab

INITS = ("cold", "weak", "untrained")


def looks_like_path(spec: str) -> bool:
    """A spec meant as a folder: it has a separator, starts with . or ~, or exists."""
    return spec.startswith((".", "/", "~")) or os.sep in spec or Path(spec).exists()


def check_policy_spec(spec: str) -> None:
    """Refuse a spec that names nothing, before any folder is claimed or model built."""
    if spec in INITS or Path(os.path.expanduser(spec)).exists():
        return
    what = "no such checkpoint directory" if looks_like_path(spec) else "unknown policy"
    raise ArlError(f"{what} {spec!r} (choose from {', '.join(INITS)}, or a checkpoint)")


def check_vocab(model: TinyAgent, spec: str) -> TinyAgent:
    """A loaded policy must speak the gym's vocabulary, or every token id means something else."""
    if model.config.vocab_size != len(default_vocab()):
        raise ArlError(
            f"checkpoint {spec}: vocabulary size {model.config.vocab_size} "
            f"does not match the gym's {len(default_vocab())}"
        )
    return model


def load_policy_dir(spec: str) -> TinyAgent:
    """A checkpoint directory, or a one-line reason: missing, or a run folder (say its newest)."""
    path = Path(os.path.expanduser(spec))
    if not path.exists():
        raise ArlError(f"{spec}: no such checkpoint directory (from {Path.cwd()})")
    if path.is_dir() and not (path / "config.json").is_file():
        ckpts = sorted(p for p in path.glob("ckpt-*") if (p / "config.json").is_file())
        if ckpts:
            raise ArlError(f"{spec} is a run folder; its newest checkpoint is {ckpts[-1]}")
        raise ArlError(f"{spec}: not a checkpoint (no config.json and model.safetensors)")
    return check_vocab(load_checkpoint(path), spec)


def load_policy(spec: str, seed: int = 0) -> TinyAgent:
    """cold / weak (cached on disk, built on first use), untrained, or a checkpoint directory."""
    if spec == "cold":
        return bases.cold_start(BaseConfig(seed=seed))
    if spec == "weak":
        return bases.weak_base(BaseConfig(seed=seed))
    if spec == "untrained":
        return bases.new_model(BaseConfig(seed=seed))
    check_policy_spec(spec)
    return load_policy_dir(spec)

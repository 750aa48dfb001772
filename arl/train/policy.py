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
from arl.train.checkpoint import load_checkpoint_dir, read_meta

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


def _digest(name: str) -> str | None:
    """The vocabulary digest of a registered environment, or None where it does not load."""
    try:
        return vocab_of(name).digest()
    except ArlError:
        return None


def speakers(digest: str) -> list[str]:
    """The registered environments whose vocabulary has this digest."""
    return [n for n in NAMES if _digest(n) == digest]


def recorded_env(meta: dict) -> str | None:
    """The environment a checkpoint's config.json records: its `env` where registered (and its
    vocabulary the one recorded beside it), else the one registered environment whose
    vocabulary's digest is the recorded `vocab`; None when neither names exactly one."""
    name, digest = meta.get("env"), meta.get("vocab")
    digest = digest if isinstance(digest, str) else None
    if isinstance(name, str) and name in NAMES and digest in (None, _digest(name)):
        return name
    matching = speakers(digest) if digest is not None else []
    return matching[0] if len(matching) == 1 else None


def check_vocab(
    model: TinyAgent, spec: str, env: str = "bugfix", digest: str | None = None
) -> TinyAgent:
    """A loaded policy must speak the environment's vocabulary, or every token id means
    something else: its size, and the words themselves where the checkpoint recorded their
    digest (`vocab`, arl.rollout.vocab_record; older checkpoints hold the size alone)."""
    size = len(vocab_of(env))
    if model.config.vocab_size != size:
        other = speakers(digest) if digest is not None else []
        other = other or [
            n for n in NAMES if n != env and len(vocab_of(n)) == model.config.vocab_size
        ]
        hint = f" (it speaks {other[0]}'s: --env {other[0]})" if other else ""
        raise ArlError(
            f"checkpoint {spec}: vocabulary size {model.config.vocab_size} "
            f"does not match the {env} environment's {size}{hint}"
        )
    if digest is not None and digest != vocab_of(env).digest():
        other = speakers(digest)
        hint = f" (it speaks {other[0]}'s: --env {other[0]})" if other else ""
        raise ArlError(
            f"checkpoint {spec}: its vocabulary is not the {env} environment's (the same size, "
            f"{size}, other words){hint}"
        )
    return model


def load_policy_dir(spec: str, env: str | None = "bugfix") -> TinyAgent:
    """A checkpoint directory (or a one-line reason why not) in the environment's vocabulary;
    env None: the environment the checkpoint records (recorded_env), else a one-line error
    asking for --env."""
    model = load_checkpoint_dir(spec)
    meta = read_meta(Path(os.path.expanduser(spec)))
    if env is None:
        env = recorded_env(meta)
        if env is None:
            raise ArlError(
                f"checkpoint {spec} records no environment arl knows: name it with --env "
                f"({', '.join(NAMES)})"
            )
    digest = meta.get("vocab")
    return check_vocab(model, spec, env, digest if isinstance(digest, str) else None)


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

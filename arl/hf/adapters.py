"""peft's adapter folders, below HFPolicy: recognize one, load it on its base, keep peft quiet.

A leaf of arl.hf (errors and arl.hf.deps only), so arl.hf.policy can load an adapter folder
and arl.hf.lora (which builds on HFPolicy) can train one without an import circle.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from arl.errors import ArlError, require
from arl.hf.deps import require_transformers

ADAPTER_CONFIG = "adapter_config.json"  # what makes a folder a peft adapter


def require_peft(what: str = "--lora-rank"):
    """The peft module, or a one-line error naming the extra that installs it."""
    return require("peft", what)


@contextmanager
def quiet_peft() -> Iterator[None]:
    """peft 0.21 on transformers 5 warns that `is_gradient_checkpointing` is deprecated each
    time it wraps, loads or saves a model: not the user's to act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
        yield


def is_adapter(path_or_id: str | Path | None) -> bool:
    """A local folder holding a peft adapter (adapter_config.json)."""
    return bool(path_or_id) and (Path(str(path_or_id)).expanduser() / ADAPTER_CONFIG).is_file()


def load_adapter_model(path: str, dtype: torch.dtype):
    """The base model an adapter folder's adapter_config.json names, with the adapter loaded
    on it (trainable: a run on it trains the adapter on). One line when either fails."""
    tf = require_transformers()
    peft = require_peft(f"--model {path} (a LoRA adapter)")
    try:
        config = peft.PeftConfig.from_pretrained(path)
    except (OSError, ValueError, TypeError) as e:
        raise ArlError(f"--model {path}: {ADAPTER_CONFIG}: {str(e).splitlines()[0]}") from e
    base = config.base_model_name_or_path
    if not base:
        raise ArlError(f"--model {path}: {ADAPTER_CONFIG} names no base model")
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    except (OSError, ValueError) as e:
        raise ArlError(f"--model {path}: its base model {base}: {str(e).splitlines()[0]}") from e
    try:
        with quiet_peft():
            return peft.PeftModel.from_pretrained(model, path, is_trainable=True)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ArlError(f"--model {path}: the adapter: {str(e).splitlines()[0]}") from e

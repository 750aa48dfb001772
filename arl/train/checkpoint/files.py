"""Checkpoint files: a TinyAgent's folder (model.safetensors, and config.json with the format
version, the model config, the sha256 of every tensor and a digest of every field), or a real
model's `from_pretrained` folder with arl.json beside it. Written atomically, checked on load.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, fields
from pathlib import Path

import torch

from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig
from arl.runio import atomic_write_bytes, atomic_write_json, read_json

# --- the model: config.json and model.safetensors -------------------------------------------

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT, FORMAT_VERSION = "arl.tinyagent", 2  # version 2: a sha256 of every tensor and field
EXTRA_FILE = "arl.json"  # beside a real model's weights: what arl adds to from_pretrained's files


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of a tensor's raw bytes (any dtype): a flipped bit anywhere changes it."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def meta_digests(meta: dict) -> dict[str, str]:
    """A short sha256 of each metadata field (each config field apart), so an edit is named."""
    flat = {}
    for key, value in meta.items():
        if key == "digests":
            continue
        if key == "config" and isinstance(value, dict):
            flat |= {f"config.{k}": v for k, v in value.items()}
        else:
            flat[key] = value
    return {
        k: hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:16]
        for k, v in flat.items()
    }


def _weights(model: TinyAgent) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint stores (wte is tied to lm_head and stored once)."""
    return {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "wte.weight"}


def nonfinite_tensor(state: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating tensor holding a NaN or an infinity, or None."""
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def save_checkpoint(model: TinyAgent, path: str | Path, extra: dict | None = None) -> Path:
    """Write config.json and model.safetensors under `path`, each via temp file, fsync, rename.

    config.json holds the format, the full model config, a sha256 of every tensor and a
    digest of every field; weights with a NaN or an infinity are refused, not saved.
    """
    from safetensors.torch import save

    path = Path(path)
    state = _weights(model)
    bad = nonfinite_tensor(state)
    if bad is not None:
        raise ArlError(f"checkpoint {path}: refusing to save non-finite weights ({bad})")
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": asdict(model.config),
        **(extra or {}),
        "tensors": {k: tensor_sha256(v) for k, v in state.items()},
    }
    meta["digests"] = meta_digests(meta)
    atomic_write_bytes(path / WEIGHTS_FILE, save(state))
    atomic_write_json(path / CONFIG_FILE, meta)
    return path


def read_meta(path: str | Path) -> dict:
    """A checkpoint's config.json, checked: format, version and the digest of every field."""
    path = Path(path)
    try:
        meta = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except OSError as e:
        raise ArlError(f"checkpoint {path}: cannot read {CONFIG_FILE} ({e.strerror})") from None
    except (ValueError, RecursionError) as e:  # bad JSON, bad UTF-8, absurd nesting
        raise ArlError(f"checkpoint {path}: corrupt {CONFIG_FILE} ({type(e).__name__})") from None
    if not isinstance(meta, dict):
        raise ArlError(f"checkpoint {path}: corrupt {CONFIG_FILE} (not a JSON object)")
    if meta.get("format") != FORMAT:
        raise ArlError(f"checkpoint {path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ArlError(
            f"checkpoint {path}: format version {meta.get('format_version')!r}, this arl reads "
            f"{FORMAT_VERSION} (older checkpoints carry no checksums: re-create it)"
        )
    stored = meta.get("digests")
    if not isinstance(stored, dict):
        raise ArlError(f"checkpoint {path}: corrupt {CONFIG_FILE} (no digests)")
    now = meta_digests(meta)
    changed = sorted(k for k in stored.keys() | now.keys() if stored.get(k) != now.get(k))
    if changed:
        raise ArlError(
            f"checkpoint {path}: {CONFIG_FILE} changed after saving: {', '.join(changed[:3])}"
        )
    return meta


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> TinyAgent:
    """Load a checkpoint directory; a corrupt, edited, truncated or mismatched file is an ArlError.

    Checked in order: the format and its version, the digest of every config field, the
    safetensors file, the sha256 of every tensor, the shapes against the config, finiteness.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(path)
    if not path.is_dir():
        raise ArlError(f"checkpoint {path}: not a directory")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (path / name).is_file():
            raise ArlError(f"checkpoint {path}: missing {name}")
    meta = read_meta(path)
    known = {f.name for f in fields(TinyAgentConfig)}
    raw = meta.get("config")
    if not isinstance(raw, dict) or set(raw) - known:
        raise ArlError(f"checkpoint {path}: corrupt {CONFIG_FILE} (config fields)")
    try:
        config = TinyAgentConfig(**raw)
    except TypeError as e:
        raise ArlError(f"checkpoint {path}: corrupt {CONFIG_FILE} ({e})") from None
    try:
        state = load((path / WEIGHTS_FILE).read_bytes())
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise ArlError(f"checkpoint {path}: corrupt {WEIGHTS_FILE} ({e})") from None
    sums = meta.get("tensors")
    if not isinstance(sums, dict) or set(sums) != set(state):
        raise ArlError(f"checkpoint {path}: corrupt {WEIGHTS_FILE} (tensor names differ)")
    for name, t in state.items():
        if tensor_sha256(t) != sums[name]:
            raise ArlError(f"checkpoint {path}: corrupt {WEIGHTS_FILE} ({name}: checksum differs)")
    model = TinyAgent(config)
    expected = {k: v.shape for k, v in _weights(model).items()}
    got = {k: v.shape for k, v in state.items()}
    if expected != got:
        bad = sorted(set(expected) ^ set(got)) or [k for k in expected if expected[k] != got[k]]
        raise ArlError(f"checkpoint {path}: weights do not match config (e.g. {bad[0]})")
    bad = nonfinite_tensor(state)
    if bad is not None:
        raise ArlError(f"checkpoint {path}: non-finite weights in {bad}")
    model.load_state_dict(state, strict=False)
    return model.to(map_location)


def load_checkpoint_dir(spec: str) -> TinyAgent:
    """A checkpoint directory a user named, or a one-line reason: missing, or a run folder (say
    its newest checkpoint)."""
    path = Path(os.path.expanduser(spec))
    if not path.exists():
        raise ArlError(f"{spec}: no such checkpoint directory (from {Path.cwd()})")
    if path.is_dir() and not (path / CONFIG_FILE).is_file():
        ckpts = sorted(p for p in path.glob("ckpt-*") if (p / CONFIG_FILE).is_file())
        if ckpts:
            raise ArlError(f"{spec} is a run folder; its newest checkpoint is {ckpts[-1]}")
        raise ArlError(f"{spec}: not a checkpoint (no config.json and model.safetensors)")
    return load_checkpoint(path)


# --- any policy: a TinyAgent checkpoint, or a real model's folder with arl.json -------------


def save_policy(model, path: str | Path, extra: dict | None = None) -> Path:
    """A TinyAgent checkpoint (save_checkpoint), or a real model's `from_pretrained` folder with
    `extra` in arl.json beside it."""
    if isinstance(model, TinyAgent):
        return save_checkpoint(model, path, extra=extra)
    path = Path(path)
    model.save(path)
    atomic_write_json(path / EXTRA_FILE, extra or {})
    return path


def checkpoint_extra(path: str | Path) -> dict:
    """What `save_policy` stored beside the weights (TinyAgent: its checked config.json)."""
    path = Path(path)
    if (path / EXTRA_FILE).is_file():
        return read_json(path / EXTRA_FILE)
    return read_meta(path)

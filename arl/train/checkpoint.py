"""Checkpoints, every kind in one place: written atomically, checksummed, never pickle.

A checkpoint is a folder: model.safetensors (TinyAgent's weights) and config.json (format
version 2: the model config, what the saver adds, the sha256 of every tensor, a digest of every
field). A PG run's out/ckpt-STEP adds trainer_state.pt (optimizer, RNGs, reference, staleness
queue, cooldowns, entropy coefficient, the config), its sha256 in config.json; resume refuses a
changed config. A real model (arl.hf) is its `from_pretrained` folder with arl.json beside it.
A corrupt, edited, truncated or non-finite file is refused in one line, never loaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import shutil
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig
from arl.runio import TMP_PREFIX, atomic_write_bytes, atomic_write_json, fsync_dir, read_json
from arl.train.pg_config import PGConfig, flat_dict, flat_saved

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


# --- a PG run's trainer state, beside the model in out/ckpt-STEP ----------------------------

STATE_FILE = "trainer_state.pt"
STATE_KEYS = frozenset(  # what trainer_state.pt holds: a file without one of them is corrupt
    "step optimizer python_rng torch_rng reference queue cooldown entropy_coef config".split()
)
ALWAYS_CHANGEABLE = ("resume", "out")  # resuming, or a run folder that was moved
# What a resume cannot honour: the run's random state continues from the checkpoint.
NEVER_ON_RESUME = {"seed": "the run's random state continues from the checkpoint"}
# The settings a checkpoint holds state for, which restore() sets from the new config when
# they were allowed to change (everything else is read from the config at every step).
REAPPLIED = ("lr", "weight_decay", "entropy_coef", "kl")


@dataclass
class LoopState:
    """What a PG run carries from one step to the next; a checkpoint keeps all of it."""

    opt: torch.optim.Optimizer
    rng: random.Random
    ref: TinyAgent | None  # the KL reference (None: kl off)
    entropy_coef: float
    step: int = 0  # the last step done
    queue: deque[dict[str, torch.Tensor]] = field(default_factory=deque)  # last k+1 weights
    cooldown: dict[str, int] = field(default_factory=dict)  # task -> first step it may be drawn


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints under a run directory, oldest first."""
    done = [p for p in out.glob("ckpt-*") if re.fullmatch(r"ckpt-\d+", p.name)]
    return sorted((p for p in done if (p / STATE_FILE).is_file()), key=lambda p: int(p.name[5:]))


def save(out: Path, model: TinyAgent, s: LoopState, config: PGConfig) -> Path:
    """Checkpoint the run after step s.step (config.keep_checkpoints newest kept)."""
    state = {
        "step": s.step,
        "optimizer": s.opt.state_dict(),
        "python_rng": _from_rng_state(s.rng.getstate()),
        "torch_rng": torch.get_rng_state(),
        "reference": s.ref.state_dict() if s.ref is not None else {},
        "queue": list(s.queue),
        "cooldown": s.cooldown,
        "entropy_coef": s.entropy_coef,
        "config": json.dumps(asdict(config)),
    }
    return save_trainer_checkpoint(out, s.step, model, state, config.keep_checkpoints)


def save_trainer_checkpoint(out: Path, step: int, model: TinyAgent, state: dict, keep: int) -> Path:
    """Write out/ckpt-STEP via a temp directory and one rename; keep the newest `keep`.

    The trainer state's sha256 goes into the checkpoint's config.json beside the tensors'
    checksums; a failed write removes its temp directory and leaves the older checkpoints.
    """
    final = out / f"ckpt-{step:06d}"
    tmp = out / f"{TMP_PREFIX}ckpt-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getvalue()
        atomic_write_bytes(tmp / STATE_FILE, data)
        files = {STATE_FILE: hashlib.sha256(data).hexdigest()}
        save_policy(model, tmp, extra={"kind": "pg", "step": step, "files": files})
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)  # atomic: a crash before this line leaves the last good checkpoint
        fsync_dir(out)
    except OSError as e:
        raise ArlError(f"cannot write checkpoint {final}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_trainer_state(ckpt: Path) -> dict:
    """A checkpoint's trainer_state.pt, checked against the sha256 its config.json holds."""
    meta = checkpoint_extra(ckpt)
    files = meta.get("files")
    want = files.get(STATE_FILE) if isinstance(files, dict) else None
    try:
        data = (ckpt / STATE_FILE).read_bytes()
    except OSError as e:
        raise ArlError(f"checkpoint {ckpt}: cannot read {STATE_FILE} ({e.strerror})") from None
    if want is None or hashlib.sha256(data).hexdigest() != want:
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (checksum differs)")
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # torch raises many types for a damaged file  # noqa: BLE001
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} ({type(e).__name__})") from None
    if not isinstance(state, dict) or not STATE_KEYS <= set(state):
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (missing fields)")
    return state


def config_changes(saved: dict, config: PGConfig) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose value differs between a checkpoint's PGConfig and this run's."""
    old, now = flat_saved(saved), flat_dict(config)
    return {
        k: (old.get(k), now.get(k))
        for k in sorted(old.keys() | now.keys())
        if old.get(k) != now.get(k) and k not in ALWAYS_CHANGEABLE
    }


def resume_state(ckpt: Path, model: TinyAgent, config: PGConfig, allow_change) -> dict:
    """Load the newest checkpoint into `model` and return its trainer state, after checking
    that the model's shape and the PGConfig match it (keys in `allow_change` may differ)."""
    if not isinstance(model, TinyAgent):
        raise ArlError("resume: a run on a real model (--model) does not resume yet; start anew")
    loaded = load_checkpoint(ckpt)  # checksums, format, finiteness
    if loaded.config != model.config:
        a, b = asdict(loaded.config), asdict(model.config)
        diff = ", ".join(f"{k} {a[k]} vs {b[k]}" for k in a if a[k] != b[k])
        raise ArlError(f"resume: {ckpt} holds another model shape than --init ({diff})")
    st = load_trainer_state(ckpt)
    try:
        saved = json.loads(st["config"])
    except (TypeError, ValueError):
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (config)") from None
    if not isinstance(saved, dict):
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (config)")
    every = config_changes(saved, config)
    for key, why in NEVER_ON_RESUME.items():
        if key in every:
            raise ArlError(f"resume: {key} cannot change on a resume ({why}); start a new run")
    changes = {k: v for k, v in every.items() if k not in allow_change}
    if changes:
        shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in list(changes.items())[:3])
        raise ArlError(
            f"resume: the config differs from {ckpt}'s ({shown}); "
            f"--allow-change {','.join(changes)} accepts it"
        )
    tensors = [t for v in st["optimizer"].get("state", {}).values() for t in v.values()]
    if nonfinite_tensor({str(i): t for i, t in enumerate(tensors) if torch.is_tensor(t)}):
        raise ArlError(f"resume: {ckpt}: non-finite optimizer state")
    model.load_state_dict(loaded.state_dict())
    return {**st, "changed": sorted(every)}


def restore(out: Path, model: TinyAgent, s: LoopState, config: PGConfig, allow_change) -> None:
    """Continue from the newest checkpoint in `out`, if there is one: model and loop state."""
    if not checkpoints(out):
        return
    ckpt = checkpoints(out)[-1]
    st = resume_state(ckpt, model, config, allow_change)
    try:
        s.opt.load_state_dict(st["optimizer"])
        s.rng.setstate(_to_rng_state(st["python_rng"]))
        torch.set_rng_state(st["torch_rng"])
        if s.ref is not None:  # a KL switched on at the resume: the reference is this policy
            s.ref.load_state_dict(st["reference"] or model.state_dict())
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        raise ArlError(f"resume: {ckpt}: trainer state does not fit this run ({e})") from None
    for group in s.opt.param_groups:  # what --allow-change admitted takes effect (REAPPLIED)
        group["lr"], group["weight_decay"] = config.lr, config.weight_decay
    s.queue, s.cooldown = deque(st["queue"]), dict(st["cooldown"])
    s.step = st["step"]
    s.entropy_coef = config.entropy_coef if "entropy_coef" in st["changed"] else float(
        st["entropy_coef"]
    )


def last_good(out: Path | None) -> str:
    """'; last good checkpoint: PATH' for a run that stopped, or '' when there is none."""
    done = checkpoints(out) if out is not None else []
    return f"; last good checkpoint: {done[-1]}" if done else ""


def _from_rng_state(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _to_rng_state(saved: Sequence) -> tuple:
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)

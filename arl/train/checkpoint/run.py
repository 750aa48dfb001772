"""A PG run's trainer state in out/ckpt-STEP, beside the model's files: saved with its sha256
in config.json, checked on load, and resumed only under the same config (or the changes the
user allows, which then take effect); a damaged newest checkpoint is refused, naming the last
good one. A real model's run (--model) resumes too: its checkpoint is a from_pretrained folder
(or, with LoRA, peft's adapter folder) whose trained weights' sha256 is in arl.json.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import shutil
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from arl.errors import ArlError
from arl.model import TinyAgent
from arl.rollout import vocab_record
from arl.runio import TMP_PREFIX, atomic_write_bytes, fsync_dir
from arl.train.checkpoint.files import (
    checkpoint_extra,
    load_checkpoint,
    nonfinite_tensor,
    save_policy,
)
from arl.train.pg_config import PGConfig, flat_dict, flat_saved

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
    teacher_sha256: str = ""  # a distillation's teacher's weights: a resume needs the same ones


def weights_sha256(model: torch.nn.Module) -> str:
    """One sha256 of a model's weights (every tensor's name and bytes, in name order)."""
    from arl.train.checkpoint.files import tensor_sha256

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}:{tensor_sha256(t)};".encode())
    return h.hexdigest()


def checkpoint_dirs(out: Path) -> list[Path]:
    """Every ckpt-STEP folder under a run directory, complete or not, oldest first."""
    found = [p for p in out.glob("ckpt-*") if re.fullmatch(r"ckpt-\d+", p.name) and p.is_dir()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints under a run directory, oldest first."""
    return [p for p in checkpoint_dirs(out) if (p / STATE_FILE).is_file()]


def discard(path: Path) -> None:
    """Remove a checkpoint folder: renamed away first (one atomic step), then deleted, so a kill
    midway leaves a temp folder the next claim of the run folder removes, never a half one."""
    gone = path.with_name(f"{TMP_PREFIX}gone-{path.name}")
    try:
        path.rename(gone)
    except OSError:
        return
    shutil.rmtree(gone, ignore_errors=True)


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
        "teacher_sha256": s.teacher_sha256,
    }
    keep = config.keep_checkpoints
    return save_trainer_checkpoint(out, s.step, model, state, keep, env=config.env.name)


def save_trainer_checkpoint(
    out: Path, step: int, model: TinyAgent, state: dict, keep: int, env: str | None = None
) -> Path:
    """Write out/ckpt-STEP via a temp directory and one rename; keep the newest `keep`.

    The trainer state's sha256 goes into the checkpoint's config.json beside the tensors'
    checksums, and a TinyAgent's environment (`env`: its name and vocabulary's digest); a
    failed write removes its temp directory and leaves the older checkpoints.
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
        extra = {"kind": "pg", "step": step, "files": files}
        if not isinstance(model, TinyAgent):  # a real model's weights: checked on resume
            extra[WEIGHTS_KEY] = trainable_sha256(model)
        elif env is not None:
            extra |= vocab_record(env)
        save_policy(model, tmp, extra=extra)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)  # atomic: a crash before this line leaves the last good checkpoint
        fsync_dir(out)
    except OSError as e:
        raise ArlError(f"cannot write checkpoint {final}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in checkpoints(out)[:-keep]:
        discard(old)
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
    if isinstance(model, TinyAgent):
        loaded = load_checkpoint(ckpt)  # checksums, format, finiteness
        if loaded.config != model.config:
            a, b = asdict(loaded.config), asdict(model.config)
            diff = ", ".join(f"{k} {a[k]} vs {b[k]}" for k in a if a[k] != b[k])
            raise ArlError(f"resume: {ckpt} holds another model shape than --init ({diff})")
        weights = loaded.state_dict()
    else:
        weights = None  # a real model's: loaded below, once the trainer state is checked
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
    if weights is not None:
        model.load_state_dict(weights)
    else:
        load_real_model_weights(ckpt, model)
    return {**st, "changed": sorted(every)}


# --- a real model's run (--model): its from_pretrained folder (or LoRA adapter) is the weights --

WEIGHTS_KEY = "weights_sha256"  # in a real model's checkpoint's arl.json: its trained weights
SAME_SHAPE = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


def trainable_sha256(model: torch.nn.Module) -> str:
    """One sha256 of the weights a run trains (every parameter with requires_grad, by name):
    the whole model in full fine-tuning, the adapters alone with LoRA (the base is the base)."""
    from arl.train.checkpoint.files import tensor_sha256

    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        if p.requires_grad:
            h.update(f"{name}:{tensor_sha256(p)};".encode())
    return h.hexdigest()


def load_real_model_weights(ckpt: Path, policy: Any) -> None:
    """Put a real model's checkpoint back into `policy` (an HFPolicy, LoRA or not): the adapter
    (peft) or the from_pretrained weights, after checking that the checkpoint holds this model's
    shape; then the trained weights' sha256 must equal the one saved beside them."""
    meta = checkpoint_extra(ckpt)
    want = meta.get(WEIGHTS_KEY)
    if not isinstance(want, str):
        raise ArlError(f"checkpoint {ckpt}: corrupt arl.json (no {WEIGHTS_KEY})")
    lora = bool(getattr(policy, "is_lora", False))
    try:
        if lora:
            _load_adapter(ckpt, policy)
        else:
            _load_full(ckpt, policy)
    except ArlError:
        raise
    except Exception as e:  # safetensors, transformers, peft: many types  # noqa: BLE001
        raise ArlError(f"checkpoint {ckpt}: corrupt model weights ({type(e).__name__})") from None
    if trainable_sha256(policy) != want:
        raise ArlError(f"checkpoint {ckpt}: corrupt model weights (checksum differs)")


def _load_full(ckpt: Path, policy: Any) -> None:
    from arl.hf.deps import quiet, require_transformers
    from arl.runio import read_json

    saved = read_json(ckpt / "config.json")
    now = policy.model.config.to_dict()
    diff = [f"{k} {saved.get(k)} vs {now.get(k)}" for k in SAME_SHAPE if saved.get(k) != now.get(k)]
    if diff or (ckpt / "adapter_config.json").is_file():
        what = ", ".join(diff) or "a LoRA adapter, not a full model"
        raise ArlError(f"resume: {ckpt} holds another model than --model ({what})")
    tf = require_transformers()
    quiet(tf)
    dtype = next(policy.model.parameters()).dtype
    fresh = tf.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype)
    policy.model.load_state_dict(fresh.state_dict())


def _load_adapter(ckpt: Path, policy: Any) -> None:
    from arl.hf.adapters import ADAPTER_CONFIG, quiet_peft, require_peft
    from arl.runio import read_json

    if not (ckpt / ADAPTER_CONFIG).is_file():
        raise ArlError(f"resume: {ckpt} holds a full model, not this run's LoRA adapter")
    saved, now = read_json(ckpt / ADAPTER_CONFIG), policy.model.peft_config["default"]
    keys = {"r": now.r, "lora_alpha": now.lora_alpha, "target_modules": now.target_modules}
    norm = lambda v: sorted(v) if isinstance(v, list | set | tuple) else v  # noqa: E731
    diff = [f"{k} {saved.get(k)} vs {v}" for k, v in keys.items() if norm(saved.get(k)) != norm(v)]
    if diff:
        raise ArlError(f"resume: {ckpt} holds another adapter than this run's ({', '.join(diff)})")
    peft = require_peft("a LoRA run's resume")
    from safetensors.torch import load_file

    with quiet_peft():
        peft.set_peft_model_state_dict(policy.model, load_file(ckpt / "adapter_model.safetensors"))


def restore(out: Path, model: TinyAgent, s: LoopState, config: PGConfig, allow_change) -> None:
    """Continue from the newest checkpoint in `out`, if there is one: model and loop state. A
    damaged newest checkpoint is refused, naming the last good one (remove it to go back)."""
    if not checkpoint_dirs(out):
        return
    ckpt = checkpoint_dirs(out)[-1]
    good = [p for p in checkpoints(out) if p != ckpt]
    back = (
        f"; the last good checkpoint is {good[-1]}: remove {ckpt} to resume from it"
        if good
        else "; there is no good checkpoint before it"
    )
    if not (ckpt / STATE_FILE).is_file():
        raise ArlError(f"resume: {ckpt} is damaged (no {STATE_FILE}){back}")
    try:
        st = resume_state(ckpt, model, config, allow_change)
    except ArlError as e:
        if "corrupt" not in str(e) and "non-finite" not in str(e):
            raise
        raise ArlError(f"{e}{back}") from None
    was = st.get("teacher_sha256") or ""
    if s.teacher_sha256 and was and was != s.teacher_sha256:
        raise ArlError(
            f"resume: the teacher {config.teacher} is not the one {ckpt} was trained towards "
            f"(weights sha256 {was[:16]} then, {s.teacher_sha256[:16]} now); restore that "
            "teacher, or start a new run"
        )
    try:
        s.opt.load_state_dict(st["optimizer"])
        s.rng.setstate(_to_rng_state(st["python_rng"]))
        torch.set_rng_state(st["torch_rng"])
        if s.ref is not None and hasattr(s.ref, "load_state_dict"):  # LoRA's is the base
            # a KL switched on at the resume: the reference is this policy
            s.ref.load_state_dict(st["reference"] or model.state_dict())
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        raise ArlError(f"resume: {ckpt}: trainer state does not fit this run ({e})") from None
    for group in s.opt.param_groups:  # what --allow-change admitted takes effect (REAPPLIED)
        group["lr"], group["weight_decay"] = config.lr, config.weight_decay
    s.queue, s.cooldown = deque(st["queue"]), dict(st["cooldown"])
    s.step = st["step"]
    s.entropy_coef = (
        config.entropy_coef if "entropy_coef" in st["changed"] else float(st["entropy_coef"])
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

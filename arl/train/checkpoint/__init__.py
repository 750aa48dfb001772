"""Checkpoints, every kind in one place: written atomically, checksummed, never pickle.

A checkpoint is a folder: model.safetensors (TinyAgent's weights) and config.json (format
version 2: the model config, what the saver adds, the sha256 of every tensor, a digest of every
field). A PG run's out/ckpt-STEP adds trainer_state.pt (optimizer, RNGs, reference, staleness
queue, cooldowns, entropy coefficient, the config), its sha256 in config.json; resume refuses a
changed config. A real model (arl.hf) is its `from_pretrained` folder with arl.json beside it.
A corrupt, edited, truncated or non-finite file is refused in one line, never loaded.
"""

from arl.train.checkpoint.files import (
    CONFIG_FILE,
    EXTRA_FILE,
    FORMAT,
    FORMAT_VERSION,
    WEIGHTS_FILE,
    checkpoint_extra,
    load_checkpoint,
    load_checkpoint_dir,
    meta_digests,
    nonfinite_tensor,
    read_meta,
    save_checkpoint,
    save_policy,
    tensor_sha256,
)
from arl.train.checkpoint.run import (
    ALWAYS_CHANGEABLE,
    NEVER_ON_RESUME,
    REAPPLIED,
    STATE_FILE,
    STATE_KEYS,
    LoopState,
    checkpoint_dirs,
    checkpoints,
    config_changes,
    discard,
    last_good,
    load_trainer_state,
    restore,
    resume_state,
    save,
    save_trainer_checkpoint,
    weights_sha256,
)

__all__ = [
    "ALWAYS_CHANGEABLE",
    "CONFIG_FILE",
    "EXTRA_FILE",
    "FORMAT",
    "FORMAT_VERSION",
    "NEVER_ON_RESUME",
    "REAPPLIED",
    "STATE_FILE",
    "STATE_KEYS",
    "WEIGHTS_FILE",
    "LoopState",
    "checkpoint_dirs",
    "checkpoint_extra",
    "checkpoints",
    "config_changes",
    "discard",
    "last_good",
    "load_checkpoint",
    "load_checkpoint_dir",
    "load_trainer_state",
    "meta_digests",
    "nonfinite_tensor",
    "read_meta",
    "restore",
    "resume_state",
    "save",
    "save_checkpoint",
    "save_policy",
    "save_trainer_checkpoint",
    "tensor_sha256",
    "weights_sha256",
]

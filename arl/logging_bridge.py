"""Where a trainer's per-step scalars go besides metrics.jsonl: TensorBoard, Weights & Biases.

A sink takes a step and a dict of scalars; `scalars(record)` picks them out of the record
a trainer writes to metrics.jsonl, so every sink sees the same namespaced keys
(`reward`, `kl/mu_k3`, `time/step`, `eval/heldout_pass`, ...) with the same values.
`arl train pg|distill|sft|rft|dpo --report-to` use it (`log_record` for a record), each recipe
logging its learning rate as `lr` beside its loss.

- tensorboard: `torch.utils.tensorboard.SummaryWriter` into OUT/tensorboard (needs the
  `tensorboard` package: `pip install 'arl[logging]'`), flushed after every step;
- wandb: imported only when asked for; offline unless WANDB_MODE is set (runs land in
  OUT/wandb; `wandb sync` uploads them), project `arl` unless WANDB_PROJECT is set.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from arl.errors import ArlError

REPORT_TO = ("none", "tensorboard", "wandb")
OWNED = ("tensorboard", "wandb")  # what the sinks write into a run folder


class Sink(Protocol):
    """Receives one step's scalars at a time; closed once at the end of the run."""

    def log(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record, as floats, without `step` (bools and None out)."""
    out = {}
    for key, value in record.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


class TensorBoardSink:
    """Scalars as TensorBoard events in `log_dir`, one tag per key, flushed every step."""

    def __init__(self, log_dir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ArlError(
                "--report-to tensorboard needs the tensorboard package (pip install 'arl[logging]')"
            ) from None
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Scalars as a Weights & Biases run, offline by default (WANDB_MODE=offline)."""

    def __init__(self, out: str | Path, name: str, config: Mapping[str, Any]):
        os.environ.setdefault("WANDB_MODE", "offline")  # never upload unless asked to
        try:
            import wandb
        except ImportError:
            raise ArlError("--report-to wandb needs the wandb package: pip install wandb") from None
        Path(out, "wandb").mkdir(parents=True, exist_ok=True)
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "arl"),
            dir=str(out),
            name=name,
            config=dict(config),
        )

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()


def log_record(sink: Sink | None, record: Mapping[str, Any], step: int | None = None) -> None:
    """Send a metrics record's scalars to `sink` (nothing when None), at `step` (default: the
    record's own "step")."""
    if sink is not None:
        sink.log(int(record["step"] if step is None else step), scalars(record))


def make_sink(report_to: str, out: str | Path, name: str, config: Mapping[str, Any]) -> Sink | None:
    """The sink `--report-to` names (None for "none"); a missing package is one-line ArlError."""
    if report_to not in REPORT_TO:
        raise ArlError(f"--report-to: unknown {report_to!r} (choose from {', '.join(REPORT_TO)})")
    if report_to == "tensorboard":
        return TensorBoardSink(Path(out) / "tensorboard")
    if report_to == "wandb":
        return WandbSink(out, name, config)
    return None

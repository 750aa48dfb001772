"""What the problem reproductions share: starting policies, short RL runs, figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from arl.checks import check
from arl.errors import ArlError
from arl.experiments.bases import BaseConfig, cold_start, weak_base
from arl.gym.tasks import tasks_for
from arl.model import TinyAgent
from arl.train.pg import train_pg
from arl.train.pg_config import PGConfig


@dataclass(frozen=True)
class Ctx:
    """One reproduction: which problem, how big, which seed, where outputs go."""

    number: int
    quick: bool
    seed: int
    out: Path

    def pick(self, full, quick):
        """The full-run value or the --quick one."""
        return quick if self.quick else full

    @property
    def figure(self) -> Path:
        return self.out / f"problem-{self.number}.png"


def set_threads() -> int:
    """Torch threads from ARL_THREADS (default 1): at TinyAgent's size one thread is as fast,
    and two threads on two shared cores measured 24x slower per RL step (spin-waiting)."""
    import os

    import torch

    text = os.environ.get("ARL_THREADS", "1")
    try:
        n = check("ARL_THREADS", int(text), 1, 1024, integer=True)
    except ValueError:  # ArlError included
        raise ArlError(f"ARL_THREADS: must be an integer in [1, 1024], got {text!r}") from None
    torch.set_num_threads(n)
    return n


def base_config(ctx: Ctx) -> BaseConfig:
    """The shared bases (cached); --quick uses a smaller model trained for fewer steps."""
    if ctx.quick:
        return BaseConfig(
            seed=ctx.seed, n_layer=2, n_embd=64, weak_steps=60, sft_steps=30, cold_start_step=10
        )
    return BaseConfig(seed=ctx.seed)


def start(ctx: Ctx, kind: str) -> TinyAgent:
    """A fresh copy of the weak base ("weak") or the RL cold start ("cold")."""
    return (weak_base if kind == "weak" else cold_start)(base_config(ctx))


def rl_config(ctx: Ctx, env: dict | None = None, **overrides) -> PGConfig:
    """The trainer's defaults at the problem's scale (quick: PGConfig.quick), with overrides
    of PGConfig fields and, in `env`, of the EnvConfig's."""
    base = PGConfig(seed=ctx.seed)
    base = base.quick() if ctx.quick else base
    return replace(base, env=replace(base.env, **(env or {})), **overrides)


def rl_runs(
    ctx: Ctx, kind: str, variants: dict[str, dict[str, Any]], steps: int | None = None
) -> dict[str, list[dict]]:
    """One short RL run per variant, each from the same starting policy and seed."""
    out = {}
    for name, overrides in variants.items():
        config = rl_config(ctx, **overrides)
        if steps is not None and not ctx.quick:
            config = replace(config, steps=steps)
        out[name] = train_pg(start(ctx, kind), config, tasks_for("train"))
    return out


def series(history: Sequence[dict], key: str) -> list[float]:
    return [r[key] for r in history if key in r and r[key] is not None]


def tail_mean(history: Sequence[dict], key: str, frac: float = 0.25) -> float:
    """Mean of a metric over the last `frac` of the steps (at least one)."""
    xs = series(history, key)
    n = max(1, math.ceil(len(xs) * frac))
    return float(np.mean(xs[-n:])) if xs else float("nan")


def head_mean(history: Sequence[dict], key: str, frac: float = 0.25) -> float:
    """Mean of a metric over the first `frac` of the steps (at least one)."""
    xs = series(history, key)
    n = max(1, math.ceil(len(xs) * frac))
    return float(np.mean(xs[:n])) if xs else float("nan")


def first_last(runs: dict[str, list[dict]], keys: Sequence[str]) -> dict:
    """Each run's metrics averaged over its first and last quarter of steps, and the histories."""
    summary = {
        n: {k: {"first": head_mean(h, k), "last": tail_mean(h, k)} for k in keys}
        for n, h in runs.items()
    }
    return {**summary, "history": runs}


def plot_runs(
    ctx: Ctx, runs: dict[str, list[dict]], keys: Sequence[tuple[str, str]], title: str
) -> None:
    """One panel per (metric key, label), one line per run, against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4))
    for ax, (key, label) in zip(np.atleast_1d(axes), keys, strict=True):
        for name, hist in runs.items():
            pts = [(r["step"], r[key]) for r in hist if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=name)
        ax.set_xlabel("step")
        ax.set_title(label, fontsize=9)
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, ctx.figure, dpi=110)
    plt.close(fig)


def save_png(fig, path: Path, dpi: int) -> None:
    """Render a figure to PNG bytes, then write them atomically (never half a file)."""
    import io

    from arl.runio import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())


def new_figure(n: int = 1, width: float = 4.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(width * n, 3.6))
    return fig, list(np.atleast_1d(axes))


def save_figure(ctx: Ctx, fig, title: str) -> None:
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, ctx.figure, dpi=110)
    plt.close(fig)

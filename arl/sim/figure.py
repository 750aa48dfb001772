"""Timeline figure of a fleet simulation (matplotlib, Agg backend, written as PNG)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from arl.runio import atomic_write_bytes
from arl.sim.config import FleetConfig
from arl.sim.report import FleetResult


def plot_timeline(result: FleetResult, cfg: FleetConfig, path: str | Path) -> Path:
    """Draw episodes by state, engine use and KV occupancy over time, and episode lengths.

    Vertical dashed lines mark the end of each optimizer step.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = result.timeline
    t_min = [t / 60.0 for t in tl["t"]]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), constrained_layout=True)

    ax = axes[0]
    labels = ("container", "queued", "decode", "tool")
    names = ("starting / waiting for container", "waiting for engine slot", "decoding", "in tool")
    ax.stackplot(t_min, *(tl[k] for k in labels), labels=names, alpha=0.8)
    ax.set_ylabel("episodes in flight")
    ax.set_title(
        f"{cfg.mode} fleet: {cfg.episodes_per_step} episodes/step, "
        f"{cfg.slots} engine slots, warm pool {cfg.warm_pool}, reuse {cfg.reuse}"
    )
    ax.legend(loc="lower right", fontsize=8)

    ax = axes[1]
    ax.plot(t_min, [d / cfg.slots for d in tl["decode"]], label="engine utilization (decoding)")
    capacity = cfg.n_engines * cfg.kv_capacity_tokens
    ax.plot(t_min, [k / capacity for k in tl["kv"]], label="KV occupancy (fleet)")
    ax.set_ylabel("fraction")
    ax.set_xlabel("time (min)")
    ax.legend(loc="upper right", fontsize=8)
    for a in axes[:2]:
        for t in result.step_ends:
            a.axvline(t / 60.0, color="k", linestyle="--", linewidth=0.8)

    ax = axes[2]
    bins = np.histogram_bin_edges(result.launched_lengths, bins=40)  # shared by both
    ax.hist(result.launched_lengths, bins=bins, alpha=0.5, density=True, label="launched")
    ax.hist(result.trained_lengths, bins=bins, alpha=0.5, density=True, label="trained")
    ax.set_xlabel("policy tokens per episode")
    ax.set_ylabel("density")
    ax.set_title("length of launched vs trained episodes")
    ax.legend(fontsize=8)

    out = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())  # never half a PNG
    return out

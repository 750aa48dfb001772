"""Shared helpers of the benchmarks: thread set-up, interleaved timing, the machine line.

Not a test. The machine these run on is shared, so every comparison is measured in
one process, the contenders interleaved repetition by repetition, and reported as
the median of the per-repetition ratios (a noisy neighbour slows both sides of a
pair alike).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date


def setup_threads(n: int) -> None:
    """Use n intra-op threads (and one inter-op thread) for the whole run."""
    import torch

    torch.set_num_threads(n)


def machine_line() -> str:
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{date.today().isoformat()}  {platform.processor() or platform.machine()}  "
        f"{os.cpu_count()} cores  load {load:.1f}  torch {torch.__version__}  "
        f"threads {torch.get_num_threads()}  "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '-')}"
    )


def interleaved(
    fns: dict[str, Callable[[int], object]],
    reps: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per call of each fn(rep), alternating fns within each repetition. `clock`:
    wall time by default; time.process_time counts only this process's CPU time (with one
    thread, its work, without the time slices a loaded machine gives to others)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(reps):
        for name, fn in fns.items():
            t = clock()
            fn(r)
            times[name].append(clock() - t)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def median_ratio(num: list[float], den: list[float]) -> float:
    """Median over repetitions of num[r] / den[r] (e.g. baseline time / our time)."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def write_json(path: str | None, payload: dict) -> None:
    if not path:
        return
    text = json.dumps(payload, indent=2)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(path, "w") as f:
            f.write(text + "\n")


def gpt2_like(vocab_size: int, n_positions: int = 512, **overrides):
    """A randomly initialized GPT2LMHeadModel of TinyAgent's default shape (nothing downloaded)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    shape = dict(n_layer=4, n_embd=128, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, bos_token_id=None, **{**shape, **overrides}
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)

"""A sweep of policy-gradient runs: one run per value of one PGConfig key (seeds, learning
rates, ...), each in its own folder OUT/KEY=VALUE, in processes or on Ray (arl.parallel).

Each point is an ordinary `train_pg` run (its folder claimed, resumable), so a sweep that
is killed and started again skips the points whose final checkpoint exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arl.parallel import Where, run_many
from arl.train.pg import TIMING_KEYS, train_pg
from arl.train.pg_config import make_config
from arl.train.policy import load_policy


def point_values(base: dict, key: str, values: list[Any]) -> list[dict]:
    """The values dict of each point: `base` with `key` set and out = base out/KEY=VALUE."""
    points = []
    for v in values:
        d = {k: (dict(x) if isinstance(x, dict) else x) for k, x in base.items()}
        if key.startswith("env."):
            d.setdefault("env", {})[key[4:]] = v
        else:
            d[key] = v
        d["out"] = str(Path(base["out"]) / f"{key}={v}")
        points.append(d)
    return points


def run_point(values: dict, init: str) -> dict:
    """One point: train from `init`; its last step's metrics and its last evaluation."""
    config = make_config(values)
    done = Path(config.out) / f"ckpt-{config.steps:06d}"
    if done.exists():  # finished before a kill: not rerun
        return {"out": config.out, "skipped": True}
    history = train_pg(load_policy(init, config.seed), config)
    steps = [r for r in history if "reward" in r]
    evals = [r for r in history if any(k.startswith("eval/") for k in r)]
    last = {k: v for k, v in steps[-1].items() if k not in TIMING_KEYS} if steps else {}
    return {"out": config.out, "last": last, "eval": evals[-1] if evals else {}}


def sweep(base: dict, key: str, values: list[Any], init: str, where: Where):
    """Yield (value, result) for each point as it finishes."""
    points = point_values(base, key, values)
    by_out = {p["out"]: v for p, v in zip(points, values, strict=True)}
    for (p, _), result in run_many(run_point, [(p, init) for p in points], where):
        yield by_out[p["out"]], result

"""A sweep of policy-gradient runs: one run per point (the CLI's `--sweep KEY=V1,V2,...`
gives one per value, each in its own folder OUT/KEY=VALUE), in processes or on Ray.

Each point is an ordinary `train_pg` run (its folder claimed, resumable), so a sweep that
is killed and started again skips the points whose final checkpoint exists.
"""

from __future__ import annotations

from pathlib import Path

from arl.parallel import Folder, Placements, Where, run_many
from arl.train.pg import TIMING_KEYS, train_pg
from arl.train.pg_config import make_config
from arl.train.policy import INITS, load_policy


def run_point(values: dict, init: str, out: str | None = None) -> dict:
    """One point: train from `init`; its last step's metrics and its last evaluation. `out`:
    where this task writes the point's folder (on another Ray node: a copy of values' out)."""
    config = make_config(values if out is None else {**values, "out": out})
    done = Path(config.out) / f"ckpt-{config.steps:06d}"
    if done.exists():  # finished before a kill: not rerun
        return {"out": values["out"], "skipped": True}
    history = train_pg(load_policy(init, config.seed, config.env.name), config)
    steps = [r for r in history if "reward" in r]
    evals = [r for r in history if any(k.startswith("eval/") for k in r)]
    last = {k: v for k, v in steps[-1].items() if k not in TIMING_KEYS} if steps else {}
    return {"out": values["out"], "last": last, "eval": evals[-1] if evals else {}}


def sweep(points: dict[str, dict], init: str, where: Where):
    """Yield (label, result) for each point (label -> its PGConfig values) as it finishes;
    on Ray, which node ran each point goes to nodes.json beside the points' folders."""
    label = {p["out"]: name for name, p in points.items()}
    start = init if init in INITS else Folder(init)  # a checkpoint folder of this machine
    jobs = [(p, start, Folder(p["out"])) for p in points.values()]
    nodes = Placements(Path(jobs[0][0]["out"]).parent / "nodes.json", lambda a: label[a[0]["out"]])
    for (p, _, _), result in run_many(run_point, jobs, where, nodes):
        yield label[p["out"]], result

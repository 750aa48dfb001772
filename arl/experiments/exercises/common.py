"""What the exercises share: Section 15.3's expert-iteration settings, a per-round eval, and the
trend a conclusion quotes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from arl.eval.metrics import evaluate
from arl.experiments.problems.common import Ctx
from arl.gym.tasks import tasks_for
from arl.train.rft import RFTConfig

Extra = Callable[[str, dict, list], dict]  # (split, metrics, trajectories) -> more keys


def ei_config(ctx: Ctx) -> RFTConfig:
    """Expert iteration at Section 15.3's settings; --quick: 2 rounds, 4 samples, 5 steps."""
    config = RFTConfig(seed=ctx.seed)
    if ctx.quick:
        config = replace(config, rounds=2, samples_per_task=4, steps_per_round=5)
    return config


def split_hook(ctx: Ctx, offset: int, samples: int, extra: Extra | None = None) -> Callable:
    """A round hook: pass rate on train and held-out (eval seed ctx.seed*101+offset+round),
    plus whatever `extra` reads from each split's metrics and episodes."""

    def hook(r: int, model) -> dict:
        out = {}
        for split in ("train", "heldout"):
            m, trajs = evaluate(model, tasks_for(split), samples, seed=ctx.seed * 101 + offset + r)
            out[split] = m["pass_rate"]
            if extra is not None:
                out.update(extra(split, m, trajs))
        return out

    return hook


def trend(rows: Sequence[dict], key: str) -> str:
    """A metric along rows (rounds or steps) as "a -> b -> c", to 2 decimals: a conclusion's."""
    return " -> ".join(format(r[key], ".2f") for r in rows)

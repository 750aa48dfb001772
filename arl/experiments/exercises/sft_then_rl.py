"""Exercise 6: SFT then RL from the oracle-SFT checkpoints at steps 10, 20 and 40.

Per seed: oracle SFT from the weak base (Section 15.2's run, the same data and seed), keeping
the checkpoints at steps 10, 20 and 40; at each, the share of informative held-out groups
(groups of G = 8 episodes on a task that mix passes and failures: Section 15.6's probe, 10
groups per task) and the held-out pass rate; then Section 15.5's minimal REINFORCE from each
checkpoint for the chapter's 40 steps, held-out pass every 10 steps. The book's reading: what
RL from a warm start needs is informative groups (70% at the cold start, 10% after longer SFT),
so RL gains most from the checkpoint whose groups carry signal.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from arl.experiments.ch15 import Ch15Config, evaluator, mixed_group_fraction, reinforce
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    base_config,
    mean_band,
    new_figure,
    save_figure,
    seeds_label,
    sem,
)
from arl.train.bases import train_oracle_sft


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of y on x (0 when x does not vary)."""
    x_, y_ = np.asarray(x, float), np.asarray(y, float)
    dx = x_ - x_.mean()
    den = float(dx @ dx)
    return float(dx @ (y_ - y_.mean()) / den) if den > 0 else 0.0


def checkpoints(ctx: Ctx, steps: tuple[int, ...]) -> dict[int, object]:
    """Oracle SFT from the weak base, a copy of the model at each of `steps`."""
    base = replace(base_config(ctx), sft_steps=max(steps))
    kept: dict[int, object] = {}

    def keep(step: int, model) -> None:
        if step in steps:
            kept[step] = copy.deepcopy(model)

    train_oracle_sft(base, keep, hook_every=min(steps))
    return kept


def exercise_6(ctx: Ctx) -> tuple[dict, str]:
    cfg = Ch15Config(base=base_config(ctx))
    cfg = cfg.quick() if ctx.quick else cfg
    steps = ctx.pick((10, 20, 40), (5, 10, 20))
    G, groups = cfg.group_probe, cfg.group_probe_groups
    arms: dict = {}
    for step, model in checkpoints(ctx, steps).items():
        probe = mixed_group_fraction(model, G, groups, ctx.seed * 1000 + 61 + step)
        history = reinforce(
            model, cfg, cfg.rl_steps_cold, ctx.seed * 1000 + step, evaluator(cfg, 7000 + step)
        )
        curve = [
            {"step": r["rl_step"], "train": r["train"], "heldout": r["heldout"]} for r in history
        ]
        arms[str(step)] = {
            "sft_step": step,
            "informative": probe["mixed_fraction"],
            "probe_pass": probe["pass_rate"],
            "start_heldout": curve[0]["heldout"],
            "final_heldout": curve[-1]["heldout"],
            "gain": curve[-1]["heldout"] - curve[0]["heldout"],
            "curve": curve,
        }
    share = [a["informative"] for a in arms.values()]
    res: dict = {"arms": arms, "G": G, "groups_per_task": groups}
    res["effect"] = slope(share, [a["gain"] for a in arms.values()])
    res["final_slope"] = slope(share, [a["final_heldout"] for a in arms.values()])
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    arms = "; ".join(
        f"step {a['sft_step']}: informative {a['informative']:.2f}, held-out "
        f"{a['start_heldout']:.2f} -> {a['final_heldout']:.2f}"
        for a in res["arms"].values()
    )
    return (
        f"{arms}. Slope over the three checkpoints: RL's held-out gain {res['effect']:+.2f}, "
        f"final held-out {res['final_slope']:+.2f} per unit of informative share."
    )


def draw(per_seed: list[dict], path) -> None:
    """Left: final (filled) and starting (open) held-out pass against the starting share of
    informative groups, per checkpoint, mean +- SE over seeds both ways. Right: held-out pass
    along RL from each checkpoint, mean +- SE."""
    fig, (a, b) = new_figure(2)
    for i, arm in enumerate(per_seed[0]["arms"]):
        rows = [r["arms"][arm] for r in per_seed]
        x = [r["informative"] for r in rows]
        ys = [float(np.mean([r[k] for r in rows])) for k in ("start_heldout", "final_heldout")]
        a.annotate(
            "",
            (np.mean(x), ys[1]),
            (np.mean(x), ys[0]),
            arrowprops={"arrowstyle": "->", "color": f"C{i}", "lw": 1},
        )
        for key, mfc in (("final_heldout", f"C{i}"), ("start_heldout", "none")):
            y = [r[key] for r in rows]
            label = f"SFT step {arm}, {'after' if key == 'final_heldout' else 'before'} RL"
            a.errorbar(
                np.mean(x),
                np.mean(y),
                xerr=sem(x),
                yerr=sem(y),
                fmt="o",
                color=f"C{i}",
                mfc=mfc,
                label=label,
                capsize=3,
            )
        v = np.array([[c["heldout"] for c in r["curve"]] for r in rows])  # (seeds, evals)
        t = [c["step"] for c in rows[0]["curve"]]
        mean_band(b, t, v, f"C{i}", f"from SFT step {arm}")
    a.set_xlabel("informative held-out groups at the start (share)")
    a.set_ylabel("held-out pass rate")
    a.legend(fontsize=6)
    from matplotlib.ticker import MaxNLocator

    b.xaxis.set_major_locator(MaxNLocator(integer=True))
    b.set_xlabel("RL step")
    b.set_ylabel("held-out pass rate")
    b.legend(fontsize=7)
    save_figure(
        path, fig, f"Exercise 6: SFT then RL from three checkpoints ({seeds_label(per_seed)})"
    )


EXERCISE_6 = Problem(
    exercise_6,
    Claim(
        text="RL from a warm start gains most where its groups carry signal: the more "
        "informative groups at the start, the larger RL's held-out gain",
        effect="slope of RL's held-out gain on the starting informative share, over the "
        "checkpoints at SFT steps 10, 20, 40 (> 0)",
        source="lab",
        passage="the book asks to plot final held-out pass against the starting informative "
        "share; the lab predicts RL's held-out gain rises with the share",
        cause="the gain is set by the starting pass rate (room left) more than by the share",
    ),
    draw,
    more=(
        (
            "final_slope",
            Claim(
                text="the cold start ends RL at least as high as longer SFT (book: 0.95 held-out "
                "against 0.93): final held-out rises with the starting informative share",
                effect="slope of final held-out pass on the starting informative share (> 0)",
                source="lab",
                passage="the book asks to plot final held-out pass against the starting "
                "informative share; the lab predicts it rises (the book: 0.95 after the step-20 "
                "cold start, 0.93 after SFT)",
                cause="the later checkpoints start higher, and 40 RL steps do not close the gap",
            ),
        ),
    ),
)

"""The figures of Problems 1-4 (the estimators), drawn over seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arl.experiments.problems.common import (
    new_figure,
    save_figure,
    seeds_label,
    sem,
)
from arl.losses import AGGREGATIONS


def draw_1(per_seed: list[dict], path: Path) -> None:
    fig, (ax1, ax2) = new_figure(2)
    for i, mode in enumerate(AGGREGATIONS):
        L = [x for r in per_seed for x in r["L"]]
        ax1.scatter(
            L,
            [x for r in per_seed for x in r[mode]["per_token"]],
            s=10,
            color=f"C{i}",
            marker="o^s"[i % 3],
            alpha=0.6,
            label=mode,
        )
        ax2.scatter(
            L,
            [x for r in per_seed for x in r[mode]["total"]],
            s=10,
            color=f"C{i}",
            marker="o^s"[i % 3],
            alpha=0.6,
        )
    ax1.set(
        xlabel="policy tokens in the episode, L_i",
        ylabel="loss weight per token (log)",
        yscale="log",
    )
    ax2.set(xlabel="policy tokens in the episode, L_i", ylabel="total loss weight of the episode")
    fig.legend(
        *ax1.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8, frameon=False
    )
    save_figure(
        path,
        fig,
        f"Problem 1: loss weight against length ({seeds_label(per_seed, pooled=True)})",
        0.08,
    )


def draw_2(per_seed: list[dict], path: Path) -> None:
    fig, (ax1, ax2) = new_figure(2)
    x = np.arange(len(AGGREGATIONS))
    for k, name in enumerate(("global", "per_microbatch_mean")):
        for j, order in enumerate(("sampled", "length_sorted")):
            off = 0.2 * (2 * k + j)
            cos = np.array(
                [[1 - r[order][m][name]["cosine"] for m in AGGREGATIONS] for r in per_seed]
            )  # (seeds, modes)
            ratio = np.array(
                [[r[order][m][name]["norm_ratio"] for m in AGGREGATIONS] for r in per_seed]
            )
            lab = f"{name.replace('_', ' ')}, {order.replace('_', ' ')}"
            ax1.bar(x + off, cos.mean(0), 0.2, yerr=sem(cos), label=lab, color=f"C{2 * k + j}")
            ax2.bar(x + off, ratio.mean(0), 0.2, yerr=sem(ratio), color=f"C{2 * k + j}")
    for ax, lab in (
        (ax1, "1 - cosine to the one-batch gradient"),
        (ax2, "norm / one-batch gradient norm"),
    ):
        ax.set_xticks(x + 0.3, AGGREGATIONS, fontsize=7)
        ax.set_xlabel("aggregation")
        ax.set_ylabel(lab)
    fig.legend(
        *ax1.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False
    )
    title = f"Problem 2: accumulated against one-batch gradient ({seeds_label(per_seed)})"
    save_figure(path, fig, title, bottom=0.14)


def draw_3(per_seed: list[dict], path: Path) -> None:
    fig, (ax1, ax2) = new_figure(2)
    Gs = per_seed[0]["G"]
    for key, style, lab in (
        ("measured", "o-", "measured"),
        ("predicted", "s--", "predicted: mean of p^G + (1-p)^G"),
    ):
        v = np.array([r[key] for r in per_seed])  # (seeds, G)
        ax1.errorbar(Gs, v.mean(0), yerr=sem(v), fmt=style, capsize=3, label=lab)
    inf = np.array([r["informative_tasks_per_64"] for r in per_seed])
    ax2.errorbar(Gs, inf.mean(0), yerr=sem(inf), fmt="o-", capsize=3)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(Gs, [str(g) for g in Gs])
        ax.set_xlabel("group size G (episodes per task)")
    ax1.set_ylabel("fraction of groups all-pass or all-fail")
    ax2.set_ylabel("informative groups per 64 episodes")
    ax1.legend(fontsize=7)
    title = f"Problem 3: degenerate groups against G, cold start ({seeds_label(per_seed)})"
    save_figure(path, fig, title)


def draw_4(per_seed: list[dict], path: Path) -> None:
    fig, (ax,) = new_figure(1, width=5.6)
    ps = np.linspace(0.05, 0.95, 100)
    ax.plot(ps, 1 / np.sqrt(ps * (1 - ps)), color="C0", label="1/sqrt(p(1-p))")
    pts = [(m["p_hat"], m["factor"]) for r in per_seed for m in r["measured"]]
    if pts:
        ax.scatter(*zip(*pts, strict=True), color="C1", s=14, label="measured groups of 8")
    ax.set(xlabel="group success fraction p", ylabel="std normalization: |A| multiplied by")
    ax.legend(fontsize=7)
    save_figure(
        path, fig, f"Problem 4: dividing by the group std ({seeds_label(per_seed, pooled=True)})"
    )

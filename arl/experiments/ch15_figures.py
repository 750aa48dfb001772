"""Chapter 15's figures: 15.1 to 15.4 and the oracle-SFT curve, as seed means with a band of
+- one standard error over seeds where there are several."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arl.eval.stats import seed_se


def _mean_curve(results: list[dict], get) -> tuple[list[float], dict, dict]:
    """Mean and standard error over seeds of each key of a curve, point by point.

    Points are matched by position; x is the mean step (the SFT-then-RL curve starts at
    each seed's own cold-start step).
    """
    curves = [get(R) for R in results]
    n = min(len(c) for c in curves)
    steps = [float(np.mean([c[i]["step"] for c in curves])) for i in range(n)]
    keys = [k for k in curves[0][0] if k != "step"]
    vals = {k: np.array([[c[i][k] for i in range(n)] for c in curves], dtype=float) for k in keys}
    mean = {k: v.mean(0) for k, v in vals.items()}
    return steps, mean, {k: seed_se(v) for k, v in vals.items()}


def _line(ax, x, mean, sem, fmt: str, label: str, **kw) -> None:
    """A mean curve with its +- SE band."""
    (line,) = ax.plot(x, mean, fmt, label=label, ms=3, **kw)
    ax.fill_between(x, mean - sem, mean + sem, color=line.get_color(), alpha=0.15, lw=0)


def draw_figures(results: list[dict], out: Path) -> list[str]:
    """Figures 15.1 to 15.4 and the oracle-SFT curve (seed means +- SE); returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = (
        ("fig15_1_recipes.png", _fig_recipes),
        ("fig15_2_dpo.png", _fig_dpo),
        ("fig15_3_four_recipes.png", _fig_four_recipes),
        ("fig15_4_public_filter.png", _fig_public_filter),
        ("fig_oracle_sft.png", _fig_oracle_sft),
    )
    return [_save(draw(plt, results), out / name) for name, draw in figures]


def _fig_recipes(plt, results: list[dict]):
    """15.1: every recipe is sum_i w_i grad log pi(tau_i) over masked action tokens."""
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.axis("off")
    cells = [
        ["SFT", "expert demonstrations", "1"],
        ["RFT / expert iteration", "current policy, filtered", "R_i / p_hat"],
        ["policy gradient", "current policy", "R_i - mean(R)"],
        ["DPO", "fixed dataset of pairs", "+/- beta * sigmoid(-beta * margin)"],
    ]
    t = ax.table(
        cellText=cells,
        colLabels=["method", "where tau_i comes from", "weight w_i"],
        loc="center",
        cellLoc="left",
    )
    t.scale(1, 1.6)
    ax.set_title("Figure 15.1: sum_i w_i grad log pi(tau_i) over masked action tokens")
    return fig


def _fig_dpo(plt, results: list[dict]):
    """15.2: DPO, what the dashboard shows vs what the policy does."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, style in (("dpo", "-"), ("dpo_nll", "--")):
        steps, m, e = _mean_curve(
            results,
            lambda R, n=name: [
                {
                    "step": r["step"],
                    **{
                        k: r[k]
                        for k in (
                            "chosen_delta",
                            "rejected_delta",
                            "train",
                            "heldout",
                            "train_malformed",
                        )
                    },
                }
                for r in R["dpo"][n]
            ],
        )
        for ax, key, color, what in (
            (a, "chosen_delta", "g", "chosen"),
            (a, "rejected_delta", "r", "rejected"),
            (b, "train", "b", "train pass"),
            (b, "heldout", "c", "held-out pass"),
            (b, "train_malformed", "m", "malformed / episode"),
        ):
            _line(ax, steps, m[key], e[key], color + style, f"{name}: {what}")
    a.set(xlabel="DPO step", ylabel="log-prob change vs reference (nats)")
    b.set(xlabel="DPO step", ylabel="rate / count")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.suptitle("Figure 15.2: offline DPO on weak-base pairs")
    return fig


def _fig_four_recipes(plt, results: list[dict]):
    """15.3: four recipes on a shared x-axis of gradient steps."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for recipe, color in (
        ("oracle_sft", "k"),
        ("rft", "tab:orange"),
        ("sft_then_rl", "tab:green"),
        ("rl_only", "tab:blue"),
    ):
        steps, m, e = _mean_curve(results, lambda R, k=recipe: R["recipes"]["curves"][k])
        for ax, split in zip(axes, ("train", "heldout"), strict=True):
            _line(ax, steps, m[split], e[split], "o-", recipe, color=color)
    for ax, split in zip(axes, ("training tasks", "held-out variants"), strict=True):
        ax.set(xlabel="gradient steps", title=split, ylim=(0, 1.05))
    axes[0].set_ylabel("hidden-test pass rate")
    axes[0].legend()
    fig.suptitle("Figure 15.3: four recipes from one weak base")
    return fig


def _fig_public_filter(plt, results: list[dict]):
    """15.4: RFT with a public-test filter: kept hacks per round and the two pass rates."""
    fig, ax = plt.subplots(figsize=(7, 4))
    rounds = results[0]["public_rft"]["rounds"]
    x = np.arange(1, len(rounds) + 1)
    hacks = np.mean([[r["hacks"] for r in R["public_rft"]["rounds"]] for R in results], 0)
    kept = np.mean([[r["kept"] for r in R["public_rft"]["rounds"]] for R in results], 0)
    ax.bar(x, kept - hacks, color="tab:green", label="kept: genuine fixes")
    ax.bar(x, hacks, bottom=kept - hacks, color="tab:red", label="kept: hacks")
    ax.set(xlabel="round", ylabel="kept episodes (seed mean)")
    ax2 = ax.twinx()
    for key, color, label in (
        ("train_public", "k", "public-test pass (the filter)"),
        ("train", "tab:blue", "hidden-test pass"),
    ):
        per_seed = [[r[key] for r in R["public_rft"]["rounds"]] for R in results]
        ys, err = np.mean(per_seed, 0), seed_se(per_seed)
        ax2.errorbar(x, ys, yerr=err, fmt="o-", color=color, capsize=3, label=f"policy: {label}")
    ax.set_xticks(x)
    ax2.set(ylim=(0, 1.05), ylabel="pass rate after the round")
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="center left", fontsize=8)
    fig.suptitle("Figure 15.4: RFT with a public-test filter")
    return fig


def _fig_oracle_sft(plt, results: list[dict]):
    """Oracle SFT: pass rates and action entropy every few steps."""
    fig, ax = plt.subplots(figsize=(7, 4))
    steps, m, e = _mean_curve(
        results,
        lambda R: [
            {k: r[k] for k in ("step", "train", "heldout", "train_entropy")}
            for r in R["sft"]["oracle_sft_curve"]
        ],
    )
    _line(ax, steps, m["train"], e["train"], "o-", "train pass")
    _line(ax, steps, m["heldout"], e["heldout"], "o-", "held-out pass")
    ax2 = ax.twinx()
    ax2.semilogy(steps, m["train_entropy"], "k--", label="action entropy (nats)")
    ax.set(xlabel="SFT step", ylabel="hidden-test pass rate", ylim=(0, 1.05))
    ax.legend(loc="center right", fontsize=8)
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle("Oracle SFT from the weak base (Section 15.2)")
    return fig


def _save(fig, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name

"""The report's standing panels: the book's dashboard, as data.

Each panel names the arl metrics it draws (arl/doctor/names.py maps TRL's and verl's names
onto them), the unit of each y axis, and the Appendix B problems it serves. A finding sits
beside every panel that draws one of its `metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from arl.doctor.types import Run


@dataclass(frozen=True)
class Axis:
    """One plot of a panel: its y unit, its series (metric, legend label), its scale."""

    ylabel: str
    series: tuple[tuple[str, str], ...]
    log: bool = False  # log y (KL and |log rho| span decades)
    unit_range: bool = False  # a fraction: y from 0 to at least 1


@dataclass(frozen=True)
class Panel:
    """A standing panel: the title, the Appendix B problems it serves, its axes."""

    key: str
    title: str
    problems: tuple[int, ...]
    axes: tuple[Axis, ...]
    reads: str  # one line: what the panel tells a reader
    prefix: str = ""  # also every metric named PREFIX<name> (its first axis; label <name>)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(m for a in self.axes for m, _ in a.series)


EPISODES = "fraction of episodes"
MU = "vs sampler μ"
REF = "vs reference"
PANELS = (
    Panel(
        "pass",
        "Reward and pass rate, train and held-out",
        (25,),
        (
            Axis(
                "pass rate / mean reward",
                (
                    ("reward", "reward (mean per episode)"),
                    ("pass_rate", "train pass (sampled)"),
                    ("eval/train_pass", "eval: train pass"),
                    ("eval/heldout_pass", "eval: held-out pass"),
                    ("eval/heldout_reward", "eval: held-out reward"),
                    ("teacher_pass_rate", "teacher pass (same tasks)"),
                ),
                unit_range=True,
            ),
        ),
        "reward that climbs while held-out stays flat is learning the training set",
    ),
    Panel(
        "families",
        "Pass rate by task family",
        (11,),
        (Axis(EPISODES, (("canary_pass", "canary"),), unit_range=True),),
        "families that learn at different speeds, or one that never does",
        prefix="pass/",
    ),
    Panel(
        "entropy",
        "Policy entropy",
        (26, 28),
        (Axis("nats per policy token", (("entropy", "entropy (policy tokens)"),)),),
        "a collapse before pass rises, and entropy read at the policy's positions",
    ),
    Panel(
        "kl",
        "KL: mean estimates beside the tail of |log ρ|",
        (5, 6, 16),
        (
            Axis(
                "mean KL estimate (nats per token)",
                (
                    ("kl/mu_k3", f"k3 {MU}"),
                    ("kl/ref_k3", f"k3 {REF}"),
                    ("kl/mu_k1", f"k1 {MU}"),
                    ("kl/ref_k1", f"k1 {REF}"),
                    ("kl/update_k1", "k1 within the update"),
                ),
                log=True,
            ),
            Axis(
                "99th pct of |log ρ| (nats)",
                (("kl/mu_absq99", MU), ("kl/ref_absq99", REF)),
                log=True,
            ),
        ),
        "a flat mean can hide a tail that explodes; a KL plateau while reward stalls",
    ),
    Panel(
        "mismatch",
        "Sampler-trainer mismatch",
        (20,),
        (
            Axis(
                "|log π − log μ| (nats per token)",
                (
                    ("mismatch/mean", "mean"),
                    ("mismatch/p999", "99.9th percentile"),
                    ("mismatch/max", "max"),
                ),
                log=True,
            ),
            Axis(
                "importance weight π / μ",
                (("is_ratio/min", "min"), ("is_ratio/mean", "mean"), ("is_ratio/max", "max")),
            ),
        ),
        "the tail grows while the mean stays flat: the two engines disagree",
    ),
    Panel(
        "teacher",
        "Distillation: the student against its teacher",
        (),
        (
            Axis(
                "log π_student/π_teacher (nats)",
                (("teacher_kl", "mean (k1 estimate of the KL)"), ("teacher_kl_q99", "99th pct")),
            ),
        ),
        "the reverse KL the student is trained down, on its own samples",
    ),
    Panel(
        "degenerate",
        "Groups with no signal (all pass or all fail)",
        (3, 13),
        (
            Axis(
                "fraction of groups",
                (("degenerate_frac", "as sampled"), ("degenerate_frac_final", "after refills")),
                unit_range=True,
            ),
            Axis("reward std within a group", (("reward_std", "mean over groups"),)),
        ),
        "groups whose rewards are all equal give no gradient",
    ),
    Panel(
        "clip",
        "Clipped and capped tokens",
        (16,),
        (
            Axis(
                "fraction of policy tokens",
                (
                    ("clip_frac", "PPO ratio clipped"),
                    ("clip_frac_low", "clipped at the low bound"),
                    ("capped_frac", "IS weight capped at C"),
                ),
            ),
        ),
        "the share of tokens the update ignores or truncates",
    ),
    Panel(
        "lengths",
        "Episode length by outcome, and truncation",
        (27, 13),
        (
            Axis(
                "generated tokens per episode",
                (
                    ("len_success_p50", "success p50"),
                    ("len_success_p90", "success p90"),
                    ("len_failure_p50", "failure p50"),
                    ("len_failure_p90", "failure p90"),
                    ("len_mean", "all, mean"),
                    ("len_max", "all, max"),
                ),
            ),
            Axis(EPISODES, (("truncated_frac", "truncated (out of turns or tokens)"),)),
        ),
        "length that grows in failures, and episodes cut off",
    ),
    Panel(
        "malformed",
        "Malformed calls, tool calls and turns",
        (12, 13),
        (
            Axis(
                "per episode",
                (
                    ("malformed_per_episode", "malformed calls"),
                    ("tool_calls_per_episode", "tool calls"),
                    ("mean_turns", "turns"),
                ),
            ),
            Axis("fraction of tool calls", (("tool_failure_frac", "failed"),), unit_range=True),
        ),
        "calls that do not parse, and how long episodes run",
    ),
    Panel(
        "gap",
        "Public-hidden gap and hacks",
        (7,),
        (
            Axis(
                EPISODES,
                (
                    ("public_pass_rate", "public tests pass"),
                    ("pass_rate", "hidden tests pass"),
                    ("public_hidden_gap", "gap (public − hidden)"),
                    ("hack_rate", "hardcoded tests (hack)"),
                ),
                unit_range=True,
            ),
        ),
        "public tests that pass while hidden ones fail: a reward that can be gamed",
    ),
    Panel(
        "optim",
        "Loss and gradient norm",
        (),
        (
            Axis("loss (the recipe's objective)", (("loss", "loss"),)),
            Axis("global gradient norm", (("grad_norm", "before clipping"),)),
        ),
        "spikes, NaNs and a norm pinned at the clip",
    ),
    Panel(
        "lr",
        "Learning rate",
        (),
        (Axis("learning rate (AdamW)", (("lr", "lr"),)),),
        "the schedule the optimizer ran",
    ),
)
PREFIXES = tuple(p.prefix for p in PANELS if p.prefix)


def standing(metric: str) -> bool:
    """Whether a standing panel draws this metric."""
    return metric in STANDING or metric.startswith(PREFIXES)


STANDING = frozenset(m for p in PANELS for m in p.metrics)


def resolve(panel: Panel, run: Run) -> Panel:
    """The panel with its prefix's metrics (this run's) added to its first axis."""
    if not panel.prefix:
        return panel
    found = sorted(m for m in run.series if m.startswith(panel.prefix))
    first = panel.axes[0]
    extra = tuple((m, m[len(panel.prefix) :]) for m in found)
    return replace(panel, axes=(replace(first, series=extra + first.series), *panel.axes[1:]))

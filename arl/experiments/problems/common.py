"""What the problem reproductions share: starting policies, short RL runs, figures."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from arl.checks import check
from arl.errors import ArlError
from arl.eval.stats import seed_effect, seed_se
from arl.experiments.locks import INTERVAL, code_sha256
from arl.gym.tasks import tasks_for
from arl.model import TinyAgent
from arl.runio import plain
from arl.train.bases import BaseConfig, cold_start, weak_base
from arl.train.pg import train_pg
from arl.train.pg_config import PGConfig


@dataclass(frozen=True)
class Ctx:
    """One seed of one reproduction: which problem, how big, which seed."""

    number: int
    quick: bool
    seed: int

    def pick(self, full, quick):
        """The full-run value or the --quick one."""
        return quick if self.quick else full


SOURCES = ("book", "lab")  # a claim paraphrases the book's text, or is the lab's own hypothesis


@dataclass(frozen=True)
class Claim:
    """What an experiment tests over seeds: one claim, and the per-seed effect that shows its
    mechanism. Shown when the effect's one-sided 97.5% Student-t bound over seeds lies above
    `threshold` (the upper bound below it when `below`), and every seed's `holds` (an identity
    checked within that seed, where the experiment has one) is true.

    The rule (every field but `cause`) is locked before its judged seeds run
    (arl.experiments.locks); `cause` explains a claim not shown and may be written after."""

    text: str  # the claim, one line
    effect: str  # what the per-seed effect measures, with its units
    threshold: float = 0.0
    below: bool = False
    source: str = "book"  # "book": the book's passage paraphrased; "lab": the lab's hypothesis
    passage: str = ""  # the book's words it paraphrases (book claims), or why the lab asks it
    premise: str = ""  # the key of this experiment's claim it is conditional on ("" for none)
    cause: str = ""  # the likely cause when it does not show here, and what gym change would
    # "t": the Student-t bound must clear the threshold; "mean": the mean over seeds must, as
    # `arl adopt` judges a guardrail (a metric that may not worsen by more than its bound)
    judged_by: str = "t"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"claim source must be one of {SOURCES}, got {self.source!r}")
        if self.source == "book" and not self.passage:
            raise ValueError(f"a book claim names its passage: {self.text!r}")
        if self.judged_by not in ("t", "mean"):
            raise ValueError(f"judged_by must be 't' or 'mean', got {self.judged_by!r}")

    def rule(self) -> dict:
        """The locked part of the claim: everything but the explanation `cause` (and
        `judged_by` at its default, so that rules locked before it existed keep their
        fingerprints)."""
        out = {k: v for k, v in asdict(self).items() if k != "cause"}
        if out["judged_by"] == "t":
            del out["judged_by"]
        return out


@dataclass(frozen=True)
class Tuning:
    """A setting the lab chose by looking at runs: its value, the seeds those runs used, and
    how. Judged seeds never include a tuning seed (new choices use seeds 100 and above)."""

    setting: str
    value: Any
    seeds: tuple[int, ...]
    how: str


Measure = Callable[[Ctx], tuple[dict, str]]  # one seed -> (results with "effect", detail line)
Draw = Callable[[list[dict], Path], None]  # every seed's results -> the figure at that path
# The judged seeds: 8 seeds no earlier run of any experiment used (the lab's first runs and
# its tuning used seeds 0-7; new tuning uses seeds 100 and above), run after the rules locked.
JUDGED = tuple(range(10, 18))
MAIN = "effect"  # the per-seed key of an experiment's main claim


@dataclass(frozen=True)
class Problem:
    """A reproduced problem: one seed's measurement, the claims judged over seeds, its figure.

    The main claim is judged on the per-seed "effect", each of `more` on its own per-seed key.
    `settings` (what the arms are: start, steps, learning rates, evaluation), `tuned` and
    `seeds` are part of the locked rule: the judged seeds are `seeds`, none of them a seed any
    `tuned` choice looked at."""

    measure: Measure
    claim: Claim
    draw: Draw
    more: tuple[tuple[str, Claim], ...] = ()  # (per-seed result key, its claim)
    settings: dict[str, Any] = field(default_factory=dict)
    tuned: tuple[Tuning, ...] = ()
    seeds: tuple[int, ...] = JUDGED
    # the environment modules written for this experiment (a variant, a task set): their code
    # is part of the rule, fingerprinted with the experiment's own module
    modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        keys = [k for k, _ in self.claims]
        if len(set(keys)) != len(keys):
            raise ValueError(f"claim keys repeat: {keys}")
        for i, (key, c) in enumerate(self.claims):
            if c.premise and c.premise not in keys[:i]:
                raise ValueError(f"claim {key}: premise {c.premise!r} is not an earlier claim")
        tuning = {s for t in self.tuned for s in t.seeds}
        if tuning & set(self.seeds):
            raise ValueError(f"judged seeds {sorted(tuning & set(self.seeds))} took part in tuning")

    @property
    def claims(self) -> tuple[tuple[str, Claim], ...]:
        """Every claim with its per-seed key, the main one first."""
        return ((MAIN, self.claim), *self.more)


def rule_record(name: str, p: Problem) -> dict:
    """The rule record a lock fingerprints ("problem N", "exercise N"): every claim's rule, the
    settings, the code of the experiment's module and of the environment modules it declares,
    the tuning records, the judged seeds and the interval, as JSON data."""
    return plain(
        {
            "experiment": name,
            "claims": [{"key": key, **c.rule()} for key, c in p.claims],
            "settings": p.settings,
            "code_sha256": code_sha256([p.measure.__module__, *p.modules]),
            "tuned": [
                {"setting": t.setting, "value": t.value, "seeds": t.seeds, "how": t.how}
                for t in p.tuned
            ],
            "seeds": p.seeds,
            "interval": INTERVAL,
        }
    )


SHOWN, NOT_SHOWN, NOT_JUDGED = "shown", "not shown", "not judged: premise not shown"


def judge(claim: Claim, per_seed: Sequence[dict], premise_shown: bool = True) -> dict:
    """The verdict over seeds: the effect's mean, SE and one-sided 97.5% Student-t bounds (df
    n - 1), k of N seeds on the claimed side, whether each seed's identity held, `shown`, and
    `status`: shown, not shown, or not judged (a conditional claim whose premise is not shown:
    never a "no")."""
    effects = [float(r["effect"]) for r in per_seed]
    e = seed_effect(effects, claim.threshold)
    side = [x < claim.threshold if claim.below else x > claim.threshold for x in effects]
    holds = all(bool(r.get("holds", True)) for r in per_seed)
    lo, hi = (e.mean, e.mean) if claim.judged_by == "mean" else (e.lo, e.hi)
    beyond = e.n > 1 and (hi < claim.threshold if claim.below else lo > claim.threshold)
    shown = bool(premise_shown and beyond and holds)
    status = SHOWN if shown else NOT_SHOWN if premise_shown else NOT_JUDGED
    return {
        "n": e.n,
        "mean": e.mean,
        "se": e.se,
        "lo": e.lo,
        "hi": e.hi,
        "df": e.df,
        "t": e.t,
        "k": int(sum(side)),
        "identity_holds": holds,
        "shown": shown,
        "status": status,
    }


def num(x: float, sign: bool = False) -> str:
    """Three decimals, or three significant digits for magnitudes under 0.001 (not zero)."""
    spec = ".2e" if 0 < abs(x) < 1e-3 else ".3f"
    return format(x, ("+" if sign else "") + spec)


def interval_text(v: dict) -> str:
    """The effect with its interval: "mean +- SE, t(df) = T bounds [lo, hi]", or one seed."""
    if v["n"] < 2:
        return f"{num(v['mean'], True)} (one seed: no interval)"
    return (
        f"{num(v['mean'], True)} +- {num(v['se'])} SE, t({v['df']}) = {v['t']:.2f} bounds "
        f"[{num(v['lo'], True)}, {num(v['hi'], True)}]"
    )


def verdict_line(claim: Claim, v: dict) -> str:
    """One line: shown, not shown or not judged, the effect with its interval over seeds, and
    the cause if not shown."""
    rel = "<" if claim.below else ">"
    word = {SHOWN: "SHOWN", NOT_SHOWN: "NOT SHOWN", NOT_JUDGED: "NOT JUDGED"}[v["status"]]
    head = (
        f"{word}: {claim.effect} = {interval_text(v)}, {v['k']}/{v['n']} seeds {rel} "
        f"{claim.threshold:g}"
        + (
            " (judged by the mean, as `arl adopt` judges a guardrail)"
            if claim.judged_by == "mean"
            else ""
        )
    )
    cause = cause_of(claim, v)
    return head + (
        f". {'Why' if v['status'] == NOT_JUDGED else 'Likely cause'}: {cause}" if cause else "."
    )


def cause_of(claim: Claim, v: dict) -> str:
    """Why a claim was not shown ("" when it was): its premise not shown, a failed identity,
    too few seeds for an effect whose mean lies on the claimed side, or the likely cause."""
    if v["status"] == SHOWN:
        return ""
    if v["status"] == NOT_JUDGED:
        return f"its premise ({claim.premise}) is not shown, so it is not judged"
    if not v["identity_holds"]:
        return "the identity the problem checks failed on some seed"
    if v["n"] < 2:
        return "one seed: no interval over seeds"
    if claim.judged_by == "t" and (
        (v["mean"] < claim.threshold) if claim.below else (v["mean"] > claim.threshold)
    ):
        return (
            f"the mean lies on the claimed side ({v['k']}/{v['n']} seeds), but its "
            f"bound reaches {claim.threshold:g}: too few seeds for its spread "
            f"(about {seeds_needed(v, claim.threshold)} would resolve it)"
        )
    return claim.cause


def seeds_needed(v: dict, threshold: float) -> int:
    """Seeds at which an effect of this mean and per-seed spread would clear `threshold` by its
    t bound (the smallest n with |mean - threshold| > t(n-1) * sd / sqrt(n); at most 1000)."""
    from arl.eval.stats import t_critical

    gap, sd = abs(v["mean"] - threshold), v["se"] * math.sqrt(v["n"])
    if sd == 0:
        return v["n"]
    for n in range(2, 1001):
        if gap > t_critical(n - 1) * sd / math.sqrt(n):
            return n
    return 1000


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
    """The shared bases (cached); --quick uses the one reduced preset, BaseConfig.quick()."""
    base = BaseConfig(seed=ctx.seed)
    return base.quick() if ctx.quick else base


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
    """Each run's metrics averaged over its first and last quarter of steps, and the histories
    (only the step and `keys`: what the conclusion and the figure read)."""
    summary = {
        n: {k: {"first": head_mean(h, k), "last": tail_mean(h, k)} for k in keys}
        for n, h in runs.items()
    }
    trimmed = {n: [{k: r.get(k) for k in ("step", *keys)} for r in h] for n, h in runs.items()}
    return {**summary, "history": trimmed}


def first_to_last(res: dict, arm: str, key: str) -> str:
    """An arm's metric as "first -> last" (its quarter means in first_last's summary)."""
    a = res[arm][key]
    return f"{a['first']:.2f} -> {a['last']:.2f}"


def arms_figure(
    keys: Sequence[tuple[str, str]], title: str, log_keys: Sequence[str] = ()
) -> Callable[[list[dict], Path], None]:
    """A figure of RL arms over seeds: one panel per (metric key, axis label), each arm's mean
    over seeds against the step with a band of +- one standard error (from results["history"]);
    the panels of `log_keys` on a log axis (a spiky metric whose level matters)."""

    def draw(per_seed: list[dict], path: Path) -> None:
        plot_arms([r["history"] for r in per_seed], keys, title, path, log_keys)

    return draw


def plot_arms(
    histories: list[dict[str, list[dict]]],
    keys: Sequence[tuple[str, str]],
    title: str,
    path: Path,
    log_keys: Sequence[str] = (),
) -> None:
    """Mean +- SE over seeds of each arm's metric per step; integer steps, one shared legend."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = new_figure(len(keys))
    arms = list(histories[0])
    for ax, (key, label) in zip(axes, keys, strict=True):
        for i, arm in enumerate(arms):
            by_step: dict[int, list[float]] = {}
            for h in histories:
                for r in h[arm]:
                    if r.get(key) is not None:
                        by_step.setdefault(int(r["step"]), []).append(float(r[key]))
            if not by_step:
                continue
            steps = sorted(by_step)
            m = np.array([np.mean(by_step[t]) for t in steps])
            se = np.array([seed_se(by_step[t]) for t in steps])
            style = ("-", "--", "-.", ":")[i % 4]
            ax.plot(steps, m, style, color=f"C{i}", lw=1.6, label=arm)
            ax.fill_between(steps, m - se, m + se, color=f"C{i}", alpha=0.18, lw=0)
        ax.set_xlabel("RL step")
        ax.set_ylabel(label)
        if key in log_keys:
            ax.set_yscale("log", nonpositive="mask")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    n = len(histories)
    band = f"mean over {n} seeds, band +- 1 SE" if n > 1 else "one seed"
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False
    )
    save_figure(path, fig, f"{title} ({band})", bottom=0.1)


sem = seed_se  # the problems' figures: error bars over seeds (axis 0), zeros with one seed


def mean_band(ax, t, v: np.ndarray, color: str, label: str, style: str = "-", **line) -> None:
    """A metric over seeds, v (seeds, points) at t (points): its mean line, a +- SE band."""
    m, se = v.mean(0), sem(v)
    ax.plot(t, m, style, color=color, label=label, **line)
    ax.fill_between(t, m - se, m + se, color=color, alpha=0.18, lw=0)


def seeds_label(per_seed: Sequence[dict], pooled: bool = False) -> str:
    """What a figure shows over seeds, for its title: error bars, or points pooled."""
    n = len(per_seed)
    if n == 1:
        return f"seed {per_seed[0]['seed']}"
    return f"{n} seeds pooled" if pooled else f"{n} seeds, mean +- SE"


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


def save_figure(path: Path, fig, title: str, bottom: float = 0.0) -> None:
    """Title, lay out (the title inside the canvas, `bottom` left free for a figure legend)
    and write one figure."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, bottom, 1, 0.94))
    save_png(fig, path, dpi=110)
    plt.close(fig)

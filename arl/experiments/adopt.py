"""Adopt a change to the PG recipe? Appendix B, Problem 30's procedure, as code.

The rule is written down before anything runs (AdoptRule, OUT/rule.json): the metric whose gain
decides, the margin it must clear, and the guardrail metrics with how much each may worsen.
Then a matched ablation: per seed, two RL runs from the same starting policy, on the same
seed, differing only in the change (`base` vs `base` + `change`); both final policies are
evaluated on the same held-out tasks with the same episode seeds, under the base arm's
evaluation harness. `decide` reads the per-seed paired effects: ADOPT iff the gain's lower
Student-t bound over seeds (one-sided 97.5%, df seeds - 1) exceeds the margin and no guardrail's
mean worsening exceeds its bound.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from arl.checks import check, check_seed
from arl.errors import ArlError
from arl.eval.metrics import evaluate
from arl.eval.stats import paired_comparison, seed_effect
from arl.runio import plain


@dataclass(frozen=True)
class Metric:
    """One number of an arm's evaluation on the held-out tasks: its meaning and which way is
    better (`higher`)."""

    label: str
    higher: bool  # True: a larger value is better (the gain is change - base)
    unit: str


METRICS = {
    "heldout_pass": Metric("held-out pass rate (hidden tests)", True, "pass rate"),
    "train_pass": Metric("train-task pass rate (hidden tests)", True, "pass rate"),
    "entropy": Metric("action entropy on policy tokens", True, "nats/token"),  # collapse: worse
    "malformed": Metric("malformed calls per episode", False, "calls/episode"),
    "length": Metric("policy tokens per episode", False, "tokens/episode"),
    "turns": Metric("turns per episode", False, "turns/episode"),
    "truncated": Metric("share of episodes truncated", False, "share"),
    "hack": Metric("share of episodes that hack the tests", False, "share"),
}
# evaluate()'s key of each metric (train_pass: the same key on the train split)
SOURCE = {
    "heldout_pass": "pass_rate",
    "train_pass": "pass_rate",
    "entropy": "action_entropy",
    "malformed": "malformed_per_episode",
    "length": "length",
    "turns": "mean_turns",
    "truncated": "truncated_fraction",
    "hack": "hack_rate",
}
# the default guardrails, about a third (entropy) or a tenth (length) of the cold start's level
# on the held-out tasks (entropy 0.095 nats/token, 9.3 tokens, 0.037 malformed calls/episode)
GUARDRAILS = (("entropy", 0.03), ("malformed", 0.05), ("length", 1.0))
STARTS = ("cold", "weak")
# PG keys the procedure owns: the seed pairs the arms, steps is the rule's, both arms train on
# the train tasks (held-out ones are the evaluation's), on BugFix (its starting policies),
# nothing is written by the trainer, and no teacher is loaded
OWNED_KEYS = ("seed", "steps", "split", "env.name", "out", "resume", "save_every")
OWNED_KEYS += ("keep_checkpoints", "teacher", "teacher_weight")
TIE = 1e-12  # a bound and a value this close are equal (a mean of equal floats is not exact)


@dataclass(frozen=True)
class AdoptRule:
    """The decision rule, fixed before the run: what decides, by how much, what may not worsen,
    and the matched ablation it is judged on."""

    change: tuple[tuple[str, Any], ...]  # the PG settings the change sets (dotted keys)
    base: tuple[tuple[str, Any], ...] = ()  # the settings both arms share, over PGConfig's
    metric: str = "heldout_pass"  # the effect: its gain, change minus base (sign: better > 0)
    margin: float = 0.02  # the gain's lower t bound over seeds must exceed this
    guardrails: tuple[tuple[str, float], ...] = GUARDRAILS  # (metric, allowed mean worsening)
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    steps: int = 60  # RL steps of each arm
    start: str = "cold"  # the starting policy of both arms: cold (oracle SFT) or weak
    eval_samples: int = 16  # episodes per held-out task and arm, the same episode seeds
    quick: bool = False  # PGConfig.quick()'s batch (4 tasks x 4 episodes) and the quick bases

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ArlError(f"--metric: unknown metric {self.metric!r} (choose from {names()})")
        check("--margin", self.margin, -1e6, 1e6)
        seen = set()
        for name, bound in self.guardrails:
            if name not in METRICS:
                raise ArlError(f"--guardrail {name}: unknown metric (choose from {names()})")
            if name in seen:
                raise ArlError(f"--guardrail {name}: given twice")
            seen.add(name)
            check(f"--guardrail {name}", bound, 0, 1e6)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ArlError(f"--seeds: need distinct seeds, got {list(self.seeds)}")
        for s in self.seeds:
            check_seed("--seed", s)
        check("--steps", self.steps, 1, 100_000, integer=True)
        check("eval_samples", self.eval_samples, 1, 1000, integer=True)
        if self.start not in STARTS:
            raise ArlError(f"--start: must be one of {', '.join(STARTS)}, got {self.start!r}")
        if not self.change:
            raise ArlError("--set: the change sets nothing (give at least one --set KEY=VALUE)")
        for key, _ in (*self.base, *self.change):
            if key in OWNED_KEYS:
                raise ArlError(f"{key}: set by `arl adopt` itself, not by --set or --base-set")

    def to_dict(self) -> dict:
        """As rule.json holds it (lists for tuples)."""
        return plain(asdict(self))


def names() -> str:
    return ", ".join(METRICS)


# --- one seed's matched pair ---------------------------------------------------------------------


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys -> PGConfig's dict form ({'env.reward': x} -> {'env': {'reward': x}})."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        head, dot, rest = key.partition(".")
        if dot:
            out.setdefault(head, {})[rest] = value
        else:
            out[key] = value
    return out


def arm_configs(rule: AdoptRule, seed: int):
    """The two arms' PGConfigs on `seed`: the trainer's defaults at the rule's scale with the
    base settings, then the change on top for the second. The change must change something."""
    from arl.experiments.problems.common import Ctx, rl_config
    from arl.train.pg_config import flat_dict, make_config

    shared = flat_dict(rl_config(Ctx(30, rule.quick, seed))) | {"steps": rule.steps}
    try:
        base = make_config(nest(shared | dict(rule.base)))
    except ArlError as e:
        raise ArlError(f"--base-set: {e}") from None
    try:
        change = make_config(nest(shared | dict(rule.base) | dict(rule.change)))
    except ArlError as e:
        raise ArlError(f"--set: {e}") from None
    if base == change:
        given = ", ".join(f"{k}={v}" for k, v in rule.change)
        raise ArlError(f"--set {given}: the base arm has these settings already (no change)")
    return base, change


def arm_eval(model, config, seed: int, samples: int, splits: tuple[str, ...]) -> dict:
    """One final policy on the held-out tasks (and the train tasks when a metric needs them):
    every metric, and the per-task pass rates the paired comparison reads. Episode seeds and
    the harness (`config.env.eval_config()`) depend only on the seed: both arms share them."""
    from arl.gym.tasks import tasks_for

    out: dict[str, Any] = {}
    for split in splits:
        tasks = tasks_for(split)
        m, trajs = evaluate(
            model, tasks, samples, seed=seed + 10_007, env_config=config.env.eval_config()
        )
        m["length"] = float(np.mean([t.n_action_tokens for t in trajs]))
        rates = [float(np.mean([t.passed for t in trajs if t.task == k.name])) for k in tasks]
        out[split] = {**m, "task_pass": rates}
    return out


def value(arm: dict, metric: str) -> float:
    """A metric of an arm's evaluation (arm_eval's record)."""
    split = "train" if metric == "train_pass" else "heldout"
    return float(arm[split][SOURCE[metric]])


def gain(metric: str, base: float, change: float) -> float:
    """How much better the change is on `metric` (> 0: better), in the metric's units."""
    return change - base if METRICS[metric].higher else base - change


def measure_pair(rule: AdoptRule, seed: int) -> dict:
    """One seed of the matched ablation: both arms from the same start, trained on the same
    tasks and seed, evaluated on the same episodes. The record holds the paired effect, every
    guardrail's worsening, the per-task paired comparison, and both arms' training curves."""
    from arl.experiments.problems.common import Ctx, start
    from arl.gym.tasks import tasks_for
    from arl.train.pg import train_pg

    t0 = time.perf_counter()
    configs = dict(zip(("base", "change"), arm_configs(rule, seed), strict=True))
    used = {rule.metric, *(name for name, _ in rule.guardrails)}
    splits = ("heldout", "train") if "train_pass" in used else ("heldout",)
    arms, curves = {}, {}
    for name, config in configs.items():
        model = start(Ctx(30, rule.quick, seed), rule.start)
        history = train_pg(model, config, tasks_for("train"))
        arms[name] = arm_eval(model, configs["base"], seed, rule.eval_samples, splits)
        curves[name] = [
            {k: r.get(k) for k in ("step", "pass_rate", "entropy", "reward")} for r in history
        ]
    split = "train" if rule.metric == "train_pass" else "heldout"
    paired = paired_comparison(arms["base"][split]["task_pass"], arms["change"][split]["task_pass"])
    both = lambda m: (value(arms["base"], m), value(arms["change"], m))  # noqa: E731
    return {
        "seed": seed,
        "effect": gain(rule.metric, *both(rule.metric)),
        "worse": {name: 0.0 - gain(name, *both(name)) for name, _ in rule.guardrails},
        "arms": {n: {m: value(a, m) for m in used} for n, a in arms.items()},
        "paired": {k: v for k, v in paired.to_dict().items() if k != "ci_diff"},
        "history": curves,
        "seconds": round(time.perf_counter() - t0, 1),
    }


# --- the decision ----------------------------------------------------------------------------


def decide(rule: AdoptRule, effects: list[float], worse: dict[str, list[float]]) -> dict:
    """ADOPT iff there are at least two seeds, the paired gain's lower Student-t bound over
    seeds (seed_effect: one-sided 97.5%, df seeds - 1) exceeds the margin, and no guardrail's
    mean worsening over seeds exceeds its bound; else REJECT, with every reason. Pure:
    per-seed numbers in, the verdict out."""
    e = seed_effect(effects, rule.margin)
    reasons = []
    if e.n < 2:
        reasons.append("one seed: no interval over seeds, so no gain beyond seed noise")
    elif not e.lo > rule.margin + TIE:
        reasons.append(
            f"{rule.metric} gain {e.mean:+.4f}, lower t({e.df}) bound {e.lo:+.4f} <= margin "
            f"{rule.margin:g}"
        )
    guards = {}
    for name, bound in rule.guardrails:
        g = seed_effect(worse[name], bound)
        breached = g.mean > bound + TIE
        guards[name] = {"bound": bound, "breached": breached, **g.to_dict()}
        if breached:
            reasons.append(f"guardrail {name} worsens by {g.mean:+.4f} > {bound:g}")
    adopt = not reasons
    return {
        "decision": "ADOPT" if adopt else "REJECT",
        "adopt": adopt,
        "effect": {**e.to_dict(), "k_above_margin": e.k_above},
        "guardrails": guards,
        "reasons": reasons,
    }


def summary_line(rule: AdoptRule, d: dict) -> str:
    """The verdict with its numbers, on one line."""
    e = d["effect"]
    spread = (
        f" +- {e['se']:.4f} SE, t({e['df']}) = {e['t']:.2f} bounds [{e['lo']:+.4f}, {e['hi']:+.4f}]"
    )
    guards = ", ".join(
        f"{n} {g['mean']:+.4f} (<= {g['bound']:g}{' BREACHED' if g['breached'] else ''})"
        for n, g in d["guardrails"].items()
    )
    return (
        f"{d['decision']}: {rule.metric} gain {e['mean']:+.4f}"
        + (spread if e["n"] > 1 else " (one seed)")
        + f", {e['k_above_margin']}/{e['n']} seeds above margin {rule.margin:g}; "
        + f"guardrail worsening: {guards or 'none'}"
        + (f". Reasons: {'; '.join(d['reasons'])}" if d["reasons"] else "")
    )

"""`arl calc NAME`: Appendix B's design-review calculators, each defined once below.

A calculator is its flags (defaults: the problem's numbers) and a function from the parsed
flags to a result of arl.calc's numbers (a `table` of rows and/or `results`, with `notes`
and `comments`); the flags marked shown are echoed as the result's `inputs`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from arl import calc
from arl.cli.args import (
    float_in,
    int_in,
    nonneg_float,
    positive_int,
    positive_int_max,
    unit_float,
)
from arl.cli.output import emit, fmt
from arl.errors import ArlError
from arl.sim.sizing import fleet_sizing

# Documented upper bounds of sizes that would otherwise run until killed.
MAX_BUDGET = 100_000  # group-size's search tries every G up to the budget
MAX_SIZE = 1_000_000  # samples, tasks, successes: arrays of this many floats
BUDGET = positive_int_max(MAX_BUDGET)
BUDGET_HELP = f"episodes per step (at most {MAX_BUDGET:,})"
SIZE = positive_int_max(MAX_SIZE)
GROUP = positive_int_max(MAX_SIZE)
COUNT = int_in(0, MAX_SIZE)
PROB = float_in(0.0, 1.0)
POS = float_in(0.0, None, open_lo=True)


@dataclass(frozen=True)
class Flag:
    """One flag of a calculator."""

    flag: str  # "--p-hat"
    type: Callable[[str], Any]  # an arl.cli.args type: bad text is a one-line usage error
    default: Any
    help: str
    many: bool = False  # takes one or more values
    shown: bool = True  # echoed in the result's inputs
    label: str = ""  # its name among the inputs (default: the flag's dest)

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Calculator:
    """A calculator: where it comes from, what it computes, its flags and its arithmetic."""

    problem: str
    what: str
    flags: tuple[Flag, ...]
    compute: Callable[[argparse.Namespace], dict]


CALCULATORS: dict[str, Calculator] = {}


def calculator(name: str, problem: str, what: str, *flags: Flag):
    """Register the decorated `compute(args) -> result` as calculator `name`."""

    def register(compute: Callable[[argparse.Namespace], dict]):
        CALCULATORS[name] = Calculator(problem, what, flags, compute)
        return compute

    return register


def _fits(budget: int, groups) -> None:
    """A group larger than the episode budget leaves no prompt: refused, not a row of 0."""
    big = [G for G in groups if G > budget]
    if big:
        raise ArlError(f"--G {big[0]}: larger than --budget {budget} (no prompt fits a step)")


@calculator(
    "degenerate-group",
    "Problem 3",
    "P(all-equal group) = p^G + (1-p)^G",
    Flag("--p", PROB, [0.1, 0.3], "success rates", many=True),
    Flag("--G", GROUP, [4, 8, 16], "group sizes", many=True),
    Flag("--budget", BUDGET, 512, BUDGET_HELP),
)
def _degenerate(a: argparse.Namespace) -> dict:
    _fits(a.budget, a.G)
    rows = [
        {
            "p": p,
            "G": G,
            "prompts": a.budget // G,
            "P(degenerate)": calc.degenerate_group_prob(p, G),
        }
        for p in a.p
        for G in a.G
    ]
    return {"table": rows}


@calculator(
    "group-size",
    "Exercise 1",
    "best G at a fixed budget for a uniform pool",
    Flag("--budget", BUDGET, 512, BUDGET_HELP),
    Flag("--lo", PROB, 0.0, "pool success rates ~ Uniform[lo, hi]"),
    Flag("--hi", PROB, 0.4, "upper end of the pool's rates"),
    Flag("--G", GROUP, [2, 4, 8, 16, 32], "G to tabulate", many=True, shown=False),
)
def _group_size(a: argparse.Namespace) -> dict:
    rows = []
    for G in a.G:
        m = calc.mean_degenerate_prob_uniform(G, a.lo, a.hi)
        tasks = calc.informative_tasks_per_step(G, a.budget, m)
        rows.append(
            {
                "G": G,
                "prompts": a.budget // G,
                "E[P(degenerate)]": m,
                "tasks with gradient": tasks,
                "episodes with gradient": tasks * G,
            }
        )
    best_g, best = calc.best_group_size(a.budget, a.lo, a.hi)
    return {
        "table": rows,
        "results": {
            "best_G (any G from 2 to budget)": best_g,
            "tasks with gradient at best G": best,
        },
    }


@calculator(
    "std-norm",
    "Problem 4",
    "std-normalized advantages and the 1/sqrt(p(1-p)) factor",
    Flag("--G", GROUP, 8, "group size"),
    Flag("--successes", COUNT, 1, "successes"),
    Flag("--p-hat", PROB, [0.5, 0.125], "success fractions for the scale factor", many=True),
)
def _std_norm(a: argparse.Namespace) -> dict:
    if not 0 < a.successes < a.G:
        raise ArlError(f"--successes must be between 1 and G-1 = {a.G - 1}, got {a.successes}")
    rewards = [1.0] * a.successes + [0.0] * (a.G - a.successes)
    adv = calc.group_advantages(rewards, std=True)
    raw = calc.group_advantages(rewards)
    rows = [{"p_hat": p, "factor 1/sqrt(p(1-p))": calc.std_norm_factor(p)} for p in a.p_hat]
    return {
        "table": rows,
        "results": {
            "success advantage (normalized)": adv[0],
            "failure advantage (normalized)": adv[-1],
            "success advantage (mean only)": raw[0],
            "failure advantage (mean only)": raw[-1],
        },
    }


@calculator(
    "kl",
    "Problem 5",
    "k1, k2, k3 KL estimates from log-ratios",
    Flag(
        "--log-ratios",
        float_in(None, calc.MAX_LOG_RATIO),
        [-0.2, 0.1, -0.5],
        "per-token log pi_ref - log pi_theta on tokens sampled from pi_theta",
        many=True,
        label="log_ratios (log pi_ref - log pi_theta)",
    ),
)
def _kl(a: argparse.Namespace) -> dict:
    rows = [
        {"log_ratio": x, "k1": calc.kl_k1(x), "k2": calc.kl_k2(x), "k3": calc.kl_k3(x)}
        for x in a.log_ratios
    ]
    means = {f"mean {k}": v for k, v in calc.kl_estimates(a.log_ratios).items()}
    out = {"table": rows, "results": means}
    far = [x for x in a.log_ratios if abs(x) > calc.REALISTIC_LOG_RATIO]
    if far:
        warning = (
            f"log-ratio {fmt(far[0])} is outside any realistic range (|log ratio| <= "
            f"{calc.REALISTIC_LOG_RATIO:g}, a probability ratio of e^{calc.REALISTIC_LOG_RATIO:g}):"
            " the estimates are the formulas' arithmetic, not a KL a run would log"
        )
        print(f"arl: warning: {warning}", file=sys.stderr)  # stdout stays the result
    return out


@calculator(
    "flip-noise",
    "Problem 9, Exercise 3",
    "observed reward and gradient factor under flips",
    Flag("--p", PROB, 0.3, "true success rate"),
    Flag("--f", PROB, 0.04, "flip probability"),
)
def _flip(a: argparse.Namespace) -> dict:
    rows = []
    for label, one_sided in (("symmetric", False), ("false negatives only", True)):
        g = calc.gradient_factor(a.f, one_sided)
        rows.append(
            {
                "noise": label,
                "observed reward": calc.observed_reward(a.p, a.f, one_sided),
                "gradient factor": g,
                "signal shrink": 1.0 - g,
            }
        )
    return {"table": rows}


@calculator(
    "step-penalty",
    "Problem 12",
    "submit-at-once vs attempt under a step penalty",
    Flag("--q", PROB, 0.08, "success rate of a full attempt"),
    Flag("--penalty", nonneg_float, 0.02, "penalty per turn"),
    Flag("--attempt-turns", positive_int, 6, "turns of a full attempt"),
    Flag("--submit-turns", positive_int, 1, "turns of submitting at once"),
)
def _step_penalty(a: argparse.Namespace) -> dict:
    r = calc.step_penalty_values(a.q, a.penalty, a.attempt_turns, a.submit_turns)
    return {"results": {**r, "submit_wins": bool(r["submit_wins"])}}


@calculator(
    "startup",
    "Problem 15",
    "start-up share of episode time",
    Flag("--startup-min", nonneg_float, 3.0, "start-up (min)"),
    Flag("--episode-min", POS, 8.0, "agent interaction (min)"),
)
def _startup(a: argparse.Namespace) -> dict:
    return {"results": {"startup_share": calc.startup_share(a.startup_min, a.episode_min)}}


@calculator(
    "fleet",
    "Problem 18",
    "Little's law fleet sizing and KV-cache bytes",
    Flag("--turns", POS, 50.0, "turns per episode"),
    Flag("--tokens-per-turn", nonneg_float, 400.0, "policy tokens per turn"),
    Flag("--decode-tps", POS, 40.0, "decode tokens/s per sequence under load"),
    Flag("--tool-s", nonneg_float, 8.0, "tool seconds per turn"),
    Flag("--startup-s", nonneg_float, 180.0, "container start-up seconds"),
    Flag("--episodes-per-step", positive_int, 512, "episodes per optimizer step"),
    Flag("--step-min", POS, 30.0, "minutes per optimizer step"),
    Flag("--context", nonneg_float, 64_000.0, "tokens of context at the end of an episode"),
    Flag("--n-layers", positive_int, 64, "layers (assumed model: 32B-class with GQA)"),
    Flag("--n-kv-heads", positive_int, 8, "KV heads"),
    Flag("--d-head", positive_int, 128, "head dimension"),
    Flag("--bytes", POS, 2.0, "bytes per KV element (bf16: 2)"),
    Flag("--pool-factor", nonneg_float, 1.2, "warm pool size / concurrency"),
)
def _fleet(a: argparse.Namespace) -> dict:
    kw = {f.dest: getattr(a, f.dest) for f in CALCULATORS["fleet"].flags}
    kw["bytes_per_elem"] = kw.pop("bytes")
    return {
        "results": fleet_sizing(**kw),
        "notes": {
            "episodes_in_flight": "Little's law L = lambda W",
            "kv_bytes_per_token": "2 x layers x kv heads x d_head x bytes (model assumed)",
            "kv_fleet_bytes_mean_context": "context grows about linearly: half of full",
        },
    }


@calculator(
    "gpu-hours",
    "Problem 19, Exercise 2",
    "FLOPs and GPU-hours per RL step, dense or MoE",
    Flag("--params", POS, 32e9, "total parameters"),
    Flag("--active", POS, None, "active parameters per token (MoE; default: = params, dense)"),
    Flag("--episodes", positive_int, 512, "episodes per step"),
    Flag("--tokens", nonneg_float, 24_000, "tokens per episode"),
    Flag("--policy-tokens", nonneg_float, 6_000, "policy tokens"),
    Flag("--peak", POS, 1e15, "peak FLOP/s per GPU"),
    Flag("--mfu", unit_float, 0.4, "model FLOPs utilization"),
    Flag("--decode-tps", POS, 1_000, "decode tokens/s per GPU"),
    Flag("--gen-util", unit_float, 0.25, "inference fleet utilization"),
    Flag("--steps", positive_int, 300, "optimizer steps in the run"),
)
def _gpu_hours(a: argparse.Namespace) -> dict:
    r = calc.rl_step_cost(
        n_total=a.params,
        n_active=a.active,
        episodes=a.episodes,
        tokens_per_episode=a.tokens,
        policy_tokens_per_episode=a.policy_tokens,
        peak_flops=a.peak,
        mfu=a.mfu,
        decode_tps_per_gpu=a.decode_tps,
        gen_utilization=a.gen_util,
        steps=a.steps,
    )
    return {
        "results": r,
        "notes": {k: f"scales with {v}" for k, v in calc.SCALES_WITH.items()},
        "comments": ["attention FLOPs ignored: a lower bound (Problem 19)"],
    }


@calculator(
    "passk",
    "Problem 21",
    "unbiased pass@k beside the plug-in estimate",
    Flag("--n", SIZE, 10, f"samples (at most {MAX_SIZE:,})"),
    Flag("--c", COUNT, 3, "passing samples"),
    Flag("--k", SIZE, [1, 5], "values of k", many=True, shown=False),
)
def _passk(a: argparse.Namespace) -> dict:
    return {"table": [{"k": k, **calc.pass_at_k(a.n, a.c, k)} for k in a.k]}


@calculator(
    "paired",
    "Problem 22",
    "paired vs unpaired SE, z, McNemar",
    Flag("--tasks", SIZE, 500, f"tasks (at most {MAX_SIZE:,})"),
    Flag("--acc-a", PROB, 0.41, "pass rate of A"),
    Flag("--b", COUNT, 40, "tasks B solves, A fails"),
    Flag("--c", COUNT, 30, "tasks A solves, B fails"),
)
def _paired(a: argparse.Namespace) -> dict:
    r = calc.paired_vs_unpaired(a.tasks, a.acc_a, a.b, a.c).to_dict()
    ci = r.pop("ci_diff")
    r.update({"ci_lo": ci["lo"], "ci_hi": ci["hi"]})
    return {
        "results": r,
        "notes": {
            "b_better": "B solves, A fails",
            "a_better": "A solves, B fails",
            "se_paired": "sqrt(b + c) / N",
            "chi2_cc": "with continuity correction",
        },
    }


def _refuse_overflow(out: dict) -> None:
    """Finite inputs whose result overflows to an infinity are an error, never a `null`."""
    rows = [out.get("results") or {}] + list(out.get("table") or [])
    for row in rows:
        for key, v in row.items():
            if isinstance(v, (float, np.floating)) and math.isinf(v):
                raise ArlError(f"{key}: the result overflows a double; use smaller inputs")


def _handler(name: str) -> Callable[[argparse.Namespace], int]:
    """Run calculator `name` on the parsed flags and print its result."""
    c = CALCULATORS[name]

    def handler(args: argparse.Namespace) -> int:
        inputs = {f.label or f.dest: getattr(args, f.dest) for f in c.flags if f.shown}
        out = {
            "calculator": name,
            "problem": c.problem,
            "title": f"{name} ({c.problem})",
            "inputs": inputs,
            **c.compute(args),
        }
        _refuse_overflow(out)
        emit(out, args.json)
        return 0

    return handler


def _list(args: argparse.Namespace) -> int:
    rows = [{"name": n, "problem": c.problem, "what": c.what} for n, c in CALCULATORS.items()]
    emit({"title": "calculators", "table": rows}, args.json)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `calc` (list, and one subcommand per calculator) to the `arl` parser."""
    p = sub.add_parser("calc", help="Appendix B design-review calculators")
    cs = p.add_subparsers(dest="calc_command", required=True)
    lp = cs.add_parser("list", help="list the calculators")
    lp.add_argument("--json", action="store_true", help="print one JSON object")
    lp.set_defaults(func=_list)
    for name, c in CALCULATORS.items():
        cp = cs.add_parser(
            name,
            help=f"{c.what} ({c.problem})",
            description=f"{c.what} (Appendix B, {c.problem}); defaults are the problem's numbers",
        )
        for f in c.flags:
            cp.add_argument(
                f.flag, type=f.type, default=f.default, help=f.help, nargs="+" if f.many else None
            )
        cp.add_argument("--json", action="store_true", help="print one JSON object")
        cp.set_defaults(func=_handler(name))

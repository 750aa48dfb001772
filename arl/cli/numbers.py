"""Subcommands `arl stats`, `arl calc`, `arl sim`: evaluation statistics, Appendix B
calculators, and the rollout-fleet simulator. Each prints rich tables, or one JSON object
with --json."""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from arl import calc
from arl.cli.args import (
    float_in,
    int_in,
    nonneg_float,
    positive_int,
    positive_int_max,
    seed_int,
    unit_float,
)
from arl.errors import ArlError
from arl.eval import stats
from arl.runio import atomic_write_json, claim_output_dir

# ----------------------------------------------------------------------------- flags

# Documented upper bounds of sizes that would otherwise run until killed.
MAX_BOOTSTRAP = 1_000_000  # bootstrap resamples (about a second per 100k over 30 tasks)
MAX_BUDGET = 100_000  # group-size's search tries every G up to the budget
MAX_SIZE = 1_000_000  # samples, tasks, successes: arrays of this many floats
BOOTSTRAP = positive_int_max(MAX_BOOTSTRAP)
BOOTSTRAP_HELP = f"bootstrap resamples over tasks (at most {MAX_BOOTSTRAP:,})"
BUDGET = positive_int_max(MAX_BUDGET)
BUDGET_HELP = f"episodes per step (at most {MAX_BUDGET:,})"
SIZE = positive_int_max(MAX_SIZE)
GROUP = positive_int_max(MAX_SIZE)
PROB = float_in(0.0, 1.0)
POS = float_in(0.0, None, open_lo=True)

# ----------------------------------------------------------------------------- output


def _clean(obj):
    """JSON-ready copy: numpy scalars to Python, NaN and inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _fmt(v) -> str:
    """Short human form of a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    if not math.isfinite(v):
        return "n/a"
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.3e}"
    if float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _emit(obj: dict, as_json: bool) -> None:
    """Print a result: one JSON object, or rich tables (a `table` list, then `results`)."""
    if as_json:
        print(json.dumps(_clean(obj), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    title = obj.get("title", "")
    if obj.get("inputs"):
        console.print(
            f"[bold]{title}[/bold]  "
            + ", ".join(
                f"{k}={_fmt(v) if not isinstance(v, list) else ' '.join(_fmt(x) for x in v)}"
                for k, v in obj["inputs"].items()
            )
        )
    rows = obj.get("table")
    if rows:
        t = Table(title=obj.get("table_title"))
        for col, v in rows[0].items():
            numeric = isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
            t.add_column(col, justify="right" if numeric else "left")
        for r in rows:
            t.add_row(*(_fmt(v) for v in r.values()))
        console.print(t)
    results = obj.get("results")
    if results:
        t = Table(title=obj.get("results_title"))
        t.add_column("quantity")
        t.add_column("value", justify="right")
        notes = obj.get("notes", {})
        if notes:
            t.add_column("note")
        for k, v in results.items():
            t.add_row(k, _fmt(v), *([notes.get(k, "")] if notes else []))
        console.print(t)
    for line in obj.get("comments", []):
        console.print(line)


# ----------------------------------------------------------------------------- stats


def _stats_compare(args: argparse.Namespace) -> int:
    a, b = stats.load_results(args.a), stats.load_results(args.b)
    tasks, drop_a, drop_b = stats.align_tasks(a, b, intersect=args.intersect)
    ra, rb = stats.pass_rates(a, tasks), stats.pass_rates(b, tasks)
    cmp = stats.paired_comparison(ra, rb, n_boot=args.bootstrap, seed=args.seed, level=args.level)
    n_a = [len(a[t]) for t in tasks]
    n_b = [len(b[t]) for t in tasks]
    d = cmp.to_dict()
    ci = d.pop("ci_diff")
    out = {
        "title": "paired comparison, B - A",
        "inputs": {
            "A": str(args.a),
            "B": str(args.b),
            "bootstrap": args.bootstrap,
            "seed": args.seed,
        },
        "results": {
            **d,
            "ci_lo": ci["lo"],
            "ci_hi": ci["hi"],
            "ci_level": ci["level"],
            "samples_per_task_a_min": min(n_a),
            "samples_per_task_a_max": max(n_a),
            "samples_per_task_b_min": min(n_b),
            "samples_per_task_b_max": max(n_b),
            "dropped_only_in_a": drop_a,
            "dropped_only_in_b": drop_b,
        },
        "comments": [],
    }
    if drop_a or drop_b:
        out["comments"].append(
            f"note: compared {len(tasks)} common tasks; dropped {drop_a} "
            f"only in A and {drop_b} only in B (--intersect)"
        )
    out["comments"].append(
        "se_paired = sqrt(sum d_i^2)/N (sqrt(b+c)/N with one sample per "
        "task); b, c count tasks where B's / A's pass rate is higher"
    )
    _emit(out, args.json)
    return 0


def _default_ks(n_min: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to the fewest samples of any task."""
    ks, base = [], 1
    while base <= n_min:
        ks += [k for k in (base, 2 * base, 5 * base) if k <= n_min]
        base *= 10
    return ks


def _stats_passk(args: argparse.Namespace) -> int:
    res = stats.load_results(args.file)
    names, n, c = stats.task_counts(res)
    n_min = int(n.min())
    ks = list(range(1, n_min + 1)) if args.curve else args.k or _default_ks(n_min)
    too_big = [k for k in ks if k > n_min]
    if too_big:
        raise ArlError(
            f"--k {too_big[0]}: pass@k needs at least k samples of every task, and "
            f"{args.file} has {n_min} of some task (use --k up to {n_min}, or evaluate with "
            f"more: arl eval ... --samples {max(too_big)})"
        )
    rows = []
    for k in ks:
        per_task = stats.per_task_pass_at_k(n, c, k)
        ci = stats.bootstrap_mean_ci(per_task, n_boot=args.bootstrap, seed=args.seed)
        rows.append(
            {
                "k": k,
                "pass@k": ci.estimate,
                "plugin": float(np.mean(stats.per_task_pass_at_k_plugin(n, c, k))),
                "ci_lo": ci.lo,
                "ci_hi": ci.hi,
            }
        )
    _emit(
        {
            "title": "pass@k (unbiased, mean over tasks; bootstrap over tasks)",
            "inputs": {
                "file": str(args.file),
                "tasks": len(names),
                "samples_min": int(n.min()),
                "samples_max": int(n.max()),
                "bootstrap": args.bootstrap,
                "seed": args.seed,
            },
            "table": rows,
        },
        args.json,
    )
    return 0


def _register_stats(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="pass@k and paired comparisons of per-episode result files")
    ss = p.add_subparsers(dest="stats_command", required=True)

    c = ss.add_parser("compare", help="paired comparison of run B against run A on the same tasks")
    c.add_argument("a", type=Path, help="JSONL results of run A (task, sample, passed)")
    c.add_argument("b", type=Path, help="JSONL results of run B")
    c.add_argument(
        "--intersect",
        action="store_true",
        help="compare only tasks present in both files (default: error)",
    )
    c.add_argument("--bootstrap", type=BOOTSTRAP, default=2000, help=BOOTSTRAP_HELP)
    c.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    c.add_argument(
        "--level", type=float_in(0, 1, True, True), default=0.95, help="confidence level"
    )
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_stats_compare)

    k = ss.add_parser("passk", help="unbiased pass@k with bootstrap intervals over tasks")
    k.add_argument("file", type=Path, help="JSONL results (task, sample, passed)")
    k.add_argument(
        "--k", type=positive_int, nargs="+", help="values of k (default 1, 2, 5, 10, ...)"
    )
    k.add_argument("--curve", action="store_true", help="every k from 1 to the fewest samples")
    k.add_argument("--bootstrap", type=BOOTSTRAP, default=2000, help=BOOTSTRAP_HELP)
    k.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(func=_stats_passk)


# ------------------------------------------------------------------------------ calc


def _c_degenerate(a: argparse.Namespace) -> dict:
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
    return {"inputs": {"p": a.p, "G": a.G, "budget": a.budget}, "table": rows}


def _c_group_size(a: argparse.Namespace) -> dict:
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
        "inputs": {"budget": a.budget, "lo": a.lo, "hi": a.hi},
        "table": rows,
        "results": {
            "best_G (any G from 2 to budget)": best_g,
            "tasks with gradient at best G": best,
        },
    }


def _c_std_norm(a: argparse.Namespace) -> dict:
    if not 0 < a.successes < a.G:
        raise ArlError(f"--successes must be between 1 and G-1 = {a.G - 1}, got {a.successes}")
    rewards = [1.0] * a.successes + [0.0] * (a.G - a.successes)
    adv = calc.group_advantages(rewards)
    raw = calc.group_advantages(rewards, normalize=False)
    rows = [{"p_hat": p, "factor 1/sqrt(p(1-p))": calc.std_norm_factor(p)} for p in a.p_hat]
    return {
        "inputs": {"G": a.G, "successes": a.successes, "p_hat": a.p_hat},
        "table": rows,
        "results": {
            "success advantage (normalized)": adv[0],
            "failure advantage (normalized)": adv[-1],
            "success advantage (mean only)": raw[0],
            "failure advantage (mean only)": raw[-1],
        },
    }


def _c_kl(a: argparse.Namespace) -> dict:
    rows = [
        {"log_ratio": x, "k1": calc.kl_k1(x), "k2": calc.kl_k2(x), "k3": calc.kl_k3(x)}
        for x in a.log_ratios
    ]
    return {
        "inputs": {"log_ratios (log pi_ref - log pi_theta)": a.log_ratios},
        "table": rows,
        "results": {f"mean {k}": v for k, v in calc.kl_estimates(a.log_ratios).items()},
    }


def _c_flip(a: argparse.Namespace) -> dict:
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
    return {"inputs": {"p": a.p, "f": a.f}, "table": rows}


def _c_step_penalty(a: argparse.Namespace) -> dict:
    r = calc.step_penalty_values(a.q, a.penalty, a.attempt_turns, a.submit_turns)
    r["submit_wins"] = bool(r["submit_wins"])
    return {
        "inputs": {
            "q": a.q,
            "penalty": a.penalty,
            "attempt_turns": a.attempt_turns,
            "submit_turns": a.submit_turns,
        },
        "results": r,
    }


def _c_startup(a: argparse.Namespace) -> dict:
    return {
        "inputs": {"startup_min": a.startup_min, "episode_min": a.episode_min},
        "results": {"startup_share": calc.startup_share(a.startup_min, a.episode_min)},
    }


def _c_fleet(a: argparse.Namespace) -> dict:
    w = calc.episode_seconds(a.turns, a.tokens_per_turn, a.decode_tps, a.tool_s, a.startup_s)
    in_flight = calc.episodes_in_flight(a.episodes_per_step, a.step_min * 60.0, w)
    per_tok = calc.kv_bytes_per_token(a.n_layers, a.n_kv_heads, a.d_head, a.bytes)
    full = calc.kv_fleet_bytes(math.ceil(in_flight), a.context, per_tok)
    return {
        "inputs": {
            k: getattr(a, k)
            for k in (
                "turns",
                "tokens_per_turn",
                "decode_tps",
                "tool_s",
                "startup_s",
                "episodes_per_step",
                "step_min",
                "context",
                "n_layers",
                "n_kv_heads",
                "d_head",
                "bytes",
                "pool_factor",
            )
        },
        "results": {
            "episode_min": w / 60.0,
            "episodes_in_flight": in_flight,
            "warm_pool": a.pool_factor * in_flight,
            "kv_bytes_per_token": per_tok,
            "kv_fleet_bytes_full_context": full,
            "kv_fleet_bytes_mean_context": full / 2,
        },
        "notes": {
            "episodes_in_flight": "Little's law L = lambda W",
            "kv_bytes_per_token": "2 x layers x kv heads x d_head x bytes (model assumed)",
            "kv_fleet_bytes_mean_context": "context grows about linearly: half of full",
        },
    }


def _c_gpu_hours(a: argparse.Namespace) -> dict:
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
        "inputs": {
            k: getattr(a, k)
            for k in (
                "params",
                "active",
                "episodes",
                "tokens",
                "policy_tokens",
                "peak",
                "mfu",
                "decode_tps",
                "gen_util",
                "steps",
            )
        },
        "results": r,
        "notes": {k: f"scales with {v}" for k, v in calc.SCALES_WITH.items()},
        "comments": ["attention FLOPs ignored: a lower bound (Problem 19)"],
    }


def _c_passk(a: argparse.Namespace) -> dict:
    rows = [{"k": k, **calc.pass_at_k(a.n, a.c, k)} for k in a.k]
    return {"inputs": {"n": a.n, "c": a.c}, "table": rows}


def _c_paired(a: argparse.Namespace) -> dict:
    r = calc.paired_vs_unpaired(a.tasks, a.acc_a, a.b, a.c).to_dict()
    ci = r.pop("ci_diff")
    r.update({"ci_lo": ci["lo"], "ci_hi": ci["hi"]})
    return {
        "inputs": {"tasks": a.tasks, "acc_a": a.acc_a, "b": a.b, "c": a.c},
        "results": r,
        "notes": {
            "b_better": "B solves, A fails",
            "a_better": "A solves, B fails",
            "se_paired": "sqrt(b + c) / N",
            "chi2_cc": "with continuity correction",
        },
    }


def _args_degenerate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--p", type=PROB, nargs="+", default=[0.1, 0.3], help="success rates")
    p.add_argument("--G", type=GROUP, nargs="+", default=[4, 8, 16], help="group sizes")
    p.add_argument("--budget", type=BUDGET, default=512, help=BUDGET_HELP)


def _args_group_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=BUDGET, default=512, help=BUDGET_HELP)
    p.add_argument("--lo", type=PROB, default=0.0, help="pool success rates ~ Uniform[lo, hi]")
    p.add_argument("--hi", type=PROB, default=0.4, help="upper end of the pool's rates")
    p.add_argument("--G", type=GROUP, nargs="+", default=[2, 4, 8, 16, 32], help="G to tabulate")


def _args_std_norm(p: argparse.ArgumentParser) -> None:
    p.add_argument("--G", type=GROUP, default=8, help="group size")
    p.add_argument("--successes", type=int_in(0, MAX_SIZE), default=1, help="successes")
    p.add_argument(
        "--p-hat",
        type=PROB,
        nargs="+",
        default=[0.5, 0.125],
        help="success fractions for the scale factor",
    )


def _args_kl(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-ratios",
        type=float_in(None, calc.MAX_LOG_RATIO),
        nargs="+",
        default=[-0.2, 0.1, -0.5],
        help="per-token log pi_ref - log pi_theta on tokens sampled from pi_theta",
    )


def _args_flip(p: argparse.ArgumentParser) -> None:
    p.add_argument("--p", type=PROB, default=0.3, help="true success rate")
    p.add_argument("--f", type=PROB, default=0.04, help="flip probability")


def _args_step_penalty(p: argparse.ArgumentParser) -> None:
    p.add_argument("--q", type=PROB, default=0.08, help="success rate of a full attempt")
    p.add_argument("--penalty", type=nonneg_float, default=0.02, help="penalty per turn")
    p.add_argument("--attempt-turns", type=positive_int, default=6, help="turns of a full attempt")
    p.add_argument(
        "--submit-turns", type=positive_int, default=1, help="turns of submitting at once"
    )


def _args_startup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--startup-min", type=nonneg_float, default=3.0, help="start-up (min)")
    p.add_argument("--episode-min", type=POS, default=8.0, help="agent interaction (min)")


def _args_fleet(p: argparse.ArgumentParser) -> None:
    for flag, typ, default, help_ in (
        ("--turns", POS, 50.0, "turns per episode"),
        ("--tokens-per-turn", nonneg_float, 400.0, "policy tokens per turn"),
        ("--decode-tps", POS, 40.0, "decode tokens/s per sequence under load"),
        ("--tool-s", nonneg_float, 8.0, "tool seconds per turn"),
        ("--startup-s", nonneg_float, 180.0, "container start-up seconds"),
        ("--episodes-per-step", positive_int, 512, "episodes per optimizer step"),
        ("--step-min", POS, 30.0, "minutes per optimizer step"),
        ("--context", nonneg_float, 64_000.0, "tokens of context at the end of an episode"),
        ("--n-layers", positive_int, 64, "layers (assumed model: 32B-class with GQA)"),
        ("--n-kv-heads", positive_int, 8, "KV heads"),
        ("--d-head", positive_int, 128, "head dimension"),
        ("--bytes", POS, 2.0, "bytes per KV element (bf16: 2)"),
        ("--pool-factor", nonneg_float, 1.2, "warm pool size / concurrency"),
    ):
        p.add_argument(flag, type=typ, default=default, help=help_)


def _args_gpu_hours(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", type=POS, default=32e9, help="total parameters")
    p.add_argument(
        "--active",
        type=POS,
        default=None,
        help="active parameters per token (MoE; default: = params, dense)",
    )
    p.add_argument("--episodes", type=positive_int, default=512, help="episodes per step")
    p.add_argument("--tokens", type=nonneg_float, default=24_000, help="tokens per episode")
    p.add_argument("--policy-tokens", type=nonneg_float, default=6_000, help="policy tokens")
    p.add_argument("--peak", type=POS, default=1e15, help="peak FLOP/s per GPU")
    p.add_argument("--mfu", type=unit_float, default=0.4, help="model FLOPs utilization")
    p.add_argument("--decode-tps", type=POS, default=1_000, help="decode tokens/s per GPU")
    p.add_argument("--gen-util", type=unit_float, default=0.25, help="inference fleet utilization")
    p.add_argument("--steps", type=positive_int, default=300, help="optimizer steps in the run")


def _args_passk(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=SIZE, default=10, help=f"samples (at most {MAX_SIZE:,})")
    p.add_argument("--c", type=int_in(0, MAX_SIZE), default=3, help="passing samples")
    p.add_argument("--k", type=SIZE, nargs="+", default=[1, 5], help="values of k")


def _args_paired(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=SIZE, default=500, help=f"tasks (at most {MAX_SIZE:,})")
    p.add_argument("--acc-a", type=PROB, default=0.41, help="pass rate of A")
    p.add_argument("--b", type=int_in(0, MAX_SIZE), default=40, help="tasks B solves, A fails")
    p.add_argument("--c", type=int_in(0, MAX_SIZE), default=30, help="tasks A solves, B fails")


# name: (problem, description, add arguments, compute)
CALCULATORS: dict[str, tuple[str, str, Callable, Callable]] = {
    "degenerate-group": (
        "Problem 3",
        "P(all-equal group) = p^G + (1-p)^G",
        _args_degenerate,
        _c_degenerate,
    ),
    "group-size": (
        "Exercise 1",
        "best G at a fixed budget for a uniform pool",
        _args_group_size,
        _c_group_size,
    ),
    "std-norm": (
        "Problem 4",
        "std-normalized advantages and the 1/sqrt(p(1-p)) factor",
        _args_std_norm,
        _c_std_norm,
    ),
    "kl": ("Problem 5", "k1, k2, k3 KL estimates from log-ratios", _args_kl, _c_kl),
    "flip-noise": (
        "Problem 9, Exercise 3",
        "observed reward and gradient factor under flips",
        _args_flip,
        _c_flip,
    ),
    "step-penalty": (
        "Problem 12",
        "submit-at-once vs attempt under a step penalty",
        _args_step_penalty,
        _c_step_penalty,
    ),
    "startup": ("Problem 15", "start-up share of episode time", _args_startup, _c_startup),
    "fleet": ("Problem 18", "Little's law fleet sizing and KV-cache bytes", _args_fleet, _c_fleet),
    "gpu-hours": (
        "Problem 19, Exercise 2",
        "FLOPs and GPU-hours per RL step, dense or MoE",
        _args_gpu_hours,
        _c_gpu_hours,
    ),
    "passk": ("Problem 21", "unbiased pass@k beside the plug-in estimate", _args_passk, _c_passk),
    "paired": ("Problem 22", "paired vs unpaired SE, z, McNemar", _args_paired, _c_paired),
}


def _refuse_overflow(out: dict) -> None:
    """Finite inputs whose result overflows to an infinity are an error, never a `null`."""
    rows = [out.get("results") or {}] + list(out.get("table") or [])
    for row in rows:
        for key, v in row.items():
            if isinstance(v, (float, np.floating)) and math.isinf(v):
                raise ArlError(f"{key}: the result overflows a double; use smaller inputs")


def _calc_handler(name: str) -> Callable[[argparse.Namespace], int]:
    problem, desc, _, compute = CALCULATORS[name]

    def handler(args: argparse.Namespace) -> int:
        out = {
            "calculator": name,
            "problem": problem,
            "title": f"{name} ({problem})",
            **compute(args),
        }
        _refuse_overflow(out)
        _emit(out, args.json)
        return 0

    return handler


def _calc_list(args: argparse.Namespace) -> int:
    rows = [{"name": n, "problem": p, "what": d} for n, (p, d, _, _) in CALCULATORS.items()]
    _emit({"title": "calculators", "table": rows}, args.json)
    return 0


def _register_calc(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calc", help="Appendix B design-review calculators")
    cs = p.add_subparsers(dest="calc_command", required=True)
    lp = cs.add_parser("list", help="list the calculators")
    lp.add_argument("--json", action="store_true", help="print one JSON object")
    lp.set_defaults(func=_calc_list)
    for name, (problem, desc, add_args, _) in CALCULATORS.items():
        cp = cs.add_parser(
            name,
            help=f"{desc} ({problem})",
            description=f"{desc} (Appendix B, {problem}); defaults are the problem's numbers",
        )
        add_args(cp)
        cp.add_argument("--json", action="store_true", help="print one JSON object")
        cp.set_defaults(func=_calc_handler(name))


# ------------------------------------------------------------------------------- sim


def _sim_fleet(args: argparse.Namespace) -> int:
    import dataclasses

    from arl.sim.figure import plot_timeline
    from arl.sim.fleet import FleetConfig, simulate

    cfg = FleetConfig.from_json(args.config) if args.config else FleetConfig()
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, seed=args.seed)
    out_dir = Path(args.out)
    owned = ("results.json", "timeline.png")
    with claim_output_dir(out_dir, "sim fleet", owned, overwrite=args.overwrite, reuse=True):
        result = simulate(cfg, on_step=_LazyProgress() if not args.json else None)
        fig = plot_timeline(result, cfg, out_dir / "timeline.png")
        payload = {
            "config": cfg.to_dict(),
            "report": result.report,
            "step_ends": result.step_ends,
            "figure": str(fig),
        }
        atomic_write_json(out_dir / "results.json", _clean(payload))
    if args.json:
        print(json.dumps(_clean(payload), indent=2))
        return 0
    r = result.report
    _emit(
        {
            "title": f"fleet simulation ({cfg.mode}, seed {cfg.seed})",
            "inputs": {"config": str(args.config or "defaults (Problem 18)")},
            "results": {k: v for k, v in r.items() if not isinstance(v, dict)},
            "notes": {
                "step_time_s": "mean after the first step",
                "engine_utilization": "decoding sequences / engine slots",
                "kv_peak_occupancy_engine": "> 1: the engine would have to preempt",
                "littles_law_lambda_w": "compare with in_flight_mean",
                "length_trained_mean": "policy tokens; compare with launched",
                "staleness_mean": f"hist {r['staleness_hist']}",
            },
            "comments": [f"wrote {out_dir / 'results.json'} and {fig}"],
        },
        False,
    )
    return 0


class _LazyProgress:
    """A rich progress bar over optimizer steps that appears only after two seconds."""

    def __init__(self) -> None:
        self.t0, self.bar, self.task = time.monotonic(), None, None

    def __call__(self, step: int, total: int) -> None:
        if self.bar is None and time.monotonic() - self.t0 > 2.0 and step < total:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("simulating steps", total=total)
        if self.bar is not None:
            self.bar.update(self.task, completed=step)
            if step >= total:
                self.bar.stop()


def _register_sim(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="discrete-event simulators")
    ss = p.add_subparsers(dest="sim_command", required=True)
    f = ss.add_parser("fleet", help="rollout-fleet simulation (Chapter 13, Problem 18)")
    f.add_argument(
        "--config",
        type=Path,
        default=None,
        help="JSON config (keys of FleetConfig; default: Problem 18's numbers)",
    )
    f.add_argument("--out", default="runs/sim", help="directory for results.json, timeline.png")
    f.add_argument("--overwrite", action="store_true", help="replace another run's --out files")
    f.add_argument("--seed", type=seed_int, default=None, help="override the config's seed")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(func=_sim_fleet)


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's subcommands (`stats`, `calc`, `sim`) to the `arl` parser."""
    _register_stats(sub)
    _register_calc(sub)
    _register_sim(sub)

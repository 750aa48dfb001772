"""`arl adopt --set KEY=VALUE [...]`: adopt a change to the PG recipe? Appendix B, Problem 30.

Parses the rule (written to OUT/rule.json before anything runs), runs the matched ablation
(arl.experiments.adopt_run), and prints ADOPT or REJECT with the numbers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from arl.cli.args import finite_float, int_in, nonneg_float, seed_int
from arl.errors import ArlError

EXAMPLE = "arl adopt --base-set baseline=mean --set baseline=loo --seeds 4"


def log(line: str) -> None:
    """A progress line, to stderr at once."""
    print(line, file=sys.stderr, flush=True)


def pairs(texts: list[str] | None, flag: str) -> tuple[tuple[str, Any], ...]:
    """`KEY=VALUE` texts -> typed PG settings (train pg's keys and checks); a key given twice
    keeps the last."""
    from arl.cli.config_flags import parse_pair
    from arl.cli.train import pg_keys
    from arl.train.pg_config import unknown_key

    out: dict[str, Any] = {}
    for text in texts or []:
        try:
            key, value = parse_pair(text, pg_keys(), unknown_key)
        except ArlError as e:
            raise ArlError(f"{flag}: {str(e).removeprefix('--set ')}") from None
        out.pop(key, None)
        out[key] = value
    return tuple(out.items())


def guardrail(text: str) -> tuple[str, float]:
    """`NAME:MAXWORSE` -> (name, allowed worsening); the name is checked by the rule."""
    name, sep, bound = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return name.strip(), nonneg_float(bound)
    except (ValueError, argparse.ArgumentTypeError):
        raise ArlError(
            f"--guardrail {text!r}: expected NAME:MAXWORSE with MAXWORSE a finite number >= 0"
        ) from None


def rule_of(args: argparse.Namespace):
    """The AdoptRule of the flags (checked: unknown names and bad values are one line)."""
    from arl.experiments.adopt import GUARDRAILS, AdoptRule

    if args.guardrail is None:
        guards = GUARDRAILS
    else:
        guards = () if args.guardrail == ["none"] else tuple(map(guardrail, args.guardrail))
    return AdoptRule(
        change=pairs(args.set, "--set"),
        base=pairs(args.base_set, "--base-set"),
        metric=args.metric,
        margin=args.margin,
        guardrails=guards,
        seeds=tuple(args.seed + i for i in range(args.seeds)),
        steps=args.steps or (4 if args.quick else 60),
        start=args.start,
        eval_samples=4 if args.quick else 16,
        quick=args.quick,
    )


def cmd_adopt(args: argparse.Namespace) -> int:
    """Write the rule down, run the pairs, print the decision with its numbers."""
    from arl.experiments.adopt import arm_configs
    from arl.experiments.adopt_run import run_adopt
    from arl.experiments.problems.common import set_threads
    from arl.parallel import Where

    set_threads()
    rule = rule_of(args)
    arm_configs(rule, rule.seeds[0])  # a bad setting, or no change, before anything is said
    out = args.out or "runs/adopt"
    where = Where(workers=args.workers or 1, ray=args.ray)
    results = run_adopt(rule, out, args.overwrite, where, log)
    print_results(results, out)
    return 0


def print_results(results: dict, out: str) -> None:
    """The rule, the decision line, each seed's pair, the files."""
    r = results["rule"]
    guards = ", ".join(f"{n} <= {b:g}" for n, b in r["guardrails"]) or "none"
    print(
        f"rule (pre-registered in {out}/rule.json): adopt if the {r['metric']} gain's lower "
        f"Student-t bound (one-sided 97.5%) over {len(r['seeds'])} seeds > {r['margin']:g}, "
        "and mean worsening "
        f"{guards}{' (QUICK settings: not a result)' if r['quick'] else ''}"
    )
    print(results["summary"])
    for p in results["pairs"]:
        a, b, q = p["arms"]["base"], p["arms"]["change"], p["paired"]
        worse = ", ".join(f"{n} {w:+.4f}" for n, w in p["worse"].items())
        print(
            f"  seed {p['seed']}: {r['metric']} base {a[r['metric']]:.4f} change "
            f"{b[r['metric']]:.4f} (gain {p['effect']:+.4f}; tasks better/worse/tied "
            f"{q['b_better']}/{q['a_better']}/{q['ties']}); worsening {worse or '-'}; "
            f"{p['seconds']:.0f} s"
        )
    print(f"[{results['seconds']} s of compute; {out}/results.json, {out}/adopt.png]")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `adopt` to the `arl` parser."""
    p = sub.add_parser(
        "adopt",
        help="adopt a change to the PG recipe? a pre-registered, seed-matched, paired ablation",
        description="Appendix B, Problem 30: write the rule down (OUT/rule.json), run base and "
        "base + change from the same start on each seed, evaluate both on the same held-out "
        "episodes, then ADOPT iff the gain's lower Student-t bound over seeds (one-sided "
        "97.5%) exceeds the margin "
        f"and no guardrail's mean worsening exceeds its bound. Example: {EXAMPLE}",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="the change (train pg's keys, e.g. baseline=loo or env.reward=public); repeatable",
    )
    p.add_argument(
        "--base-set",
        action="append",
        metavar="KEY=VALUE",
        help="a setting both arms share, over PGConfig's defaults; repeatable",
    )
    p.add_argument(
        "--metric",
        default="heldout_pass",
        help="the effect: heldout_pass (default), train_pass, entropy, ...",
    )
    p.add_argument(
        "--margin",
        type=finite_float,
        default=0.02,
        help="the gain's lower Student-t bound must exceed this (default 0.02)",
    )
    p.add_argument(
        "--guardrail",
        action="append",
        metavar="NAME:MAXWORSE",
        help="a metric that may worsen by at most MAXWORSE on average; repeatable "
        "(default entropy:0.03 malformed:0.05 length:1; 'none' for none)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="first seed")
    p.add_argument("--seeds", type=int_in(1, 100), default=4, help="N seeds (default 4)")
    p.add_argument(
        "--steps",
        type=int_in(1, 100_000),
        default=None,
        help="RL steps per arm (default 60; 4 with --quick)",
    )
    p.add_argument("--start", default="cold", help="both arms' start: cold (default) or weak")
    p.add_argument("--workers", type=int_in(1, 64), default=None, help="processes (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny settings, to try the command")
    p.add_argument("--out", help="the run folder (default runs/adopt)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete this folder's rule and results and start again",
    )
    from arl.cli.args import add_ray_flag

    add_ray_flag(p)
    p.set_defaults(func=cmd_adopt)

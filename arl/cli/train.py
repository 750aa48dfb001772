"""`arl train pg [--config FILE] [--set key=value ...]`: the policy-gradient trainer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from arl.errors import ArlError

INITS = ("cold", "weak", "untrained")


def load_init(spec: str, seed: int = 0):
    """The starting policy: the cold start (oracle SFT step 20), the weak base, or a checkpoint."""
    from arl.experiments.bases import BaseConfig, cold_start, new_model, weak_base
    from arl.model import load_checkpoint

    if spec == "cold":
        return cold_start(BaseConfig(seed=seed))
    if spec == "weak":
        return weak_base(BaseConfig(seed=seed))
    if spec == "untrained":
        return new_model(BaseConfig(seed=seed))
    if Path(spec).is_dir():
        return load_checkpoint(spec)
    raise ArlError(f"--init: unknown {spec!r} (choose from {', '.join(INITS)}, or a checkpoint)")


def cmd_pg(args: argparse.Namespace) -> int:
    from rich.console import Console

    from arl.experiments.problems.common import set_threads
    from arl.train.pg import checkpoints, make_config, parse_overrides, train_pg

    set_threads()
    values: dict = {}
    if args.config:
        try:
            values = json.loads(Path(args.config).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ArlError(f"--config {args.config}: {type(e).__name__}: {e}") from None
        if not isinstance(values, dict):
            raise ArlError(f"--config {args.config}: expected a JSON object of PGConfig fields")
        values = {k: v for k, v in values.items() if not k.startswith("_")}  # "_comment" keys
    values = parse_overrides(args.set or [], values)
    values.setdefault("out", "runs/pg")
    config = make_config(values)
    model = load_init(args.init, config.seed)
    console = Console()
    console.print(
        f"arl train pg: {model.num_params():,} parameters from {args.init}; "
        f"{config.steps} steps x {config.episodes_per_step} episodes -> {config.out}"
    )
    history = train_pg(model, config, progress=not args.quiet)
    steps = [r for r in history if "reward" in r]
    evals = [r for r in history if "eval/heldout_pass" in r]
    if steps:
        last = steps[-1]
        console.print(
            f"step {last['step']}: reward {last['reward']:.3f}, "
            f"pass {last['pass_rate']:.3f}, entropy {last['entropy']:.3f}"
        )
    if evals:
        e = evals[-1]
        console.print(
            f"eval at step {e['step']}: train {e['eval/train_pass']:.3f}, "
            f"held-out {e['eval/heldout_pass']:.3f}"
        )
    ckpts = checkpoints(Path(config.out))
    if ckpts:
        console.print(f"checkpoint: {ckpts[-1]} (arl eval {ckpts[-1]})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train` to the `arl` parser."""
    p = sub.add_parser("train", help="train a policy")
    ts = p.add_subparsers(dest="recipe", required=True, parser_class=type(p))
    g = ts.add_parser("pg", help="policy gradient (PPO-style, every Appendix B knob)")
    g.add_argument("--config", help="a JSON file of PGConfig fields (see examples/pg.json)")
    g.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override one PGConfig field (repeatable)",
    )
    g.add_argument(
        "--init",
        default="cold",
        help=f"starting policy: {', '.join(INITS)}, or a checkpoint directory",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=cmd_pg)

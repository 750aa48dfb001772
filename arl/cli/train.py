"""`arl train pg [--config FILE] [--set key=value ...]`: the policy-gradient trainer."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from arl.errors import ArlError
from arl.logging_bridge import REPORT_TO

INITS = ("cold", "weak", "untrained")


def load_init(spec: str, seed: int = 0):
    """The starting policy: the cold start (oracle SFT step 20), the weak base, or a checkpoint."""
    from arl.cli.gym import check_vocab, load_policy_dir
    from arl.experiments.bases import BaseConfig, cold_start, new_model, weak_base

    if spec == "cold":
        return cold_start(BaseConfig(seed=seed))
    if spec == "weak":
        return weak_base(BaseConfig(seed=seed))
    if spec == "untrained":
        return new_model(BaseConfig(seed=seed))
    check_init(spec)
    try:
        return check_vocab(load_policy_dir(spec), spec)
    except ArlError as e:
        raise ArlError(f"--init: {e}") from None


def check_init(spec: str) -> None:
    """Refuse an --init that names nothing, before any folder is claimed or model built."""
    if spec in INITS:
        return
    if not Path(spec).exists():
        looks_like_path = "/" in spec or spec.startswith(".")
        what = "no such checkpoint directory" if looks_like_path else "unknown"
        raise ArlError(f"--init: {what} {spec!r} (choose from {', '.join(INITS)}, or a checkpoint)")


def read_config_file(path: str) -> dict:
    """A JSON object of PGConfig fields; `_comment`-style keys are dropped. One-line errors."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ArlError(f"--config {path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ArlError(f"--config {path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ArlError(f"--config {path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except RecursionError:
        raise ArlError(f"--config {path}: JSON nested too deeply") from None
    if not isinstance(values, dict):
        raise ArlError(f"--config {path}: expected a JSON object of PGConfig fields")
    return {k: v for k, v in values.items() if not k.startswith("_")}  # "_comment" keys


def parse_allow_change(text: str | None) -> tuple[str, ...]:
    """`lr,steps` -> ("lr", "steps"); every name must be a PGConfig field."""
    from dataclasses import fields

    from arl.train.pg import PGConfig

    if not text:
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = {f.name for f in fields(PGConfig)}
    for n in names:
        if n not in known:
            raise ArlError(f"--allow-change: {n}: unknown PGConfig field")
    return names


def cmd_pg(args: argparse.Namespace) -> int:
    from rich.console import Console

    from arl.experiments.problems.common import set_threads
    from arl.logging_bridge import make_sink
    from arl.runio import claim_output_dir
    from arl.train.pg import OWNED, checkpoints, make_config, parse_overrides, train_pg

    set_threads()
    values = read_config_file(args.config) if args.config else {}
    values = parse_overrides(args.set or [], values)
    values.setdefault("out", "runs/pg")
    config = make_config(values)
    allow = parse_allow_change(args.allow_change)
    if not config.out:
        raise ArlError("out: the CLI needs a run folder (--set out=DIR)")
    check_init(args.init)
    hint = ", or --set resume=true to continue it"
    with claim_output_dir(  # before the (possibly long) loading of the starting policy
        config.out, "train pg", OWNED, overwrite=args.overwrite, reuse=config.resume, hint=hint
    ):
        # the sink first: a missing package is refused before a long load of the policy
        sink = make_sink(args.report_to, config.out, "train pg", asdict(config))
        try:
            model = load_init(args.init, config.seed)
            console = Console()
            console.print(
                f"arl train pg: {model.num_params():,} parameters from {args.init}; "
                f"{config.steps} steps x {config.episodes_per_step} episodes -> {config.out}"
            )
            history = train_pg(model, config, progress=not args.quiet, allow_change=allow,
                               claimed=True, sink=sink)  # fmt: skip
        finally:
            if sink is not None:
                sink.close()
        ckpts = checkpoints(Path(config.out))
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
        help="override one PGConfig field (repeatable); resume=true continues the run in out",
    )
    g.add_argument(
        "--init",
        default="cold",
        help=f"starting policy: {', '.join(INITS)}, or a checkpoint directory",
    )
    g.add_argument(
        "--overwrite", action="store_true", help="delete an earlier run's files in out first"
    )
    g.add_argument(
        "--allow-change",
        metavar="KEYS",
        help="on resume, PGConfig fields that may differ from the checkpoint's (e.g. lr,steps)",
    )
    g.add_argument(
        "--report-to",
        choices=REPORT_TO,
        default="none",
        help="also log each step's scalars (those of metrics.jsonl) to OUT/tensorboard, or to "
        "wandb (offline unless WANDB_MODE is set)",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=cmd_pg)

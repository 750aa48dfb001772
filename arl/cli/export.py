"""`arl export hf CKPT DIR` and `arl export trajectories OUT`: arl's models and rollouts, out."""

from __future__ import annotations

import argparse
from pathlib import Path

from arl.cli.args import (
    add_env_flags,
    env_config_of,
    nonneg_float,
    positive_int_max,
    seed_int,
    unit_float,
)
from arl.cli.gym import MAX_SAMPLES, POLICY_HELP, resolve_policy
from arl.env import SPLITS, get_environment
from arl.errors import ArlError
from arl.train.policy import load_policy_dir

HF_OWNED = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def cmd_hf(args: argparse.Namespace) -> int:
    from arl.export import export_hf, require
    from arl.runio import claim_output_dir

    require("transformers", "arl export hf")  # before any file is written
    model = load_policy_dir(args.checkpoint, args.env)
    with claim_output_dir(args.dir, "export hf", HF_OWNED, overwrite=args.overwrite):
        files = export_hf(model, args.dir)
    print(f"wrote {', '.join(p.name for p in files)} to {args.dir}")
    print(f"load it: AutoModelForCausalLM.from_pretrained({str(args.dir)!r})")
    return 0


def trajectories_path(out: str, split: str) -> Path:
    """OUT.parquet as given; any other OUT is a directory that gets SPLIT.parquet."""
    path = Path(out)
    return path if path.suffix == ".parquet" else path / f"{split}.parquet"


def cmd_trajectories(args: argparse.Namespace) -> int:
    from arl.eval.metrics import run_policy
    from arl.export import require, trajectory_rows, write_trajectories
    from arl.runio import check_writable

    require("datasets", "arl export trajectories")
    path = trajectories_path(args.out, args.split)
    if path.exists() and not args.overwrite:
        raise ArlError(f"{path}: exists; use another OUT, or --overwrite to replace it")
    check_writable(path)  # before the rollouts, not after them
    policy = resolve_policy(args.policy, args.seed, args.env)
    tasks = get_environment(args.env).tasks(args.split)
    trajs = run_policy(
        policy,
        tasks,
        args.samples,
        args.seed,
        env_config=env_config_of(args),
        temperature=args.temperature,
        top_p=args.top_p,
    )
    write_trajectories(trajectory_rows(trajs, args.samples), path)
    passed = sum(t.passed for t in trajs)
    print(
        f"wrote {len(trajs)} episodes ({passed} passed) of {args.policy} on {args.split} to {path}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `export` to the `arl` parser."""
    p = sub.add_parser("export", help="write a checkpoint for transformers, or rollouts as Parquet")
    es = p.add_subparsers(dest="what", required=True, parser_class=type(p))
    h = es.add_parser("hf", help="a TinyAgent checkpoint as a transformers GPT-2 directory")
    h.add_argument("checkpoint", help="a checkpoint directory (config.json, model.safetensors)")
    h.add_argument("dir", help="the model directory to write (from_pretrained loads it)")
    h.add_argument("--overwrite", action="store_true", help="replace an earlier export in DIR")
    h.add_argument(
        "--env",
        choices=("bugfix", "codefix"),
        default="bugfix",
        help="the environment whose vocabulary the checkpoint speaks",
    )
    h.set_defaults(func=cmd_hf)
    t = es.add_parser("trajectories", help="rollouts as a Parquet table (datasets, TRL, verl)")
    t.add_argument("out", help="OUT.parquet, or a directory that gets SPLIT.parquet")
    t.add_argument("--policy", required=True, help=POLICY_HELP)
    add_env_flags(t)
    t.add_argument("--split", choices=SPLITS, default="train")
    t.add_argument(
        "--samples",
        type=positive_int_max(MAX_SAMPLES),
        default=4,
        help="episodes per task (one group per task)",
    )
    t.add_argument("--seed", type=seed_int, default=0)
    t.add_argument("--temperature", type=nonneg_float, default=1.0, help="finite, >= 0")
    t.add_argument("--top-p", type=unit_float, default=1.0)
    t.add_argument("--overwrite", action="store_true", help="replace an existing OUT file")
    t.set_defaults(func=cmd_trajectories)

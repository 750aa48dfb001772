"""`arl export hf CKPT DIR`, `arl export trajectories OUT`, `arl export pairs OUT`: arl's
models, rollouts and preference pairs, out."""

from __future__ import annotations

import argparse
from pathlib import Path

from arl.cli.args import (
    add_env_flags,
    env_config_of,
    nonempty,
    nonneg_float,
    positive_int_max,
    seed_int,
    unit_float,
)
from arl.cli.check import add_chat_flags, check_chat_flags
from arl.cli.gym import MAX_SAMPLES, POLICY_HELP, resolve_policy
from arl.cli.recipes import DTYPES, policy_from
from arl.env import NAMES, SPLITS, get_environment
from arl.errors import ArlError
from arl.train.policy import load_policy_dir


def cmd_hf(args: argparse.Namespace) -> int:
    from arl.export import check_model_dir, export_hf_dir, require

    require("transformers", "arl export hf")  # before any file is written
    check_model_dir(args.dir, args.overwrite)  # before the checkpoint is loaded
    model = load_policy_dir(args.checkpoint, args.env)
    files = export_hf_dir(model, args.dir, overwrite=args.overwrite)
    print(f"wrote {', '.join(p.name for p in files)} to {args.dir}")
    print(f"load it: AutoModelForCausalLM.from_pretrained({str(args.dir)!r})")
    return 0


def table_path(out: str, split: str, kind: str = "") -> Path:
    """OUT.parquet as given; any other OUT is a directory that gets SPLIT[_KIND].parquet."""
    path = Path(out)
    return path if path.suffix == ".parquet" else path / f"{split}{kind}.parquet"


def claim_table(args: argparse.Namespace, kind: str = "") -> Path:
    """The table's path, refused in one line if it exists (without --overwrite) or cannot be
    written: before any rollout."""
    from arl.export import require
    from arl.runio import check_writable

    require("datasets", "arl export")
    path = table_path(args.out, args.split, kind)
    if path.exists() and not args.overwrite:
        raise ArlError(f"{path}: exists; use another OUT, or --overwrite to replace it")
    check_writable(path)
    return path


def episodes(args: argparse.Namespace):
    """The episodes --policy / --model ask for (run_policy's task-major order), the renderer
    of their tokens, and what played them: a TinyAgent or a scripted policy in arl's words; a
    transformers model sampling in its own tokens; a scripted policy in a model's tokens."""
    from arl.eval.metrics import run_policy
    from arl.export import scripted_episodes
    from arl.rollout import renderer_of

    environment = get_environment(args.env)
    tasks, config = environment.tasks(args.split), env_config_of(args)
    check_who(args, environment.scripted_names())
    environment.make(tasks[0], config)  # a missing sandbox is refused before anything loads
    if args.model is None:
        policy, who = resolve_policy(args.policy, args.seed, args.env), args.policy
        renderer = renderer_of(environment=environment)
    else:
        model = policy_from(argparse.Namespace(init=None, **vars(args)), args.seed)
        renderer = renderer_of(model, environment=environment)
        if args.policy is not None:  # a scripted policy, played in the model's tokens
            trajs = scripted_episodes(args.policy, tasks, args.samples, args.seed, config, renderer)
            return trajs, renderer, f"{args.policy} in {args.model}'s tokens"
        policy, who = model, args.model
    trajs = run_policy(
        policy,
        tasks,
        args.samples,
        args.seed,
        env_config=config,
        temperature=args.temperature,
        top_p=args.top_p,
    )
    return trajs, renderer, who


def check_who(args: argparse.Namespace, scripted: tuple[str, ...]) -> None:
    """One line for a combination that names no player or that a flag would be ignored in."""
    check_chat_flags(args)
    if args.model is None:
        if args.policy is None:
            raise ArlError("which policy? --policy NAME|CKPT, or --model PATH_OR_ID")
        if args.device != "cpu" or args.dtype != "float32":
            raise ArlError("--device and --dtype are --model's (TinyAgent plays on the CPU here)")
    elif args.policy is not None and args.policy not in scripted:
        raise ArlError(
            f"--policy {args.policy} with --model: only a scripted policy ({', '.join(scripted)}) "
            "is played in the model's tokens"
        )


def cmd_trajectories(args: argparse.Namespace) -> int:
    from arl.export import trajectory_rows, write_trajectories

    path = claim_table(args)
    trajs, renderer, who = episodes(args)
    chat = renderer if args.model else None  # TinyAgent's table stays as it always was
    write_trajectories(trajectory_rows(trajs, args.samples, chat), path)
    passed = sum(t.passed for t in trajs)
    print(f"wrote {len(trajs)} episodes ({passed} passed) of {who} on {args.split} to {path}")
    return 0


def cmd_pairs(args: argparse.Namespace) -> int:
    import random

    from arl.eval.metrics import graded
    from arl.export import pair_features, pair_rows, write_table
    from arl.train.dpo import build_pairs

    path = claim_table(args, "_pairs")
    trajs, renderer, who = episodes(args)
    pairs = build_pairs(graded(trajs), random.Random(args.seed))  # as `arl train dpo` pairs
    if not pairs:
        raise ArlError(
            f"export pairs: no task had both a passing and a failing episode in {args.samples} "
            "samples; raise --samples or use another policy"
        )
    rows = pair_rows(pairs, trajs, args.samples, renderer)
    write_table(rows, pair_features(), path)
    exact = sum(r["exact_tokens"] for r in rows)
    print(
        f"wrote {len(rows)} (chosen, rejected) pairs from {len(trajs)} episodes of {who} on "
        f"{args.split} to {path} ({exact} re-tokenize to the sampled ids)"
    )
    return 0


def add_rollout_flags(t: argparse.ArgumentParser, samples: int, what: str) -> None:
    """The flags `export trajectories` and `export pairs` share: who plays, where, how many."""
    t.add_argument("out", type=nonempty, help=f"OUT.parquet, or a directory that gets {what}")
    t.add_argument(
        "--policy",
        help=f"{POLICY_HELP}; with --model, a scripted policy played in the model's tokens",
    )
    t.add_argument(
        "--model",
        help="a transformers causal LM (directory or hub id): its rollouts in its own tokens",
    )
    t.add_argument("--device", default="cpu", help="--model's: cpu (default) or cuda[:N]")
    t.add_argument("--dtype", choices=DTYPES, default="float32", help="--model's")
    add_chat_flags(t)  # --tool-format / --turn-end: --model's calls
    add_env_flags(t)
    t.add_argument("--split", choices=SPLITS, default="train")
    t.add_argument(
        "--samples",
        type=positive_int_max(MAX_SAMPLES),
        default=samples,
        help="episodes per task (one group per task)",
    )
    t.add_argument("--seed", type=seed_int, default=0)
    t.add_argument("--temperature", type=nonneg_float, default=1.0, help="finite, >= 0")
    t.add_argument("--top-p", type=unit_float, default=1.0)
    t.add_argument("--overwrite", action="store_true", help="replace an existing OUT file")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `export` to the `arl` parser."""
    p = sub.add_parser("export", help="write a checkpoint for transformers, or rollouts as Parquet")
    es = p.add_subparsers(dest="what", required=True, parser_class=type(p))
    h = es.add_parser("hf", help="a TinyAgent checkpoint as a transformers GPT-2 directory")
    h.add_argument(
        "checkpoint", type=nonempty, help="a checkpoint directory (config.json, model.safetensors)"
    )
    h.add_argument(
        "dir", type=nonempty, help="the model directory to write (from_pretrained loads it)"
    )
    h.add_argument("--overwrite", action="store_true", help="replace an earlier export in DIR")
    h.add_argument(
        "--env",
        choices=NAMES,
        default=None,
        help="the environment whose vocabulary the checkpoint speaks (default: the one the "
        "checkpoint records)",
    )
    h.set_defaults(func=cmd_hf)
    t = es.add_parser("trajectories", help="rollouts as a Parquet table (datasets, TRL, verl)")
    add_rollout_flags(t, 4, "SPLIT.parquet")
    t.set_defaults(func=cmd_trajectories)
    d = es.add_parser(
        "pairs",
        help="(chosen, rejected) episodes as a Parquet table for TRL's DPOTrainer",
        description="Each passing episode paired with a failing one of the same task, as "
        "`arl train dpo` pairs them: prompt / chosen / rejected text.",
    )
    add_rollout_flags(d, 8, "SPLIT_pairs.parquet")
    d.set_defaults(func=cmd_pairs)

"""`arl train pg [--config FILE] [--set key=value ...]`: the policy-gradient trainer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from functools import cache
from pathlib import Path
from typing import Any

from arl.cli import recipes
from arl.cli.args import add_report_flags, env_help, int_in
from arl.cli.config_flags import (
    Key,
    add_keys_flag,
    add_set_flag,
    config_keys,
    describe_keys,
    given_values,
    merge,
    parse_pair,
)
from arl.cli.recipes import DTYPES, policy_from, resolve_init
from arl.cli.reproduce import add_ray_flag
from arl.env import NAMES, get_environment
from arl.errors import ArlError
from arl.progress import Progress
from arl.runio import read_json
from arl.train.pg_config import PGConfig, default_env, env_types, make_config, unknown_key
from arl.train.policy import INITS, check_policy_spec, load_policy


def load_init(spec: str, seed: int = 0, env: str = "bugfix"):
    """The starting policy of --init (see arl.train.policy.load_policy); errors name --init."""
    try:
        return load_policy(spec, seed, env)
    except ArlError as e:
        raise ArlError(f"--init: {e}") from None


def check_init(spec: str) -> None:
    """Refuse an --init that names nothing, before any folder is claimed or model built."""
    try:
        check_policy_spec(spec)
    except ArlError as e:
        raise ArlError(f"--init: {e}") from None


def env_pairs(args: argparse.Namespace) -> list[str]:
    """`--env NAME` and `--allow-unsandboxed` as the `--set` pairs they stand for (a later
    `--set env.name` or --config field that disagrees is refused: refuse_conflicts)."""
    pairs = [f"env.name={args.env}"] if args.env else []
    return pairs + (["env.allow_unsandboxed=true"] if args.allow_unsandboxed else [])


@cache
def pg_keys() -> dict[str, Key]:
    """Every settable PGConfig key (config_flags, as every recipe's): the environment's dotted,
    over both environments' configs ('env.reward', 'env.errors')."""
    return config_keys(PGConfig, nested={"env": env_types()})


def env_keys(name: str) -> dict[str, Key]:
    """PGConfig's keys with one environment's config as `env` (its fields, at the defaults PG
    gives them: arl.train.pg_config.default_env)."""
    env = default_env(name)
    keys = config_keys(PGConfig, nested={"env": (type(env),)})
    return {
        k: replace(key, default=getattr(env, k[4:])) if k.startswith("env.") else key
        for k, key in keys.items()
    }


def list_keys(args: argparse.Namespace, defaults: dict | None = None) -> int:
    """`--keys`: every --set key, with its default, kind and meaning (those of `--env NAME`'s
    config when given, else every environment's fields); `defaults`: a recipe's own."""
    keys = env_keys(args.env) if args.env else pg_keys()
    keys = {
        k: replace(key, default=(defaults or {}).get(k, key.default)) for k, key in keys.items()
    }
    print(describe_keys(keys))
    return 0


def parse_overrides(pairs: Sequence[str], base: dict | None = None) -> dict[str, Any]:
    """`key=value` strings -> typed PGConfig values (`env.reward=public` into base["env"]);
    an unknown key or a bad value names the field."""
    return merge(base or {}, dict(parse_pair(pair, pg_keys(), unknown_key) for pair in pairs))


def read_config_file(path: str) -> dict:
    """A JSON object of PGConfig fields; `_comment`-style keys are dropped. One-line errors."""
    values = read_json(path, f"--config {path}")
    if not isinstance(values, dict):
        raise ArlError(f"--config {path}: expected a JSON object of PGConfig fields")
    return {k: v for k, v in values.items() if not k.startswith("_")}  # "_comment" keys


def parse_allow_change(text: str | None) -> tuple[str, ...]:
    """`lr,env.reward` -> ("lr", "env.reward"); every name must be a (dotted) PGConfig field."""
    if not text:
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for n in names:
        if n not in pg_keys():
            raise ArlError(f"--allow-change: {unknown_key(n)}")
    return names


# the loss statistics the progress line shows where the chosen loss logs them (ppo's, gspo's)
SHOWN = (("clip", "clip_frac"), ("cap", "capped_frac"))


@contextmanager
def progress_bar(
    enabled: bool, steps: int, label: str = "pg"
) -> Iterator[Callable[[dict], None] | None]:
    """The run's progress (arl.progress: a bar on a terminal, plain lines in a file), fed one
    step record at a time (None when disabled)."""
    if not enabled:
        yield None
        return
    with Progress(label, steps) as bar:

        def update(r: dict) -> None:
            bar.update(
                r["step"],
                (
                    f"reward {r['reward']:.2f} pass {r['pass_rate']:.2f} "
                    f"gap {r['public_hidden_gap']:+.2f} H {r['entropy']:.2f} "
                    f"degen {r['degenerate_frac']:.2f} "
                )
                + "".join(f"{name} {r[k]:.2f} " for name, k in SHOWN if k in r)  # the loss's
                + f"|g| {r['grad_norm']:.2f}"
                + (f" teacher KL {r['teacher_kl']:.3f}" if "teacher_kl" in r else ""),
            )

        yield update


def cmd_sweep(args: argparse.Namespace, values: dict) -> int:
    """`--sweep KEY=V1,V2,...`: one run per value, in processes or on Ray; a summary table."""
    from arl.parallel import Where
    from arl.runio import atomic_write_json
    from arl.train.sweep import sweep

    key, sep, text = args.sweep.partition("=")
    key = key.strip()
    if not sep or not text.strip():
        raise ArlError(f"--sweep {args.sweep!r}: expected KEY=V1,V2,...")
    points = {}
    for v in (v.strip() for v in text.split(",")):
        point = parse_overrides([f"{key}={v}"], values)
        point["out"] = str(Path(values["out"]) / f"{key}={v}")
        make_config(point)  # every point's config is valid before anything runs
        points[v] = point
    check_init(args.init)
    where = Where(workers=args.workers or 1, ray=args.ray)
    print(f"arl train pg: sweep {key} over {list(points)} -> {values['out']}/{key}=VALUE")
    rows = {}
    for value, result in sweep(points, args.init, where):
        rows[value] = result
        last = result.get("last", {})
        print(
            f"{key}={value}: "
            + (
                f"pass {last['pass_rate']:.3f}, reward {last['reward']:.3f}"
                if last
                else "already finished"
            )
        )
    Path(values["out"]).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(values["out"]) / "sweep.json", {"key": key, "points": rows})
    return 0


PG_INIT = "cold"  # the starting policy of train pg and distill when neither --init nor --model


def warn(text: str) -> None:
    """One warning line on stderr (the run goes on)."""
    print(f"arl: warning: {text}", file=sys.stderr, flush=True)


def weaker_teacher_warning(bar: Callable[[dict], None] | None) -> Callable[[dict], None]:
    """`bar` (may be None), and once a warning line when the teacher passes less of a step's
    tasks than the student (distillation then pulls the student down)."""
    said = False

    def update(r: dict) -> None:
        nonlocal said
        if bar is not None:
            bar(r)
        t, s = r.get("teacher_pass_rate"), r.get("pass_rate")
        if not said and t is not None and s is not None and t < s:
            said = True
            warn(
                f"step {r.get('step')}: the teacher passes {t:.2f} of the step's tasks, the "
                f"student {s:.2f}: a teacher weaker than its student"
            )

    return update


def refuse_conflicts(args: argparse.Namespace, values: dict) -> None:
    """A flag and a --set pair or --config field that say different things are refused,
    naming both (`--env codefix` against `env.name=bugfix`; `--teacher` against `teacher=`)."""
    env = values.get("env")
    name = env.get("name") if isinstance(env, dict) else None
    if args.env and name is not None and name != args.env:
        raise ArlError(f"--env {args.env} and env.name={name} disagree: give one of them")
    flag = getattr(args, "teacher", None) or getattr(args, "teacher_model", None)
    given = values.get("teacher")
    if flag and given not in (None, "", flag):
        which = "--teacher" if getattr(args, "teacher", None) else "--teacher-model"
        raise ArlError(f"{which} {flag} and teacher={given} disagree: give one of them")


def cmd_pg(args: argparse.Namespace) -> int:
    if args.keys:
        return list_keys(args)
    resolve_init(args, PG_INIT)
    if args.sweep and args.model:
        raise ArlError("--sweep trains TinyAgents from --init; it does not take --model")
    values = read_config_file(args.config) if args.config else {}
    refuse_conflicts(args, merge(values, given_values(args)))
    values = merge(parse_overrides(env_pairs(args), values), given_values(args))
    values.setdefault("out", "runs/pg")
    if args.sweep:
        return cmd_sweep(args, values)
    return run_pg(args, values, "train pg", hf_teacher=bool(args.model))


def cmd_distill(args: argparse.Namespace) -> int:
    """`arl train distill`: PG's loop with the teacher's per-token advantage
    (arl.train.distill's defaults under --config and --set)."""
    from arl.train.distill import DISTILL_DEFAULTS

    if args.keys:
        return list_keys(args, DISTILL_DEFAULTS)
    if not (args.teacher or args.teacher_model):
        raise ArlError("train distill: which teacher? give --teacher CKPT or --teacher-model PATH")
    resolve_init(args, PG_INIT)
    values = read_config_file(args.config) if args.config else {}
    refuse_conflicts(args, merge(values, given_values(args)))
    values = merge(parse_overrides(env_pairs(args), DISTILL_DEFAULTS | values), given_values(args))
    values.setdefault("out", "runs/distill")
    values["teacher"] = args.teacher or args.teacher_model
    return run_pg(args, values, "train distill", hf_teacher=args.teacher_model is not None)


def load_teacher(config: PGConfig, args: argparse.Namespace, hf: bool):
    """The frozen teacher of config.teacher: a transformers model (hf) or a TinyAgent policy
    spec, on the student's device; errors name the flag."""
    from arl.train.policy import load_any

    flag = "--teacher-model" if hf else "--teacher"
    try:
        if hf:
            return load_any(None, config.teacher, config.seed, args.device, args.dtype)
        return load_any(config.teacher, None, config.seed, args.device, "float32", config.env.name)
    except ArlError as e:
        raise ArlError(f"{flag}: {e}") from None


def run_pg(args: argparse.Namespace, values: dict, command: str, hf_teacher: bool) -> int:
    """One PG (or distillation) run from the merged config values: claim the folder, load
    the policy (and the teacher), train with progress, print where the checkpoint went."""
    from rich.console import Console

    from arl.experiments.problems.common import set_threads
    from arl.hf.lora import lora_note
    from arl.logging_bridge import make_sink
    from arl.runio import claim_output_dir
    from arl.train.checkpoint import checkpoints
    from arl.train.pg import OWNED, train_pg

    set_threads()
    config = make_config(values)
    allow = parse_allow_change(args.allow_change)
    if not config.out:
        raise ArlError("out: the CLI needs a run folder (--set out=DIR)")
    if not args.model:
        check_init(args.init)
    environment = get_environment(config.env.name)  # a missing sandbox is refused here
    environment.make(environment.tasks("train")[0], config.env)
    hint = ", or --set resume=true to continue it"
    with claim_output_dir(  # before the (possibly long) loading of the starting policy
        config.out, command, OWNED, overwrite=args.overwrite, reuse=config.resume, hint=hint
    ):
        # the sink first: a missing package is refused before a long load of the policy
        sink = make_sink(args.report_to, config.out, command, asdict(config))
        try:
            args.env = config.env.name
            if args.model or args.device != "cpu":
                model = policy_from(args, config.seed)
            else:
                model = load_init(args.init, config.seed, config.env.name)
            teacher = load_teacher(config, args, hf_teacher) if config.teacher_weight else None
            console = Console(soft_wrap=True)  # a path in a line is never broken
            taught = f", taught by {config.teacher}" if teacher is not None else ""

            def header() -> None:  # once train_pg's checks (teacher, resume) passed
                console.print(
                    f"arl {command}: {model.num_params():,} parameters{lora_note(model)} from "
                    f"{args.model or args.init}; {config.steps} steps x "
                    f"{config.episodes_per_step} episodes{taught} -> {config.out}"
                )
                if teacher is not None and config.teacher == "untrained":
                    warn(
                        "--teacher untrained: a randomly initialized teacher; the student is "
                        "distilled towards noise"
                    )

            label = command.split()[-1]  # pg, or distill
            with progress_bar(not args.quiet, config.steps, label) as bar:
                history = train_pg(
                    model,
                    config,
                    progress=weaker_teacher_warning(bar) if teacher is not None else bar,
                    allow_change=allow,
                    claimed=True,
                    sink=sink,
                    teacher=teacher,
                    on_start=header,
                )
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
        how = f"arl eval --model {ckpts[-1]}" if args.model else f"arl eval {ckpts[-1]}"
        how += f" --env {config.env.name}" if config.env.name != "bugfix" else ""
        console.print(f"checkpoint: {ckpts[-1]} ({how})")
    return 0


SET_HELP = (
    "one PGConfig field, repeatable, over --config (the environment's as env.NAME, e.g. "
    "env.reward=public; resume=true continues the run in out). PG's ~50 fields are --set keys "
    "rather than flags of their own, parsed and checked as sft/rft/dpo's flags are "
    "(arl.cli.config_flags); --keys lists them"
)


def add_pg_flags(g: argparse.ArgumentParser, keys_help: str) -> None:
    """The flags `train pg` and `train distill` share: the config, the starting policy and
    environment, where it runs, and the run folder's handling."""
    g.add_argument("--config", help="a JSON file of PGConfig fields (see examples/pg.json)")
    add_set_flag(g, pg_keys, unknown_key, SET_HELP)
    add_keys_flag(g, keys_help)
    g.add_argument(
        "--init",
        default=None,
        help=f"starting policy: {', '.join(INITS)}, or a checkpoint directory (default "
        f"{PG_INIT}; not with --model)",
    )
    g.add_argument(
        "--env",
        choices=NAMES,
        default=None,
        help=f"as --set env.name=NAME: {env_help()}",
    )
    g.add_argument(
        "--allow-unsandboxed",
        action="store_true",
        help="an environment that runs policy code (codefix, ...) without bubblewrap: run it "
        "unsandboxed (unsafe)",
    )
    g.add_argument(
        "--model", help="a transformers causal LM (directory or hub id; replaces --init)"
    )
    g.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N] when present")
    g.add_argument("--dtype", choices=DTYPES, default="float32", help="bfloat16: real models")
    recipes.add_chat_flags(g)  # --tool-format / --turn-end: a real model's calls (arl.cli.check)
    recipes.add_lora_flags(g)  # --lora-rank / --lora-alpha / --lora-targets: with --model
    g.add_argument(
        "--overwrite", action="store_true", help="delete an earlier run's files in out first"
    )
    g.add_argument(
        "--allow-change",
        metavar="KEYS",
        help="on resume, PGConfig fields that may differ from the checkpoint's (e.g. lr,steps)",
    )
    add_report_flags(g, "each step's scalars (those of metrics.jsonl)", "progress bar")


def cmd_tool_model(args: argparse.Namespace) -> int:
    """Build (once; cached) the offline tool-calling chat model and print its folder."""
    from arl.progress import reporting
    from arl.train.tool_model import ToolModelConfig, tool_model

    config = ToolModelConfig(seed=args.seed)
    with reporting(lambda text: print(f"arl: {text}", file=sys.stderr, flush=True)):
        path = tool_model(config.quick() if args.quick else config, args.env)
    print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train` to the `arl` parser."""
    p = sub.add_parser("train", help="train a policy")
    ts = p.add_subparsers(dest="recipe", required=True, parser_class=type(p))
    g = ts.add_parser("pg", help="policy gradient (PPO-style, every Appendix B knob)")
    add_pg_flags(g, "list every --set key: its default, kind and meaning, and exit")
    g.add_argument(
        "--sweep",
        metavar="KEY=V1,V2,...",
        help="one run per value (e.g. seed=0,1,2 or lr=1e-4,3e-4), each in OUT/KEY=V",
    )
    g.add_argument("--workers", type=int_in(1, 64), default=None, help="sweep processes")
    add_ray_flag(g)
    g.set_defaults(func=cmd_pg)
    d = ts.add_parser(
        "distill",
        help="on-policy distillation: the student samples, a frozen teacher scores each token",
        description="PG's loop (every --set key of train pg) with each sampled token's "
        "advantage sg[log pi_teacher - log pi_student]; defaults teacher_weight=1, "
        "reward_weight=0 (no environment reward), filter_cooldown=0, lr=1e-4.",
    )
    add_pg_flags(d, "list every --set key (train pg's, at distill's defaults), and exit")
    who = d.add_mutually_exclusive_group()  # one is needed to train (cmd_distill), not for --keys
    who.add_argument(
        "--teacher", metavar="CKPT", help="a TinyAgent teacher: a checkpoint, or cold / weak"
    )
    who.add_argument(
        "--teacher-model",
        metavar="PATH",
        help="a transformers teacher with the --model student's tokenizer",
    )
    d.set_defaults(func=cmd_distill)
    t = ts.add_parser(
        "tool-model",
        help="an offline chat model that calls tools (Qwen2, format without skill); cached",
        description="A Qwen2-architecture model about TinyAgent's size with Qwen2.5's template "
        "and native tool calls, pretrained on the training listings, then SFT on blind and "
        "read-then-guess play: the weak base's recipe on a chat model. Built once per seed and "
        "cached beside the bases; prints its folder, for --model and TRL's from_pretrained.",
    )
    t.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="weights and data")
    t.add_argument("--env", choices=NAMES, default="bugfix", help="the environment it plays")
    t.add_argument("--quick", action="store_true", help="a tiny version of the recipe (tests)")
    t.set_defaults(func=cmd_tool_model)
    recipes.register(ts)

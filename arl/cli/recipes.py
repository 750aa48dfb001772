"""`arl train sft|rft|dpo`: the demonstration recipes on TinyAgent or on a real model.

Every recipe starts from `--init` (a TinyAgent: weak, cold, untrained, a checkpoint) or
`--model PATH_OR_ID` (any `transformers` causal LM, rendered as a chat), trains on the
training tasks of `--env` (bugfix or codefix), evaluates both splits, and writes
OUT/metrics.jsonl, OUT/results.json and OUT/final (a TinyAgent checkpoint or a
`from_pretrained` directory).
"""

from __future__ import annotations

import argparse
import random
from dataclasses import asdict
from pathlib import Path

from arl.checks import check_seed
from arl.cli.args import (
    add_env_flags,
    add_report_flags,
    env_config_of,
    int_in,
    nonempty,
    positive_float,
    positive_int,
    seed_int,
)
from arl.cli.check import add_chat_flags, chat_options, check_chat_flags
from arl.cli.config_flags import add_config_flags, config_from
from arl.errors import ArlError
from arl.logging_bridge import OWNED as SINK_OWNED

OWNED = ("final", "final/*", "metrics.jsonl", "results.json", *SINK_OWNED)
RECIPE_INIT = "weak"  # the starting TinyAgent of sft, rft and dpo when neither --init nor --model
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16")
EVAL_EVERY_S = 15.0  # a line at most this often while the final evaluation runs
RFT_ALIASES = {"samples": "samples_per_task"}  # the flag's name before it was derived
SEEDS = "--seed also seeds the starting policy and the evaluation."


def add_policy_flags(p: argparse.ArgumentParser, init_default: str = RECIPE_INIT) -> None:
    """--init / --model / --device / --dtype: where the policy comes from and runs;
    --env / --allow-unsandboxed: which environment it plays."""
    add_env_flags(p)
    p.add_argument(
        "--init",
        default=None,
        help=f"a TinyAgent: cold, weak, untrained, or a checkpoint directory (default "
        f"{init_default}; not with --model)",
    )
    p.add_argument(
        "--model",
        help="a transformers causal LM: a local directory or a hub id "
        "(AutoModelForCausalLM + its tokenizer; replaces --init)",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N] when present")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="bfloat16 for a real model on a GPU; TinyAgent trains in float32",
    )
    add_chat_flags(p)  # --tool-format / --turn-end: a real model's calls
    add_lora_flags(p)  # --lora-rank / --lora-alpha / --lora-targets: with --model


def add_lora_flags(p: argparse.ArgumentParser) -> None:
    """--lora-rank / --lora-alpha / --lora-targets: train a LoRA adapter on --model (peft)."""
    p.add_argument(
        "--lora-rank",
        type=int_in(0, None, "an integer >= 0 (0: full fine-tuning)"),
        default=0,
        metavar="R",
        help="train a LoRA adapter of rank R on --model, the base frozen (peft; OUT/final is "
        "the adapter folder); 0 (default): full fine-tuning",
    )
    p.add_argument(
        "--lora-alpha",
        type=positive_float,
        default=None,
        metavar="A",
        help="LoRA's alpha: the adapter's update is scaled by A/R (default 2R)",
    )
    p.add_argument(
        "--lora-targets",
        default=None,
        metavar="MODULES",
        help="comma list of the Linear modules to adapt (default q_proj,k_proj,v_proj,o_proj; "
        "all-linear: every Linear but the output head)",
    )


def check_lora_flags(args: argparse.Namespace) -> None:
    """--lora-* only with --model, a rank and an alpha that make sense, peft installed."""
    from arl.hf.lora import check_lora

    check_lora(
        getattr(args, "lora_rank", 0),
        getattr(args, "lora_alpha", None),
        getattr(args, "lora_targets", None),
        getattr(args, "model", None),
        getattr(args, "init", None),
    )


def resolve_init(args: argparse.Namespace, default: str) -> None:
    """--init's default when neither it nor --model is given; both given is refused in one
    line (--model replaces the starting policy: an --init beside it would be ignored)."""
    if args.model and args.init is not None:
        raise ArlError(f"--init {args.init} and --model: give one (--model is the starting policy)")
    check_chat_flags(args)  # --tool-format / --turn-end: only with --model
    check_lora_flags(args)  # --lora-*: only with --model
    if not args.model and args.init is None:
        args.init = default


def policy_from(args: argparse.Namespace, seed: int):
    from arl.train.policy import load_any

    env = getattr(args, "env", "bugfix")
    policy = load_any(
        args.init, args.model, seed, args.device, args.dtype, env, **chat_options(args)
    )
    if getattr(args, "lora_rank", 0):  # checked by resolve_init: with --model, peft present
        from arl.hf.lora import add_lora, parse_targets

        add_lora(policy, args.lora_rank, args.lora_alpha, parse_targets(args.lora_targets))
    return policy


def _evaluate(model, samples: int, seed: int, args: argparse.Namespace, bar=None) -> dict:
    """Both splits' pass rates; a line on `bar` every EVAL_EVERY_S seconds while it runs (an
    untrained CodeFix policy's episodes take minutes: sandboxed grading of every call)."""
    from arl.env import SPLITS, get_environment
    from arl.eval.metrics import evaluate
    from arl.progress import reporting

    environment, config = get_environment(args.env), env_config_of(args)
    keys = ("pass_rate", "malformed_per_episode", "apply_rate")
    out = {}
    for split in SPLITS:
        tasks = environment.tasks(split)
        where = f"evaluating {split} ({len(tasks)} tasks x {samples})"

        def say(text: str, where=where) -> None:
            if bar is not None:
                bar.event(f"{where}: {text}")

        with reporting(say, every_s=EVAL_EVERY_S):
            m, _ = evaluate(model, tasks, samples, seed=seed, env_config=config)
        out |= {f"eval/{split}_{k}": m[k] for k in keys if k in m}
    return out


def _run(args: argparse.Namespace, recipe: str, seed: int, train, config) -> int:
    """Claim OUT, open the --report-to sink, load the policy (from `seed`), train it with
    `train(model, progress, sink)`, evaluate (from `seed`), save."""
    from arl.env import get_environment
    from arl.logging_bridge import make_sink
    from arl.model import TinyAgent
    from arl.progress import Progress
    from arl.rollout import vocab_record
    from arl.runio import atomic_write_json, atomic_write_text, claim_output_dir, dumps_finite
    from arl.train.checkpoint import save_policy

    out = Path(args.out or f"runs/{recipe}")
    resolve_init(args, RECIPE_INIT)
    if not args.model:  # a policy that names nothing is refused before the folder is claimed
        from arl.train.policy import check_policy_spec

        check_policy_spec(args.init)
    environment = get_environment(args.env)  # a missing sandbox too
    environment.make(environment.tasks("train")[0], env_config_of(args))
    with claim_output_dir(out, f"train {recipe}", OWNED, overwrite=args.overwrite):
        # the sink first: a missing package is refused before a long load of the policy
        sink = make_sink(args.report_to, out, f"train {recipe}", asdict(config))
        try:
            model = policy_from(args, seed)
            source = args.model or args.init
            from arl.hf.lora import lora_note

            print(
                f"arl train {recipe}: {model.num_params():,} parameters{lora_note(model)} from "
                f"{source} -> {out}"
            )
            with Progress(recipe, enabled=not args.quiet) as bar:
                history, settings = train(model, bar, sink)
                bar.event("evaluating both splits")
                final = _evaluate(model, args.eval_samples, seed, args, bar)
        finally:
            if sink is not None:
                sink.close()
        atomic_write_text(out / "metrics.jsonl", "".join(dumps_finite(r) + "\n" for r in history))
        extra = {"kind": recipe, "source": source}
        if isinstance(model, TinyAgent):  # the environment it speaks (arl export hf's default)
            extra |= vocab_record(args.env)
        save_policy(model, out / "final", extra=extra)
        from arl.env import run_record as record

        results = {"recipe": recipe, "env": args.env, "source": source, "settings": settings}
        results |= record(env_config_of(args))  # "sandbox": "bwrap" or "none"
        atomic_write_json(out / "results.json", results | final)
    print(
        f"train pass {final['eval/train_pass_rate']:.3f}, held-out pass "
        f"{final['eval/heldout_pass_rate']:.3f}; policy: {out / 'final'}"
    )
    return 0


def check_data(args: argparse.Namespace) -> None:
    """A --data file that cannot be read is refused before the run folder or the policy."""
    if getattr(args, "data", None):
        from arl.runio import check_input

        check_input(args.data, f"--data {args.data}")


def data_of(args: argparse.Namespace, model, renderer, for_pairs: bool = False):
    """--data FILE's trajectories (SFT) or pairs (DPO), in the policy's own tokens."""
    from arl.data import load_data

    tok = getattr(renderer, "tokenizer", None)
    vocab = len(tok) if tok is not None else model.config.vocab_size
    return load_data(args.data, renderer, vocab, for_pairs=for_pairs, seed=getattr(args, "seed", 0))


def _user_seed(config) -> None:
    """The config's seed also seeds the policy and the evaluation: a user's seed (< 2^32)."""
    check_seed("seed", config.seed)


def cmd_sft(args: argparse.Namespace) -> int:
    from arl.rollout import renderer_of
    from arl.train.bases import oracle_sft_data
    from arl.train.sft import SFTConfig, sft_train

    config = config_from(args, SFTConfig, check=_user_seed)

    def train(model, bar, sink):
        renderer = renderer_of(model) if args.model else None  # a real model's chat
        if args.data:
            demos = data_of(args, model, renderer)
            bar.event(f"{len(demos)} trajectories from {args.data}")
        else:
            demos = oracle_sft_data(renderer=renderer, environment=args.env)  # Chapter 15's data
        bar.total = config.steps

        def hook(step: int, _model) -> None:
            bar.update(step)

        history = sft_train(model, demos, config, hook=hook, hook_every=1, sink=sink)
        return history, asdict(config) | ({"data": args.data} if args.data else {})

    check_data(args)
    return _run(args, "sft", config.seed, train, config)


def cmd_rft(args: argparse.Namespace) -> int:
    from arl.env import get_environment
    from arl.train.rft import RFTConfig, expert_iteration

    config = config_from(args, RFTConfig)

    def train(model, bar, sink):
        bar.total = config.rounds

        def hook(r: int, _model) -> None:
            bar.update(r + 1)

        tasks = get_environment(args.env).tasks("train")
        env_config = env_config_of(args)
        history = expert_iteration(model, tasks, config, hook, env_config=env_config, sink=sink)
        return history, asdict(config)

    return _run(args, "rft", config.seed, train, config)


def cmd_dpo(args: argparse.Namespace) -> int:
    from arl.env import get_environment
    from arl.eval.metrics import graded, run_policy
    from arl.train.common import reference_of
    from arl.train.dpo import DPOConfig, build_pairs, dpo_train

    config = config_from(args, DPOConfig)

    def train(model, bar, sink):
        if args.data:
            from arl.rollout import renderer_of

            renderer = renderer_of(model) if args.model else None
            pairs = data_of(args, model, renderer, for_pairs=True)
            bar.event(f"{len(pairs)} (chosen, rejected) pairs from {args.data}")
            return train_on(model, bar, sink, pairs, {"data": args.data})
        tasks = get_environment(args.env).tasks("train")
        env_config = env_config_of(args)
        samples = run_policy(model, tasks, args.samples, seed=args.seed, env_config=env_config)
        pairs = build_pairs(graded(samples), random.Random(args.seed))
        if not pairs:
            raise ArlError(
                f"dpo: no task had both a passing and a failing episode in "
                f"{args.samples} samples; raise --samples or start from a stronger "
                "policy"
            )
        bar.event(f"{len(pairs)} (chosen, rejected) pairs from {len(samples)} episodes")
        return train_on(model, bar, sink, pairs, {"samples": args.samples})

    def train_on(model, bar, sink, pairs, source: dict):
        bar.total = config.steps

        def hook(step: int, _model) -> None:
            bar.update(step)

        reference = reference_of(model)  # a frozen copy; LoRA: the base (adapters off)
        history = dpo_train(model, reference, pairs, config, hook, hook_every=1, sink=sink)
        return history, {**asdict(config), "pairs": len(pairs), **source}

    check_data(args)
    return _run(args, "dpo", args.seed, train, config)


def _common(p: argparse.ArgumentParser, recipe: str) -> None:
    """The flags of every recipe that are not its config's fields."""
    add_policy_flags(p)
    p.add_argument("--eval-samples", type=positive_int, default=4, help="episodes per task")
    p.add_argument("--out", help=f"the run folder (default runs/{recipe})")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in OUT")
    add_report_flags(p, "each record's scalars (those of metrics.jsonl, lr among them)", "progress")


def register(ts: argparse._SubParsersAction) -> None:
    """Add sft, rft and dpo to `arl train`: each config's fields are its flags (config_flags)."""
    from arl.train.dpo import DPOConfig
    from arl.train.rft import RFTConfig
    from arl.train.sft import SFTConfig

    help_sft = "SFT on the 20 oracle demonstrations, the accumulator drawn afresh (action mask)"
    p = ts.add_parser("sft", help=help_sft, description=f"{help_sft}. {SEEDS}")
    _common(p, "sft")
    p.add_argument(
        "--data",
        type=nonempty,
        help="train on FILE instead: `arl export trajectories` rows (Parquet or JSONL) in the "
        "policy's tokens, or TRL's conversational rows (`messages`, `tools`; --model only)",
    )
    add_config_flags(p, SFTConfig)
    p.set_defaults(func=cmd_sft)
    help_rft = "expert iteration: sample, keep passing episodes, SFT on them"
    p = ts.add_parser("rft", help=help_rft, description=f"{help_rft}. {SEEDS}")
    _common(p, "rft")
    add_config_flags(p, RFTConfig, aliases=RFT_ALIASES)
    p.set_defaults(func=cmd_rft)
    help_dpo = "offline DPO on the policy's own passing / failing episodes"
    p = ts.add_parser("dpo", help=help_dpo, description=help_dpo)
    _common(p, "dpo")
    p.add_argument(
        "--samples", type=positive_int, default=8, help="episodes per task for the pairs"
    )
    p.add_argument("--seed", type=seed_int, default=0, help="the episodes' sampling and pairing")
    p.add_argument(
        "--data",
        type=nonempty,
        help="pairs from FILE instead of sampling: `arl export trajectories` rows (each passing "
        "row with a random failing one of its task) or TRL's preference rows (`prompt`, "
        "`chosen`, `rejected` messages; --model only)",
    )
    add_config_flags(p, DPOConfig)
    p.set_defaults(func=cmd_dpo)

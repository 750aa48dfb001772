"""Subcommands on an environment: `arl eval`, `arl show`, `arl tokens` (`--env`)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from arl.cli.args import (
    add_env_flags,
    env_config_of,
    nonneg_float,
    positive_int_max,
    seed_int,
    unit_float,
)
from arl.cli.check import add_chat_flags, check_chat_flags
from arl.cli.recipes import DTYPES, policy_from
from arl.env import NAMES, SPLITS, get_environment
from arl.errors import ArlError
from arl.model import TinyAgent
from arl.rollout import vocab_of
from arl.runio import atomic_write_text, check_writable, dumps_finite
from arl.train.policy import INITS, load_policy, looks_like_path
from arl.types import ENV, OWNER_NAMES, POLICY, PROMPT, TEMPLATE

POLICY_HELP = (
    "a scripted policy of --env's (oracle, blind, ...: an unknown name lists them all), "
    "untrained, weak (the weak base), cold (the RL cold start), or a checkpoint directory"
)
OWNER_STYLE = {PROMPT: "bold magenta", POLICY: "bold green", ENV: "cyan", TEMPLATE: "dim"}
MAX_SAMPLES = 1000  # episodes per task: 42,000 in all, about an hour for a checkpoint


def resolve_policy(spec: str, seed: int = 0, env: str = "bugfix") -> TinyAgent | str:
    """A scripted policy's name (of the environment `env`), or what
    `arl.train.policy.load_policy` loads for it."""
    if spec in get_environment(env).scripted_names():
        return spec
    if spec in INITS or looks_like_path(spec):
        return load_policy(os.path.expanduser(spec), seed, env)
    scripted = ", ".join(get_environment(env).scripted_names())
    raise ArlError(
        f"unknown policy {spec!r} for --env {env} (choose from its scripted policies: "
        f"{scripted}; or {', '.join(INITS)}, or a checkpoint directory)"
    )


SPLIT_NOTE = " (the tasks training sees; --split heldout for those it never sees)"


EVAL_EVERY_S = 15.0  # a real model's evaluation says where it is this often (stderr)


@contextmanager
def eval_progress(enabled: bool) -> Iterator[Callable[[str], None] | None]:
    """A `progress` for run_policy that prints a line on stderr each EVAL_EVERY_S seconds while
    a real model's episodes are sampled (`eval: 37/200 episodes finished (at 15 s)`); none in
    the first EVAL_EVERY_S, so a quick refusal stays one line. None when not `enabled`
    (TinyAgent's evaluations take seconds)."""
    if not enabled:
        yield None
        return
    import time

    from arl.progress import Progress

    bar, last = Progress("eval:"), time.monotonic()

    def paced(text: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= EVAL_EVERY_S:
            last = now
            bar.event(text)

    yield paced


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from arl.eval.metrics import evaluate

    if args.out is not None:  # before the evaluation, not after it
        check_writable(args.out)
        kept = Path(args.out)
        if kept.is_file() and not args.overwrite:
            raise ArlError(
                f"--out {kept}: exists (an earlier result); use another --out, or "
                "--overwrite to replace it"
            )
    check_chat_flags(args)
    if args.model:
        if args.policy:
            raise ArlError("eval: give a policy or --model, not both")
        policy = policy_from(argparse.Namespace(init=None, **vars(args)), args.seed)
        args.policy = args.model
    elif not args.policy:
        raise ArlError("eval: which policy? (a name, a checkpoint, or --model PATH_OR_ID)")
    else:
        policy = resolve_policy(args.policy, args.seed, args.env)
    config = env_config_of(args)  # a missing sandbox is refused here, before any episode
    tasks = get_environment(args.env).tasks(args.split)
    get_environment(args.env).make(tasks[0], config)
    if not args.json:
        note = SPLIT_NOTE if args.split == "train" else ""
        print(
            f"evaluating on the {args.split} split of {args.env}{note}: {len(tasks)} tasks x "
            f"{args.samples}"
        )
    with eval_progress(bool(args.model)) as progress:
        metrics, trajs = evaluate(
            policy,
            tasks,
            samples=args.samples,
            seed=args.seed,
            temperature=args.temperature,
            top_p=args.top_p,
            env_config=config,
            **({"progress": progress} if progress else {}),
        )
    from arl.env import run_record as record

    env = {"env": args.env} if args.env != "bugfix" else {}
    env |= record(config)  # "sandbox": "bwrap", or "none" under --allow-unsandboxed
    metrics = {"policy": args.policy, **env, "split": args.split, "seed": args.seed, **metrics}
    if args.out is not None:
        lines = []
        for k, tr in enumerate(trajs):
            row = {"task": tr.task, "sample": k % args.samples, "passed": tr.passed}
            row |= tr.outcome.as_dict(("public_pass", "malformed", "turns", "read"))
            lines.append(dumps_finite(row) + "\n")
        atomic_write_text(args.out, "".join(lines))
    if args.json:
        print(json.dumps(metrics))
        return 0
    table = Table(title=f"arl eval {args.policy} ({args.split} split, {len(trajs)} episodes)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    Console().print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.text import Text

    from arl.rollout import rollout_batch, scripted_rollout

    environment = get_environment(args.env)
    task = environment.get_task(args.task)
    policy = resolve_policy(args.policy, args.seed, args.env)
    config = env_config_of(args)
    if isinstance(policy, str):
        tr = scripted_rollout(policy, task, seed=args.seed, env_config=config)
    else:
        tr = rollout_batch(
            policy, [task], seed=args.seed, temperature=args.temperature, env_config=config
        )[0]
    vocab = vocab_of(environment)
    text = Text()
    for word, owner in zip(vocab.decode(tr.ids_T), tr.owners_T, strict=True):
        if word == "<obs>":
            text.append("  ")
        text.append(word + " ", style=OWNER_STYLE[owner])
        if word in ("<end>", "</obs>"):
            text.append("\n")
    console = Console()
    console.print(f"[bold]{task.name}[/] ({task.family}, {task.split}) policy={args.policy}")
    console.print(text)
    legend = "  ".join(f"[{OWNER_STYLE[o]}]{n}[/]" for o, n in OWNER_NAMES.items())
    info = tr.outcome.as_dict(("hidden_pass", "public_pass", "malformed", "turns"))
    console.print(f"owners: {legend}")
    console.print(f"reward {tr.reward:.2f}  " + "  ".join(f"{k} {v}" for k, v in info.items()))
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from arl.eval.metrics import token_accounting
    from arl.experiments.ch15_book import BOOK_TOKENS as book
    from arl.train.bases import oracle_demos

    acc = token_accounting(oracle_demos(args.env), len(vocab_of(args.env)))
    if args.json:
        print(json.dumps(acc))
        return 0
    table = Table(
        title=f"Token accounting of the {acc['episodes']} oracle demonstrations ({args.env})"
    )
    for col in ("quantity", "measured", "book"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for key, value in acc.items():
        fmt = (lambda v: f"{v:.1%}") if key.endswith("share") else str
        table.add_row(key, fmt(value), fmt(book[key]) if key in book else "")
    Console().print(table)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval`, `show` and `tokens` to the `arl` parser."""
    p = sub.add_parser("eval", help="measure a policy on a split of an environment")
    p.add_argument("policy", nargs="?", help=POLICY_HELP)
    add_env_flags(p)
    p.add_argument("--model", help="a transformers causal LM (directory or hub id)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N] when present")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    add_chat_flags(p)  # --tool-format / --turn-end: a real model's calls
    p.add_argument("--split", choices=SPLITS, default="train")
    p.add_argument(
        "--samples",
        type=positive_int_max(MAX_SAMPLES),
        default=10,
        help=f"episodes per task (default 10, enough for pass@10; at most {MAX_SAMPLES})",
    )
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--temperature", type=nonneg_float, default=1.0, help="finite, >= 0")
    p.add_argument("--top-p", type=unit_float, default=1.0)
    p.add_argument(
        "--out", help="write per-episode results (task, sample, passed) as JSONL, atomically"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("show", help="render one episode, each token coloured by its owner")
    p.add_argument("task", help="a task's function name, e.g. sum_list")
    p.add_argument("--policy", default="oracle", help=POLICY_HELP)
    add_env_flags(p)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--temperature", type=nonneg_float, default=1.0)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("tokens", help="token accounting of the oracle demonstrations")
    p.add_argument("--json", action="store_true")
    p.add_argument("--env", choices=NAMES, default="bugfix")
    p.set_defaults(func=cmd_tokens)

"""`arl check template PATH`: what a tokenizer's chat template does to a growing conversation
(arl.hf.template_check computes; this module parses and prints). One line per finding, exit
status 0; a folder that holds no tokenizer is one line and exit status 2.

`arl check env NAME`: an environment put through the protocol (arl.testing.check_env), one
line per check; exit status 0 when every check holds, 1 when one fails, 2 for an unknown NAME.

Also the flags that go with `--model` wherever it is taken (`add_chat_flags`): the call format
(`--tool-format`) and the token that ends an assistant turn (`--turn-end`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from arl.cli.args import nonempty, positive_int_max
from arl.errors import ArlError
from arl.hf.toolcalls import FORMATS


def add_chat_flags(p: argparse.ArgumentParser) -> None:
    """--tool-format / --turn-end: how a real model (--model) writes its calls and ends a turn."""
    p.add_argument(
        "--tool-format",
        choices=FORMATS,
        default=None,
        help="--model's calls: arl's words (default), or its family's native tool calls "
        "(qwen: <tool_call> JSON; llama: Llama 3.1's JSON) with the tools as JSON schemas; "
        "a model arl trained and saved speaks the format it was trained in unless told",
    )
    p.add_argument(
        "--turn-end",
        metavar="TOKEN",
        help="the token that ends --model's assistant turn (default: the one its chat template "
        "closes a turn with, else eos; `arl check template PATH` shows it)",
    )


def chat_options(args: argparse.Namespace) -> dict:
    """The chat flags' values, as arl.hf.policy.load_hf takes them (None where not given:
    the saved model's own, else words and the template's turn end)."""
    return {
        "tool_format": getattr(args, "tool_format", None),
        "turn_end": getattr(args, "turn_end", None),
    }


def check_chat_flags(args: argparse.Namespace) -> None:
    """The chat flags go with --model: given without it, one line (TinyAgent speaks words)."""
    chat = chat_options(args)
    if not getattr(args, "model", None) and (
        chat["tool_format"] not in (None, "words") or chat["turn_end"]
    ):
        raise ArlError("--tool-format and --turn-end go with --model (TinyAgent speaks words)")


def _check_template(args: argparse.Namespace) -> int:
    from arl.hf.template_check import findings, inspect, load_tokenizer

    report = inspect(load_tokenizer(args.path))
    if args.json:
        print(json.dumps(asdict(report) | {"findings": findings(report)}, indent=1))
    else:
        print("\n".join(findings(report)))
    return 0


EXIT_FAULT = 1  # `check env`: a check failed


def _check_env(args: argparse.Namespace) -> int:
    from arl.env import get_environment
    from arl.testing import check_env

    environment = get_environment(args.name)  # an unknown name: one line, exit 2
    findings = check_env(environment, seeds=tuple(range(args.seeds)), max_tasks=args.tasks)
    if args.json:
        rows = [asdict(f) for f in findings]
        print(json.dumps({"env": args.name, "ok": all(f.ok for f in findings), "checks": rows}))
    else:
        print("\n".join(f.line() for f in findings))
    return 0 if all(f.ok for f in findings) else EXIT_FAULT


def register(sub: argparse._SubParsersAction) -> None:
    """Add `check template PATH` and `check env NAME` to the `arl` parser."""
    p = sub.add_parser("check", help="check what a real model's files do under arl")
    what = p.add_subparsers(dest="what", required=True, parser_class=type(p))
    t = what.add_parser(
        "template",
        help="is a tokenizer's chat template incremental, which token ends an assistant turn, "
        "are earlier turns rewritten",
    )
    t.add_argument(
        "path", type=nonempty, help="a tokenizer's from_pretrained folder (local; never the hub)"
    )
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.set_defaults(func=_check_template)
    e = what.add_parser(
        "env",
        help="put an environment through the protocol (types, Outcome, oracle and blind play, "
        "determinism, tokens in and out, tools); exit 0 all hold, 1 a check failed",
    )
    from arl.env import NAMES

    e.add_argument("name", help=f"a registered environment ({', '.join(NAMES)})")
    e.add_argument(
        "--seeds", type=positive_int_max(20), default=2, help="episode seeds 0..N-1 (default 2)"
    )
    e.add_argument(
        "--tasks", type=positive_int_max(10_000), default=None, help="the first N of each split"
    )
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(func=_check_env)

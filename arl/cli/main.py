"""Entry point of the `arl` command: dispatch, and one-line errors instead of tracebacks."""

from __future__ import annotations

import argparse
import os
import sys

from arl.errors import ArlError


class _Parser(argparse.ArgumentParser):
    """argparse that exits with one line (status 2) on bad usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"arl: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from arl.cli import gym as gym_cli
    from arl.cli import numbers as numbers_cli
    from arl.cli import reproduce as reproduce_cli
    from arl.cli import train as train_cli

    parser = _Parser(prog="arl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (gym_cli, train_cli, reproduce_cli, numbers_cli):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ArlError as e:
        print(f"arl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("arl: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # never a traceback from the CLI, unless asked for
        if os.environ.get("ARL_DEBUG"):
            raise
        print(
            f"arl: internal error: {type(e).__name__}: {e} (set ARL_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Argument types shared by the subcommands: bad values become one-line usage errors.

Each type converts the text and then applies arl.checks.check, so a flag is finite and in
range exactly when the config field it feeds would be.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from arl.checks import SEED_MAX, check, describe
from arl.errors import ArlError


def _typed(integer: bool, lo, hi, open_lo: bool = False, open_hi: bool = False, what: str = ""):
    """An argparse type: int or float text, finite, in [lo, hi] (bounds None: open ended)."""
    kind = "an integer" if integer else "a finite number"
    what = what or f"{kind} {describe(lo, hi, open_lo, open_hi)}"
    convert: Callable[[str], float] = int if integer else float

    def parse(text: str):
        try:
            value = convert(text)
            return check("value", value, lo, hi, open_lo=open_lo, open_hi=open_hi, integer=integer)
        except (ValueError, ArlError):  # ArlError is a ValueError too
            raise argparse.ArgumentTypeError(f"expected {what.strip()}, got {text!r}") from None

    parse.__name__ = what
    return parse


def int_in(lo: int, hi: int | None = None, what: str = "") -> Callable[[str], int]:
    """An integer flag in [lo, hi]."""
    return _typed(True, lo, hi, what=what)


def float_in(
    lo: float | None = None, hi: float | None = None, open_lo: bool = False, open_hi: bool = False
) -> Callable[[str], float]:
    """A finite float flag in the range (NaN and inf are refused)."""
    return _typed(False, lo, hi, open_lo, open_hi)


positive_int = int_in(1, None, "a positive integer")
unit_float = float_in(0.0, 1.0, open_lo=True)  # (0, 1]
nonneg_float = float_in(0.0)  # [0, inf), finite
finite_float = float_in()
positive_float = float_in(0.0, open_lo=True)  # (0, inf), finite
seed_int = int_in(0, SEED_MAX, f"a seed in [0, {SEED_MAX}]")


def positive_int_max(hi: int) -> Callable[[str], int]:
    """A positive integer with a documented upper bound (a size that would run until killed)."""
    return int_in(1, hi, f"a positive integer <= {hi:,}")


def nonempty(text: str) -> str:
    """A path argument that names something: '' is refused (Path('') would be the current
    folder, and the run would write or read there)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file or folder")
    return text


def nonempty_path(text: str) -> Path:
    """nonempty, as a Path."""
    return Path(nonempty(text))


def ray_address(text: str) -> str:
    """--ray's ADDRESS: local, auto, HOST:PORT or ray://HOST:PORT, HOST a name or an IP
    address that parses (256.1.1.1 does not); whether it answers is checked when Ray starts."""
    from arl.parallel import parse_ray_address

    try:
        parse_ray_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_ray_flag(p: argparse.ArgumentParser) -> None:
    """--ray [ADDRESS]: seeds as Ray tasks, on a local Ray (no address) or a cluster."""
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        type=ray_address,
        metavar="ADDRESS",
        help="run the seeds as Ray tasks (pip install 'arl[ray]'): a local Ray with --workers "
        "CPUs, or the cluster at ADDRESS (e.g. ray://head:10001 or auto)",
    )


def add_env_flags(p: argparse.ArgumentParser) -> None:
    """--env (which environment) and --allow-unsandboxed (CodeFix without bubblewrap)."""
    from arl.env import NAMES

    p.add_argument(
        "--env",
        choices=NAMES,
        default="bugfix",
        help=env_help(),
    )
    p.add_argument(
        "--allow-unsandboxed",
        action="store_true",
        help="an environment that runs policy code (codefix, ...) where bubblewrap is missing: "
        "run it WITHOUT a sandbox (unsafe; refused otherwise)",
    )


def env_help(default: str = "bugfix") -> str:
    """--env's help: the registered environments by name (arl.env.NAMES: the built-ins and
    every installed package's), never a list written here."""
    from arl.env import NAMES

    return f"the environment, one of those registered: {', '.join(NAMES)} (default {default})"


def add_report_flags(p: argparse.ArgumentParser, scalars: str, progress: str) -> None:
    """--report-to (where else each record's `scalars` go) and --quiet (no `progress`)."""
    from arl.logging_bridge import REPORT_TO

    p.add_argument(
        "--report-to",
        choices=REPORT_TO,
        default="none",
        help=f"also log {scalars} to OUT/tensorboard, or to wandb (offline unless WANDB_MODE is "
        "set)",
    )
    p.add_argument("--quiet", action="store_true", help=f"no {progress}")


def env_config_of(args: argparse.Namespace):
    """The environment config the flags ask for: its defaults, and the sandbox permission."""
    from dataclasses import replace

    from arl.env import get_environment

    config = get_environment(args.env).default_config()
    if getattr(args, "allow_unsandboxed", False):
        if not hasattr(config, "allow_unsandboxed"):
            raise ArlError(f"--allow-unsandboxed: the {args.env} environment runs no sandbox")
        config = replace(config, allow_unsandboxed=True)
    return config

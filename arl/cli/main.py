"""Entry point of the `arl` command: dispatch, and one-line errors instead of tracebacks."""

from __future__ import annotations

import argparse
import errno
import os
import sys

from arl import __version__
from arl.errors import ArlError, Diverged

EXIT_USAGE, EXIT_DIVERGED, EXIT_PIPE = 2, 3, 141  # 141: what a shell reports after SIGPIPE
EXIT_WRITE = 1  # the output could not be written (a full disk, /dev/full): not bad input


class _Parser(argparse.ArgumentParser):
    """argparse that exits with one line (status 2) on bad usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"arl: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from arl.cli import adopt as adopt_cli
    from arl.cli import audit as audit_cli
    from arl.cli import calculators as calc_cli
    from arl.cli import check as check_cli
    from arl.cli import doctor as doctor_cli
    from arl.cli import export as export_cli
    from arl.cli import gym as gym_cli
    from arl.cli import lock as lock_cli
    from arl.cli import report as report_cli
    from arl.cli import reproduce as reproduce_cli
    from arl.cli import sim as sim_cli
    from arl.cli import stats as stats_cli
    from arl.cli import train as train_cli

    parser = _Parser(
        prog="arl",
        description=__doc__,
        epilog="exit status: 0 done, 2 bad input (one line on stderr), 3 a run stopped on a "
        "non-finite loss or gradient, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"arl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (gym_cli, train_cli, reproduce_cli, stats_cli, calc_cli, sim_cli, export_cli):
        module.register(sub)
    audit_cli.register(sub)  # `arl audit env NAME` (Problem 11)
    adopt_cli.register(sub)
    lock_cli.register(sub)  # `arl lock`: the reproductions' locked rules
    check_cli.register(sub)  # `arl check template PATH`: a chat template under arl
    doctor_cli.register(sub)  # `arl doctor RUN`: Appendix B's diagnoses of a run's metrics
    report_cli.register(sub)  # `arl report RUN`: the run's panels and findings (HTML)
    return parser


def _one_line(e: Exception) -> str:
    """The message on one line, whatever a path or a library put in it."""
    return " ".join(str(e).split())


def _quiet_pipe() -> int:
    """stdout's reader went away (`arl ... --json | head`): stop without a word."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the final flush at exit must not fail again
    except (OSError, ValueError, AttributeError):  # not a real file (a test's stand-in)
        pass
    return EXIT_PIPE


def _pipe_closed(_console=None) -> None:
    """What rich does when stdout's reader goes away: here, the one way (BrokenPipeError)."""
    raise BrokenPipeError


def _unwritable(e: OSError) -> int:
    """stdout (or a file) cannot take what is written: one line, exit 1, nothing more."""
    print(f"arl: error: cannot write the output ({e.strerror or e})", file=sys.stderr)
    _quiet_pipe()  # the exit's final flush would fail again
    return EXIT_WRITE


EXIT_INTERRUPTED = 130  # what a shell reports after SIGINT
_interrupt = {"count": 0, "said": False}


def _say_interrupted(in_handler: bool = False) -> None:
    """The one "arl: interrupted" line, written at most once (inside a signal handler straight
    to descriptor 2: sys.stderr may be in the middle of a write)."""
    if _interrupt["said"]:
        return
    _interrupt["said"] = True
    try:
        if in_handler:
            os.write(2, b"arl: interrupted\n")
        else:
            print("arl: interrupted", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _stop_workers() -> None:
    """Kill this process's worker processes (pools, rollout workers): none outlives it."""
    import multiprocessing

    for child in multiprocessing.active_children():
        try:
            child.kill()
        except (OSError, ValueError, AttributeError):
            pass


def _on_sigint(_signum, _frame) -> None:
    """The first Ctrl-C stops the command the usual way (KeyboardInterrupt: its cleanup runs);
    a second one, while that cleanup or the exit runs, ends it now: workers killed, one line,
    status 130 (not death by the signal)."""
    _interrupt["count"] += 1
    if _interrupt["count"] == 1:
        raise KeyboardInterrupt
    _stop_workers()
    _say_interrupted(in_handler=True)
    os._exit(EXIT_INTERRUPTED)


def _install_sigint() -> None:
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, _on_sigint)
        except (ValueError, OSError):
            pass


def main(argv: list[str] | None = None) -> int:
    """Run one `arl` command; bad input is one line on stderr and exit status 2. As the `arl`
    program (no argv given), Ctrl-C once or twice ends in one line and status 130."""
    _interrupt.update(count=0, said=False)
    if argv is None:
        _install_sigint()
    try:
        from rich.console import Console

        Console.on_broken_pipe = _pipe_closed  # rich would exit 1 itself
        parser = build_parser()
        args = parser.parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a write error surfaces here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _quiet_pipe()
    except OSError as e:
        if e.errno == errno.EPIPE:
            return _quiet_pipe()
        if e.errno in (errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EROFS, errno.EDQUOT):
            return _unwritable(e)
        return _internal(e)
    except Diverged as e:
        print(f"arl: stopped: {_one_line(e)}", file=sys.stderr)
        return EXIT_DIVERGED
    except ArlError as e:
        print(f"arl: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _stop_workers()
        _say_interrupted()
        return EXIT_INTERRUPTED
    except RecursionError:  # e.g. deeply nested JSON anywhere it is read
        print("arl: error: input nested too deeply", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # never a traceback from the CLI, unless asked for
        return _internal(e)


def _internal(e: Exception) -> int:
    """A bug, not bad input: one line, exit 1 (ARL_DEBUG=1 raises it for its traceback)."""
    if os.environ.get("ARL_DEBUG"):
        raise e
    print(
        f"arl: internal error: {type(e).__name__}: {e} (set ARL_DEBUG=1 for a traceback)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())

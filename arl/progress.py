"""The one progress display of every long loop: a live bar on a terminal, plain lines elsewhere.

`update(done, text)` moves the bar; `event(text)` prints one line with the time so far
(`[seed 0] dpo (at 12 s)`), the form that reads the same in a terminal, a log file or from
several worker processes. Output goes to stderr unless told otherwise, so stdout stays clean
for tables and `--json`. `report(text)`, from deep inside a long step (a training loop, an
evaluation), reaches whichever runner opened `reporting(...)` around it, at a steady pace.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

_REPORTER: ContextVar[Callable[[str], None] | None] = ContextVar("arl_reporter", default=None)


def report(text: str) -> None:
    """Say where a long piece of work is (`weak base: SFT step 40/150`); shown only inside
    `reporting(...)`, so library code can call it freely."""
    emit = _REPORTER.get()
    if emit is not None:
        emit(text)


@contextmanager
def reporting(emit: Callable[[str], None], every_s: float = 20.0) -> Iterator[None]:
    """Within the block, `report(text)` calls `emit(text)`, the first at once and then at most
    once per `every_s` seconds: a log gets a line about that often while work goes on."""
    last = -math.inf

    def paced(text: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            emit(text)

    token = _REPORTER.set(paced)
    try:
        yield
    finally:
        _REPORTER.reset(token)


class Progress:
    """Progress over `total` steps, labelled `label`.

    On a terminal a rich bar (label, bar, done/total, time, `text`) appears once `delay_s`
    has passed and stops at `total` (erased if `transient`); elsewhere a plain line is printed
    at most every `every_s` seconds and at the end. `enabled=False` makes every call a no-op.
    """

    def __init__(
        self,
        label: str,
        total: int = 0,
        *,
        start: int = 0,
        delay_s: float = 0.0,
        every_s: float = 30.0,
        transient: bool = False,
        enabled: bool = True,
        stream: TextIO | None = None,
        t0: float | None = None,
    ) -> None:
        self.label, self.total, self.start, self.enabled = label, total, start, enabled
        self.delay_s, self.every_s, self.transient = delay_s, every_s, transient
        self.stream = stream if stream is not None else sys.stderr
        self.live = enabled and _is_terminal(self.stream)
        # when the work began, on time.monotonic's clock (one clock for every process on a
        # machine, so a helper process can count from its parent's start)
        self.t0 = time.monotonic() if t0 is None else t0
        self.last_line = -float("inf")  # when the last plain line was printed
        self.bar, self.task = None, None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def update(self, done: int, text: str = "") -> None:
        """`done` of `total` steps are done; `text` describes the latest one."""
        now = self.elapsed()
        if not self.enabled or (self.bar is None and now < self.delay_s):
            return
        if not self.live:
            if done >= self.total or now - self.last_line >= self.every_s:
                self.last_line = now
                line = f"{self.label} {done}/{self.total} ({now:.0f} s) {text}"
                print(line.rstrip(), file=self.stream, flush=True)
            return
        if self.bar is None and done < self.total:
            self._start_bar()
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=text)
            if done >= self.total:
                self.close()

    def event(self, text: str) -> None:
        """One line now, with the time so far: `{label} {text} (at N s)`."""
        if not self.enabled:
            return
        line = f"{self.label} {text} (at {self.elapsed():.0f} s)"
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the bar (a no-op for plain lines, or when already stopped)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        columns = (
            TextColumn(self.label, markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}", markup=False),
        )
        self.bar = Bar(*columns, console=Console(file=self.stream), transient=self.transient)
        self.bar.start()
        self.task = self.bar.add_task("", total=self.total, completed=self.start)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False

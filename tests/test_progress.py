"""arl.progress: plain lines when output is a file, a live bar only on a terminal."""

import io

from arl import progress
from arl.progress import Progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_to_a_file_at_most_every_interval_and_at_the_end():
    out = io.StringIO()
    bar = Progress("pg", 5, every_s=3600.0, stream=out)
    for step in range(1, 6):
        bar.update(step, f"reward {step / 10:.1f}")
    bar.close()
    assert out.getvalue().splitlines()[0].startswith("pg 1/5 (0 s) reward 0.1")
    assert out.getvalue().splitlines()[-1].startswith("pg 5/5 (0 s) reward 0.5")
    assert len(out.getvalue().splitlines()) == 2  # the first and the last


def test_events_are_one_timed_line_and_disabled_is_silent():
    out = io.StringIO()
    Progress("[seed 3]", stream=out).event("dpo")
    assert out.getvalue() == "[seed 3] dpo (at 0 s)\n"
    later = io.StringIO()  # a helper process counts from its parent's start
    Progress("[seed 3]", stream=later, t0=progress.time.monotonic() - 42.0).event("dpo: step 5")
    assert later.getvalue() == "[seed 3] dpo: step 5 (at 42 s)\n"
    quiet = io.StringIO()
    off = Progress("pg", 2, enabled=False, stream=quiet)
    off.update(1, "x")
    off.event("y")
    off.close()
    assert quiet.getvalue() == ""


def test_nothing_before_the_delay(monkeypatch):
    out = io.StringIO()
    clock = iter([0.0, 1.0, 5.0, 5.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = Progress("sim", 4, delay_s=2.0, stream=out)  # t0 = 0
    bar.update(1)  # at 1 s: too early
    assert out.getvalue() == ""
    bar.update(4)  # at 5 s: the end
    assert out.getvalue() == "sim 4/4 (5 s)\n"


def test_a_terminal_gets_a_bar_that_stops_at_the_total():
    out = _Tty()
    bar = Progress("[seed 0]", 3, stream=out)  # markup-like labels are printed as they are
    bar.update(1, "[red]a[/]")
    assert bar.bar is not None
    bar.update(3)
    assert bar.bar is None
    assert "[seed 0]" in out.getvalue()


def test_reports_reach_the_runner_at_a_steady_pace_and_nothing_outside(monkeypatch):
    seen: list[str] = []
    progress.report("nobody listens")  # outside `reporting`: a no-op
    clock = iter([0.0, 5.0, 20.0, 39.0, 41.0, 41.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with progress.reporting(seen.append, every_s=20.0):
        for step in range(1, 6):  # at 0, 5, 20, 39 and 41 s
            progress.report(f"step {step}")
        with progress.reporting(lambda text: seen.append("inner " + text), every_s=0.0):
            progress.report("nested")  # the innermost runner hears it ...
    assert seen == ["step 1", "step 3", "step 5", "inner nested"]
    progress.report("after")  # ... and the outer one is gone after its block
    assert seen[-1] == "inner nested"

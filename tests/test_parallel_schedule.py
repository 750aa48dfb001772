"""schedule.run_graph: jobs start as their needs finish, the longest remaining path first, on
every free worker; failures stop the run in one line, with no worker left behind."""

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from arl.errors import ArlError
from arl.experiments.ch15_plan import PLAN
from arl.experiments.schedule import Job, JobFailed, _Graph, remaining, run_graph
from arl.parallel import Where


def simulate(jobs: list[Job], workers: int) -> dict:
    """The schedule run_graph's choices give on `workers` workers if each job takes exactly
    its `seconds`: {key: (start, end)} (an event simulation of _Graph, no processes)."""
    graph, now, running, spans = _Graph(jobs, workers), 0.0, {}, {}
    while graph.left():
        while len(running) < workers and (job := graph.next()) is not None:
            running[job.key] = now + job.seconds
            spans[job.key] = (now,)
        key = min(running, key=lambda k: (running[k], k))
        now = running.pop(key)
        graph.results[key] = None
        spans[key] = (spans[key][0], now)
    return spans


def ch15_jobs(seeds=(0,)) -> list[Job]:
    """Chapter 15's plan as jobs (no function: only the graph and the seconds matter)."""
    return [
        Job((s, t.name), print, (), tuple((s, k) for k in t.needs), t.seconds, group=s)
        for s in seeds
        for t in PLAN
    ]


def test_remaining_is_the_longest_path_to_the_end_by_hand():
    jobs = [
        Job("a", print, seconds=2),
        Job("b", print, needs=("a",), seconds=5),
        Job("c", print, needs=("a",), seconds=1),
        Job("d", print, needs=("c", "b"), seconds=3),
        Job("e", print, needs=("c",), seconds=10),
    ]
    # e 10; d 3; b 5 + 3 = 8; c 1 + max(3, 10) = 11; a 2 + max(8, 11) = 13
    assert remaining(jobs) == {"a": 13, "b": 8, "c": 11, "d": 3, "e": 10}
    with pytest.raises(ArlError, match="circle"):
        remaining([Job("x", print, needs=("y",)), Job("y", print, needs=("x",))])
    with pytest.raises(ArlError, match="not a job"):
        remaining([Job("x", print, needs=("z",))])


def idle_while_ready(jobs: list[Job], spans: dict, workers: int) -> list[float]:
    """The moments a worker idles while a job is ready (its needs ended, itself not started)."""
    bad = []
    for t in sorted({x for span in spans.values() for x in span}):
        running = [k for k, (a, b) in spans.items() if a <= t < b]
        ready = [j for j in jobs if spans[j.key][0] > t and all(spans[k][1] <= t for k in j.needs)]
        if len(running) < workers and ready:
            bad.append(t)
    return bad


def test_ch15_on_two_workers_starts_dpo_as_the_weak_base_is_done_and_never_idles():
    jobs = ch15_jobs()
    spans = simulate(jobs, workers=2)
    for j in jobs:  # no job starts before what it needs has ended
        assert all(spans[k][1] <= spans[j.key][0] for k in j.needs)
    weak_end = spans[(0, "weak")][1]
    assert weak_end == 44.0 and spans[(0, "dpo")][0] == weak_end  # the longest path first
    assert spans[(0, "oracle_sft")][0] == weak_end  # beside it, the oracle-SFT chain
    assert idle_while_ready(jobs, spans, 2) == []
    # 44 s of weak base alone, then 243 s of work on two workers, within one job of even
    makespan = max(end for _, end in spans.values())
    assert makespan <= 44.0 + 0.5 + (sum(j.seconds for j in jobs) - 44.5) / 2 + 8.0
    one = simulate(jobs, workers=1)  # one worker: the sum of the seconds
    assert max(end for _, end in one.values()) == sum(j.seconds for j in jobs)


def test_seeds_finish_in_order_the_first_as_fast_as_alone_and_no_core_idles():
    jobs = ch15_jobs(seeds=(0, 1, 2))
    spans = simulate(jobs, workers=2)
    end = {s: max(spans[(s, t.name)][1] for t in PLAN) for s in (0, 1, 2)}
    alone = max(end for _, end in simulate(ch15_jobs(), workers=2).values())
    assert end[0] == alone  # the other seeds only take what seed 0 leaves idle
    assert end[0] < end[1] < end[2]  # a kill loses only the seeds in flight
    assert idle_while_ready(jobs, spans, 2) == []
    # the last seed's weak base and DPO (134 s) may run with little beside them
    assert end[2] <= sum(j.seconds for j in jobs) / 2 + 134.0 / 2


def stamped(seconds: float, *needs: tuple) -> tuple:
    """A job that sleeps `seconds`: (pid, start, end) on time.monotonic's clock."""
    t0 = time.monotonic()
    time.sleep(seconds)
    return os.getpid(), t0, time.monotonic()


def worker_state() -> tuple[bool, int]:
    """Whether this process ignores Ctrl-C (SIGINT), and torch's thread count here."""
    import signal

    import torch

    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN, torch.get_num_threads()


def test_processes_start_each_job_when_its_needs_are_done_on_both_workers():
    jobs = [
        Job("probe", worker_state, seconds=0),
        Job("weak", stamped, (1.0,), seconds=44),
        Job("dpo", stamped, (4.0,), ("weak",), seconds=90),
        Job("oracle", stamped, (2.0,), ("weak",), seconds=25),
        Job("rft", stamped, (0.5,), ("weak",), seconds=20),
        Job("groups", stamped, (0.2,), ("oracle",), seconds=8),
    ]
    got = dict(run_graph(jobs, Where(workers=2)))
    assert got.pop("probe") == (True, 1)  # Ctrl-C reaches the parent alone; one thread a job
    for j in jobs[1:]:  # every job after its needs
        assert all(got[k][2] <= got[j.key][1] for k in j.needs)
    _, weak_start, weak_end = got["weak"]
    assert got["dpo"][1] - weak_end < 2.0  # at once, not after the 2 s oracle (a loaded machine)
    assert got["oracle"][1] < got["dpo"][2] and got["dpo"][0] != got["oracle"][0]  # beside it
    assert got["rft"][1] >= got["oracle"][2]  # the third ready job waits for a free worker
    assert multiprocessing.active_children() == []


def fails_for(key: str, marker: str, job: str) -> str:
    """Fail when `job` == `key` (after `marker` exists: the others are done), else return."""
    if job == key:
        while not Path(marker).exists():
            time.sleep(0.05)
        raise RuntimeError("broken on purpose")
    if job == "long":
        time.sleep(60)
    return job


def test_a_failed_job_stops_the_run_in_one_line_keeps_what_finished_and_ends_the_rest(tmp_path):
    marker = str(tmp_path / "m")
    jobs = [Job(k, fails_for, ("bad", marker, k), label=f"[seed 1] {k}") for k in ("ok", "bad")]
    jobs.append(Job("long", fails_for, ("bad", marker, "long")))
    got, t0 = [], time.monotonic()
    before = set(multiprocessing.active_children())  # another test's, on this pytest worker
    with pytest.raises(JobFailed) as e:
        for key, _ in run_graph(jobs, Where(workers=2, retries=1)):
            got.append(key)
            Path(marker).write_text("x")  # "ok" is in: now "bad" fails
    assert str(e.value) == "[seed 1] bad: RuntimeError: broken on purpose"
    assert isinstance(e.value.__cause__, RuntimeError)
    assert got == ["ok"]  # yielded before the failure, so the caller saved it
    left = set(multiprocessing.active_children()) - before  # every worker of this run ended
    assert not left and time.monotonic() - t0 < 30  # "long" (60 s) ended, not waited for
    # bad input is not rerun: one line, naming the job
    calls = tmp_path / "calls"
    with pytest.raises(ArlError, match=r"^\[seed 0\] x: bad value$"):
        list(run_graph([Job("x", refuses, (str(calls),), label="[seed 0] x")], Where(workers=2)))
    assert calls.read_text() == "x"


def refuses(calls: str) -> None:
    with open(calls, "a") as f:
        f.write("x")
    raise ArlError("bad value")


def dies_once(marker: str, value: int, *inputs: int) -> int:
    """Kill the worker process the first time, as an OOM kill would; then add the inputs."""
    p = Path(marker)
    if not p.exists():
        p.write_text("x")
        os._exit(1)
    return value + sum(inputs)


def test_a_killed_worker_reruns_its_job_and_a_job_gets_its_needs_results(tmp_path):
    jobs = [
        Job("a", dies_once, (str(tmp_path / "a"), 1)),
        Job("b", dies_once, (str(tmp_path / "b"), 10), ("a",)),
        Job("c", dies_once, (str(tmp_path / "a"), 100), ("a", "b")),
    ]
    assert dict(run_graph(jobs, Where(workers=2, retries=1))) == {"a": 1, "b": 11, "c": 112}
    assert dict(run_graph(jobs, Where(workers=1))) == {"a": 1, "b": 11, "c": 112}
    with pytest.raises(ArlError, match="died"):
        list(run_graph([Job("d", dies_once, (str(tmp_path / "d"), 1))], Where(2, retries=0)))

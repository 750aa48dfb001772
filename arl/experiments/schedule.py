"""Run a graph of jobs on a pool of local processes, each job as soon as its inputs are ready.

    jobs = [Job("weak", train_weak), Job("dpo", dpo, needs=("weak",), seconds=90), ...]
    for key, result in run_graph(jobs, Where(workers=2)):
        keep(key, result)            # as each job finishes

A job runs fn(*started(job), *args, *results of its needs) in a worker process (its inputs
and its result cross processes pickled). When a worker is free it takes the ready job that
must start soonest: each group of jobs (a seed) is due when its work and that of the groups
before it would be done with every worker busy, and a job must start by its group's due
time less its longest remaining path (its estimated seconds plus the longest chain of jobs
waiting on it). Within a group that is the critical path first; across groups, the first
group first unless a later one's long chain must start (its weak base beside the first
seed's last sections). A worker idles only while no job is ready, and groups finish in
order (a killed run loses only the groups in flight). Same jobs, same results, in any order:
a job must depend on nothing but its arguments and its inputs.

A failed job is rerun up to `retries` times (a bad-input ArlError never); then the run stops
with a one-line JobFailed (or ArlError) naming the job, and every worker is ended at once, as
on Ctrl-C (which reaches this process alone). Results already yielded stay yielded.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from arl.errors import ArlError
from arl.parallel import SPAWN, Where, _ignore_ctrl_c, _submit


@dataclass(frozen=True)
class Job:
    """One piece of work: fn(*started(job), *args, *[result of each need]), in a worker."""

    key: Hashable  # unique among the jobs
    fn: Callable[..., Any]  # a module-level function (it is pickled by name)
    args: tuple = ()
    needs: tuple = ()  # keys of the jobs whose results it takes, in this order
    seconds: float = 1.0  # its estimated run time: only the order of jobs depends on it
    group: Hashable = None  # a group (a seed) is due after the groups before it
    label: str = ""  # its name in an error message (default: its key)


class JobFailed(RuntimeError):
    """A job failed for good: the one line says which, and its error (chained as __cause__)."""


def remaining(jobs: Sequence[Job]) -> dict[Hashable, float]:
    """Each job's longest remaining path: its seconds plus the longest remaining path of the
    jobs that need it (0 if none); the time the graph needs at least once it starts."""
    keys = {j.key for j in jobs}
    after: dict[Hashable, list[Job]] = {j.key: [] for j in jobs}
    for j in jobs:
        for k in j.needs:
            if k not in keys:
                raise ArlError(f"job {j.key!r} needs {k!r}, which is not a job")
            after[k].append(j)
    out: dict[Hashable, float] = {}
    for j in _topological(jobs)[::-1]:  # every job after those it needs: here, reversed
        out[j.key] = j.seconds + max((out[a.key] for a in after[j.key]), default=0.0)
    return out


def _due(jobs: Sequence[Job], workers: int) -> dict[Hashable, float]:
    """Each group's due time: when its work and that of the groups before it (in the order
    they first appear) would be done with every worker busy."""
    due: dict[Hashable, float] = {}
    for j in jobs:
        due[j.group] = due.get(j.group, 0.0) + j.seconds / max(workers, 1)
    total = 0.0
    for group, seconds in due.items():  # in order of first appearance
        total += seconds
        due[group] = total
    return due


def _topological(jobs: Sequence[Job]) -> list[Job]:
    """The jobs in an order where each comes after those it needs; a cycle is an error."""
    by_key, order, state = {j.key: j for j in jobs}, [], {}
    for start in jobs:
        stack = [(start, 0)]
        while stack:
            job, i = stack.pop()
            if i == 0 and state.get(job.key) == "done":
                continue
            if i == 0 and state.get(job.key) == "open":
                raise ArlError(f"the jobs' needs run in a circle through {job.key!r}")
            state[job.key] = "open"
            if i < len(job.needs):
                stack += [(job, i + 1), (by_key[job.needs[i]], 0)]
            else:
                state[job.key] = "done"
                order.append(job)
    return order


class _Graph:
    """Which jobs are done, running, ready or waiting, and which to start next."""

    def __init__(self, jobs: Sequence[Job], workers: int):
        self.jobs, self.rank = list(jobs), remaining(jobs)
        self.index = {j.key: i for i, j in enumerate(self.jobs)}
        self.due = _due(self.jobs, workers)
        self.results: dict[Hashable, Any] = {}
        self.waiting = list(self.jobs)  # not started (or started and failed, to rerun)
        self.tries = {j.key: 0 for j in self.jobs}

    def left(self) -> bool:
        return len(self.results) < len(self.jobs)

    def latest_start(self, job: Job) -> float:
        """When the job must start for its group to end when due (if it took its seconds)."""
        return self.due[job.group] - self.rank[job.key]

    def next(self) -> Job | None:
        """The ready job to start now (see the module's docstring), or None if none is."""
        ready = [j for j in self.waiting if all(k in self.results for k in j.needs)]
        if not ready:
            return None
        best = min(ready, key=lambda j: (self.latest_start(j), self.index[j.key]))
        self.waiting.remove(best)
        return best

    def stalled(self) -> RuntimeError:
        """The error when jobs are left but none runs or is ready: a lost job (a bug here)."""
        return RuntimeError(f"no job can start; waiting: {[j.key for j in self.waiting]}")

    def inputs(self, job: Job) -> tuple:
        return tuple(self.results[k] for k in job.needs)

    def failed(self, job: Job, err: BaseException, retries: int) -> None:
        """Put a failed job back to rerun, or stop the run if it may not be rerun."""
        self.tries[job.key] += 1
        if isinstance(err, ArlError):
            raise ArlError(f"{job.label or job.key}: {err}") from err
        if self.tries[job.key] > retries:
            name = job.label or job.key
            raise JobFailed(f"{name}: {type(err).__name__}: {err}") from err
        self.waiting.insert(0, job)


Started = Callable[[Job], tuple]  # called here as a job starts; returns its leading arguments


def run_graph(
    jobs: Sequence[Job], where: Where, started: Started | None = None
) -> Iterator[tuple[Hashable, Any]]:
    """Yield (key, result) for every job, in the order they finish, each job started as soon
    as a worker is free and its needs are done (in this process if where.workers <= 1)."""
    graph, started = _Graph(jobs, where.workers), started or (lambda job: ())
    if where.workers <= 1:
        while graph.left():
            job = graph.next()
            if job is None:
                raise graph.stalled()
            try:
                result = job.fn(*started(job), *job.args, *graph.inputs(job))
            except Exception as err:
                graph.failed(job, err, where.retries)
                continue
            graph.results[job.key] = result
            yield job.key, result
        return
    while graph.left():
        yield from _in_pool(graph, where, started)


def _in_pool(graph: _Graph, where: Where, started: Started) -> Iterator[tuple[Hashable, Any]]:
    """Run jobs on one pool until all are done, or until a worker dies (the pool is then
    broken: the jobs it ran are charged a try and go back to wait for the next pool)."""
    pool = ProcessPoolExecutor(where.workers, mp_context=SPAWN, initializer=_ignore_ctrl_c)
    running: dict = {}
    with _ended_at_once(pool):
        for _ in range(where.workers):  # every worker starts now (torch imported), not as the
            _submit(pool, where.threads, int, ())  # second ready job waits for it to start
        try:
            while graph.left():
                while len(running) < where.workers and (job := graph.next()) is not None:
                    a = (*started(job), *job.args, *graph.inputs(job))
                    running[_submit(pool, where.threads, job.fn, a)] = job
                if not running:  # jobs left, none running, none ready: a lost job (a bug)
                    raise graph.stalled()
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                broken = [f for f in finished if isinstance(f.exception(), BrokenProcessPool)]
                for fut in (f for f in finished if f not in broken):
                    job, err = running.pop(fut), fut.exception()
                    if err is not None:
                        graph.failed(job, err, where.retries)
                        continue
                    graph.results[job.key] = fut.result()
                    yield job.key, graph.results[job.key]
                if broken:
                    raise broken[0].exception()
        except BrokenProcessPool:  # a worker was killed: rerun what was running
            for job in running.values():
                graph.tries[job.key] += 1
                if graph.tries[job.key] > where.retries:
                    n = graph.tries[job.key]
                    raise ArlError(f"a worker process died {n} times; giving up") from None
                graph.waiting.insert(0, job)


@contextmanager
def _ended_at_once(pool: ProcessPoolExecutor) -> Iterator[ProcessPoolExecutor]:
    """The pool for the block; leaving it any way but its end (an error, Ctrl-C, a caller
    that stops reading) kills its workers, not waits for them: no orphan left computing."""
    try:
        yield pool
    except BaseException:
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)

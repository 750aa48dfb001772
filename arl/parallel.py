"""Run one function over many arguments (seeds, `--set` values): in this process, in local
processes, or as Ray tasks; results come back as each finishes. Or run one function beside
this process (`beside`: a second core for one long job) while this one goes on.

    for arg, result in run_many(run_seed, [(cfg, s) for s in seeds], where=Where(workers=2)):
        save(arg, result)          # stream into the table, resume file, progress line

    with beside(section_dpo, cfg, weights) as dpo:
        others = run_the_other_sections()
        results = dpo.get()        # waits; an error in the block kills the second process

Every argument is independent and deterministic (its own seed), so the same arguments give
the same results wherever they run. A task that fails (an exception, or a worker process
that dies) is retried up to `retries` times, then the run stops with its error; results
already yielded stay yielded, so the caller's resume file keeps them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult
from typing import Any

from arl.errors import ArlError, require

# local processes start as fresh interpreters: nothing forked from a parent holding torch state
SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Where:
    """Where tasks run: `workers` local processes (1: this process), or Ray at `ray`."""

    workers: int = 1
    ray: str | None = None  # None: no Ray; "local": start one here; else a cluster address
    retries: int = 2  # reruns of a failed task before the run stops
    threads: int = 1  # torch threads per task (one core per task)


def run_many(
    fn: Callable[..., Any], args: Sequence[tuple], where: Where = Where()
) -> Iterator[tuple[tuple, Any]]:
    """Yield (args, fn(*args)) for every args tuple, in the order they finish."""
    if where.ray is not None:
        yield from _on_ray(fn, args, where)
    elif where.workers <= 1 or len(args) <= 1:
        for a in args:
            yield a, _retrying(fn, a, where.retries)
    else:
        yield from _in_processes(fn, args, where)


def _retrying(fn, a, retries):
    for attempt in range(retries + 1):
        try:
            return fn(*a)
        except ArlError:
            raise  # bad input: a rerun gives the same error
        except Exception:
            if attempt == retries:
                raise


def _with_threads(threads: int, fn, *a):
    """Run fn(*a) with torch limited to `threads` (one task per core)."""
    import torch

    torch.set_num_threads(threads)
    return fn(*a)


def _in_processes(fn, args, where: Where):
    """Ctrl-C reaches this process alone (the workers ignore it): it ends the workers at once,
    so the interrupt is one line, with no worker's traceback and no wait for a seed to end."""
    tries = {i: 0 for i in range(len(args))}
    todo = list(range(len(args)))
    while todo:
        try:
            pool = ProcessPoolExecutor(
                min(where.workers, len(todo)), mp_context=SPAWN, initializer=_ignore_ctrl_c
            )
            with _ended_on_interrupt(pool):
                running = {_submit(pool, where.threads, fn, args[i]): i for i in todo}
                while running:
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        i = running.pop(fut)
                        err = fut.exception()
                        if isinstance(err, BrokenProcessPool):
                            raise err
                        if err is None:
                            todo.remove(i)
                            yield args[i], fut.result()
                        elif isinstance(err, ArlError) or tries[i] >= where.retries:
                            raise err
                        else:
                            tries[i] += 1
                            running[_submit(pool, where.threads, fn, args[i])] = i
        except BrokenProcessPool:  # a worker was killed: rerun what had not finished
            for i in todo:
                tries[i] += 1
                if tries[i] > where.retries:
                    raise ArlError(f"a worker process died {tries[i]} times; giving up") from None


def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _submit(pool: ProcessPoolExecutor, threads: int, fn, args: tuple):
    """pool.submit, with Ctrl-C held back while it may start a worker: the worker starts with
    the signal blocked (a child inherits the mask) and then ignores it, so a Ctrl-C during its
    start-up prints no traceback; this process gets it as soon as the submit returns."""
    block = hasattr(signal, "pthread_sigmask")
    if block:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(_with_threads, threads, fn, *args)
    finally:
        if block:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def _ended_on_interrupt(pool: ProcessPoolExecutor) -> Iterator[ProcessPoolExecutor]:
    """The pool for the block; on Ctrl-C its workers are killed, not waited for."""
    try:
        yield pool
    except KeyboardInterrupt:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)


@contextmanager
def beside(fn: Callable[..., Any], *args: Any, threads: int = 1) -> Iterator[AsyncResult]:
    """Start fn(*args) in a second process (torch limited to `threads`) and yield its pending
    result, whose .get() waits for fn's value or raises its error; this process goes on.

    Ctrl-C reaches this process alone (the second ignores it; the caller turns it into a
    one-line stop), and leaving the block ends the second process, finished or not: an error
    or a stop here leaves no orphan computing. Get the result inside the block.
    """
    pool = SPAWN.Pool(1, _ignore_ctrl_c)
    try:
        yield pool.apply_async(_with_threads, (threads, fn, *args))
    finally:
        pool.terminate()


def init_ray(address: str | None, num_cpus: int | None = None):
    """Connect to a cluster at `address`, or start a local Ray ("local"); idempotent."""
    ray = require("ray", "--ray", "ray")
    if not ray.is_initialized():
        # log_to_driver: the tasks' progress lines (stderr) reach this terminal, prefixed
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if address in (None, "local"):
            kw["num_cpus"] = num_cpus or os.cpu_count()
        else:
            kw["address"] = address
        try:
            ray.init(**kw)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ArlError(f"--ray {address}: {str(e).splitlines()[0]}") from e
    return ray


def _on_ray(fn, args, where: Where):
    ray = init_ray(where.ray, where.workers if where.workers > 1 else None)
    remote = ray.remote(num_cpus=1, max_retries=where.retries, retry_exceptions=True)(_with_threads)
    running = {remote.remote(where.threads, fn, *a): a for a in args}
    while running:
        ready, _ = ray.wait(list(running), num_returns=1)
        a = running.pop(ready[0])
        try:
            result = ray.get(ready[0])
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(getattr(e, "cause", None), Exception) else e
            raise cause from None
        yield a, result

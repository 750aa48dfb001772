"""Where CodeFix runs a policy's code: always in the sandbox (arl.sandbox), never here.

One warm pool of sandboxed workers per process, shared by every episode (Problem 15's warm
pool: a worker is reused across episodes, its state reset between jobs), and a cache of
verdicts by (module, function, test cases): the same module gives the same verdict, so an
RL batch whose episodes converge on the same edit runs it once. Infrastructure failures are
retried by the sandbox and never cached; nor is a verdict whose flags say it may not come
again (UNCACHED: a process of the job outlived it, or another process wrote into its result
stream), so a forking module cannot fix its luckiest verdict in the cache. Without
bubblewrap, CodeFix refuses to run in one line unless the user allowed running unsandboxed
(`allow_unsandboxed`), and then says so (a warning line, `sandbox: none` in the outcome and
in eval's and train's records): never a silent downgrade.
"""

from __future__ import annotations

import atexit
import sys
from collections import OrderedDict
from collections.abc import Sequence

from arl.envkit.harness import TestCase
from arl.sandbox import (
    Case,
    CaseResult,
    Job,
    Limits,
    Sandbox,
    SandboxUnavailable,
    Verdict,
    make_sandbox,
    sandbox_available,
)
from arl.sandbox.types import is_utf8

LIMITS = Limits(
    cpu_seconds=1.0,
    wall_seconds=2.0,
    memory_mb=256,
    processes=16,
    file_size_mb=4,
    output_bytes=4096,
)
NOT_UTF8 = "the module is not valid UTF-8 (a lone surrogate): it was not run"
UNCACHED = ("bad_result_stream", "left_processes", "foreign_result")
CACHE_SIZE = 50_000  # verdicts kept (a module is a few hundred bytes)
WORKERS = 2
_pools: dict[str, Sandbox] = {}
_cache: OrderedDict[tuple, Verdict] = OrderedDict()
stats = {"jobs": 0, "cache_hits": 0, "infra_errors": 0}
_warned: list[str] = []


def sandbox_kind(allow_unsandboxed: bool) -> str:
    """bwrap where it works; else "none" if the user allowed it; else a one-line refusal."""
    reason = sandbox_available()
    if reason is None:
        return "bwrap"
    if allow_unsandboxed:
        if not _warned:  # once per process, on stderr: never a silent downgrade
            _warned.append(reason)
            print(
                "arl: WARNING: running policy code WITHOUT a sandbox (--allow-unsandboxed): "
                f"{reason.split(':')[0]}; results record sandbox: none",
                file=sys.stderr,
                flush=True,
            )
        return "none"
    raise SandboxUnavailable(f"CodeFix runs policy code only in a sandbox: {reason}")


def record(env_config) -> dict:
    """{"sandbox": "bwrap" or "none"} for an environment config that runs policy code (one
    with `allow_unsandboxed`), else {}: what eval's metrics, train's results.json and a PG
    run's config.json record."""
    if not hasattr(env_config, "allow_unsandboxed"):
        return {}
    return {"sandbox": sandbox_kind(env_config.allow_unsandboxed)}


def pool(kind: str) -> Sandbox:
    """The process's warm pool of `kind` (started on first use, closed at exit)."""
    if kind not in _pools:
        _pools[kind] = make_sandbox(kind, workers=WORKERS)
        if len(_pools) == 1:
            atexit.register(close)
    return _pools[kind]


def close() -> None:
    """Stop every pool of this process (a later job starts a new one)."""
    while _pools:
        _pools.popitem()[1].close()


def cases_of(tests: Sequence[TestCase], prefix: str) -> tuple[Case, ...]:
    """The gym's test cases as the sandbox's (named prefix_0, prefix_1, ...)."""
    return tuple(Case(f"{prefix}_{k}", tuple(c.args), c.expected) for k, c in enumerate(tests))


def cached(source: str, function: str, cases: tuple[Case, ...], kind: str) -> bool:
    """Whether run() would answer these from the cache."""
    return (kind, source, function, repr(cases)) in _cache


def run(source: str, function: str, cases: tuple[Case, ...], kind: str) -> Verdict:
    """The verdict of `cases` on the module `source`, from the cache or the sandbox."""
    return run_jobs(source, function, [cases], kind)[0]


def run_jobs(
    source: str, function: str, jobs: Sequence[tuple[Case, ...]], kind: str
) -> list[Verdict]:
    """The verdicts of several jobs (each its own cases) on one module: each from the cache
    or the sandbox, those not cached run side by side on the pool's workers."""
    out: list[Verdict | None] = []
    todo: list[tuple[int, tuple]] = []
    for cases in jobs:
        key = (kind, source, function, repr(cases))  # cases hold lists: keyed by their repr
        hit = _cache.get(key)
        stats["jobs"] += 1
        if hit is not None:
            stats["cache_hits"] += 1
            _cache.move_to_end(key)
        elif not is_utf8(source):  # Job() refuses it: a module no Python file can hold fails
            hit = Verdict(tuple(CaseResult(c.name, "fail", NOT_UTF8) for c in cases))
        else:
            todo.append((len(out), key))
        out.append(hit)
    if todo:
        batch = [Job(source, function, jobs[i], LIMITS) for i, _ in todo]
        for (i, key), verdict in zip(todo, pool(kind).run_many(batch), strict=True):
            out[i] = verdict
            if verdict.infra_error is not None:
                stats["infra_errors"] += 1
            elif not any(f in UNCACHED for f in verdict.flags):
                _cache[key] = verdict
                if len(_cache) > CACHE_SIZE:
                    _cache.popitem(last=False)
    return out  # type: ignore[return-value]


def clear_cache() -> None:
    _cache.clear()

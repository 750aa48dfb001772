"""Where CodeFix runs a policy's code: always in the sandbox (arl.sandbox), never here.

CodeFix's jobs on the grader every sandboxed environment shares (arl.envkit.graded: the warm
pool, the verdict cache, the refusal without bubblewrap): one job is the module and a function's
cases, its verdict cached by (kind, module, function, test cases). Without bubblewrap, CodeFix
refuses to run in one line unless the user allowed running unsandboxed (`allow_unsandboxed`),
and then says so (a warning line, `sandbox: none` in the outcome and in eval's and train's
records): never a silent downgrade.
"""

from __future__ import annotations

from collections.abc import Sequence

from arl.envkit.graded import Grader, NotRun
from arl.envkit.harness import TestCase
from arl.sandbox import Case, Job, Limits, Verdict
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
GRADER = Grader("CodeFix", LIMITS, cache_size=50_000, workers=2)  # a module: a few hundred bytes
stats = GRADER.stats  # {"jobs", "cache_hits", "infra_errors"}: this process's


def sandbox_kind(allow_unsandboxed: bool) -> str:
    """bwrap where it works; else "none" if the user allowed it; else a one-line refusal."""
    return GRADER.sandbox_kind(allow_unsandboxed)


def record(env_config) -> dict:
    """{"sandbox": "bwrap" or "none"} for an environment config that runs policy code (one
    with `allow_unsandboxed`), else {}: what eval's metrics, train's results.json and a PG
    run's config.json record."""
    if not hasattr(env_config, "allow_unsandboxed"):
        return {}
    return GRADER.record(env_config.allow_unsandboxed)


def close() -> None:
    """Stop every pool of this process (a later job starts a new one)."""
    GRADER.close()


def cases_of(tests: Sequence[TestCase], prefix: str) -> tuple[Case, ...]:
    """The gym's test cases as the sandbox's (named prefix_0, prefix_1, ...)."""
    return tuple(Case(f"{prefix}_{k}", tuple(c.args), c.expected) for k, c in enumerate(tests))


def key(source: str, function: str, cases: tuple[Case, ...], kind: str) -> tuple:
    """A job's cache key (cases hold lists: keyed by their repr)."""
    return (kind, source, function, repr(cases))


def cached(source: str, function: str, cases: tuple[Case, ...], kind: str) -> bool:
    """Whether run() would answer these from the cache."""
    return GRADER.cached(key(source, function, cases, kind))


def run(source: str, function: str, cases: tuple[Case, ...], kind: str) -> Verdict:
    """The verdict of `cases` on the module `source`, from the cache or the sandbox."""
    return run_jobs(source, function, [cases], kind)[0]


def run_jobs(
    source: str, function: str, jobs: Sequence[tuple[Case, ...]], kind: str
) -> list[Verdict]:
    """The verdicts of several jobs (each its own cases) on one module: each from the cache
    or the sandbox, those not cached run side by side on the pool's workers."""

    def make(cases: tuple[Case, ...]):
        def job() -> Job:
            if not is_utf8(source):  # Job() refuses it: a module no Python file can hold fails
                raise NotRun(NOT_UTF8)
            return Job(source, function, cases, LIMITS)

        return job

    specs = [(key(source, function, cases, kind), cases, make(cases)) for cases in jobs]
    return GRADER.run(specs, kind)


def clear_cache() -> None:
    GRADER.clear_cache()

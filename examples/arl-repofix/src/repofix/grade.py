"""Where RepoFix runs a repository's code: always in arl's sandbox (arl.sandbox), never here.

A test run is one sandbox job: the repository's modules as the job's files, beside a driver
(solution.py) that imports them all, as a test file would, and whose `call(module, function,
args)` calls one function; each test is one case, its expected value kept here (the sandbox
compares nothing and never holds one). `test` runs the public cases; `submit` grades the final
repository on the public and hidden ones in a fresh job. One warm pool per process and a cache
of verdicts by (files, cases), as CodeFix's grader (arl/codefix/grade.py) keeps them; written
again here because an environment's package never imports another's.

The sandbox binds /usr and this Python's prefix read-only: an environment package installed
there (a plain `pip install`) would put its tasks' fixes where policy code can read and import
them. `check_location` refuses that (install with `pip install -e` or `--target`).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

from arl.errors import ArlError
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
from arl.sandbox.launch import SYSTEM_DIRS, interpreter, package_dirs
from repofix.repos import Case as TestCase
from repofix.repos import code_files, module_of

DRIVER = """\
import importlib

for name in MODULES:  # as a test file's imports: a module that does not import fails them all
    importlib.import_module(name)


def call(module, function, args):
    return getattr(importlib.import_module(module), function)(*args)
"""
FUNCTION = "call"
LIMITS = Limits(
    cpu_seconds=1.0, wall_seconds=3.0, memory_mb=256, processes=16, file_size_mb=4,
    output_bytes=4096,
)  # fmt: skip
UNCACHED = ("bad_result_stream", "left_processes", "foreign_result")  # may not come again
CACHE_SIZE = 20_000
WORKERS = 2
_pools: dict[str, Sandbox] = {}
_cache: OrderedDict[tuple, Verdict] = OrderedDict()
stats = {"jobs": 0, "cache_hits": 0, "infra_errors": 0}
_warned: list[str] = []


def sandbox_roots() -> tuple[str, ...]:
    """The host directories the sandbox shows its jobs (read-only): /usr and the system
    directories, and this Python's prefix (arl.sandbox.launch)."""
    return (*SYSTEM_DIRS, *interpreter()[1])


def visible_in_sandbox(path: str | Path, roots: Sequence[str] | None = None) -> bool:
    """Whether a job could read `path`: it lies under a directory the sandbox binds, and not
    in this Python's site-packages, which a job sees empty (arl.sandbox.launch.package_dirs)."""
    real = os.path.realpath(path)
    if roots is None and any(_under(real, d) for d in package_dirs()):
        return False
    for root in roots if roots is not None else sandbox_roots():
        r = os.path.realpath(root)
        if real == r or real.startswith(r.rstrip("/") + "/"):
            return True
    return False


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_location(roots: Sequence[str] | None = None) -> None:
    """Refuse to run where the sandbox would show policy code this package (its tasks hold
    every fix): a one-line error saying how to install it instead."""
    here = Path(__file__).resolve().parent
    if visible_in_sandbox(here, roots):
        raise ArlError(
            f"repofix is installed at {here}, which arl's sandbox shows to policy code (its "
            "tasks hold every fix): install it with pip (site-packages is hidden), `pip install "
            "-e` or `--target` elsewhere"
        )


def sandbox_kind(allow_unsandboxed: bool) -> str:
    """bwrap where it works; else "none" if the user allowed it (said on stderr, once); else a
    one-line refusal. Never a silent downgrade."""
    reason = sandbox_available()
    if reason is None:
        return "bwrap"
    if allow_unsandboxed:
        if not _warned:
            _warned.append(reason)
            print(
                "repofix: WARNING: running policy code WITHOUT a sandbox (allow_unsandboxed): "
                f"{reason.split(':')[0]}; results record sandbox: none",
                file=sys.stderr,
                flush=True,
            )
        return "none"
    raise SandboxUnavailable(f"RepoFix runs policy code only in a sandbox: {reason}")


def pool(kind: str) -> Sandbox:
    """The process's warm pool of `kind` (started on first use, closed at exit)."""
    if kind not in _pools:
        _pools[kind] = make_sandbox(kind, workers=WORKERS)
        if len(_pools) == 1:
            atexit.register(close)
    return _pools[kind]


def close() -> None:
    while _pools:
        _pools.popitem()[1].close()


def cases_of(tests: Sequence[TestCase]) -> tuple[Case, ...]:
    """The tests as the sandbox's cases: args (module, function, arguments); expected here."""
    return tuple(Case(t.name, (t.module, t.function, list(t.args)), t.expected) for t in tests)


def driver(files: Mapping[str, str]) -> str:
    """solution.py: imports every module of the repository, then calls one function per case
    (so code that ends the process on import is the sandbox's `exit_at_import`)."""
    modules = sorted(module_of(p) for p in code_files(files))
    return f"MODULES = {tuple(modules)!r}\n" + DRIVER


def job_files(files: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The repository's modules as a job's files (its tests are not needed: cases are)."""
    return tuple(sorted(code_files(files).items()))


def run(files: Mapping[str, str], tests: Sequence[TestCase], kind: str) -> Verdict:
    """The verdict of `tests` on the repository `files`, from the cache or the sandbox."""
    cases = cases_of(tests)
    modules = job_files(files)
    key = (kind, modules, repr(cases))
    stats["jobs"] += 1
    hit = _cache.get(key)
    if hit is not None:
        stats["cache_hits"] += 1
        _cache.move_to_end(key)
        return hit
    try:
        job = Job(driver(files), FUNCTION, cases, LIMITS, modules)
    except ArlError as e:  # e.g. a lone surrogate no file can hold: every test fails, unrun
        return Verdict(tuple(CaseResult(c.name, "fail", f"not run: {e}") for c in cases))
    verdict = pool(kind).run(job)
    if verdict.infra_error is not None:
        stats["infra_errors"] += 1
    elif not any(f in UNCACHED for f in verdict.flags):
        _cache[key] = verdict
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return verdict


def clear_cache() -> None:
    _cache.clear()

"""Where RepoFix runs a repository's code: always in arl's sandbox (arl.sandbox), never here.

A test run is one sandbox job: the repository's modules as the job's files, beside a driver
(solution.py) that imports them all, as a test file would, and whose `call(module, function,
args)` calls one function; each test is one case, its expected value kept here (the sandbox
compares nothing and never holds one). `test` runs the public cases; `submit` grades the final
repository on the public and hidden ones in a fresh job. The warm pool, the cache of verdicts
(here by files and cases) and the refusal without bubblewrap are arl's shared grader's
(arl.envkit.graded.Grader), as CodeFix's are.

The sandbox binds /usr and this Python's prefix read-only: an environment package installed
there (a plain `pip install`) would put its tasks' fixes where policy code can read and import
them. `check_location` refuses that (install with `pip install -e` or `--target`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from arl.envkit.graded import Grader, NotRun
from arl.errors import ArlError
from arl.sandbox import Case, Job, Limits, Verdict
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
GRADER = Grader(
    "RepoFix", LIMITS, cache_size=20_000, workers=2, prefix="repofix", flag="allow_unsandboxed"
)
stats = GRADER.stats  # {"jobs", "cache_hits", "infra_errors"}: this process's


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
    return GRADER.sandbox_kind(allow_unsandboxed)


def close() -> None:
    GRADER.close()


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

    def job() -> Job:
        try:
            return Job(driver(files), FUNCTION, cases, LIMITS, modules)
        except ArlError as e:  # e.g. a lone surrogate no file can hold: every test fails, unrun
            raise NotRun(f"not run: {e}") from None

    return GRADER.run([((kind, modules, repr(cases)), cases, job)], kind)[0]


def clear_cache() -> None:
    GRADER.clear_cache()

"""The sandbox's data: a Job (code, cases, limits) in, a Verdict (one record per case) out.

Everything here is plain data and pure functions, run in the host process: `judge` is
where a case's expected value meets the value the sandboxed code returned, so the
expected values never enter the sandbox.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from dataclasses import dataclass, field

from arl.errors import ArlError
from arl.sandbox.runner import HARNESS

STATUSES = ("pass", "fail", "timeout", "memory", "crash", "infra_error")

# Names that mean something to a test runner or to Python's start-up, not to the solution:
# a job that brings or writes one is flagged "dropped:NAME" (it is never executed here).
HARNESS_FILES = frozenset(HARNESS)  # what a job may not drop: the runner flags them too
MAX_JOB_BYTES = 1 << 20  # source + files of one job: far below the worker's scratch tmpfs
MAX_OUTPUT = 8 << 20  # output kept per job: its reply stays far below pool.MAX_REPLY
DETAIL_CHARS = 120


@dataclass(frozen=True)
class Limits:
    """Resource limits of one job (all of its processes together where noted)."""

    cpu_seconds: float = 2.0  # CPU time of each process of the job (RLIMIT_CPU, rounded up)
    wall_seconds: float = 4.0  # wall clock of the whole job; then every process of it is killed
    memory_mb: int = 256  # address space of each process (RLIMIT_AS)
    processes: int = 32  # processes and threads of the job at once (RLIMIT_NPROC of its uid)
    file_size_mb: int = 8  # largest file it may write (RLIMIT_FSIZE)
    output_bytes: int = 65536  # stdout+stderr kept; the rest is read and dropped

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_mb", "processes", "file_size_mb"):
            if not getattr(self, name) > 0:
                raise ArlError(f"sandbox limit {name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.output_bytes <= MAX_OUTPUT:
            raise ArlError(f"sandbox limit output_bytes must be in [0, {MAX_OUTPUT}]")


@dataclass(frozen=True)
class Case:
    """One test: call `function` with `args`; passes when the result equals `expected`."""

    name: str
    args: tuple  # JSON values (int, float, bool, str, None, lists, dicts with str keys)
    expected: object  # a JSON value, compared in the host by exact type and value

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        for value in (list(self.args), self.expected):
            if not is_plain(value):
                raise ArlError(f"case {self.name!r}: args and expected must be JSON values")


@dataclass(frozen=True)
class Job:
    """One module to run against its cases, under its limits, in a fresh scratch directory."""

    source: str  # written as solution.py
    function: str  # the name the cases call
    cases: tuple[Case, ...]
    limits: Limits = field(default_factory=Limits)
    files: tuple[tuple[str, str], ...] = ()  # extra (relative path, text) beside solution.py

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", tuple(self.cases))
        object.__setattr__(self, "files", tuple((str(n), str(t)) for n, t in self.files))
        if not self.cases:
            raise ArlError("a sandbox job needs at least one case")
        if not self.function.isidentifier():
            raise ArlError(f"function name {self.function!r} is not a Python identifier")
        for name, _ in self.files:
            check_file_name(name)
        for what, text in [("source", self.source), *self.files]:
            if not is_utf8(text):
                raise ArlError(f"sandbox job: {what} is not valid UTF-8 (a lone surrogate)")
        size = len(self.source.encode()) + sum(len(t.encode()) for _, t in self.files)
        if size > MAX_JOB_BYTES:
            raise ArlError(f"sandbox job too large: {size} bytes of code (at most {MAX_JOB_BYTES})")


@dataclass(frozen=True)
class CaseResult:
    """How one case ended; `detail` is short and never holds the expected value."""

    name: str
    status: str  # one of STATUSES
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    """One record per case, in order, plus what the run itself noticed."""

    results: tuple[CaseResult, ...]
    infra_error: str | None = None  # the job could not be run (after retries): why
    attempts: int = 1  # runs it took (retries after infrastructure failures)
    flags: tuple[str, ...] = ()  # e.g. "exit_at_import", "dropped:conftest.py", "output_cut"
    output: str = ""  # the job's stdout+stderr, cut at Limits.output_bytes (may echo args)

    @property
    def passed(self) -> bool:
        """Every case passed and the job ran."""
        return self.infra_error is None and all(r.status == "pass" for r in self.results)

    @property
    def fraction(self) -> float:
        """Share of cases that passed (0.0 for an infrastructure error)."""
        if self.infra_error is not None or not self.results:
            return 0.0
        return sum(r.status == "pass" for r in self.results) / len(self.results)


def check_file_name(name: str) -> None:
    """Reject an extra file's name that is absolute, climbs out, or replaces solution.py."""
    norm = posixpath.normpath(name) if name else ""
    if (
        not name
        or "\0" in name
        or "\\" in name
        or len(name) > 200
        or name.startswith("/")
        or norm != name
        or norm.split("/")[0] == ".."
        or norm in (".", "solution.py")
    ):
        raise ArlError(f"bad sandbox file name {name!r}: a relative path inside the scratch dir")


SURROGATE = re.compile("[\ud800-\udfff]")


def is_utf8(text: str) -> bool:
    """True when the text encodes to UTF-8 (no lone surrogate)."""
    return SURROGATE.search(text) is None


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def clean_text(text: str) -> str:
    """Valid UTF-8 text: each lone surrogate as an escape (a byte that was not UTF-8, kept
    by surrogateescape as U+DC80..U+DCFF, as \\xNN; any other as \\uNNNN). Every string
    that comes out of a job passes here once, in the host (pool.read_reply)."""
    return SURROGATE.sub(_escape, text) if SURROGATE.search(text) else text


def harness_flags(names) -> tuple[str, ...]:
    """'dropped:NAME' for each name a test runner or Python's start-up would pick up."""
    out = set()
    for name in names:
        base = posixpath.basename(name)
        if base in HARNESS_FILES or base.endswith(".pth"):
            out.add(f"dropped:{base}")
    return tuple(sorted(out))


def is_plain(value, depth: int = 0) -> bool:
    """True for a JSON value made of exact builtin types (no subclasses, str dict keys)."""
    t = type(value)
    if value is None or t in (bool, int, float, str):
        return True
    if depth > 100:
        return False
    if t in (list, tuple):
        return all(is_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and is_plain(v, depth + 1) for k, v in value.items())
    return False


def same(got, expected) -> bool:
    """Equal by exact JSON type and value: floats within 1e-9, bool is not int, lists in order."""
    if isinstance(expected, bool) or expected is None:
        return got is expected
    t = type(expected)
    if t is float:
        if type(got) is not float:
            return False
        if math.isnan(expected):
            return math.isnan(got)
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    if t in (list, tuple):
        return (
            type(got) is list
            and len(got) == len(expected)
            and all(same(g, e) for g, e in zip(got, expected, strict=True))
        )
    if t is dict:
        return (
            type(got) is dict
            and got.keys() == expected.keys()
            and all(same(got[k], v) for k, v in expected.items())
        )
    return type(got) is t and got == expected


def short(text: str, n: int = DETAIL_CHARS) -> str:
    """One line of at most n characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def judge(case: Case, record: dict) -> CaseResult:
    """Turn the runner's record of one case into its result, comparing with `expected` here."""
    kind = record.get("s")
    if kind == "ok":
        try:
            ok = same(record.get("v"), case.expected)
        except RecursionError:
            ok = False
        if ok:
            return CaseResult(case.name, "pass")
        return CaseResult(case.name, "fail", short("got " + json.dumps(record.get("v"))))
    if kind == "raise":
        name, msg = str(record.get("e", "")), str(record.get("m", ""))
        status = "memory" if name == "MemoryError" else "fail"
        return CaseResult(case.name, status, short(f"{name}: {msg}" if msg else name))
    if kind == "import":
        name, msg = str(record.get("e", "")), str(record.get("m", ""))
        status = "memory" if name == "MemoryError" else "fail"
        return CaseResult(case.name, status, short(f"import failed: {name}: {msg}"))
    if kind == "unser":
        return CaseResult(case.name, "fail", short(f"unserializable {record.get('t', '')}"))
    if kind in ("timeout", "memory", "crash"):
        return CaseResult(case.name, kind, short(str(record.get("d", kind))))
    raise ValueError(f"unknown case record {kind!r}")


def infra_verdict(job: Job, reason: str, attempts: int) -> Verdict:
    """The verdict of a job that could not be run: every case 'infra_error', never a zero."""
    reason = short(reason, 200)
    results = tuple(CaseResult(c.name, "infra_error", reason) for c in job.cases)
    return Verdict(results, infra_error=reason, attempts=attempts)

"""A memory cgroup per sandbox worker, where the host's cgroupfs is writable.

RLIMIT_AS bounds each process of a job; a memory cgroup bounds all of them together (a job
of `processes` forks could otherwise use processes x memory_mb), and the scratch tmpfs's
pages too. The worker's cgroup is made under this process's own memory cgroup (v1: the
memory hierarchy; v2: the unified one, where memory must be enabled in its subtree), the
worker's first process moves itself into it before it execs bubblewrap (so every process
of the worker is in it from the start), and the host sets its limit before each job:
the job's memory_mb, plus the scratch tmpfs, plus ALLOWANCE_MB for the runner and zygote.
Where none can be made (a read-only cgroupfs, as in most CI containers), `probe` says why
and the rlimits alone bound memory (Sandbox.memory_bound says which holds).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

ALLOWANCE_MB = 128  # the runner and the zygote (mostly pages shared with each other)
ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()


def _own() -> tuple[Path, str] | None:
    """This process's memory cgroup directory and its version ("v1"/"v2"), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return ROOT / "memory" / path.lstrip("/"), "v1"
    for line in lines:
        if line.startswith("0::"):
            d = ROOT / line[3:].lstrip("/")
            try:
                if "memory" in (d / "cgroup.subtree_control").read_text().split():
                    return d, "v2"
            except OSError:
                return None
    return None


class MemoryCgroup:
    """One worker's memory cgroup."""

    def __init__(self, path: Path, version: str):
        self.path, self.version, self.limit_mb = path, version, 0

    @classmethod
    def make(cls) -> MemoryCgroup | None:
        """A fresh cgroup under this process's own, or None where that cannot be done."""
        own = _own()
        if own is None:
            return None
        parent, version = own
        path = parent / f"arl-sandbox-{os.getpid()}-{next(_names)}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path, version)

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def limit(self, mb: int) -> None:
        """Bound the worker's memory (every process and its tmpfs pages) to `mb` MiB."""
        if mb == self.limit_mb:
            return
        name = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
        try:
            (self.path / name).write_text(str(mb << 20))
            self.limit_mb = mb
        except OSError:
            pass  # e.g. a lower limit than the worker now uses: the old one stays

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (bounded wait)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


def probe() -> str:
    """How memory is bounded here: "cgroup v1", "cgroup v2", or why only by rlimits."""
    cg = MemoryCgroup.make()
    if cg is None:
        return "rlimits only (no writable memory cgroup here)"
    cg.remove()
    return f"cgroup {cg.version}"


def wrap(argv: list[str], cg: MemoryCgroup) -> list[str]:
    """The command line that moves itself into the cgroup, then execs `argv`."""
    return ["/bin/sh", "-c", 'echo $$ > "$0"; exec "$@"', cg.procs, *argv]

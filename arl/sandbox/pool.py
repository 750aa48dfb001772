"""The host side: workers (one sandboxed runner process each), the warm pool, retries."""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import select
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from arl.errors import ArlError
from arl.sandbox import cgroup
from arl.sandbox.launch import (
    ENV,
    SCRATCH_MB,
    SECCOMP_FD,
    Launch,
    SandboxUnavailable,
    bwrap_launch,
    filter_fd,
    find_bwrap,
    plain_launch,
    sandbox_available,
)
from arl.sandbox.types import (
    Job,
    Verdict,
    clean_text,
    harness_flags,
    infra_verdict,
    judge,
    short,
)

STARTUP_S = 30.0  # a worker's first frame ("ready") must come within this, even under load
SLACK_S = 5.0  # beyond the job's wall clock, for the runner's clean-up, before a worker is cut
MAX_REPLY = 64 << 20


class WorkerError(Exception):
    """An infrastructure failure: the worker died, timed out or answered garbage."""


class Worker:
    """One runner process (sandboxed or not), used by one thread at a time."""

    def __init__(self, launch: Launch, cg: cgroup.MemoryCgroup | None = None):
        self.launch, self.uid, self.ready, self.dead = launch, launch.uid, False, ""
        self.cgroup = cg
        self._log = tempfile.TemporaryFile()
        self._buf = b""
        fd = filter_fd(launch.seccomp) if launch.seccomp is not None else -1
        argv = [str(fd) if a == SECCOMP_FD else a for a in launch.argv]
        if cg is not None:  # every process of the worker in its memory cgroup from the start
            argv = cgroup.wrap(argv, cg)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                env=ENV,
                cwd=launch.cwd,
                close_fds=True,
                pass_fds=[fd] if fd >= 0 else [],
            )
        except OSError as e:
            self.proc, self.dead = None, f"cannot start the worker: {e}"
        finally:
            if fd >= 0:
                os.close(fd)

    def call(self, request: bytes, timeout: float, memory_mb: int = 0) -> dict:
        """Send one job frame and read the reply; WorkerError on any infrastructure failure.
        With a memory cgroup, the worker's memory is bounded by the job's memory_mb first."""
        if not self.ready:
            self.wait_ready()
        if self.cgroup is not None and memory_mb:
            self.cgroup.limit(memory_mb + SCRATCH_MB + cgroup.ALLOWANCE_MB)
        deadline = time.monotonic() + timeout
        self._send(b"%d\n" % len(request) + request, deadline)
        reply = self._recv(deadline)
        if "error" in reply:
            raise WorkerError(f"runner error: {reply['error']}")
        return reply

    def wait_ready(self) -> None:
        """Read the runner's first frame, which says it started."""
        if self.proc is None:
            raise WorkerError(self.dead)
        if "ready" not in self._recv(time.monotonic() + STARTUP_S):
            raise WorkerError("the worker did not say it was ready")
        self.ready = True

    def _send(self, data: bytes, deadline: float) -> None:
        fd, view = self.proc.stdin.fileno(), memoryview(data)
        while view:
            if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
                raise WorkerError("the worker stopped reading")
            try:
                view = view[os.write(fd, view[: 1 << 16]) :]
            except OSError as e:
                raise WorkerError(f"worker died ({self._why()})") from e

    def _recv(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        while True:
            head, sep, rest = self._buf.partition(b"\n")
            if sep:
                if not head.isdigit() or int(head) > MAX_REPLY:
                    raise WorkerError("garbage from the worker")
                if len(rest) >= int(head):
                    body, self._buf = rest[: int(head)], rest[int(head) :]
                    try:
                        reply = json.loads(body)
                    except (ValueError, RecursionError) as e:
                        raise WorkerError("garbage from the worker") from e
                    if not isinstance(reply, dict):
                        raise WorkerError("garbage from the worker")
                    return reply
            elif len(self._buf) > 32:
                raise WorkerError("garbage from the worker")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerError(f"the worker did not answer in time ({self._why()})")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerError(f"worker died ({self._why()})")
            self._buf += chunk

    def _why(self) -> str:
        """The exit code and the last line the worker wrote to stderr (bwrap's complaint)."""
        code = self.proc.poll() if self.proc else None
        self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, self._log.tell() - 300))
        lines = self._log.read().decode("utf-8", "replace").strip().splitlines()
        return short(f"exit code {code}" + (f": {lines[-1]}" if lines else ""), 160)

    def close(self) -> None:
        """Kill the worker (bwrap's PID namespace goes with it) and remove its files."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
        self._log.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.launch.scratch:
            shutil.rmtree(self.launch.scratch, ignore_errors=True)


def encode(job: Job) -> bytes:
    """The request the runner gets: no expected value is in it."""
    return json.dumps(
        {
            "source": job.source,
            "function": job.function,
            "args": [json.dumps(list(c.args)) for c in job.cases],
            "limits": dataclasses.asdict(job.limits),
            "files": [list(f) for f in job.files],
        }
    ).encode()


def read_reply(job: Job, reply: dict, attempts: int) -> Verdict:
    """The verdict from the runner's reply; WorkerError when the reply is not well formed."""
    cases, flags, output = reply.get("cases"), reply.get("flags"), reply.get("output")
    if not (
        isinstance(cases, list)
        and len(cases) == len(job.cases)
        and all(isinstance(c, dict) for c in cases)
        and isinstance(flags, list)
        and all(isinstance(f, str) for f in flags)
        and isinstance(output, str)
    ):
        raise WorkerError("malformed reply from the worker")
    try:
        results = tuple(judge(c, r) for c, r in zip(job.cases, cases, strict=True))
    except (ValueError, RecursionError) as e:
        raise WorkerError(f"malformed reply from the worker: {e}") from e
    # The boundary: every string that came out of the job, once, as valid UTF-8.
    results = tuple(dataclasses.replace(r, detail=clean_text(r.detail)) for r in results)
    flags = {clean_text(f) for f in flags} | set(harness_flags(name for name, _ in job.files))
    return Verdict(
        results, attempts=attempts, flags=tuple(sorted(flags)), output=clean_text(output)
    )


def _close_all(workers: set) -> None:
    for w in list(workers):
        w.close()
    workers.clear()


class Sandbox:
    """Runs jobs on `workers` runner processes: warm (reused) or one fresh launch per job."""

    def __init__(
        self, kind: str, launcher: Callable[[], Launch], workers: int, warm: bool, retries: int
    ):
        self.kind, self.workers, self.warm, self.retries = kind, workers, warm, retries
        self.stats = dict.fromkeys(("jobs", "infra_errors", "retries", "worker_restarts"), 0)
        self.stats["launches"] = 0  # workers started (one per job when not warm)
        self._launcher, self._lock, self._closed = launcher, threading.Lock(), False
        self._live: set[Worker] = set()
        # how the memory of all of a job's processes together is bounded (cgroup.probe)
        self.memory_bound = cgroup.probe()
        self._cgroups = self.memory_bound.startswith("cgroup")
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        # Every worker is started from this one long-lived thread: bwrap --die-with-parent
        # fires when the *thread* that started it ends, not only the process.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="arl-sandbox-spawn")
        self._runners: ThreadPoolExecutor | None = None
        self._finalizer = weakref.finalize(self, _close_all, self._live)
        if warm:
            pool = [self._spawn() for _ in range(workers)]
            for w in pool:
                try:
                    w.wait_ready()
                except WorkerError:
                    pass  # the first job on it fails over to a fresh one
                self._idle.put(w)

    def _spawn(self) -> Worker:
        return self._spawner.submit(self._start).result()

    def _start(self) -> Worker:
        w = Worker(self._launcher(), cgroup.MemoryCgroup.make() if self._cgroups else None)
        with self._lock:
            self.stats["launches"] += 1
            self._live.add(w)
        return w

    def _retire(self, w: Worker, failed: bool) -> None:
        w.close()
        with self._lock:
            self._live.discard(w)
            self.stats["worker_restarts"] += failed

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def run(self, job: Job) -> Verdict:
        """Run one job; infrastructure failures are retried on a fresh worker, never zeros."""
        if self._closed:
            raise ArlError("this sandbox is closed")
        request, timeout = encode(job), job.limits.wall_seconds + SLACK_S
        self._count("jobs")
        worker = self._idle.get() if self.warm else None
        reason = ""
        try:
            for attempt in range(1, self.retries + 2):
                if worker is None:
                    worker = self._spawn()
                try:
                    reply = worker.call(request, timeout, job.limits.memory_mb)
                    verdict = read_reply(job, reply, attempt)
                except WorkerError as e:
                    reason = str(e)
                    self._retire(worker, failed=True)
                    worker = None
                    if attempt <= self.retries:
                        self._count("retries")
                    continue
                dirty = reply.get("dirty") is not False  # a job's process outlived the kill
                if dirty or not self.warm:
                    self._retire(worker, failed=dirty)
                    worker = None
                return verdict
            self._count("infra_errors")
            return infra_verdict(job, reason, self.retries + 1)
        finally:
            if self.warm and not self._closed:
                self._idle.put(worker if worker is not None else self._spawn())
            elif worker is not None:
                self._retire(worker, failed=False)

    def run_many(self, jobs: Sequence[Job]) -> list[Verdict]:
        """Run jobs spread over the workers; verdicts in the order of the jobs."""
        if len(jobs) <= 1:
            return [self.run(j) for j in jobs]
        if self._runners is None:
            self._runners = ThreadPoolExecutor(self.workers, thread_name_prefix="arl-sandbox")
        return list(self._runners.map(self.run, jobs))

    def close(self) -> None:
        """Stop every worker (killing any job still running); the sandbox cannot run after."""
        self._closed = True
        if self._runners is not None:
            self._runners.shutdown(wait=True)
        self._finalizer()
        self._spawner.shutdown(wait=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_sandbox(
    kind: str = "auto", workers: int = 2, warm: bool = True, retries: int = 2
) -> Sandbox:
    """A sandbox: "auto"/"bwrap" (bubblewrap, or SandboxUnavailable), or "none" (unsandboxed)."""
    if workers < 1 or retries < 0:
        raise ArlError(f"a sandbox needs workers >= 1 and retries >= 0, got {workers}, {retries}")
    if kind in ("auto", "bwrap"):
        reason = sandbox_available()
        if reason is not None:
            raise SandboxUnavailable(reason)
        bwrap = find_bwrap()
        return Sandbox("bwrap", lambda: bwrap_launch(bwrap, warm), workers, warm, retries)
    if kind == "none":
        return Sandbox("none", lambda: plain_launch(warm), workers, warm, retries)
    raise ArlError(f"unknown sandbox kind {kind!r}: auto, bwrap or none")

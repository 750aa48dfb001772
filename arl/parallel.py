"""Run one function over many arguments (seeds, `--set` values): in this process, in local
processes, or as Ray tasks; results come back as each finishes. (Jobs that need each other's
results: experiments.schedule, on the same local processes.)

    for arg, result in run_many(run_seed, [(cfg, s) for s in seeds], where=Where(workers=2)):
        save(arg, result)          # stream into the table, resume file, progress line

Every argument is independent and deterministic (its own seed), so the same arguments give
the same results wherever they run. A task that fails (an exception, or a worker process
that dies) is retried up to `retries` times, then the run stops with its error; results
already yielded stay yielded, so the caller's resume file keeps them.

On a Ray cluster (`Where(ray=ADDRESS)`) a task may run on another machine: a folder of this
machine goes to a task as `Folder(path)` (its files travel with the task, what the task
writes there comes back and is written here), every node must run this arl and torch (a node
that does not refuses the task in one line), and `placed` hears which node ran each task.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arl.errors import ArlError, require
from arl.runio import LOCK_FILE, TMP_PREFIX, atomic_write_bytes, atomic_write_json

# local processes start as fresh interpreters: nothing forked from a parent holding torch state
SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Where:
    """Where tasks run: `workers` local processes (1: this process), or Ray at `ray`."""

    workers: int = 1
    ray: str | None = None  # None: no Ray; "local": start one here; else a cluster address
    retries: int = 2  # reruns of a failed task before the run stops
    threads: int = 1  # torch threads per task (one core per task)


@dataclass(frozen=True)
class Folder:
    """A folder of this machine, as a task's argument (the task gets its path as a str).

    A task on another Ray node works in a node-local copy: the folder's files (if any) travel
    with it, and the files it writes or deletes there are written or deleted here before its
    result is yielded. A relative path stays the same string (the task runs from the copy's
    root, or from this process's working directory on this machine)."""

    path: str


Placed = Callable[[tuple, dict], None]  # (args, {"node": Ray node id, "ip": its address})


def run_many(
    fn: Callable[..., Any],
    args: Sequence[tuple],
    where: Where = Where(),
    placed: Placed | None = None,
) -> Iterator[tuple[tuple, Any]]:
    """Yield (args, fn(*args)) for every args tuple, in the order they finish; on Ray,
    placed(args, node) first hears where each ran."""
    if where.ray is not None:
        yield from _on_ray(fn, args, where, placed)
    elif where.workers <= 1 or len(args) <= 1:
        for a in args:
            yield a, _retrying(fn, a, where.retries)
    else:
        yield from _in_processes(fn, args, where)


def _retrying(fn, a, retries):
    for attempt in range(retries + 1):
        try:
            return fn(*_here(a))
        except ArlError:
            raise  # bad input: a rerun gives the same error
        except Exception:
            if attempt == retries:
                raise


def _with_threads(threads: int, fn, *a):
    """Run fn(*a) with torch limited to `threads` (one task per core)."""
    import torch

    torch.set_num_threads(threads)
    return fn(*_here(a))


def _here(a: tuple) -> tuple:
    """The arguments of a task on this machine: each Folder as its path."""
    return tuple(x.path if isinstance(x, Folder) else x for x in a)


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


RAY_CONNECT_SECONDS = 10.0  # a cluster's head must accept a connection within this
_LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"  # one part of a host name (an _ as DNS allows it)


def parse_ray_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a cluster address HOST:PORT or ray://HOST:PORT; None for "local" and
    "auto" (Ray finds those itself). Anything else is a ValueError saying why."""
    import ipaddress
    import re

    if address in ("local", "auto"):
        return None
    rest = address[len("ray://") :] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"{address!r} is not a cluster address (local, auto, HOST:PORT or ray://HOST:PORT, "
            "PORT 1-65535)"
        )
    if re.fullmatch(r"[0-9.]+", host) or ":" in host:  # an IP address: it must parse
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{address!r}: {host} is not an IP address") from None
    elif not re.fullmatch(rf"{_LABEL}(\.{_LABEL})*", host):
        raise ValueError(f"{address!r}: {host} is not a host name")
    return host, int(port)


def check_ray_address(address: str, seconds: float | None = None) -> None:
    """Refuse (one ArlError line) a cluster address that does not parse, or whose head does
    not accept a connection within `seconds` (Ray itself would retry it for minutes)."""
    import socket
    import threading

    seconds = RAY_CONNECT_SECONDS if seconds is None else seconds
    try:
        target = parse_ray_address(address)
    except ValueError as e:
        raise ArlError(f"--ray: {e}") from None
    if target is None:
        return
    result: list[BaseException | None] = []

    def connect() -> None:  # in a thread: a name lookup has no timeout of its own
        try:
            socket.create_connection(target, timeout=seconds).close()
            result.append(None)
        except OSError as e:
            result.append(e)

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(seconds)
    if not result:
        raise ArlError(f"--ray {address}: no answer within {seconds:g} s")
    if result[0] is not None:
        why = getattr(result[0], "strerror", None) or type(result[0]).__name__
        raise ArlError(f"--ray {address}: nothing answers there ({why})")


def init_ray(address: str | None, num_cpus: int | None = None):
    """Connect to a cluster at `address`, or start a local Ray ("local"); idempotent."""
    ray = require("ray", "--ray", "ray")
    if not ray.is_initialized():
        if address not in (None, "local"):
            check_ray_address(address)
        # log_to_driver: the tasks' progress lines (stderr) reach this terminal, prefixed
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if address in (None, "local"):  # "local": a new Ray here, even if one was started
            kw |= {"address": "local", "num_cpus": num_cpus or os.cpu_count()}  # (ray start)
        else:
            kw["address"] = address
        try:
            ray.init(**kw)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ArlError(f"--ray {address}: {str(e).splitlines()[0]}") from e
    return ray


def _on_ray(fn, args, where: Where, placed: Placed | None):
    """Each task on the cluster; a node lost with tasks on it costs Ray a rerun of those
    tasks elsewhere (max_retries), never the tasks already yielded."""
    ray = init_ray(where.ray, where.workers if where.workers > 1 else None)
    remote = ray.remote(num_cpus=1, max_retries=where.retries, retry_exceptions=True)(_on_node)
    origin = _origin(ray, where)
    running = {remote.remote(origin, fn, *(_packed(x) for x in a)): a for a in args}
    while running:
        ready, _ = ray.wait(list(running), num_returns=1)
        a = running.pop(ready[0])
        try:
            done: _Done = ray.get(ready[0])
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(getattr(e, "cause", None), Exception) else e
            raise cause from None
        if done.refused is not None:
            raise done.refused  # bad input (or a node of another arl): a rerun would repeat it
        for path, changed, gone in done.back:
            _write_back(Path(path), changed, gone)
        if placed is not None:
            placed(a, {"node": done.node, "ip": done.ip})
        yield a, done.result


class Placements:
    """Which Ray node ran each task, `{key: {"node": id, "ip": address}}` in a JSON file
    written as each finishes (the `placed` of run_many). Kept apart from the results, which
    are the same wherever a task ran: a results file stays identical across placements, and
    a resumed run keeps the nodes of the tasks it read back."""

    def __init__(self, path: Path, key: Callable[[tuple], Any]):
        self.path, self.key = Path(path), key
        try:
            self.nodes = dict(json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError):
            self.nodes = {}  # none yet (or unreadable): provenance only, never an error

    def __call__(self, a: tuple, node: dict) -> None:
        self.nodes[str(self.key(a))] = node
        atomic_write_json(self.path, dict(sorted(self.nodes.items())))

    def line(self, key: Any) -> str:
        """' on node 1a2b3c4d (10.0.0.2)' for a task placed on Ray, else ''."""
        node = self.nodes.get(str(key))
        return f" on node {node['node'][:8]} ({node['ip']})" if node else ""


# --- a task on a Ray node: versions checked, folders copied in and out --------------------


@dataclass(frozen=True)
class _Origin:
    """What a task needs to know of the driver (the process that submitted it)."""

    node: str  # its Ray node id ("" under Ray Client: no node is the driver's machine)
    cwd: str  # its working directory: relative paths name files there
    versions: tuple[str, str]  # its (arl, torch) versions: every node must run the same
    threads: int


@dataclass(frozen=True)
class _Shipped:
    """A Folder with its files, as a task receives it."""

    path: str
    files: tuple[tuple[str, bytes], ...]  # (path relative to the folder, contents)


@dataclass(frozen=True)
class _Done:
    """What a task sends back: where it ran, its result (or its refusal), its folders' news."""

    node: str
    ip: str
    result: Any = None
    refused: ArlError | None = None
    back: tuple = ()  # (folder path, ((relative path, bytes), ...) written, (rel, ...) deleted)


def versions() -> tuple[str, str]:
    """(arl, torch) versions: a node with others could compute other numbers."""
    import torch

    import arl

    return arl.__version__, torch.__version__


def _origin(ray, where: Where) -> _Origin:
    client = str(where.ray).startswith("ray://")  # the driver's machine is not in the cluster
    node = "" if client else ray.get_runtime_context().get_node_id()
    return _Origin(node, os.getcwd(), versions(), where.threads)


def _packed(x):
    """A Folder as a task receives it: with its files, read here."""
    return _Shipped(x.path, tuple(_files(Path(x.path)).items())) if isinstance(x, Folder) else x


def _files(root: Path) -> dict[str, bytes]:
    """A folder's files (path relative to it -> contents), but its lock and temp files: they
    belong to the processes of one machine."""
    found = [p for p in sorted(root.rglob("*")) if p.is_file()] if root.is_dir() else []
    kept = [p for p in found if p.name != LOCK_FILE and not p.name.startswith(TMP_PREFIX)]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in kept}


def _on_node(origin: _Origin, fn, *a) -> _Done:
    """Run fn on this node: on the driver's machine from its working directory, elsewhere in
    a fresh folder holding copies of its Folders (sent back changed), torch on `threads`."""
    import shutil
    import tempfile

    import ray
    import torch

    node, ip = ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
    if versions() != origin.versions:
        mine, theirs = ("arl {} with torch {}".format(*v) for v in (versions(), origin.versions))
        why = f"node {node[:8]} ({ip}) runs {mine}, the driver {theirs}"
        return _Done(node, ip, refused=ArlError(f"{why}: install the same on every node"))
    torch.set_num_threads(origin.threads)
    home = node == origin.node
    root = origin.cwd if home else tempfile.mkdtemp(prefix="arl-task-")
    before = os.getcwd()
    try:
        os.chdir(root)
        here = tuple(_unpacked(x, home) for x in a)
        try:
            result = fn(*here)
        except ArlError as e:
            return _Done(node, ip, refused=e)
        pairs = [] if home else zip(a, here, strict=True)
        back = tuple(_news(x, y) for x, y in pairs if isinstance(x, _Shipped))
        return _Done(node, ip, result=result, back=back)
    finally:
        os.chdir(before)
        if not home:
            shutil.rmtree(root, ignore_errors=True)


def _unpacked(x, home: bool):
    """A task's argument on its node: a shipped folder as a path (away: its copy, written)."""
    if not isinstance(x, _Shipped):
        return x
    if home:
        return x.path
    local = x.path.lstrip("/") if os.path.isabs(x.path) else x.path  # inside the task's folder
    for rel, data in x.files:
        (Path(local) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(local) / rel).write_bytes(data)
    return os.path.abspath(local) if os.path.isabs(x.path) else local


def _news(x: _Shipped, local: str) -> tuple:
    """(folder, written, deleted): what the task changed in its copy of the folder (deleted:
    files, then the folders it removed, deepest first)."""
    root, sent = Path(local), dict(x.files)
    now = _files(root)
    written = tuple((rel, data) for rel, data in now.items() if sent.get(rel) != data)
    held = {str(q) for rel in sent for q in Path(rel).parents if str(q) != "."}
    dirs = sorted((d for d in held if not (root / d).is_dir()), key=len, reverse=True)
    return x.path, written, (*(rel for rel in sent if rel not in now), *dirs)


def _write_back(root: Path, written, gone) -> None:
    """Apply a task's changes to its folder here: files written atomically, deleted files
    and folders deleted (a folder only if nothing is left in it)."""
    for rel in gone:
        p = root / rel
        if p.is_dir():
            with suppress(OSError):
                p.rmdir()
        else:
            p.unlink(missing_ok=True)
    for rel, data in written:
        atomic_write_bytes(root / rel, data)

"""The runner: the sandbox worker's program (stdlib only), passed as `-c` after child.py.

It is never a file inside the sandbox. It reads job requests (source, function name,
each case's args as JSON, limits; never an expected value) as frames on stdin, forks a
child per job (child.py) in a fresh scratch directory, checks the child's stream of
records, kills every process of the job, removes the scratch directory and answers with
one frame on stdout: b"<length>\\n" then that many bytes of JSON (argv: see main).
"""

import fcntl
import gc
import json
import os
import select
import signal
import sys
import time

try:  # on the host, as a module; in the sandbox child.py's text comes first in the program
    from .child import child_main, parse_stream, plain
except ImportError:
    pass

# Preloaded by a warm worker: a job's child finds them already imported.
WARM_IMPORTS = ("bisect", "collections", "functools", "heapq", "itertools", "re", "typing")

MAX_STREAM = 8 << 20  # bytes of result records one job may send
MAX_ENTRIES = 5000  # files and directories a job may leave for the runner to remove
HARNESS = {
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "__main__.py",
    ".pytest_cache",
}


def read_frame(fd):
    """One request frame from fd, or None at end of input."""
    head = b""
    while not head.endswith(b"\n"):
        b = os.read(fd, 1)
        if not b:
            return None
        head += b
    n, data = int(head), b""
    while len(data) < n:
        b = os.read(fd, n - len(data))
        if not b:
            return None
        data += b
    return json.loads(data)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def send_frame(fd, obj):
    data = json.dumps(obj).encode()
    write_all(fd, b"%d\n" % len(data) + data)


def others(me):
    """Pids in this PID namespace other than its init (1) and the runner."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]


def kill_job(cfg, pid):
    """Kill every process of the job and reap its child: (status, rusage, none left?)."""
    if cfg["mode"] == "none":  # no PID namespace here: never kill(-1), only the job's group
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status, rusage = os.wait4(pid, 0)
        return status, rusage, True
    me, reaped = os.getpid(), None
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)  # every process of this PID namespace but init and me
        except OSError:
            pass
        if reaped is None:
            p, status, rusage = os.wait4(pid, os.WNOHANG)
            reaped = (status, rusage) if p else None
        if reaped is not None and not others(me):
            return reaped + (True,)
        time.sleep(0.002)
    if reaped is None:
        reaped = os.wait4(pid, 0)[1:]
    return reaped + (False,)


class Output:
    """The job's stdout+stderr: the first `cap` bytes are kept, the rest read and dropped."""

    def __init__(self, cap):
        self.data, self.cap, self.cut = bytearray(), cap, False

    def add(self, chunk):
        self.cut = self.cut or len(self.data) + len(chunk) > self.cap
        self.data += chunk[: max(0, self.cap - len(self.data))]


def collect(pid, out_r, res_r, deadline, out):
    """Read output and records until the child exits or the deadline: (records, timed out?)."""
    res, pidfd, poll = bytearray(), os.pidfd_open(pid), select.poll()
    for fd in (out_r, res_r, pidfd):
        poll.register(fd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return res, True
            events = poll.poll(left * 1000)
            for fd, _ in events:
                if fd == pidfd:
                    continue
                data = os.read(fd, 1 << 20)
                if not data:
                    poll.unregister(fd)
                elif fd == out_r:
                    out.add(data)
                elif len(res) + len(data) > MAX_STREAM:
                    return None, False  # the child floods its result pipe: stop listening
                else:
                    res += data
            if any(fd == pidfd for fd, _ in events):
                return res, False
    finally:
        os.close(pidfd)


def drain(fd, sink, limit):
    """Append what is left in a pipe once every writer is dead (bounded in time and size)."""
    end = time.monotonic() + 1.0
    os.set_blocking(fd, False)
    got = 0
    while time.monotonic() < end and got <= limit:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        got += len(chunk)
        sink(chunk)


def death(status, rusage, lim, timed_out, oom_before):
    """How the child ended, as (status, detail) for the case it was in."""
    if timed_out:
        return "timeout", f"wall clock limit ({lim['wall_seconds']:g}s)"
    used = rusage.ru_utime + rusage.ru_stime
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and used >= lim["cpu_seconds"]):
            return "timeout", f"cpu time limit ({lim['cpu_seconds']:g}s)"
        if sig == signal.SIGKILL and oom_kills() > oom_before:
            return "memory", "killed by the kernel (out of memory)"
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return "crash", f"killed by {name}"
    return "crash", f"exited with code {os.WEXITSTATUS(status)}"


def oom_kills():
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def scan(scratch):
    """Harness files (conftest.py, *.pth, ...) in the scratch tree, and whether it is small.

    A tree of more than MAX_ENTRIES entries is not walked further nor removed one file at a
    time (that could outlast the host's patience): the worker is replaced instead."""
    found, count = set(), 0
    for _, dirs, files in os.walk(scratch):
        for name in dirs + files:
            if name in HARNESS or name.endswith(".pth"):
                found.add("dropped:" + name)
        count += len(dirs) + len(files)
        if count > MAX_ENTRIES:
            return sorted(found), False
    return sorted(found), True


def remove_tree(path):
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
        for name in dirs:
            p = os.path.join(root, name)
            if os.path.islink(p):
                os.unlink(p)
            else:
                os.rmdir(p)
    os.rmdir(path)


def setup_scratch(req, cfg, scratch):
    """A fresh scratch directory with solution.py and the job's files, owned by the job's uid."""
    os.mkdir(scratch, 0o755)
    uid = cfg["uid"]
    for name, text in [("solution.py", req["source"])] + req["files"]:
        path = os.path.join(scratch, name)
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    if uid >= 0:
        for root, dirs, files in os.walk(scratch):
            for name in [""] + dirs + files:
                os.chown(os.path.join(root, name) if name else root, uid, uid)


def case_records(res, n, status, rusage, lim, timed_out, oom_before, stream_error):
    """Every case's record, and the flags the stream raises."""
    records, imported, _, err = parse_stream(bytes(res), n)
    if stream_error or err:  # only the job's own code can garble the stream: none of it counts
        return [{"s": "crash", "d": stream_error or err}] * n, ["bad_result_stream"]
    if records and records[0]["s"] == "import":
        return records, ["exit_at_import"] * (records[0]["e"] == "SystemExit")
    flags = []
    if len(records) < n:
        kind, detail = death(status, rusage, lim, timed_out, oom_before)
        if not imported and os.WIFEXITED(status):
            flags.append("exit_at_import")
            detail = f"exited at import with code {os.WEXITSTATUS(status)}"
        records.append({"s": kind, "d": detail})
        records += [{"s": kind, "d": "not run: " + detail}] * (n - len(records))
    return records, flags


def run_job(req, cfg, devnull):
    """Run one job in a forked child; the reply holds one record per case, output and flags."""
    scratch = os.path.join(cfg["root"], "job")
    lim, n = req["limits"], len(req["args"])
    setup_scratch(req, cfg, scratch)
    (out_r, out_w), (res_r, res_w) = os.pipe(), os.pipe()
    try:
        fcntl.fcntl(out_r, 1031, 1 << 20)  # F_SETPIPE_SZ: drain a flood in fewer reads
    except OSError:
        pass
    oom_before, start = oom_kills(), time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(res_r)
        child_main(req, cfg, scratch, out_w, res_w, devnull)
    os.close(out_w)
    os.close(res_w)
    out = Output(int(lim["output_bytes"]))
    res, timed_out = collect(pid, out_r, res_r, start + lim["wall_seconds"], out)
    stray = cfg["mode"] != "none" and any(p != pid for p in others(os.getpid()))
    status, rusage, clean = kill_job(cfg, pid)
    drain(out_r, out.add, 1 << 34)
    if res is not None:
        drain(res_r, res.extend, MAX_STREAM - len(res))
    os.close(out_r)
    os.close(res_r)
    flags, small = scan(scratch)
    try:
        if small:
            remove_tree(scratch)
    except OSError:
        small = False
    clean = clean and small
    stream_error = "result stream too large" if res is None else None
    records, stream_flags = case_records(
        res or b"", n, status, rusage, lim, timed_out, oom_before, stream_error
    )
    flags += stream_flags + ["output_cut"] * out.cut + ["left_processes"] * stray
    return {
        "cases": records,
        "output": out.data.decode("utf-8", "replace"),
        "flags": flags,
        "dirty": not clean,
        "ms": round((time.monotonic() - start) * 1000, 3),
        "child_cpu_ms": round((rusage.ru_utime + rusage.ru_stime) * 1000, 3),
        "child_faults": rusage.ru_minflt,
    }


WARM_SOURCE = """
import collections, math

def f(a, b):
    xs = [a, b, a * b, math.sqrt(abs(a))]
    return {"s": sum(xs[:3]), "c": collections.Counter("ab").most_common(1)}
"""


def warm_up(root):
    """Do once in the runner what each job's child does (import, compile, call, serialize),
    so that the forked children find it done: they write fewer pages (a fault each)."""
    for name in WARM_IMPORTS:
        __import__(name)
    d = os.path.join(root, "warm")
    os.mkdir(d)
    with open(os.path.join(d, "warm_solution.py"), "w") as f:
        f.write(WARM_SOURCE)
    sys.path.insert(0, d)
    try:
        module = type(sys)("warm")
        exec(compile(WARM_SOURCE, os.path.join(d, "warm.py"), "exec"), module.__dict__)
        fn = __import__("warm_solution").f
        for args in ("[1, 2]", '[2.5, "x"]'):
            try:
                json.dumps({"k": "ok", "i": 0, "v": plain(fn(*json.loads(args)))})
            except Exception as e:
                json.dumps({"k": "raise", "i": 0, "e": type(e).__name__, "m": str(e)})
    finally:
        sys.path.remove(d)
        sys.modules.pop("warm_solution", None)
        sys.path_importer_cache.pop(d, None)
        remove_tree(d)


def main(argv):
    """argv: mode ("bwrap"/"none"), job uid (-1: the runner's), scratch root, "warm"/"cold"."""
    cfg = {"mode": argv[1], "uid": int(argv[2]), "root": argv[3]}
    sys.dont_write_bytecode = True
    while sys.path and sys.path[0] in ("", "."):
        del sys.path[0]
    devnull = os.open(os.devnull, os.O_RDWR)
    if argv[4] == "warm":  # a cold worker runs one job: warming up would only cost
        warm_up(cfg["root"])
    # What every job's child would otherwise redo (and pay for in page faults): its
    # environment (bwrap set PATH, LANG, PYTHONHASHSEED), its stdout (fd 1 in the child,
    # line-buffered so a crash keeps what was printed), and no GC walks over the runner's
    # objects in the child.
    scratch = os.path.join(cfg["root"], "job")
    os.environ.update(HOME=scratch, TMPDIR=scratch)
    sys.stdout.reconfigure(line_buffering=True, errors="backslashreplace")
    gc.freeze()
    send_frame(1, {"ready": os.getpid()})
    while True:
        req = read_frame(0)
        if req is None:
            return
        try:
            reply = run_job(req, cfg, devnull)
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"[:300], "dirty": True}
        send_frame(1, reply)


if __name__ == "__main__":
    main(sys.argv)

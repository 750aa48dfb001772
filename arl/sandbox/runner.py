"""The runner: the sandbox worker's program (stdlib only), passed as `-c` after child.py.

It is never a file inside the sandbox. It reads job requests (source, function name,
each case's args as JSON, limits; never an expected value) as frames on stdin and answers
each with one frame on stdout: b"<length>\\n" then that many bytes of JSON (argv: see main).

No job's child is forked from the runner, whose memory holds earlier jobs' requests and
replies (freed or not). After warm-up, before any request, the runner forks a zygote; for
each job the zygote forks the job's child, hands it the fds of its own request pipe, output
pipe and result socket, and reports its pid and, once it has reaped it, its exit status.
The child reads only its own request (child.py). The runner writes the scratch directory,
checks the result stream (accepting only what the child itself wrote: each chunk on the
unix socket carries its sender's pid), kills every process of the job, scans and removes
the scratch directory by directory fds (so no path is too long to reach).
"""

import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

try:  # on the host, as a module; in the sandbox child.py's text comes first in the program
    from .child import child_main, parse_stream, plain
except ImportError:
    pass

# Preloaded by a warm worker: a job's child finds them already imported.
WARM_IMPORTS = ("bisect", "collections", "functools", "heapq", "itertools", "re", "typing")

MAX_STREAM = 8 << 20  # bytes of result records one job may send
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid of the process that sent a chunk
CRED_SPACE = socket.CMSG_SPACE(UCRED.size)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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
    """One request frame from fd (its JSON bytes), or None at end of input."""
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
    return data


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def send_frame(fd, obj):
    data = json.dumps(obj).encode()
    write_all(fd, b"%d\n" % len(data) + data)


def others(*mine):
    """Pids in this PID namespace other than its init (1) and `mine` (runner, zygote)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, *mine)]


def kill_as(uid):
    """SIGKILL every process of `uid` from a process of that uid (not root's zygote, nor the
    runner): a fork of the runner that drops to the uid and calls kill(-1)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def kill_job(cfg, pid, zygote):
    """Kill every process of the job (its child `pid` is the zygote's to reap): none left?"""
    if cfg["mode"] == "none":  # no PID namespace here: only the job's own process group
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        return True
    me = os.getpid()
    for _ in range(1000):
        left = others(me, zygote)
        if not left:
            return True
        if cfg["uid"] >= 0:
            kill_as(cfg["uid"])
        else:  # the job runs as the runner's own uid: one by one, never the zygote
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.002)
    return not others(me, zygote)


class Output:
    """The job's stdout+stderr: the first `cap` bytes are kept, the rest read and dropped."""

    def __init__(self, cap):
        self.data, self.cap, self.cut = bytearray(), cap, False

    def add(self, chunk):
        self.cut = self.cut or len(self.data) + len(chunk) > self.cap
        self.data += chunk[: max(0, self.cap - len(self.data))]


class Results:
    """The result stream: bytes the job's child sent on its socket; a chunk from any other
    process (a forked grandchild writing into the inherited fd) is dropped and noted."""

    def __init__(self, sock, pid):
        self.sock, self.pid = sock, pid
        self.data, self.foreign, self.over = bytearray(), False, False

    def read(self):
        """Read one chunk: False at end of stream."""
        data, anc, _, _ = self.sock.recvmsg(1 << 20, CRED_SPACE)
        if not data:
            return False
        sender = None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                sender = UCRED.unpack(cdata[: UCRED.size])[0]
        if sender != self.pid:
            self.foreign = True
        elif len(self.data) + len(data) > MAX_STREAM:
            self.over = True  # the child floods its result socket: stop listening
        else:
            self.data += data
        return True

    def drain(self):
        """What is left once every writer is dead (bounded in time)."""
        end = time.monotonic() + 1.0
        self.sock.setblocking(False)
        try:
            while not self.over and time.monotonic() < end and self.read():
                pass
        except (BlockingIOError, OSError):
            pass


def collect(pid, out_r, res, deadline, out):
    """Read output and records until the child exits ("exited"), the deadline ("timeout")
    or a flood of records ("flood")."""
    pidfd, poll, res_fd = os.pidfd_open(pid), select.poll(), res.sock.fileno()
    for fd in (out_r, res_fd, pidfd):
        poll.register(fd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            events = poll.poll(left * 1000)
            for fd, _ in events:
                if fd == pidfd:
                    continue
                if fd == res_fd:
                    if not res.read():
                        poll.unregister(fd)
                    elif res.over:
                        return "flood"
                    continue
                data = os.read(fd, 1 << 20)
                if not data:
                    poll.unregister(fd)
                else:
                    out.add(data)
            if any(fd == pidfd for fd, _ in events):
                return "exited"
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

    The walk goes by directory fds (openat), never by path, so a file buried past PATH_MAX
    is reached; a tree it cannot walk is flagged "dropped:unscanned". A tree of more than
    MAX_ENTRIES entries is not walked further nor removed one file at a time (that could
    outlast the host's patience): the worker is replaced instead."""
    found, count, stack = set(), 0, []
    try:
        stack.append(os.open(scratch, DIR_FLAGS))
        while stack:
            fd = stack.pop()
            try:
                with os.scandir(fd) as it:
                    for e in it:
                        count += 1
                        if e.name in HARNESS or e.name.endswith(".pth"):
                            found.add("dropped:" + e.name)
                        if e.is_dir(follow_symlinks=False):
                            stack.append(os.open(e.name, DIR_FLAGS, dir_fd=fd))
            finally:
                os.close(fd)
            if count > MAX_ENTRIES:
                return sorted(found), False
    except (OSError, ValueError):
        return sorted(found | {"dropped:unscanned"}), False
    finally:
        for fd in stack:
            os.close(fd)
    return sorted(found), True


def remove_tree(path):
    """Remove a directory tree by directory fds, depth first without recursion."""
    stack = [os.open(path, DIR_FLAGS)]
    names = []  # names[i]: the name of stack[i + 1] in stack[i]
    try:
        while stack:
            fd, sub = stack[-1], None
            with os.scandir(fd) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        sub = e.name
                        break
                    os.unlink(e.name, dir_fd=fd)
            if sub is not None:
                stack.append(os.open(sub, DIR_FLAGS, dir_fd=fd))
                names.append(sub)
                continue
            os.close(stack.pop())
            if names:
                os.rmdir(names.pop(), dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)
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


class Zygote:
    """The process every job's child is forked from: forked once, after warm-up and before
    any request, so that no job's data (arguments, results, replies) is ever in it."""

    def __init__(self, cfg, devnull):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            try:
                zygote_main(theirs, cfg, devnull)
            finally:
                os._exit(0)
        theirs.close()

    def fork(self, fds):
        """The pid of a new job child holding `fds` (request, output, results)."""
        socket.send_fds(self.sock, [b"job"], fds)
        return int(self.recv())

    def reaped(self):
        """The child's exit status and rusage, once the zygote has reaped it."""
        status, utime, stime, minflt = json.loads(self.recv())
        return status, Usage(utime, stime, minflt)

    def recv(self):
        data = self.sock.recv(256)
        if not data:
            raise RuntimeError("the zygote died")
        return data


class Usage:
    def __init__(self, utime, stime, minflt):
        self.ru_utime, self.ru_stime, self.ru_minflt = utime, stime, minflt


def zygote_main(sock, cfg, devnull):
    """Fork a child per message, hand it the message's fds, report its pid and its end."""
    os.dup2(devnull, 0)  # the host's pipes are the runner's alone
    os.dup2(devnull, 1)
    scratch = os.path.join(cfg["root"], "job")
    while True:
        _, fds, _, _ = socket.recv_fds(sock, 16, 3)
        if len(fds) != 3:
            return
        pid = os.fork()
        if pid == 0:
            sock.close()
            req_r, out_w, res_w = fds
            try:
                req = json.loads(read_frame(req_r))
                os.close(req_r)
            except BaseException:
                os._exit(70)
            child_main(req, cfg, scratch, out_w, res_w, devnull)
        for fd in fds:
            os.close(fd)
        sock.send(b"%d" % pid)
        _, status, ru = os.wait4(pid, 0)
        sock.send(json.dumps([status, ru.ru_utime, ru.ru_stime, ru.ru_minflt]).encode())


def run_job(raw, cfg, devnull, zygote):
    """Run one job in a child forked by the zygote; the reply holds one record per case,
    output and flags."""
    req = json.loads(raw)
    scratch = os.path.join(cfg["root"], "job")
    lim, n = req["limits"], len(req["args"])
    setup_scratch(req, cfg, scratch)
    (out_r, out_w), (req_r, req_w) = os.pipe(), os.pipe()
    res_sock, res_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    res_sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    for fd in (out_r, req_w):
        try:
            fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ: fewer reads and writes
        except OSError:
            pass
    oom_before, start = oom_kills(), time.monotonic()
    try:
        pid = zygote.fork([req_r, out_w, res_w.fileno()])
    finally:
        os.close(req_r)
        os.close(out_w)
        res_w.close()
    try:
        write_all(req_w, b"%d\n" % len(raw) + raw)
    except OSError:
        pass  # the child is already gone: its end says how
    os.close(req_w)
    out, res = Output(int(lim["output_bytes"])), Results(res_sock, pid)
    end = collect(pid, out_r, res, start + lim["wall_seconds"], out)
    timed_out, me = end == "timeout", os.getpid()
    stray = cfg["mode"] != "none" and any(p != pid for p in others(me, zygote.pid))
    if end == "exited":  # the zygote reaps it at once; then kill what it left
        status, rusage = zygote.reaped()
        clean = kill_job(cfg, pid, zygote.pid)
    else:
        clean = kill_job(cfg, pid, zygote.pid)
        status, rusage = zygote.reaped()
    drain(out_r, out.add, 1 << 34)
    if not res.over:
        res.drain()
    os.close(out_r)
    res_sock.close()
    flags, small = scan(scratch)
    try:
        if small:
            remove_tree(scratch)
    except OSError:
        small = False
    clean = clean and small
    stream_error = "result stream too large" if res.over else None
    records, stream_flags = case_records(
        res.data, n, status, rusage, lim, timed_out, oom_before, stream_error
    )
    flags += stream_flags + ["output_cut"] * out.cut + ["left_processes"] * stray
    flags += ["foreign_result"] * res.foreign
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
    try:  # a deep scratch tree is walked and removed by one fd per level
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass
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
    zygote = Zygote(cfg, devnull)  # before any request: no job's data is ever in it
    send_frame(1, {"ready": os.getpid()})
    while True:
        raw = read_frame(0)
        if raw is None:
            return
        try:
            reply = run_job(raw, cfg, devnull, zygote)
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"[:300], "dirty": True}
        send_frame(1, reply)


if __name__ == "__main__":
    main(sys.argv)

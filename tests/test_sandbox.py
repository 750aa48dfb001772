"""Attacks on arl.sandbox, each through make_sandbox(...).run(Job(...)) with real code."""

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import arl
from arl.sandbox import Limits, make_sandbox, sandbox_available
from arl.sandbox.launch import SCRATCH_MB
from tests.sandbox_jobs import job, statuses

REASON = sandbox_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no sandbox here: {REASON}")
QUICK = Limits(cpu_seconds=1, wall_seconds=1.5, processes=16)


@pytest.fixture(scope="module")
def sb():
    with make_sandbox("auto", workers=2) as sandbox:
        yield sandbox


def host_pids(uids=(), marker=None):
    """Host processes running as one of `uids`, or with `marker` in their command line."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        uid = int(status.split("Uid:")[1].split()[0])
        if uid in uids or (marker and marker.encode() in cmdline):
            found.append(pid)
    return found


def job_uids(sandbox):
    return {w.uid for w in sandbox._live}


def test_results_are_compared_outside_by_type_and_value(sb):
    src = """
        def f(a, b):
            if a == 0:
                return a / b
            return a + b if a < 10 else [a, b]
    """
    cases = [((1, 2), 3), ((1, 2), 4), ((0, 0), 0), ((1, 0), True), ((20, 1), [20, 1])]
    v = sb.run(job(src, *cases, ((0.1, 0.2), 0.30000000001)))
    assert statuses(v) == ["pass", "fail", "fail", "fail", "pass", "pass"]
    assert v.results[1].detail == "got 3" and v.results[2].detail.startswith("ZeroDivisionError")
    assert v.results[3].detail == "got 1"  # 1 is not True
    assert not v.passed and v.fraction == pytest.approx(0.5) and v.infra_error is None
    assert sb.kind == "bwrap" and sb.stats["infra_errors"] == 0


def test_cpu_loop_and_sleep_end_in_time_and_leave_no_process(sb):
    marker = "arl-sandbox-marker-" + uuid.uuid4().hex
    sleeper = f"""
        import os, subprocess, sys, time
        def f(x):
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", "{marker}"])
            if os.fork() == 0:  # a daemon: its own session, its parent gone
                os.setsid()
                if os.fork() == 0:
                    cmd = [sys.executable, "-c", "import time; time.sleep(1000)", "{marker}"]
                    os.execv(sys.executable, cmd)
                os._exit(0)
            time.sleep(10 ** 9)
    """
    loop = "def f(x):\n    while True:\n        pass\n"
    start = time.monotonic()
    v_sleep, v_loop = sb.run_many(
        [job(sleeper, ((1,), 1), limits=QUICK), job(loop, ((1,), 1), limits=QUICK)]
    )
    took = time.monotonic() - start
    assert statuses(v_sleep) == ["timeout"] and "wall clock" in v_sleep.results[0].detail
    assert statuses(v_loop) == ["timeout"]  # by its CPU time, or the wall clock under load
    assert took < QUICK.wall_seconds + 1.0
    assert host_pids(job_uids(sb), marker) == []
    assert sb.stats["worker_restarts"] == 0  # the runner's kill left nothing behind


def test_memory_bomb_is_memory_and_a_sibling_still_passes(sb):
    huge = "def f(x):\n    b = bytearray(8 << 30)\n    return len(b)\n"
    grow = "def f(x):\n    xs = []\n    while True:\n        xs.append(bytearray(1 << 20))\n"
    sibling = "import time\ndef f(x):\n    time.sleep(0.3)\n    return x * 2\n"
    first = """
        import subprocess
        def f(x):  # in a machine-wide shortage the kernel kills the job's processes first
            child = subprocess.run(["cat", "/proc/self/oom_score_adj"], capture_output=True)
            return [open("/proc/self/oom_score_adj").read(), child.stdout.decode()]
    """
    verdicts = sb.run_many(
        [
            job(huge, ((1,), 1)),
            job(sibling, ((21,), 42)),
            job(grow, ((1,), 1)),
            job(sibling, ((1,), 2)),
            job(first, ((1,), ["1000\n", "1000\n"])),
        ]
    )
    assert [statuses(v) for v in verdicts] == [["memory"], ["pass"], ["memory"], ["pass"], ["pass"]]


def test_fork_bomb_is_contained_and_a_sibling_still_passes(sb):
    bomb = """
        import os
        def f(x):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """
    count = """
        import os, time
        def f(x):
            n = 0
            while True:
                try:
                    pid = os.fork()
                except OSError:
                    return n
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
    """
    sibling = "import time\ndef f(x):\n    time.sleep(0.5)\n    return x + 1\n"
    start, got = time.monotonic(), []
    pair = [job(bomb, ((1,), 1), limits=QUICK), job(sibling, ((1,), 2))]
    worker = threading.Thread(target=lambda: got.extend(sb.run_many(pair)))
    worker.start()
    time.sleep(0.8)  # the bomb is at its limit by now: the machine still forks
    assert subprocess.run(["true"], timeout=5).returncode == 0 and worker.is_alive()
    worker.join()
    assert time.monotonic() - start < QUICK.wall_seconds + 2.0
    v_bomb, v_sib = got
    assert statuses(v_bomb)[0] in ("timeout", "crash", "fail") and v_sib.passed
    assert host_pids(job_uids(sb)) == []
    # RLIMIT_NPROC holds for the job's uid: 8 processes, its own child being one of them
    v = sb.run(job(count, ((1,), 7), limits=Limits(processes=8)))
    assert v.passed, v.results


def test_big_file_many_files_and_a_flood_of_output_are_cut(sb):
    big = """
        def f(x):
            n = 0
            try:
                with open("big", "wb") as fh:
                    for _ in range(10 << 10):  # 10 GiB
                        fh.write(b"x" * (1 << 20))
                        n += 1 << 20
            except OSError as e:
                return [n, e.errno]
            return [n, 0]
    """
    many = """
        def f(x):
            n = 0
            try:
                for i in range(10 ** 6):
                    with open(f"f{i}", "wb") as fh:
                        fh.write(b"x" * (4 << 20))
                    n += 4 << 20
            except OSError as e:
                return [n <= x, e.errno]
    """
    flood = "import os\ndef f(x):\n    for _ in range(1024):\n        os.write(1, b'y' * (1 << 20))\n    return x\n"  # noqa: E501
    free = shutil.disk_usage("/").free
    start = time.monotonic()
    verdicts = sb.run_many(
        [
            job(big, ((1,), [8 << 20, 27])),  # EFBIG at the 8 MiB limit
            job(many, ((SCRATCH_MB << 20,), [True, 28])),  # ENOSPC
            job(flood, ((5,), 5)),
        ]
    )
    assert time.monotonic() - start < Limits().wall_seconds
    assert [statuses(v) for v in verdicts] == [["pass"]] * 3, [v.results for v in verdicts]
    assert abs(shutil.disk_usage("/").free - free) < 64 << 20
    assert "output_cut" in verdicts[2].flags and verdicts[2].output == "y" * 65536
    assert "output_cut" not in verdicts[0].flags


def test_no_network(sb):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    src = """
        import socket
        def f(port):
            out = []
            for addr in [("127.0.0.1", port), ("1.1.1.1", 53)]:
                try:
                    socket.create_connection(addr, timeout=1).close()
                    out.append("connected")
                except OSError:
                    out.append("blocked")
            return out
    """
    try:
        v = sb.run(job(src, ((server.getsockname()[1],), ["blocked", "blocked"])))
    finally:
        server.close()
    assert v.passed, v.results


def test_the_host_is_unreadable_and_unwritable(sb, tmp_path):
    secret = Path.home() / f".arl-sandbox-secret-{uuid.uuid4().hex}"
    secret.write_text("secret")
    harness = [str(secret), arl.__file__, __file__, "/proc/1/environ", str(tmp_path), "/usr/bin"]
    src = """
        import os
        def readable(p):
            try:
                if os.path.isdir(p):
                    os.listdir(p)
                else:
                    open(p, "rb").read(1)
                return True
            except OSError:
                return False
        def writable(d):
            try:
                open(os.path.join(d, "x"), "w").write("x")
                return True
            except OSError:
                return False
        def f(paths, dirs):
            return [[readable(p) for p in paths], [writable(d) for d in dirs], writable(".")]
    """
    dirs = ["/", "/tmp", "/usr", "/dev/shm", "/root", sys.base_prefix, "/proc/1"]
    try:
        v = sb.run(job(src, ((harness, dirs), [[False] * 5 + [True], [False] * 7, True])))
    finally:
        secret.unlink()
    assert v.passed, v.results


def test_expected_values_never_enter_the_sandbox(sb, monkeypatch):
    marker = "EXPECTEDMARK" + uuid.uuid4().hex  # planted in `expected` only
    tail = marker[len("EXPECTEDMARK") :][::-1]  # the job holds it reversed, never whole
    src = f"""
        import ctypes, os
        HEAD, TAIL = b"EXPECTEDMARK", {tail!r}.encode()[::-1]
        def hit(data):
            i = data.find(HEAD)
            while i >= 0:
                if data[i + len(HEAD): i + len(HEAD) + len(TAIL)] == TAIL:
                    return True
                i = data.find(HEAD, i + 1)
            return False
        def blobs():
            for p in ["/proc/self/environ", "/proc/self/cmdline"] + [
                f"/proc/{{p}}/cmdline" for p in os.listdir("/proc") if p.isdigit()
            ]:
                try:
                    yield open(p, "rb").read()
                except OSError:
                    pass
            for root, _, files in os.walk("."):
                for name in files:
                    yield open(os.path.join(root, name), "rb").read()
            with open("/proc/self/maps") as maps:  # all of this process's memory
                regions = [line.split() for line in maps]
            for r in regions:
                lo, hi = (int(x, 16) for x in r[0].split("-"))
                if r[1][0] == "r" and not (len(r) > 5 and r[5].startswith("[v")):
                    yield ctypes.string_at(lo, hi - lo)
        def f(x):
            return any(hit(b) for b in blobs())  # x: the marker itself in the control job
    """
    sent = []
    from arl.sandbox import pool

    send = pool.Worker._send

    def spy(worker, data, deadline):
        sent.append(data)
        return send(worker, data, deadline)

    monkeypatch.setattr(pool.Worker, "_send", spy)
    control = sb.run(job(src, ((marker,), True)))  # the scan finds the marker in args
    sent.clear()
    v = sb.run(job(src, ((1,), marker)))
    assert control.passed and statuses(v) == ["fail"] and v.results[0].detail == "got false"
    assert sent and not any(marker.encode() in s for s in sent)
    assert marker not in repr(v)


def test_another_workers_scratch_is_invisible(sb):
    name = f"mine-{uuid.uuid4().hex}"
    writer = f"import time\ndef f(x):\n    open('{name}', 'w').write('x')\n    time.sleep(1)\n    return x\n"  # noqa: E501
    seeker = f"""
        import glob, os, sys, time
        def f(x):
            time.sleep(0.3)
            found = glob.glob("/proc/*/root/tmp/job/{name}") + glob.glob("/proc/*/cwd/{name}")
            for root, dirs, files in os.walk("/"):
                skip = ("/proc", "/usr", sys.base_prefix)  # (sys.base_prefix: this Python)
                dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
                found += [root for n in files if n == "{name}"]
            return found
    """
    v_writer, v_seeker = sb.run_many([job(writer, ((1,), 1)), job(seeker, ((1,), []))])
    assert v_writer.passed and v_seeker.passed, v_seeker.results

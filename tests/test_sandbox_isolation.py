"""Round two of attacks on arl.sandbox (issue 42): no job sees another's data, no state
outlives a job, no policy text crashes the host. Each test attacks one promise."""

import hashlib
import platform
import secrets
from pathlib import Path

import pytest

from arl.errors import ArlError
from arl.sandbox import Case, Job, Limits, make_sandbox, sandbox_available
from tests.sandbox_jobs import job, statuses

REASON = sandbox_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no sandbox here: {REASON}")
ARCH = platform.machine()


@pytest.fixture(scope="module")
def one():
    with make_sandbox("auto", workers=1) as sandbox:
        yield sandbox


# A module that walks its frames (and the GC's objects) to the runner's last reply and
# returns the values an earlier job's child computed.
THIEF = """
    import gc, sys
    seen = []

    def replies():
        fr = sys._getframe()
        while fr is not None:
            for v in fr.f_locals.values():
                if isinstance(v, dict) and isinstance(v.get("cases"), list):
                    yield v
            fr = fr.f_back
        for o in gc.get_objects():
            if isinstance(o, dict) and isinstance(o.get("cases"), list) and "flags" in o:
                yield o

    def f(xs):
        i = len(seen)
        seen.append(xs)
        for r in replies():
            c = r["cases"]
            if len(c) > i and c[i].get("s") == "ok":
                return c[i]["v"]
        return None
"""
HONEST = """
    def f(xs):
        return sum(xs)
"""


def test_a_thief_after_an_honest_job_fails(one):
    cases = [([[3, 4]], 7), ([[10, 20, 5]], 35)]
    assert statuses(one.run(job(THIEF, *cases))) == ["fail", "fail"]
    assert one.run(job(HONEST, *cases)).passed
    again = one.run(job(THIEF, *cases))
    assert statuses(again) == ["fail", "fail"] and not again.passed


SCANNER = """
    import ctypes, hashlib

    def f(prefix, digests, n, control):
        try:  # the dropped uid made this process undumpable: /proc/self/mem would be root's
            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
        except Exception:
            pass
        pre, found = prefix.encode(), set()
        with open("/proc/self/maps") as m:
            regions = [line.split() for line in m]
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            for r in regions:
                if r[1][0] != "r":
                    continue
                lo, hi = (int(x, 16) for x in r[0].split("-"))
                for start in range(lo, hi, 8 << 20):
                    try:
                        mem.seek(start)
                        data = mem.read(min(hi, start + (8 << 20) + n) - start)
                    except (OSError, OverflowError, ValueError):
                        break
                    i = data.find(pre)
                    while i >= 0:  # only a digest: the marker itself is never made here
                        found.add(hashlib.sha256(data[i : i + n]).hexdigest())
                        i = data.find(pre, i + 1)
                    del data
        return [d in found for d in digests]
"""


def test_no_earlier_jobs_arguments_or_results_in_a_later_childs_memory(one):
    def marker():
        return "ARLMARK" + secrets.token_hex(12)

    arg, control = marker(), marker()
    result = "ARLMARK" + arg[7:][::-1]
    echo = job("def f(s):\n    return 'ARLMARK' + s[7:][::-1]\n", ([arg], result))
    for _ in range(3):
        assert one.run(echo).passed
    digests = [hashlib.sha256(m.encode()).hexdigest() for m in (arg, result, control)]
    scan = job(
        SCANNER,
        (["ARLMARK", digests, len(arg), control], [False, False, True]),
        limits=Limits(memory_mb=1024, wall_seconds=10, cpu_seconds=8),
    )
    v = one.run(scan)
    assert v.passed, v.results[0].detail  # the control (its own argument) is found


def _syscall_numbers():
    return {
        "x86_64": {"add_key": 248, "keyctl": 250, "unshare": 272},
        "aarch64": {"add_key": 217, "keyctl": 219, "unshare": 97},
    }.get(ARCH)


SHM = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p

    def f(n, mb):
        made = 0
        for _ in range(n):
            sid = libc.shmget(0, mb << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
            if sid < 0:
                continue
            addr = libc.shmat(sid, None, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                continue
            ctypes.memset(addr, 1, mb << 20)
            libc.shmdt(ctypes.c_void_p(addr))
            made += 1
        return made
"""


def _shmem_mb():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Shmem in /proc/meminfo")


def test_sysv_shared_memory_does_not_outlive_the_job_nor_escape_memory_mb():
    with make_sandbox("auto", workers=1) as sb:
        before = _shmem_mb()
        v = sb.run(job(SHM, ([3, 128], 0), limits=Limits(memory_mb=256, wall_seconds=4)))
        rise = _shmem_mb() - before
    assert rise <= 16, f"host Shmem rose by {rise:.0f} MB ({statuses(v)})"
    assert v.passed  # no segment could be made


KEYS_AND_QUEUES = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    NR = {nr}

    def f(write):
        if write:
            libc.syscall(NR["add_key"], b"user", b"arl-left", b"secret", 6, -4)
            q = libc.msgget(0x41524C, 0o1000 | 0o666)
            if q >= 0:
                buf = ctypes.create_string_buffer(b"\\x01" + b"\\x00" * 7 + b"secret")
                libc.msgsnd(q, buf, 6, 0)
            return [False, False]
        key = libc.syscall(NR["keyctl"], 10, -4, b"user", b"arl-left", 0)  # KEYCTL_SEARCH
        queue = libc.msgget(0x41524C, 0)
        return [key > 0, queue >= 0]
"""


def test_a_keyring_entry_and_a_message_queue_do_not_reach_the_next_job(one):
    nr = _syscall_numbers()
    if nr is None:
        pytest.skip(f"no syscall numbers for {ARCH}")
    source = KEYS_AND_QUEUES.format(nr=nr)
    assert one.run(job(source, ([True], [False, False]))).passed
    v = one.run(job(source, ([False], [False, False])))
    assert v.passed, v.results[0].detail


UNSHARE = """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)

    def f(flag):
        rc = libc.unshare(flag)
        return [rc, os.strerror(ctypes.get_errno()) if rc else "ok"]
"""


@pytest.mark.parametrize("flag", [0x10000000, 0x20000, 0x40000000])  # NEWUSER, NEWNS, NEWNET
def test_unshare_fails(one, flag):
    v = one.run(job(UNSHARE, ([flag], [-1, "Operation not permitted"])))
    assert v.passed, v.results[0].detail


def test_threads_forks_and_subprocesses_still_work_under_the_syscall_filter(one):
    source = """
        import os, subprocess, threading
        from concurrent.futures import ThreadPoolExecutor

        def f(xs):
            with ThreadPoolExecutor(4) as ex:
                doubled = list(ex.map(lambda x: 2 * x, xs))
            pid = os.fork()
            if pid == 0:
                os._exit(7)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            echo = subprocess.run(["/bin/echo", "hi"], capture_output=True, text=True).stdout
            return [sum(doubled), code, echo.strip()]
    """
    v = one.run(job(source, ([[1, 2, 3]], [12, 7, "hi"])))
    assert v.passed, v.results[0].detail


FORKER = """
    import os

    def f(xs):
        pid = os.fork()
        if pid == 0:  # a grandchild writes forged records into the inherited stream
            try:
                os.write(3, b'{"k": "ok", "i": 0, "v": -1}\\n{"k": "start", "i": 1}\\ngarbage\\n')
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        return sum(xs)
"""


def test_a_forking_module_gets_the_same_verdict_in_20_of_20_runs():
    j = job(FORKER, ([[1, 2]], 3), ([[4, 5, 6]], 15))
    with make_sandbox("auto", workers=2) as sb:
        verdicts = sb.run_many([j] * 20)
    assert all(v == verdicts[0] for v in verdicts), {str(v) for v in verdicts}
    assert statuses(verdicts[0]) == ["pass", "pass"]
    assert "foreign_result" in verdicts[0].flags


LINGERER = """
    import os, time

    def f(xs):
        if os.fork() == 0:  # writes forged records whenever it gets to, maybe after the child
            try:
                time.sleep(0.001 * (sum(xs) % 3))
                os.write(3, b'{"k": "ok", "i": 1, "v": -1}\\n')
            finally:
                os._exit(0)
        return sum(xs)
"""


def test_a_forking_module_whose_grandchild_lingers_gets_the_same_results_in_20_of_20_runs():
    j = job(LINGERER, ([[1, 2]], 3), ([[4, 5, 6]], 15))
    with make_sandbox("auto", workers=2) as sb:
        verdicts = sb.run_many([j] * 20)
    assert {v.results for v in verdicts} == {verdicts[0].results}
    assert statuses(verdicts[0]) == ["pass", "pass"]


def test_a_lone_surrogate_or_a_bad_file_name_comes_out_as_valid_utf8(one):
    source = r"""
        import os

        def f(xs):
            os.close(os.open(b"\xff.pth", os.O_CREAT | os.O_WRONLY))
            print("out \ud800")
            raise ValueError("\ud800 and \udcff")
    """
    v = one.run(job(source, ([[1]], 1)))
    assert v.results[0].status == "fail"
    texts = [r.detail for r in v.results] + list(v.flags) + [v.output]
    for t in texts:
        t.encode("utf-8")  # strict: no surrogate is left
    assert "\\ud800" in v.results[0].detail and "dropped:\\xff.pth" in v.flags


def test_a_job_refuses_source_that_is_not_utf8():
    with pytest.raises(ArlError, match="UTF-8"):
        Job('def f(xs):\n    return "\ud800"\n', "f", (Case("t", (1,), 1),))
    with pytest.raises(ArlError, match="UTF-8"):
        Job("def f(x):\n    return x\n", "f", (Case("t", (1,), 1),), files=(("a.py", "\udcff"),))


def test_a_conftest_past_path_max_is_flagged(one):
    source = """
        import os

        def f(xs):
            base = os.getcwd()
            fd = os.open(".", os.O_RDONLY)
            for _ in range(40):  # 40 x 201 characters: past PATH_MAX (4096)
                os.mkdir("d" * 200, dir_fd=fd)
                nfd = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = nfd
            os.close(os.open("conftest.py", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
            os.close(fd)
            return sum(xs)
    """
    v = one.run(job(source, ([[1, 2]], 3)))
    assert v.passed
    assert "dropped:conftest.py" in v.flags or "dropped:unscanned" in v.flags, v.flags
    assert one.run(job(HONEST, ([[1, 2]], 3))).passed


FORK_HOGS = """
    import os, time

    def f(n, mb):
        pids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                try:
                    block = bytearray(mb << 20)  # touched: every page is the job's
                    block[:: 4096] = b"x" * len(block[:: 4096])
                    time.sleep(1.0)
                finally:
                    os._exit(0)
            pids.append(pid)
        ok = 0
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            ok += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        return ok
"""


def test_a_jobs_processes_together_stay_within_the_worker_memory_cgroup():
    with make_sandbox("auto", workers=1) as sb:
        bound = getattr(sb, "memory_bound", "cgroup?")  # the code before issue 42 had none
        if not bound.startswith("cgroup"):
            pytest.skip(f"no memory cgroup here: {bound}")
        limits = Limits(memory_mb=256, processes=16, wall_seconds=8, cpu_seconds=4)
        v = sb.run(job(FORK_HOGS, ([6, 200], 6), limits=limits))
        caps = [w.cgroup.limit_mb for w in sb._live if getattr(w, "cgroup", None)]
    assert v.results[0].status == "fail", v.results[0].detail  # not all six could live
    assert caps == [256 + 128 + 128]


def test_installed_packages_are_out_of_a_jobs_sight(one):
    """This Python's site-packages (where a plain `pip install` puts arl, with CodeFix's
    tasks, or an environment package with its fixes) is an empty folder to a job: no
    installed file can be read, listed or imported."""
    import numpy

    from arl.sandbox.launch import package_dirs

    site = package_dirs()[0]
    assert Path(numpy.__file__).is_relative_to(site)  # the premise: numpy is installed there
    source = f"""
    import os, sys
    def f(kind):
        if kind == "file":
            return os.path.isfile({numpy.__file__!r})
        if kind == "list":
            return os.listdir({site!r})
        sys.path.insert(0, {site!r})
        try:
            import numpy
            return "imported"
        except ImportError:
            return "no"
    """
    verdict = one.run(job(source, (["file"], False), (["list"], []), (["import"], "no")))
    assert statuses(verdict) == ["pass", "pass", "pass"]

"""How a sandbox worker starts: bubblewrap's command line, or a plain subprocess ("none")."""

from __future__ import annotations

import functools
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from arl.errors import ArlError
from arl.sandbox import seccomp

HINT = (
    "install the Debian package bubblewrap (scripts/setup does), "
    "or pass --allow-unsandboxed to run policy code without a sandbox"
)
SCRATCH_MB = 128  # the worker's /tmp (a tmpfs): every job's files together
JOB_UIDS = (1_000_000_000, 2_000_000_000)  # a job's uid is drawn from here, one per worker
CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_SETGID", "CAP_SETUID")  # runner's only
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
# -s -S: no user site, no site module (no .pth files, no site-packages); -B: no bytecode files.
# Not -I: it implies -E, which ignores PYTHONHASHSEED=0, and a random hash seed per worker
# would make the order of a set of strings differ between workers. The environment is
# cleared (bwrap --clearenv) and the runner drops '' from sys.path, which is what -I adds.
PYTHON_FLAGS = ("-s", "-S", "-B")


class SandboxUnavailable(ArlError):
    """The sandbox cannot run here; the message says why and how to fix it, in one line."""


@dataclass(frozen=True)
class Launch:
    """What starts one worker: its command line, and the uid its jobs run as (-1: its own)."""

    argv: tuple[str, ...]
    uid: int
    cwd: str | None = None
    scratch: str | None = None  # a host directory to remove when the worker is closed
    seccomp: bytes | None = None  # the filter bwrap reads from the fd that SECCOMP_FD stands for


SECCOMP_FD = "{seccomp_fd}"  # in a Launch's argv: the worker puts the filter's fd number here


@functools.lru_cache(maxsize=1)
def filter_program() -> bytes | None:
    """The syscall filter for this machine (arl.sandbox.seccomp), or None on another arch."""
    arch = seccomp.host_arch()
    return seccomp.program(arch) if arch else None


def filter_fd(prog: bytes) -> int:
    """A pipe's read end holding the filter (bwrap reads it once, at start-up)."""
    r, w = os.pipe()
    try:
        os.write(w, prog)  # a few hundred bytes: far below a pipe's buffer
    finally:
        os.close(w)
    return r


@functools.lru_cache(maxsize=1)
def program() -> str:
    """The worker's program: the job child's code, then the runner's (no file in the sandbox)."""
    here = Path(__file__).parent
    return (here / "child.py").read_text() + "\n" + (here / "runner.py").read_text()


def interpreter() -> tuple[str, tuple[str, ...]]:
    """This Python's real executable, and the directories to bind for it besides /usr."""
    exe = os.path.realpath(sys.executable)
    roots = {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(exe))}
    return exe, tuple(sorted(r for r in roots if not _under(r, "/usr") and r != "/"))


def package_dirs() -> tuple[str, ...]:
    """Where this Python's installed packages live (site- and dist-packages, the user's too):
    a job sees them empty. Bound with the interpreter, they would let policy code read any
    installed package, an environment's own tasks and fixes included (a non-editable install
    of arl holds CodeFix's)."""
    import site
    import sysconfig

    found = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    found |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return tuple(sorted(os.path.realpath(d) for d in found if os.path.isdir(d)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def bwrap_argv(bwrap: str, uid: int, command: tuple[str, ...], filtered: bool = True) -> list[str]:
    """bubblewrap's command line: no network, read-only system and Python, tmpfs /tmp, and
    the syscall filter (its fd: SECCOMP_FD) where there is one for this machine."""
    argv = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    argv += ["--hostname", "sandbox"]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    _, roots = interpreter()
    made: set[str] = set()
    for root in roots:  # parents as plain 0755 directories: /root's own mode would hide Python
        parts = Path(root).parts
        for i in range(2, len(parts)):
            parent = str(Path(*parts[:i]))
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
        argv += ["--ro-bind", root, root]
    for d in package_dirs():  # an empty tmpfs over each that a bind above made visible
        if any(_under(d, r) for r in (*roots, *SYSTEM_DIRS)):
            argv += ["--tmpfs", d]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(SCRATCH_MB << 20)]
    argv += ["--tmpfs", "/tmp", "--chdir", "/", "--clearenv"]
    for key, value in ENV.items():
        argv += ["--setenv", key, value]
    if uid >= 0:  # root: keep only what the runner needs to set up, drop to and kill the job
        argv += ["--cap-drop", "ALL"]
        for cap in CAPS:
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user"]
    if filtered and filter_program() is not None:
        argv += ["--seccomp", SECCOMP_FD]
    return argv + ["--", *command]


def bwrap_launch(bwrap: str, warm: bool = True) -> Launch:
    """A sandboxed worker; as root its jobs run as a fresh unprivileged uid of their own."""
    uid = random.SystemRandom().randrange(*JOB_UIDS) if os.geteuid() == 0 else -1
    exe, _ = interpreter()
    mode = "warm" if warm else "cold"
    command = (exe, *PYTHON_FLAGS, "-c", program(), "bwrap", str(uid), "/tmp", mode)
    return Launch(tuple(bwrap_argv(bwrap, uid, command)), uid, seccomp=filter_program())


def plain_launch(warm: bool = True) -> Launch:
    """An unsandboxed worker ("none"): the same runner and rlimits in a plain subprocess."""
    scratch = tempfile.mkdtemp(prefix="arl-sandbox-")
    exe, _ = interpreter()
    mode = "warm" if warm else "cold"
    command = (exe, *PYTHON_FLAGS, "-c", program(), "none", "-1", scratch, mode)
    return Launch(command, -1, cwd=scratch, scratch=scratch)


def find_bwrap() -> str | None:
    """bubblewrap on PATH, or None."""
    return shutil.which("bwrap")


def sandbox_available() -> str | None:
    """None when bubblewrap works here, else the one-line reason (with the fix)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap (bwrap) needs Linux, not {sys.platform}: {HINT}"
    bwrap = find_bwrap()
    if bwrap is None:
        return f"bubblewrap (bwrap) not found: {HINT}"
    return _probe(bwrap)


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    """Start one sandbox the way a worker does and run a line of Python in it."""
    uid = 1 if os.geteuid() == 0 else -1
    check = "import os; os.close(os.pidfd_open(os.getpid())); print('ok')"
    exe, _ = interpreter()
    argv = bwrap_argv(bwrap, uid, (exe, *PYTHON_FLAGS, "-c", check))
    prog = filter_program()
    fd = filter_fd(prog) if prog is not None else -1
    argv = [str(fd) if a == SECCOMP_FD else a for a in argv]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, env=ENV, pass_fds=[fd] * (fd >= 0)
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap (bwrap) cannot start a sandbox here ({type(e).__name__}): {HINT}"
    finally:
        if fd >= 0:
            os.close(fd)
    if done.returncode != 0 or done.stdout.strip() != "ok":
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:160]
        return f"bubblewrap (bwrap) cannot start a sandbox here ({why}): {HINT}"
    return None

"""The syscall filter (arl.sandbox.seccomp), run by its own BPF interpreter for both
architectures: any machine checks both programs' decisions."""

import errno

import pytest

from arl.sandbox import seccomp
from arl.sandbox.seccomp import ALLOW, AUDIT_ARCH, DENIED, ERRNO, KILL_PROCESS, decide, numbers

EPERM, ENOSYS = ERRNO | errno.EPERM, ERRNO | errno.ENOSYS
ALLOWED = {  # syscalls a job needs: read, write, openat, mmap, exit_group, wait4, kill
    "x86_64": (0, 1, 257, 9, 231, 61, 62),
    "aarch64": (63, 64, 56, 222, 94, 260, 129),
}


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_each_denied_syscall_is_eperm_and_the_rest_are_allowed(arch):
    prog, audit, nr = seccomp.program(arch), AUDIT_ARCH[arch], numbers(arch)
    assert len(prog) % 8 == 0
    for name in DENIED:
        assert decide(prog, audit, nr[name]) == EPERM, name
    for n in ALLOWED[arch]:
        assert decide(prog, audit, n) == ALLOW, n
    assert decide(prog, audit, nr["clone3"]) == ENOSYS  # glibc falls back to clone


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_clone_with_a_new_namespace_is_denied_and_fork_or_a_thread_is_not(arch):
    prog, audit, clone = seccomp.program(arch), AUDIT_ARCH[arch], numbers(arch)["clone"]
    fork = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD
    thread = 0x003D0F00  # glibc's pthread_create flags
    for flags in (fork, thread):
        assert decide(prog, audit, clone, flags) == ALLOW
    for ns in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000):
        assert decide(prog, audit, clone, fork | ns) == EPERM


def test_another_arch_is_killed_and_x32_calls_are_enosys():
    x86, arm = seccomp.program("x86_64"), seccomp.program("aarch64")
    assert decide(x86, AUDIT_ARCH["aarch64"], 0) == KILL_PROCESS
    assert decide(arm, AUDIT_ARCH["x86_64"], 0) == KILL_PROCESS
    assert decide(x86, 0x40000003, 3) == KILL_PROCESS  # i386
    assert decide(x86, AUDIT_ARCH["x86_64"], 0x40000000 | 1) == ENOSYS
    # the same number means another syscall on the other arch: each table is its own
    assert numbers("x86_64")["unshare"] != numbers("aarch64")["unshare"]

"""The sandbox's syscall filter: a classic BPF program for `bwrap --seccomp FD`, built here.

No libseccomp: the program is a short list of instructions (struct sock_filter, 8 bytes
each) over struct seccomp_data (nr at offset 0, arch at 4, args[0] at 16). It

- kills the process when the audit arch is not the one it was built for (a 32-bit or x32
  syscall entry would have other numbers), and answers ENOSYS to x32 calls on x86_64;
- answers EPERM to SysV IPC (shm*, msg*, sem*: they would outlive the job in the worker's
  IPC namespace and their memory belongs to no process), keyrings (add_key, keyctl,
  request_key), new namespaces (unshare, setns, and clone with a CLONE_NEW* flag), mounts
  (mount, umount2, pivot_root, the new mount API), ptrace and process_vm_*, bpf,
  perf_event_open, userfaultfd and io_uring_*;
- answers ENOSYS to clone3 (its flags are in memory, which a filter cannot read), so that
  glibc falls back to clone for threads, fork and posix_spawn;
- allows everything else.

`decide` runs a program on one syscall (a small BPF interpreter), so the tests can check the
decisions for both architectures on any machine.
"""

from __future__ import annotations

import errno
import platform
import struct

LD_ABS_W, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
ALLOW, KILL_PROCESS, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
NR_OFF, ARCH_OFF, ARG0_OFF = 0, 4, 16
X32_BIT = 0x40000000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (not NEWTIME: in clone's
# flags that bit is part of the exit signal)
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
CLONE_NEW |= 0x40000000

DENIED = (
    "shmget shmat shmctl shmdt msgget msgsnd msgrcv msgctl semget semop semctl semtimedop "
    "add_key request_key keyctl unshare setns mount umount2 pivot_root open_tree move_mount "
    "fsopen fsconfig fsmount fspick mount_setattr ptrace process_vm_readv process_vm_writev "
    "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register"
).split()

# Syscall numbers (asm/unistd_64.h on x86_64; asm-generic/unistd.h on aarch64).
NUMBERS = {
    "x86_64": {
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
        "semctl": 66, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
        "semtimedop": 220, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
        "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "clone": 56,
    },
    "aarch64": {
        "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197, "msgget": 186, "msgctl": 187,
        "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191, "semtimedop": 192,
        "semop": 193, "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97,
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "clone": 220,
    },
}  # fmt: skip
COMMON = {  # the same number on both (added after the tables were unified)
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "clone3": 435, "mount_setattr": 442,
}  # fmt: skip
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def host_arch() -> str | None:
    """This machine's architecture as the filter names it, or None (no filter is built)."""
    return MACHINES.get(platform.machine().lower())


def numbers(arch: str) -> dict[str, int]:
    return {**NUMBERS[arch], **COMMON}


def program(arch: str) -> bytes:
    """The filter for `arch` ("x86_64" or "aarch64"), as bwrap --seccomp reads it."""
    nr = numbers(arch)
    code: list[tuple[int, int | str, int | str, int]] = []  # (op, jt, jf, k); jumps by label
    code += [(LD_ABS_W, 0, 0, ARCH_OFF), (JEQ, 1, 0, AUDIT_ARCH[arch]), (RET, 0, 0, KILL_PROCESS)]
    code += [(LD_ABS_W, 0, 0, NR_OFF)]
    if arch == "x86_64":
        code += [(JGE, "enosys", 0, X32_BIT)]
    code += [(JEQ, "eperm", 0, nr[name]) for name in DENIED]
    code += [(JEQ, "enosys", 0, nr["clone3"]), (JEQ, "clone", 0, nr["clone"])]
    code += [(RET, 0, 0, ALLOW)]
    labels = {"clone": len(code)}
    code += [(LD_ABS_W, 0, 0, ARG0_OFF), (JSET, "eperm", 0, CLONE_NEW), (RET, 0, 0, ALLOW)]
    labels["eperm"] = len(code)
    code += [(RET, 0, 0, ERRNO | errno.EPERM)]
    labels["enosys"] = len(code)
    code += [(RET, 0, 0, ERRNO | errno.ENOSYS)]
    out = b""
    for i, (op, jt, jf, k) in enumerate(code):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("seccomp program: jump out of range")
        out += struct.pack("<HBBI", op, jt, jf, k)
    return out


def decide(prog: bytes, arch_value: int, nr: int, arg0: int = 0) -> int:
    """Run the program on one syscall (its audit arch, number and first argument): the
    action it returns (ALLOW, KILL_PROCESS, or ERRNO | errno)."""
    data = struct.pack("<iIQ6Q", nr, arch_value, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", prog, 8 * i) for i in range(len(prog) // 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        if op == LD_ABS_W:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op == RET:
            return k
        elif op in (JEQ, JGE, JSET):
            hit = {JEQ: acc == k, JGE: acc >= k, JSET: bool(acc & k)}[op]
            pc += 1 + (jt if hit else jf)
        else:
            raise ValueError(f"seccomp program: unknown instruction {op:#x}")

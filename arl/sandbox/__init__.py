"""Run untrusted, policy-written Python against hidden tests: arl.sandbox.

    with make_sandbox() as sb:                       # bubblewrap, or SandboxUnavailable
        v = sb.run(Job(source, "f", (Case("t1", (2, 3), 5),)))
        v.passed, v.fraction, v.results[0].status    # "pass" "fail" "timeout" "memory" ...

How each promise is kept (measured on Debian 12, bwrap 0.8, Linux 6.x, running as root):

- Verdicts are data, not stdout. Each job runs in a child forked by the worker's zygote;
  the child runs solution.py as module `solution`, calls the function on each case's args
  (fresh from JSON) and sends the RESULT as JSON lines on a unix socket of its own (int,
  float, bool, str, None, list, tuple, dict of those; anything else, e.g. an object whose
  __eq__ is always true, is "fail" with detail "unserializable ..."). The runner keeps only
  the chunks the child itself sent (each carries its sender's pid, SCM_CREDENTIALS: a forked
  grandchild's are dropped, flag "foreign_result") and checks that stream (a forged or
  garbled one makes every case "crash", flag "bad_result_stream"); the host compares each
  result with `expected` (types.judge). The expected values are never sent to the worker,
  so no code in the sandbox can read them. stdout/stderr are only kept (Verdict.output,
  cut at output_bytes, "output_cut"). Every string that comes out of a job (details,
  flags, output) is made valid UTF-8 once, in the host (types.clean_text: a lone
  surrogate as \\uNNNN, a non-UTF-8 byte as \\xNN), and Job() refuses source or files
  that are not UTF-8 (ArlError).
- No job sees another's data. The runner, whose memory holds earlier jobs' requests and
  replies (freed or not), forks no job: after warm-up and before any request it forks a
  zygote, which forks each job's child and hands it only the fds of its own request pipe,
  output pipe and result socket; the child reads its own request and nothing else.
- Syscalls (seccomp.py, bwrap --seccomp): a BPF filter built here for x86_64 or aarch64
  (another audit arch is killed) answers EPERM to SysV shm/msg/sem (they would outlive the
  job in the worker's IPC namespace, in memory no process owns), keyrings, unshare, setns,
  clone with a CLONE_NEW* flag, mounts, ptrace, process_vm_*, bpf, perf_event_open,
  userfaultfd and io_uring_*, and ENOSYS to clone3 (glibc then falls back to clone).
- Isolation (launch.bwrap_argv): new net, PID, IPC, UTS (and cgroup) namespaces,
  --die-with-parent, --new-session, --clearenv; read-only /usr (with the /bin, /lib*
  links) and this Python's prefix, whose parents are empty 0755 directories (so $HOME's
  other files, the repository and the arl package are absent); a 128 MiB tmpfs /tmp with
  the job's scratch dir /tmp/job as cwd; /proc of the new PID namespace (pid 1 is bwrap,
  root: its environ is unreadable). The program is passed as `-c`, never a file there.
  Python runs with -s -S -B and PYTHONHASHSEED=0 in a cleared environment instead of -I,
  because -I ignores PYTHONHASHSEED and a random seed per worker would make set order
  differ between workers.
- Processes: RLIMIT_NPROC is not enforced for root, so as root the worker keeps only
  CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_KILL, CAP_SETGID and CAP_SETUID, and each job's child
  drops to the worker's own unprivileged uid (random in [1e9, 2e9), no user namespace,
  so the uid is real and RLIMIT_NPROC applies to it) before any policy code runs: a fork
  bomb stops at `processes`, cannot signal or ptrace the runner or the zygote, and shares
  no uid with another worker. Without a writable memory cgroup (CI containers) the
  processes of one job together may use processes x memory_mb.
  Without root, bwrap makes a user namespace and the job keeps the runner's uid. That is
  weaker: a job could kill its runner (an infrastructure error), and RLIMIT_NPROC counts
  every process of the user, so a fork bomb can stop a sibling job from forking (run by
  hand as nobody with the system Python; the tests run as root).
- Time: RLIMIT_CPU per process; the wall clock of the whole job is the runner's, and
  then kill(-1, SIGKILL) from a process of the job's uid (every process of the job, not the
  zygote nor the runner; without root, each pid but theirs), repeated until /proc holds
  only bwrap, the runner and the zygote; the host also cuts a worker that does not answer
  within the wall clock plus 5 s.
- Memory: RLIMIT_AS per process (MemoryError is status "memory"; a SIGKILL while the
  kernel's oom_kill count rose is "memory" too), and oom_score_adj 1000 for every process
  of a job, so that in a shortage of memory the kernel kills job processes first. Where
  cgroupfs is writable (cgroup.py), each worker has a memory cgroup, entered before bwrap
  starts, whose limit is set per job to memory_mb + the scratch tmpfs + 128 MB: all of a
  job's processes together, and its tmpfs pages. Sandbox.memory_bound says which holds.
- Files: RLIMIT_FSIZE (Python ignores SIGXFSZ, so a big write raises OSError EFBIG) and
  the 128 MiB scratch tmpfs.
- Warm pool: `workers` runners, each forking one child per job; the runner imports the
  common modules, runs a dummy job in itself and freezes the GC first, so that a fork
  touches few pages (a page fault costs about 10 us on these VMs). Worker start-up
  happens on one long-lived thread, since --die-with-parent follows the starting thread.
- Infrastructure failures (worker died, timed out, answered garbage) replace the worker;
  the job is retried on the fresh one up to `retries` times, then its verdict has
  infra_error and every case "infra_error". A worker whose job left a process it could
  not kill, or more than 5,000 files, is replaced after the verdict (not a retry).
  Sandbox.stats counts jobs, retries, infra_errors, worker_restarts and launches.
- Statuses: a module that fails to import (SyntaxError, an exception, no such function)
  gives "fail" for every case, detail "import failed: <type>: <message>" (SystemExit
  too); one that ends the process while being imported (os._exit) gives "crash"; both
  are flagged "exit_at_import". A child that dies mid-case
  (signal, os._exit) gives "crash" for that case; a timeout gives "timeout". The cases
  after it are not run and get the same status, detail "not run: ...".
- Flags: "exit_at_import", "bad_result_stream", "foreign_result", "output_cut",
  "left_processes" (a process of the job outlived its child), "dropped:NAME" (conftest.py,
  sitecustomize.py, pytest.ini, *.pth and the like, in Job.files or in the scratch dir
  after the job, walked by directory fds so that no path is too long to reach), and
  "dropped:unscanned" (a scratch tree the walk could not finish).
- kind "none" (for --allow-unsandboxed only; never chosen silently, and CodeFix prints a
  warning line and records sandbox: none): the same runner, zygote and rlimits in a plain
  subprocess with its own process group per job; no namespaces, no syscall filter, no uid
  drop, so as root a fork bomb is not contained and a job can read the host.
"""

from arl.sandbox.launch import SandboxUnavailable, sandbox_available
from arl.sandbox.pool import Sandbox, make_sandbox
from arl.sandbox.types import STATUSES, Case, CaseResult, Job, Limits, Verdict

__all__ = [
    "STATUSES",
    "Case",
    "CaseResult",
    "Job",
    "Limits",
    "Sandbox",
    "SandboxUnavailable",
    "Verdict",
    "make_sandbox",
    "sandbox_available",
]

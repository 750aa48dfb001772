"""Run untrusted, policy-written Python against hidden tests: arl.sandbox.

    with make_sandbox() as sb:                       # bubblewrap, or SandboxUnavailable
        v = sb.run(Job(source, "f", (Case("t1", (2, 3), 5),)))
        v.passed, v.fraction, v.results[0].status    # "pass" "fail" "timeout" "memory" ...

How each promise is kept (measured on Debian 12, bwrap 0.8, Linux 6.x, running as root):

- Verdicts are data, not stdout. Each job runs in a child forked by a runner; the child
  runs solution.py as module `solution`, calls the function on each case's args (fresh
  from JSON) and sends the RESULT as JSON lines on a pipe of its own (only int, float,
  bool, str, None, list, tuple, dict of those; anything else, e.g. an object whose
  __eq__ is always true, is "fail" with detail "unserializable ..."). The runner checks
  that stream (a forged or garbled one makes every case "crash", flag
  "bad_result_stream"); the host compares each result with `expected` (types.judge).
  The expected values are never sent to the worker, so no code in the sandbox can read
  them. stdout/stderr are only kept (Verdict.output, cut at output_bytes, "output_cut").
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
  bomb stops at `processes`, cannot signal or ptrace the runner, and shares no uid with
  another worker. The pids and memory cgroups (v1) are writable on this machine but are
  not used, so the same code works where cgroupfs is read-only (CI containers); the
  price: the processes of one job together may use processes x memory_mb.
  Without root, bwrap makes a user namespace and the job keeps the runner's uid. That is
  weaker: a job could kill its runner (an infrastructure error), and RLIMIT_NPROC counts
  every process of the user, so a fork bomb can stop a sibling job from forking (run by
  hand as nobody with the system Python; the tests run as root).
- Time: RLIMIT_CPU per process; the wall clock of the whole job is the runner's, and
  then kill(-1, SIGKILL) inside the PID namespace (every process but bwrap and the
  runner), repeated until /proc is empty; the host also cuts a worker that does not
  answer within the wall clock plus 5 s.
- Memory: RLIMIT_AS per process (MemoryError is status "memory"; a SIGKILL while the
  kernel's oom_kill count rose is "memory" too), and oom_score_adj 1000 for every process
  of a job, so that in a shortage of memory the kernel kills job processes first.
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
- Flags: "exit_at_import", "bad_result_stream", "output_cut", "left_processes" (a
  process of the job outlived its child), "dropped:NAME" (conftest.py, sitecustomize.py,
  pytest.ini, *.pth and the like, in Job.files or in the scratch dir after the job).
- kind "none" (for --allow-unsandboxed only; never chosen silently): the same runner and
  rlimits in a plain subprocess with its own process group per job; no namespaces, no
  uid drop, so as root a fork bomb is not contained and a job can read the host.
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

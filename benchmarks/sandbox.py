"""Benchmark: sandboxed test runs per second, with the warm pool and with a launch per job.

Not a test: it prints figures (and with --json, writes them). The same jobs for both
(by default 200 jobs of 5 cases of a small function, 2 workers): `warm` is
`make_sandbox(workers=2)` (long-lived bubblewrap workers that fork a child per job);
`cold` is `make_sandbox(workers=2, warm=False)` (one fresh bubblewrap sandbox and Python
per job, the baseline). The jobs are split into --reps chunks and the two contenders
alternate chunk by chunk; the ratio is the median of the per-chunk ratios. Also printed:
the latency of one job run alone (median), and the unsandboxed runner ("none", warm) as
a reference for what the sandbox itself costs.

    python benchmarks/sandbox.py                  # about 30 s here
    python benchmarks/sandbox.py --quick --json -
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, median, median_ratio, write_json  # noqa: E402

from arl.sandbox import Case, Job, make_sandbox, sandbox_available  # noqa: E402

SOURCE = '''
def top_k(xs, k):
    """The k largest values, largest first, without duplicates."""
    return sorted(set(xs), reverse=True)[:k]
'''


def jobs(n: int, cases: int = 5) -> list[Job]:
    """n jobs of `cases` cases each (every fifth case fails, so both paths are timed)."""
    out = []
    for j in range(n):
        cs = []
        for c in range(cases):
            xs = [(j * 7 + c * 13 + i * 5) % 23 for i in range(12)]
            want = sorted(set(xs), reverse=True)[:3]
            cs.append(Case(f"t{c}", (xs, 3), want if c % 5 else want[:2]))
        out.append(Job(SOURCE, "top_k", tuple(cs)))
    return out


def machine_line() -> str:
    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    return (
        f"{date.today().isoformat()}  {platform.machine()}  {os.cpu_count()} cores  "
        f"load {os.getloadavg()[0]:.1f}  Python {platform.python_version()}  {bwrap}"
    )


def latency(sandbox, job: Job, n: int) -> float:
    """Median seconds of one job run alone."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        sandbox.run(job)
        times.append(time.perf_counter() - t)
    return median(times)


def measure(n_jobs: int, reps: int, workers: int) -> dict:
    work = jobs(n_jobs)
    chunks = [work[i::reps] for i in range(reps)]
    t = time.perf_counter()
    warm = make_sandbox("auto", workers=workers)
    start_s = time.perf_counter() - t
    cold = make_sandbox("auto", workers=workers, warm=False)
    plain = make_sandbox("none", workers=workers)
    try:
        expect = [v.fraction for v in warm.run_many(work[:10])]  # also warms the threads
        assert [v.fraction for v in cold.run_many(work[:10])] == expect
        assert [v.fraction for v in plain.run_many(work[:10])] == expect
        times = interleaved(
            {
                "warm": lambda r: warm.run_many(chunks[r]),
                "cold": lambda r: cold.run_many(chunks[r]),
                "none": lambda r: plain.run_many(chunks[r]),
            },
            reps,
        )
        lat = {
            name: latency(sb, work[0], 20)
            for name, sb in (("warm", warm), ("cold", cold), ("none", plain))
        }
        stats = {"warm": dict(warm.stats), "cold": dict(cold.stats)}
    finally:
        for sb in (warm, cold, plain):
            sb.close()
    rate = {name: n_jobs / sum(ts) for name, ts in times.items()}
    return {
        "machine": machine_line(),
        "jobs": n_jobs,
        "cases_per_job": 5,
        "workers": workers,
        "reps": reps,
        "jobs_per_s": rate,
        "cases_per_s": {k: 5 * v for k, v in rate.items()},
        "warm_over_cold": median_ratio(times["cold"], times["warm"]),
        "latency_ms": {k: 1000 * v for k, v in lat.items()},
        "pool_start_s": start_s,
        "stats": stats,
    }


def report(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(res["machine"])
    t = Table(title=f"{res['jobs']} jobs x {res['cases_per_job']} cases, {res['workers']} workers")
    for col in ("sandbox", "jobs/s", "cases/s", "one job alone (ms)"):
        t.add_column(col, justify="left" if col == "sandbox" else "right")
    names = {"warm": "bwrap, warm pool", "cold": "bwrap, launch per job", "none": "none, warm"}
    for key, name in names.items():
        t.add_row(
            name,
            f"{res['jobs_per_s'][key]:,.1f}",
            f"{res['cases_per_s'][key]:,.0f}",
            f"{res['latency_ms'][key]:.1f}",
        )
    console.print(t)
    console.print(
        f"warm pool / launch per job: {res['warm_over_cold']:.1f}x "
        f"(median of {res['reps']} chunks); pool start-up {res['pool_start_s'] * 1000:.0f} ms"
    )


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=200, help="jobs per contender")
    p.add_argument("--reps", type=int, default=4, help="chunks the jobs are timed in")
    p.add_argument("--workers", type=int, default=2, help="sandbox workers")
    p.add_argument("--quick", action="store_true", help="40 jobs in 2 chunks")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON ('-': stdout)")
    args = p.parse_args(argv)
    reason = sandbox_available()
    if reason is not None:
        raise SystemExit(f"benchmarks/sandbox.py: {reason}")
    n_jobs, reps = (40, 2) if args.quick else (args.jobs, args.reps)
    res = measure(n_jobs, reps, args.workers)
    report(res)
    write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()

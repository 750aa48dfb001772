"""Wall time of a multi-seed Chapter 15 run on a local two-node Ray cluster against local
processes (issue 32): a head and one more node (one CPU each, loopback, Ray's files in a
fresh temporary folder, stopped at the end, never with `ray stop`), then the runs alternating
`--workers 2` and `--ray ADDRESS`, each into a fresh folder, with the same base cache.

    python benchmarks/ray_cluster.py                  # full settings, --seeds 4, one pair
    python benchmarks/ray_cluster.py --quick --reps 2  # quick settings, two pairs

Prints one line per run: its wall, the load before and after, each seed's time and node.
Warm the base cache first (one run of the same seeds) unless the first run's base
training is what you want to time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def start_cluster(root: str):
    """A head and one more node on this machine, one CPU each, found by no other Ray."""
    # RAY_TMPDIR: no other Ray on the machine finds this cluster. The other variable keeps
    # Ray on loopback in the subprocesses too (the driver of each run): without it they turn
    # 127.0.0.1 into the machine's network address, where nothing listens, and wait forever.
    os.environ.update(RAY_TMPDIR=root, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", ARL_THREADS="1")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    ray_constants.ENABLE_RAY_CLUSTER = False  # private: keeps Ray on 127.0.0.1 (as the tests)
    node = dict(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=80 << 20)
    cluster = Cluster(initialize_head=True, head_node_args=dict(**node, include_dashboard=False))
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    return cluster


def one_run(where: str, seeds: int, quick: bool, out: str) -> str:
    """Run `arl reproduce ch15` once; its line: wall, load, each seed's 'done in' line."""
    cmd = [sys.executable, "-m", "arl", "reproduce", "ch15", "--seeds", str(seeds)]
    cmd += [*(["--quick"] if quick else []), *where.split(), "--out", out]
    load, t = os.getloadavg()[0], time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * 3600)
    wall = time.time() - t
    done = [x.strip() for x in r.stderr.splitlines() if " done in " in x]
    line = f"{where.split()[0]:9s} rc={r.returncode} wall {wall:.0f} s  load1 before {load:.1f}"
    line += f" after {os.getloadavg()[0]:.1f}\n    " + "\n    ".join(done)
    return line + (f"\n{r.stderr[-2000:]}" if r.returncode else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="Chapter 15's quick settings")
    p.add_argument("--reps", type=int, default=1, help="pairs of runs, alternating")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="arl-ray-")
    out = tempfile.mkdtemp(prefix="arl-wall-")
    t = time.time()
    cluster = start_cluster(root)
    print(f"cluster up in {time.time() - t:.0f} s at {cluster.address}", flush=True)
    try:
        for i, where in enumerate(["--workers 2", f"--ray {cluster.address}"] * a.reps):
            print(one_run(where, a.seeds, a.quick, f"{out}/{i}"), flush=True)
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The sweep script behind the issue-8 notes measures what the Chapter 15 table does."""

import json
import os
import subprocess
import sys
from pathlib import Path

from arl.experiments.ch15_table import converged_step

ROOT = Path(__file__).resolve().parents[1]


def test_the_sft_sweep_script_prints_the_tables_convergence_step(tmp_path):
    env = {**os.environ, "ARL_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, str(ROOT / "scripts" / "ch15_sft_sweep.py"), "0", "--quick",
            "--beta2", "0.95", "--lr", "3e-3"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert (row["seed"], row["beta2"], row["lr"]) == (0, 0.95, 3e-3)
    curve = [{"step": 10 * i, "train": p} for i, p in enumerate(row["train"])]  # every 10 steps
    assert len(curve) == 3 and row["converged"] == converged_step(curve)
    assert round(row["train_40"], 3) == row["train"][-1]  # quick: 20 steps, step 40 is past the end

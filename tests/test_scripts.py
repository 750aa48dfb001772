"""The sweep scripts behind the issue-8 notes measure what the Chapter 15 table does."""

import json
import os
import subprocess
import sys
from pathlib import Path

from arl.experiments.ch15_table import converged_step, expert_iteration_holds

ROOT = Path(__file__).resolve().parents[1]


def test_the_sft_sweep_script_prints_the_tables_convergence_step(tmp_path):
    env = {**os.environ, "ARL_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "ch15_sft_sweep.py"),
        "0",
        "--quick",
        "--beta2",
        "0.95",
        "--lr",
        "3e-3",
        "--blind",
        "5",
        "--unskilled",
        "2",
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert (row["seed"], row["beta2"], row["lr"]) == (0, 0.95, 3e-3)
    curve = [{"step": 10 * i, "train": p} for i, p in enumerate(row["train"])]  # every 10 steps
    assert len(curve) == 3 and row["converged"] == converged_step(curve)
    assert round(row["train_40"], 3) == row["train"][-1]  # quick: 20 steps, step 40 is past the end
    # the weak base was trained on the mix asked for (its cached config says so)
    (base,) = [
        json.loads((d / "config.json").read_text())["base_config"]
        for d in tmp_path.glob("weak_base-*")
    ]
    assert (base["weak_blind_per_task"], base["weak_unskilled_per_task"]) == (5, 2)


def test_the_ei_sweep_script_judges_its_curve_by_the_tables_rule(tmp_path):
    env = {**os.environ, "ARL_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "ch15_ei_sweep.py"),
        "1",
        "--quick",
        "--lr",
        "2e-3",
        "--batch",
        "8",
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert (row["seed"], row["lr"], row["batch"], row["steps"]) == (1, 2e-3, 8, 5)  # quick: 5
    assert len(row["train"]) == 3 and len(row["heldout"]) == 2  # the weak base, then 2 rounds
    rounds = [
        {"train": t, "heldout": h, "train_family": {"init": row["init_last"]}}
        for t, h in zip(row["train"][1:], row["heldout"], strict=True)
    ]
    assert row["holds"] == expert_iteration_holds(row["train"][0], rounds, 20)  # quick: 20 episodes

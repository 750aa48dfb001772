"""Problem 27, issue 43's design: timing and the choice of steps, on tuning seeds (>= 100).

Runs the arms of arl/experiments/problems/length.py's `problem_27` (the think variant, its weak
base, probes every THINK_EVERY steps) on one seed for a given number of steps, printing each
arm's wall and CPU time and its probes, and writing the histories to a JSON file.

The rule for the steps, written before the first run: the most steps, in 150-300 (issue 43),
at which one seed (three arms, probes, the weak base's probe) costs at most about 20
CPU-minutes on one core; fewer than 150 only if 150 costs more, and then said so. Whether the
sequence-mean arm's failures still have room to grow at the end (failure p90 below L_max,
truncation share below 0.5) is reported beside it.
Run: ARL_THREADS=1 python docs/sweeps/p27_think_sweep.py SEED STEPS [ARM ...] > LOG
"""

import json
import sys
import time
from dataclasses import replace

from arl.bugfix import think
from arl.experiments.problems import length
from arl.experiments.problems.common import Ctx, set_threads
from arl.train.pg import train_pg

set_threads()
seed, steps = int(sys.argv[1]), int(sys.argv[2])
arms = sys.argv[3:] or list(length.ARMS)
ctx = Ctx(number=27, quick=False, seed=seed)
tasks = think.tasks_for("train")
out = {}
for arm in arms:
    config = replace(length.think_config(ctx, length.ARMS[arm]), steps=steps)
    w0, c0 = time.perf_counter(), time.process_time()
    h = train_pg(
        length.think_start(ctx),
        config,
        tasks,
        hook=length.probe_hook(ctx, config.env, tasks, length.free_stats),
        hook_every=length.THINK_EVERY,
    )
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    probes = [r for r in h if "probe/n" in r]
    print(
        f"{arm}: {steps} steps, {wall:.0f} s wall, {cpu:.0f} s CPU; failure growth "
        f"{length.growth(h, 'fail_'):+.2f} tokens, success growth "
        f"{length.growth(h, 'succ_'):+.2f}; free words in failures "
        f"{length.rate_growth(h, 'fail_free_', 'sum_free'):+.2f}"
    )
    for r in probes:
        print(
            f"  step {r['step']:3d} pass {r['probe/pass_rate']:.2f} fail len "
            f"{r['probe/fail_len']:.1f} (free {r['probe/fail_free']:.1f}, p90 "
            f"{r['probe/fail_len_p90']:.0f}) succ len {r['probe/succ_len'] or 0:.1f} (free "
            f"{r['probe/succ_free'] or 0:.1f}) cut {r['probe/fail_cut_share']:.2f} trunc "
            f"{r['probe/truncated']:.2f}"
        )
    sys.stdout.flush()
    out[arm] = {"wall_s": wall, "cpu_s": cpu, "history": h}
with open(f"/tmp/p27_think_{seed}_{steps}.json", "w") as f:
    json.dump(out, f, default=str)

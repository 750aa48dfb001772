"""Problem 10's one setting chosen by a sweep: the start both arms share (the judged variant's
weak base or its cold start), seed 0, the full 60 steps.
Run: python docs/sweeps/p10_sweep.py KIND"""

import json
import sys
import time

from arl.experiments.problems.common import Ctx, head_mean, set_threads, tail_mean
from arl.experiments.problems.judged import KEYS, arm_runs

kind = sys.argv[1]
set_threads()
t0 = time.time()
runs = arm_runs(Ctx(10, False, 0), kind)
out = {
    arm: {k: (round(head_mean(h, k), 3), round(tail_mean(h, k), 3)) for k in KEYS}
    for arm, h in runs.items()
}
print(kind, f"{time.time() - t0:.0f}s", json.dumps(out, indent=1))

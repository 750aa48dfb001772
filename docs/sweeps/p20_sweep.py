"""Problem 20's one choice, from a small sweep: the learning rate at which entropy falls.

Seed 0, the weak base (entropy ~0.4 nats; the cold start's is already ~0.05), the fp32 sampler
(the choice is about the dynamics, made apart from the bf16 arms and before them), on-policy
(staleness 0), 2 epochs x 2 minibatches, 8 tasks x 8 episodes, 24 steps, lr 3e-4 (PGConfig's)
and 1e-3 (Problem 26's high rate). Criterion, fixed before looking: the lr whose entropy falls
most (first -> last quarter of the steps) while the sampled pass rate does not fall.
Both were stopped early for time (lr 3e-4 after 9 steps, 1e-3 after 11; the machine was
shared ~7 ways) and the rule applied to the steps run: docs/sweeps/p20_sweep.out. lr 3e-4:
entropy 0.41 -> 0.33, pass 0.16 -> 0.19; lr 1e-3: entropy 0.62 -> 0.32, pass 0.16 -> 0.35
(malformed calls 0.11 -> 0.44 per episode, Problem 26's symptom). Chosen: 1e-3.
Run (one process per lr): cd /work/main && ARL_THREADS=1 PYTHONPATH=. python
docs/sweeps/p20_sweep.py LR   (prints one line per step, then the summary line)
"""

import json
import sys
import time

from arl.bugfix.tasks import tasks_for
from arl.experiments.problems.common import Ctx, head_mean, rl_config, start, tail_mean
from arl.train.pg import train_pg

KEYS = ("entropy", "pass_rate", "malformed_per_episode", "mismatch/mean")
lr = float(sys.argv[1])
ctx = Ctx(20, False, 0)
t0 = time.time()
config = rl_config(ctx, steps=24, lr=lr, epochs=2, minibatches=2, staleness=0)


def show(r: dict) -> None:
    print(json.dumps({"step": r["step"], **{k: round(r[k], 4) for k in KEYS}}), flush=True)


h = train_pg(start(ctx, "weak"), config, tasks_for("train"), progress=show)
row = {"lr": lr, "seconds": round(time.time() - t0)}
row |= {k: [round(head_mean(h, k), 4), round(tail_mean(h, k), 4)] for k in KEYS}
print(json.dumps(row), flush=True)

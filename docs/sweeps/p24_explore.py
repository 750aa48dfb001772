"""Problem 24 exploration: pass@k curves of the weak base, cold start, and 60-step RL arms."""

import sys
import time

import numpy as np

from arl.bugfix.tasks import tasks_for
from arl.eval.metrics import run_policy
from arl.eval.stats import pass_at_k
from arl.experiments.problems.common import Ctx, rl_config, set_threads, start
from arl.train.pg import train_pg

set_threads()
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
ctx = Ctx(24, False, seed)
H = tasks_for("heldout")
N = 128


def curve(model, tag):
    t0 = time.perf_counter()
    tr = run_policy(model, H, N, seed=1000 + seed)
    c = [sum(t.outcome.hidden_pass for t in tr[i * N : (i + 1) * N]) for i in range(len(H))]
    ks = [1, 2, 4, 8, 16, 32, 64, 128]
    cur = [np.mean([pass_at_k(N, ci, k) for ci in c]) for k in ks]
    print(f"{tag}: {time.perf_counter() - t0:.1f}s c={c} fam={[h.family for h in H]}", flush=True)
    print("   " + " ".join(f"{k}:{v:.3f}" for k, v in zip(ks, cur, strict=True)), flush=True)


for kind in ("weak", "cold"):
    curve(start(ctx, kind), kind)
arms = {"default 0.2/0.28 lr3e-4": {}, "sym 0.2/0.2": {"clip_high": 0.2}, "lr1e-4": {"lr": 1e-4}}
for name, ov in arms.items():
    t0 = time.perf_counter()
    m = start(ctx, "weak")
    train_pg(m, rl_config(ctx, steps=60, **ov), tasks_for("train"))
    print(f"train {name}: {time.perf_counter() - t0:.0f}s", flush=True)
    curve(m, "weak+RL " + name)

"""RL-step benchmark: episodes sampled and trained per second, and where a step's time goes.

    python benchmarks/rl_step.py [--steps 10] [--threads 2] [--init cold] [--set key=value ...]

Runs `train_pg` for a few steps and splits each step into sampling (the batched
decode, minus environment time), environment (BugFixEnv.step: parsing, edits,
running tests) and training (collate, log-probs, backward, optimizer). Prints
figures; not a test.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from arl.bugfix import env as env_module
from arl.cli.train import load_init, parse_overrides
from arl.train.pg import train_pg
from arl.train.pg_config import make_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1, help="steps left out of the figures")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--init", default="cold")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    values = parse_overrides(args.set, {"steps": args.steps + args.warmup})
    config = make_config(values)
    model = load_init(args.init, config.seed)

    env_time = [0.0]
    step_fn = env_module.BugFixEnv.step

    def timed_step(self, words):
        t0 = time.perf_counter()
        try:
            return step_fn(self, words)
        finally:
            env_time[0] += time.perf_counter() - t0

    env_module.BugFixEnv.step = timed_step  # the benchmark's own instrument, not the library's
    env_per_step: list[float] = []

    def hook(step, m):
        env_per_step.append(env_time[0])
        env_time[0] = 0.0

    hist = train_pg(model, config, hook=hook, hook_every=1)
    env_module.BugFixEnv.step = step_fn
    steps = [r for r in hist if "reward" in r][args.warmup :]
    env_s = np.array(env_per_step[1 + args.warmup :])  # hook also ran at step 0
    sample = np.array([r["time/sample"] for r in steps]) - env_s
    train = np.array([r["time/train"] for r in steps])
    total = sample + env_s + train
    sampled = np.array([r["episodes_sampled"] for r in steps])
    trained = config.episodes_per_step  # episodes trained per step
    print(
        f"RL step benchmark: {model.num_params():,} parameters, {args.threads} threads, "
        f"{config.tasks_per_step} tasks x G={config.group_size}, {config.epochs} epoch(s) x "
        f"{config.minibatches} minibatch(es), {len(steps)} measured steps"
    )
    print(f"  step time            {total.mean():.3f} s (median {np.median(total):.3f})")
    print(f"  episodes sampled/s   {sampled.sum() / (sample + env_s).sum():.1f}")
    print(f"  episodes trained/s   {trained * len(steps) / train.sum():.1f}")
    print(f"  episodes/s overall   {trained * len(steps) / total.sum():.1f} (end to end)")
    for name, part in (("sampling", sample), ("environment", env_s), ("training", train)):
        print(f"  share {name:<12} {part.sum() / total.sum():6.1%}  ({part.mean():.3f} s/step)")


if __name__ == "__main__":
    main()

"""Benchmark: TinyAgent's training and decoding GFLOP/s, as shares of the 1-thread matmul ceiling.

Not a test: it prints figures (and with --json, writes them). Three measurements, interleaved
repetition by repetition in one process, each the median over repetitions:

- ceiling: one fp32 matmul of two 1024 x 1024 matrices (2 * 1024^3 FLOPs), the most this
  core does per second through the same BLAS;
- training: a forward and backward step of TinyAgent (default shape) on a batch of 32
  sequences of 64 tokens (a DPO or RL update's size), no optimizer step;
- decode: every `extend` call of `rollout_batch` at batch 64 on the training tasks (the
  cold-start checkpoint by default: it reads, edits, tests and submits), timed call by call.

FLOPs are counted from the shapes, not measured: a matmul of an (m, k) by a (k, n) matrix is
2mkn. Weights W = n_layer * 12 * C^2 (every Linear of the blocks) plus lm_head C * V. A
token that attends to t keys costs 4 * t * C per layer (q k^T and the weighted sum of v).
- training: 6 * W * tokens (forward 2, backward 4) + 3 * attention forward, attention over
  the causal prefix only (t = position + 1), lm_head on every position;
- decode: 2 * n_layer * 12 * C^2 per appended token, 2 * C * V per row's logits (one per
  row that appends), attention over each token's own prefix (t = its position + 1).
Padding, masked slots and recomputation are not counted: they are waste, not work.

Time is CPU time of this process (one thread: its work, not the neighbours' time slices on a
shared machine); --clock wall measures wall time instead.

    python benchmarks/kernels.py            # about a minute
    python benchmarks/kernels.py --quick    # untrained policy, 2 repetitions
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, median, setup_threads, write_json  # noqa: E402

from arl.bugfix import default_vocab  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.model import TinyAgent, TinyAgentConfig  # noqa: E402
from arl.rollout import rollout_batch  # noqa: E402

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def block_weights(cfg: TinyAgentConfig) -> int:
    """Multiply-accumulate weights a token meets in the blocks: 12 C^2 per layer."""
    return cfg.n_layer * 12 * cfg.n_embd**2


def ceiling(clock, n: int = 1024) -> tuple[float, float]:
    """(seconds, FLOPs) of one n x n fp32 matmul."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = clock()
    a @ b
    return clock() - t, 2.0 * n**3


def training_step(model: TinyAgent, ids: torch.Tensor, clock) -> tuple[float, float]:
    """(seconds, FLOPs) of one forward and backward on (B, T) ids."""
    cfg, (B, T) = model.config, ids.shape
    model.train()
    model.zero_grad(set_to_none=True)
    t = clock()
    _, loss = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    secs = clock() - t
    T1 = T - 1
    tokens = B * T1
    matmul = 2 * (block_weights(cfg) + cfg.n_embd * cfg.vocab_size) * tokens
    attn = 4 * cfg.n_embd * cfg.n_layer * B * T1 * (T1 + 1) // 2  # causal prefix
    return secs, 3.0 * (matmul + attn)


def decode(model: TinyAgent, tasks, seed: int, clock) -> tuple[float, float, float, int]:
    """(seconds in extend, FLOPs, seconds of the whole rollout, tokens appended) of one
    rollout_batch over `tasks`."""
    cfg, spent, flops, tokens = model.config, [0.0], [0.0], [0]
    C, L = cfg.n_embd, cfg.n_layer

    def timed(ids, n_new, cache, extend=model.extend):
        before = cache.lengths.clone()
        t = clock()
        out = extend(ids, n_new, cache)
        spent[0] += clock() - t
        n = int(n_new.sum())
        # a token at position p attends p + 1 keys: sum over a row's new tokens
        keys = int((n_new * before + n_new * (n_new + 1) // 2).sum())
        flops[0] += 2 * block_weights(cfg) * n + 2 * C * cfg.vocab_size * int((n_new > 0).sum())
        flops[0] += 4 * C * L * keys
        tokens[0] += n
        return out

    model.extend = timed
    try:
        t = clock()
        rollout_batch(model, tasks, seed=seed)
        total = clock() - t
    finally:
        del model.extend
    return spent[0], flops[0], total, tokens[0]


def policy(name: str) -> TinyAgent:
    if name == "cold-start":
        from arl.train.bases import cold_start

        return cold_start().eval()
    torch.manual_seed(0)
    return TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab()))).eval()


def measure(name: str, reps: int, batch: int, clock) -> dict:
    """Ceiling, training and decode, interleaved repetition by repetition."""
    model = policy(name)
    cfg = model.config
    tasks_all = tasks_for("train")
    tasks = [tasks_all[i % len(tasks_all)] for i in range(batch)]
    ids = torch.randint(0, cfg.vocab_size, (32, 65), generator=torch.Generator().manual_seed(0))
    ceiling(clock), training_step(model, ids, clock), decode(model.eval(), tasks, 0, clock)
    rows: dict[str, list] = {"ceiling": [], "training": [], "decode": [], "rollout": []}
    for r in range(reps):
        rows["ceiling"].append(ceiling(clock))
        rows["training"].append(training_step(model, ids, clock))
        model.eval()
        s, f, total, n = decode(model, tasks, r, clock)
        rows["decode"].append((s, f))
        rows["rollout"].append((total, n))
    gflops = {
        k: median([f / s / 1e9 for s, f in rows[k]]) for k in ("ceiling", "training", "decode")
    }
    return {
        "policy": name,
        "batch": batch,
        "params": model.num_params(),
        "gflops": gflops,
        "share_of_ceiling": {k: gflops[k] / gflops["ceiling"] for k in ("training", "decode")},
        "decode_share_of_rollout": median(
            [s / t for (s, _), (t, _) in zip(rows["decode"], rows["rollout"], strict=True)]
        ),
        "tokens_appended": rows["rollout"][-1][1],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    p.add_argument("--batch", type=int, default=64, help="rollout batch for decode")
    p.add_argument("--policy", choices=("cold-start", "untrained"), default="cold-start")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="cpu", help="CPU or wall time")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--quick", action="store_true", help="untrained policy, 2 repetitions")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON ('-': stdout)")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.policy = 2, "untrained"
    setup_threads(args.threads)
    res = measure(args.policy, args.reps, args.batch, CLOCKS[args.clock])
    res.update(machine=machine_line(), clock=args.clock, reps=args.reps)
    g, sh = res["gflops"], res["share_of_ceiling"]
    print(res["machine"])
    print(
        f"{args.clock} time, median of {args.reps} interleaved repetitions, {res['policy']} policy"
    )
    print("| kernel | GFLOP/s | share of the 1-thread matmul ceiling |")
    print("|---|---:|---:|")
    print(f"| fp32 matmul 1024^3 (ceiling) | {g['ceiling']:.1f} | 100% |")
    print(
        f"| training: forward+backward, 32 x 64 tokens | {g['training']:.1f} | "
        f"{sh['training']:.0%} |"
    )
    print(
        f"| decode: rollout_batch extend calls, batch {args.batch} | {g['decode']:.1f} | "
        f"{sh['decode']:.0%} |"
    )
    print(
        f"decode: {res['tokens_appended']} tokens appended per rollout; extend is "
        f"{res['decode_share_of_rollout']:.0%} of the rollout's time (the rest: sampling, env)"
    )
    write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()

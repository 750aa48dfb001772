"""Benchmark: batched multi-turn rollouts (KV cache vs recompute) and sampling vs HF generate.

Not a test: it prints figures (and with --json, writes them). Two parts, each timed
within one process, the contenders interleaved repetition by repetition:

1. `rollout_batch` on the training tasks (cycled to the batch size) at batch 1, 16
   and 64: whole episodes per second, generated (policy) tokens per second, and the
   speedup of KV-cache decoding (`use_cache=True`) over recomputing every row's whole
   prefix at each step (`use_cache=False`). Both modes sample the same ids for the
   same seed, so each pair does identical work. Two policies of the default shape
   (4 layers, width 128, 4 heads):
   - `untrained`: seeded random weights; every episode is 6 calls of 4 garbage tokens.
   - `cold-start`: the oracle-SFT checkpoint RL starts from (arl.train.bases,
     cached under ~/.cache/arl or $ARL_CACHE; built once, a few minutes, if missing), whose
     episodes read, edit, test and submit like real ones.
   Targets (two cores): at batch 64 the cache is >= 3x recompute and >= 200 episodes/s.

2. Single-turn sampling: our cached loop (`TinyAgent.extend` + `arl.sampling.sample`)
   against Hugging Face `generate` on a GPT2LMHeadModel of the same shape and
   vocabulary (random weights, config built here, nothing downloaded): the same
   prompt length and number of new tokens, batch 1 and 64, do_sample with top_k=0
   and temperature 1, use_cache=True, fp32. Target: ours >= 2.5x HF at batch 64.
   Needs the `bench` extra (transformers); skipped with a note if it is missing.

Threads: --threads 1 by default. On a shared two-core machine with other work
running, two OpenMP threads that spin-wait at every barrier turn each small
operator into a scheduler time slice (a 512-element GELU took 12 ms instead of
8 us here), which swamps everything measured. On an idle machine pass --threads 2.

    python benchmarks/rollout.py                    # both parts, about 1-2 minutes
    python benchmarks/rollout.py --quick --json -   # a fast smoke run, JSON on stdout
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    gpt2_like,
    interleaved,
    machine_line,
    median,
    median_ratio,
    setup_threads,
    write_json,
)

from arl.bugfix import default_vocab  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.model import TinyAgent, TinyAgentConfig  # noqa: E402
from arl.rollout import rollout_batch  # noqa: E402
from arl.sampling import sample  # noqa: E402


def untrained_policy(seed: int = 0) -> TinyAgent:
    torch.manual_seed(seed)
    return TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab()))).eval()


def cold_start_policy() -> TinyAgent:
    from arl.train.bases import cold_start

    return cold_start().eval()


# --- part 1: rollouts -----------------------------------------------------------------------


def bench_rollouts(model: TinyAgent, batches: list[int], reps: int) -> list[dict]:
    tasks = tasks_for("train")
    rows = []
    for B in batches:
        batch_tasks = [tasks[i % len(tasks)] for i in range(B)]
        rollout_batch(model, batch_tasks, seed=0)  # warm-up: first-call allocations
        out: dict[str, list] = {}

        def run(use_cache: bool, out=out, batch_tasks=batch_tasks):
            def f(r: int) -> None:
                out[use_cache] = rollout_batch(model, batch_tasks, seed=r, use_cache=use_cache)

            return f

        times = interleaved({"cached": run(True), "recompute": run(False)}, reps)
        trajs = out[True]
        assert [t.ids_T for t in trajs] == [t.ids_T for t in out[False]], "modes disagree"
        gen = sum(t.n_action_tokens for t in trajs)  # of the last repetition
        t_c, t_r = median(times["cached"]), median(times["recompute"])
        rows.append(
            {
                "batch": B,
                "cached_s": t_c,
                "recompute_s": t_r,
                "episodes_per_s": B / t_c,
                "gen_tokens_per_s": gen / t_c,
                "recompute_episodes_per_s": B / t_r,
                "speedup": median_ratio(times["recompute"], times["cached"]),
                "mean_len": sum(len(t) for t in trajs) / B,
                "mean_gen": gen / B,
            }
        )
    return rows


# --- part 2: single-turn sampling vs Hugging Face generate -----------------------------------


@torch.inference_mode()
def our_generate(model: TinyAgent, prompt: torch.Tensor, n_new: int, gen: torch.Generator):
    """Prefill the prompt, then sample n_new tokens one at a time from the KV cache."""
    B, P = prompt.shape
    cache = model.new_cache(B)
    logits = model.extend(prompt, torch.full((B,), P), cache)  # (B, V)
    one = torch.ones(B, dtype=torch.long)
    out = []
    for i in range(n_new):
        tok, _ = sample(logits, 1.0, 1.0, gen)  # (B,)
        out.append(tok)
        if i + 1 < n_new:
            logits = model.extend(tok[:, None], one, cache)
    return torch.stack(out, 1)  # (B, n_new)


def hf_model(vocab_size: int, n_positions: int):
    from transformers.utils import logging

    logging.set_verbosity_error()  # no advice about attention masks on every call
    return gpt2_like(vocab_size, n_positions, eos_token_id=None, pad_token_id=0).eval()


def bench_vs_hf(batches: list[int], prompt_len: int, n_new: int, reps: int) -> list[dict]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed (pip install -e '.[bench]'): skipping HF generate")
        return []
    V = len(default_vocab())
    ours, hf = untrained_policy(), hf_model(V, 512)
    rows = []
    for B in batches:
        prompt = torch.randint(0, V, (B, prompt_len), generator=torch.Generator().manual_seed(B))
        mask = torch.ones_like(prompt)
        gen = torch.Generator().manual_seed(0)

        def run_ours(r: int, prompt=prompt, gen=gen) -> None:
            out = our_generate(ours, prompt, n_new, gen)
            assert out.shape == (prompt.size(0), n_new)

        def run_hf(r: int, prompt=prompt, mask=mask) -> None:
            with torch.inference_mode():
                out = hf.generate(
                    prompt,
                    attention_mask=mask,
                    do_sample=True,
                    top_k=0,
                    top_p=1.0,
                    temperature=1.0,
                    max_new_tokens=n_new,
                    min_new_tokens=n_new,
                    use_cache=True,
                    pad_token_id=0,
                )
            assert out.shape == (prompt.size(0), prompt_len + n_new)

        run_ours(0), run_hf(0)  # warm-up
        times = interleaved({"ours": run_ours, "hf": run_hf}, reps)
        t_o, t_h = median(times["ours"]), median(times["hf"])
        rows.append(
            {
                "batch": B,
                "ours_s": t_o,
                "hf_s": t_h,
                "ours_tokens_per_s": B * n_new / t_o,
                "hf_tokens_per_s": B * n_new / t_h,
                "speedup": median_ratio(times["hf"], times["ours"]),
            }
        )
    return rows


# --- report -----------------------------------------------------------------------------------


def print_tables(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]machine[/]: {results['machine']}")
    for policy, rows in results["rollouts"].items():
        t = Table(title=f"rollout_batch, {policy} policy (median of {results['reps']} reps)")
        for col in (
            "batch",
            "mean len / gen",
            "episodes/s",
            "gen tokens/s",
            "recompute eps/s",
            "cache speedup",
        ):
            t.add_column(col, justify="right")
        for r in rows:
            t.add_row(
                str(r["batch"]),
                f"{r['mean_len']:.0f} / {r['mean_gen']:.1f}",
                f"{r['episodes_per_s']:,.1f}",
                f"{r['gen_tokens_per_s']:,.0f}",
                f"{r['recompute_episodes_per_s']:,.1f}",
                f"{r['speedup']:.2f}x",
            )
        console.print(t)
    if results["vs_hf"]:
        s = results["sampling"]
        t = Table(
            title=f"single-turn sampling: prompt {s['prompt_len']}, {s['n_new']} new tokens, "
            f"median of {results['reps']} reps"
        )
        for col in ("batch", "ours tokens/s", "HF generate tokens/s", "ours / HF"):
            t.add_column(col, justify="right")
        for r in results["vs_hf"]:
            t.add_row(
                str(r["batch"]),
                f"{r['ours_tokens_per_s']:,.0f}",
                f"{r['hf_tokens_per_s']:,.0f}",
                f"{r['speedup']:.2f}x",
            )
        console.print(t)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="1,16,64", help="comma-separated batch sizes")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per measurement")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument(
        "--policy", choices=("untrained", "cold-start", "both"), default="both", help="rollouts of"
    )
    p.add_argument("--prompt-len", type=int, default=16, help="HF comparison: prompt tokens")
    p.add_argument("--new-tokens", type=int, default=48, help="HF comparison: sampled tokens")
    p.add_argument("--no-hf", action="store_true", help="skip the HF generate comparison")
    p.add_argument("--quick", action="store_true", help="batches 1,16; 2 reps; untrained only")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON ('-': stdout)")
    args = p.parse_args(argv)
    if args.quick:
        args.batches, args.reps, args.policy = "1,16", 2, "untrained"
    setup_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    policies = ["untrained", "cold-start"] if args.policy == "both" else [args.policy]
    results: dict = {"machine": machine_line(), "reps": args.reps, "rollouts": {}}
    for name in policies:
        model = untrained_policy() if name == "untrained" else cold_start_policy()
        results["rollouts"][name] = bench_rollouts(model, batches, args.reps)
    hf_batches = [b for b in (1, 64) if b in batches] or batches[:1]
    results["sampling"] = {"prompt_len": args.prompt_len, "n_new": args.new_tokens}
    results["vs_hf"] = (
        [] if args.no_hf else bench_vs_hf(hf_batches, args.prompt_len, args.new_tokens, args.reps)
    )
    print_tables(results)
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()

"""Benchmark: whole multi-turn BugFix episodes, our rollouts against the loops a user would
write with Hugging Face `generate`.

Not a test: it prints figures (and with --json, writes them). Every contender plays the same
episodes (same tasks, same environment, same rendering of prompts and observations, sampling
at temperature 1 with no top-k, the same call budget), with the same weights, timed in one
process, interleaved repetition by repetition:

- `ours`: `arl.rollout.rollout_batch` (one batched decode loop over all rows; each row's
  observation is appended to its KV cache as it arrives, rows at different turns together);
- `hf re-prefill`: per turn, one `generate` call on the whole conversation so far (left
  padded), which prefills everything again every turn;
- `hf cache`: per turn, one `generate` call that reuses the previous turn's
  `past_key_values`, feeding only the new tokens (each row's new observation, left-padded to
  the longest, masked; positions from the mask, as `generate` computes them).

Two policies: TinyAgent (untrained, or the cold-start checkpoint with real reads) against
its own export as a `transformers` GPT-2 (`arl.export`, the same logits); and the tiny
random Qwen2 of `arl.hf.tiny` through `arl.hf.HFPolicy` against the same model in the HF
loops. Ragged lengths are the gym's own: listings of 20-40 words, short tool answers.
Every loop ends an episode at the same point (the env's end, or a full context). Times are
this process's CPU time by default (one thread: its own work, robust to a loaded machine);
--clock wall for wall time. Both policies, both HF loops, batch 1 and 64: one run, one table.

    python benchmarks/multiturn.py                 # batch 1 and 64, a few minutes
    python benchmarks/multiturn.py --quick         # smoke run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine_line, median, median_ratio, setup_threads, write_json  # noqa: E402,I001

from arl.bugfix.env import BugFixEnv, BugFixConfig  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.rollout import renderer_of, episode_seed  # noqa: E402,F401
from arl.rollout import rollout_batch  # noqa: E402


@torch.inference_mode()
def hf_loop(lm, renderer, tasks, seed: int, reuse_cache: bool, pad_id: int, block: int):
    """Play one episode per task with one `generate` call per turn; returns tokens per episode.
    An episode ends where ours does: at the env's end, or when the next observation and one
    more call would not fit in `block` tokens."""
    config = BugFixConfig()
    limit = renderer.call_limit(config)
    room = block - limit
    torch.manual_seed(seed)
    envs, trs = [], []
    for k, t in enumerate(tasks):
        env = BugFixEnv(t, config)
        prompt, _ = env.reset(seed=episode_seed(seed, k))
        envs.append(env)
        trs.append(renderer.begin(prompt))
    live = list(range(len(tasks)))
    new = [list(tr.ids) for tr in trs]  # tokens not yet in the cache
    past, mask, prev_ids = None, None, None  # the cache, its (B_live, T) mask and ids
    while live:
        if reuse_cache and past is not None:
            S = max(len(new[b]) for b in live)
            ids = torch.tensor([[pad_id] * (S - len(new[b])) + new[b] for b in live])
            step_mask = torch.tensor([[0] * (S - len(new[b])) + [1] * len(new[b]) for b in live])
            inp = torch.cat([prev_ids, ids], 1)
            attn = torch.cat([mask, step_mask], 1)
        else:
            L = max(len(trs[b]) for b in live)
            inp = torch.tensor([[pad_id] * (L - len(trs[b])) + trs[b].ids for b in live])
            attn = torch.tensor([[0] * (L - len(trs[b])) + [1] * len(trs[b]) for b in live])
        out = lm.generate(
            input_ids=inp,
            attention_mask=attn,
            past_key_values=past if reuse_cache else None,
            max_new_tokens=limit,
            do_sample=True,
            top_k=0,
            temperature=1.0,
            eos_token_id=renderer.end_id,
            pad_token_id=pad_id,
            use_cache=True,
            return_dict_in_generate=True,
        )
        gen = out.sequences[:, inp.shape[1] :]  # (B_live, <= limit)
        keep, gen_mask = [], torch.zeros_like(gen)
        for row, b in enumerate(live):
            call = gen[row].tolist()
            if renderer.end_id in call:
                call = call[: call.index(renderer.end_id) + 1]
            gen_mask[row, : len(call)] = 1
            start = len(trs[b])
            for token in call:
                trs[b].act(token)
            obs, _, term, trunc, _ = envs[b].step(trs[b].end_call(len(call)))
            if term or trunc:
                continue
            if trs[b].observe(obs, limit=room) is None:  # the context is full, as in ours
                continue
            new[b] = trs[b].ids[start + len(call) :]
            keep.append(row)
        if reuse_cache and keep:  # the finished rows leave the cache
            past = out.past_key_values
            past.batch_select_indices(torch.tensor(keep))
            prev_ids = torch.cat([inp, gen], 1)[keep]
            mask = torch.cat([attn, gen_mask], 1)[keep]
        live = [live[r] for r in keep]
    return [len(tr) for tr in trs]


def bench(name, policy, lm, tasks_all, batches, reps, pad_id, clock) -> list[dict]:
    renderer = renderer_of(policy)
    block = policy.config.block_size
    rows = []
    for B in batches:
        tasks = [tasks_all[i % len(tasks_all)] for i in range(B)]
        lens: dict[str, list[int]] = {}

        def ours(r, tasks=tasks, lens=lens):
            lens["ours"] = [len(t) for t in rollout_batch(policy, tasks, seed=r)]

        def hf(reuse, tasks=tasks, lens=lens):
            def run(r):
                lens[reuse] = hf_loop(lm, renderer, tasks, r, reuse, pad_id, block)

            return run

        fns = {"ours": ours, "hf re-prefill": hf(False), "hf cache": hf(True)}
        for warm in fns.values():
            warm(0)
        times = interleaved(fns, reps, clock)
        rows.append(
            {
                "policy": name,
                "batch": B,
                "ours_eps_per_s": B / median(times["ours"]),
                "hf_reprefill_eps_per_s": B / median(times["hf re-prefill"]),
                "hf_cache_eps_per_s": B / median(times["hf cache"]),
                "vs_reprefill": median_ratio(times["hf re-prefill"], times["ours"]),
                "vs_cache": median_ratio(times["hf cache"], times["ours"]),
                "mean_tokens": sum(lens["ours"]) / B,
                "mean_tokens_hf": sum(lens[True]) / B,
            }
        )
    return rows


def tinyagent_pair(which: str):
    from transformers import AutoModelForCausalLM

    from arl.bugfix import default_vocab
    from arl.export import export_hf
    from arl.model import TinyAgent, TinyAgentConfig

    if which == "cold-start":
        from arl.train.bases import cold_start

        model = cold_start().eval()
    else:
        torch.manual_seed(0)
        model = TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab()))).eval()
    out = Path(tempfile.mkdtemp()) / "gpt2"
    export_hf(model, out)
    return model, AutoModelForCausalLM.from_pretrained(out).eval(), 0


def qwen_pair():
    from arl.hf.policy import load_hf
    from arl.hf.tiny import build_tiny

    path = build_tiny(Path(tempfile.mkdtemp()) / "qwen2")
    policy = load_hf(str(path))
    policy.eval()
    return policy, policy.model, policy.renderer.tokenizer.pad_token_id


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--policy", choices=["untrained", "cold-start"], default="untrained")
    ap.add_argument("--json", default=None)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="CPU or wall time")
    args = ap.parse_args(argv)
    setup_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    batches, reps = ([1, 8], 1) if args.quick else ([1, 64], 3)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    tasks = tasks_for("train")
    rows = []
    for name, (policy, lm, pad) in [
        (f"TinyAgent {args.policy}", tinyagent_pair(args.policy)),
        ("tiny Qwen2 (HFPolicy)", qwen_pair()),
    ]:
        rows += bench(name, policy, lm, tasks, batches, reps, pad, clock)
    print(machine_line())
    print(f"{args.clock} time, median of {reps} interleaved repetitions")
    print(
        "| policy | batch | ours eps/s | HF re-prefill eps/s | HF cache eps/s | "
        "ours / re-prefill | ours / cache | tokens per episode |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [
            r["policy"],
            r["batch"],
            f"{r['ours_eps_per_s']:.1f}",
            f"{r['hf_reprefill_eps_per_s']:.1f}",
            f"{r['hf_cache_eps_per_s']:.1f}",
            f"{r['vs_reprefill']:.2f}x",
            f"{r['vs_cache']:.2f}x",
            f"{r['mean_tokens']:.0f}",
        ]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    write_json(args.json, {"rows": rows})


if __name__ == "__main__":
    main()

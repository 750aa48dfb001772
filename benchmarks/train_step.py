"""Benchmark: our SFT and DPO steps against TRL's SFTTrainer and DPOTrainer, tokens per second.

Not a test: it prints figures (and with --json, writes them). Same model shape for
everyone (4 layers, width 128, 4 heads, our 111-word vocabulary, random weights,
fp32), same batch, same data:

- SFT: the 20 oracle demonstrations (`oracle_demos()`), batch 20. Ours is
  `arl.train.sft.sft_train` with its defaults (collate, forward, masked token-mean
  NLL of the policy tokens, backward, grad-norm clip 1.0, AdamW), timed per step by
  its hook. TRL gets the same episodes pre-tokenized (`input_ids`, and `labels` set
  to -100 on every non-policy token, so the loss covers exactly our tokens).
- DPO: 20 pairs on the same task: chosen = the oracle demonstration, rejected = a
  weak-play (blind) episode. Ours is `arl.train.dpo.dpo_train` (one forward of the 40
  episodes, `episode_logp` over action tokens, `dpo_loss` with beta 0.1, backward,
  clip 1.0, AdamW), whose reference log-probs are computed once before the steps
  (the pairs are fixed), as TRL's `precompute_ref_log_probs=True`. Beside it,
  `ours (ref each step)`: the same step recomputing them under no_grad every step,
  as TRL does by default.

TRL's GPT2LMHeadModel has our shape, but its own blocks (tanh GELU, Conv1D), and
needs a tokenizer: a word-level `tokenizers` model over our vocabulary, built here,
so text and ids map one to one. Mismatches, kept as TRL's API forces them:
- DPOTrainer takes text only (prompt/chosen/rejected), so episodes are rendered as
  words and re-tokenized by that tokenizer (identical ids). Its loss covers every
  completion token, observations included; ours covers action tokens only. The
  compute (forward and backward over whole sequences) is the same.
- TRL appends EOS (`<end>`) to completions that lack it: weak-play episodes cut off
  after an observation get one extra token.
- TRL steps include its dataloader and callbacks: that is what a user pays.

TRL configurations: `defaults` (SFTConfig/DPOConfig as shipped, only the step count,
batch, learning rate and output dir set: bf16 autocast and gradient checkpointing
on, which on CPU is the slow path) and `best` (fp32, no gradient checkpointing, no
pinned memory, no logging or saving inside the timed steps; for DPO also
`precompute_ref_log_probs=True`). Needs the `bench` extra (transformers, trl,
datasets).

Each step time is the median over the timed steps (after 2 warm-up steps); the
contenders run one after another, for --rounds rounds, and the ratio is the median
over rounds (a noisy neighbour slows a whole round). Threads: --threads 1 by
default (see benchmarks/rollout.py).

    python benchmarks/train_step.py              # about 1-2 minutes
    python benchmarks/train_step.py --quick      # fewer steps, SFT and DPO best only
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gpt2_like, machine_line, setup_threads, write_json  # noqa: E402

from arl.batch import collate  # noqa: E402
from arl.bugfix import default_vocab  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.losses import dpo_loss, episode_logp, token_logprobs  # noqa: E402
from arl.model import TinyAgent, TinyAgentConfig  # noqa: E402
from arl.rollout import scripted_rollout  # noqa: E402
from arl.text import END, PAD, UNK  # noqa: E402
from arl.train.bases import oracle_demos  # noqa: E402
from arl.train.common import make_optimizer  # noqa: E402
from arl.train.dpo import DPOConfig, dpo_train  # noqa: E402
from arl.train.sft import SFTConfig, sft_train  # noqa: E402
from arl.types import POLICY, PROMPT, Trajectory  # noqa: E402

WARMUP = 2
LR = 1e-3


def tokens_in(trajs: list[Trajectory]) -> int:
    """Tokens a step processes: the episodes' lengths (padding not counted)."""
    return sum(len(t) for t in trajs)


def step_stats(stamps: list[float]) -> float:
    """Median seconds per step from the time stamps taken at each step's end."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)][WARMUP - 1 :]
    return statistics.median(gaps)


def our_model() -> TinyAgent:
    torch.manual_seed(0)
    return TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab())))


def dpo_pairs() -> tuple[list[Trajectory], list[Trajectory]]:
    chosen = oracle_demos()
    rejected = [scripted_rollout("blind", t, seed=0) for t in tasks_for("train")]
    return chosen, rejected


# --- ours -------------------------------------------------------------------------------------


def ours_sft(data: list[Trajectory], steps: int) -> float:
    stamps: list[float] = []

    def hook(step: int, model) -> None:
        stamps.append(time.perf_counter())

    config = SFTConfig(steps=steps, batch_size=len(data), lr=LR)
    sft_train(our_model(), data, config, hook=hook, hook_every=1)
    return step_stats(stamps)


def ours_dpo(pairs: list[tuple[Trajectory, Trajectory]], steps: int) -> float:
    """Seconds per step of `arl.train.dpo.dpo_train`: reference log-probs computed once."""
    stamps: list[float] = []

    def hook(step: int, model) -> None:
        stamps.append(time.perf_counter())

    dpo_train(our_model(), our_model(), pairs, DPOConfig(steps=steps, lr=LR), hook, hook_every=1)
    return step_stats(stamps)


def ours_dpo_ref_each_step(chosen, rejected, steps: int) -> float:
    """The same step with the reference's log-probs recomputed under no_grad every step."""
    model, reference = our_model(), our_model().eval()
    opt = make_optimizer(model, LR)
    B = len(chosen)
    stamps = [time.perf_counter()]
    model.train()
    for _ in range(steps):
        batch = collate(chosen + rejected)  # (2B, T): chosen rows, then rejected rows
        with torch.no_grad():
            ref = episode_logp(token_logprobs(reference, batch), batch.action_mask)  # (2B,)
        logp = episode_logp(token_logprobs(model, batch), batch.action_mask)  # (2B,)
        loss = dpo_loss(logp[:B], logp[B:], ref[:B], ref[B:], beta=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        stamps.append(time.perf_counter())
    return step_stats(stamps)


# --- TRL --------------------------------------------------------------------------------------


def hf_tokenizer():
    """A word-level tokenizer over our vocabulary: words <-> ids one to one, nothing downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = default_vocab()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab.words)}, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=END, unk_token=UNK
    )


def hf_model():
    vocab = default_vocab()
    return gpt2_like(
        len(vocab), 512, eos_token_id=vocab.id(END), pad_token_id=vocab.id(PAD), use_cache=False
    )


def trl_args(kind: str, mode: str, steps: int, batch: int, out: str):
    from trl import DPOConfig, SFTConfig

    cls = SFTConfig if kind == "sft" else DPOConfig
    common = dict(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=batch,
        learning_rate=LR,
        report_to="none",
        use_cpu=True,
    )
    if mode == "defaults":
        return cls(**common)
    best = dict(
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        dataloader_pin_memory=False,
        dataloader_num_workers=0,
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        max_grad_norm=1.0,
    )
    if kind == "dpo":
        best["precompute_ref_log_probs"] = True
    return cls(**common, **best)


def trl_run(kind: str, mode: str, steps: int, data) -> float:
    from datasets import Dataset
    from transformers import TrainerCallback

    class Stamp(TrainerCallback):
        def __init__(self):
            self.stamps: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            if not self.stamps:
                self.stamps.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            self.stamps.append(time.perf_counter())

    stamp = Stamp()
    with tempfile.TemporaryDirectory() as out:
        if kind == "sft":
            from trl import SFTTrainer

            rows = [
                {
                    "input_ids": list(t.ids_T),
                    "labels": [
                        i if o == POLICY else -100 for i, o in zip(t.ids_T, t.owners_T, strict=True)
                    ],
                }
                for t in data
            ]
            trainer = SFTTrainer(
                model=hf_model(),
                args=trl_args(kind, mode, steps, len(data), out),
                train_dataset=Dataset.from_list(rows * steps),
                processing_class=hf_tokenizer(),
                callbacks=[stamp],
            )
        else:
            from trl import DPOTrainer

            chosen, rejected = data
            rows = [_dpo_text(c, r) for c, r in zip(chosen, rejected, strict=True)]
            trainer = DPOTrainer(
                model=hf_model(),
                ref_model=hf_model(),
                args=trl_args(kind, mode, steps, len(chosen), out),
                train_dataset=Dataset.from_list(rows * steps),
                processing_class=hf_tokenizer(),
                callbacks=[stamp],
            )
        from transformers import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)  # no metrics dicts printed mid-table
        trainer.remove_callback(ProgressCallback)
        trainer.train()
    return step_stats(stamp.stamps)


def _dpo_text(chosen: Trajectory, rejected: Trajectory) -> dict:
    """One preference pair as TRL's text columns: the shared prompt and the two completions."""
    vocab = default_vocab()
    n = sum(1 for o in chosen.owners_T if o == PROMPT)
    assert chosen.ids_T[:n] == rejected.ids_T[:n]
    return {
        "prompt": " ".join(vocab.decode(chosen.ids_T[:n])),
        "chosen": " " + " ".join(vocab.decode(chosen.ids_T[n:])),
        "rejected": " " + " ".join(vocab.decode(rejected.ids_T[n:])),
    }


# --- report -----------------------------------------------------------------------------------


def quiet_hf() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore")
    for name in ("transformers", "trl", "datasets", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from datasets.utils.logging import disable_progress_bar
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        disable_progress_bar()
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10, help="steps per run (2 are warm-up)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of all contenders")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--no-trl-defaults", action="store_true", help="skip TRL's default configs")
    p.add_argument("--quick", action="store_true", help="6 steps, 1 round, no TRL defaults")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON ('-': stdout)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.no_trl_defaults = 6, 1, True
    setup_threads(args.threads)
    quiet_hf()
    try:
        import trl  # noqa: F401
    except ImportError:
        trl = None
        print("trl is not installed (pip install -e '.[bench]'): timing ours only")

    demos = oracle_demos()
    chosen, rejected = dpo_pairs()
    sft_tokens, dpo_tokens = tokens_in(demos), tokens_in(chosen + rejected)
    contenders = {
        "sft": {"ours": lambda: ours_sft(demos, args.steps)},
        "dpo": {
            "ours": lambda: ours_dpo(list(zip(chosen, rejected, strict=True)), args.steps),
            "ours (ref each step)": lambda: ours_dpo_ref_each_step(chosen, rejected, args.steps),
        },
    }
    if trl is not None:
        modes = ["best"] + ([] if args.no_trl_defaults else ["defaults"])
        for mode in modes:
            contenders["sft"][f"TRL {mode}"] = lambda m=mode: trl_run("sft", m, args.steps, demos)
            contenders["dpo"][f"TRL {mode}"] = lambda m=mode: trl_run(
                "dpo", m, args.steps, (chosen, rejected)
            )
    times: dict[str, dict[str, list[float]]] = {
        k: {n: [] for n in c} for k, c in contenders.items()
    }
    for _ in range(args.rounds):
        for kind, fns in contenders.items():
            for name, fn in fns.items():
                times[kind][name].append(fn())

    results: dict = {
        "machine": machine_line(),
        "steps": args.steps,
        "rounds": args.rounds,
        "batch": {"sft": len(demos), "dpo": 2 * len(chosen)},
        "tokens_per_step": {"sft": sft_tokens, "dpo": dpo_tokens},
        "rows": [],
    }
    for kind, by_name in times.items():
        ours_name = "ours"
        for name, ts in by_name.items():
            ratios = [t / o for t, o in zip(ts, by_name[ours_name], strict=True)]
            tok = results["tokens_per_step"][kind]
            results["rows"].append(
                {
                    "step": kind,
                    "who": name,
                    "ms_per_step": 1000 * statistics.median(ts),
                    "tokens_per_s": tok / statistics.median(ts),
                    "time_vs_ours": statistics.median(ratios),
                }
            )
    print_table(results)
    write_json(args.json, results)
    return results


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]machine[/]: {results['machine']}")
    b, tok = results["batch"], results["tokens_per_step"]
    t = Table(
        title=f"train step: SFT batch {b['sft']} ({tok['sft']} tokens), DPO batch {b['dpo']} "
        f"({tok['dpo']} tokens); median of {results['steps'] - WARMUP} steps x "
        f"{results['rounds']} rounds"
    )
    for col in ("step", "who", "ms/step", "tokens/s", "time / ours"):
        t.add_column(col, justify="right")
    for r in results["rows"]:
        t.add_row(
            r["step"],
            r["who"],
            f"{r['ms_per_step']:,.1f}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['time_vs_ours']:.2f}x",
        )
    console.print(t)


if __name__ == "__main__":
    main()

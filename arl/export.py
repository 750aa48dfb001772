"""Export both ways: TinyAgent as a `transformers` GPT-2, and rollouts as a Parquet table.

**Model.** TinyAgent is GPT-2 in all but names: learned positions, pre-LN blocks, a fused
qkv projection, a 4x GELU MLP, a final LayerNorm and an lm_head tied to the token
embedding. `gpt2_state_dict` renames its tensors (prefix `transformer.`) and transposes
the four Linear weights of each block, since GPT-2 stores them as Conv1D, (in, out);
`gpt2_config` sets the exact GELU (TinyAgent's `F.gelu`, not GPT-2's tanh approximation)
and LayerNorm eps 1e-5. Zero biases stand in for a `bias=False` model. The tokenizer is
word-level over the gym's vocabulary, so its ids are arl's ids: text is words separated
by spaces (`<bos> fix handle _ entries`), `<end>` is the end-of-sequence token (one call).

**Trajectories.** One row per episode, in `run_policy`'s order (task-major: `group` is
the task's index, `sample` the episode's index within the group):

    task, family, split, group, sample   which episode, and its GRPO-style group
    input_ids      list[int]    the episode's ids as sampled (arl vocabulary ids)
    loss_mask      list[int]    1 on policy tokens, 0 on prompt, template, environment
    owners         list[int]    0 prompt, 1 policy, 2 environment, 3 template (arl.types)
    sampler_logprobs list[float] the sampler's log-prob of each policy token, 0 elsewhere
                                (scripted policies: 0 everywhere)
    reward, passed, public_pass, turns, accumulator
    data_source, prompt, ability, reward_model, extra_info   verl's RL prompt fields

TRL: the SFT collator (`DataCollatorForLanguageModeling`) takes pre-tokenized rows with
`input_ids` and sets `labels[completion_mask == 0] = -100` (`completion_only_loss=True`)
or `labels[assistant_masks == 0] = -100` (`assistant_only_loss=True`). Both masks are
aligned with `input_ids` (the model shifts labels itself), as `loss_mask` is, so
`ds.select_columns(["input_ids", "loss_mask"]).rename_column("loss_mask",
"completion_mask")` is a TRL SFT dataset; RFT is the same after
`ds.filter(lambda r: r["passed"])`. verl: its RL loader (`RLHFDataset`) reads
`data_source`, `prompt` (chat messages), `ability`, `reward_model` ({style, ground_truth})
and `extra_info` ({split, index}); the reward for `data_source` "arl/bugfix" is the gym's
and must be supplied to verl as a custom reward function (not provided here).
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from arl.env import NAMES, environment_of_tasks
from arl.errors import ArlError, require
from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import vocab_of
from arl.runio import atomic_write_bytes
from arl.text import BOS, END, PAD, UNK, Vocab
from arl.types import POLICY, Trajectory

GELU_EXACT = "gelu"  # transformers' name for torch's erf GELU (GPT-2's default is "gelu_new")
LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which TinyAgent uses


# --- TinyAgent -> GPT2LMHeadModel -------------------------------------------------------------

CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # Linear (out, in) -> (in, out)


def gpt2_state_dict(model: TinyAgent) -> dict[str, torch.Tensor]:
    """TinyAgent's weights under GPT2LMHeadModel's names (lm_head tied: stored as wte only)."""
    cfg, out = model.config, {}
    for name, t in model.state_dict().items():
        if name in ("wte.weight", "lm_head.weight"):
            continue
        layer = name.rsplit(".", 1)[0]  # e.g. h.0.attn.c_attn
        if any(layer.endswith(c) for c in CONV1D) and name.endswith(".weight"):
            t = t.t()  # (out, in) -> (in, out)
        out[f"transformer.{name}"] = t
    out["transformer.wte.weight"] = model.lm_head.weight  # (V, C), the tied matrix
    if not cfg.bias:  # GPT-2 always has biases: zeros are the same function
        C = cfg.n_embd
        sizes = {
            "ln_1": C,
            "ln_2": C,
            "attn.c_attn": 3 * C,
            "attn.c_proj": C,
            "mlp.c_fc": 4 * C,
            "mlp.c_proj": C,
        }
        for i in range(cfg.n_layer):
            for part, n in sizes.items():
                out[f"transformer.h.{i}.{part}.bias"] = torch.zeros(n)
        out["transformer.ln_f.bias"] = torch.zeros(C)
    return {k: v.detach().cpu().contiguous().clone() for k, v in out.items()}


def gpt2_config(cfg: TinyAgentConfig, vocab: Vocab | None = None):
    """The transformers GPT2Config of a TinyAgent shape; special ids from the gym's vocabulary."""
    transformers = require("transformers", "arl export hf")
    specials = {}
    if vocab is not None:
        specials = {
            "bos_token_id": vocab.id(BOS),
            "eos_token_id": vocab.id(END),
            "pad_token_id": vocab.id(PAD),
        }
    return transformers.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_inner=4 * cfg.n_embd,
        activation_function=GELU_EXACT,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        layer_norm_epsilon=LN_EPS,
        tie_word_embeddings=True,
        architectures=["GPT2LMHeadModel"],
        **specials,
    )


def word_tokenizer(vocab: Vocab, max_length: int):
    """A word-level PreTrainedTokenizerFast whose ids are the vocabulary's (split on spaces)."""
    tokenizers = require("tokenizers", "the exported tokenizer")
    transformers = require("transformers", "the exported tokenizer")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab.index, unk_token=UNK))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=END,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=max_length,
    )


def model_vocab(model: TinyAgent) -> Vocab | None:
    """The vocabulary of the environment a TinyAgent speaks (found by its size), if any."""
    sizes = {len(vocab_of(n)): vocab_of(n) for n in NAMES}
    return sizes.get(model.config.vocab_size)


def export_hf(model: TinyAgent, out: str | Path) -> list[Path]:
    """Write `out` as a transformers model directory: config.json, model.safetensors and,
    when the model speaks an environment's vocabulary, a word-level tokenizer. Each file
    atomically."""
    from safetensors.torch import save

    out, vocab = Path(out), model_vocab(model)
    gym_vocab = vocab is not None
    config = gpt2_config(model.config, vocab)
    files = [
        atomic_write_bytes(
            out / "model.safetensors", save(gpt2_state_dict(model), metadata={"format": "pt"})
        ),
        atomic_write_bytes(out / "config.json", config.to_json_string().encode("utf-8")),
    ]
    if gym_vocab:
        tok = word_tokenizer(vocab, model.config.block_size)
        with tempfile.TemporaryDirectory() as tmp:
            for name in tok.save_pretrained(tmp):
                path = Path(name)
                if path.is_file():
                    data = path.read_bytes()
                    if path.name == "tokenizer_config.json":
                        data = portable_tokenizer_config(data)
                    files.append(atomic_write_bytes(out / path.name, data))
    return files


def portable_tokenizer_config(data: bytes) -> bytes:
    """Name the class PreTrainedTokenizerFast, which transformers 4 and 5 both load
    (transformers 5 writes its own "TokenizersBackend", unknown to 4.x)."""
    config = json.loads(data)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    return (json.dumps(config, indent=2) + "\n").encode("utf-8")


# --- rollouts -> a datasets / Parquet table ---------------------------------------------------


def trajectory_row(tr: Trajectory, group: int, sample: int) -> dict[str, Any]:
    """One episode as a table row (see the module docstring for every column)."""
    out = tr.outcome
    if out is None:
        raise ArlError(f"a trajectory of {tr.task} has no outcome: not a gym episode")
    environment = environment_of_tasks([out])
    task = environment.get_task(tr.task)
    owners = list(tr.owners_T)
    prompt = " ".join(environment.make(task).reset(seed=0)[0].words)
    return {
        "task": task.name,
        "family": task.family,
        "split": task.split,
        "group": group,
        "sample": sample,
        "input_ids": list(tr.ids_T),
        "loss_mask": [int(o == POLICY) for o in owners],
        "owners": owners,
        "sampler_logprobs": list(tr.logprobs_T),
        "reward": float(tr.reward),
        "passed": tr.passed,
        "public_pass": out.public_pass,
        "turns": out.turns,
        "accumulator": getattr(out, "accumulator", None) or "",
        "data_source": f"arl/{environment.name}",
        "prompt": [{"role": "user", "content": prompt}],
        "ability": environment.name,
        "reward_model": {"style": "rule", "ground_truth": task.name},
        "extra_info": {"split": task.split, "index": group, "task": task.name},
    }


def trajectory_rows(trajs: Sequence[Trajectory], samples: int) -> list[dict[str, Any]]:
    """Rows of run_policy's task-major output: episode k is sample k % G of group k // G."""
    return [trajectory_row(tr, k // samples, k % samples) for k, tr in enumerate(trajs)]


def trajectory_features():
    """The table's datasets.Features: int32 ids, int8 masks and owners, float32 log-probs."""
    datasets = require("datasets", "arl export trajectories")
    V = datasets.Value
    return datasets.Features(
        {  # [feature]: a list of it, in datasets 2.x to 4.x alike
            "task": V("string"),
            "family": V("string"),
            "split": V("string"),
            "group": V("int32"),
            "sample": V("int32"),
            "input_ids": [V("int32")],
            "loss_mask": [V("int8")],
            "owners": [V("int8")],
            "sampler_logprobs": [V("float32")],
            "reward": V("float64"),
            "passed": V("bool"),
            "public_pass": V("bool"),
            "turns": V("int32"),
            "accumulator": V("string"),
            "data_source": V("string"),
            "prompt": [{"role": V("string"), "content": V("string")}],
            "ability": V("string"),
            "reward_model": {"style": V("string"), "ground_truth": V("string")},
            "extra_info": {"split": V("string"), "index": V("int32"), "task": V("string")},
        }
    )


def write_trajectories(rows: list[dict[str, Any]], out: str | Path) -> Path:
    """Write rows as one Parquet file (atomically), readable by datasets, pandas and pyarrow."""
    datasets = require("datasets", "arl export trajectories")
    datasets.disable_progress_bars()  # a CLI prints its own one line
    ds = datasets.Dataset.from_list(rows, features=trajectory_features())
    buf = io.BytesIO()
    ds.to_parquet(buf)
    return atomic_write_bytes(out, buf.getvalue())

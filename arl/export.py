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
    reward, passed, public_pass, turns
    accumulator    str          the accumulator's name ("" when none), only where the
                                environment's outcome has that field (BugFix, CodeFix)
    data_source, prompt, ability, reward_model, extra_info   verl's RL prompt fields
    tools          str or null  the tools as apply_chat_template's `tools=` JSON schemas, as a
                                JSON string (TRL reads it so); null for arl's words, whose
                                system prompt states the grammar

`prompt` is the issue as the policy read it: one user message of TinyAgent's words, or a
real model's chat (system prompt and issue). A real model's rows (`renderer` its chat,
arl.hf.chat) are in its own tokens: ids as sampled, never re-encoded; the mask 1 exactly on
the sampled tokens (each call and its end-of-turn token).

TRL 1.16's SFTTrainer takes `input_ids` with an aligned mask: `assistant_masks` always applies
(`assistant_only_loss=True` is for conversational data: it raises), `completion_mask` only with
`completion_only_loss=True`. verl's `RLHFDataset` reads the last five columns.

**Pairs** (`pair_rows`), for TRL's DPOTrainer: `prompt`, `chosen`, `rejected` as text (its
"standard" form), the tokens before the first policy token and the rest of each episode,
decoded as sampled (special tokens kept; a prefix the tokenizer adds itself, a BOS, left for
TRL to add back). TRL re-tokenizes them (`exact_tokens`: into the sampled ids) and puts its
loss on every completion token, observations included (arl's DPO: policy tokens only). Each
pair carries `tools` as the trajectories do (a JSON string, null for arl's words).
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from arl.env import NAMES, environment_of_tasks
from arl.errors import ArlError, require
from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import episode_seed, scripted_rollout, vocab_of
from arl.runio import TMP_PREFIX, atomic_write_bytes
from arl.text import BOS, END, PAD, UNK, Vocab
from arl.types import POLICY, Observation, Trajectory

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
    config = gpt2_config(model.config, vocab)
    files = [
        atomic_write_bytes(
            out / "model.safetensors", save(gpt2_state_dict(model), metadata={"format": "pt"})
        ),
        atomic_write_bytes(out / "config.json", config.to_json_string().encode("utf-8")),
    ]
    if vocab is not None:
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


HF_FILES = ("config.json", "model.safetensors")  # and the tokenizer's, when there is one:
HF_FILES += ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
OLD_RUN_FILES = (".arl-lock", ".arl-run.json")  # an earlier arl's lock and marker: removed


def check_model_dir(out: str | Path, overwrite: bool) -> None:
    """Refuse, in one line, a DIR that is a file, holds files of its own, or holds an earlier
    export (unless `overwrite`): before the model is loaded."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ArlError(f"{out}: exists and is not a directory")
    if not out.is_dir():
        return
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith(TMP_PREFIX))
    foreign = [n for n in names if n not in HF_FILES + OLD_RUN_FILES]
    if foreign:
        raise ArlError(f"{out}: holds other files (e.g. {foreign[0]}); use another DIR")
    if names and not overwrite:
        raise ArlError(
            f"{out}: holds an earlier export (e.g. {names[0]}); use another DIR, or --overwrite "
            "to replace it"
        )


def export_hf_dir(model: TinyAgent, out: str | Path, overwrite: bool = False) -> list[Path]:
    """`export_hf` into a folder left holding only what `from_pretrained` loads (no lock, no
    marker, no temp file, no earlier export's file it did not rewrite)."""
    check_model_dir(out, overwrite)
    new = Path(out).absolute()  # the outermost folder this export creates (None: all exist)
    while not new.parent.exists():
        new = new.parent
    new = None if new.exists() else new
    try:
        files = export_hf(model, out)
    except BaseException:  # a full disk, an interrupt: no empty or half-written new folder
        if new is not None:
            shutil.rmtree(new, ignore_errors=True)
        raise
    keep = {p.name for p in files}
    for p in Path(out).iterdir():
        ours = p.name in HF_FILES + OLD_RUN_FILES or p.name.startswith(TMP_PREFIX)
        if ours and p.name not in keep and p.is_file():
            p.unlink(missing_ok=True)
    return files


def portable_tokenizer_config(data: bytes) -> bytes:
    """Name the class PreTrainedTokenizerFast, which transformers 4 and 5 both load
    (transformers 5 writes its own "TokenizersBackend", unknown to 4.x)."""
    config = json.loads(data)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    return (json.dumps(config, indent=2) + "\n").encode("utf-8")


# --- rollouts -> a datasets / Parquet table ---------------------------------------------------


def prompt_messages(issue: Observation, renderer: Any = None) -> list[dict[str, str]]:
    """verl's `prompt`: the issue as TinyAgent reads it (one user message of its words), or
    the chat a real model reads (`renderer`'s system prompt and the issue's text)."""
    if getattr(renderer, "tokenizer", None) is None:
        return [{"role": "user", "content": " ".join(issue.words)}]
    return list(renderer.messages(issue.text))


def tools_column(renderer: Any) -> str | None:
    """The `tools` column: a native renderer's JSON-schema functions as a JSON string (TRL's
    SFTTrainer and DPOTrainer json.loads a string there), None for arl's words."""
    specs = getattr(renderer, "tool_specs", None)
    return json.dumps(specs) if specs else None


def has_accumulator(outcome: Any) -> bool:
    """Whether an environment's outcome names its episode's accumulator (BugFix's, CodeFix's
    field): its rows, and only its, have that column."""
    return "accumulator" in {f.name for f in dataclasses.fields(outcome)}


def trajectory_row(tr: Trajectory, group: int, sample: int, renderer: Any = None) -> dict[str, Any]:
    """One episode as a table row (see the module docstring for every column); `renderer`:
    the policy's, a real model's chat for its rollouts (None: TinyAgent's words)."""
    out = tr.outcome
    if out is None:
        raise ArlError(f"a trajectory of {tr.task} has no outcome: not a gym episode")
    environment = environment_of_tasks([out])
    task = environment.get_task(tr.task)
    owners = list(tr.owners_T)
    if renderer is not None and hasattr(renderer, "for_environment"):
        renderer = renderer.for_environment(environment)
    prompt = prompt_messages(environment.make(task).reset(seed=0)[0], renderer)
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
        **({"accumulator": out.accumulator or ""} if has_accumulator(out) else {}),
        "data_source": f"arl/{environment.name}",
        "prompt": prompt,
        "ability": environment.name,
        "reward_model": {"style": "rule", "ground_truth": task.name},
        "extra_info": {"split": task.split, "index": group, "task": task.name},
        "tools": tools_column(renderer),
    }


def trajectory_rows(
    trajs: Sequence[Trajectory], samples: int, renderer: Any = None
) -> list[dict[str, Any]]:
    """Rows of run_policy's task-major output: episode k is sample k % G of group k // G."""
    return [trajectory_row(tr, k // samples, k % samples, renderer) for k, tr in enumerate(trajs)]


def scripted_episodes(
    name: str, tasks: Sequence, samples: int, seed: int, env_config: Any, renderer: Any
) -> list[Trajectory]:
    """A scripted policy's episodes in a real model's tokens (its chat renderer), in
    run_policy's order and with its seeds (log-probs 0: nothing was sampled)."""
    jobs = [t for t in tasks for _ in range(samples)]
    play = partial(scripted_rollout, name, env_config=env_config, renderer=renderer)
    return [play(t, seed=episode_seed(seed, k)) for k, t in enumerate(jobs)]


def trajectory_features(accumulator: bool = True):
    """The table's datasets.Features: int32 ids, int8 masks and owners, float32 log-probs;
    `accumulator`: with that column (an environment whose outcome has the field)."""
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
            **({"accumulator": V("string")} if accumulator else {}),
            "data_source": V("string"),
            "prompt": [{"role": V("string"), "content": V("string")}],
            "ability": V("string"),
            "reward_model": {"style": V("string"), "ground_truth": V("string")},
            "extra_info": {"split": V("string"), "index": V("int32"), "task": V("string")},
            "tools": V("string"),
        }
    )


def write_trajectories(rows: list[dict[str, Any]], out: str | Path) -> Path:
    """Write rows as one Parquet file (atomically), readable by datasets, pandas and pyarrow."""
    return write_table(rows, trajectory_features(all("accumulator" in r for r in rows)), out)


def write_table(rows: list[dict[str, Any]], features: Any, out: str | Path) -> Path:
    """Rows of the given datasets.Features as one Parquet file, written atomically."""
    datasets = require("datasets", "arl export")
    datasets.disable_progress_bars()  # a CLI prints its own one line
    ds = datasets.Dataset.from_list(rows, features=features)
    buf = io.BytesIO()
    ds.to_parquet(buf)
    return atomic_write_bytes(out, buf.getvalue())


# --- (chosen, rejected) pairs -> TRL's DPOTrainer ---------------------------------------------


def prompt_length(tr: Trajectory) -> int:
    """Tokens before the episode's first policy token: the prompt a task's episodes share."""
    return next((i for i, o in enumerate(tr.owners_T) if o == POLICY), len(tr.owners_T))


def split_text(tr: Trajectory, renderer: Any) -> tuple[str, str, bool]:
    """An episode as (prompt, completion) text, and whether that text re-tokenizes to its ids
    (TinyAgent: words joined by spaces; a real model: its tokenizer's decode, less the prefix
    the tokenizer adds by itself, which TRL's tokenization adds back)."""
    n, ids = prompt_length(tr), list(tr.ids_T)
    tok = getattr(renderer, "tokenizer", None)
    if tok is None:
        words = renderer.vocab.decode(ids)
        prompt, rest = " ".join(words[:n]), " " + " ".join(words[n:])
        return prompt, rest, renderer.vocab.encode((prompt + rest).split()) == ids
    lead = list(tok("")["input_ids"])  # e.g. a BOS the tokenizer adds to any text
    skip = len(lead) if lead and ids[: len(lead)] == lead else 0

    text = partial(tok.decode, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    prompt, rest = text(ids[skip:n]), text(ids[n:])
    exact = tok(prompt)["input_ids"] == ids[:n] and tok(prompt + rest)["input_ids"] == ids
    return prompt, rest, exact


def pair_rows(
    pairs: Sequence[tuple[Trajectory, Trajectory]],
    trajs: Sequence[Trajectory],
    samples: int,
    renderer: Any,
) -> list[dict[str, Any]]:
    """One row per (chosen, rejected) pair of episodes out of `trajs` (run_policy's order):
    TRL's prompt / chosen / rejected text, and which episodes they are."""
    index = {id(tr): k for k, tr in enumerate(trajs)}
    rows = []
    for chosen, rejected in pairs:
        prompt, good, exact_good = split_text(chosen, renderer)
        other, bad, exact_bad = split_text(rejected, renderer)
        if other != prompt:
            raise ArlError(f"task {chosen.task}: its episodes start from different prompts")
        environment = environment_of_tasks([chosen.outcome])
        task = environment.get_task(chosen.task)
        kc, kr = index[id(chosen)], index[id(rejected)]
        chat = (
            renderer.for_environment(environment) if hasattr(renderer, "for_environment") else None
        )
        rows.append(
            {
                "prompt": prompt,
                "chosen": good,
                "rejected": bad,
                "task": task.name,
                "family": task.family,
                "split": task.split,
                "group": kc // samples,
                "chosen_sample": kc % samples,
                "rejected_sample": kr % samples,
                "chosen_reward": float(chosen.reward),
                "rejected_reward": float(rejected.reward),
                "exact_tokens": exact_good and exact_bad,
                "tools": tools_column(chat),
            }
        )
    return rows


def pair_features():
    """The pairs table's datasets.Features: TRL's three text columns, then the episodes'."""
    datasets = require("datasets", "arl export pairs")
    V = datasets.Value
    text = ("prompt", "chosen", "rejected", "task", "family", "split")
    ints = ("group", "chosen_sample", "rejected_sample")
    return datasets.Features(
        {n: V("string") for n in text}
        | {n: V("int32") for n in ints}
        | {"chosen_reward": V("float64"), "rejected_reward": V("float64")}
        | {"exact_tokens": V("bool"), "tools": V("string")}
    )

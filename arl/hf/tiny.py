"""A tiny random causal LM of a current architecture, with a real tokenizer, built offline.

Tests, benchmarks and a first try of `--model` need a `from_pretrained` directory without a
download. `build_tiny` trains a byte-level BPE (GPT-2 / Qwen style) on the gym's own text,
gives it a chat template, builds a Qwen2- or Llama-style model with random weights, and saves
both. The weights are random: the model emits malformed calls, as an untrained TinyAgent does.

A tokenizer's `style` is its template and special tokens (arl.hf.templates): "chatml" (arl's
words in ChatML with a `tool` role, the default), or a family's native tool-call format:
"qwen2.5" (eos <|im_end|>), "qwen2.5-base" (the same template, eos <|endoftext|>: turns are
closed by a token that is not eos, as in Qwen2.5's base checkpoints) and "llama3.1". A native
style splits text with its family's pre-tokenizer regex and learns its merges from the tool
specs and calls too.
"""

from __future__ import annotations

from pathlib import Path

from arl.env import Environment, get_environment
from arl.hf.deps import quiet, require_transformers
from arl.hf.templates import CHATML, FORMAT_OF, QWEN_SPECIALS, SPLITS, STYLES

SPECIALS = QWEN_SPECIALS
ARCHS = ("qwen2", "llama")
__all__ = ["CHATML", "SPECIALS", "ARCHS", "build_tokenizer", "build_tiny", "corpus"]


def tasks_of(environment: Environment) -> list:
    """Every task of an environment, split by split."""
    return [t for split in environment.splits for t in environment.tasks(split)]


def corpus() -> list[str]:
    """Text the tokenizer learns its merges from: listings, calls, prompts, tool output (of
    both built-in environments, read from their declarations: BugFix's functions, menu calls
    and answers, CodeFix's modules and SEARCH/REPLACE blocks)."""
    bugfix, codefix = get_environment("bugfix"), get_environment("codefix")
    bugfix_tasks, ops = tasks_of(bugfix), bugfix.tools.tool("edit").params[0].enum
    calls = [" ".join(("edit", op)) for op in ops] + list(bugfix.tools.names)
    calls += ["passed 0 of 3", "ok"]
    texts = [t.buggy_source for t in bugfix_tasks] + [t.correct_source for t in bugfix_tasks]
    texts += [t.source for t in tasks_of(codefix)]
    texts += [t.text(*t.arg_names()) for t in codefix.tools.tools if t.text is not None]
    prompts = [bugfix.system_prompt, codefix.system_prompt]
    prompts += ["fix " + t.name for t in bugfix_tasks]
    return texts + calls + prompts + list(bugfix.families)  # its fixing ops, one per family


def native_corpus(style: str) -> list[str]:
    """What a native style learns from besides `corpus()`: its template's fixed text, both
    environments' tool specs, and every scripted BugFix call in its format."""
    import json

    from arl.hf.toolcalls import TOOLSETS, render_call

    fmt = FORMAT_OF[style]
    texts = [STYLES[style][0]]
    for make in TOOLSETS.values():
        tools = make()
        texts += [tools.system] + [json.dumps(s, indent=4) for s in tools.specs]
        texts += [json.dumps(s) for s in tools.specs]
    bugfix = TOOLSETS["bugfix"]()
    ops = bugfix.tool("edit").params[0].enum
    calls = list(bugfix.names) + [" ".join(("edit", op)) for op in ops] + ["edit init total"]
    texts += [render_call(fmt, c) for c in map(bugfix.from_text, calls) if c is not None]
    return texts


def build_tokenizer(vocab_size: int | None = None, style: str = "chatml"):
    """A byte-level BPE with its style's specials and chat template (arl.hf.templates):
    "chatml" (eos <|im_end|>, the end of a turn), "qwen2.5", "qwen2.5-base" or "llama3.1".
    Vocabulary: 400 for arl's words, 1000 for a native style (its prompt carries the tools'
    JSON specs: about 500 tokens then, 900 at 400)."""
    tf = require_transformers()
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if style not in STYLES:
        raise ValueError(f"style must be one of {tuple(STYLES)}")
    template, specials, added, eos, pad, bos = STYLES[style]
    vocab_size = vocab_size or (400 if FORMAT_OF[style] == "words" else 1000)
    tok = Tokenizer(models.BPE())
    if SPLITS[style] is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:  # the family's own split, then bytes (as its tokenizer.json does)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(SPLITS[style]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(
        corpus() + (native_corpus(style) if FORMAT_OF[style] != "words" else []), trainer
    )
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token=pad, **({"bos_token": bos} if bos else {})
    )
    if added:  # Qwen's <tool_call> and its kin: added tokens, not special (decode keeps them)
        fast.add_tokens(list(added))
    fast.chat_template = template
    return fast


def build_tiny(
    path: str | Path,
    arch: str = "qwen2",
    seed: int = 0,
    layers: int = 2,
    style: str = "chatml",
    context: int | None = None,
    hidden: int = 64,
) -> Path:
    """Save a random `arch` model (`hidden` wide, an MLP twice that, `layers` layers,
    `context` positions: 1024, or 2048 for a native style) and its tokenizer of `style`
    (arl.hf.templates.STYLES) to `path`."""
    import torch

    tf = require_transformers()
    quiet(tf)
    tok = build_tokenizer(style=style)
    shape = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context or (1024 if FORMAT_OF[style] == "words" else 2048),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    if arch == "qwen2":
        config = tf.Qwen2Config(**shape)
        cls = tf.Qwen2ForCausalLM
    elif arch == "llama":
        config = tf.LlamaConfig(**shape)
        cls = tf.LlamaForCausalLM
    else:
        raise ValueError(f"arch must be one of {ARCHS}")
    torch.manual_seed(seed)
    model = cls(config)
    path = Path(path)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path

"""A tiny random causal LM of a current architecture, with a real tokenizer, built offline.

Tests, benchmarks and a first try of `--model` need a `from_pretrained` directory without a
download. `build_tiny` trains a byte-level BPE (GPT-2 / Qwen style) on the gym's own text,
gives it a ChatML chat template with a `tool` role, builds a Qwen2- or Llama-style model with
random weights, and saves both. The weights are random: the model emits malformed calls, as
an untrained TinyAgent does.
"""

from __future__ import annotations

from pathlib import Path

from arl.gym.grammar import FIX_OPS, OPS, TOOLS
from arl.gym.tasks import all_tasks
from arl.hf.chat import SYSTEM_PROMPT
from arl.hf.policy import quiet, require_transformers

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ARCHS = ("qwen2", "llama")


def corpus() -> list[str]:
    """Text the tokenizer learns its merges from: listings, calls, prompts, tool output (of
    both environments: BugFix's and CodeFix's modules and SEARCH/REPLACE blocks)."""
    from arl.codefix.environment import SYSTEM_PROMPT as CODEFIX_PROMPT
    from arl.codefix.grammar import replace_text
    from arl.codefix.tasks import all_tasks as codefix_tasks

    calls = [" ".join(("edit", op)) for op in OPS] + list(TOOLS) + ["passed 0 of 3", "ok"]
    texts = [t.buggy_source for t in all_tasks()] + [t.correct_source for t in all_tasks()]
    texts += [t.source for t in codefix_tasks()] + [replace_text("old", "new")]
    prompts = [SYSTEM_PROMPT, CODEFIX_PROMPT] + ["fix " + t.name for t in all_tasks()]
    return texts + calls + prompts + list(FIX_OPS)


def build_tokenizer(vocab_size: int = 400):
    """A byte-level BPE with ChatML specials; eos is <|im_end|>, the end of a turn."""
    tf = require_transformers()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    return fast


def build_tiny(path: str | Path, arch: str = "qwen2", seed: int = 0, layers: int = 2) -> Path:
    """Save a random `arch` model (hidden 64, `layers` layers) and its tokenizer to `path`."""
    import torch

    tf = require_transformers()
    quiet(tf)
    tok = build_tokenizer()
    shape = dict(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
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

"""A `transformers` causal LM behind TinyAgent's interface: forward, new_cache, extend.

Rollouts, the collate and every trainer call a policy through three methods:

    forward(ids (B, T)) -> (logits (B, T, V), None)       training and evaluation
    new_cache(B) -> cache                                  one per batched rollout
    extend(ids (B, S), n_new (B,), cache) -> (B, V)        append n_new[b] tokens to row b

`HFPolicy` gives them to any `AutoModelForCausalLM`. Its cache keeps every row's keys and
values across the environment's turns (observations are appended, never re-prefilled); rows
append different numbers of tokens, so the cache is padded in the middle and the padding is
masked out, with explicit per-row positions.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from arl.errors import ArlError
from arl.hf.adapters import is_adapter, load_adapter_model, quiet_peft
from arl.hf.chat import ChatRenderer
from arl.hf.deps import quiet, require_transformers
from arl.hf.toolcalls import check_format

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# beside a saved model's weights: the call format and the turn end it was trained with, read
# back by load_hf where the caller names neither (a model trained on qwen calls speaks qwen)
CHAT_FILE = "arl_chat.json"


def check_device(device: str) -> None:
    """CUDA only where it is present: one line otherwise, before anything is loaded."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ArlError(f"device {device!r}: CUDA is not available on this machine")


@dataclass(frozen=True)
class HFShape:
    """What the loops read of a policy's config."""

    vocab_size: int
    block_size: int  # longest episode, in tokens


@dataclass
class HFCache:
    """The per-row state of a batched rollout: HF's key/value cache and the mask over it."""

    past: Any  # a transformers Cache (None before the first append)
    mask: torch.Tensor  # (B, T_cache) 1 on real tokens, 0 on padding
    lengths: torch.Tensor  # (B,) real tokens per row: the next position


class HFPolicy(nn.Module):
    """A causal LM and its chat renderer, used wherever a TinyAgent is."""

    pads_cache = True  # rows share one cache length: rollouts append observations per turn

    def __init__(self, model: nn.Module, renderer: ChatRenderer, block_size: int | None = None):
        super().__init__()
        self.model = model
        self.renderer = renderer
        cfg = model.config
        limit = getattr(cfg, "max_position_embeddings", None) or 4096
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft's
        params = inspect.signature(base.forward).parameters  # transformers 5 renamed it
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keeps_logits = "logits_to_keep" in params  # the LM head on chosen positions only
        self.config = HFShape(
            int(model.get_output_embeddings().weight.shape[0]), int(min(block_size or limit, limit))
        )

    @property
    def lm_head(self) -> nn.Module:
        return self.model.get_output_embeddings()

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def is_lora(self) -> bool:
        """Whether the model carries LoRA adapters (arl.hf.lora): only they train."""
        return hasattr(self.model, "disable_adapter") and hasattr(self.model, "peft_config")

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits for every position of right-padded (B, T) ids (causal: padding never leaks)."""
        if idx.size(1) > self.config.block_size:
            raise ArlError(
                f"sequence of {idx.size(1)} tokens exceeds block_size {self.config.block_size}"
            )
        logits = self.model(input_ids=idx, use_cache=False).logits.float()  # (B, T, V)
        if targets is None:
            return logits, None
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def new_cache(self, batch_size: int) -> HFCache:
        dev = self.lm_head.weight.device
        return HFCache(
            None,
            torch.zeros(batch_size, 0, dtype=torch.long, device=dev),
            torch.zeros(batch_size, dtype=torch.long, device=dev),
        )

    def extend(self, ids: torch.Tensor, n_new: torch.Tensor, cache: HFCache) -> torch.Tensor:
        """Append n_new[b] of the (B, S) ids to row b; logits after each row's last new token.

        Rows appending fewer than S tokens are padded; the padding stays in the cache, masked,
        so every later query skips it. Returns (B, V); rows with n_new 0 get meaningless logits.
        """
        B, S = ids.size()
        if int((cache.lengths + n_new).max()) > self.config.block_size:
            raise ArlError(f"episode exceeds block_size {self.config.block_size}")
        offs = torch.arange(S, device=ids.device)  # (S,)
        real = (offs[None, :] < n_new[:, None]).long()  # (B, S)
        pos = cache.lengths[:, None] + offs[None, :]  # (B, S) each row's own positions
        mask = torch.cat([cache.mask, real], dim=1)  # (B, T_cache + S)
        kw = {self._cache_arg: cache.past} if cache.past is not None else {}
        last = (n_new - 1).clamp(min=0)  # (B,)
        keep = torch.unique(last) if S > 1 and self._keeps_logits else None  # (K,) sorted
        if keep is not None:  # an appended observation: logits at the K rows' last columns only
            kw["logits_to_keep"] = keep
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        cache.past = getattr(out, "cache", None) or out.past_key_values
        cache.mask = mask
        cache.lengths = cache.lengths + n_new
        col = last if keep is None else torch.searchsorted(keep, last)  # (B,) into the logits
        return out.logits[torch.arange(B, device=ids.device), col].float()  # (B, V)

    def save(self, path: str | Path) -> Path:
        """A `from_pretrained` directory: the model and its tokenizer, and CHAT_FILE with the
        call format and the turn end (load_hf reads them back), every file with the umask's
        mode (as any file arl writes). A LoRA policy saves its adapter (peft's
        adapter_config.json and adapter_model.safetensors), which load_hf puts back on the base
        its adapter_config names."""
        from arl.runio import atomic_write_json, give_umask_modes

        path = Path(path)
        with quiet_peft():  # a LoRA policy's model is peft's: it writes the adapter
            self.model.save_pretrained(path)
        self.renderer.tokenizer.save_pretrained(path)
        chat = {"tool_format": self.renderer.tool_format, "turn_end": self.renderer.end_token}
        atomic_write_json(path / CHAT_FILE, chat)
        give_umask_modes(path)
        return path


def saved_chat(path_or_id: str) -> dict:
    """The chat settings a saved model folder holds (CHAT_FILE), {} for a hub id or a folder
    arl did not save; a damaged file is one line."""
    from arl.runio import read_json

    path = Path(path_or_id) / CHAT_FILE
    if not path.is_file():
        return {}
    saved = read_json(path)
    ok = isinstance(saved, dict) and all(
        isinstance(saved.get(k), str | None) for k in ("tool_format", "turn_end")
    )
    if not ok:
        raise ArlError(f"{path}: expected {{'tool_format': str, 'turn_end': str}}")
    return {k: saved[k] for k in ("tool_format", "turn_end") if saved.get(k)}


def load_hf(
    path_or_id: str,
    device: str = "cpu",
    dtype: str = "float32",
    block_size: int | None = None,
    turn_end: str | None = None,
    tool_format: str | None = None,
) -> HFPolicy:
    """`AutoModelForCausalLM` and `AutoTokenizer` from a directory or a hub id, as a policy
    whose calls are in `tool_format` (arl's words, or "qwen" / "llama" native tool calls) and
    end with `turn_end` (default: the token the chat template closes a turn with, else eos).
    Either left None is read from the folder's CHAT_FILE when arl saved it (else words, and
    the template's turn end). A LoRA adapter folder (arl.hf.adapters) loads as its base with the
    adapter on it, trainable."""
    tf = require_transformers()
    quiet(tf)
    if dtype not in DTYPES:
        raise ArlError(f"dtype: must be one of {', '.join(DTYPES)}, got {dtype!r}")
    check_device(device)
    saved = saved_chat(path_or_id)
    tool_format = tool_format or saved.get("tool_format", "words")
    turn_end = turn_end or saved.get("turn_end")
    check_format(tool_format)  # before anything is loaded
    adapter = is_adapter(path_or_id)
    try:
        tok = tf.AutoTokenizer.from_pretrained(path_or_id)
        if not adapter:
            model = tf.AutoModelForCausalLM.from_pretrained(path_or_id, dtype=DTYPES[dtype])
    except (OSError, ValueError) as e:
        raise ArlError(f"--model {path_or_id}: {str(e).splitlines()[0]}") from e
    if adapter:
        model = load_adapter_model(path_or_id, DTYPES[dtype])
    model.to(device)
    renderer = ChatRenderer.for_tokenizer(tok, turn_end=turn_end, tool_format=tool_format)
    policy = HFPolicy(model, renderer, block_size)
    policy.renderer = replace(policy.renderer, context=policy.config.block_size)
    return policy

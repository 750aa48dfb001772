"""TinyAgent: a decoder-only transformer with a KV cache for batched multi-turn decoding.

Read top-down as nanoGPT's model.py: attention, MLP, block, config, model. Two
forward paths share every weight: `forward(idx)` for training on whole sequences,
and `extend(ids, n_new, cache)`, which appends a ragged number of tokens to each
row of a KV cache (one sampled token, or a whole observation) and returns the
logits after each row's last new token.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn import functional as F

from arl.errors import ArlError


@dataclass(frozen=True)
class TinyAgentConfig:
    """Shape of TinyAgent. Defaults: 4 layers, width 128, 4 heads (about 0.8M parameters)."""

    vocab_size: int  # number of word tokens
    block_size: int = 512  # longest episode, in tokens
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # residual width
    dropout: float = 0.0  # off by default: it cost 1.8x in training time on CPU
    bias: bool = True  # biases in Linear and LayerNorm

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise ArlError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ArlError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if not 0.0 <= self.dropout < 1.0:
            raise ArlError(f"dropout: must be in [0, 1), got {self.dropout}")


class KVCache:
    """Per-layer keys and values for B rows, and how many positions each row holds.

    One spare slot at the end (index block_size) absorbs the padding of rows that
    append fewer tokens than others; it is never attended to.
    """

    def __init__(self, config: TinyAgentConfig, batch_size: int, device=None, dtype=None):
        hs = config.n_embd // config.n_head
        shape = (batch_size, config.n_head, config.block_size + 1, hs)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)  # (B,)
        self.block_size = config.block_size


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyAgentConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x, cache: KVCache | None = None, layer: int = 0, write=None, mask=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if cache is None:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )
        else:
            rows, slots, T_k = write  # (B, T), (B, T), int
            cache.k[layer][rows, :, slots] = k.transpose(1, 2)  # (B, T, nh, hs) at each slot
            cache.v[layer][rows, :, slots] = v.transpose(1, 2)
            k_all = cache.k[layer][:, :, :T_k]  # (B, nh, T_k, hs)
            v_all = cache.v[layer][:, :, :T_k]
            y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: TinyAgentConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: TinyAgentConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, cache=None, layer=0, write=None, mask=None):
        x = x + self.attn(self.ln_1(x), cache, layer, write, mask)
        return x + self.mlp(self.ln_2(x))


class TinyAgent(nn.Module):
    def __init__(self, config: TinyAgentConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits for every position of (B, T) ids; with targets, also the mean cross-entropy."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ArlError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def new_cache(self, batch_size: int) -> KVCache:
        p = self.lm_head.weight
        return KVCache(self.config, batch_size, device=p.device, dtype=p.dtype)

    def extend(self, ids: torch.Tensor, n_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Append n_new[b] of the (B, S) ids to row b of the cache; logits after its last one.

        Rows with n_new 0 are left unchanged (their returned logits are meaningless).
        Returns (B, V).
        """
        B, S = ids.size()
        start = cache.lengths  # (B,)
        offs = torch.arange(S, device=ids.device)  # (S,)
        pos = start[:, None] + offs[None, :]  # (B, S) absolute positions
        real = offs[None, :] < n_new[:, None]  # (B, S)
        end = start + n_new  # (B,)
        if bool((end > cache.block_size).any()):
            raise ArlError(f"episode exceeds block_size {cache.block_size}")
        slots = torch.where(real, pos, cache.block_size)  # padding -> the spare slot
        T_k = int(end.max())
        mask = torch.arange(T_k, device=ids.device)[None, None, :] <= pos[:, :, None]  # (B, S, T_k)
        mask = mask[:, None]  # (B, 1, S, T_k)
        rows = torch.arange(B, device=ids.device)[:, None].expand(B, S)  # (B, S)
        x = self.wte(ids) + self.wpe(pos.clamp(max=self.config.block_size - 1))  # (B, S, C)
        for layer, block in enumerate(self.h):
            x = block(x, cache, layer, (rows, slots, T_k), mask)
        last = (n_new - 1).clamp(min=0)  # (B,)
        x_last = x[torch.arange(B, device=ids.device), last]  # (B, C)
        cache.lengths = end
        return self.lm_head(self.ln_f(x_last))  # (B, V)


# --- checkpoints: a JSON config and safetensors weights, never pickle -------------------------

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def save_checkpoint(model: TinyAgent, path: str | Path, extra: dict | None = None) -> Path:
    """Write config.json and model.safetensors under `path`, each via a temp file and a rename."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = {"format": "arl.tinyagent", "config": asdict(model.config), **(extra or {})}
    tmp_w, tmp_c = path / (WEIGHTS_FILE + ".tmp"), path / (CONFIG_FILE + ".tmp")
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "wte.weight"}
    save_file(state, str(tmp_w))
    tmp_c.write_text(json.dumps(meta, indent=2))
    tmp_w.replace(path / WEIGHTS_FILE)
    tmp_c.replace(path / CONFIG_FILE)
    return path


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> TinyAgent:
    """Load a checkpoint directory; any corrupt, truncated or mismatched file is an ArlError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    cfg_path, w_path = path / CONFIG_FILE, path / WEIGHTS_FILE
    if not path.is_dir():
        raise ArlError(f"checkpoint {path}: not a directory")
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise ArlError(f"checkpoint {path}: missing {p.name}")
    try:
        meta = json.loads(cfg_path.read_text())
        known = {f.name for f in fields(TinyAgentConfig)}
        raw = meta["config"]
        if not isinstance(raw, dict) or set(raw) - known:
            raise ArlError(f"checkpoint {path}: {CONFIG_FILE} has unknown fields")
        config = TinyAgentConfig(**raw)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise ArlError(f"checkpoint {path}: corrupt {CONFIG_FILE} ({type(e).__name__})") from None
    try:
        state = load_file(str(w_path), device=map_location)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise ArlError(f"checkpoint {path}: corrupt {WEIGHTS_FILE} ({e})") from None
    model = TinyAgent(config)
    expected = {k: v.shape for k, v in model.state_dict().items() if k != "wte.weight"}
    got = {k: v.shape for k, v in state.items()}
    if expected != got:
        bad = sorted(set(expected) ^ set(got)) or [k for k in expected if expected[k] != got[k]]
        raise ArlError(f"checkpoint {path}: weights do not match config (e.g. {bad[0]})")
    model.load_state_dict(state, strict=False)
    return model.to(map_location)


def checkpoint_meta(path: str | Path) -> dict:
    """The JSON metadata saved beside the weights (config and whatever the trainer added)."""
    try:
        return json.loads((Path(path) / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArlError(
            f"checkpoint {path}: unreadable {CONFIG_FILE} ({type(e).__name__})"
        ) from None

"""TinyAgent: a decoder-only transformer with a KV cache for batched multi-turn decoding.

Read top-down as nanoGPT's model.py: attention, MLP, block, config, model. Two
forward paths share every weight: `forward(idx)` for training on whole sequences,
and `extend(ids, n_new, cache)`, which appends a ragged number of tokens to each
row of a KV cache (one sampled token, or a whole observation) and returns the
logits after each row's last new token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from arl.checks import check
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
        for name, hi in SHAPE_LIMITS.items():
            check(name, getattr(self, name), 1, hi, integer=True)
        if self.n_embd % self.n_head:
            raise ArlError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        check("dropout", self.dropout, 0.0, 1.0, open_hi=True)
        if not isinstance(self.bias, bool):
            raise ArlError(f"bias: must be true or false, got {self.bias!r}")


# upper bounds of each size: far above TinyAgent, low enough that a typo cannot exhaust memory
SHAPE_LIMITS = {
    "vocab_size": 1_000_000,
    "block_size": 65_536,
    "n_layer": 256,
    "n_head": 1024,
    "n_embd": 16_384,
}


class KVCache:
    """Per-layer keys and values for B rows, and how many positions each row holds.

    The buffers start short and double in length when a row needs more room (never
    past block_size): zeroing block_size slots for every row up front cost more than
    decoding a whole batch of short episodes. Slots past a row's length hold zeros or
    stale values and are never attended to.
    """

    def __init__(self, config: TinyAgentConfig, batch_size: int, device=None, dtype=None):
        hs = config.n_embd // config.n_head
        shape = (batch_size, config.n_head, min(64, config.block_size), hs)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)  # (B,)
        self.block_size = config.block_size

    @property
    def capacity(self) -> int:
        return self.k[0].size(2)

    def reserve(self, n: int) -> None:
        """Make room for n positions per row, at least doubling the buffers when they grow."""
        if n <= self.capacity:
            return
        new = min(max(n, 2 * self.capacity), self.block_size)
        for bufs in (self.k, self.v):
            for i, old in enumerate(bufs):
                B, nh, T, hs = old.shape
                bufs[i] = torch.cat([old, old.new_zeros(B, nh, new - T, hs)], dim=2)


@dataclass(frozen=True)
class Append:
    """Where the tokens of one `extend` call go, shared by every layer.

    The N new tokens are either all of a (B, S) block (every row appends S tokens) or,
    when rows append different numbers, only the real ones, packed into (N, C): then
    the MLPs and projections never run on padding, which at batch 64 was over half
    of the tokens. Attention alone needs the (B, S) layout, so it unpacks the queries.
    """

    rows: torch.Tensor  # (N,) the row of each new token
    cols: torch.Tensor  # (N,) its index among the row's new tokens
    slots: torch.Tensor  # (N,) its position, which is also its slot in the cache
    mask: torch.Tensor | None  # (B, 1, S, T_k) query (b, s) may attend slot t; None: all may
    T_k: int  # slots in use after the append (the longest row)
    B: int
    S: int
    packed: bool  # x is (N, C), only the real tokens; else (B, S, C)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyAgentConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x, cache: KVCache | None = None, layer: int = 0, at: Append | None = None):
        if cache is None:  # a whole (B, T) sequence: causal attention within it
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
            return self.resid_dropout(self.c_proj(y))
        # new tokens: write their keys and values at their slots, attend to the cache
        B, S, C, nh = at.B, at.S, self.n_embd, self.n_head
        q, k, v = self.c_attn(x).split(C, dim=-1)  # (B, S, C) or (N, C) each
        cache.k[layer][at.rows, :, at.slots] = k.reshape(-1, nh, C // nh)  # (N, nh, hs)
        cache.v[layer][at.rows, :, at.slots] = v.reshape(-1, nh, C // nh)
        if at.packed:  # queries back into (B, S); padding queries are zeros, their output unused
            q_pad = q.new_zeros(B, S, C)
            q_pad[at.rows, at.cols] = q
            q = q_pad
        k_all = cache.k[layer][:, :, : at.T_k]  # (B, nh, T_k, hs)
        v_all = cache.v[layer][:, :, : at.T_k]
        q = q.view(B, S, nh, C // nh).transpose(1, 2)  # (B, nh, S, hs)
        y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=at.mask)  # (B, nh, S, hs)
        y = y.transpose(1, 2)  # (B, S, nh, hs)
        y = y[at.rows, at.cols].view(-1, C) if at.packed else y.contiguous().view(B, S, C)
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

    def forward(self, x, cache=None, layer=0, at=None):
        x = x + self.attn(self.ln_1(x), cache, layer, at)
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
        end = start + n_new  # (B,)
        T_k = int(end.max())
        if T_k > cache.block_size:
            raise ArlError(f"episode exceeds block_size {cache.block_size}")
        cache.reserve(T_k)
        offs = torch.arange(S, device=ids.device)  # (S,)
        pos = start[:, None] + offs[None, :]  # (B, S) absolute positions
        mask = torch.arange(T_k, device=ids.device)[None, None, :] <= pos[:, :, None]  # (B, S, T_k)
        mask = mask[:, None]  # (B, 1, S, T_k)
        if B == 1 and S == 1:  # one query after every slot: nothing to mask (a faster kernel)
            mask = None
        if bool((n_new == S).all()):  # every row appends S tokens: no padding to skip
            rows = torch.arange(B, device=ids.device).repeat_interleave(S)  # (B*S,)
            cols = offs.repeat(B)  # (B*S,)
            at = Append(rows, cols, pos.view(-1), mask, T_k, B, S, packed=False)
            x = self.wte(ids) + self.wpe(pos)  # (B, S, C)
        else:  # ragged: run only the real tokens, packed row after row
            rows, cols = (offs[None, :] < n_new[:, None]).nonzero(as_tuple=True)  # (N,), (N,)
            if rows.numel() == 0:  # nothing to append: the cache is unchanged
                return self.lm_head.weight.new_zeros(B, self.config.vocab_size)
            at = Append(rows, cols, pos[rows, cols], mask, T_k, B, S, packed=True)
            x = self.wte(ids[rows, cols]) + self.wpe(at.slots)  # (N, C)
        for layer, block in enumerate(self.h):
            x = block(x, cache, layer, at)
        # the hidden state after each row's last new token (rows appending none: any row)
        if at.packed:
            last = (n_new.cumsum(0) - 1).clamp(min=0)  # (B,) index into the packed tokens
            x_last = x[last]  # (B, C)
        else:
            x_last = x[:, -1]  # (B, C)
        cache.lengths = end
        return self.lm_head(self.ln_f(x_last))  # (B, V)

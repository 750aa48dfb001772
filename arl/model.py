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
    """Per-layer keys and values of B rows, preallocated, and how many positions each row holds.

    Each layer's buffers are (B, nh, capacity, hs), made by torch.empty: nothing is written up
    front (zeroing block_size slots for every row cost more than decoding a whole batch of
    short episodes) and the pages past the longest row are never touched. A token's key and
    value are written in place at its position. Slot t is zeroed for every row the first time
    some row reaches it (`ready`): a row shorter than the longest then reads zeros in its
    masked slots, never uninitialized memory (0 * NaN would poison the attention output).
    """

    def __init__(
        self,
        config: TinyAgentConfig,
        batch_size: int,
        device=None,
        dtype=None,
        capacity: int | None = None,
    ):
        hs = config.n_embd // config.n_head
        cap = config.block_size if capacity is None else min(capacity, config.block_size)
        shape = (batch_size, config.n_head, cap, hs)
        self.k = [torch.empty(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.empty(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)  # (B,)
        self.block_size = config.block_size
        self.ready = 0  # slots [0, ready) hold zeros or written keys/values in every row

    @property
    def capacity(self) -> int:
        return self.k[0].size(2)

    def reserve(self, n: int) -> None:
        """Make the first n slots readable in every row (zero those never reached), or fail."""
        if n > self.capacity:
            what = "block_size" if self.capacity == self.block_size else "the cache's capacity"
            raise ArlError(f"episode exceeds {what} {self.capacity}")
        if n > self.ready:
            for buf in (*self.k, *self.v):
                buf[:, :, self.ready : n].zero_()
            self.ready = n


@dataclass(frozen=True)
class Group:
    """Rows of one `extend` call whose queries attend as one (A, S) block.

    The active rows are grouped by how many tokens they append: rows appending one token
    (the sampled one) form one group whose attention is a matrix-vector product per head;
    rows appending an observation are bucketed by length (a bucket's shortest row appends
    more than half its longest), so padding queries stay under half of each block. A group
    of more than half the rows attends as a block of all B rows (cache views, no copy).
    """

    rows: torch.Tensor | None  # (A,) cache rows in ascending order; None: all B rows (A = B)
    lo: int  # the group's tokens are x[lo:hi] of the packed (N, C) tokens, row after row
    hi: int
    flat: torch.Tensor | None  # (hi - lo,) each token's index in the (A * S) block; None: dense
    mask: torch.Tensor | None  # (A or 1, 1, S, T_k) 0 where a query may attend, else -inf
    A: int
    S: int  # the group's longest append
    T_k: int  # slots attended: the group's longest row after the append


@dataclass(frozen=True)
class Append:
    """Where the N new tokens of one `extend` call go, shared by every layer.

    Only the real tokens run through the model, packed group after group and row after row
    as (N, C): rows that append fewer tokens than the longest add no padding to the MLPs and
    projections, and rows that append none take no part at all. Attention runs per Group.
    """

    write: torch.Tensor  # (N * nh,) each (token, head)'s row in a buffer viewed (B*nh*T, hs)
    groups: tuple[Group, ...]


def attention(q, k, v, bias):
    """softmax(q k^T / sqrt(hs) + bias) v: (A, nh, S, hs) queries, (A, nh, T, hs) keys and
    values, bias (A or 1, 1, S, T) 0 or -inf (None: no mask). One query per row (S 1) is a
    matrix-vector product per head, where two batched matmuls took half of SDPA's time."""
    if q.size(2) > 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    att = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.size(-1)))  # (A,nh,1,T)
    if bias is not None:
        att.add_(bias)
    return torch.matmul(att.softmax(-1), v)  # (A, nh, 1, hs)


def group_attention(q, kb, vb, g: Group, nh: int) -> torch.Tensor:
    """(N_g, C) queries of one group against its rows' filled prefix -> (N_g, C) outputs."""
    C = q.size(1)
    hs, A, S = C // nh, g.A, g.S
    keys, values = kb[:, :, : g.T_k], vb[:, :, : g.T_k]  # (B, nh, T_k, hs) views
    if g.rows is not None:  # only the group's rows: a copy of theirs
        keys, values = keys.index_select(0, g.rows), values.index_select(0, g.rows)
    if g.flat is not None:  # queries into (A * S); padding queries are zeros, output unused
        q = q.new_zeros(A * S, C).index_copy_(0, g.flat, q)
    y = attention(q.reshape(A, S, nh, hs).transpose(1, 2), keys, values, g.mask)
    y = y.transpose(1, 2).reshape(A * S, C)  # (A * S, C)
    return y if g.flat is None else y.index_select(0, g.flat)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyAgentConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x, cache: KVCache | None = None, layer: int = 0, at: Append | None = None):
        if cache is not None:
            return self.resid_dropout(self.c_proj(self.extend(x, cache, layer, at)))
        B, T, C = x.size()  # a whole (B, T) sequence: causal attention within it
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def extend(self, x, cache: KVCache, layer: int, at: Append) -> torch.Tensor:
        """(N, C) new tokens: write their keys and values in place, attend to the filled prefix."""
        N, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=-1)  # (N, C) each
        kb, vb = cache.k[layer], cache.v[layer]  # (B, nh, T, hs)
        kb.view(-1, hs).index_copy_(0, at.write, k.reshape(N * nh, hs))
        vb.view(-1, hs).index_copy_(0, at.write, v.reshape(N * nh, hs))
        ys = [group_attention(q[g.lo : g.hi], kb, vb, g, nh) for g in at.groups]
        return ys[0] if len(ys) == 1 else torch.cat(ys)  # (N, C)


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

    def new_cache(self, batch_size: int, capacity: int | None = None) -> KVCache:
        """An empty KV cache of batch_size rows, each up to `capacity` (block_size) tokens."""
        p = self.lm_head.weight
        return KVCache(self.config, batch_size, p.device, p.dtype, capacity)

    def extend(self, ids: torch.Tensor, n_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Append n_new[b] of the (B, S) ids to row b of the cache; logits after its last one.

        Rows with n_new 0 are left unchanged and take no part (their logits are zeros).
        Returns (B, V).
        """
        B, S = ids.size()
        plan = plan_append(n_new, S, cache, self.config.n_head)
        if plan is None:  # nothing to append: the cache is unchanged
            return self.lm_head.weight.new_zeros(B, self.config.vocab_size)
        at, order, rows, cols, slots, last = plan
        whole = order is None and rows.numel() == ids.numel()  # every row appends S, in order
        tokens = ids.reshape(-1) if whole else ids[rows, cols]  # (N,)
        x = self.drop(self.wte(tokens) + self.wpe(slots))  # (N, C)
        for layer, block in enumerate(self.h):
            x = block(x, cache, layer, at)
        cache.lengths = cache.lengths + n_new
        logits = self.lm_head(self.ln_f(x[last]))  # (A, V) after each active row's last token
        if order is None:
            return logits
        return logits.new_zeros(B, logits.size(1)).index_copy_(0, order, logits)  # (B, V)


def bucket_rows(n: list[int]) -> list[list[int]]:
    """The rows that append (n[b] > 0) in attention groups: the one-token rows, then the
    others from the longest down, a new bucket where a row appends at most half of its
    bucket's longest. A bucket of more than half the rows attends as a block of all rows
    (make_group), so it takes in every bucket appending no more than it. Rows ascending."""
    ones = [b for b, k in enumerate(n) if k == 1]
    buckets, cur, top = [ones] if ones else [], [], 0
    for b in sorted((b for b, k in enumerate(n) if k > 1), key=lambda b: -n[b]):
        if cur and 2 * n[b] <= top:
            buckets.append(sorted(cur))
            cur = []
        if not cur:
            top = n[b]
        cur.append(b)
    buckets = buckets + [sorted(cur)] if cur else buckets
    big = [r for r in buckets if 2 * len(r) > len(n)]
    if not big:
        return buckets
    S = max(n[b] for b in big[0])
    fits = [r for r in buckets if max(n[b] for b in r) <= S]
    return [r for r in buckets if r not in fits] + [sorted(b for r in fits for b in r)]


def group_mask(starts: list[int], ends: list[int], S: int, T_k: int, dev):
    """(A or 1, 1, S, T_k) additive mask of a block whose rows hold starts[a] slots: query s of
    row a (position starts[a] + s) sees the slots up to it. None when nothing is masked: one
    query per row and every member row ending (ends: members only) at T_k."""
    if S == 1 and all(e == T_k for e in ends):
        return None
    first = starts[:1] if len(set(starts)) == 1 else starts  # equal starts: one shared mask
    qpos = torch.tensor(first, device=dev)[:, None] + torch.arange(S, device=dev)  # (A|1, S)
    seen = torch.arange(T_k, device=dev) <= qpos[:, :, None]  # (A|1, S, T_k)
    return torch.zeros(seen.shape, device=dev).masked_fill_(~seen, float("-inf"))[:, None]


def make_group(bucket, n, start, n_b, cols_b, lo, B: int, dev) -> Group:
    """The Group of one bucket (cache rows ascending, n_b (A,) their appends, cols_b their
    tokens' columns). A bucket of more than half the rows attends as a block of all B rows
    (views of the cache, no copy; the other rows' queries are zeros, their output unused);
    a smaller one copies its rows' keys and values."""
    ng = [n[b] for b in bucket]
    A, S, hi = len(bucket), max(ng), lo + sum(ng)
    ends = [start[b] + k for b, k in zip(bucket, ng, strict=True)]
    T_k, whole = max(ends), 2 * A > B
    rows_t = torch.tensor(bucket, device=dev)  # (A,)
    local = rows_t if whole else torch.arange(A, device=dev)  # each member's row in the block
    flat = local.repeat_interleave(n_b) * S + cols_b  # (hi - lo,) into the (A or B) x S block
    if (not whole or A == B) and all(k == S for k in ng):
        flat = None  # dense: the tokens already are the block, row-major
    starts = [start[b] for b in bucket]
    if whole and A < B:  # the other rows: any readable slots; the members' start keeps it shared
        members = set(bucket)
        starts = [start[b] if b in members else starts[0] for b in range(B)]
    mask = group_mask(starts, ends, S, T_k, dev)
    return Group(None if whole else rows_t, lo, hi, flat, mask, B if whole else A, S, T_k)


def plan_append(n_new: torch.Tensor, S: int, cache: KVCache, n_head: int):
    """Where the new tokens of (B,) n_new go: the Append every layer reads; the active rows in
    packed order (None: all B in order); each token's row, column (in the (B, S) ids) and slot;
    each active row's last token among the N. None when no row appends. Raises ArlError past
    the cache's capacity."""
    dev, B = n_new.device, n_new.numel()
    n, start = n_new.tolist(), cache.lengths.tolist()
    buckets = bucket_rows(n)
    if not buckets:
        return None
    order = [b for rows in buckets for b in rows]  # (A,) packed order of the active rows
    cache.reserve(max(start[b] + n[b] for b in order))
    order_t = torch.tensor(order, device=dev)  # (A,)
    n_o = n_new[order_t]  # (A,)
    first = n_o.cumsum(0) - n_o  # (A,) each row's first token among the N
    rows = order_t.repeat_interleave(n_o)  # (N,)
    cols = torch.arange(rows.numel(), device=dev) - first.repeat_interleave(n_o)  # (N,)
    slots = cache.lengths[rows] + cols  # (N,) each token's position, which is its slot
    heads = torch.arange(n_head, device=dev)  # (nh,)
    write = (((rows * n_head)[:, None] + heads) * cache.capacity + slots[:, None]).view(-1)
    groups, lo, a0 = [], 0, 0
    for bucket in buckets:
        A, hi = len(bucket), lo + sum(n[b] for b in bucket)
        groups.append(make_group(bucket, n, start, n_o[a0 : a0 + A], cols[lo:hi], lo, B, dev))
        lo, a0 = hi, a0 + A
    identity = order == list(range(B))
    last = n_o.cumsum(0) - 1  # (A,)
    return Append(write, tuple(groups)), None if identity else order_t, rows, cols, slots, last

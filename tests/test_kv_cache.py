"""TinyAgent's preallocated KV cache: `extend` gives the full forward's logits, whatever the
rows append (ragged, one token each, nothing), up to block_size and not one token past it."""

import pytest
import torch

from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig, bucket_rows


def small_model(block_size: int = 64) -> TinyAgent:
    torch.manual_seed(0)
    cfg = TinyAgentConfig(vocab_size=50, block_size=block_size, n_layer=2, n_embd=32, n_head=4)
    return TinyAgent(cfg).eval()


def check_against_forward(model, seqs, pieces):
    """Feed each row its pieces step by step (pieces[step][b] tokens, 0 allowed) through one
    cache; after every step, each row that appended has the full forward's last logits and
    each row that did not gets zeros. Returns the cache."""
    B = len(seqs)
    cache = model.new_cache(B)
    # what torch.empty may hand back: the cache must never read slots it has not written
    for buf in (*cache.k, *cache.v):
        buf.fill_(float("nan"))
    done = [0] * B
    for step in pieces:
        n_new = torch.tensor(step)
        S = max(1, int(n_new.max()))
        ids = torch.zeros(B, S, dtype=torch.long)
        for b in range(B):
            ids[b, : step[b]] = seqs[b][done[b] : done[b] + step[b]]
        with torch.inference_mode():
            last = model.extend(ids, n_new, cache)  # (B, V)
        for b in range(B):
            done[b] += step[b]
            if step[b] == 0:
                assert torch.equal(last[b], torch.zeros_like(last[b]))
                continue
            with torch.inference_mode():
                full, _ = model(seqs[b][None, : done[b]])
            torch.testing.assert_close(last[b], full[0, -1], atol=1e-5, rtol=1e-5)
    assert cache.lengths.tolist() == done
    return cache


def random_seqs(lengths, vocab=50, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g) for n in lengths]


def test_ragged_appends_with_idle_rows_equal_full_forward():
    """Rows append different numbers of tokens, some none, through the packed path."""
    pieces = [[5, 2, 7], [0, 4, 1], [3, 0, 6], [1, 1, 0], [0, 0, 2]]
    seqs = random_seqs([sum(p[b] for p in pieces) for b in range(3)])
    check_against_forward(small_model(), seqs, pieces)


def test_one_token_per_row_equals_full_forward():
    """The common decode step: every row appends one token, rows of different lengths (a
    mask) and then of equal lengths (no mask), and a step where only some rows append."""
    prefill = [[3, 7, 5, 1]]
    ones = [[1, 1, 1, 1]] * 4 + [[1, 0, 1, 0]] + [[1, 1, 1, 1]] * 2
    pieces = prefill + ones
    seqs = random_seqs([sum(p[b] for p in pieces) for b in range(4)], seed=2)
    check_against_forward(small_model(), seqs, pieces)
    equal = [[4, 4, 4]] + [[1, 1, 1]] * 3  # every row as long as the longest: no mask
    check_against_forward(small_model(), random_seqs([7, 7, 7], seed=3), equal)


def test_a_row_appending_nothing_is_left_unchanged():
    """A row with n_new 0 keeps its length and every key and value it had."""
    model = small_model()
    cache = check_against_forward(model, random_seqs([6, 6], seed=4), [[3, 3]])
    before = [buf[1, :, :3].clone() for buf in (*cache.k, *cache.v)]
    with torch.inference_mode():
        model.extend(torch.tensor([[7, 8, 9], [1, 2, 3]]), torch.tensor([3, 0]), cache)
    assert cache.lengths.tolist() == [6, 3]
    for buf, old in zip((*cache.k, *cache.v), before, strict=True):
        assert torch.equal(buf[1, :, :3], old)


def test_cache_fills_to_block_size_in_place_and_no_further():
    """Rows grow to exactly block_size in the buffers allocated up front (no copy), and one
    more token is a one-line ArlError that leaves the cache as it was."""
    model = small_model(block_size=16)
    pieces = [[9, 3], [4, 8], [3, 5]]  # row 0 reaches 16, row 1 16
    cache = check_against_forward(model, random_seqs([16, 16], seed=5), pieces)
    assert cache.lengths.tolist() == [16, 16] and cache.capacity == 16
    ptrs = [buf.data_ptr() for buf in (*cache.k, *cache.v)]
    with pytest.raises(ArlError, match="block_size 16"):
        model.extend(torch.tensor([[1], [0]]), torch.tensor([1, 0]), cache)
    assert cache.lengths.tolist() == [16, 16]
    assert [buf.data_ptr() for buf in (*cache.k, *cache.v)] == ptrs


def test_writes_are_in_place():
    """Appending never reallocates a buffer (no concatenation per token)."""
    model = small_model()
    cache = model.new_cache(3)
    ptrs = [buf.data_ptr() for buf in (*cache.k, *cache.v)]
    with torch.inference_mode():
        model.extend(torch.ones(3, 20, dtype=torch.long), torch.tensor([20, 5, 9]), cache)
        for _ in range(30):
            model.extend(torch.ones(3, 1, dtype=torch.long), torch.ones(3, dtype=torch.long), cache)
    assert [buf.data_ptr() for buf in (*cache.k, *cache.v)] == ptrs
    assert cache.lengths.tolist() == [50, 35, 39]


def test_a_smaller_capacity_is_enforced():
    """new_cache(B, capacity): a bound known to the caller, checked like block_size."""
    model = small_model()
    cache = model.new_cache(1, capacity=8)
    assert cache.capacity == 8
    with pytest.raises(ArlError, match="capacity 8"):
        model.extend(torch.ones(1, 9, dtype=torch.long), torch.tensor([9]), cache)


def test_grouped_attention_mixing_one_token_and_observation_rows():
    """One call mixes rows appending one token, rows appending an observation (of lengths
    bucketed apart) and an idle row: each group (the one-token rows as one query per row,
    the observation rows in their own block, a majority block over all rows) gives the full
    forward's logits."""
    pieces = [
        [3, 5, 2, 4, 6, 1, 2],  # prefill, ragged
        [1, 1, 4, 1, 1, 0, 1],  # one-token rows (a majority: all-row block), one observation
        [1, 6, 5, 0, 1, 7, 2],  # one-token rows, a bucket of 5-7 tokens, a bucket of 2
        [2, 2, 2, 2, 1, 2, 2],  # two-token rows a majority: the one-token row joins their block
        [1, 1, 1, 1, 1, 1, 1],
    ]
    seqs = random_seqs([sum(p[b] for p in pieces) for b in range(7)], seed=6)
    check_against_forward(small_model(), seqs, pieces)


def test_rows_are_bucketed_by_how_many_tokens_they_append():
    """Hand-computed groups: one-token rows; longer rows from the longest down, a new bucket at
    half the bucket's longest; a majority bucket takes in every bucket appending no more."""
    assert bucket_rows([1, 6, 5, 0, 1, 7, 2]) == [[0, 4], [1, 2, 5], [6]]
    assert bucket_rows([1, 1, 4, 1, 1, 0, 1]) == [[2], [0, 1, 3, 4, 6]]
    assert bucket_rows([2, 2, 2, 2, 1, 2, 2]) == [[0, 1, 2, 3, 4, 5, 6]]
    assert bucket_rows([0, 0]) == []

import pytest
import torch

from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig


def test_future_tokens_do_not_change_earlier_logits(tiny_model):
    V = tiny_model.config.vocab_size  # 98 since the gym's vocabulary shrank: ids below it
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 5) % V
    a, _ = tiny_model(ids)
    b, _ = tiny_model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_ragged_cached_extend_equals_full_forward(tiny_model):
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(1, 100, (n,), generator=g) for n in (9, 14, 5)]
    cache = tiny_model.new_cache(3)
    pieces = [[4, 3, 2], [6, 1, 7], [1, 2, 2]]  # each row appends its own ragged pieces
    starts = [0, 0, 0]
    for step in range(3):
        n_new = torch.tensor([pieces[b][step] for b in range(3)])
        S = int(n_new.max())
        ids = torch.zeros(3, S, dtype=torch.long)
        for b in range(3):
            ids[b, : n_new[b]] = seqs[b][starts[b] : starts[b] + n_new[b]]
        last = tiny_model.extend(ids, n_new, cache)
        for b in range(3):
            starts[b] += int(n_new[b])
            full, _ = tiny_model(seqs[b][None, : starts[b]])
            torch.testing.assert_close(last[b], full[0, -1], atol=1e-5, rtol=1e-5)
    assert cache.lengths.tolist() == [9, 14, 5]


def test_extend_rejects_overflow(tiny_model):
    cache = tiny_model.new_cache(1)
    n = tiny_model.config.block_size + 1
    with pytest.raises(ArlError, match="block_size"):
        tiny_model.extend(torch.zeros(1, n, dtype=torch.long), torch.tensor([n]), cache)


def test_config_validation():
    with pytest.raises(ArlError, match="divisible"):
        TinyAgentConfig(vocab_size=10, n_embd=30, n_head=4)
    with pytest.raises(ArlError, match="n_layer"):
        TinyAgentConfig(vocab_size=10, n_layer=0)
    assert TinyAgent(TinyAgentConfig(vocab_size=120)).num_params() > 500_000

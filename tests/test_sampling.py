import math

import pytest
import torch

from arl.sampling import sample, sampling_logprobs


def test_top_p_keeps_smallest_prefix_and_renormalizes():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logp = sampling_logprobs(probs.log(), top_p=0.8)
    # 0.5 < 0.8, 0.5 + 0.3 reaches 0.8: keep two tokens, renormalized to 5/8 and 3/8
    assert logp.exp()[0].tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0])
    logp = sampling_logprobs(probs.log(), top_p=0.81)
    assert logp.exp()[0].tolist() == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0])


def test_temperature_is_in_the_returned_logprob():
    logits = torch.tensor([[2.0, 0.0]])
    logp = sampling_logprobs(logits, temperature=2.0)
    expected = 1.0 - math.log(math.exp(1.0) + 1.0)
    assert float(logp[0, 0]) == pytest.approx(expected)
    ids, lp = sample(logits.expand(1000, 2), 2.0, 1.0, torch.Generator().manual_seed(0))
    other = -math.log(math.exp(1.0) + 1.0)
    assert torch.allclose(lp, torch.where(ids == 0, expected, other))
    assert float((ids == 0).float().mean()) == pytest.approx(math.exp(expected), abs=0.04)


def test_greedy_and_seeded_sampling():
    logits = torch.randn(8, 20, generator=torch.Generator().manual_seed(1))
    ids, lp = sample(logits, temperature=0.0)
    assert ids.tolist() == logits.argmax(-1).tolist() and lp.abs().max() == 0
    a = sample(logits, 1.0, 0.9, torch.Generator().manual_seed(3))
    b = sample(logits, 1.0, 0.9, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])

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


def test_rows_of_a_batch_are_sampled_independently():
    """One generator draws every row of a batch: the rows must still be independent draws,
    or the per-task outcomes of one evaluation would be correlated (the spread of set means
    would exceed binomial). Fails for a sampler that shares one uniform across rows."""
    from arl.rollout import episode_seed

    p = torch.linspace(0.1, 0.9, 128)  # (B,) one probability per row, as tasks differ
    logits = torch.stack([p.log(), (1 - p).log()], dim=-1)  # (B, 2)
    draws = torch.stack(
        [
            (sample(logits, 1.0, 1.0, torch.Generator().manual_seed(episode_seed(s, 0)))[0] == 0)
            for s in range(400)
        ]
    ).float()  # (seeds, B), the run_policy seeding of a batch
    means = draws.mean(1)  # (seeds,)
    binomial = float((p * (1 - p)).sum()) / 128**2
    assert 0.8 < float(means.var()) / binomial < 1.25  # 400 sets: +-0.07 is one SE of the ratio
    assert float((draws.mean(0) - p).abs().max()) < 4 * math.sqrt(0.25 / 400)
    dev = draws - p  # (seeds, B)
    lag1 = float((dev[:, 1:] * dev[:, :-1]).mean() / (p * (1 - p)).mean())
    assert abs(lag1) < 4 / math.sqrt(400 * 127)  # neighbouring rows uncorrelated

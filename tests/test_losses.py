"""Loss math against hand-worked values (torchtune style: the arithmetic is in the docstring)."""

import math

import pytest
import torch

from arl.batch import collate
from arl.bugfix.tasks import tasks_for
from arl.losses import (
    aggregate,
    dpo_loss,
    group_advantages,
    kl_k1,
    kl_k2,
    kl_k3,
    pg_loss,
    sft_loss,
    token_logprobs,
    token_weights,
)
from arl.rollout import rollout_batch

MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # lengths 2 and 4


def test_aggregation_weights_by_hand():
    """token_mean: 1/6 each. seq_mean_token_mean: 1/(2*2) and 1/(2*4). constant: 1/(2*4)."""
    w = token_weights(MASK, "token_mean")
    assert w[MASK.bool()].tolist() == pytest.approx([1 / 6] * 6)
    w = token_weights(MASK, "seq_mean_token_mean")
    assert w[0, :2].tolist() == pytest.approx([0.25, 0.25])
    assert w[1].tolist() == pytest.approx([0.125] * 4)
    w = token_weights(MASK, "constant")
    assert w[MASK.bool()].tolist() == pytest.approx([1 / 8] * 6)
    assert token_weights(MASK, "constant", normalizer=100.0).sum() == pytest.approx(0.06)
    assert (token_weights(MASK, "token_mean") * (1 - MASK)).abs().sum() == 0


def test_aggregate_and_sft_loss_values():
    """values 1..8: token_mean = (1+2+5+6+7+8)/6 = 29/6; seq mean = ((1+2)/2 + 26/4)/2 = 4."""
    values = torch.arange(1.0, 9.0).view(2, 4)
    assert aggregate(values, MASK, "token_mean") == pytest.approx(29 / 6)
    assert aggregate(values, MASK, "seq_mean_token_mean") == pytest.approx(4.0)
    assert sft_loss(-values, MASK) == pytest.approx(29 / 6)


def test_pg_loss_each_token_gets_its_episode_advantage():
    """A = (+1, -0.5); logp all -1: loss = -(2*1*-1 + 4*-0.5*-1)/6 = -(−2+2)/6 = 0."""
    logp = -torch.ones(2, 4)
    assert pg_loss(logp, torch.tensor([1.0, -0.5]), MASK) == pytest.approx(0.0, abs=1e-7)
    assert pg_loss(logp, torch.tensor([1.0, 0.0]), MASK) == pytest.approx(2 / 6)


def test_group_advantages_problem_4():
    """One success in 8, std-normalized: sqrt(7) = 2.65 and -1/sqrt(7) = -0.378."""
    r = torch.tensor([1.0] + [0.0] * 7)
    adv = group_advantages(r, "mean", std=True)
    assert float(adv[0]) == pytest.approx(math.sqrt(7), rel=1e-4)
    assert float(adv[1]) == pytest.approx(-1 / math.sqrt(7), rel=1e-4)
    assert group_advantages(r, "mean").tolist() == pytest.approx([0.875] + [-0.125] * 7)
    loo = group_advantages(r, "loo")  # success: 1 - 0 = 1; failure: 0 - 1/7
    assert loo.tolist() == pytest.approx([1.0] + [-1 / 7] * 7)
    assert group_advantages(torch.ones(8), "mean", std=True).abs().max() == 0


def test_dpo_loss_reference_values():
    """Equal ratios: log 2. Margin +4 at beta 0.5: -log sigmoid(2) = 0.1269; -4: 2.1269."""
    z = torch.zeros(1)
    assert float(dpo_loss(z, z, z, z, beta=0.5)) == pytest.approx(math.log(2), abs=1e-4)
    four = torch.tensor([4.0])
    assert float(dpo_loss(four, z, z, z, beta=0.5)) == pytest.approx(0.1269, abs=1e-4)
    assert float(dpo_loss(z, four, z, z, beta=0.5)) == pytest.approx(2.1269, abs=1e-4)


def test_kl_estimators_problem_5():
    """log ratios -0.2, 0.1, -0.5: k1 0.200, k2 0.050, k3 0.0435."""
    lr = torch.tensor([-0.2, 0.1, -0.5])
    assert float(kl_k1(lr).mean()) == pytest.approx(0.200, abs=5e-4)
    assert float(kl_k2(lr).mean()) == pytest.approx(0.050, abs=5e-4)
    assert float(kl_k3(lr).mean()) == pytest.approx(0.0435, abs=5e-4)
    assert (kl_k3(torch.linspace(-3, 3, 50)) >= 0).all()


def test_untrained_agent_policy_gradient_is_exactly_zero(tiny_model):
    """Chapter 5: reward 0 everywhere -> every advantage 0 -> every gradient exactly 0."""
    trajs = rollout_batch(tiny_model, tasks_for("train")[:8], seed=0)
    assert all(t.reward == 0 for t in trajs)
    batch = collate(trajs)
    adv = group_advantages(batch.rewards, "mean")
    loss = pg_loss(token_logprobs(tiny_model, batch), adv, batch.action_mask)
    loss.backward()
    grads = [p.grad for p in tiny_model.parameters()]
    assert all(g is not None and g.abs().max() == 0 for g in grads)
    tiny_model.zero_grad()  # while the SFT loss on the same batch does move the weights
    sft_loss(token_logprobs(tiny_model, batch), batch.action_mask).backward()
    assert any(p.grad.abs().max() > 0 for p in tiny_model.parameters())

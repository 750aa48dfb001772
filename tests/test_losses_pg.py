"""Policy-gradient loss pieces against hand-worked values (the arithmetic is in each docstring)."""

import math

import pytest
import torch

from arl.batch import collate
from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError
from arl.losses import (
    clipped_surrogate,
    degenerate_groups,
    entropy_controller,
    gspo_token_loss,
    kl_to_reference,
    loss_weights,
    ppo_token_loss,
    sequence_log_ratio,
    token_logprobs,
    token_weights,
    truncated_is_weights,
)
from arl.rollout import rollout_batch

pytestmark = pytest.mark.usefixtures("one_thread")


MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # lengths 2 and 4


def test_per_trajectory_total_weight_against_length_problem_1():
    """Row totals for L = (2, 4), B = 2, L_max = 8.

    token_mean: L_i / 6 = (1/3, 2/3), grows with length. seq_mean_token_mean: 1/B = (1/2, 1/2),
    so a token of the short row weighs 1/4 and one of the long row 1/8. constant: L_i / (B L_max)
    = (2/16, 4/16), every token 1/16 whatever the batch.
    """
    tot = lambda mode: loss_weights(MASK, mode, 2, 6, 8).sum(1).tolist()  # noqa: E731
    assert tot("token_mean") == pytest.approx([1 / 3, 2 / 3])
    assert tot("seq_mean_token_mean") == pytest.approx([0.5, 0.5])
    assert tot("constant") == pytest.approx([0.125, 0.25])
    w = loss_weights(MASK, "constant", 2, 6, 8)
    assert set(w[MASK.bool()].tolist()) == {1 / 16}
    assert (loss_weights(MASK, "seq_mean_token_mean", 2, 6, 8) * (1 - MASK)).abs().sum() == 0


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "constant"])
def test_global_weights_over_microbatches_equal_the_one_batch_weights(mode):
    """Rows split 1 + 1 with the step's global counts give exactly the whole batch's weights."""
    whole = token_weights(MASK, mode, normalizer=2 * 8 if mode == "constant" else None)
    parts = torch.cat([loss_weights(MASK[i : i + 1], mode, 2, 6, 8) for i in range(2)])
    torch.testing.assert_close(parts, whole)
    local = torch.cat([token_weights(MASK[i : i + 1], mode) / 2 for i in range(2)])
    if mode == "token_mean":  # per-microbatch mean: 1/(2*2) and 1/(2*4), not 1/6 (Problem 2)
        assert local[0, 0] == pytest.approx(0.25) and local[1, 0] == pytest.approx(0.125)


def _surrogate_grad(ratio: float, adv: float, low=0.2, high=0.28):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, active = clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([[adv]]), low, high)
    loss.sum().backward()
    return float(loss.detach()), float(logp.grad), bool(active)


def test_clipping_at_both_bounds():
    """A > 0: r = 1.5 is past 1 + 0.28: loss -1.28 A, zero gradient; r = 1.2 passes, d/dlogp = -rA.

    A < 0: r = 0.5 is below 1 - 0.2, loss 0.8 |A| and zero gradient. The wrong sides are never
    clipped: A > 0 with r = 0.5 and A < 0 with r = 1.5 keep their gradient (the min is pessimistic).
    """
    loss, g, active = _surrogate_grad(1.5, 2.0)
    assert loss == pytest.approx(-2.56) and g == 0.0 and active
    loss, g, active = _surrogate_grad(1.2, 2.0)
    assert loss == pytest.approx(-2.4) and g == pytest.approx(-2.4) and not active
    loss, g, active = _surrogate_grad(0.5, -1.0)
    assert loss == pytest.approx(0.8) and g == 0.0 and active
    loss, g, active = _surrogate_grad(0.5, 1.0)
    assert g == pytest.approx(-0.5) and not active
    loss, g, active = _surrogate_grad(1.5, -1.0)
    assert loss == pytest.approx(1.5) and g == pytest.approx(1.5) and not active


def test_clip_higher_is_asymmetric():
    """r = 1.25, A = 1: inside [0.8, 1.28] (gradient -1.25), clipped under symmetric 0.2."""
    assert _surrogate_grad(1.25, 1.0)[1] == pytest.approx(-1.25)
    assert _surrogate_grad(1.25, 1.0, 0.2, 0.2)[1] == 0.0
    assert _surrogate_grad(0.75, -1.0, 0.2, 0.28)[1] == 0.0  # the lower bound stays at 0.8


def test_truncated_importance_weight_cap():
    """pi_prox / mu = 3, 0.5, 1 with C = 2: weights 2, 0.5, 1; only the first is capped; no grad."""
    prox = torch.log(torch.tensor([[0.6, 0.1, 0.3]])).requires_grad_()
    mu = torch.log(torch.tensor([[0.2, 0.2, 0.3]]))
    w, capped = truncated_is_weights(prox, mu, cap=2.0)
    assert w.tolist()[0] == pytest.approx([2.0, 0.5, 1.0])
    assert capped.tolist() == [[True, False, False]]
    assert not w.requires_grad


def test_kl_to_reference_problem_5_values():
    """log ref - log pi = -0.2, 0.1, -0.5: means k1 0.200, k2 0.050, k3 0.0435."""
    logp = torch.tensor([0.2, -0.1, 0.5]) - 1.0
    ref = torch.full((3,), -1.0)
    assert float(kl_to_reference(logp, ref, "k1").mean()) == pytest.approx(0.200, abs=5e-4)
    assert float(kl_to_reference(logp, ref, "k2").mean()) == pytest.approx(0.050, abs=5e-4)
    assert float(kl_to_reference(logp, ref, "k3").mean()) == pytest.approx(0.0435, abs=5e-4)


def test_entropy_controller_moves_toward_target():
    """coef 0.01, lr 0.1: entropy 0.1 < target 0.3 -> 0.03; entropy 0.5 -> 0 (never negative)."""
    assert entropy_controller(0.01, 0.1, 0.3, 0.1) == pytest.approx(0.03)
    assert entropy_controller(0.01, 0.5, 0.3, 0.1) == 0.0


def test_degenerate_groups():
    r = torch.tensor([[0.0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [0.5, 0.5, 0.5, 0.4]])
    assert degenerate_groups(r).tolist() == [True, True, False, False]


def test_token_logprobs_match_the_sampler_at_its_temperature(tiny_model):
    """At temperature 0.7 the trainer's log-probs equal the stored sampler log-probs (mu)."""
    batch = collate(rollout_batch(tiny_model, tasks_for("train")[:4], seed=0, temperature=0.7))
    m = batch.action_mask.bool()
    logp, ent = token_logprobs(tiny_model, batch, with_entropy=True, temperature=0.7)
    torch.testing.assert_close(logp[m], batch.old_logp[m], atol=1e-5, rtol=1e-5)
    logp1, _ = token_logprobs(tiny_model, batch, with_entropy=True, temperature=1.0)
    torch.testing.assert_close(logp1, token_logprobs(tiny_model, batch))
    assert (logp1[m] - batch.old_logp[m]).abs().max() > 1e-3  # T=1 is not what was sampled
    assert (ent >= 0).all()


def test_ppo_token_loss_by_hand():
    """One episode, A = 2, three tokens with r = pi/pi_prox = 1.5, 0.5, 1 (clip 0.2 / 0.28):
    surrogate -min(rA, clip(r)A) = -2.56 (clipped), -1, -2. mu is 4x below pi_prox on token 0,
    so its IS weight min(4, C=2) = 2: -5.12. Token 2's reference is 2x the policy: k3 =
    (2 - 1) - log 2 = 0.3069, times beta 0.1. An entropy of 1 nat per token at coef 0.5: -0.5.
    Total: -5.62, -1.5, -2.5 + 0.03069."""
    prox = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))
    mu = prox - torch.tensor([[math.log(4.0), 0.0, 0.0]])
    ref = logp + torch.tensor([[0.0, 0.0, math.log(2.0)]])
    loss, clipped, capped = ppo_token_loss(
        logp,
        prox,
        mu,
        torch.tensor([2.0]),
        clip_low=0.2,
        clip_high=0.28,
        is_cap=2.0,
        ref_logp_BT=ref,
        kl="k3",
        kl_beta=0.1,
        entropy_BT=torch.ones(1, 3),
        entropy_coef=0.5,
    )
    k3 = 1 - math.log(2.0)
    torch.testing.assert_close(loss, torch.tensor([[-5.62, -1.5, -2.5 + 0.1 * k3]]))
    assert clipped.tolist() == [[True, False, False]] and capped.tolist() == [[True, False, False]]
    plain, clipped, _ = ppo_token_loss(
        logp, prox, mu, torch.tensor([2.0]), clip=False, is_correction=False
    )
    torch.testing.assert_close(plain, torch.tensor([[-3.0, -1.0, -2.0]]))  # -r A, no cap
    assert not clipped.any()


# GSPO's tiny batch: 5 episodes x 3 tokens, pi_prox = 0, log pi - log pi_prox per token (LR)
GSPO_MASK = torch.tensor(
    [[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]], dtype=torch.float64
)
GSPO_LR = torch.tensor(
    [
        [0.001, 0.0, 5.0],  # log s = 0.0005: the masked-out 5.0 is not part of the mean
        [-0.0012, 0.0, 0.0],  # log s = -0.0004
        [0.0002, 0.0, 0.0],  # log s = 0.0001
        [0.0, 0.0, 0.0],  # log s = 0
        [-0.002, 0.0, 0.0],  # log s = -0.001
    ],
    dtype=torch.float64,
)
GSPO_ADV = torch.tensor([1.0, -2.0, 1.0, -1.0, 1.0], dtype=torch.float64)


def test_sequence_log_ratio_is_the_mean_over_masked_tokens():
    """(0.001 + 0) / 2, (-0.0012 + 0 + 0) / 3, 0.0002 / 2, 0 / 1, -0.002 / 2; a row with no
    masked token gets 0 (s = 1), not 0 / 0."""
    prox = torch.zeros(5, 3, dtype=torch.float64)
    got = sequence_log_ratio(GSPO_LR, prox, GSPO_MASK)
    torch.testing.assert_close(
        got, torch.tensor([0.0005, -0.0004, 0.0001, 0.0, -0.001], dtype=torch.float64)
    )
    assert float(sequence_log_ratio(GSPO_LR[:1], prox[:1], torch.zeros(1, 3))[0]) == 0.0


def test_gspo_token_loss_by_hand():
    """clip 3e-4 / 4e-4: s in [0.9997, 1.0004] passes. l_i = -min(s A, clip(s) A):
    0: s = e^0.0005 = 1.000500125 > 1.0004, A = +1: clipped high, l = -1.0004.
    1: s = e^-0.0004 = 0.999600080 < 0.9997, A = -2: min(-1.99920016, -1.9994), l = +1.9994.
    2: s = e^0.0001 = 1.000100005 inside, A = +1: l = -1.000100005; mu is 4x below pi_prox
       on token 0, so its IS weight is min(4, C=2) = 2: -2.00020001 there (capped).
    3: s = 1, A = -1: l = +1.
    4: s = e^-0.001 = 0.999000500 < 0.9997 but A = +1: min picks s A (unclipped), l = -0.9990005.
    Every policy token carries its episode's l (times its IS weight), every other token 0.
    Clip off: -s A on every episode (0: -1.000500125, 1: +1.99920016)."""
    prox = torch.zeros(5, 3, dtype=torch.float64)
    mu = prox.clone()
    mu[2, 0] = -math.log(4.0)
    loss, clipped, capped = gspo_token_loss(GSPO_LR, prox, mu, GSPO_ADV, GSPO_MASK)
    l = [-1.0004, 1.9994, -1.000100005, 1.0, -0.9990005]  # noqa: E741
    want = torch.tensor([[v, v, v] for v in l], dtype=torch.float64) * GSPO_MASK
    want[2, 0] = 2 * l[2]
    torch.testing.assert_close(loss, want, rtol=0, atol=1e-9)
    assert clipped.tolist() == [
        [True, True, False],  # episode 0's policy tokens (high side)
        [True, True, True],  # episode 1's (low side)
        [False] * 3,
        [False] * 3,
        [False] * 3,  # below the floor but A > 0: the unclipped branch is the smaller
    ]
    assert capped.nonzero().tolist() == [[2, 0]]
    plain, clipped, _ = gspo_token_loss(GSPO_LR, prox, prox, GSPO_ADV, GSPO_MASK, clip=False)
    torch.testing.assert_close(plain[:2, 0], torch.tensor([-1.000500125, 1.99920016]).double())
    assert not clipped.any()


def test_gspo_gradient_flows_through_the_sequence_ratio_with_its_sign():
    """Weights 1 / |y_i| per policy token (GSPO's per-episode mean; x B of seq_mean_token_mean):
    the total is sum_i l_i, and d l_i / d log pi(y_t) = -A_i s_i / |y_i| on each policy token of
    an unclipped episode, 0 on a clipped one and on every other token:
    0, 1: clipped, 0. 2: -1.000100005 / 2 (A > 0: descent raises its log-probs).
    3: +1 (A < 0: lowers them). 4: -0.9990005 / 2 (below the floor, A > 0: still learns)."""
    logp = GSPO_LR.clone().requires_grad_(True)
    prox = torch.zeros(5, 3, dtype=torch.float64)
    loss, _, _ = gspo_token_loss(logp, prox, prox, GSPO_ADV, GSPO_MASK, is_correction=False)
    (loss * GSPO_MASK / GSPO_MASK.sum(1, keepdim=True)).sum().backward()
    g = [0.0, 0.0, -1.000100005 / 2, 1.0, -0.9990005 / 2]
    want = torch.tensor([[v, v, v] for v in g], dtype=torch.float64) * GSPO_MASK
    torch.testing.assert_close(logp.grad, want, rtol=0, atol=1e-9)


def test_gspo_refuses_per_token_advantages():
    with pytest.raises(ArlError, match="one advantage per episode"):
        gspo_token_loss(GSPO_LR, GSPO_LR, GSPO_LR, GSPO_LR, GSPO_MASK)

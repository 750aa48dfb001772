"""Length-bucketed forwards (issue 31): the plan, the assembled log-probs, the gradients.

token_logprobs runs the model on length buckets and assembles the padded (B, T) result; every
loss is taken on that tensor, so its normalizer is the whole batch's (Problem 2). The
gradients must equal the padded forward's up to float summation order (1e-6).
"""

import random
from functools import partial

import pytest
import torch

from arl.batch import BUCKET_TOKENS, bucket_plan, collate, default_budget, row_extents
from arl.experiments.problems.mutations import shifted_mask
from arl.losses import AGGREGATIONS, dpo_loss, episode_logp, sft_loss, token_logprobs
from arl.model import TinyAgent, TinyAgentConfig
from arl.train import pg
from arl.train.pg_config import PGConfig
from arl.types import ENV, POLICY, PROMPT, Trajectory

TOL = 1e-6


pytestmark = pytest.mark.usefixtures("one_thread")


def episode(rng: random.Random, n: int, ends_on_policy: bool = False) -> Trajectory:
    """A random episode of n tokens: a prompt, then alternating policy calls and observations."""
    owners, owner = [PROMPT] * 3, POLICY
    while len(owners) < n:
        owners += [owner] * rng.randint(2, 6)
        owner = ENV if owner == POLICY else POLICY
    owners = owners[:n]
    if ends_on_policy:
        owners[-2:] = [POLICY, POLICY]
    ids = [rng.randrange(1, 40) for _ in range(n)]
    logps = [-rng.random() * 3 if o == POLICY else 0.0 for o in owners]
    return Trajectory("t", tuple(ids), tuple(owners), tuple(logps), (), rng.random())


def episodes(B: int = 48, seed: int = 0) -> list[Trajectory]:
    """B episodes of 5 to 60 tokens: one padded forward of them is mostly padding."""
    rng = random.Random(seed)
    return [episode(rng, rng.randint(5, 60)) for _ in range(B)]


def tiny(seed: int = 0) -> TinyAgent:
    torch.manual_seed(seed)
    return TinyAgent(TinyAgentConfig(vocab_size=40, block_size=64, n_layer=2, n_head=2, n_embd=32))


def flat_grad(model: TinyAgent) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def grad_of(model: TinyAgent, loss_fn) -> torch.Tensor:
    """The gradient of loss_fn() (which runs backward itself when it returns None)."""
    model.zero_grad(set_to_none=True)
    loss = loss_fn()
    if loss is not None:
        loss.backward()
    return flat_grad(model).clone()


def assert_same_grad(g_pad: torch.Tensor, g_bucket: torch.Tensor) -> None:
    assert g_pad.norm() > 0
    assert float((g_pad - g_bucket).abs().max()) <= TOL
    assert float((g_pad - g_bucket).norm() / g_pad.norm()) <= TOL


# --- the plan ---------------------------------------------------------------------------------


def test_plan_by_hand():
    """Extents (3, 10, 5, 10, 2), budget 20. Longest first: rows 1 and 3 (2 x 10 = 20 fits,
    a third row would make 30); then row 2 (width 5) with rows 0 and 4 (3 x 5 = 15)."""
    assert bucket_plan([3, 10, 5, 10, 2], 20) == [([1, 3], 10), ([0, 2, 4], 5)]
    assert bucket_plan([50, 3], 20) == [([0], 50), ([1], 3)]  # a row over the budget: alone
    assert bucket_plan([4, 4, 4], 1000) == [([0, 1, 2], 4)]
    with pytest.raises(ValueError, match="budget"):
        bucket_plan([3], 0)


@pytest.mark.parametrize("budget", [1, 7, 64, 200, 10_000])
def test_plan_covers_every_row_once_within_budget_sorted(budget):
    rng = random.Random(budget)
    extents = [rng.randint(1, 80) for _ in range(100)]
    plan = bucket_plan(extents, budget)
    rows = [i for bucket, _ in plan for i in bucket]
    assert sorted(rows) == list(range(100))  # every row exactly once
    widths = [w for _, w in plan]
    assert widths == sorted(widths, reverse=True)  # longest buckets first
    for bucket, width in plan:
        assert bucket == sorted(bucket)
        assert width == max(extents[i] for i in bucket)  # padded only to its own longest row
        assert len(bucket) * width <= budget or len(bucket) == 1
    assert bucket_plan(extents, budget) == plan  # deterministic
    if budget == 10_000:
        assert len(plan) == 1


def test_extents_cover_the_mask_past_the_real_positions():
    """Problem 28's shifted mask marks the position after a row's last policy target, which is
    padding when the row is shorter than the batch: the forward must cover it."""
    rng = random.Random(1)
    trajs = [episode(rng, 12, ends_on_policy=True), episode(rng, 30)]
    batch = collate(trajs)
    assert row_extents(batch).tolist() == [11, 29]
    shifted = shifted_mask(batch)
    assert shifted.action_mask[0, 11] == 1  # one past row 0's 11 real positions
    assert row_extents(shifted).tolist() == [12, 29]


# --- the assembled log-probs ------------------------------------------------------------------


@pytest.mark.parametrize("budget", [1, 64, 300, BUCKET_TOKENS, 100_000])
def test_logprobs_equal_the_padded_forward_on_every_real_position(budget):
    model, batch = tiny().eval(), collate(episodes())
    real = torch.arange(batch.input_ids.size(1))[None] < batch.lengths[:, None]  # (B, T)
    assert 0.3 < float(real.float().mean()) < 0.7  # a padded forward is mostly padding here
    with torch.no_grad():
        lp_pad, ent_pad = token_logprobs(model, batch, True, 0.7, budget=None)
        lp, ent = token_logprobs(model, batch, True, 0.7, budget=budget)
    torch.testing.assert_close(lp[real], lp_pad[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(ent[real], ent_pad[real], rtol=0, atol=1e-5)
    assert float(lp[~real].abs().max()) == 0 and float(ent[~real].abs().max()) == 0
    assert torch.equal(token_logprobs(model, batch, False, 0.7, budget=budget), lp)  # no entropy


def test_the_default_budget_buckets_on_cpu_only():
    """CPU: BUCKET_TOKENS (what the sweep measured); an accelerator: the padded forward."""
    assert default_budget(torch.device("cpu")) == BUCKET_TOKENS
    assert default_budget(torch.device("cuda")) is None
    model, batch = tiny().eval(), collate(episodes())
    with torch.no_grad():
        assert torch.equal(
            token_logprobs(model, batch), token_logprobs(model, batch, budget=BUCKET_TOKENS)
        )
        assert not torch.equal(
            token_logprobs(model, batch), token_logprobs(model, batch, budget=None)
        )


def test_problem_28_position_in_the_padding_gets_the_padded_forward_value():
    rng = random.Random(2)
    batch = shifted_mask(collate([episode(rng, 12, ends_on_policy=True), episode(rng, 30)]))
    model = tiny().eval()
    with torch.no_grad():
        lp_pad = token_logprobs(model, batch, budget=None)
        lp = token_logprobs(model, batch, budget=12)  # 2 x 29 > 12: one bucket per row
    on = batch.action_mask.bool()
    torch.testing.assert_close(lp[on], lp_pad[on], rtol=0, atol=1e-5)
    assert lp[0, 11] != 0


# --- gradients: a bucketed step equals the padded step ----------------------------------------


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("budget", [64, BUCKET_TOKENS])
def test_sft_gradient_equals_the_padded_step(mode, budget):
    model, batch = tiny(), collate(episodes())

    def loss(b):
        return lambda: sft_loss(token_logprobs(model, batch, budget=b), batch.action_mask, mode)

    assert_same_grad(grad_of(model, loss(None)), grad_of(model, loss(budget)))


@pytest.mark.parametrize("nll", [0.0, 1.0])
def test_dpo_gradient_equals_the_padded_step(nll):
    """Chosen rows then rejected rows, a reference one seed away, the NLL term on or off."""
    model, ref_model = tiny(0), tiny(1).eval()
    trajs = episodes(40)
    batch, P = collate(trajs), 20
    with torch.no_grad():
        ref = episode_logp(token_logprobs(ref_model, batch, budget=None), batch.action_mask)

    def loss(b):
        def fn():
            logp = token_logprobs(model, batch, budget=b)
            seq = episode_logp(logp, batch.action_mask)  # (2P,)
            out = dpo_loss(seq[:P], seq[P:], ref[:P], ref[P:], beta=0.5)
            return out + nll * sft_loss(logp[:P], batch.action_mask[:P])

        return fn

    assert_same_grad(grad_of(model, loss(None)), grad_of(model, loss(BUCKET_TOKENS)))


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("micro", [0, 7])
def test_pg_gradient_equals_the_padded_step(monkeypatch, mode, micro):
    """accumulate_policy_gradient as the PG trainer runs it: PPO surrogate, importance weights,
    KL to a reference and the entropy bonus, whole batch or microbatches of 7 rows."""
    model, batch = tiny(), collate(episodes())
    torch.manual_seed(3)
    adv = torch.randn(batch.input_ids.size(0))  # (B,)
    with torch.no_grad():
        ref = token_logprobs(tiny(1).eval(), batch, budget=None)
        prox = token_logprobs(model, batch, budget=None) + 0.1 * torch.randn(ref.shape)
    config = PGConfig(aggregation=mode, kl="k3", kl_beta=0.1, kl_in="loss")
    stats = {}

    def step(b):
        def fn():
            monkeypatch.setattr(pg, "token_logprobs", partial(token_logprobs, budget=b))
            stats[b] = pg.accumulate_policy_gradient(
                model, batch, adv, config, prox, ref, entropy_coef=0.01, microbatch_size=micro
            )

        return fn

    assert_same_grad(grad_of(model, step(None)), grad_of(model, step(64)))
    for key in ("loss", "entropy", "clip_frac", "capped_frac"):
        assert stats[64][key] == pytest.approx(stats[None][key], rel=1e-5, abs=1e-7)


def test_a_per_bucket_normalizer_would_be_caught():
    """The tolerance tells: averaging each bucket's own token mean (a normalizer per bucket,
    Problem 2's bug) moves the gradient far past 1e-6."""
    model, batch = tiny(), collate(episodes())
    mask = batch.action_mask

    def per_bucket():
        logp = token_logprobs(model, batch, budget=64)
        plan = bucket_plan(row_extents(batch).tolist(), 64)
        return sum(sft_loss(logp[rows], mask[rows]) for rows, _ in plan) / len(plan)

    g_pad = grad_of(model, lambda: sft_loss(token_logprobs(model, batch, budget=None), mask))
    with pytest.raises(AssertionError):
        assert_same_grad(g_pad, grad_of(model, per_bucket))

"""Evaluation statistics of the sampled distribution come from the sampler's own logits.

rollout_batch records, per sampled policy token, the entropy of the temperature-1 policy at
that position (Trajectory.entropy_T); action_entropy reads it instead of a second forward pass.
"""

import math
import tempfile

import pytest
import torch

from arl.batch import collate
from arl.bugfix.tasks import tasks_for
from arl.eval import metrics
from arl.eval.metrics import action_entropy, evaluate
from arl.losses import token_logprobs
from arl.rollout import rollout_batch, scripted_rollout
from arl.text import END
from arl.types import ENV, POLICY, PROMPT, Trajectory


@pytest.fixture()
def peaked(tiny_model):
    """The tiny model with sharper logits: entropies far from uniform, tempering moves them."""
    with torch.no_grad():
        tiny_model.lm_head.weight.mul_(8.0)
    return tiny_model


def recomputed(model, trajs, temperature=1.0):
    """(batch, entropies (B, T)) from a second forward pass over the finished episodes."""
    batch = collate(trajs)
    with torch.no_grad():
        _, ent = token_logprobs(model, batch, with_entropy=True, temperature=temperature)
    return batch, ent


def stored(trajs, T):
    """The recorded entropies as a (B, T) grid of predicted positions (target t+1 at t)."""
    out = torch.zeros(len(trajs), T, dtype=torch.float64)
    for b, tr in enumerate(trajs):
        out[b, : len(tr) - 1] = torch.tensor(tr.entropy_T[1:], dtype=torch.float64)
    return out


@pytest.mark.parametrize("use_cache", [True, False])
def test_stored_entropies_equal_the_recomputed_ones_on_every_policy_token(peaked, use_cache):
    trajs = rollout_batch(peaked, tasks_for("heldout")[:6], seed=3, use_cache=use_cache)
    assert len({len(t) for t in trajs}) > 1  # ragged rows
    assert all(t.entropy_T is not None for t in trajs)
    batch, ent = recomputed(peaked, trajs)
    m = batch.action_mask.bool()
    assert m.sum() > 30
    got = stored(trajs, ent.shape[1])
    torch.testing.assert_close(got[m], ent[m].double(), atol=1e-6, rtol=1e-6)
    assert float(got[~m].abs().max()) == 0.0  # 0 on every other token
    assert float(ent[m].std()) > 0.05  # the values vary: an alignment slip would show


def test_at_temperature_07_it_is_the_temperature_1_policy_entropy_at_the_visited_states(peaked):
    trajs = rollout_batch(peaked, tasks_for("train")[:6], seed=1, temperature=0.7, top_p=0.9)
    batch, ent1 = recomputed(peaked, trajs, temperature=1.0)
    _, ent07 = recomputed(peaked, trajs, temperature=0.7)
    m = batch.action_mask.bool()
    got = stored(trajs, ent1.shape[1])[m]
    torch.testing.assert_close(got, ent1[m].double(), atol=1e-6, rtol=1e-6)
    assert float((ent1[m] - ent07[m]).abs().mean()) > 0.05  # not the tempered one's entropy
    # the sampled distribution's entropy is estimated by -log mu of what was sampled, not this
    assert float(got.mean()) > float(-batch.old_logp[m].mean()) + 0.05


def test_evaluate_reads_the_sampler_entropies_without_a_forward_pass(peaked, monkeypatch):
    calls = []
    forward = type(peaked).forward

    def counting(self, *a, **k):
        calls.append(a[0].shape)
        return forward(self, *a, **k)

    tasks = tasks_for("train")[:5]
    monkeypatch.setattr(type(peaked), "forward", counting)
    m, trajs = evaluate(peaked, tasks, samples=2, seed=4)
    assert calls == []  # rollouts extend the cache; evaluation ran no full forward
    ent, first = action_entropy(peaked, trajs, recompute=True)
    assert len(calls) == 1  # the second pass this replaces: one batch of 10 episodes
    assert m["action_entropy"] == pytest.approx(ent, abs=1e-6)
    assert m["first_call_entropy"] == pytest.approx(first, abs=1e-6)
    assert abs(ent - first) > 1e-3  # the two statistics are not the same number


def test_first_call_entropy_is_the_first_policy_token_by_hand():
    # prompt, 2 policy tokens, env, 1 policy token; entropies only where the policy acted
    def episode(ents):
        return Trajectory(
            "t",
            (1, 2, 3, 4, 5, 6),
            (PROMPT, PROMPT, POLICY, POLICY, ENV, POLICY),
            (0.0,) * 6,
            ((2, 4), (5, 6)),
            0.0,
            entropy_T=(0.0, 0.0, *ents[:2], 0.0, ents[2]),
        )

    trajs = [episode((0.5, 1.0, 1.5)), episode((2.0, 0.25, 0.75))]
    ent, first = action_entropy(None, trajs)  # no model: nothing is recomputed
    assert ent == pytest.approx((0.5 + 1.0 + 1.5 + 2.0 + 0.25 + 0.75) / 6)
    assert first == pytest.approx((0.5 + 2.0) / 2)


def test_unsampled_episodes_are_recomputed_and_only_they(peaked, monkeypatch):
    tasks = tasks_for("train")[:3]
    sampled = rollout_batch(peaked, tasks, seed=2)
    scripted = [scripted_rollout("oracle", t, seed=0) for t in tasks[:2]]
    forced = rollout_batch(peaked, tasks[:1], seed=2, opening=["read", END])
    assert all(t.entropy_T is None for t in scripted + forced)  # not every token was sampled
    mixed = sampled + scripted + forced
    rows = []
    monkeypatch.setattr(
        metrics, "collate", lambda trs, **k: rows.append(len(trs)) or collate(trs, **k)
    )
    ent, first = action_entropy(peaked, mixed)
    assert rows == [3]  # the scripted and forced episodes only
    want = action_entropy(peaked, mixed, recompute=True)
    assert (ent, first) == pytest.approx(want, abs=1e-6)


def test_the_field_changes_no_equality_and_checks_its_length(peaked):
    (a,) = rollout_batch(peaked, tasks_for("train")[:1], seed=0)
    b = Trajectory(a.task, a.ids_T, a.owners_T, a.logprobs_T, a.calls, a.reward, a.outcome)
    assert a == b and repr(a) == repr(b) and b.entropy_T is None
    assert all(0 <= h <= math.log(peaked.config.vocab_size) + 1e-5 for h in a.entropy_T)
    with pytest.raises(ValueError):
        Trajectory("t", (1, 2), (0, 1), (0.0, 0.0), ((1, 2),), 0.0, entropy_T=(0.0,))


def test_a_real_model_records_them_too():
    pytest.importorskip("transformers")
    from arl.hf.policy import load_hf
    from arl.hf.tiny import build_tiny

    with tempfile.TemporaryDirectory() as d:
        policy = load_hf(str(build_tiny(d, arch="qwen2")))
        trajs = rollout_batch(policy, tasks_for("heldout")[:4], seed=3)
        batch, ent = recomputed(policy, trajs)
    m = batch.action_mask.bool()
    assert m.sum() > 20
    torch.testing.assert_close(stored(trajs, ent.shape[1])[m], ent[m].double(), atol=1e-4, rtol=0)

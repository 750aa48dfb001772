"""RFT, expert iteration and DPO: the mechanisms of Sections 15.3 and 15.4 on small cases."""

import copy
import random

import pytest
import torch

from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError
from arl.rollout import scripted_rollout
from arl.train.dpo import DPOConfig, build_pairs, dpo_train
from arl.train.rft import (
    RFTConfig,
    accepts,
    cap_per_task,
    dedup_by_actions,
    expert_iteration,
    gradient_identity,
    kept_diagnostics,
)


def episodes(policy, n_tasks=6, seeds=(0, 1)):
    return [
        scripted_rollout(policy, t, seed=s) for t in tasks_for("train")[:n_tasks] for s in seeds
    ]


def test_gradient_identity_holds_on_a_mixed_batch(tiny_model):
    batch = episodes("oracle", 3, (0,)) + episodes("blind", 6, (5, 6))
    assert 0 < sum(t.passed for t in batch) < len(batch)
    out = gradient_identity(tiny_model, batch)
    assert out["relative_error"] < 1e-5
    assert out["fitted_ratio"] == pytest.approx(out["kept_token_ratio"], rel=1e-4)
    assert out["cosine_pg_sft"] == pytest.approx(1.0, abs=1e-5)
    assert out["cosine_mean_baseline_sft"] < 0.9999  # the baseline adds the push-down term
    kept = [t for t in batch if t.passed]
    ratio = sum(t.n_action_tokens for t in kept) / sum(t.n_action_tokens for t in batch)
    assert out["kept_token_ratio"] == pytest.approx(ratio)


def test_dedup_and_cap():
    eps = episodes("oracle", 2, (0, 0, 0))  # same seed (same accumulator name): 3 copies per task
    assert len(dedup_by_actions(eps)) == 2
    capped = cap_per_task(eps, 2, random.Random(0))
    assert len(capped) == 4 and {t.task for t in capped} == {t.task for t in eps}
    diag = kept_diagnostics(eps, tasks_for("train")[:3])
    assert diag["kept"] == 6 and diag["distinct_action_sequences"] == 2
    assert diag["tasks_never_kept"] == [tasks_for("train")[2].name]
    assert diag["first_calls"] == {"read": 6} and diag["family_share"]["init"] == 1.0


def test_filters_hidden_versus_public():
    hack = episodes("hardcode", 1, (0,))[0]
    assert accepts(hack, "public") and not accepts(hack, "hidden")


@pytest.mark.parametrize("policy, moves", [("oracle", True), ("hardcode", False)])
def test_expert_iteration_trains_on_kept_episodes_only(tiny_model, monkeypatch, policy, moves):
    """Sampling is replaced by a scripted policy: oracle episodes are kept, hacks are not."""
    import arl.train.rft as rft

    tasks = tasks_for("train")[:4]
    fake = lambda model, ts, n, seed, temperature, env_config=None: [  # noqa: E731
        scripted_rollout(policy, t, seed=seed) for t in ts for _ in range(n)
    ]
    monkeypatch.setattr(rft, "run_policy", fake)
    before = [p.clone() for p in tiny_model.parameters()]
    config = RFTConfig(rounds=2, samples_per_task=2, steps_per_round=2, batch_size=4)
    history = expert_iteration(tiny_model, tasks, config)
    assert [h["round"] for h in history] == [0, 1]
    assert all(h["sampled"] == 8 and h["kept"] == (8 if moves else 0) for h in history)
    changed = any(
        not torch.equal(a, b) for a, b in zip(before, tiny_model.parameters(), strict=True)
    )
    assert changed == moves
    public = expert_iteration(
        tiny_model,
        tasks,
        RFTConfig(rounds=1, samples_per_task=1, filter="public", steps_per_round=1),
    )
    assert public[0]["kept"] == 4 and public[0]["hack_share"] == (0.0 if moves else 1.0)


def test_build_pairs_pairs_each_success_with_a_failure_of_its_task():
    eps = episodes("oracle", 3, (0,)) + episodes("blind", 2, (1, 2, 3))
    pairs = build_pairs(eps, random.Random(0))
    assert all(c.task == r.task and c.passed and not r.passed for c, r in pairs)
    wins_with_losses = {t.task for t in eps if not t.passed}
    assert len(pairs) == sum(t.passed and t.task in wins_with_losses for t in eps)


def test_dpo_moves_rejected_down_and_starts_at_zero(tiny_model):
    eps = episodes("oracle", 2, (0,)) + episodes("random_wellformed", 2, (1, 2, 3, 4))
    pairs = build_pairs(eps, random.Random(0))
    assert pairs
    reference = copy.deepcopy(tiny_model)
    history = dpo_train(tiny_model, reference, pairs, DPOConfig(steps=15, lr=3e-3))
    assert history[0]["chosen_delta"] == 0.0 and history[0]["rejected_delta"] == 0.0
    assert history[0]["loss"] == pytest.approx(0.6931, abs=1e-4)  # log 2 at equal ratios
    assert history[-1]["rejected_delta"] < history[-1]["chosen_delta"]
    assert history[-1]["reward_accuracy"] == 1.0
    nll = dpo_train(
        copy.deepcopy(reference), reference, pairs, DPOConfig(steps=15, lr=3e-3, nll_weight=1.0)
    )
    assert nll[-1]["chosen_delta"] > history[-1]["chosen_delta"]  # the NLL term anchors chosen


def test_dpo_without_its_preference_term_is_sft_on_the_chosen_episodes(tiny_model):
    """preference=False: the loss is nll_weight x the chosen episodes' token-mean NLL (checked
    by hand at step 0), and the rejected episodes take no part (swapping them changes nothing)."""
    from arl.batch import collate
    from arl.losses import sft_loss, token_logprobs

    eps = episodes("oracle", 2, (0,)) + episodes("random_wellformed", 2, (1, 2, 3, 4))
    pairs = build_pairs(eps, random.Random(0))
    reference = copy.deepcopy(tiny_model)
    config = DPOConfig(steps=3, lr=3e-3, nll_weight=0.5)
    chosen = collate([c for c, _ in pairs] + [r for _, r in pairs])
    P = len(pairs)
    with torch.no_grad():
        by_hand = 0.5 * float(
            sft_loss(token_logprobs(reference, chosen)[:P], chosen.action_mask[:P])
        )
    a = dpo_train(copy.deepcopy(reference), reference, pairs, config, preference=False)
    assert a[0]["loss"] == pytest.approx(by_hand, rel=1e-6)
    assert a[-1]["chosen_delta"] > 0  # the NLL term raises the chosen episodes
    swapped = [(c, pairs[(i + 1) % P][1]) for i, (c, _) in enumerate(pairs)]
    b = dpo_train(copy.deepcopy(reference), reference, swapped, config, preference=False)
    assert [r["loss"] for r in a[:-1]] == pytest.approx([r["loss"] for r in b[:-1]], rel=1e-5)
    with pytest.raises(ArlError, match="nll_weight"):
        dpo_train(copy.deepcopy(reference), reference, pairs, DPOConfig(), preference=False)

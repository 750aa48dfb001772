import math

import pytest
import torch

from arl.batch import collate
from arl.bugfix.tasks import tasks_for
from arl.eval.metrics import action_entropy, summarize, token_accounting
from arl.experiments.ch15_probes import op_choice
from arl.rollout import rollout_batch, scripted_rollout
from arl.types import POLICY


def test_summarize_by_hand():
    eps = [scripted_rollout(p, tasks_for("train")[0], seed=0) for p in ("oracle", "hardcode")]
    m = summarize(eps)
    assert m["pass_rate"] == 0.5 and m["public_pass_rate"] == 1.0
    assert m["public_hidden_gap"] == 0.5 and m["read_fraction"] == 0.5
    assert m["mean_turns"] == (4 + 2) / 2 and m["hack_rate"] == 0.5 and m["episodes"] == 2


def test_action_entropy_is_on_policy_tokens_only(tiny_model):
    from arl.train.sft import SFTConfig, sft_train

    demos = [scripted_rollout("oracle", t, seed=0) for t in tasks_for("train")]
    sft_train(tiny_model, demos, SFTConfig(steps=15, lr=1e-2), hook_every=0)  # not uniform now
    trajs = rollout_batch(tiny_model, tasks_for("train")[:3], seed=0)
    ent, first = action_entropy(tiny_model, trajs, batch_size=2)
    batch = collate(trajs)
    with torch.no_grad():
        logits, _ = tiny_model(batch.input_ids)
    logp = torch.log_softmax(logits, -1)
    h = -(logp.exp() * logp).sum(-1)  # (B, T)
    m = batch.action_mask.bool()
    assert ent == pytest.approx(float(h[m].mean()), rel=1e-5)
    assert abs(ent - float(h[batch.owners >= 0].mean())) > 0.05  # all positions differ
    firsts = [int((batch.owners[b] == POLICY).nonzero()[0]) for b in range(len(trajs))]
    assert first == pytest.approx(
        float(torch.stack([h[b, t] for b, t in enumerate(firsts)]).mean())
    )
    assert 0 < ent <= math.log(tiny_model.config.vocab_size) + 1e-5


def test_token_accounting_counts_predicted_positions(vocab):
    eps = [scripted_rollout("oracle", t, seed=0) for t in tasks_for("train")[:2]]
    acc = token_accounting(eps, len(vocab))
    assert acc["predicted_positions"] == sum(len(t) - 1 for t in eps)
    assert acc["action_positions"] == sum(t.n_action_tokens for t in eps)
    parts = ("action", "observation", "template", "prompt")
    assert sum(acc[f"{p}_positions"] for p in parts) == acc["predicted_positions"]


def test_op_choice_separates_a_wrong_op_from_a_broken_call_and_from_no_edit():
    tasks = tasks_for("train")

    def div_after_a_broken_edit(history, rng):  # read, a malformed edit, then always `div`
        turn = ["read", "<end>"], ["edit", "bogus", "<end>"], ["edit", "div", "<end>"]
        return list(turn[len(history) - 1]) if len(history) <= 3 else ["submit", "<end>"]

    eps = [scripted_rollout(div_after_a_broken_edit, t, seed=0) for t in tasks]
    assert all(e.outcome.malformed == 1 for e in eps)  # the broken call is not an edit
    share_div = sum(t.family == "div" for t in tasks) / len(tasks)
    assert op_choice(eps) == pytest.approx(
        {"right_op": share_div, "wrong_op": 1 - share_div, "no_edit": 0.0}
    )
    oracle = [scripted_rollout("oracle", t, seed=0) for t in tasks]
    assert op_choice(oracle) == {"right_op": 1.0, "wrong_op": 0.0, "no_edit": 0.0}
    never = [scripted_rollout(lambda h, r: ["submit", "<end>"], t, seed=0) for t in tasks[:3]]
    assert op_choice(never)["no_edit"] == 1.0

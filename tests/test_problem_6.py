"""Problem 6: the KL term's gradient split from the policy gradient's (checked against autograd
on a tiny model), the per-seed effects from hand-made histories, and a --quick measure."""

import copy
import math

import pytest
import torch

from arl.batch import collate
from arl.bugfix.tasks import tasks_for
from arl.experiments.problems import kl as p6
from arl.experiments.problems.common import Ctx
from arl.losses import kl_k3, token_logprobs, token_weights
from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import rollout_batch, vocab_of
from arl.train.common import frozen_logprobs
from arl.train.pg import TIMING_KEYS, accumulate_policy_gradient, train_pg
from arl.train.pg_config import PGConfig
from arl.train.pg_losses import LOSSES
from arl.train.pg_metrics import grad_parts, grad_split, update_metrics

# --- the gradient split ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(one_thread):
    """A random 1-layer TinyAgent, four of its episodes, and a reference it has drifted from."""
    torch.manual_seed(0)
    model = TinyAgent(TinyAgentConfig(vocab_size=len(vocab_of()), n_layer=1, n_embd=16, n_head=2))
    batch = collate(rollout_batch(copy.deepcopy(model), tasks_for("train")[:4], seed=0))
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model, batch, frozen_logprobs(ref, batch)


def flat_grad(model: TinyAgent) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def backward(model, batch, adv, ref_logp, config, kl_grad=False):
    """A fresh copy's accumulated gradient (P,) and the accumulator's statistics."""
    m = copy.deepcopy(model)
    out = accumulate_policy_gradient(m, batch, adv, config, ref_logp=ref_logp, kl_grad=kl_grad)
    return flat_grad(m), out


def test_the_kl_gradient_is_split_from_the_policy_gradient_as_autograd_computes_it(tiny):
    """With kl_grad, the accumulator's KL norm is that of the KL term's gradient computed on its
    own with autograd (beta * token-mean k3 of the same tokens), its PG norm that of the loss
    without a reference; the two add up to the gradient it leaves, which is the one it leaves
    without kl_grad (measuring changes nothing); over two microbatches."""
    model, batch, ref_logp = tiny
    adv = torch.tensor([1.0, -0.5, 0.25, -0.75])
    config = PGConfig(kl="k3", kl_beta=0.2, microbatch_size=2)
    g, out = backward(model, batch, adv, ref_logp, config, kl_grad=True)
    g_plain, plain = backward(model, batch, adv, ref_logp, config)
    assert torch.equal(g, g_plain) and "kl/grad_norm" not in plain
    g_pg, _ = backward(model, batch, adv, None, config)  # no reference: the PG term alone
    # the KL term alone, by hand: beta * sum_t k3(log ref - log pi) / policy tokens
    m = copy.deepcopy(model)
    logp = token_logprobs(m, batch)  # (B, T)
    w = token_weights(batch.action_mask, "token_mean")  # (B, T) 1 / tokens on policy tokens
    (0.2 * (w * kl_k3(ref_logp - logp)).sum()).backward()
    g_kl = flat_grad(m)
    assert torch.allclose(g, g_pg + g_kl, atol=1e-6)
    assert out["kl/grad_norm"] == pytest.approx(float(g_kl.norm()), rel=1e-4)
    assert out["pg/grad_norm"] == pytest.approx(float(g_pg.norm()), rel=1e-4)
    cos = float(g_kl @ g_pg / (g_kl.norm() * g_pg.norm()))
    assert out["kl/grad_cos"] == pytest.approx(cos, abs=1e-4)
    assert 0 < out["kl/grad_norm"] and 0 < out["pg/grad_norm"]
    # zero advantages: the policy gradient is 0, so all of the gradient is the KL term's
    _, zero = backward(model, batch, torch.zeros(4), ref_logp, config, kl_grad=True)
    assert zero["pg/grad_norm"] == pytest.approx(0.0, abs=1e-7)
    assert zero["kl/grad_norm"] == pytest.approx(float(g_kl.norm()), rel=1e-4)
    # no KL in the loss (kl off, or in the reward): nothing to split
    _, off = backward(model, batch, adv, None, PGConfig(), kl_grad=True)
    assert "kl/grad_norm" not in off


def test_grad_parts_and_the_steps_ratio_by_hand():
    """grad_parts on two parameters: kl = ([3, 4], [0]) and total ([3, 4], [2]), so the policy
    gradient is ([0, 0], [2]): norms 5 and 2, cosine 0; the step's ratio is the ratio of its
    updates' mean norms, None when the policy gradient is 0."""
    total = [torch.tensor([3.0, 4.0]), torch.tensor([2.0])]
    kl = [torch.tensor([3.0, 4.0]), torch.tensor([0.0])]
    assert grad_parts(total, kl) == {"kl/grad_norm": 5.0, "pg/grad_norm": 2.0, "kl/grad_cos": 0.0}
    anti = grad_parts([torch.tensor([0.0])], [torch.tensor([1.0])])  # pg = -1: against the KL
    assert anti["kl/grad_cos"] == -1.0 and anti["pg/grad_norm"] == 1.0
    first = {"kl/grad_norm": 0.3, "pg/grad_norm": 0.6, "kl/grad_cos": -0.2}
    assert grad_split(first)["kl/grad_ratio"] == pytest.approx(0.5)
    assert grad_split({**first, "pg/grad_norm": 0.0})["kl/grad_ratio"] is None
    assert grad_split({"entropy": 1.0}) == {}
    # update_metrics: the split is the first update's (the trainer splits only that one), the
    # other statistics the first pass's means (entropy 1 and 3 -> 2)
    base = {"loss": 0.0, "kl/mu_k3": 0.0, "kl/mu_absq99": 0.0, "clip_frac": 0.0}
    base |= {"mismatch/mean": 0.0, "mismatch/p999": 0.0, "capped_frac": 0.0}
    stats = [
        base | {"entropy": 1.0, "kl/grad_norm": 0.1, "pg/grad_norm": 0.4, "kl/grad_cos": -0.5},
        base | {"entropy": 3.0},
    ]
    u = update_metrics(stats, [1.0, 1.0], 2, LOSSES["ppo"])
    assert u["kl/grad_ratio"] == pytest.approx(0.25) and u["kl/grad_cos"] == pytest.approx(-0.5)
    assert u["entropy"] == pytest.approx(2.0)
    assert "kl/grad_ratio" not in update_metrics(stats[1:], [1.0], 1, LOSSES["ppo"])


def test_splitting_the_gradient_changes_nothing_a_run_does(tiny):
    """train_pg with kl_grad logs the split on every step (0 at step 1, where the policy is the
    reference) and otherwise runs exactly as without it: the same records and weights."""
    model, _, _ = tiny
    config = PGConfig(steps=3, tasks_per_step=2, group_size=4, kl="k3", kl_beta=0.2, lr=1e-3)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    split = train_pg(a, config, tasks_for("train")[:4], kl_grad=True)
    plain = train_pg(b, config, tasks_for("train")[:4])
    extra = {"kl/grad_norm", "pg/grad_norm", "kl/grad_cos", "kl/grad_ratio"}
    drop = extra | set(TIMING_KEYS)
    assert [{k: v for k, v in r.items() if k not in drop} for r in split] == [
        {k: v for k, v in r.items() if k not in drop} for r in plain
    ]
    assert all(extra <= set(r) for r in split) and not any(extra & set(r) for r in plain)
    assert split[0]["kl/grad_norm"] == 0.0  # step 1's first update: pi = pi_ref
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


# --- the per-seed effects from hand-made histories ----------------------------------------------


def arm(passes, probe=None, ref_kl=None, ratio=None) -> list[dict]:
    """An arm's history: evaluations at steps 0, 10, ... (pass, probe KL), then a step record
    per value of ref_kl and ratio (steps 1, 2, ...)."""
    evals = [
        {"step": 10 * i, p6.PASS: p, **({p6.PROBE: probe[i]} if probe else {})}
        for i, p in enumerate(passes)
    ]
    steps = [
        {"step": i + 1, "kl/ref_k3": k, p6.RATIO: r}
        for i, (k, r) in enumerate(zip(ref_kl or [], ratio or [], strict=True))
    ]
    return steps + evals


def test_the_effects_from_hand_made_histories():
    """Eight evaluations (quarters of two) and eight steps (halves of four) per arm:
    - pass: last-quarter means 0.8 (no KL), 0.5 (beta 0.2), 0.7 (beta 0.05): effect 0.3,
      small_beta 0.2;
    - binds: beta 0.2's ratio, one step None (its PG gradient 0: left out), so the second half
      of its seven values is 0.5, 2, 1.5, 1.0 -> median 1.25;
    - reset: KL to the start, median of the last quarter of evaluations: reset 0.3 and 0.5 ->
      0.4, fixed 0.1 -> +0.3; reset_local: the per-step KL to its own reference, median over
      the second half, reset 0.01 against fixed 0.04 -> -0.03;
    - kl_flat: beta 0.2's probe, third quarter 0.08, 0.08, last 0.1, 0.1 -> |0.1 - 0.08| / 0.1."""
    flat = [0.4] * 6
    runs = {
        p6.NONE: arm(flat + [0.8, 0.8], probe=[0, 1, 2, 3, 4, 5, 6, 7]),
        p6.BIND: arm(
            flat + [0.5, 0.5],
            probe=[0, 0.02, 0.04, 0.06, 0.08, 0.08, 0.1, 0.1],
            ref_kl=[0.1] * 8,
            ratio=[9, 9, 9, None, 0.5, 2, 1.5, 1.0],
        ),
        p6.BETA: arm(
            flat + [0.6, 0.8],
            probe=[0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
            ref_kl=[0.5, 0.5, 0.5, 0.5, 0.03, 0.04, 0.04, 0.05],
            ratio=[0.1] * 8,
        ),
        p6.RESET: arm(
            flat + [0.7, 0.7],
            probe=[0, 0.1, 0.1, 0.2, 0.2, 0.2, 0.3, 0.5],
            ref_kl=[0.5, 0.5, 0.5, 0.5, 0.0, 0.01, 0.01, 0.02],
            ratio=[0.1] * 8,
        ),
    }
    e = p6.effects(runs)
    assert e["effect"] == pytest.approx(0.3) and e["small_beta"] == pytest.approx(0.2)
    assert e["binds"] == pytest.approx(1.25)
    assert e["reset"] == pytest.approx(0.4 - 0.1)
    assert e["reset_local"] == pytest.approx(0.01 - 0.04)
    assert e["kl_flat"] == pytest.approx(0.2)
    # the reset arm anchored like the fixed one (its probe KL the same): no drift effect
    anchored = {**runs, p6.RESET: arm(flat + [0.7, 0.7], probe=[0] + [0.1] * 7)}
    anchored[p6.RESET] += [r for r in runs[p6.RESET] if "kl/ref_k3" in r]
    assert p6.effects(anchored)["reset"] == pytest.approx(0.0)
    assert p6.late_median([{"step": 1}], p6.RATIO) == 0.0  # no ratio at all: 0, not NaN


def test_plateau_and_reference_share_by_hand():
    # 8 values: quarters of 2; third quarter median 0.03, last 0.04 -> |0.04 - 0.03| / 0.04
    h = [{"step": i, p6.PROBE: v} for i, v in enumerate([0, 0, 0.01, 0.02, 0.03, 0.03, 0.04, 0.04])]
    assert p6.plateau_change(h, p6.PROBE) == pytest.approx(0.25)
    flat = [{"step": i, p6.PROBE: 0.02} for i in range(8)]
    assert p6.plateau_change(flat, p6.PROBE) == 0.0
    # a spike in the last quarter does not move its median (its mean would move 66x)
    spiky = [{"step": i, p6.PROBE: v} for i, v in enumerate([0.02] * 11 + [4.0])]
    assert p6.plateau_change(spiky, p6.PROBE) == 0.0
    steps = [{"time/ref": 1.0, "time/train": 4.0}, {"time/ref": 2.0, "time/train": 8.0}]
    assert p6.ref_share(steps) == pytest.approx(0.25)
    assert p6.ref_share([{"time/train": 4.0}]) == 0.0  # no reference, nothing to save


def test_the_probe_kl_is_zero_to_itself_and_k3_to_another_model(tiny):
    """kl_to: 0 from a model to itself; to another, the mean k3 over the episodes' policy
    tokens of log ref - log model, computed here from the two models' log-probs."""
    model, batch, _ = tiny
    trajs = rollout_batch(copy.deepcopy(model), tasks_for("train")[:3], seed=1)
    assert p6.kl_to(model, model, trajs) == 0.0
    other = copy.deepcopy(model)
    with torch.no_grad():
        next(other.parameters()).mul_(1.5)
    b = collate(trajs)
    on = b.action_mask.bool()
    want = kl_k3((frozen_logprobs(other, b) - frozen_logprobs(model, b))[on]).mean()
    assert p6.kl_to(model, other, trajs) == pytest.approx(float(want)) and float(want) > 0


# --- the quick measure ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick(private_cache):
    return p6.problem_6(Ctx(number=6, quick=True, seed=0))


def test_the_quick_measure_gives_every_claims_effect(quick, tmp_path):
    """--quick on seed 0: every claim's per-seed effect is a finite number, and equals the one
    computed from the kept histories; the start is the early SFT checkpoint (evaluated at step
    0 of every arm alike); each KL arm logs its gradient ratio every step, the no-KL arm none;
    every arm logs the probe KL to the start at each evaluation (0 at step 0)."""
    res, detail = quick
    keys = [k for k, _ in p6.PROBLEM_6.claims]
    assert keys == ["effect", "binds", "small_beta", "reset", "reset_local", "kl_flat"]
    assert all(math.isfinite(res[k]) for k in keys)
    assert p6.effects(res["history"]) == pytest.approx({k: res[k] for k in keys})
    h = res["history"]
    assert set(h) == set(p6.ARMS)
    starts = {n: [r for r in rows if r[p6.PASS] is not None][0] for n, rows in h.items()}
    assert {r["step"] for r in starts.values()} == {0}
    assert len({r[p6.PASS] for r in starts.values()}) == 1 == len({res["start_pass"]})
    for name, rows in h.items():
        ratios = [r[p6.RATIO] for r in rows if r["step"] > 0 and r.get("kl/ref_k3") is not None]
        if name == p6.NONE:
            assert all(r.get(p6.RATIO) is None and r.get("kl/ref_k3") is None for r in rows)
        else:
            assert len(ratios) == 4 and all(x is None or x >= 0 for x in ratios)
        probes = [(r["step"], r[p6.PROBE]) for r in rows if r.get(p6.PROBE) is not None]
        assert [s for s, _ in probes] == [0, 2, 4] and probes[0][1] == 0.0
    assert "gradient ratio" in detail
    path = tmp_path / "problem-6.png"
    p6.PROBLEM_6.draw([{"seed": 0, **res}], path)
    assert path.stat().st_size > 1000

"""The policy-gradient trainer: accumulation invariance, parameters changed, determinism, resume."""

import copy
import json
import math
from dataclasses import replace

import pytest
import torch

from arl.batch import collate
from arl.bugfix import default_vocab
from arl.bugfix.tasks import tasks_for
from arl.cli.train import parse_overrides
from arl.errors import ArlError, Diverged
from arl.experiments.problems.mutations import per_microbatch_mean
from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import rollout_batch
from arl.train import pg, pg_groups
from arl.train.bases import BaseConfig, weak_base_data
from arl.train.checkpoint import STATE_FILE, checkpoints, load_checkpoint
from arl.train.pg import TIMING_KEYS, accumulate_policy_gradient, advantages, train_pg
from arl.train.pg_config import PGConfig, make_config, minimal_reinforce
from arl.train.pg_metrics import is_finite_history
from arl.train.sft import SFTConfig, sft_train

TASKS = tasks_for("train")[::3]  # 7 tasks, every family
SMALL = PGConfig(steps=3, tasks_per_step=4, group_size=4, lr=1e-3, filter_cooldown=1)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run ~10x faster on one thread when the cores are shared."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def weak(one_thread):
    """A tiny weak base: 150 SFT steps on blind and random play (format, some passes)."""
    torch.manual_seed(0)
    model = TinyAgent(
        TinyAgentConfig(
            vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
        )
    )
    sft_train(model, weak_base_data(BaseConfig()), SFTConfig(steps=150, lr=1e-2), hook_every=0)
    return model


def _strip(history):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in history]


def _flat_grad(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_config_errors_name_the_field():
    with pytest.raises(ArlError, match="group_size"):
        PGConfig(group_size=0)
    with pytest.raises(ArlError, match="aggregation"):
        PGConfig(aggregation="sum")
    with pytest.raises(ArlError, match="bogus"):
        make_config({"bogus": 1})
    with pytest.raises(ArlError, match="lr: expected a number"):
        parse_overrides(["lr=fast"])
    with pytest.raises(ArlError, match="clip: expected true or false"):
        make_config({"clip": "yes"})
    assert parse_overrides(["clip=false", "group_size=4", "kl=k3"]) == {
        "clip": False,
        "group_size": 4,
        "kl": "k3",
    }


def test_advantages_problem_4_through_the_config():
    """One success in 8, std division: sqrt 7 = 2.65 and -1/sqrt 7 = -0.378; loo: 1 and -1/7."""
    r = torch.tensor([[1.0] + [0.0] * 7])
    a = advantages(r, PGConfig(baseline="mean", std_norm=True))[0]
    assert float(a[0]) == pytest.approx(2.6458, abs=1e-3)
    assert float(a[1]) == pytest.approx(-0.378, abs=1e-3)
    assert advantages(r, PGConfig())[0].tolist() == pytest.approx([1.0] + [-1 / 7] * 7)


def test_an_ungraded_episode_gets_no_advantage_and_leaves_the_baseline():
    """An infrastructure failure is no reward: [1, 0, (failed), 0] with loo is the group [1, 0, 0]:
    1 - 0 = 1, 0 - 1/2 = -0.5; the failed episode's advantage is 0. All failed: all 0."""
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    ok = torch.tensor([[True, True, False, True], [False] * 4])
    a = advantages(r, PGConfig(), ok)
    assert a[0].tolist() == pytest.approx([1.0, -0.5, 0.0, -0.5]) and a[1].tolist() == [0.0] * 4
    assert torch.equal(
        advantages(r, PGConfig(), torch.ones(2, 4, dtype=torch.bool)), advantages(r, PGConfig())
    )


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "constant"])
def test_accumulation_identity(weak, aggregation):
    """Global normalizer: 1, 3 or 5 episodes per microbatch give the one-batch gradient (cosine 1,
    equal norms). Each microbatch normalized by itself then averaged: a different gradient."""
    model = copy.deepcopy(weak)
    batch = collate(rollout_batch(model, TASKS + TASKS[:3], seed=3))  # 10 episodes
    adv = torch.randn(10, generator=torch.Generator().manual_seed(0))
    config = PGConfig(aggregation=aggregation)

    def grad(**kw):
        model.zero_grad(set_to_none=True)
        accumulate_policy_gradient(model, batch, adv, config, **kw)
        return _flat_grad(model)

    g = grad(microbatch_size=0)
    for micro in (1, 3, 5):
        gm = grad(microbatch_size=micro)
        assert float(torch.nn.functional.cosine_similarity(g, gm, dim=0)) == pytest.approx(
            1, abs=1e-5
        )
        assert float(gm.norm()) == pytest.approx(float(g.norm()), rel=1e-4)
    if aggregation != "constant":  # the constant normalizer is invariant by construction
        bad = grad(microbatch_size=3, weights=per_microbatch_mean)
        cos = float(torch.nn.functional.cosine_similarity(g, bad, dim=0))
        assert cos < 0.9999 or abs(float(bad.norm() / g.norm()) - 1) > 0.01


def test_parameters_change_after_a_step_and_not_with_zero_advantage(weak):
    model = copy.deepcopy(weak)
    before = [p.detach().clone() for p in model.parameters()]
    hist = train_pg(model, replace(SMALL, steps=1, staleness=0, filter_cooldown=0), TASKS)
    assert hist[0]["tasks_with_grad"] > 0  # some group had mixed outcomes
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # every reward equal -> every advantage 0 -> Adam's update is exactly 0
    model = copy.deepcopy(weak)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    batch = collate(rollout_batch(model, TASKS[:4], seed=0))
    before = [p.detach().clone() for p in model.parameters()]
    accumulate_policy_gradient(model, batch, torch.zeros(4), PGConfig())
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_seed_determinism(weak):
    config = replace(SMALL, steps=2, minibatches=2)
    a = _strip(train_pg(copy.deepcopy(weak), config, TASKS))
    b = _strip(train_pg(copy.deepcopy(weak), config, TASKS))
    c = _strip(train_pg(copy.deepcopy(weak), replace(config, seed=1), TASKS))
    assert a == b
    assert a != c


def test_exact_resume_after_an_interruption(weak, tmp_path):
    """Crash after step 3's metrics (before its checkpoint), resume from step 2: same metrics."""
    config = replace(
        SMALL,
        steps=4,
        save_every=1,
        staleness=2,
        minibatches=2,
        kl="k3",
        entropy_coef=0.01,
        target_entropy=0.5,
        dynamic_sampling=True,
    )
    whole_model = copy.deepcopy(weak)
    whole = _strip(train_pg(whole_model, config, TASKS))

    def crash(step, model):
        if step == 3:
            raise KeyboardInterrupt
        return None

    run = replace(config, out=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        train_pg(copy.deepcopy(weak), run, TASKS, hook=crash, hook_every=1)
    assert [p.name for p in checkpoints(tmp_path / "run")] == ["ckpt-000001", "ckpt-000002"]
    resumed_model = copy.deepcopy(weak)  # the weights come from the checkpoint, not from here
    resumed = _strip(train_pg(resumed_model, replace(run, resume=True), TASKS))
    assert [r["step"] for r in resumed] == [3, 4]
    assert resumed == whole[2:]
    for a, b in zip(whole_model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(a, b)
    import json

    logged = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    assert [r["step"] for r in logged] == [1, 2, 3, 4]  # step 3 of the crashed run dropped once
    assert _strip(logged) == whole
    ckpt = checkpoints(tmp_path / "run")[-1]
    assert ckpt.name == "ckpt-000004"
    reloaded = load_checkpoint(ckpt)  # what `arl eval CKPT` loads
    assert all(
        torch.equal(a, b)
        for a, b in zip(reloaded.parameters(), resumed_model.parameters(), strict=True)
    )


def test_a_crash_while_writing_keeps_the_last_good_checkpoint(weak, tmp_path, monkeypatch):
    calls = {"n": 0}
    real_save = torch.save

    def flaky_save(obj, path):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        real_save(obj, path)

    monkeypatch.setattr(torch, "save", flaky_save)
    run = replace(SMALL, steps=2, save_every=1, out=str(tmp_path))
    with pytest.raises(ArlError, match="cannot write checkpoint .*disk full"):
        train_pg(copy.deepcopy(weak), run, TASKS)
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-000001"]
    assert not list(tmp_path.glob(".tmp-*"))  # the failed checkpoint left no temp folder
    load_checkpoint(checkpoints(tmp_path)[0])
    monkeypatch.setattr(torch, "save", real_save)
    hist = train_pg(copy.deepcopy(weak), replace(run, resume=True), TASKS)
    assert [r["step"] for r in hist] == [2]


def test_staleness_shows_in_the_sampler_mismatch(weak):
    """k = 0: mu equals pi_prox (up to the KV cache's rounding). k = 2: step 1 samples with the
    current weights, step 3 with weights two updates old, so mu and pi_prox differ."""
    fresh = train_pg(copy.deepcopy(weak), replace(SMALL, staleness=0), TASKS)
    assert max(r["kl/mu_k3"] for r in fresh) < 1e-6
    stale = train_pg(copy.deepcopy(weak), replace(SMALL, staleness=2, lr=1e-2), TASKS)
    assert stale[0]["kl/mu_k3"] < 1e-6
    assert stale[2]["kl/mu_k3"] > 1e-4
    cold = train_pg(copy.deepcopy(weak), replace(SMALL, staleness=0, temperature=0.7), TASKS)
    assert max(r["kl/mu_k3"] for r in cold) < 1e-6  # the trainer scores at the sampler's T


def test_dynamic_sampling_refills_degenerate_groups(weak):
    config = replace(SMALL, steps=2, dynamic_sampling=True, max_refills=2, filter_cooldown=0)
    hist = train_pg(copy.deepcopy(weak), config, TASKS)
    for r in hist:
        assert r["degenerate_frac_final"] <= r["degenerate_frac"]
        if r["degenerate_frac"] > 0:
            assert r["episodes_sampled"] > config.episodes_per_step
        assert r["tasks_with_grad"] <= round((1 - r["degenerate_frac_final"]) * 4)


def test_metrics_are_finite_and_named(weak):
    hist = train_pg(copy.deepcopy(weak), replace(SMALL, steps=2, kl="k1", kl_in="reward"), TASKS)
    keys = {
        "reward",
        "pass_rate",
        "public_pass_rate",
        "public_hidden_gap",
        "hacks_caught",
        "entropy",
        "degenerate_frac",
        "tasks_with_grad",
        "len_success_p50",
        "len_failure_p90",
        "truncated_frac",
        "kl/ref_k3",
        "kl/ref_absq99",
        "clip_frac",
        "capped_frac",
        "grad_norm",
    }
    assert keys <= set(hist[0])
    assert is_finite_history(hist)
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] >= 0 for r in hist)


def test_minimal_reinforce_equals_the_textbook_step(weak):
    """One train_pg step of minimal_reinforce = rollout, r - mean, pg_loss, clip, AdamW by hand."""
    import random

    from arl.losses import group_advantages, pg_loss, token_logprobs

    config = minimal_reinforce(steps=1, tasks_per_step=4, group_size=4, lr=1e-3)
    ours = copy.deepcopy(weak)
    train_pg(ours, config, TASKS)
    ref = copy.deepcopy(weak)
    rng = random.Random(config.seed)
    chosen = rng.sample(list(TASKS), 4)
    jobs = [t for t in chosen for _ in range(4)]
    trajs = rollout_batch(ref, jobs, seed=rng.randrange(2**31), env_config=config.env)
    rewards = torch.tensor([t.reward for t in trajs]).view(4, 4)
    adv = torch.cat([group_advantages(r, "mean") for r in rewards])
    assert adv.abs().sum() > 0
    batch = collate(trajs)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, weight_decay=0.0)
    pg_loss(token_logprobs(ref, batch), adv, batch.action_mask).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    opt.step()
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# --- nothing lost, nothing silently wrong (issue 10) ------------------------------------------


def test_a_nan_gradient_stops_the_run_and_keeps_the_last_good_checkpoint(
    weak, tmp_path, monkeypatch
):
    real = pg.accumulate_policy_gradient
    calls = {"n": 0}

    def poisoned(model, *args, **kwargs):
        stats = real(model, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:  # step 3: one gradient entry becomes NaN
            next(model.parameters()).grad.view(-1)[0] = float("nan")
        return stats

    monkeypatch.setattr(pg, "accumulate_policy_gradient", poisoned)
    model = copy.deepcopy(weak)
    run = replace(SMALL, steps=5, minibatches=1, save_every=1, out=str(tmp_path))
    with pytest.raises(Diverged, match="step 3: .*gradient norm nan.*ckpt-000002"):
        train_pg(model, run, TASKS)
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-000001", "ckpt-000002"]
    saved = load_checkpoint(checkpoints(tmp_path)[-1])
    for a, b in zip(saved.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)  # the optimizer never stepped on the NaN gradient
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_resume_refuses_a_changed_config_unless_allowed(weak, tmp_path):
    run = replace(SMALL, steps=2, save_every=1, out=str(tmp_path))
    train_pg(copy.deepcopy(weak), run, TASKS)
    with pytest.raises(ArlError, match="lr 0.001 -> 0.002.*--allow-change lr"):
        train_pg(copy.deepcopy(weak), replace(run, resume=True, lr=2e-3, steps=3), TASKS)
    hist = train_pg(
        copy.deepcopy(weak),
        replace(run, resume=True, lr=2e-3, steps=3),
        TASKS,
        allow_change=("lr", "steps"),
    )
    assert [r["step"] for r in hist] == [3]
    assert hist[0]["lr"] == 2e-3  # the optimizer was restored at 1e-3; the allowed lr replaced it
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["lr"] == 2e-3  # config.json says what the resumed run used


def test_each_step_logs_the_learning_rate_its_optimizer_stepped_with(weak, monkeypatch):
    """Issue 29's learning-rate scalar: every step record's `lr` is read from the optimizer's
    parameter group (an optimizer built at another rate logs that rate), evaluation rows none."""
    run = replace(SMALL, steps=2, eval_every=2, eval_samples=1)
    hist = train_pg(copy.deepcopy(weak), run, TASKS)
    assert [(r["step"], r.get("lr")) for r in hist] == [(0, None), (1, 1e-3), (2, 1e-3), (2, None)]
    build = pg.make_optimizer
    monkeypatch.setattr(pg, "make_optimizer", lambda m, lr, *a, **k: build(m, lr / 4, *a, **k))
    hist = train_pg(copy.deepcopy(weak), replace(run, eval_every=0), TASKS)
    assert [r["lr"] for r in hist] == [2.5e-4, 2.5e-4]


def test_a_new_run_in_an_old_folder_is_refused(weak, tmp_path):
    run = replace(SMALL, steps=2, save_every=1, out=str(tmp_path))
    train_pg(copy.deepcopy(weak), run, TASKS)
    with pytest.raises(ArlError, match="holds an earlier run's files"):
        train_pg(copy.deepcopy(weak), replace(run, steps=1), TASKS)
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-000001", "ckpt-000002"]


@pytest.mark.parametrize("damage", ["torn_metrics", "truncated_state", "other_shape"])
def test_resume_from_a_damaged_run_is_one_clear_error_or_exact(weak, tmp_path, damage):
    run = replace(SMALL, steps=2, save_every=1, out=str(tmp_path))
    train_pg(copy.deepcopy(weak), run, TASKS)
    model = copy.deepcopy(weak)
    if damage == "torn_metrics":  # killed mid-line: the torn row is dropped, the rest kept
        metrics = tmp_path / "metrics.jsonl"
        metrics.write_text(metrics.read_text() + '{"step": 3, "rew')
        hist = train_pg(model, replace(run, resume=True, steps=3), TASKS, allow_change=["steps"])
        rows = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
        assert rows == [1, 2, 3] and len(hist) == 1
        return
    if damage == "truncated_state":
        state = checkpoints(tmp_path)[-1] / STATE_FILE
        state.write_bytes(state.read_bytes()[:100])
        match = "corrupt trainer_state.pt"
    else:
        torch.manual_seed(0)
        model = TinyAgent(
            TinyAgentConfig(
                vocab_size=len(default_vocab()), n_layer=1, n_embd=16, n_head=2, block_size=256
            )
        )
        match = "another model shape than --init \\(n_embd 32 vs 16\\)"
    with pytest.raises(ArlError, match=match):
        train_pg(model, replace(run, resume=True), TASKS)


class _ScriptedWorkers:
    """Rollout workers whose jobs finish in a scripted order: (weights version, groups)."""

    idle = False  # every worker busy: an async draw submits nothing

    def __init__(self, finished):
        self.finished = list(finished)

    def next(self):
        return self.finished.pop(0)


def test_async_rollouts_take_the_first_job_within_the_staleness_bound_and_drop_older():
    import random
    from types import SimpleNamespace

    from arl.train.checkpoint import LoopState

    pool = tasks_for("train")
    a, b = pool[0].name, pool[1].name
    groups = lambda name: [[SimpleNamespace(task=name, reward=1.0)]]  # noqa: E731
    r = pg_groups.Rollouts.__new__(pg_groups.Rollouts)
    r.config = PGConfig(staleness=1, async_rollouts=True, rollout_workers=1, group_size=1)
    r.pool, r.dropped = pool, 0
    r.workers = _ScriptedWorkers([(0, groups(a)), (2, groups(b)), (3, groups(a))])
    s = LoopState(None, random.Random(0), None, 0.0)
    drawn = r.draw(None, s, step=4)  # weights 0 are 3 updates old: dropped
    assert drawn.chosen[0] is pool[1]  # the pool's own task, by the name its episodes carry
    assert (drawn.extra, r.dropped) == ({"rollout/staleness": 1, "rollout/dropped": 1}, 1)
    drawn = r.draw(None, s, step=4)  # weights 3 are the newest
    assert (drawn.chosen[0].name, drawn.extra["rollout/staleness"], r.dropped) == (a, 0, 1)
    assert (drawn.sampled, drawn.degenerate_frac, drawn.degenerate_frac_final) == (1, 1.0, 1.0)


# --- the loss as a seam (issue 44): ppo unchanged, gspo through the same signature -----------


def _old_accumulate(
    model,
    batch,
    adv_B,
    config,
    prox_logp=None,
    ref_logp=None,
    entropy_coef=0.0,
    microbatch_size=None,
    weights=pg.step_weights,
    kl_grad=False,  # the trainer passes it (Problem 6's gradient split); off in these runs
):
    """accumulate_policy_gradient as it was before the seam (commit 1c6be4a): ppo_token_loss
    called by name, clip_frac and capped_frac counted here. Kept to pin ppo's results."""
    from arl.losses import kl_k3, ppo_token_loss, token_logprobs
    from arl.train.pg_metrics import mismatch_stats, quantile

    B = batch.input_ids.size(0)
    n_tokens = float(batch.action_mask.sum())
    micro = config.microbatch_size if microbatch_size is None else microbatch_size
    splits = torch.arange(B).split(micro or B)
    sums = {"loss": 0.0, "ent": 0.0, "clip": 0.0, "cap": 0.0, "ref_k3": 0.0, "mu_k3": 0.0}
    ref_abs, mu_abs = [], []
    for idx in splits:
        mb = pg.rows(batch, idx)
        on = mb.action_mask.bool()
        w = weights(mb.action_mask, config, B, n_tokens, len(splits))
        logp, ent = token_logprobs(model, mb, True, config.temperature)
        prox = logp.detach() if prox_logp is None else prox_logp[idx]
        ref = ref_logp[idx] if ref_logp is not None else None
        tok, clipped, capped = ppo_token_loss(
            logp,
            prox,
            mb.old_logp,
            adv_B[idx],
            clip=config.clip,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            is_correction=config.is_correction,
            is_cap=config.is_cap,
            ref_logp_BT=ref if config.kl_in == "loss" else None,
            kl=config.kl,
            kl_beta=config.kl_beta,
            entropy_BT=ent,
            entropy_coef=entropy_coef,
        )
        loss = (w * tok).sum()
        loss.backward()
        sums["loss"] += float(loss.detach())
        sums["ent"] += float(ent.detach()[on].sum())
        sums["clip"] += float(clipped[on].sum())
        sums["cap"] += float(capped[on].sum())
        mu_lr = (mb.old_logp - prox)[on]
        sums["mu_k3"] += float(kl_k3(-mu_lr).sum())
        mu_abs.append(mu_lr.abs())
        if ref is not None:
            lr_ref = (ref - logp.detach())[on]
            sums["ref_k3"] += float(kl_k3(lr_ref).sum())
            ref_abs.append(lr_ref.abs())
    n = max(n_tokens, 1.0)
    out = {
        "loss": sums["loss"],
        "entropy": sums["ent"] / n,
        "clip_frac": sums["clip"] / n,
        "capped_frac": sums["cap"] / n,
        "kl/mu_k3": sums["mu_k3"] / n,
        "kl/mu_absq99": quantile(mu_abs, 0.99),
        **mismatch_stats(mu_abs),
    }
    if ref_logp is not None:
        out |= {"kl/ref_k3": sums["ref_k3"] / n, "kl/ref_absq99": quantile(ref_abs, 0.99)}
    return out


def _old_update_metrics(stats, grad_norms, minibatches, loss=None):
    """update_metrics as it was before the seam, naming clip_frac and capped_frac."""
    import numpy as np

    from arl.train.pg_metrics import MISMATCH_KEYS, REF_KEYS

    first = {k: float(np.mean([s[k] for s in stats[:minibatches]])) for k in stats[0]}
    return {
        "entropy": first["entropy"],
        "clip_frac": float(np.mean([s["clip_frac"] for s in stats])),
        "capped_frac": first["capped_frac"],
        "kl/mu_k3": first["kl/mu_k3"],
        "kl/mu_absq99": first["kl/mu_absq99"],
        **{k: first[k] for k in MISMATCH_KEYS},
        **{k: first[k] for k in REF_KEYS if k in first},
        "grad_norm": float(np.mean(grad_norms)),
        "loss": float(np.mean([s["loss"] for s in stats])),
    }


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the defaults at SMALL's scale
        {"epochs": 2, "minibatches": 2, "microbatch_size": 3},  # clip_frac over every update
        {"kl": "k3", "kl_beta": 0.05, "entropy_coef": 0.01, "aggregation": "seq_mean_token_mean"},
        {"clip": False, "is_correction": False, "staleness": 2, "lr": 1e-2},
    ],
)
def test_ppo_through_the_seam_is_the_old_direct_call_bit_for_bit(weak, monkeypatch, changes):
    """PG's default results do not change: 3 steps of train_pg through LOSSES["ppo"] and the
    same run on the pre-seam accumulate and update_metrics log the same records (timing aside;
    same floats, same key order) and end on identical weights."""
    config = replace(SMALL, **changes)
    new_model = copy.deepcopy(weak)
    new = _strip(train_pg(new_model, config, TASKS))
    monkeypatch.setattr(pg, "accumulate_policy_gradient", _old_accumulate)
    monkeypatch.setattr(pg, "update_metrics", _old_update_metrics)
    old_model = copy.deepcopy(weak)
    old = _strip(train_pg(old_model, config, TASKS))
    assert [list(r) for r in new] == [list(r) for r in old] and new == old
    assert any(r["tasks_with_grad"] for r in new)  # the updates moved the policy
    if config.epochs > 1:  # the second pass's ratios are off 1: some tokens clipped
        assert max(r["clip_frac"] for r in new) > 0
    for a, b in zip(new_model.parameters(), old_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_gspo_through_the_seam(weak):
    """pg_losses.gspo on LossInputs: seq_mean_token_mean weights make the loss GSPO's mean of
    the episodes' l_i; its stats are counts of policy tokens (the trainer divides them). On the
    batch of test_losses_pg (l = -1.0004, 1.9994, -1.000100005, 1, -0.9990005; episodes 0 and
    1, 2 + 3 tokens, clipped): loss = -0.000100505 / 5 = -2.0101e-5, clip 5, capped 0."""
    from arl.losses import token_weights
    from arl.train.pg_losses import LOSSES, LossInputs
    from tests.test_losses_pg import GSPO_ADV, GSPO_LR, GSPO_MASK

    zeros = torch.zeros(5, 3, dtype=torch.float64)
    inputs = LossInputs(
        logp=GSPO_LR,
        prox_logp=zeros,
        mu_logp=zeros,
        adv=GSPO_ADV,
        mask=GSPO_MASK,
        weights=token_weights(GSPO_MASK, "seq_mean_token_mean"),
        entropy=zeros,
    )
    loss, stats = LOSSES["gspo"].fn(inputs, PGConfig(loss="gspo"))
    want = (-1.0004 + 1.9994 - 1.000100005 + 1.0 - 0.9990005) / 5
    assert float(loss) == pytest.approx(want, abs=1e-9)  # the l_i above are to 1e-9
    assert stats == {"clip_frac": 5.0, "capped_frac": 0.0}
    assert set(stats) == set(LOSSES["gspo"].stats)
    model = copy.deepcopy(weak)
    before = [p.detach().clone() for p in model.parameters()]
    hist = train_pg(model, replace(SMALL, steps=2, loss="gspo"), TASKS)
    assert is_finite_history(hist) and all("clip_frac" in r and "capped_frac" in r for r in hist)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_every_registered_loss_returns_the_stats_it_declares(weak):
    """The trainer logs a loss's stats by its declaration: each loss returns exactly those."""
    from arl.train.pg_losses import LOSSES

    batch = collate(rollout_batch(copy.deepcopy(weak), TASKS[:4], seed=0))
    for name, entry in LOSSES.items():
        out = accumulate_policy_gradient(
            copy.deepcopy(weak), batch, torch.randn(4), PGConfig(loss=name)
        )
        assert set(entry.stats) <= set(out) and set(entry.every_update) <= set(entry.stats)


def test_the_loss_is_chosen_by_set_and_an_unknown_one_is_one_line(cli, tmp_path):
    """`--set loss=gspo` reaches PGConfig; an unknown loss, or gspo with a teacher's per-token
    advantages, is one line and exit status 2 before anything is written."""
    assert make_config(parse_overrides(["loss=gspo"])).loss == "gspo"
    assert PGConfig().loss == "ppo"
    code, _, err = cli("train", "pg", "--set", "loss=nope", "--set", f"out={tmp_path / 'x'}")
    assert code == 2 and err.strip() == "arl: error: loss: must be one of ppo, gspo, got 'nope'"
    assert not (tmp_path / "x").exists()
    with pytest.raises(ArlError, match="loss: gspo takes one advantage per episode"):
        PGConfig(loss="gspo", teacher="weak", teacher_weight=1.0)


def test_samples_survive_a_resume_as_an_uninterrupted_run_wrote_them(weak, tmp_path):
    """samples.jsonl after a crash at step 3 and a resume from step 2 is byte-equal to an
    uninterrupted run's: step 3's crashed samples dropped once, steps 1-4 each sampled."""
    config = replace(SMALL, steps=4, save_every=1, eval_every=1, eval_samples=1)
    whole = replace(config, out=str(tmp_path / "whole"))
    train_pg(copy.deepcopy(weak), whole, TASKS)

    def crash(step, model):
        if step == 3:
            raise KeyboardInterrupt
        return None

    run = replace(config, out=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        train_pg(copy.deepcopy(weak), run, TASKS, hook=crash, hook_every=1)
    crashed = [json.loads(x)["step"] for x in (tmp_path / "run" / "samples.jsonl").open()]
    assert max(crashed) == 3  # step 3's samples were written before the crash
    train_pg(copy.deepcopy(weak), replace(run, resume=True), TASKS)
    text = (tmp_path / "run" / "samples.jsonl").read_text()
    assert text == (tmp_path / "whole" / "samples.jsonl").read_text()
    rows = [json.loads(x) for x in text.splitlines()]
    assert sorted({r["step"] for r in rows}) == [1, 2, 3, 4]
    for step in (1, 2, 3, 4):  # at most one passing and one failing episode a step
        passes = [r["pass"] for r in rows if r["step"] == step]
        assert 1 <= len(passes) <= 2 and len(set(passes)) == len(passes)

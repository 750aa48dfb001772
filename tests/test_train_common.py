"""The pieces every recipe shares: the checked optimizer step, the hook schedule, frozen
log-probs, the PG config's dotted keys and the one starting-policy loader."""

import math

import pytest
import torch

from arl.batch import collate
from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError, Diverged
from arl.losses import token_logprobs
from arl.rollout import rollout_batch
from arl.train.checkpoint import config_changes
from arl.train.common import frozen_logprobs, hook_due, optimizer_step
from arl.train.pg_config import PGConfig, flat_dict, make_config
from arl.train.policy import check_policy_spec, load_policy


def test_optimizer_step_takes_a_loss_or_an_accumulating_backward(tiny_model):
    opt = torch.optim.SGD(tiny_model.parameters(), lr=0.1)
    batch = collate(rollout_batch(tiny_model, tasks_for("train")[:2], seed=0))
    before = [p.detach().clone() for p in tiny_model.parameters()]
    loss = -token_logprobs(tiny_model, batch).mean()
    value, norm = optimizer_step(tiny_model, opt, loss, 0.0, "test")
    assert value == pytest.approx(float(loss.detach())) and norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, tiny_model.parameters(), strict=True))

    def backward() -> float:  # two halves accumulated, as the PG trainer does
        for half in (slice(0, 1), slice(1, 2)):
            (-token_logprobs(tiny_model, batch)[half].mean() / 2).backward()
        return 1.0

    assert optimizer_step(tiny_model, opt, backward, 1.0, "test")[0] == 1.0


def test_a_nan_loss_stops_before_the_optimizer_steps(tiny_model):
    opt = torch.optim.SGD(tiny_model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in tiny_model.parameters()]
    loss = next(tiny_model.parameters()).sum() * float("nan")
    with pytest.raises(Diverged, match="step 7: loss nan"):
        optimizer_step(tiny_model, opt, loss, 1.0, "step 7")
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_model.parameters(), strict=True))


def test_hook_schedule_and_frozen_logprobs(tiny_model):
    assert [s for s in range(8) if hook_due(s, 3, 7)] == [0, 3, 6, 7]
    assert not any(hook_due(s, 0, 7) for s in range(8))
    batch = collate(rollout_batch(tiny_model, tasks_for("train")[:2], seed=0))
    tiny_model.train()
    logp = frozen_logprobs(tiny_model, batch, 0.7)
    assert tiny_model.training and not logp.requires_grad
    torch.testing.assert_close(logp, token_logprobs(tiny_model, batch, temperature=0.7))


def test_env_is_nested_and_old_flat_keys_name_the_dotted_one():
    config = make_config({"lr": 1e-3, "env": {"reward": "public"}})
    assert config.env.reward == "public" and config.env.zero_exploits  # PG's default env kept
    assert flat_dict(config)["env.reward"] == "public"
    with pytest.raises(ArlError, match=r"^reward: now env.reward"):
        make_config({"reward": "public"})
    with pytest.raises(ArlError, match=r"^env.reward: unknown 'nope'"):
        make_config({"env": {"reward": "nope"}})
    with pytest.raises(ArlError, match="mask_shift: no longer"):
        make_config({"mask_shift": 1})
    assert PGConfig().quick().episodes_per_step == 16


def test_a_checkpoint_config_from_before_the_nesting_still_compares():
    flat = flat_dict(PGConfig())
    saved = {k.removeprefix("env."): v for k, v in flat.items() if k != "env.max_call_tokens"}
    saved["mask_shift"] = 0  # a field of that time
    assert config_changes(saved, PGConfig()) == {}
    assert config_changes(saved, make_config({"env": {"step_penalty": 0.1}})) == {
        "env.step_penalty": (0.0, 0.1)
    }


def test_load_policy_specs(tmp_path):
    a, b = load_policy("untrained", seed=3), load_policy("untrained", seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(ArlError, match="unknown policy 'bogus'"):
        check_policy_spec("bogus")
    with pytest.raises(ArlError, match="no such checkpoint directory"):
        load_policy(str(tmp_path / "missing"))
    (tmp_path / "run" / "ckpt-000001").mkdir(parents=True)
    (tmp_path / "run" / "ckpt-000001" / "config.json").write_text("{}")
    with pytest.raises(ArlError, match="is a run folder; its newest checkpoint"):
        load_policy(str(tmp_path / "run"))
    assert all(bool(torch.isfinite(p).all()) for p in a.parameters())


def test_sft_beta2_reaches_the_optimizer(tiny_model):
    """SFTConfig.beta2 is AdamW's second-moment decay: the loop equals one given that optimizer,
    and differs from torch's default (Adam's first step does not depend on beta2; later ones do)."""
    import copy

    from arl.train.bases import oracle_demos
    from arl.train.common import make_optimizer
    from arl.train.sft import SFTConfig, sft_train

    demos, config = oracle_demos()[:4], SFTConfig(steps=3, batch_size=2, lr=1e-2, beta2=0.5)
    a, b, c = (copy.deepcopy(tiny_model) for _ in range(3))
    sft_train(a, demos, config)
    sft_train(b, demos, config, optimizer=make_optimizer(b, 1e-2, betas=(0.9, 0.5)))
    sft_train(c, demos, SFTConfig(steps=3, batch_size=2, lr=1e-2))
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.allclose(pa, pc)
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ArlError, match="beta2"):
            SFTConfig(beta2=bad)


def test_sft_learning_rate_warms_up_linearly_then_holds_or_follows_a_cosine(tiny_model):
    from arl.train.bases import oracle_demos
    from arl.train.sft import SFTConfig, scheduled_lr, sft_train

    warm = SFTConfig(steps=10, lr=1e-2, warmup_steps=4)
    assert [scheduled_lr(s, warm) for s in (1, 2, 4, 5, 10)] == pytest.approx(
        [2.5e-3, 5e-3, 1e-2, 1e-2, 1e-2]
    )
    cos = SFTConfig(steps=10, lr=1e-2, warmup_steps=2, decay="cosine")  # 8 decay steps
    assert scheduled_lr(2, cos) == pytest.approx(1e-2)
    assert scheduled_lr(6, cos) == pytest.approx(5e-3)  # half-way: cos(pi/2) = 0
    assert scheduled_lr(4, cos) == pytest.approx(1e-2 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert scheduled_lr(10, cos) == pytest.approx(0.0, abs=1e-12)
    assert scheduled_lr(3, SFTConfig(lr=1e-2)) == 1e-2  # the default: constant, no warmup
    with pytest.raises(ArlError, match="decay: unknown 'linear'"):
        SFTConfig(decay="linear")
    # the loop applies it: each step's optimizer runs at that step's scheduled rate
    opt = torch.optim.SGD(tiny_model.parameters(), lr=1.0)
    seen = []
    sft_train(
        tiny_model,
        oracle_demos()[:4],
        cos,
        hook=lambda s, m: seen.append(opt.param_groups[0]["lr"]),
        hook_every=1,
        optimizer=opt,
    )
    assert seen[1:] == pytest.approx([scheduled_lr(s, cos) for s in range(1, 11)])

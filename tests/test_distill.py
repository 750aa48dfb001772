"""On-policy distillation: the per-token advantage by hand, the gradient it gives, the
teacher's checks, and `arl train distill` end to end (TinyAgent and two tiny HF models)."""

import copy
import json
import math
from dataclasses import replace

import pytest
import torch

from arl.batch import collate
from arl.bugfix import default_vocab
from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError
from arl.losses import distill_advantages, ppo_token_loss, token_logprobs
from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import rollout_batch
from arl.train.checkpoint import save_checkpoint
from arl.train.common import frozen_logprobs
from arl.train.distill import check_teacher, teacher_advantages
from arl.train.pg import accumulate_policy_gradient, train_pg
from arl.train.pg_config import PGConfig, flat_saved, make_config
from arl.train.sft import SFTConfig, sft_train

TASKS = tasks_for("train")[::3]
DISTILL = PGConfig(teacher="t", teacher_weight=1.0, reward_weight=0.0, filter_cooldown=0)
SMALL = ["--set", "tasks_per_step=2", "--set", "group_size=2", "--set", "minibatches=1"]


def _tiny(seed: int, steps: int = 0) -> TinyAgent:
    torch.manual_seed(seed)
    model = TinyAgent(
        TinyAgentConfig(
            vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
        )
    )
    if steps:
        from arl.train.bases import BaseConfig, weak_base_data

        data = weak_base_data(BaseConfig())
        sft_train(model, data, SFTConfig(steps=steps, lr=1e-2), hook_every=0)
    return model


@pytest.fixture(scope="module")
def student():
    return _tiny(0, steps=60)


def _on_policy_batch(model):
    """A batch whose stored log-probs are the model's own eval-mode ones, exactly."""
    batch = collate(rollout_batch(model, TASKS[:4], seed=0))
    return replace(batch, old_logp=frozen_logprobs(model, batch) * batch.action_mask)


# --- the per-token advantage, by hand -----------------------------------------------------------


def test_distill_advantage_by_hand_without_and_with_a_discount():
    # one episode: policy tokens at 0, 1 and 4; the environment's tokens 2, 3 are not steps
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    student = torch.tensor([[-1.0, -2.0, -9.0, -9.0, -0.5, 0.0]])
    teacher = torch.tensor([[-0.5, -3.0, -1.0, -1.0, -0.25, -7.0]])
    # teacher - student on policy tokens: +0.5, -1.0, +0.25; the rest 0
    assert distill_advantages(teacher, student, mask).tolist() == [[0.5, -1.0, 0, 0, 0.25, 0]]
    # discount 0.5: A_4 = 0.25; A_1 = -1 + 0.5 * 0.25; A_0 = 0.5 + 0.5 * A_1
    a1 = -1.0 + 0.5 * 0.25
    want = [[0.5 + 0.5 * a1, a1, 0, 0, 0.25, 0]]
    assert distill_advantages(teacher, student, mask, 0.5).tolist() == want
    # discount 1: each policy token gets the sum of its own and every later one's
    assert distill_advantages(teacher, student, mask, 1.0).tolist() == [
        [-0.25, -0.75, 0, 0, 0.25, 0]
    ]
    # rows do not mix; a stop-gradient: no grad flows into the student's log-probs
    s = student.repeat(2, 1).requires_grad_()
    out = distill_advantages(teacher.repeat(2, 1), s, mask.repeat(2, 1), 0.5)
    assert torch.equal(out[0], out[1]) and not out.requires_grad


def test_teacher_advantage_adds_the_weighted_group_advantage_on_policy_tokens(student):
    batch = _on_policy_batch(student)
    adv_B = torch.tensor([1.0, -1.0, 0.5, 0.0])
    config = replace(DISTILL, reward_weight=0.5, teacher_weight=2.0)
    adv_BT, m = teacher_advantages(copy.deepcopy(student), batch, adv_B, config)
    # the teacher agrees: only 0.5 x the group advantage, on policy tokens, 0 elsewhere
    assert torch.equal(adv_BT, 0.5 * adv_B[:, None] * batch.action_mask)
    assert m["teacher_kl"] == 0.0 and m["teacher_kl_q99"] == 0.0


# --- the gradient -------------------------------------------------------------------------------


def _grads(model):
    return [
        torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
        for p in model.parameters()
    ]


def test_a_teacher_equal_to_the_student_gives_exactly_zero_gradient(student):
    model = copy.deepcopy(student)
    batch = _on_policy_batch(model)
    adv_BT, m = teacher_advantages(copy.deepcopy(model), batch, torch.zeros(4), DISTILL)
    assert torch.equal(adv_BT, torch.zeros_like(adv_BT))
    model.zero_grad(set_to_none=True)
    accumulate_policy_gradient(model, batch, adv_BT, DISTILL)
    assert all(torch.equal(g, torch.zeros_like(g)) for g in _grads(model))


def test_a_teacher_shifted_on_one_token_puts_the_gradient_on_that_token_alone(student):
    model = copy.deepcopy(student)
    batch = _on_policy_batch(model)
    b, t = 2, int(batch.action_mask[2].nonzero()[3])  # the 4th policy token of episode 2
    c = 0.7
    teacher_logp = batch.old_logp.clone()
    teacher_logp[b, t] += c
    adv_BT = distill_advantages(teacher_logp, batch.old_logp, batch.action_mask)
    assert adv_BT.nonzero().tolist() == [[b, t]] and float(adv_BT[b, t]) == pytest.approx(c)
    # d loss / d log pi is nonzero on (b, t) alone: -c / (tokens in the batch) under token_mean
    logp = batch.old_logp.clone().requires_grad_()
    n = float(batch.action_mask.sum())
    loss_BT, _, _ = ppo_token_loss(logp, logp.detach(), batch.old_logp, adv_BT)
    (loss_BT * batch.action_mask / n).sum().backward()
    assert logp.grad.nonzero().tolist() == [[b, t]]
    assert float(logp.grad[b, t]) == pytest.approx(-c / n)
    # the model's gradient through PG's loss is exactly that one token's: -c/n x grad log pi_bt
    model.zero_grad(set_to_none=True)
    accumulate_policy_gradient(model, batch, adv_BT, DISTILL)
    got = _grads(model)
    model.zero_grad(set_to_none=True)
    (-c / n * token_logprobs(model, batch)[b, t]).backward()
    want = _grads(model)
    assert any(float(w.abs().max()) > 0 for w in want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-7)


def _full_kl(student, teacher, batch) -> float:
    """KL(student || teacher) over the whole vocabulary, per policy token of `batch`."""
    with torch.no_grad():
        ls = torch.log_softmax(student(batch.input_ids)[0], -1)  # (B, T, V)
        lt = torch.log_softmax(teacher(batch.input_ids)[0], -1)  # (B, T, V)
        kl_BT = (ls.exp() * (ls - lt)).sum(-1)  # (B, T)
    return float((kl_BT * batch.action_mask).sum() / batch.action_mask.sum())


def test_distillation_pulls_the_student_toward_the_teacher():
    """Six steps of the teacher's advantage alone take a random student's exact KL to a
    trained teacher, on the teacher's own states, down by more than 0.3 nats per token (a
    flipped sign raises it by about 0.4), and each step reports every teacher metric."""
    teacher = _tiny(1, steps=150)
    student = _tiny(2)
    states = collate(rollout_batch(teacher, TASKS, seed=5))
    before = _full_kl(student, teacher, states)
    config = replace(DISTILL, steps=6, tasks_per_step=4, group_size=4, lr=3e-3, seed=0)
    hist = train_pg(student, config, TASKS, teacher=teacher)
    assert _full_kl(student, teacher, states) < before - 0.3
    assert all(r["teacher_kl_q99"] >= r["teacher_kl"] > 0 for r in hist)
    assert all(0 <= r["teacher_pass_rate"] <= 1 for r in hist)
    # every task has the teacher's signal, all-pass and all-fail groups included
    assert all(r["tasks_with_grad"] == config.tasks_per_step for r in hist)


# --- the teacher's checks, and the config's ------------------------------------------------------


def test_teacher_of_another_vocabulary_or_shorter_context_is_refused(student):
    other = TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab()) + 3, n_layer=1, n_embd=32))
    with pytest.raises(ArlError, match="vocabulary size"):
        check_teacher(other, student, "x")
    short = TinyAgent(
        TinyAgentConfig(vocab_size=len(default_vocab()), n_layer=1, n_embd=32, block_size=128)
    )
    with pytest.raises(ArlError, match="context 128"):
        check_teacher(short, student, "x")
    with pytest.raises(ArlError, match="a teacher needs teacher_weight"):
        no_weight = replace(DISTILL, teacher_weight=0.0, reward_weight=1.0)
        train_pg(copy.deepcopy(student), no_weight, TASKS, teacher=copy.deepcopy(student))
    with pytest.raises(ArlError, match="a teacher needs teacher_weight"):
        train_pg(copy.deepcopy(student), DISTILL, TASKS)  # a weight but no teacher given


@pytest.mark.parametrize(
    "values, field",
    [
        ({"teacher_weight": 1.0}, "teacher_weight"),  # no teacher named
        ({"teacher": "t", "teacher_weight": 1.0, "reward_weight": -1.0}, "reward_weight"),
        ({"teacher": "t", "teacher_weight": 0.0, "reward_weight": 0.0}, "reward_weight"),
        ({"teacher": "t", "teacher_weight": 1.0, "teacher_discount": 1.5}, "teacher_discount"),
        ({"teacher": "t", "teacher_weight": math.nan}, "teacher_weight"),
    ],
)
def test_distillation_settings_are_checked(values, field):
    with pytest.raises(ArlError, match=field):
        make_config(values)


def test_a_checkpoint_written_before_distillation_resumes_as_plain_pg():
    saved = {k: v for k, v in flat_saved({}).items()}
    assert saved["teacher"] == "" and saved["teacher_weight"] == 0.0
    assert saved["reward_weight"] == 1.0 and saved["teacher_discount"] == 0.0
    old = flat_saved({"lr": 1e-3, "teacher_weight": 0.5, "teacher": "x"})
    assert old["teacher_weight"] == 0.5 and old["teacher"] == "x"  # present fields win


# --- the CLI ------------------------------------------------------------------------------------


def test_train_distill_runs_resumes_and_refuses_bad_teachers(cli, tmp_path):
    init = str(save_checkpoint(_tiny(0), tmp_path / "init"))
    teacher = str(save_checkpoint(_tiny(1, steps=40), tmp_path / "teacher"))
    out = tmp_path / "run"
    base = ["train", "distill", "--init", init, "--teacher", teacher, "--quiet", *SMALL]
    code, stdout, err = cli(*base, "--set", "steps=2", "--set", f"out={out}")
    assert code == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("teacher_kl", "teacher_kl_q99", "teacher_pass_rate", "pass_rate", "entropy"):
        assert all(math.isfinite(r[key]) for r in rows), key
    saved = json.loads((out / "config.json").read_text())
    assert saved["teacher"] == teacher and saved["reward_weight"] == 0.0
    assert saved["teacher_weight"] == 1.0 and saved["lr"] == 1e-4  # distillation's defaults
    code, _, err = cli(
        *base,
        "--set",
        "steps=3",
        "--set",
        f"out={out}",
        "--set",
        "resume=true",
        "--allow-change",
        "steps",
    )
    assert code == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # refusals: one line, exit 2, the flag named
    code, _, err = cli("train", "distill", "--init", init, "--teacher", str(tmp_path / "nope"))
    assert code == 2 and "--teacher" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("train", "distill", "--init", init)
    assert code == 2 and "--teacher" in err
    code, _, err = cli(
        "train", "distill", "--init", init, "--teacher", teacher, "--set", "teacher_discount=2"
    )
    assert code == 2 and "teacher_discount" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(
        "train",
        "distill",
        "--init",
        init,
        "--teacher",
        teacher,
        "--set",
        "reward_weight=0",
        "--set",
        "teacher_weight=0",
        "--set",
        f"out={tmp_path / 'r2'}",
    )
    assert code == 2 and "reward_weight" in err


def test_train_distill_between_two_tiny_transformers_models(cli, tmp_path):
    pytest.importorskip("transformers")
    from arl.hf.policy import load_hf
    from arl.hf.tiny import build_tiny, build_tokenizer

    a = build_tiny(tmp_path / "student", arch="qwen2", seed=0)
    b = build_tiny(tmp_path / "teacher", arch="llama", seed=1, layers=3)
    out = tmp_path / "run"
    code, stdout, err = cli(
        "train",
        "distill",
        "--model",
        str(a),
        "--teacher-model",
        str(b),
        "--quiet",
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        f"out={out}",
    )
    assert code == 0, err
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["teacher_kl"] != 0 and math.isfinite(row["teacher_kl_q99"])
    # TinyAgent cannot teach a transformers student, nor the other way round
    ckpt = str(save_checkpoint(_tiny(0), tmp_path / "tiny"))
    code, _, err = cli(
        "train",
        "distill",
        "--model",
        str(a),
        "--teacher",
        ckpt,
        *SMALL,
        "--set",
        f"out={tmp_path / 'r2'}",
    )
    assert code == 2 and "TinyAgent cannot teach a transformers model" in err
    code, _, err = cli(
        "train",
        "distill",
        "--init",
        ckpt,
        "--teacher-model",
        str(b),
        "--set",
        f"out={tmp_path / 'r3'}",
    )
    assert code == 2 and "cannot teach TinyAgent" in err
    # another tokenizer, the same kind of model: refused before any step
    student, teacher = load_hf(str(a)), load_hf(str(b))
    teacher.renderer = replace(teacher.renderer, tokenizer=build_tokenizer(vocab_size=300))
    with pytest.raises(ArlError, match="tokenizer is not the student's"):
        check_teacher(teacher, student, "b")

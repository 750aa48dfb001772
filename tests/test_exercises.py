"""`arl reproduce exercise N|all`: Chapter 15's exercises in the problems' form, each mechanism
against a hand-made case, and every exercise's --quick measure and figure."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from arl.cli.main import main
from arl.errors import ArlError
from arl.experiments import problems
from arl.experiments.exercises import EXERCISES
from arl.experiments.exercises.gradients import compare, predicted_ratio
from arl.experiments.exercises.rft_baseline import group_identity
from arl.experiments.exercises.sft_then_rl import slope
from arl.experiments.exercises.star import hint, mask_first_call
from arl.train.bases import BaseConfig
from arl.train.rft import baseline_weights
from tests import reproduced
from tests.reproduced import reproduce_all


@pytest.fixture(scope="module", autouse=True)
def quick_env(private_cache):
    """Every test here shares one private base cache."""


# --- the mechanisms, on hand-made cases ----------------------------------------------------


def toy(lengths, rewards, seed=0):
    """A (B, T) action mask of the given lengths, 0/1 rewards, and log-probs that depend
    nonlinearly on one parameter tensor."""
    T = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])  # (B, T)
    theta = torch.randn(len(lengths), T, 3, generator=torch.Generator().manual_seed(seed))
    theta.requires_grad_(True)
    logp = lambda: torch.log_softmax(theta**2, -1)[..., 0]  # noqa: E731  (B, T)
    return logp, [theta], torch.tensor(rewards, dtype=torch.float), mask


def test_exercise_1_ratios_derived_by_hand():
    logp, params, r, mask = toy([2, 3, 5, 1], [1, 1, 0, 0])
    # token_mean: kept action tokens over all, (2 + 3) / 11; seq-mean and constant: K/B = 2/4
    assert predicted_ratio(r, mask, "token_mean") == pytest.approx(5 / 11)
    assert predicted_ratio(r, mask, "seq_mean_token_mean") == pytest.approx(0.5)
    for mode, ratio in (("token_mean", 5 / 11), ("seq_mean_token_mean", 0.5), ("constant", 0.5)):
        c = compare(logp, params, r, mask, mode)
        assert c["fitted"] == pytest.approx(ratio, rel=1e-5), mode
        assert c["relative_error"] < 1e-5 and c["cosine"] == pytest.approx(1.0, abs=1e-6)
    # kept episodes of lengths 2 and 3: a seq-mean PG weights them 1/2 and 1/3, token-mean SFT
    # weights them alike, so the gradients are not proportional
    mixed = compare(logp, params, r, mask, "seq_mean_token_mean", "token_mean")
    assert mixed["cosine"] < 0.999 and mixed["relative_error"] > 1e-2
    with pytest.raises(ArlError, match="both successes and failures"):
        compare(logp, params, torch.ones(4), mask, "token_mean")


def test_exercise_4_group_baseline_is_the_baseline_gradient_over_one_minus_rbar():
    logp, params, r, mask = toy([2, 4, 3, 1, 5], [1, 0, 0, 1, 0], seed=1)
    g = group_identity(logp, params, r, mask)
    assert g["rbar"] == pytest.approx(0.4) and g["predicted"] == pytest.approx(0.6)
    assert g["fitted"] == pytest.approx(0.6, rel=1e-5) and g["relative_error"] < 1e-5


def episode(task, passed):
    outcome = SimpleNamespace(hidden_pass=passed, public_pass=passed, infra_error=False)
    return SimpleNamespace(task=task, outcome=outcome, passed=passed)


def test_exercise_4_weights_per_group():
    # task a: 3 of 4 pass (failure weight -0.75/0.25 = -3); b: all fail (no signal, no
    # episode); c: 1 of 2 (-1); d: all pass (no failures)
    samples = [episode("a", p) for p in (1, 1, 0, 1)] + [episode("b", 0), episode("b", 0)]
    samples += [episode("c", 1), episode("c", 0), episode("d", 1)]
    kept = [t for t in samples if t.passed]
    data, weights = baseline_weights(samples, kept, "hidden")
    assert len(data) == len(weights) == 5 + 2
    assert weights == [1.0] * 5 + [-3.0, -1.0]
    assert [t.task for t in data[5:]] == ["a", "c"]
    total = lambda task: sum(w for t, w in zip(data, weights, strict=True) if t.task == task)  # noqa: E731
    # a mixed group's weights are r - Rbar over 1 - Rbar: they sum to 0; an all-pass group
    # keeps weight 1 (the baseline PG gives it 0: its scale 1 - Rbar is 0)
    assert total("a") == total("c") == 0 and total("d") == 1


def test_weighted_sft_with_unit_weights_is_sft():
    from arl.bugfix.tasks import tasks_for
    from arl.env import get_environment
    from arl.model import TinyAgent, TinyAgentConfig
    from arl.rollout import scripted_rollout, vocab_of
    from arl.train.sft import SFTConfig, sft_train

    data = [scripted_rollout("oracle", t, seed=0) for t in tasks_for("train")[:4]]
    vocab = len(vocab_of(get_environment("bugfix")))

    def trained(weights):
        torch.manual_seed(0)
        m = TinyAgent(TinyAgentConfig(vocab_size=vocab, n_layer=1, n_embd=16, n_head=2))
        sft_train(m, data, SFTConfig(steps=2, batch_size=3), hook_every=0, weights=weights)
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    assert torch.equal(trained(None), trained([1.0] * 4))
    assert not torch.allclose(trained(None), trained([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ArlError, match="weights: 3 for 4"):
        trained([1.0] * 3)


def test_exercise_3_the_hint_fixes_and_is_masked():
    from arl.batch import collate
    from arl.bugfix.grammar import END
    from arl.bugfix.tasks import tasks_for
    from arl.env import environment_of_tasks
    from arl.rollout import episode_seed, scripted_rollout

    tasks = tasks_for("train")
    assert {t.family for t in tasks} >= {"init", "div"}
    for i, task in enumerate(tasks):  # the hinted edit, then submit: every task passes
        env = environment_of_tasks([task]).make(task)
        env.reset(seed=episode_seed(100 + i, 0))
        env.step(hint(task, 100 + i))
        outcome = env.step(["submit", END])[-1]
        assert outcome.hidden_pass, task.name
    tr = scripted_rollout("oracle", tasks[0], seed=0)  # read, edit, test, submit
    s, e = tr.calls[0]
    masked = mask_first_call(tr)
    assert collate([masked]).action_mask.sum() == tr.n_action_tokens - (e - s)
    assert masked.ids_T == tr.ids_T and masked.calls == tr.calls


def test_exercise_6_slope():
    assert slope([0.0, 1.0, 2.0], [1.0, 3.0, 5.0]) == pytest.approx(2.0)
    assert slope([0.7, 0.3, 0.1], [0.1, 0.2, 0.3]) == pytest.approx(-9 / 28)
    assert slope([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) == 0.0


# --- the CLI and the registry ----------------------------------------------------------------


def test_exercise_numbers_are_the_registry():
    from arl.cli.reproduce import EXERCISE_NUMBERS

    assert EXERCISE_NUMBERS == tuple(EXERCISES)


def test_unknown_exercise_is_one_line_exit_2(capsys):
    code = main(["reproduce", "exercise", "99", "--quick"])
    err = capsys.readouterr().err
    listed = ", ".join(str(n) for n in EXERCISES)
    assert code == 2 and err.count("\n") == 1 and "exercise 99" in err and listed in err
    with pytest.raises(ArlError, match="unknown kind"):
        problems.get(1, "chapter")


# --- every exercise, quick ----------------------------------------------------------------


@pytest.fixture(scope="module")
def every_exercise(tmp_path_factory):
    """`arl reproduce exercise all --quick --seeds 1`, once for the module."""
    return reproduce_all(tmp_path_factory.mktemp("all"), "exercise")


def seed0(out, n):
    return reproduced.seed0(out, "exercise", n)


def test_all_writes_one_row_per_claim_and_reads_back(every_exercise, capsys):
    summary = json.loads((every_exercise / "summary.json").read_text())
    claims = {
        n: len(
            json.loads((every_exercise / f"exercise-{n}" / "results.json").read_text())["claims"]
        )
        for n in EXERCISES
    }
    assert [r["exercise"] for r in summary["rows"]] == [
        n for n, k in claims.items() for _ in range(k)
    ]
    assert summary["exercises"] == len(EXERCISES) and summary["claims"] == sum(claims.values())
    table = (every_exercise / "summary.md").read_text()
    assert table.startswith("book claims: ") and "(QUICK settings" in table
    out = str(every_exercise)
    argv = ["reproduce", "exercise", "all", "--quick", "--seed", "0", "--seeds", "1", "--out", out]
    assert main(argv) == 0
    assert capsys.readouterr().err.count("read back") == len(EXERCISES)
    # an exercise's folder is not a problem's
    with pytest.raises(ArlError, match="holds a run of `arl reproduce exercise 1`"):
        problems.run(1, [0], quick=True, out=every_exercise / "exercise-1")


def test_exercise_1_quick(every_exercise):
    r = seed0(every_exercise, 1)
    for mode in ("token_mean", "seq_mean_token_mean", "constant"):
        assert r[mode]["relative_error"] < 1e-4
        assert r[mode]["fitted"] == pytest.approx(r[mode]["predicted"], rel=1e-3)
    assert r["seq_mean_token_mean"]["predicted"] == pytest.approx(r["success_rate"])
    assert r["length_factor"] == pytest.approx(r["length_kept"] / r["length_all"], rel=1e-3)
    assert r["holds"] and r["effect"] == r["seq_mean_token_mean"]["relative_error"]


def test_exercise_4_quick(every_exercise):
    r = seed0(every_exercise, 4)
    groups = r["identity"]["groups"]
    assert groups and r["holds"]
    for g in groups:
        assert 0 < g["rbar"] < 1 and g["fitted"] == pytest.approx(1 - g["rbar"], rel=1e-3)
    assert set(r["runs"]) == {"RFT", "RFT + group baseline"}
    assert r["plateau_shift"] == pytest.approx(
        r["runs"]["RFT + group baseline"][-1]["train"] - r["runs"]["RFT"][-1]["train"]
    )


def test_exercise_5_quick(every_exercise):
    r = seed0(every_exercise, 5)
    for arm in r["arms"].values():
        assert arm["pairs"] > 0
        assert arm["chosen"]["pass_rate"] == 1.0 and arm["rejected"]["pass_rate"] == 0.0
        assert arm["history"][0]["step"] == 0 and arm["history"][-1]["step"] == 10
    rise = [a["malformed_rise"] for a in r["arms"].values()]
    assert r["effect"] == pytest.approx(rise[0] - rise[1])
    # from step 20: plain DPO, DPO + NLL and the NLL term alone train on the same pairs and are
    # evaluated on the same episode seeds (the same start: the same step-0 evaluation)
    weak, sft, nll, only = r["arms"].values()
    assert nll["pairs"] == only["pairs"] == sft["pairs"] and nll["chosen"] == sft["chosen"]
    assert nll["history"][0] == only["history"][0] == sft["history"][0]
    assert r["nll_format"] == pytest.approx(rise[1] - rise[2])
    assert r["dpo_share"] == pytest.approx(
        nll["history"][-1]["heldout"] - only["history"][-1]["heldout"]
    )
    assert only["history"][-1]["chosen_delta"] > 0  # the NLL term alone raises chosen episodes


def test_exercise_6_quick(every_exercise):
    r = seed0(every_exercise, 6)
    arms = r["arms"]
    assert list(arms) == ["pass 0.5", "pass 0.75", "final"]
    steps = [a["sft_step"] for a in arms.values()]
    assert steps == sorted(steps) and steps[-1] == 20  # by state, in order; quick SFT: 20 steps
    for name, level in (("pass 0.5", 0.5), ("pass 0.75", 0.75)):
        a = arms[name]  # the first state at or past its level, or the final model if none
        assert (a["train_pass"] >= level) == a["reached"] and a["sft_step"] % 2 == 0
    for a in arms.values():
        assert 0 <= a["informative"] <= 1
        assert a["gain"] == pytest.approx(a["final_heldout"] - a["start_heldout"])
    cold, final = arms["pass 0.75"], arms["final"]
    assert r["cold_vs_sft"] == pytest.approx(cold["final_heldout"] - final["start_heldout"])
    share = [a["informative"] for a in r["arms"].values()]
    assert r["effect"] == pytest.approx(slope(share, [a["gain"] for a in r["arms"].values()]))


def test_exercise_2_quick(every_exercise):
    r = seed0(every_exercise, 2)
    for b in r["bases"].values():
        assert b["n_solved"] == len(b["solved"]) == sum(b["solved_by_family"].values())
    n = [b["n_solved"] for b in r["bases"].values()]
    assert r["effect"] == n[0] - n[1]
    assert len(next(iter(r["runs"].values()))) == 2  # quick: two rounds


def test_exercise_3_quick(every_exercise):
    r = seed0(every_exercise, 3)
    ei, star = r["runs"]["expert iteration"], r["runs"]["STaR rationalization"]
    assert all(x["rationalized"] == 0 for x in ei)  # plain expert iteration: no hints
    assert sum(x["rationalized"] for x in star) > 0 and all(x["trained_tokens"] >= 0 for x in star)
    assert r["coverage"] == star[-1]["covered"] - ei[-1]["covered"]


def test_exercise_6_keeps_the_first_checkpoint_at_each_train_pass(monkeypatch):
    """By state: the first checked step whose train pass reaches 0.5, the first reaching 0.75,
    and the final model; a level never reached takes the final model, marked not reached."""
    from arl.experiments.exercises import sft_then_rl as e6
    from arl.experiments.problems.common import Ctx

    passes = {0: 0.1, 2: 0.4, 4: 0.6, 6: 0.55, 8: 0.8, 10: 0.9}

    def fake_sft(base, hook, hook_every):
        assert hook_every == e6.EVERY
        for step in range(11):
            if step % hook_every == 0:
                hook(step, {"at": step})
        return {"at": "final"}, None, []

    monkeypatch.setattr(e6, "train_oracle_sft", fake_sft)
    monkeypatch.setattr(e6, "base_config", lambda ctx: replace(BaseConfig(), sft_steps=10))
    monkeypatch.setattr(
        e6, "train_pass", lambda m, n, seed: passes[m["at"]] if m["at"] != "final" else 0.95
    )
    ctx = Ctx(number=6, quick=False, seed=0)
    arms = e6.checkpoints_by_state(ctx)
    kept = [(k, a["step"], a["model"]["at"]) for k, a in arms.items()]
    assert kept == [("pass 0.5", 4, 4), ("pass 0.75", 8, 8), ("final", 10, "final")]
    assert all(a["reached"] for a in arms.values())
    never = e6.checkpoints_by_state(ctx, levels=(0.5, 0.99))
    assert never["pass 0.99"]["reached"] is False and never["pass 0.99"]["step"] == 10

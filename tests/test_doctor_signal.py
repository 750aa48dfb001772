"""The doctor's rules for runs that cannot learn at all (issue 45): no tool call parsed, no
signal in any group with a zero update, a distilled student whose KL falls while its pass
rate does not; each just past and just short of its threshold on the hand-made logs of
tests/test_doctor.py. Then a thin TRL log of a model that never calls a tool (named first,
not "unjudged" nor truncation, in `arl doctor` and `arl report`), and hints that match the
run's config (the KL to the reference with kl=off)."""

import json
from pathlib import Path

from test_doctor import CONFIG, FIXTURES, fired

from arl.cli.main import main
from arl.doctor import diagnose, load_run, unchecked
from arl.doctor.report import render


def test_no_tool_calls_as_logged(tmp_path):
    on = fired(tmp_path / "a", tool_calls_per_episode=(1.0, 0.049))
    f = on["no-tool-calls"]
    assert f.problem == 13 and "0.05 tool calls per episode" in f.symptom
    assert list(on)[0] == "no-tool-calls"  # named first
    assert "no-tool-calls" not in fired(tmp_path / "b", tool_calls_per_episode=(1.0, 0.051))


def test_no_tool_calls_from_arl_turns_and_malformed_calls(tmp_path):
    # arl logs turns and malformed calls: each turn is one call, so parsed = turns - malformed
    on = fired(tmp_path / "a", mean_turns=(4.0, 4.0), malformed_per_episode=(0.1, 3.951))
    f = on["no-tool-calls"]
    assert "mean_turns - malformed_per_episode" in f.symptom
    assert f.causes[0].startswith("the model writes its calls in a format")  # all malformed
    assert list(on)[0] == "no-tool-calls"
    short = fired(tmp_path / "b", mean_turns=(4.0, 4.0), malformed_per_episode=(0.1, 3.949))
    assert "no-tool-calls" not in short


def test_no_tool_calls_blames_the_turn_end_when_completions_run_to_the_limit(tmp_path):
    cut = fired(
        tmp_path / "a",
        tool_calls_per_episode=(0.0, 0.0),
        truncated_frac=(1.0, 1.0),
        malformed_per_episode=None,
    )
    f = cut["no-tool-calls"]
    assert "--turn-end" in f.causes[0] and "100% truncated" in f.symptom
    order = list(cut)
    assert order.index("no-tool-calls") < order.index("truncation")
    calm = fired(tmp_path / "b", tool_calls_per_episode=(0.0, 0.0), truncated_frac=(0.0, 0.29))
    assert "--tool-format" in calm["no-tool-calls"].causes[0]
    past = fired(tmp_path / "c", tool_calls_per_episode=(0.0, 0.0), truncated_frac=(0.0, 0.31))
    assert "--turn-end" in past["no-tool-calls"].causes[0]


def test_zero_signal_3(tmp_path):
    still = {"grad_norm": (0.5, 0.9e-6)}
    f = fired(tmp_path / "a", degenerate_frac=(0.3, 0.991), **still)["zero-signal"]
    assert f.problem == 3 and "99% of groups all-equal" in f.symptom and "grad_norm" in f.symptom
    assert "zero-signal" not in fired(tmp_path / "b", degenerate_frac=(0.3, 0.989), **still)
    equal = {"degenerate_frac": (1.0, 1.0)}
    assert "zero-signal" not in fired(tmp_path / "c", grad_norm=(0.5, 1.1e-6), **equal)
    # the update as a loss (no gradient norm logged): its size, either sign
    no_norm = {"grad_norm": None, **equal}
    assert "zero-signal" in fired(tmp_path / "d", loss=(0.01, -0.9e-6), **no_norm)
    assert "zero-signal" not in fired(tmp_path / "e", loss=(0.01, -1.1e-6), **no_norm)
    # some groups all pass, the others all fail: a reward std above 0, no signal in any group
    mixed = fired(tmp_path / "i", reward_std=(0.5, 0.5), grad_norm=(0, 0), **equal)
    assert "zero-signal" in mixed
    # a log with the reward's std only (no share of all-equal groups)
    std = {"degenerate_frac": None, "grad_norm": (0.0, 0.0)}
    assert "zero-signal" in fired(tmp_path / "f", reward_std=(0.2, 0.9e-6), **std)
    assert "zero-signal" not in fired(tmp_path / "g", reward_std=(0.2, 1.1e-6), **std)
    # with no tool calls, that is the first cause
    none = fired(tmp_path / "h", tool_calls_per_episode=(0.0, 0.0), grad_norm=(0, 0), **equal)
    assert none["zero-signal"].causes[0].startswith("no tool calls")
    assert list(none)[:2] == ["no-tool-calls", "zero-signal"]


DISTILL = dict(CONFIG, teacher="runs/teacher/ckpt-000100")  # arl train distill's config


def test_distill_kl_without_pass_29(tmp_path):
    flat = {"pass_rate": (0.30, 0.329), "config": DISTILL}
    f = fired(tmp_path / "a", teacher_kl=(0.2, 0.139), **flat)["distill-kl-without-pass"]
    assert f.problem == 29 and "fell 30% (0.2 -> 0.139 nats" in f.symptom
    assert "distill-kl-without-pass" not in fired(tmp_path / "b", teacher_kl=(0.2, 0.141), **flat)
    kl = {"teacher_kl": (0.2, 0.1), "config": DISTILL}
    assert "distill-kl-without-pass" not in fired(tmp_path / "c", pass_rate=(0.3, 0.331), **kl)
    # the student already passes as often as its teacher: nothing left for the KL to give
    teacher = {"pass_rate": (0.30, 0.319), **kl}
    on = fired(tmp_path / "d", teacher_pass_rate=(0.35, 0.35), **teacher)
    assert "below the teacher's 0.35" in on["distill-kl-without-pass"].symptom
    assert "distill-kl-without-pass" not in fired(
        tmp_path / "e", teacher_pass_rate=(0.348, 0.348), **teacher
    )
    assert "distill-kl-without-pass" not in fired(
        tmp_path / "f", pass_rate=(0.95, 0.95), teacher_kl=(0.2, 0.1), config=DISTILL
    )


def test_distill_rule_is_not_about_a_pg_run(tmp_path):
    fired(tmp_path)
    run = load_run(tmp_path / "run")
    assert run.recipe == "pg"
    assert "distill-kl-without-pass" not in {g.rule for g in unchecked(run)}
    real = load_run(FIXTURES / "arl_distill")  # 2 steps: too short, so listed as unchecked
    assert "distill-kl-without-pass" in {g.rule for g in unchecked(real)}


def trl_no_calls(folder: Path, steps: int = 6) -> Path:
    """A TRL GRPOTrainer trainer_state.json of a model with tools that never calls one: the
    names GRPOTrainer logs (tools/* with tools=), every reward 0, loss and gradient 0, every
    completion cut at max_completion_length."""
    folder.mkdir(parents=True)
    history = [
        {
            "step": s,
            "epoch": s / steps,
            "reward": 0.0,
            "reward_std": 0.0,
            "frac_reward_zero_std": 1.0,
            "loss": 0.0,
            "grad_norm": 0.0,
            "learning_rate": 1e-6,
            "entropy": 2.5,
            "completions/mean_length": 256.0,
            "completions/clipped_ratio": 1.0,
            "tools/call_frequency": 0.0,
            "tools/failure_frequency": 0.0,
        }
        for s in range(1, steps + 1)
    ]
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return folder


def test_a_trl_run_without_tool_calls_is_named_first(tmp_path, capsys):
    out = trl_no_calls(tmp_path / "trl")
    found = diagnose(load_run(out))
    assert [f.rule for f in found][:2] == ["no-tool-calls", "zero-signal"]
    assert "unjudged" not in {f.rule for f in found}
    assert "--turn-end" in found[0].causes[0]  # cut at the limit, nothing malformed
    assert main(["doctor", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("Problem 13 [no-tool-calls]: 0.00 tool calls per episode")
    page = render(out)
    diagnosis = page[page.index('id="diagnosis"') :]
    assert diagnosis.index("no-tool-calls") < diagnosis.index("truncation")


def test_the_kl_hint_matches_the_run_s_config(tmp_path):
    off = {g.rule: g for g in unchecked(load_run(FIXTURES / "arl_pg_weak"))}  # kl=off
    hint = off["kl-plateau"].hint
    assert "kl=off" in hint and "an older or hand-made log" not in hint
    assert "--set kl=k3" in hint
    fired(tmp_path / "on", config=dict(CONFIG, kl="k3"), kl__ref_k3=None)
    on = {g.rule: g for g in unchecked(load_run(tmp_path / "on" / "run"))}
    assert "an older or hand-made log lacks it" in on["kl-plateau"].hint
    fired(tmp_path / "none", kl__ref_k3=None)  # a config that does not say
    unsaid = {g.rule: g for g in unchecked(load_run(tmp_path / "none" / "run"))}
    assert "default, kl=off, logs none" in unsaid["kl-plateau"].hint

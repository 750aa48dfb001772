"""`arl doctor` on other frameworks' logs: a real TRL GRPO run made here (a few GRPOTrainer
steps on the tiny local model of arl.hf.tiny, no hub), a verl file-logger log written in
verl's format, the one name table, and the command line (its lines, --json, bad input)."""

import json
import math

import pytest

from arl.cli.main import main
from arl.doctor import diagnose, load_run, unchecked
from arl.doctor.names import TRL, VERL, map_name, to_log

STEPS = 4  # GRPO steps of the TRL run: the rules need 4 logged steps for a trend


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    """A real GRPOTrainer run whose reward is always 0 and whose completions may not end
    within their 8 tokens: every group is all-equal and every completion is truncated."""
    pytest.importorskip("trl", reason="TRL is not installed (pip install 'arl[bench]')")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from arl.hf.tiny import build_tiny

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("trl")
    model = build_tiny(root / "model")

    def zero(completions, **kwargs):
        return [0.0 for _ in completions]

    args = GRPOConfig(
        output_dir=str(root / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=STEPS,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        beta=0.04,
        seed=0,
        dataloader_num_workers=0,
        generation_kwargs={"min_new_tokens": 8},  # no end of turn before the budget
    )
    prompts = Dataset.from_dict({"prompt": ["fix compute_values", "fix apply_data"] * 8})
    trainer = GRPOTrainer(model=str(model), reward_funcs=zero, args=args, train_dataset=prompts)
    trainer.train()
    trainer.save_state()  # output_dir/trainer_state.json, as a checkpoint holds it
    return root / "out", trainer.state.log_history


def logged(history: list[dict], name: str) -> list[tuple[int, float]]:
    return [(r["step"], float(r[name])) for r in history if name in r]


def test_trl_log_reads_into_arl_names(trl_run):
    out, history = trl_run
    run = load_run(out)
    assert (run.source, run.recipe) == ("trl", "pg")
    for trl_name in ("reward", "frac_reward_zero_std", "completions/clipped_ratio", "entropy"):
        assert list(run.series[TRL[trl_name]]) == logged(history, trl_name)
    assert list(run.series["kl/ref_k3"]) == logged(history, "kl")
    assert "rewards/zero/mean" in run.unmapped  # a reward function's own column
    assert "epoch" not in run.unmapped and "train_runtime" not in run.unmapped
    assert load_run(out / "trainer_state.json").series == run.series


def test_trl_run_diagnosed_with_what_it_could_not_check(trl_run):
    out, history = trl_run
    assert all(r["frac_reward_zero_std"] == 1.0 for r in history if "reward" in r)
    assert all(r["completions/clipped_ratio"] == 1.0 for r in history if "reward" in r)
    run = load_run(out)
    found = {f.rule: f for f in diagnose(run)}
    assert found["no-signal-groups"].symptom.startswith("100% of groups")
    assert found["truncation"].problem == 13
    assert found["no-signal-groups"].problem == 13  # truncation leads its causes
    gaps = {g.rule: g for g in unchecked(run)}
    assert {"kl-tail", "capped-share", "public-hidden-gap", "immediate-submit"} <= set(gaps)
    assert "vllm_importance_sampling_cap" in gaps["capped-share"].hint
    assert gaps["mismatch-growth"].missing == ("mismatch/mean",)
    assert "kl-plateau" not in gaps and "entropy-collapse" not in gaps  # these it can run


def test_trl_doctor_command(trl_run, capsys):
    out, _ = trl_run
    assert main(["doctor", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{out}: trl pg run, steps 1-{STEPS}")
    assert any(x.startswith("Problem 13 [truncation]: 100% of episodes") for x in lines)
    assert any(x.startswith("could not check [capped-share] (Problem 16)") for x in lines)


def verl_records(steps: int = 20) -> list[dict]:
    """Lines of verl's file logger ({"step", "data"}): entropy collapsing while the score
    rises, capped IS weights, long truncated responses, validation flat on two sets, and a
    NaN policy loss at the last step."""

    def lin(a: float, b: float, s: int) -> float:
        return a + (b - a) * (s - 1) / (steps - 1)

    out = []
    for s in range(1, steps + 1):
        data = {
            "actor/entropy": lin(0.9, 0.05, s),
            "actor/pg_clipfrac": 0.01,
            "actor/ppo_kl": 0.001,
            "actor/pg_loss": float("nan") if s == steps else -0.01,
            "actor/grad_norm": 0.3,
            "actor/lr": 1e-6,
            "critic/score/mean": lin(0.10, 0.35, s),
            "critic/rewards/mean": lin(0.10, 0.35, s),
            "response_length/mean": lin(500.0, 900.0, s),
            "response_length/clip_ratio": lin(0.05, 0.45, s),
            "rollout_corr/rollout_is_ratio_fraction_high": lin(0.01, 0.09, s),
            "rollout_corr/k3_kl": 0.001,
            "timing_s/step": 30.0,
            "perf/throughput": 1234.0,
        }
        if s % 5 == 0 or s == 1:
            data |= {"val-core/gsm8k/acc/mean@4": 0.40, "val-core/math/acc/mean@4": 0.20}
        out.append({"step": s, "elapsed_seconds": 30.0 * s, "data": data})
    return out


@pytest.fixture
def verl_log(tmp_path):
    path = tmp_path / "verl_demo" / "grpo_run.jsonl"  # VERL_FILE_LOGGER_ROOT/project/exp.jsonl
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in verl_records()))  # NaN as NaN
    return path


def test_verl_log_reads_into_arl_names(verl_log):
    run = load_run(verl_log)
    assert (run.source, run.recipe) == ("verl", "pg")
    assert run.series["entropy"][0] == (1, 0.9) and run.series["capped_frac"][-1] == (20, 0.09)
    # two validation sets at a step are averaged into one held-out pass rate
    assert run.series["eval/heldout_pass"][0] == (1, pytest.approx(0.30))
    assert math.isnan(run.series["loss"][-1][1])
    assert "perf/throughput" in run.unmapped and "critic/rewards/mean" in run.unmapped
    assert load_run(verl_log.parent).series.keys() == run.series.keys()  # the folder too


def test_verl_log_diagnosed_with_what_it_could_not_check(verl_log):
    run = load_run(verl_log)
    found = {f.rule: f for f in diagnose(run)}
    assert found["entropy-collapse"].problem == 26  # the score rose: not Problem 28
    assert found["capped-share"].problem == 16 and found["truncation"].problem == 13
    assert "cannot split it by outcome" in found["length-in-failures"].symptom
    assert found["reward-vs-heldout"].problem == 25
    assert found["non-finite"].symptom.startswith("loss not finite from step 20")
    gaps = {g.rule: g for g in unchecked(run)}
    assert "filter_groups" in gaps["no-signal-groups"].hint  # verl logs no degenerate share
    assert "rollout_log_probs" in gaps["mismatch-growth"].hint
    assert {"public-hidden-gap", "immediate-submit", "kl-tail"} <= set(gaps)


def arl_loop_records(steps: int = 20, calls: float = 0.0, malformed: float = 0.0) -> list[dict]:
    """verl's file-logger lines of a run with arl's agent loop (arl.bridges.verl) on arl's
    rows (data source arl/bugfix, a slash in it): each step's tool_call_counts/mean and
    num_turns/mean, and at validation (every 5 steps) the loop's reward_extra_info as verl's
    trainer names it, val-core/<source>/acc/mean@N and val-aux/<source>/<name>/mean@N."""
    out = []
    for s in range(1, steps + 1):
        data = {
            "actor/entropy": 0.8,
            "actor/pg_loss": 0.0,
            "actor/grad_norm": 0.0,
            "critic/score/mean": 0.0,
            "response_length/mean": 2048.0,
            "response_length/clip_ratio": 0.9,
            "num_turns/mean": 2.0,
            "tool_call_counts/mean": calls,
            "tool_call_counts/max": calls,
            "agent_loop/tool_calls/mean": 0.0,
        }
        if s % 5 == 0:
            src = "val-aux/arl/bugfix"
            data |= {
                "val-core/arl/bugfix/acc/mean@8": 0.0,
                f"{src}/reward/mean@8": 0.0,
                f"{src}/tool_call_counts/mean@8": calls,
                f"{src}/malformed_per_episode/mean@8": malformed,
                f"{src}/immediate_submit_frac/mean@8": 0.0,
                f"{src}/public_pass_rate/mean@8": 0.0,
                f"{src}/public_hidden_gap/mean@8": 0.0,
                f"{src}/hack_rate/mean@8": 0.0,
                f"{src}/turns/mean@8": calls,
                f"{src}/truncated/mean@8": 1.0,
                f"{src}/acc/std@8": 0.0,
                "val-aux/num_turns/mean": 2.0,
            }
        out.append({"step": s, "data": data})
    return out


def test_verl_log_of_arls_agent_loop_is_diagnosed(tmp_path, capsys):
    """A run whose base model never ends a turn where the loop stops (no call in 20 steps):
    the doctor reads the loop's metrics from verl's names and says so, turn end first; the
    loop's validation metrics keep arl's names."""
    path = tmp_path / "arl_verl" / "run.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in arl_loop_records()))
    run = load_run(path)
    assert run.series["tool_calls_per_episode"][0] == (1, 0.0)
    assert run.series["eval/heldout_pass"] == tuple((s, 0.0) for s in (5, 10, 15, 20))
    assert run.series["malformed_per_episode"][-1] == (20, 0.0)
    assert {"immediate_submit_frac", "public_hidden_gap", "hack_rate"} <= set(run.series)
    # the loop's values verl also logs per training step stay apart, as does a std
    assert "val-aux/arl/bugfix/tool_call_counts/mean@8" in run.unmapped
    assert "val-aux/arl/bugfix/acc/std@8" in run.unmapped
    found = {f.rule: f for f in diagnose(run)}
    assert found["no-tool-calls"].problem == 13
    assert "turn end" in found["no-tool-calls"].causes[0]
    assert main(["doctor", str(path)]) == 0
    text = capsys.readouterr().out
    assert "no-tool-calls" in text and "no numeric metrics" not in text
    gaps = {g.rule for g in unchecked(run)}
    assert "immediate-submit" not in gaps and "public-hidden-gap" not in gaps


def test_verl_log_of_arls_agent_loop_with_malformed_calls(tmp_path):
    path = tmp_path / "run.jsonl"
    records = arl_loop_records(calls=2.0, malformed=1.5)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    found = {f.rule: f for f in diagnose(load_run(path))}
    assert "no-tool-calls" not in found
    assert found["malformed-calls"].problem == 13


def test_name_table():
    assert map_name("trl", "frac_reward_zero_std") == "degenerate_frac"
    assert map_name("trl", "completions/clipped_ratio") == "truncated_frac"
    assert map_name("verl", "actor/pg_clipfrac") == "clip_frac"
    assert map_name("verl", "response_length/clip_ratio") == "truncated_frac"
    # verl's rollout-correction metrics, under their current prefix and the older one
    assert map_name("verl", "rollout_corr/k3_kl") == map_name("verl", "mismatch/k3_kl")
    assert map_name("verl", "val-core/aime24/reward/mean@32") == "eval/heldout_reward"
    assert map_name("verl", "val-aux/aime24/reward/std@32") is None
    # a data source with a slash (arl's rows); arl's agent loop's validation metrics
    assert map_name("verl", "val-core/arl/bugfix/acc/mean@8") == "eval/heldout_pass"
    assert map_name("verl", "val-aux/arl/bugfix/reward/mean@8") == "eval/heldout_reward"
    assert map_name("verl", "val-aux/arl/codefix/hack_rate/mean@4") == "hack_rate"
    assert map_name("verl", "val-aux/arl/bugfix/turns/mean@8") is None
    assert map_name("verl", "tool_call_counts/mean") == "tool_calls_per_episode"
    assert map_name("trl", "no/such/metric") is None
    assert VERL["actor/entropy"] == TRL["entropy"] == "entropy"
    assert "vllm" in to_log("trl", "capped_frac") and "rollout_is" in to_log("verl", "capped_frac")


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"step": 1, "reward": 0.1}\n{"step": 2,\n{"step": 3}\n')
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 3}))
    verl = tmp_path / "v.jsonl"
    verl.write_text('{"step": 1, "data": {"actor/entropy": 0.5}}\n{"step": 2}\n')
    empty = tmp_path / "empty"
    empty.mkdir()
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        (sweep / f"seed={seed}").mkdir(parents=True)
        (sweep / f"seed={seed}" / "metrics.jsonl").write_text('{"step": 1, "reward": 0.1}\n')
    for path, words in (
        (tmp_path / "missing", "no such file or folder"),
        (bad, "corrupt line"),
        (state, "no log_history"),
        (verl, "not a verl file-logger line"),
        (empty, "no metrics.jsonl (arl), trainer_state.json (TRL) or verl JSONL"),
        (sweep, "a folder of runs (seed=0, seed=1); name one"),
    ):
        assert main(["doctor", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("arl: error: ") and words in err


def test_json_output(verl_log, capsys):
    assert main(["doctor", str(verl_log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "verl" and doc["steps"] == 20
    rules = {f["rule"]: f for f in doc["findings"]}
    assert rules["capped-share"]["problem"] == 16 and rules["capped-share"]["causes"]
    assert any(g["rule"] == "no-signal-groups" for g in doc["could_not_check"])

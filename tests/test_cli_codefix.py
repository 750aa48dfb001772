"""The CLI on CodeFix: `--env codefix` for eval, show, the recipes, PG (env.name) and export."""

import json

import pytest
import torch

from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import vocab_of
from arl.sandbox import sandbox_available
from arl.train.checkpoint import save_checkpoint

pytestmark = pytest.mark.skipif(
    sandbox_available() is not None, reason=f"no sandbox here: {sandbox_available()}"
)
SMALL = ["--set", "tasks_per_step=2", "--set", "group_size=2", "--set", "minibatches=1"]


def _tiny(env: str) -> TinyAgent:
    torch.manual_seed(0)
    shape = dict(n_layer=1, n_embd=32, n_head=2, block_size=256)
    return TinyAgent(TinyAgentConfig(vocab_size=len(vocab_of(env)), **shape))


@pytest.fixture()
def init(tmp_path):
    return str(save_checkpoint(_tiny("codefix"), tmp_path / "init"))


def test_eval_scripted_policies_on_codefix(cli):
    code, out, err = cli("eval", "oracle", "--env", "codefix", "--samples", "1", "--json")
    m = json.loads(out)
    assert code == 0 and m["env"] == "codefix" and m["pass_rate"] == 1.0 and m["apply_rate"] == 1.0
    code, out, _ = cli("eval", "near_miss", "--env", "codefix", "--samples", "1", "--json")
    assert json.loads(out)["apply_rate"] < 0.2
    code, _, err = cli("eval", "hardcode", "--env", "codefix")  # a BugFix-only policy
    assert code == 2 and "unknown policy 'hardcode' for --env codefix" in err


def test_a_checkpoint_of_the_other_environment_is_refused_in_one_line(cli, tmp_path):
    bugfix = str(save_checkpoint(_tiny("bugfix"), tmp_path / "b"))
    code, _, err = cli("eval", bugfix, "--env", "codefix", "--samples", "1")
    assert code == 2 and "does not match the codefix environment's" in err
    assert "it speaks bugfix's: --env bugfix" in err and err.count("\n") == 1


def test_train_pg_on_codefix_logs_the_apply_rate(cli, tmp_path, init):
    out = tmp_path / "run"
    code, stdout, err = cli(
        "train",
        "pg",
        "--init",
        init,
        "--env",
        "codefix",
        "--quiet",
        *SMALL,
        "--set",
        "steps=2",
        "--set",
        f"out={out}",
    )
    assert code == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("apply_rate" in r for r in rows)
    assert json.loads((out / "config.json").read_text())["env"]["name"] == "codefix"
    # the same through --set, with a CodeFix field; a BugFix-only field is named
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        "--quiet",
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        "env.name=codefix",
        "--set",
        "env.errors=terse",
        "--set",
        f"out={tmp_path / 'b'}",
    )
    assert code == 0, err
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        "--env",
        "codefix",
        "--set",
        "env.flaky_prob=0.1",
        "--set",
        f"out={tmp_path / 'c'}",
    )
    assert code == 2 and "env.flaky_prob: not a field of the codefix environment" in err


def test_init_cold_and_weak_are_codefix_bases(cli, tmp_path, monkeypatch):
    from arl.train import bases

    asked = []

    def fake(config, environment="bugfix"):
        asked.append(environment)
        return _tiny(environment)

    monkeypatch.setattr(bases, "cold_start", fake)
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        "cold",
        "--env",
        "codefix",
        "--quiet",
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        f"out={tmp_path / 'r'}",
    )
    assert code == 0 and asked == ["codefix"], err


def test_sft_rft_dpo_and_export_take_the_environment(cli, tmp_path, init):
    for recipe, extra in (
        ("sft", ["--steps", "2", "--batch-size", "2"]),
        ("rft", ["--rounds", "1", "--samples", "1", "--steps-per-round", "1"]),
    ):
        out = tmp_path / recipe
        code, _, err = cli(
            "train",
            recipe,
            "--init",
            init,
            "--env",
            "codefix",
            "--quiet",
            "--eval-samples",
            "1",
            "--out",
            str(out),
            *extra,
        )
        assert code == 0, err
        results = json.loads((out / "results.json").read_text())
        assert results["env"] == "codefix" and "eval/heldout_pass_rate" in results
    pytest.importorskip("datasets")
    path = tmp_path / "t.parquet"
    code, _, err = cli(
        "export",
        "trajectories",
        str(path),
        "--policy",
        "oracle",
        "--env",
        "codefix",
        "--samples",
        "1",
    )
    assert code == 0, err
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(path), split="train")
    assert len(ds) == 28 and set(ds["data_source"]) == {"arl/codefix"} and all(ds["passed"])


def test_show_renders_a_codefix_episode(cli):
    code, out, _ = cli("show", "sum_cubes", "--env", "codefix")
    assert code == 0 and "replace" in out and "with" in out and "passed 3 of 3" in out


def test_allow_unsandboxed_belongs_to_codefix(cli):
    code, _, err = cli("eval", "oracle", "--allow-unsandboxed", "--samples", "1")
    assert code == 2 and "bugfix environment runs no sandbox" in err


def test_the_checkpoint_hint_names_the_environment(cli, tmp_path, init):
    out = tmp_path / "run"
    code, stdout, err = cli(
        "train",
        "pg",
        "--init",
        init,
        "--env",
        "codefix",
        "--quiet",
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        f"out={out}",
    )
    assert code == 0, err
    assert f"arl eval {out}/ckpt-000001 --env codefix" in " ".join(stdout.split())

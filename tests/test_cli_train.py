"""`arl train pg` end to end: runs, writes metrics and checkpoints, resumes, names bad fields."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from arl.bugfix import default_vocab
from arl.model import TinyAgent, TinyAgentConfig
from arl.train.checkpoint import save_checkpoint
from arl.train.pg_config import PGConfig, make_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pg.json"
SMALL = ["--set", "tasks_per_step=2", "--set", "group_size=2", "--set", "minibatches=1"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def init(tmp_path):
    torch.manual_seed(0)
    model = TinyAgent(
        TinyAgentConfig(
            vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
        )
    )
    return str(save_checkpoint(model, tmp_path / "init"))


def test_train_pg_runs_writes_and_resumes(cli, tmp_path, init):
    out = tmp_path / "run"
    code, stdout, err = cli(
        "train",
        "pg",
        "--init",
        init,
        "--quiet",
        *SMALL,
        "--set",
        "steps=2",
        "--set",
        f"out={out}",
    )
    assert code == 0, err
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]
    assert "ckpt-000002" in stdout
    code, stdout, err = cli(
        "train",
        "pg",
        "--init",
        init,
        "--quiet",
        *SMALL,
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
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]
    ckpt = out / "ckpt-000003"
    code, stdout, _ = cli("eval", str(ckpt), "--samples", "1", "--json")
    assert code == 0 and json.loads(stdout)["episodes"] == 20


@pytest.mark.parametrize(
    "setting, field",
    [
        ("bogus=1", "bogus"),
        ("lr=fast", "lr"),
        ("group_size=0", "group_size"),
        ("kl=k4", "kl"),
        ("clip=maybe", "clip"),
        ("noequals", "noequals"),
        ("reward=public", "env.reward"),  # the flat name of before the nesting: say the new one
        ("env.reward=nope", "env.reward"),
        ("env.max_turns=0", "env.max_turns"),
    ],
)
def test_bad_settings_give_one_line_naming_the_field(cli, init, setting, field):
    code, _, err = cli("train", "pg", "--init", init, "--set", setting)
    assert code == 2
    assert err.count("\n") == 1 and field in err and err.startswith("arl: error:")


def test_bad_config_file_and_init(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"group_size": "eight"}')
    code, _, err = cli("train", "pg", "--config", str(bad))
    assert code == 2 and "group_size" in err and err.count("\n") == 1
    code, _, err = cli("train", "pg", "--init", str(tmp_path / "missing"))
    assert code == 2 and "--init" in err


def test_example_config_is_valid_and_uses_the_defaults():
    values = {k: v for k, v in json.loads(EXAMPLE.read_text()).items() if not k.startswith("_")}
    config = make_config(values)
    defaults = PGConfig()
    differ = {k for k in values if getattr(config, k) != getattr(defaults, k)}
    assert differ <= {"out", "eval_every", "save_every"}
    fields = {f.name for f in dataclasses.fields(PGConfig)}
    assert set(values) == fields, "examples/pg.json lists every PGConfig field (docs/trainers.md)"


def test_a_sweep_runs_one_folder_per_value_and_skips_finished_points(cli, tmp_path, init):
    out = tmp_path / "sweep"
    argv = [
        "train",
        "pg",
        "--init",
        init,
        "--quiet",
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        f"out={out}",
        "--sweep",
        "seed=3,4",
    ]
    code, stdout, err = cli(*argv)
    assert code == 0, err
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert set(points) == {"3", "4"}
    for seed in (3, 4):
        text = (out / f"seed={seed}" / "metrics.jsonl").read_text()
        rows = [json.loads(x) for x in text.splitlines()]
        assert rows[-1]["step"] == 1
        assert json.loads((out / f"seed={seed}" / "config.json").read_text())["seed"] == seed
    a, b = (
        json.loads((out / f"seed={s}" / "metrics.jsonl").read_text().splitlines()[-1])
        for s in (3, 4)
    )
    assert a["reward"] != b["reward"] or a["entropy"] != b["entropy"]  # each its own seed
    code, stdout, _ = cli(*argv)  # killed and started again: finished points are not rerun
    assert code == 0 and stdout.count("already finished") == 2
    code, _, err = cli(*argv[:-1], "seed=3,x")
    assert code == 2 and "seed" in err and "\n" not in err.strip()


def test_train_sft_takes_a_warmup_a_decay_and_a_beta2_and_refuses_bad_ones(cli, tmp_path, init):
    out = tmp_path / "sft"
    code, _, err = cli(
        "train",
        "sft",
        "--init",
        init,
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--warmup-steps",
        "2",
        "--decay",
        "cosine",
        "--beta2",
        "0.95",
        "--eval-samples",
        "1",
        "--out",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert (settings["warmup_steps"], settings["decay"], settings["beta2"]) == (2, "cosine", 0.95)
    bad = (("--warmup-steps", "-1"), ("--decay", "linear"), ("--beta2", "1"), ("--beta2", "nan"))
    for flag, value in bad:
        code, _, err = cli("train", "sft", "--init", init, flag, value, "--out", str(tmp_path))
        assert code == 2 and flag in err and "\n" not in err.strip()


def test_train_rft_and_dpo_run_from_their_derived_flags(cli, tmp_path, init):
    out = tmp_path / "rft"
    rft = "--rounds 1 --samples 1 --steps-per-round 1 --dedup --set temperature=0.9"
    quick = ["--init", init, "--eval-samples", "1", "--quiet"]
    code, _, err = cli("train", "rft", *rft.split(), *quick, "--out", str(out))
    assert code == 0, err
    settings = json.loads((out / "results.json").read_text())["settings"]
    keys = ("samples_per_task", "dedup", "temperature")
    assert [settings[k] for k in keys] == [1, True, 0.9]
    dpo = ["--samples", "1", "--steps", "1", "--out", str(tmp_path / "dpo")]
    code, _, err = cli("train", "dpo", *dpo, *quick)
    assert code == 2 and "no task had both" in err and "--samples" in err  # untrained: no pairs

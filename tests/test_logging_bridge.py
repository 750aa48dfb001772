"""`arl train pg --report-to`: the scalars of metrics.jsonl, step for step, in TensorBoard."""

import json
import sys

import pytest
import torch

from arl.bugfix import default_vocab
from arl.logging_bridge import REPORT_TO, make_sink, scalars
from arl.model import TinyAgent, TinyAgentConfig
from arl.train.checkpoint import save_checkpoint

SMALL = [
    "--set",
    "tasks_per_step=2",
    "--set",
    "group_size=2",
    "--set",
    "minibatches=1",
    "--set",
    "eval_every=2",
    "--set",
    "eval_samples=1",
    "--quiet",
]


@pytest.fixture()
def init(tmp_path):
    torch.manual_seed(0)
    cfg = TinyAgentConfig(
        vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
    )
    return str(save_checkpoint(TinyAgent(cfg), tmp_path / "init"))


def test_scalars_keep_finite_numbers_and_drop_step_bools_and_none():
    record = {
        "step": 3,
        "reward": 0.5,
        "tasks_with_grad": 2,
        "kl/mu_k3": 1e-3,
        "ok": True,
        "len_success_p50": None,
        "name": "x",
        "bad": float("nan"),
    }
    assert scalars(record) == {"reward": 0.5, "tasks_with_grad": 2.0, "kl/mu_k3": 1e-3}


def test_make_sink_none_and_unknown(tmp_path):
    assert REPORT_TO == ("none", "tensorboard", "wandb")
    assert make_sink("none", tmp_path, "x", {}) is None
    with pytest.raises(ValueError, match="--report-to"):
        make_sink("mlflow", tmp_path, "x", {})


def _events(logdir) -> dict[str, dict[int, float]]:
    """Every scalar tag of a TensorBoard log directory: {tag: {step: value}}."""
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def _jsonl(path, step: str = "step") -> dict[str, dict[int, float]]:
    """metrics.jsonl as {key: {step: value}}, through the same `scalars` filter (`step`: the
    record's key that is its step; RFT's is "steps", its optimizer steps so far)."""
    out: dict[str, dict[int, float]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for key, value in scalars(record).items():
            out.setdefault(key, {})[record[step]] = value
    return out


def test_tensorboard_events_equal_metrics_jsonl(cli, tmp_path, init):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        *SMALL,
        "--set",
        "steps=2",
        "--set",
        f"out={out}",
        "--report-to",
        "tensorboard",
    )
    assert code == 0, err
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    events, logged = _events(out / "tensorboard"), _jsonl(out / "metrics.jsonl")
    assert "eval/heldout_pass" in logged and "kl/mu_k3" in logged and "reward" in logged
    assert set(events) == set(logged)
    for key, by_step in logged.items():  # float32 in the event file
        assert events[key] == pytest.approx(by_step, rel=1e-6, abs=1e-30), key
    # a resume continues the run: the tensorboard folder is the run's own, not foreign
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        *SMALL,
        "--set",
        "steps=3",
        "--set",
        f"out={out}",
        "--set",
        "resume=true",
        "--allow-change",
        "steps",
        "--report-to",
        "tensorboard",
    )
    assert code == 0, err
    assert set(_events(out / "tensorboard")["reward"]) == {1, 2, 3}


def test_no_report_writes_no_tensorboard_folder(cli, tmp_path, init):
    out = tmp_path / "run"
    code, _, err = cli(
        "train", "pg", "--init", init, *SMALL, "--set", "steps=1", "--set", f"out={out}"
    )
    assert code == 0, err
    assert not (out / "tensorboard").exists() and not (out / "wandb").exists()


@pytest.mark.parametrize(
    "report, module", [("wandb", "wandb"), ("tensorboard", "torch.utils.tensorboard")]
)
def test_missing_package_is_one_line_exit_2(cli, tmp_path, init, monkeypatch, report, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        f"out={tmp_path / 'run'}",
        "--report-to",
        report,
    )
    assert code == 2 and err.count("\n") == 1 and "pip install" in err, err


def test_wandb_offline_by_default(cli, tmp_path, init, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (not part of the CI extras)")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "run"
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        *SMALL,
        "--set",
        "steps=1",
        "--set",
        f"out={out}",
        "--report-to",
        "wandb",
    )
    assert code == 0, err
    assert list((out / "wandb").glob("offline-run-*"))


class _FakeWandb:
    """Stands in for the wandb package: records init's arguments, WANDB_MODE and each log."""

    def __init__(self):
        self.logged: dict[str, dict[int, float]] = {}
        self.init_kwargs: dict = {}
        self.mode: str | None = None
        self.finished = False

    def init(self, **kwargs):
        import os

        self.init_kwargs, self.mode = kwargs, os.environ.get("WANDB_MODE")
        return self

    def log(self, values, step):
        for key, value in values.items():
            self.logged.setdefault(key, {})[step] = value

    def finish(self):
        self.finished = True


def test_wandb_sink_gets_metrics_jsonl_offline(cli, tmp_path, init, monkeypatch):
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "run"
    code, _, err = cli(
        "train",
        "pg",
        "--init",
        init,
        *SMALL,
        "--set",
        "steps=2",
        "--set",
        f"out={out}",
        "--report-to",
        "wandb",
    )
    assert code == 0, err
    assert fake.mode == "offline" and fake.finished
    assert fake.init_kwargs["dir"] == str(out) and fake.init_kwargs["config"]["steps"] == 2
    assert fake.logged == _jsonl(out / "metrics.jsonl")  # the same floats, not float32


def test_train_distill_reports_its_teacher_metrics_to_tensorboard(cli, tmp_path, init):
    pytest.importorskip("tensorboard")
    out = tmp_path / "distill"
    code, _, err = cli(
        "train",
        "distill",
        "--init",
        init,
        "--teacher",
        init,
        *SMALL,
        "--quiet",
        "--set",
        "steps=2",
        "--set",
        f"out={out}",
        "--report-to",
        "tensorboard",
    )
    assert code == 0, err
    events, logged = _events(out / "tensorboard"), _jsonl(out / "metrics.jsonl")
    for key in ("teacher_kl", "teacher_kl_q99", "teacher_pass_rate", "train_tokens"):
        assert events[key] == pytest.approx(logged[key], rel=1e-6, abs=1e-30), key
    # the teacher is the student here: on-policy, its KL is zero up to the sampler's rounding
    assert abs(events["teacher_kl"][1]) < 1e-4


# --- the demonstration recipes: sft, rft, dpo --------------------------------------------------

RECIPES = {  # flags, the record key that is the step, and the lr of each logged step by hand
    "sft": (
        ["--steps", "3", "--batch-size", "2", "--warmup-steps", "2", "--decay", "cosine"],
        "step",
        {1: 1e-3 * 1 / 2, 2: 1e-3, 3: 0.0},  # linear warmup over 2 steps, then cosine to 0
    ),
    "rft": (
        ["--rounds", "2", "--samples", "2", "--steps-per-round", "2", "--lr", "5e-4"],
        "steps",
        {2: 5e-4, 4: 5e-4},  # logged after each round, at the optimizer steps so far
    ),
    "dpo": (["--steps", "2", "--samples", "4", "--lr", "2e-3"], "step", {0: 2e-3, 1: 2e-3}),
}


def _blind_sampling(monkeypatch) -> None:
    """Sampling replaced by the scripted blind policy: pairs and kept episodes on a random init,
    and no model time in the rollouts or the final evaluation."""
    import arl.eval.metrics as metrics

    real = metrics.run_policy

    def blind(policy, tasks, samples=4, seed=0, **kw):
        return real("blind", tasks, samples, seed, env_config=kw.get("env_config"))

    monkeypatch.setattr(metrics, "run_policy", blind)
    monkeypatch.setattr("arl.train.rft.run_policy", blind)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipes_send_every_record_and_their_lr(cli, tmp_path, init, monkeypatch, recipe):
    flags, step, lr = RECIPES[recipe]
    _blind_sampling(monkeypatch)
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    out = tmp_path / recipe
    code, _, err = cli(
        "train",
        recipe,
        "--init",
        init,
        *flags,
        "--eval-samples",
        "1",
        "--out",
        str(out),
        "--quiet",
        "--report-to",
        "wandb",
    )
    assert code == 0, err
    logged = _jsonl(out / "metrics.jsonl", step)
    assert fake.finished and fake.init_kwargs["name"] == f"train {recipe}"
    assert fake.logged == logged  # every record's scalars, at its step
    assert logged["lr"] == pytest.approx(lr, abs=1e-12)
    assert ("loss" in logged) == (recipe != "rft")


def test_sft_report_to_tensorboard(cli, tmp_path, init, monkeypatch):
    pytest.importorskip("tensorboard")
    _blind_sampling(monkeypatch)
    out = tmp_path / "sft"
    flags, _, lr = RECIPES["sft"]
    code, _, err = cli(
        "train",
        "sft",
        "--init",
        init,
        *flags,
        "--eval-samples",
        "1",
        "--out",
        str(out),
        "--quiet",
        "--report-to",
        "tensorboard",
    )
    assert code == 0, err
    events, logged = _events(out / "tensorboard"), _jsonl(out / "metrics.jsonl")
    assert set(events) == set(logged) == {"loss", "lr"}
    assert events["lr"] == pytest.approx(lr, abs=1e-9)
    assert events["loss"] == pytest.approx(logged["loss"], rel=1e-6)
    # an --overwrite run owns its tensorboard folder (not another run's files)
    code, _, err = cli(
        "train",
        "sft",
        "--init",
        init,
        "--steps",
        "1",
        "--eval-samples",
        "1",
        "--out",
        str(out),
        "--quiet",
        "--overwrite",
    )
    assert code == 0, err
    assert not (out / "tensorboard").exists()

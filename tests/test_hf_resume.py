"""A real model's PG run resumes (issue 45), as TinyAgent's does: interrupted after step 2's
checkpoint, resumed on a freshly loaded model, it gives the uninterrupted run's metrics and
weights, in full fine-tuning and with LoRA; damaged or foreign weights are refused in one line."""

import json
from dataclasses import replace

import pytest
import torch

pytest.importorskip("transformers")

from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.errors import ArlError  # noqa: E402
from arl.hf.policy import load_hf  # noqa: E402
from arl.hf.tiny import build_tiny  # noqa: E402
from arl.train.checkpoint import checkpoints  # noqa: E402
from arl.train.pg import train_pg  # noqa: E402
from arl.train.pg_config import PGConfig  # noqa: E402

pytestmark = pytest.mark.slow
TASKS = tasks_for("train")[::7]  # 3 tasks
# entropy_coef: a gradient at every step even where every episode of an untrained model fails
CONFIG = PGConfig(
    steps=3,
    tasks_per_step=2,
    group_size=2,
    minibatches=1,
    kl="k3",
    entropy_coef=0.01,
    save_every=1,
    eval_every=0,
)
TIMING = ("time", "seconds", "wall")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("qwen"), style="qwen2.5", layers=1)


def policy(model_dir, lora: bool):
    p = load_hf(str(model_dir))
    if lora:
        from arl.hf.lora import add_lora

        add_lora(p, 2)
    return p


def strip(history):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in history]


def crash_at(step_no):
    def hook(step, model):
        if step == step_no:
            raise KeyboardInterrupt
        return None

    return hook


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_real_models_run_resumes_exactly(model_dir, tmp_path, lora):
    torch.manual_seed(0)
    whole_model = policy(model_dir, lora)
    start = [p.detach().clone() for p in whole_model.parameters()]
    whole = strip(train_pg(whole_model, CONFIG, TASKS))
    moved = [not torch.equal(a, b) for a, b in zip(start, whole_model.parameters(), strict=True)]
    assert any(moved)  # the run trains: a resume that lost the weights could not match it
    run = replace(CONFIG, out=str(tmp_path / "run"))
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        train_pg(policy(model_dir, lora), run, TASKS, hook=crash_at(3), hook_every=1)
    assert [p.name for p in checkpoints(tmp_path / "run")] == ["ckpt-000001", "ckpt-000002"]
    ckpt = checkpoints(tmp_path / "run")[-1]
    kind = "adapter_config.json" if lora else "model.safetensors"
    assert (ckpt / kind).is_file() and "weights_sha256" in json.loads(
        (ckpt / "arl.json").read_text()
    )
    resumed_model = policy(model_dir, lora)  # the weights come from the checkpoint
    resumed = strip(train_pg(resumed_model, replace(run, resume=True), TASKS))
    assert [r["step"] for r in resumed] == [3]
    assert resumed == whole[2:]
    samples = [
        json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().split("\n") if x
    ]
    assert sorted({r["step"] for r in samples}) == [1, 3]  # step 1 and the last, once each
    for r in samples:  # the chat model's text, its prompt ending in the task's issue
        assert r["completion"] and r["task"].split("_")[0] in r["prompt"].replace(" ", "_")
    for a, b in zip(whole_model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_damaged_or_foreign_weights_are_refused(model_dir, tmp_path):
    run = replace(CONFIG, steps=1, out=str(tmp_path / "run"))
    train_pg(policy(model_dir, False), run, TASKS)
    ckpt = checkpoints(tmp_path / "run")[-1]
    more = replace(run, steps=2, resume=True)
    other = build_tiny(tmp_path / "other", style="qwen2.5", layers=2)
    with pytest.raises(ArlError, match="holds another model than --model") as e:
        train_pg(load_hf(str(other)), more, TASKS, allow_change=("steps",))
    assert "num_hidden_layers 1 vs 2" in str(e.value)
    with pytest.raises(ArlError, match="LoRA adapter"):
        train_pg(policy(model_dir, True), more, TASKS, allow_change=("steps",))
    meta = json.loads((ckpt / "arl.json").read_text())
    meta["weights_sha256"] = "0" * 64  # weights that are not the ones the run saved
    (ckpt / "arl.json").write_text(json.dumps(meta))
    with pytest.raises(ArlError, match="corrupt model weights \\(checksum differs\\)"):
        train_pg(policy(model_dir, False), more, TASKS, allow_change=("steps",))

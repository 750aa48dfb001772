"""A resume applies what --allow-change admits: the optimizer's learning rate and weight decay,
the entropy coefficient and a KL switched on take effect; a seed cannot change (issue 26)."""

import io

import pytest
import torch

from arl.bugfix import default_vocab
from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig
from arl.train.checkpoint import REAPPLIED, STATE_FILE, checkpoints
from arl.train.pg import train_pg
from arl.train.pg_config import PGConfig

SMALL = dict(tasks_per_step=2, group_size=2, minibatches=1, save_every=1, lr=3e-4)


def _model() -> TinyAgent:
    torch.manual_seed(0)
    shape = dict(n_layer=1, n_embd=32, n_head=2, block_size=256)
    return TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab()), **shape))


def _state(out) -> dict:
    data = (checkpoints(out)[-1] / STATE_FILE).read_bytes()
    return torch.load(io.BytesIO(data), weights_only=True)


@pytest.mark.parametrize(
    ("field", "value"), [("lr", 3e-3), ("weight_decay", 0.1), ("entropy_coef", 0.05), ("kl", "k3")]
)
def test_an_admitted_change_takes_effect(tmp_path, field, value):
    assert field in REAPPLIED
    tasks = tasks_for("train")[:4]
    train_pg(_model(), PGConfig(steps=2, out=str(tmp_path), **SMALL), tasks, steps=1)  # a stop
    before = _state(tmp_path)
    config = PGConfig(steps=2, out=str(tmp_path), resume=True, **{**SMALL, field: value})
    with pytest.raises(ArlError, match=f"--allow-change {field}"):
        train_pg(_model(), config, tasks)
    history = train_pg(_model(), config, tasks, allow_change=(field,))
    after = _state(tmp_path)
    assert after["step"] == 2 and [r["step"] for r in history if "reward" in r] == [2]
    group = after["optimizer"]["param_groups"][0]
    if field in ("lr", "weight_decay"):
        assert before["optimizer"]["param_groups"][0][field] != value and group[field] == value
    elif field == "entropy_coef":
        assert before["entropy_coef"] == 0.0 and after["entropy_coef"] == value
    else:  # the KL's reference is the policy it resumed: saved, and equal to its weights then
        assert before["reference"] == {} and set(after["reference"]) == set(_model().state_dict())
        assert "kl/ref_k3" in history[-1]


def test_a_seed_cannot_change_on_a_resume(tmp_path):
    tasks = tasks_for("train")[:4]
    train_pg(_model(), PGConfig(steps=2, out=str(tmp_path), **SMALL), tasks, steps=1)
    config = PGConfig(steps=2, seed=5, out=str(tmp_path), resume=True, **SMALL)
    with pytest.raises(ArlError, match="seed cannot change on a resume"):
        train_pg(_model(), config, tasks, allow_change=("seed",))


def test_an_unchanged_resume_keeps_the_saved_state(tmp_path):
    """Re-applying the config is a no-op when nothing changed: the optimizer's groups hold the
    values they were saved with, and a resumed run equals an uninterrupted one."""
    tasks = tasks_for("train")[:4]
    whole = tmp_path / "whole"
    train_pg(_model(), PGConfig(steps=2, out=str(whole), **SMALL), tasks)
    part = tmp_path / "part"
    train_pg(_model(), PGConfig(steps=2, out=str(part), **SMALL), tasks, steps=1)
    train_pg(_model(), PGConfig(steps=2, out=str(part), resume=True, **SMALL), tasks)
    a, b = _state(whole), _state(part)
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert all(
        torch.equal(x, y)
        for x, y in zip(_flat(a["optimizer"]["state"]), _flat(b["optimizer"]["state"]), strict=True)
    )


def _flat(state: dict) -> list:
    return [t for k in sorted(state) for t in state[k].values() if torch.is_tensor(t)]


def test_a_damaged_newest_checkpoint_is_refused_naming_the_last_good_one(tmp_path):
    """Deleting ckpt-2's trainer state used to make a resume start silently from ckpt-1 and
    overwrite ckpt-2; now it is refused, naming both (remove the damaged one to go back)."""
    tasks = tasks_for("train")[:4]
    config = PGConfig(steps=3, out=str(tmp_path), keep_checkpoints=3, **SMALL)
    train_pg(_model(), config, tasks, steps=2)
    (tmp_path / "ckpt-000002" / STATE_FILE).unlink()
    resume = PGConfig(steps=3, out=str(tmp_path), resume=True, keep_checkpoints=3, **SMALL)
    with pytest.raises(
        ArlError,
        match=r"ckpt-000002 is damaged .*last good checkpoint is .*"
        r"ckpt-000001: remove .*ckpt-000002 to resume from it",
    ):
        train_pg(_model(), resume, tasks)
    weights = tmp_path / "ckpt-000002" / "model.safetensors"
    (tmp_path / "ckpt-000001" / "model.safetensors").write_bytes(b"garbage")  # now both bad
    with pytest.raises(ArlError, match="damaged"):
        train_pg(_model(), resume, tasks)
    assert weights.exists()  # nothing was overwritten


def test_a_checkpoint_is_discarded_by_a_rename_first(tmp_path, monkeypatch):
    """A kill while an old checkpoint is deleted leaves a temp folder (removed when the run
    folder is next claimed), never a half ckpt-N that a resume would take for a checkpoint."""
    import shutil

    from arl.train import checkpoint

    ckpt = tmp_path / "ckpt-000001"
    (ckpt / "x").mkdir(parents=True)

    def killed(path, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.discard(ckpt)
    assert not ckpt.exists() and checkpoint.checkpoint_dirs(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == [".tmp-gone-ckpt-000001"]


def test_a_metrics_log_record_without_its_step_is_refused_on_resume(tmp_path):
    """A record whose `step` was deleted used to be dropped in silence when a resume kept the
    log's rows; now the resume names it."""
    import json

    tasks = tasks_for("train")[:4]
    train_pg(_model(), PGConfig(steps=2, out=str(tmp_path), **SMALL), tasks, steps=1)
    log = tmp_path / "metrics.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    del rows[0]["step"]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    resume = PGConfig(steps=2, out=str(tmp_path), resume=True, **SMALL)
    with pytest.raises(ArlError, match="metrics.jsonl: record 1 has no step"):
        train_pg(_model(), resume, tasks)

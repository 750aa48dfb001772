"""Checkpoints: a round trip is exact, and a corrupt, edited or non-finite one never loads."""

import json

import pytest
import torch

from arl.errors import ArlError
from arl.train.checkpoint import load_checkpoint, meta_digests, save_checkpoint, tensor_sha256


def test_checkpoint_round_trip(tiny_model, tmp_path):
    save_checkpoint(tiny_model, tmp_path / "ck", extra={"step": 3})
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.config == tiny_model.config
    ids = torch.arange(10)[None]
    torch.testing.assert_close(loaded(ids)[0], tiny_model(ids)[0], rtol=0, atol=0)
    assert loaded.lm_head.weight is loaded.wte.weight  # tying survives loading
    assert not list(tmp_path.glob("ck/*.tmp"))


def test_checkpoint_errors_are_one_line(tiny_model, tmp_path):
    path = save_checkpoint(tiny_model, tmp_path / "ck")
    weights = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ArlError, match="corrupt model.safetensors"):
        load_checkpoint(path)
    (path / "model.safetensors").write_bytes(weights)
    (path / "config.json").write_text("{not json")
    with pytest.raises(ArlError, match="corrupt config.json"):
        load_checkpoint(path)
    save_checkpoint(tiny_model, path)
    _edit_meta(path, lambda m: m["config"].update(n_embd=64), redigest=True)
    with pytest.raises(ArlError, match="do not match"):
        load_checkpoint(path)
    with pytest.raises(ArlError, match="not a directory"):
        load_checkpoint(tmp_path / "missing")


def _edit_meta(path, edit, redigest=False):
    """Change a checkpoint's config.json in place (re-digested: a consistent forgery)."""
    meta = json.loads((path / "config.json").read_text())
    edit(meta)
    if redigest:
        meta["digests"] = meta_digests(meta)
    (path / "config.json").write_text(json.dumps(meta))


def _flip(path, offset_from_end, block=1):
    data = bytearray((path / "model.safetensors").read_bytes())
    i = len(data) - offset_from_end
    data[i : i + block] = (
        bytes(b ^ 0xFF for b in data[i : i + block]) if block == 1 else bytes(block)
    )
    (path / "model.safetensors").write_bytes(bytes(data))


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda p: _flip(p, 1000), "checksum differs"),  # one byte of one weight
        (lambda p: _flip(p, 70_000, block=65_536), "corrupt model.safetensors"),  # a zeroed block
        (lambda p: _edit_meta(p, lambda m: m.update(format="arl.other")), "format 'arl.other'"),
        (lambda p: _edit_meta(p, lambda m: m.update(format_version=1)), "format version 1"),
        (lambda p: _edit_meta(p, lambda m: m["config"].update(n_head=2)), "config.n_head"),
        (lambda p: _edit_meta(p, lambda m: m.pop("digests")), "no digests"),
        (lambda p: _edit_meta(p, lambda m: m["tensors"].popitem(), True), "tensor names differ"),
    ],
)
def test_a_corrupted_checkpoint_never_loads(tiny_model, tmp_path, corrupt, message):
    path = save_checkpoint(tiny_model, tmp_path / "ck")
    load_checkpoint(path)  # intact: loads
    corrupt(path)
    with pytest.raises(ArlError, match=message) as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)


def test_non_finite_weights_are_neither_saved_nor_loaded(tiny_model, tmp_path):
    from safetensors.torch import save_file

    path = save_checkpoint(tiny_model, tmp_path / "ck")
    with torch.no_grad():
        tiny_model.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(ArlError, match="refusing to save non-finite weights"):
        save_checkpoint(tiny_model, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    state = {k: v.contiguous() for k, v in tiny_model.state_dict().items() if k != "wte.weight"}
    save_file(state, str(path / "model.safetensors"))  # a NaN with matching checksums
    sums = {k: tensor_sha256(v) for k, v in state.items()}
    _edit_meta(path, lambda m: m.update(tensors=sums), redigest=True)
    with pytest.raises(ArlError, match="non-finite weights in h.0.mlp.c_fc.weight"):
        load_checkpoint(path)

"""arl.runio: atomic writes leave no partial file, a torn log line is dropped, one run a folder."""

import json
import os

import pytest

from arl import runio
from arl.errors import ArlError
from arl.runio import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    check_writable,
    claim_output_dir,
    plain,
    read_jsonl,
)

OWNED = ("ckpt-*", "metrics.jsonl")


def test_plain_makes_numpy_tuples_and_non_finite_numbers_json():
    import numpy as np

    obj = {1: (np.float32(0.5), np.int64(3), np.bool_(True)), "x": [float("nan"), -np.inf, 1 / 3]}
    assert plain(obj) == {"1": [0.5, 3, True], "x": [None, None, 1 / 3]}
    assert type(plain(np.int64(3))) is int and type(plain(np.float64(0.25))) is float
    assert plain({"r": 1 / 3, "n": 7, "b": False}, ndigits=6) == {"r": 0.333333, "n": 7, "b": False}
    assert json.loads(runio.dumps_finite(plain(obj))) == plain(obj)


def test_atomic_write_replaces_whole_files_and_cleans_up_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    atomic_write_text(target, "old\n")
    monkeypatch.setattr(runio.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(ArlError, match="cannot write .*results.json: full"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temp file left


def test_json_refuses_non_finite_numbers(tmp_path):
    with pytest.raises(ArlError, match="non-finite"):
        atomic_write_json(tmp_path / "r.json", {"loss": float("nan")})
    assert not (tmp_path / "r.json").exists()


def test_a_torn_last_line_is_dropped_a_corrupt_middle_line_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as f:
        append_jsonl(f, {"step": 1})
        append_jsonl(f, {"step": 2})
    path.write_text(path.read_text() + '{"step": 3, "lo')  # killed mid-write
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(ArlError, match="metrics.jsonl:2: corrupt line"):
        read_jsonl(path)


def test_check_writable_fails_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArlError, match="cannot write"):
        check_writable(tmp_path / "file" / "r.jsonl")  # a file where a folder should be
    with pytest.raises(ArlError, match="is a directory"):
        check_writable(tmp_path)


def test_a_folder_holding_another_run_is_refused_unless_overwritten(tmp_path):
    out = tmp_path / "run"
    with claim_output_dir(out, "train pg", OWNED):
        (out / "ckpt-000009").mkdir()
        (out / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(ArlError, match="holds an earlier run's files .*--overwrite"):
        with claim_output_dir(out, "train pg", OWNED):
            pass
    with claim_output_dir(out, "train pg", OWNED, reuse=True):  # a resume keeps them
        assert (out / "ckpt-000009").exists()
    with claim_output_dir(out, "train pg", OWNED, overwrite=True):
        assert not (out / "ckpt-000009").exists() and not (out / "metrics.jsonl").exists()
        (out / "ckpt-000001").mkdir()
    with pytest.raises(ArlError, match="holds a run of `arl train pg`"):
        with claim_output_dir(out, "sim fleet", ("results.json",), overwrite=True):
            pass
    (out / "notes.txt").write_text("mine")  # a file no run writes: never deleted
    with pytest.raises(ArlError, match="notes.txt"):
        with claim_output_dir(out, "train pg", OWNED, overwrite=True):
            pass
    assert (out / "notes.txt").read_text() == "mine"


def test_two_runs_cannot_share_a_folder_and_a_dead_holder_does_not_block(tmp_path):
    out = tmp_path / "run"
    with claim_output_dir(out, "train pg", OWNED):
        with pytest.raises(ArlError, match=f"in use by another arl run \\(pid {os.getpid()}\\)"):
            with claim_output_dir(out, "train pg", OWNED, reuse=True):
                pass
    (out / runio.LOCK_FILE).write_text("999999999")  # a killed run's lock file: not held
    (out / ".tmp-ckpt-000003").mkdir()  # and its half-written checkpoint
    with claim_output_dir(out, "train pg", OWNED, reuse=True):
        assert not (out / ".tmp-ckpt-000003").exists()
    assert json.loads((out / runio.MARKER_FILE).read_text()) == {"kind": "train pg"}

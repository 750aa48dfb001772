import json

import pytest

from arl.train.checkpoint import save_checkpoint


def test_eval_json_scripted_policies(cli):
    code, out, _ = cli("eval", "oracle", "--split", "heldout", "--json")
    m = json.loads(out)
    assert code == 0 and m["pass_rate"] == 1.0 and m["episodes"] == 100
    assert set(m) >= {"pass_rate", "public_pass_rate", "malformed_per_episode", "read_fraction"}
    m = json.loads(cli("eval", "hardcode", "--json")[1])
    assert m["public_pass_rate"] == 1.0 and m["pass_rate"] == 0.0
    m = json.loads(cli("eval", "blind", "--samples", "16", "--json")[1])
    assert 0.1 <= m["pass_rate"] <= 0.3 and m["read_fraction"] == 0.0


def test_eval_untrained_and_checkpoint(cli, tmp_path, tiny_model):
    m = json.loads(cli("eval", "untrained", "--samples", "1", "--json")[1])
    assert m["malformed_per_episode"] > 4 and m["pass_rate"] == 0 and m["action_entropy"] > 3
    save_checkpoint(tiny_model, tmp_path / "ck")
    code, out, _ = cli("eval", str(tmp_path / "ck"), "--samples", "1", "--json")
    assert code == 0 and "action_entropy" in json.loads(out)


def test_eval_writes_per_episode_jsonl(cli, tmp_path):
    out = tmp_path / "r.jsonl"
    cli("eval", "blind", "--samples", "2", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 40 and {r["sample"] for r in rows} == {0, 1}
    assert all(set(r) >= {"task", "sample", "passed"} for r in rows)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "nobody"], "unknown policy"),
        (["eval", "oracle", "--split", "dev"], "invalid choice"),
        (["eval", "oracle", "--samples", "-1"], "positive integer"),
        (["show", "no_such_task"], "unknown task"),
        (["eval", "oracle", "--top-p", "2"], "(0, 1]"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(cli, argv, message):
    code, _, err = cli(*argv)
    assert code == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_corrupt_checkpoint_is_one_line(cli, tmp_path, tiny_model):
    path = save_checkpoint(tiny_model, tmp_path / "ck")
    (path / "model.safetensors").write_bytes(b"garbage")
    code, _, err = cli("eval", str(path), "--json")
    assert code == 2 and "corrupt" in err and len(err.strip().splitlines()) == 1


def test_show_and_tokens(cli):
    code, out, _ = cli("show", "mean", "--policy", "oracle")
    assert code == 0 and "edit div" in out and "<obs>" in out
    acc = json.loads(cli("tokens", "--json")[1])
    assert acc["action_positions"] + acc["observation_positions"] < acc["predicted_positions"]
    assert 0.15 < acc["action_share"] < 0.25 and 0.55 < acc["observation_share"] < 0.7

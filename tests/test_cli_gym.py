import json

import pytest

from arl.cli.main import main
from arl.model import save_checkpoint


def run(capsys, *argv):
    """Call the CLI in-process; argparse usage errors exit through SystemExit."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_json_scripted_policies(capsys):
    code, out, _ = run(capsys, "eval", "oracle", "--split", "heldout", "--json")
    m = json.loads(out)
    assert code == 0 and m["pass_rate"] == 1.0 and m["episodes"] == 40
    assert set(m) >= {"pass_rate", "public_pass_rate", "malformed_per_episode", "read_fraction"}
    m = json.loads(run(capsys, "eval", "hardcode", "--json")[1])
    assert m["public_pass_rate"] == 1.0 and m["pass_rate"] == 0.0
    m = json.loads(run(capsys, "eval", "blind", "--samples", "16", "--json")[1])
    assert 0.1 <= m["pass_rate"] <= 0.3 and m["read_fraction"] == 0.0


def test_eval_untrained_and_checkpoint(capsys, tmp_path, tiny_model):
    m = json.loads(run(capsys, "eval", "untrained", "--samples", "1", "--json")[1])
    assert m["malformed_per_episode"] > 4 and m["pass_rate"] == 0 and m["action_entropy"] > 3
    save_checkpoint(tiny_model, tmp_path / "ck")
    code, out, _ = run(capsys, "eval", str(tmp_path / "ck"), "--samples", "1", "--json")
    assert code == 0 and "action_entropy" in json.loads(out)


def test_eval_writes_per_episode_jsonl(capsys, tmp_path):
    out = tmp_path / "r.jsonl"
    run(capsys, "eval", "blind", "--samples", "2", "--out", str(out))
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
def test_bad_input_is_one_line_and_nonzero(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_corrupt_checkpoint_is_one_line(capsys, tmp_path, tiny_model):
    path = save_checkpoint(tiny_model, tmp_path / "ck")
    (path / "model.safetensors").write_bytes(b"garbage")
    code, _, err = run(capsys, "eval", str(path), "--json")
    assert code == 2 and "corrupt" in err and len(err.strip().splitlines()) == 1


def test_show_and_tokens(capsys):
    code, out, _ = run(capsys, "show", "mean", "--policy", "oracle")
    assert code == 0 and "edit div" in out and "<obs>" in out
    acc = json.loads(run(capsys, "tokens", "--json")[1])
    assert acc["action_positions"] + acc["observation_positions"] < acc["predicted_positions"]
    assert 0.15 < acc["action_share"] < 0.25 and 0.55 < acc["observation_share"] < 0.7

"""A trained real model keeps how it speaks (issue 45): the call format and the turn end are
saved beside its weights and read back on load; exported rows carry the tools list; `arl eval
--model` says where it is while it samples."""

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.cli.main import main  # noqa: E402
from arl.errors import ArlError  # noqa: E402
from arl.hf.policy import CHAT_FILE, load_hf  # noqa: E402
from arl.hf.tiny import build_tiny  # noqa: E402
from arl.train.checkpoint.files import save_policy  # noqa: E402


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("qwen"), style="qwen2.5", layers=1)


def test_the_tool_format_is_saved_with_the_model_and_read_back(qwen_dir, tmp_path):
    trained = load_hf(str(qwen_dir), tool_format="qwen")
    saved = save_policy(trained, tmp_path / "final", extra={"kind": "sft"})
    assert json.loads((saved / CHAT_FILE).read_text())["tool_format"] == "qwen"
    back = load_hf(str(saved))  # no --tool-format: the one it was trained in
    assert back.renderer.tool_format == "qwen" and back.renderer.tool_specs
    assert back.renderer.end_token == trained.renderer.end_token
    told = load_hf(str(saved), tool_format="words")  # a format named on the command line wins
    assert told.renderer.tool_format == "words"
    assert load_hf(str(qwen_dir)).renderer.tool_format == "words"  # a folder arl did not save
    (saved / CHAT_FILE).write_text('["qwen"]')
    with pytest.raises(ArlError, match=CHAT_FILE):
        load_hf(str(saved))


def test_exported_rows_carry_the_tools(qwen_dir):
    from arl.export import pair_rows, scripted_episodes, trajectory_rows

    tasks = tasks_for("train")[:1]
    for fmt, names in (("qwen", ["read", "test", "edit", "submit"]), ("words", None)):
        renderer = load_hf(str(qwen_dir), tool_format=fmt).renderer
        good = scripted_episodes("oracle", tasks, 1, 0, None, renderer)
        bad = scripted_episodes("blind", tasks, 1, 0, None, renderer)
        rows = trajectory_rows(good + bad, 1, renderer)
        pairs = pair_rows([(good[0], bad[0])], good + bad, 1, renderer)
        for row in (rows[0], pairs[0]):
            if names is None:
                assert row["tools"] is None  # arl's words: the system prompt has the grammar
            else:
                tools = json.loads(row["tools"])  # a JSON string, as TRL's trainers read it
                assert sorted(t["function"]["name"] for t in tools) == sorted(names)


def test_written_tables_keep_the_tools(qwen_dir, tmp_path):
    pytest.importorskip("datasets")
    import datasets

    out = tmp_path / "rows.parquet"
    argv = ["export", "trajectories", str(out), "--model", str(qwen_dir), "--tool-format", "qwen"]
    assert main(argv + ["--policy", "oracle", "--samples", "1"]) == 0
    table = datasets.Dataset.from_parquet(str(out))
    names = {t["function"]["name"] for t in json.loads(table[0]["tools"])}
    assert names == {"read", "test", "edit", "submit"}


def test_sft_saves_its_format(qwen_dir, tmp_path, capsys):
    out = tmp_path / "sft"
    argv = ["train", "sft", "--model", str(qwen_dir), "--tool-format", "qwen", "--steps", "1"]
    assert main(argv + ["--batch-size", "2", "--eval-samples", "1", "--out", str(out)]) == 0
    assert json.loads((out / "final" / CHAT_FILE).read_text())["tool_format"] == "qwen"
    assert load_hf(str(out / "final")).renderer.tool_format == "qwen"


def test_eval_of_a_real_model_says_where_it_is(qwen_dir, capsys, monkeypatch):
    from arl.cli import gym

    argv = ["eval", "--model", str(qwen_dir), "--samples", "1", "--json"]
    assert main(argv) == 0  # done within EVAL_EVERY_S (15 s): nothing said
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(gym, "EVAL_EVERY_S", 0.0)  # as if each decoding step took 15 s
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["episodes"] == 20  # stdout stays one JSON object
    lines = captured.err.splitlines()
    assert lines and lines[0].startswith("eval: 0/20 episodes finished (at ")
    assert len(lines) > 1 and all(x.startswith("eval: ") for x in lines)  # one per step
    assert main(["eval", "weak", "--samples", "1", "--json"]) == 0  # TinyAgent: never
    err = capsys.readouterr().err.splitlines()  # on a fresh cache: the weak base's training
    assert all(x.startswith("arl: training the weak_base for seed 0") for x in err), err

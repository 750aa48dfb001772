"""`--data FILE` (issue 45): exported trajectories read back exactly, DPO pairs by task, and
TRL's conversations rendered into the very tokens and owners an arl rollout has."""

import json

import pytest

from arl.bugfix import default_vocab
from arl.bugfix.tasks import tasks_for
from arl.data import load_data, read_rows, render_conversation
from arl.errors import ArlError
from arl.types import ENV, POLICY

V = len(default_vocab())


def scripted(name, n_tasks=2, renderer=None):
    """A scripted policy's episodes on the first training tasks (renderer None: TinyAgent's)."""
    from arl.export import scripted_episodes

    return scripted_episodes(name, tasks_for("train")[:n_tasks], 1, 0, None, renderer)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_exported_trajectories_read_back_exactly(tmp_path):
    pytest.importorskip("datasets")
    from arl.export import trajectory_rows, write_trajectories

    trajs = scripted("oracle")
    rows = trajectory_rows(trajs, 1, None)
    parquet = write_trajectories(rows, tmp_path / "t.parquet")
    jsonl = write_jsonl(tmp_path / "t.jsonl", rows)
    for path in (str(parquet), jsonl):
        back = load_data(path, None, V)
        assert [(t.task, t.ids_T, t.owners_T, t.logprobs_T) for t in back] == [
            (t.task, t.ids_T, t.owners_T, t.logprobs_T) for t in trajs
        ]
        assert [t.calls for t in back] == [t.calls for t in trajs]  # one call per policy run


def test_dpo_pairs_from_rows_pair_each_pass_with_a_failure_of_its_task(tmp_path):
    from arl.export import trajectory_rows

    good = scripted("oracle", 3)
    bad = scripted("blind", 2)  # tasks 0 and 1 fail (blind guesses), task 2 has no failure
    rows = [r for r in trajectory_rows(good + bad, 1, None)]
    for r in rows:
        r["group"] = 0
    assert [r["passed"] for r in rows] == [True, True, True, False, False]
    pairs = load_data(write_jsonl(tmp_path / "p.jsonl", rows), None, V, for_pairs=True)
    assert sorted((c.task, r.task) for c, r in pairs) == sorted((t.task, t.task) for t in good[:2])
    by_id = {t.ids_T: ok for t, ok in zip(good + bad, [True] * 3 + [False] * 2, strict=True)}
    assert all(by_id[c.ids_T] and not by_id[r.ids_T] for c, r in pairs)
    with pytest.raises(ArlError, match="no task has both"):
        load_data(write_jsonl(tmp_path / "g.jsonl", rows[:3]), None, V, for_pairs=True)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"input_ids": [1, 2], "owners": [0]}, "differ in length"),
        ({"input_ids": [1, V + 5], "owners": [0, 1]}, f"token id {V + 5} is outside"),
        ({"input_ids": [1, 2], "owners": [0, 2]}, "no policy token"),
        ({"input_ids": [1, 2], "owners": [0, 7]}, "owners must be 0-3"),
        ({"input_ids": [1, "a"], "owners": [0, 1]}, "list of integers"),
        ({"input_ids": [1, 2], "owners": [0, 1], "sampler_logprobs": [0, float("nan")]}, "finite"),
        ({"text": "hello"}, "rows need arl's trajectory columns"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "use --model"),
    ],
)
def test_a_bad_row_is_one_line_naming_it(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"input_ids": [1, 2], "owners": [0, 1]}) + "\n" + json.dumps(row))
    if "text" in row or "messages" in row:
        path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ArlError, match=message) as e:
        load_data(str(path), None, V)
    assert "\n" not in str(e.value) and "bad.jsonl" in str(e.value)


def test_files_that_are_not_rows_are_one_line(tmp_path):
    (tmp_path / "x.jsonl").write_text("{not json\n")
    (tmp_path / "e.jsonl").write_text("\n")
    (tmp_path / "l.jsonl").write_text("[1, 2]\n")
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really")
    for name, message in (
        ("x.jsonl", "x.jsonl:1: not JSON"),
        ("e.jsonl", "no rows"),
        ("l.jsonl", "a row is a JSON object"),
        ("x.parquet", "not a Parquet file"),
        ("missing.jsonl", "no such file"),
    ):
        with pytest.raises(ArlError, match=message):
            read_rows(tmp_path / name)


# --- TRL's conversations, through a real model's chat template -------------------------------


@pytest.fixture(scope="module")
def chat():
    pytest.importorskip("transformers")
    from arl.hf.chat import ChatRenderer
    from arl.hf.tiny import build_tokenizer

    return ChatRenderer.for_tokenizer(build_tokenizer(style="chatml"))


def as_conversation(renderer, tr):
    """A chat rollout as TRL's messages: the prompt, then each call's text and the tool's
    answer (decoded from the episode's own policy and environment tokens)."""
    from arl.env import environment_of_tasks

    environment = environment_of_tasks([tr.outcome])
    issue = environment.make(environment.get_task(tr.task)).reset(seed=0)[0].text
    renderer = renderer.for_environment(environment)
    tok = renderer.tokenizer
    msgs = renderer.messages(issue)
    runs = []
    for i, o in zip(tr.ids_T, tr.owners_T, strict=True):
        kind = {POLICY: "assistant", ENV: "tool"}.get(o)
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(i)
        elif kind is not None:
            runs.append((kind, [i]))
    for kind, ids in runs:
        text = renderer.decode_call(ids).text if kind == "assistant" else tok.decode(ids)
        msgs.append({"role": kind, "content": text})
    return msgs


def test_a_conversation_renders_to_the_tokens_and_owners_of_arls_own_rollout(chat, tmp_path):
    trajs = scripted("oracle", 3, renderer=chat)
    rows = [{"messages": as_conversation(chat, t), "task": t.task} for t in trajs]
    back = load_data(write_jsonl(tmp_path / "c.jsonl", rows), chat, len(chat.tokenizer))
    for tr, got in zip(trajs, back, strict=True):
        n = max(i for i, o in enumerate(tr.owners_T) if o == POLICY) + 1  # through the last call
        assert got.ids_T == tr.ids_T[:n] and got.owners_T == tr.owners_T[:n]


def test_a_template_that_rewrites_earlier_turns_is_refused(chat, tmp_path):
    import copy

    tok = copy.deepcopy(chat.tokenizer)
    # drops every assistant turn but the last, as reasoning templates drop earlier thoughts
    tok.chat_template = (
        "{% for m in messages %}{% if m.role != 'assistant' or loop.last %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    renderer = type(chat).for_tokenizer(tok, turn_end="<|im_end|>")
    msgs = [
        {"role": "user", "content": "fix mean"},
        {"role": "assistant", "content": "read"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "submit"},
    ]
    with pytest.raises(ArlError, match="turn by turn"):
        render_conversation(renderer, msgs, None, "row 0")
    one = render_conversation(renderer, msgs[:2], None, "row 0")  # one turn renders
    assert [o for o in one[1] if o == POLICY]


def test_preference_rows_give_pairs_that_share_their_prompt(chat, tmp_path):
    prompt = [{"role": "system", "content": "fix the bug"}, {"role": "user", "content": "fix mean"}]
    row = {
        "prompt": prompt,
        "chosen": [{"role": "assistant", "content": "read"}],
        "rejected": [{"role": "assistant", "content": "submit"}],
    }
    path = write_jsonl(tmp_path / "pref.jsonl", [row])
    [(c, r)] = load_data(path, chat, len(chat.tokenizer), for_pairs=True)
    first = c.owners_T.index(POLICY)
    assert c.ids_T[:first] == r.ids_T[:first] and r.owners_T.index(POLICY) == first
    policy = [i for i, o in zip(c.ids_T, c.owners_T, strict=True) if o == POLICY]
    assert chat.tokenizer.decode(policy) == "read<|im_end|>"
    with pytest.raises(ArlError, match="DPO's data"):
        load_data(path, chat, len(chat.tokenizer))
    conv = write_jsonl(tmp_path / "conv.jsonl", [{"messages": prompt + row["chosen"]}])
    with pytest.raises(ArlError, match="DPO needs pairs"):
        load_data(conv, chat, len(chat.tokenizer), for_pairs=True)


# --- through the command line ------------------------------------------------------------------


@pytest.mark.slow
def test_train_sft_and_dpo_take_data_files(cli, tmp_path):
    from arl.export import trajectory_rows

    rows = trajectory_rows(scripted("oracle", 3) + scripted("blind", 3), 1, None)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    small = ["--init", "untrained", "--eval-samples", "1", "--quiet"]
    code, out, err = cli(
        "train", "sft", *small, "--data", data, "--steps", "2", "--out", str(tmp_path / "sft")
    )
    assert code == 0, err
    results = json.loads((tmp_path / "sft" / "results.json").read_text())
    assert results["settings"]["data"] == data
    assert [r["step"] for r in map(json.loads, (tmp_path / "sft" / "metrics.jsonl").open())] == [
        1,
        2,
    ]
    code, out, err = cli(
        "train", "dpo", *small, "--data", data, "--steps", "1", "--out", str(tmp_path / "dpo")
    )
    assert code == 0, err
    settings = json.loads((tmp_path / "dpo" / "results.json").read_text())["settings"]
    assert settings["data"] == data and settings["pairs"] == 3  # blind fails every task here
    code, out, err = cli(
        "train", "sft", *small, "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "x")
    )
    assert code == 2 and err.count("\n") == 1 and "no such file" in err
    assert not (tmp_path / "x").exists()  # refused before the run folder is claimed


@pytest.mark.slow
def test_train_sft_on_a_real_model_takes_trl_conversations(cli, tmp_path):
    pytest.importorskip("transformers")
    from arl.hf.tiny import build_tiny

    model = build_tiny(tmp_path / "tiny", style="chatml", layers=1)
    msgs = [
        {"role": "system", "content": "fix the bug"},
        {"role": "user", "content": "fix mean"},
        {"role": "assistant", "content": "read"},
        {"role": "tool", "content": "def mean ( xs ) : return sum ( xs )"},
        {"role": "assistant", "content": "submit"},
    ]
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": msgs}] * 2)
    argv = ["train", "sft", "--model", str(model), "--data", data, "--steps", "2"]
    code, out, err = cli(*argv, "--eval-samples", "1", "--quiet", "--out", str(tmp_path / "r"))
    assert code == 0, err
    losses = [json.loads(line)["loss"] for line in (tmp_path / "r" / "metrics.jsonl").open()]
    assert len(losses) == 2 and losses[1] < losses[0]  # the same two rows: the loss falls

"""Native tool calls: tiny Qwen2.5- and Llama-3.1-style models play BugFix in their own format."""

import json
import random
import re

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from arl.bugfix.env import BugFixConfig  # noqa: E402
from arl.bugfix.environment import BUGFIX  # noqa: E402
from arl.bugfix.grammar import OPS  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.errors import ArlError  # noqa: E402
from arl.hf.chat import ChatRenderer  # noqa: E402
from arl.hf.policy import load_hf  # noqa: E402
from arl.hf.tiny import build_tiny, build_tokenizer  # noqa: E402
from arl.hf.toolcalls import ToolCall, parse_turn, render_call, toolset  # noqa: E402
from arl.rollout import episode_seed, rollout_batch, scripted_rollout  # noqa: E402
from arl.types import ENV, POLICY, PROMPT, TEMPLATE  # noqa: E402

STYLES = {"qwen2.5": ("qwen", "qwen2"), "llama3.1": ("llama", "llama")}


@pytest.fixture(scope="module", params=list(STYLES))
def policy(request, tmp_path_factory):
    fmt, arch = STYLES[request.param]
    path = build_tiny(tmp_path_factory.mktemp(request.param), arch=arch, style=request.param)
    return load_hf(str(path), tool_format=fmt)


def _native(text: str) -> ToolCall:
    """An oracle call's words as the native call the test expects (written out by hand)."""
    words = text.split()
    if words[0] != "edit":
        return ToolCall(words[0], {})
    return ToolCall("edit", {"op": words[1], **({"name": words[2]} if len(words) > 2 else {})})


def _oracle_conversation(r: ChatRenderer, task, seed: int = 0) -> list[dict]:
    """The oracle's episode played on the environment directly, as chat messages with
    `tool_calls` (what a user of the template would write), not read from any transcript."""
    env = BUGFIX.make(task)
    prompt, _ = env.reset(seed=seed)
    oracle, rng, history = BUGFIX.scripted("oracle"), random.Random(seed), [list(prompt.words)]
    msgs = [{"role": "system", "content": r.system}, {"role": "user", "content": prompt.text}]
    while True:
        words = oracle(history, rng)
        call = _native(env.call_text(words))
        fn = {"name": call.name, "arguments": call.arguments}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"function": fn}]})
        obs, *_, outcome = env.step(words)
        if outcome is not None:
            return msgs
        msgs.append({"role": "tool", "content": obs.text})
        history.append(list(obs.words))


def _render(r: ChatRenderer, msgs: list[dict], generation: bool = False) -> str:
    return r.tokenizer.apply_chat_template(
        msgs, tools=r.tool_specs, tokenize=False, add_generation_prompt=generation
    )


def _expected_owners(r: ChatRenderer, msgs: list[dict]) -> tuple[list[int], list[int]]:
    """The whole conversation rendered by the template, tokenized, and each token's owner from
    the template's own rendering of prefixes: an assistant turn's text after its generation
    prompt through its turn end is the policy's; a tool result inside the tool turn is the
    environment's; the system and user contents are the prompt; the rest is the template's."""
    full = _render(r, msgs)
    spans, pos = [], 0
    for k, m in enumerate(msgs):
        if m["role"] == "assistant":
            start = len(_render(r, msgs[:k], generation=True))
            pos = full.index(r.end_token, start) + len(r.end_token)
            spans.append((start, pos, POLICY))
        elif m["role"] == "tool":  # as written, or as a JSON string (Llama 3.1's tojson)
            before = len(_render(r, msgs[:k]))
            turn = _render(r, msgs[: k + 1])[before:]
            form = m["content"] if m["content"] in turn else json.dumps(m["content"])[1:-1]
            pos = before + turn.rindex(form) + len(form)
            spans.append((pos - len(form), pos, ENV))
        else:
            at = full.index(m["content"], pos)
            pos = at + len(m["content"])
            spans.append((at, pos, PROMPT))
    enc = r.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    owners = [
        next((o for s, e, o in spans if s <= a and b <= e), TEMPLATE)
        for a, b in enc["offset_mapping"]
    ]
    return list(enc["input_ids"]), owners


def test_an_oracle_episode_is_the_templates_rendering_token_for_token(policy):
    r = policy.renderer
    task = tasks_for("train")[3]
    tr = scripted_rollout("oracle", task, renderer=r)
    assert tr.passed and tr.outcome.malformed == 0
    msgs = _oracle_conversation(r, task)
    assert [m["role"] for m in msgs].count("assistant") == len(tr.calls) == 4
    ids, owners = _expected_owners(r, msgs)
    n = len(tr.ids_T)
    assert list(tr.ids_T) == ids[:n]  # the episode is the template's rendering, id for id
    assert list(tr.owners_T) == owners[:n]  # and every token has the template's owner
    assert r.tokenizer.decode(ids[n:]).strip() == ""  # after the last turn end: a newline
    assert {POLICY, ENV, PROMPT, TEMPLATE} <= set(owners)
    # the policy's tokens are its calls in the native format, each closed by the turn end
    policy_text = r.tokenizer.decode([i for i, o in zip(ids, owners, strict=True) if o == POLICY])
    calls = [
        ToolCall(
            m["tool_calls"][0]["function"]["name"], m["tool_calls"][0]["function"]["arguments"]
        )
        for m in msgs
        if m["role"] == "assistant"
    ]
    assert policy_text == "".join(render_call(r.tool_format, c) + r.end_token for c in calls)


def test_sampled_episodes_mask_exactly_the_sampled_tokens(policy):
    """A random model's turns: the policy owns exactly its sampled ids, the environment owns
    its answers (the malformed-call errors), and the prompt carries the tools' specs."""
    r = policy.renderer
    trajs = rollout_batch(
        policy, tasks_for("train")[:2], seed=5, env_config=BugFixConfig(max_turns=2)
    )
    for k, tr in enumerate(trajs):
        sampled = [i for s, e in tr.calls for i in tr.ids_T[s:e]]
        assert list(tr.action_ids) == sampled and len(sampled) > 0
        assert tr.outcome.malformed == tr.outcome.turns == 2  # random weights: no readable call
        # the environment's tokens are its answers to the decoded calls, replayed here
        env = BUGFIX.make(tasks_for("train")[k], BugFixConfig(max_turns=2))
        env.reset(seed=episode_seed(5, k))
        answers = [env.step(r.decode_call(tr.ids_T[s:e]))[0].text for s, e in tr.calls]
        env_ids = [i for i, o in zip(tr.ids_T, tr.owners_T, strict=True) if o == ENV]
        assert r.tokenizer.decode(env_ids) == "".join(answers[:-1])  # the last ended it
        assert answers[0].startswith("error malformed ")
        prompt = r.tokenizer.decode(list(tr.ids_T[: tr.calls[0][0]]))
        assert all(f'"name": "{t}"' in prompt for t in ("read", "test", "edit", "submit"))


def test_the_native_specs_and_the_bridges_schemas_are_one_table():
    """The native formats and the bridges (TRL, verl) render one table of tools: the same
    specs, the same system prompt, the same argument names (a replace reaches the grammar as
    the same text either way), `required` only where an argument is (as TRL derives it)."""
    from arl.bridges.episode import SYSTEMS, call_text, tool_schemas

    for env in ("bugfix", "codefix"):
        assert list(toolset(env).specs) == tool_schemas(env)
        assert toolset(env).system == SYSTEMS[env]
    old, new = "return a\n", "return b\n"
    native = toolset("codefix").to_text(ToolCall("replace", {"old": old, "new": new}))
    assert native == call_text("codefix", "replace", {"old": old, "new": new})
    read, _, edit, _ = (s["function"]["parameters"] for s in toolset("bugfix").specs)
    assert "required" not in read and edit["required"] == ["op"]
    assert edit["properties"]["op"]["enum"] == list(OPS)


def test_parse_of_render_is_the_call_for_every_tool():
    calls = [ToolCall(n) for n in ("read", "test", "submit")]
    calls += [ToolCall("edit", {"op": op}) for op in OPS] + [
        ToolCall("edit", {"op": "init", "name": "total"})
    ]
    code = 'def f(xs):\n    return "a\\tb" + xs[0]  # é'
    calls += [ToolCall("replace", {"old": code, "new": ""})]
    for fmt in ("qwen", "llama"):
        for call in calls:
            turn = parse_turn(fmt, render_call(fmt, call))
            assert turn.call == call and turn.reason == ""
    # every spec'd tool of both environments is covered
    names = {n for env in ("bugfix", "codefix") for n in toolset(env).names}
    assert names == {c.name for c in calls}


def test_render_call_is_how_the_template_writes_a_tool_calls_message():
    for style, (fmt, _) in STYLES.items():
        r = ChatRenderer.for_tokenizer(build_tokenizer(style=style), tool_format=fmt)
        call = ToolCall("edit", {"op": "init", "name": "total"})
        msgs = r.messages("fix sum_list")
        head = _render(r, msgs, generation=True)
        fn = {"name": call.name, "arguments": call.arguments}
        whole = _render(r, msgs + [{"role": "assistant", "tool_calls": [{"function": fn}]}])
        assert whole.startswith(head + render_call(fmt, call) + r.end_token)


@pytest.mark.parametrize(
    "fmt,text,reason",
    [
        ("qwen", '<tool_call>\n{"name": "read", "arguments": {}\n</tool_call>', "bad_json"),
        ("qwen", '{"name": "read", "arguments": {}}', "no_call"),
        (
            "qwen",
            '<tool_call>\n{"name": "read"}\n</tool_call>\n<tool_call>\n{}\n</tool_call>',
            "two_calls",
        ),
        (
            "qwen",
            '<tool_call>\n{"name": "read", "arguments": {}}\n</tool_call> and more',
            "text_after_call",
        ),
        ("qwen", '<tool_call>\n["read"]\n</tool_call>', "not_an_object"),
        ("qwen", '<tool_call>\n{"name": "read", "arguments": "x"}\n</tool_call>', "bad_arguments"),
        ("llama", '{"name": "read", "parameters": {}', "bad_json"),
        ("llama", '{"name": "read", "parameters": {}, "why": 1}', "bad_call"),
    ],
)
def test_a_turn_without_one_readable_call_is_an_empty_call(fmt, text, reason):
    turn = parse_turn(fmt, text)
    assert turn.call is None and turn.reason == reason


def _play(r: ChatRenderer, text: str, ended: bool = True):
    """One turn of `text` (tokenized as the model would sample it) on a fresh BugFix episode:
    the environment's answer, and its malformed count."""
    env = BUGFIX.make(tasks_for("train")[0])
    prompt, _ = env.reset(seed=0)
    tr = r.begin(prompt)
    ids = r.tokenizer(text, add_special_tokens=False)["input_ids"] + ([r.end_id] if ended else [])
    for i in ids:
        tr.act(i)
    obs, *_ = env.step(tr.end_call(len(ids)))
    return obs.text, env.malformed


def test_native_turns_reach_the_environment_as_its_calls_or_as_malformed_calls():
    r = ChatRenderer.for_tokenizer(build_tokenizer(style="qwen2.5"), tool_format="qwen")
    q = "<tool_call>\n{}\n</tool_call>"
    read = '{"name": "read", "arguments": {}}'
    assert _play(r, q.format(read))[1] == 0  # a readable call is the tool's call
    assert _play(r, "I will read.\n" + q.format(read))[1] == 0  # free text before it: content
    for text, answer in [
        (q.format(read[:-1]), "error malformed empty"),  # malformed JSON: no call
        ("read", "error malformed empty"),  # arl's words are not Qwen's format
        (q.format('{"name": "fly", "arguments": {}}'), "error malformed unknown_tool"),
        (q.format('{"name": "edit", "arguments": {"op": "swap"}}'), "error malformed unknown_op"),
        (q.format('{"name": "edit", "arguments": {"op": "init"}}'), "error malformed missing_arg"),
        (q.format('{"name": "read", "arguments": {"path": "x"}}'), "error malformed extra_args"),
        (
            q.format('{"name": "edit", "arguments": {"op": "init", "name": "a b"}}'),
            "error malformed empty",
        ),
    ]:
        assert _play(r, text) == (answer, 1), text
    assert _play(r, q.format(read), ended=False) == ("error malformed unterminated", 1)
    llama = ChatRenderer.for_tokenizer(build_tokenizer(style="llama3.1"), tool_format="llama")
    for text in (
        '{"name": "read", "parameters": {}}',
        '<|python_tag|>{"name": "read", "arguments": {}}',
    ):
        assert _play(llama, text)[1] == 0, text
    assert _play(llama, '{"name": "read", "parameters": {}')[1] == 1


def test_a_base_tokenizer_ends_turns_with_the_templates_turn_end(tmp_path):
    """Qwen2.5 base: eos <|endoftext|>, turns closed by <|im_end|>. arl reads the turn end from
    the template; told eos instead, it says what is wrong, not that the template is broken."""
    tok = build_tokenizer(style="qwen2.5-base")
    assert tok.eos_token == "<|endoftext|>"
    r = ChatRenderer.for_tokenizer(tok, tool_format="qwen")
    assert r.end_token == "<|im_end|>"
    tr = scripted_rollout("oracle", tasks_for("train")[0], renderer=r)
    assert tr.passed and all(tr.ids_T[e - 1] == r.end_id for _, e in tr.calls)
    as_eos = ChatRenderer.for_tokenizer(tok, turn_end="<|endoftext|>", tool_format="qwen")
    with pytest.raises(ArlError, match=re.escape("closes no assistant turn with '<|endoftext|>'")):
        scripted_rollout("oracle", tasks_for("train")[0], renderer=as_eos)
    with pytest.raises(ArlError, match="not a token"):
        ChatRenderer.for_tokenizer(tok, turn_end="<|nope|>")
    with pytest.raises(ArlError, match="tool format"):
        ChatRenderer.for_tokenizer(tok, tool_format="mistral")


def test_eval_a_base_checkpoint_in_its_native_format_from_the_command_line(tmp_path, capsys):
    """`arl eval --model BASE --tool-format qwen`: the base tokenizer's turn end is read from its
    template (no flag); --turn-end names another token; bad values are one line."""
    from arl.cli.main import main

    path = build_tiny(tmp_path / "base", style="qwen2.5-base", layers=1)
    argv = ["eval", "--model", str(path), "--tool-format", "qwen", "--split", "heldout"]
    assert main(argv + ["--samples", "1", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["episodes"] == 10 and m["malformed_per_episode"] == 6  # random: no readable call
    for extra, msg in [
        (["--turn-end", "<|endoftext|>"], "closes no assistant turn with '<|endoftext|>'"),
        (["--turn-end", "<|nope|>"], "not a token of this tokenizer"),
    ]:
        assert main(argv + ["--samples", "1"] + extra) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err
    for argv in (
        ["eval", "weak", "--tool-format", "llama"],
        ["train", "pg", "--turn-end", "<|im_end|>", "--set", f"out={tmp_path / 'pg'}"],
        ["train", "sft", "--tool-format", "qwen", "--out", str(tmp_path / "sft")],
    ):  # TinyAgent speaks words: refused in one line, not ignored
        assert main(argv) == 2
        assert "go with --model" in capsys.readouterr().err


def test_codefix_edits_arrive_as_native_replace_calls():
    """CodeFix's SEARCH/REPLACE edit as a `replace` function: the oracle's episode passes, and
    its edit is the JSON call whose arguments are the old and new text, character for character."""
    from arl.codefix import CODEFIX
    from arl.codefix.grammar import parse_text
    from arl.codefix.tasks import tasks_for as codefix_tasks
    from arl.sandbox import sandbox_available

    if sandbox_available() is not None:
        pytest.skip(f"no sandbox here: {sandbox_available()}")
    task = codefix_tasks("train")[5]
    words = scripted_rollout("oracle", task, seed=2)  # TinyAgent's words: the same episode
    for style, (fmt, _) in STYLES.items():
        r = ChatRenderer.for_tokenizer(build_tokenizer(style=style), tool_format=fmt)
        tr = scripted_rollout("oracle", task, seed=2, renderer=r)
        assert tr.passed and tr.outcome.applied == 1 and len(tr.calls) == len(words.calls)
        rc = r.for_environment(CODEFIX)
        s, e = tr.calls[1]
        turn = parse_turn(fmt, rc.tokenizer.decode(list(tr.ids_T[s : e - 1])))
        edit = parse_text(rc.decode_call(tr.ids_T[s:e]).text, True)
        assert turn.call == ToolCall("replace", {"old": edit.old, "new": edit.new})
        assert edit.old and edit.old != edit.new


def test_a_llama_tool_result_is_owned_inside_the_json_string_the_template_writes():
    """Llama 3.1 writes a string tool result with `tojson`: quoted, escaped. The environment
    owns the string's inside, the quotes are the template's."""
    r = ChatRenderer.for_tokenizer(build_tokenizer(style="llama3.1"), tool_format="llama")
    call = {"role": "assistant", "content": "x"}
    ids, owners, _ = r.render_observation(r.messages("fix sum_list"), call, 'say "hi"\nbye')
    text = r.tokenizer.decode(ids)
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"say \\"hi\\"\\nbye"<|eot_id|>' in text
    env = r.tokenizer.decode([i for i, o in zip(ids, owners, strict=True) if o == ENV])
    assert env == 'say \\"hi\\"\\nbye'

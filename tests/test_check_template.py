"""`arl check template PATH`: hand-made chat templates, each classified from its rendering."""

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.cli.main import main  # noqa: E402
from arl.errors import ArlError  # noqa: E402
from arl.hf.chat import ChatRenderer  # noqa: E402
from arl.hf.template_check import findings, inspect, turn_end  # noqa: E402
from arl.hf.templates import CHATML  # noqa: E402
from arl.hf.tiny import build_tokenizer  # noqa: E402

# Qwen3's rule, by hand: an assistant turn before the last user turn loses its reasoning
STRIPS_REASONING = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- set c = m.content %}"
    "{%- if m.role == 'assistant' and '</think>' in c and loop.index0 < ns.last_user %}"
    "{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Qwen3's other rule, by hand: after the last user turn, the last assistant turn always shows a
# (maybe empty) <think> block, an earlier one only if it reasoned: appending a tool result
# re-renders the turn before it
QWEN3_LIKE = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{%- set c = m.content %}{%- set r = '' %}"
    "{%- if '</think>' in c %}"
    "{%- set r = c.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_user and (loop.last or r) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + r + '\\n</think>\\n\\n' + c + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + c + '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Tokenizer folders: incremental ChatML; reasoning stripped from earlier turns; Qwen3's
    last-turn rule; a base checkpoint's (ChatML, eos <|endoftext|>); no template; Qwen2.5's."""
    out = {}
    for name, template, eos in [
        ("chatml", CHATML, "<|im_end|>"),
        ("strips", STRIPS_REASONING, "<|im_end|>"),
        ("qwen3", QWEN3_LIKE, "<|im_end|>"),
        ("base", CHATML, "<|endoftext|>"),
        ("none", None, "<|im_end|>"),
    ]:
        tok = build_tokenizer(vocab_size=300)
        tok.chat_template = template
        tok.eos_token = eos
        out[name] = tmp_path_factory.mktemp(name)
        tok.save_pretrained(out[name])
    native = build_tokenizer(style="qwen2.5")
    out["qwen2.5"] = tmp_path_factory.mktemp("qwen2.5")
    native.save_pretrained(out["qwen2.5"])
    return out


def _check(path, capsys, *flags) -> tuple[int, str]:
    code = main(["check", "template", str(path), *flags])
    return code, capsys.readouterr().out


def test_incremental_chatml(folders, capsys):
    code, out = _check(folders["chatml"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("incremental: yes")
    assert "turn end: <|im_end|> (the eos token)" in lines
    assert "earlier turns rewritten: no" in lines and "tool role: yes" in lines
    assert "native tool calls: no (arl's words)" in lines


def test_a_template_that_strips_earlier_reasoning(folders, capsys):
    code, out = _check(folders["strips"], capsys)
    lines = out.splitlines()
    assert code == 0
    # the second user turn (message 8) is what strips the first assistant turn's reasoning;
    # an arl episode has one user turn, so its calls and results still extend it
    assert lines[0] == (
        "incremental: no: appending a user turn (message 8) re-renders the turns before it; "
        "arl's episodes: not affected"
    )
    assert (
        "earlier turns rewritten: yes (an earlier assistant turn loses its reasoning "
        "(<think>...</think>))" in lines
    )
    assert "turn end: <|im_end|> (the eos token)" in lines


def test_a_template_that_rewrites_the_last_turn_refuses_arls_episodes(folders, capsys):
    code, out = _check(folders["qwen3"], capsys)
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == (
        "incremental: no: appending a tool turn (message 6) re-renders the turns before it; "
        "arl's episodes: refused (they append calls and tool results)"
    )
    # and arl refuses it in those words, on the first tool result of an episode
    from arl.hf.template_check import load_tokenizer
    from arl.rollout import scripted_rollout

    r = ChatRenderer.for_tokenizer(load_tokenizer(folders["qwen3"]))
    with pytest.raises(ArlError, match="re-renders earlier turns when a turn is appended"):
        scripted_rollout("oracle", tasks_for("train")[0], renderer=r)


def test_a_base_tokenizer_whose_turn_end_is_not_eos(folders, capsys):
    code, out = _check(folders["base"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("incremental: yes")
    assert lines[1].startswith("turn end: <|im_end|>, not the eos token <|endoftext|>")
    code, out = _check(folders["base"], capsys, "--json")
    report = json.loads(out)
    assert (report["eos"], report["turn_end"], report["incremental"]) == (
        "<|endoftext|>",
        "<|im_end|>",
        True,
    )


def test_no_template(folders, capsys):
    code, out = _check(folders["none"], capsys)
    assert code == 0
    assert out.splitlines() == [
        "chat template: none (arl --model needs one: set tokenizer.chat_template)"
    ]


def test_native_tool_template_is_incremental_with_its_own_tool_calls(folders, capsys):
    code, out = _check(folders["qwen2.5"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("incremental: yes")
    assert "native tool calls: yes (the template renders tools=[...])" in lines


def test_bad_paths_are_one_line_errors(tmp_path, capsys):
    for path in (tmp_path / "missing", tmp_path):  # no folder; a folder without a tokenizer
        assert main(["check", "template", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert str(path) in err and "\n" not in err


def test_turn_end_is_read_from_the_template_not_eos():
    tok = build_tokenizer(vocab_size=300)
    tok.eos_token = "<|endoftext|>"
    assert turn_end(tok) == "<|im_end|>"
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"  # no markers
    assert turn_end(tok) is None
    report = inspect(tok)
    assert report.turn_end is None and report.incremental


def test_a_template_that_refuses_a_system_turn_is_still_probed():
    """Gemma-style: a system turn raises. The probe goes on without one, and says so."""
    tok = build_tokenizer(vocab_size=300)
    tok.chat_template = (
        "{% for m in messages %}{% if m.role == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    report = inspect(tok)
    assert report.renders and report.system_role is False and report.incremental
    assert report.turn_end == "<|im_end|>"
    lines = findings(report)
    assert "system role: no (refused: arl's prompt opens with a system turn)" in lines
    with pytest.raises(ArlError, match="refuses arl's conversation: System role not supported"):
        ChatRenderer.for_tokenizer(tok).render_prompt("fix sum_list")  # one line, no traceback

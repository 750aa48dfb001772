"""Native tool calls: arl's environments' tools as JSON-schema functions, in a family's format.

A real model post-trained on tool use writes calls in its family's own format, and reads the
tools from `apply_chat_template(messages, tools=[...])`:

    qwen   <tool_call>
           {"name": "edit", "arguments": {"op": "init", "name": "total"}}
           </tool_call>
    llama  {"name": "edit", "parameters": {"op": "init", "name": "total"}}
           (or the same object after <|python_tag|>)

This module is the format and nothing else: `toolset(name)` (the tools an environment
declares, arl.tools.ToolSet: its specs, and the bridge between a native call and arl's text
grammar, which the environment parses as it parses any real model's text), `render_call` (a
call as the model writes it: exactly the template's own rendering of an assistant
`tool_calls` message), `parse_turn` (a sampled turn back into a call) and
`assistant_message` (the turn as a chat message). A turn without exactly one readable call
(no call, two, JSON that does not parse, arguments that are not one word each) reaches the
environment as an empty call, so it takes arl's malformed-call path (`error malformed
empty`); a readable call naming an unknown tool or op is judged by the environment's own
grammar (`unknown_tool`, `unknown_op`, `missing_arg`, ...).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from arl.env import REGISTRY, get_environment
from arl.errors import ArlError
from arl.tools import Param, Tool, ToolCall, ToolSet, dumps, spec  # noqa: F401 (declared there)

FORMATS = ("words", "qwen", "llama")  # arl's words (the default), or a family's native calls
PYTHON_TAG = "<|python_tag|>"
_QWEN_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass(frozen=True)
class Turn:
    """A sampled assistant turn read in a native format: its free text, and its one call (None,
    with the reason, when there is not exactly one readable call)."""

    content: str
    call: ToolCall | None
    reason: str = ""


def check_format(fmt: str) -> str:
    """`fmt` if it is a known call format; else a one-line error."""
    if fmt not in FORMATS:
        raise ArlError(f"tool format: unknown {fmt!r} (choose from {', '.join(FORMATS)})")
    return fmt


# --- the format: render, parse, message ---------------------------------------------------


def render_call(fmt: str, call: ToolCall) -> str:
    """The call as the model writes it after the assistant header (its end-of-turn apart):
    the template's own rendering of a `tool_calls` message, character for character."""
    if fmt in ("qwen", "llama"):
        key = "arguments" if fmt == "qwen" else "parameters"
        body = dumps({"name": call.name, key: dict(call.arguments)})
        return f"<tool_call>\n{body}\n</tool_call>" if fmt == "qwen" else body
    raise ArlError(f"tool format {fmt!r} has no native call")


def _call_of(obj: Any, arg_keys: tuple[str, ...]) -> tuple[ToolCall | None, str]:
    """A decoded JSON object as a call: a `name` string and an arguments object (under one of
    `arg_keys`, absent: none), nothing else; else (None, why)."""
    if not isinstance(obj, dict):
        return None, "not_an_object"
    name = obj.get("name")
    keys = [k for k in arg_keys if k in obj]
    if not isinstance(name, str) or set(obj) - {"name", *arg_keys} or len(keys) > 1:
        return None, "bad_call"
    args = obj[keys[0]] if keys else {}
    if not isinstance(args, dict):
        return None, "bad_arguments"
    return ToolCall(name, args), ""


def _json(text: str) -> tuple[Any, str]:
    try:
        return json.loads(text), ""
    except ValueError:
        return None, "bad_json"


def parse_turn(fmt: str, text: str) -> Turn:
    """A sampled turn (decoded with its special tokens, without its end-of-turn) in format
    `fmt`: Qwen's one <tool_call> block after optional free text, or Llama's one JSON object
    (optionally after <|python_tag|>)."""
    if fmt == "qwen":
        blocks = list(_QWEN_CALL.finditer(text))
        if len(blocks) != 1:
            return Turn(text, None, "no_call" if not blocks else "two_calls")
        m = blocks[0]
        if text[m.end() :].strip():
            return Turn(text, None, "text_after_call")
        obj, why = _json(m.group(1).strip())
        call, why = _call_of(obj, ("arguments",)) if not why else (None, why)
        content = text[: m.start()]
        return Turn(content[:-1] if content.endswith("\n") else content, call, why)
    if fmt == "llama":
        body = text.strip()
        body = body[len(PYTHON_TAG) :].strip() if body.startswith(PYTHON_TAG) else body
        obj, why = _json(body)
        call, why = _call_of(obj, ("parameters", "arguments")) if not why else (None, why)
        return Turn("", call, why)
    raise ArlError(f"tool format {fmt!r} has no native call")


def assistant_message(fmt: str, text: str) -> dict:
    """The turn as the chat message a template renders: a `tool_calls` message when it holds
    one readable call, else its text as content."""
    turn = parse_turn(fmt, text)
    if turn.call is None:
        return {"role": "assistant", "content": text}
    fn = {"name": turn.call.name, "arguments": dict(turn.call.arguments)}
    return {
        "role": "assistant",
        "content": turn.content,
        "tool_calls": [{"type": "function", "function": fn}],
    }


def action_text(tools: ToolSet, fmt: str, text: str) -> str:
    """What the environment is told of a sampled turn: its call in arl's text grammar, or ""
    (an empty call: arl's malformed-call path) when the turn holds no readable call."""
    turn = parse_turn(fmt, text)
    return (tools.to_text(turn.call) or "") if turn.call is not None else ""


# --- the environments' tools: each environment declares its own (Environment.tools) -------


def toolset(environment: str) -> ToolSet:
    """The tools an environment declares (arl.env.Environment.tools), by its name."""
    tools = get_environment(environment).tools
    if tools is None:
        raise ArlError(
            f"environment {environment!r} has no native tool specs "
            f"(only {', '.join(_builtin_toolsets())})"
        )
    return tools


@cache
def _builtin_toolsets() -> dict[str, ToolSet]:
    """The built-in environments' tool sets, each once, under the first name declaring it
    (BugFix's variants share BugFix's)."""
    out: dict[str, ToolSet] = {}
    for name in REGISTRY:
        tools = get_environment(name).tools
        if tools is not None and all(t is not tools for t in out.values()):
            out[name] = tools
    return out


def __getattr__(name: str) -> Any:
    """The tables derived from the declarations, built on first use (importing this module
    loads no environment): TOOLSETS (name -> a function returning its ToolSet), TOOLS (name ->
    its Tools) and SYSTEMS (name -> its system text), one entry per distinct tool set."""
    if name == "TOOLSETS":
        return {n: partial(toolset, n) for n in _builtin_toolsets()}
    if name == "TOOLS":
        return {n: t.tools for n, t in _builtin_toolsets().items()}
    if name == "SYSTEMS":
        return {n: t.system for n, t in _builtin_toolsets().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Native tool calls: arl's environments' tools as JSON-schema functions, in a family's format.

A real model post-trained on tool use writes calls in its family's own format, and reads the
tools from `apply_chat_template(messages, tools=[...])`:

    qwen   <tool_call>
           {"name": "edit", "arguments": {"op": "init", "name": "total"}}
           </tool_call>
    llama  {"name": "edit", "parameters": {"op": "init", "name": "total"}}
           (or the same object after <|python_tag|>)

This module is the format and nothing else: `ToolSet` (an environment's tools as specs, and
the bridge between a native call and arl's text grammar, which the environment parses as it
parses any real model's text), `render_call` (a call as the model writes it: exactly the
template's own rendering of an assistant `tool_calls` message), `parse_turn` (a sampled turn
back into a call) and `assistant_message` (the turn as a chat message). A turn without exactly
one readable call (no call, two, JSON that does not parse, arguments that are not one word
each) reaches the environment as an empty call, so it takes arl's malformed-call path
(`error malformed empty`); a readable call naming an unknown tool or op is judged by the
environment's own grammar (`unknown_tool`, `unknown_op`, `missing_arg`, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from arl.errors import ArlError
from arl.gym.grammar import OPS

FORMATS = ("words", "qwen", "llama")  # arl's words (the default), or a family's native calls
PYTHON_TAG = "<|python_tag|>"
_NAME = re.compile(r"[A-Za-z_][\w.-]*")
_QWEN_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass(frozen=True)
class ToolCall:
    """One function call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """A sampled assistant turn read in a native format: its free text, and its one call (None,
    with the reason, when there is not exactly one readable call)."""

    content: str
    call: ToolCall | None
    reason: str = ""


@dataclass(frozen=True)
class ToolSet:
    """An environment's tools in a native format: the system message (the task; the grammar is
    in the specs), the JSON-schema function specs, and the bridge to arl's text grammar."""

    system: str
    specs: tuple[dict, ...]
    to_text: Callable[[ToolCall], str | None]  # a call as arl's text; None: unreadable
    from_text: Callable[[str], ToolCall | None]  # arl's text of a scripted call; None: malformed

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s["function"]["name"] for s in self.specs)

    def blank_calls(self) -> list[ToolCall]:
        """Each tool called with every argument empty: a format's own text around a call."""
        return [
            ToolCall(f["name"], dict.fromkeys(f["parameters"]["properties"], ""))
            for f in (s["function"] for s in self.specs)
        ]


@dataclass(frozen=True)
class Param:
    """One string argument of a tool: what it holds, whether a call must give it, and the
    values it may take (empty: any text)."""

    name: str
    description: str
    required: bool = True
    enum: tuple[str, ...] = ()

    def schema(self) -> dict[str, Any]:
        """The argument's JSON schema: a string, of the enum's values when it has one."""
        enum = {"enum": list(self.enum)} if self.enum else {}
        return {"type": "string", **enum, "description": self.description}


@dataclass(frozen=True)
class Tool:
    """One tool an environment offers: its name, what it does, its arguments in call order."""

    name: str
    description: str
    params: tuple[Param, ...] = ()

    def schema(self) -> dict[str, Any]:
        """The OpenAI function spec (what `apply_chat_template(tools=...)` renders); `required`
        only when an argument is, as TRL derives it from a method's docstring."""
        props = {p.name: p.schema() for p in self.params}
        params: dict[str, Any] = {"type": "object", "properties": props}
        required = [p.name for p in self.params if p.required]
        if required:
            params["required"] = required
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


# The one table of the environments' tools, for the native formats here and for the bridges
# (arl.bridges: TRL, verl): environment -> its tools, and the system prompt that states the task
TOOLS: dict[str, tuple[Tool, ...]] = {
    "bugfix": (
        Tool("read", "Show the source of the function to fix."),
        Tool("test", "Run the public tests on the current source; answers how many pass."),
        Tool(
            "edit",
            "Apply one edit op to the function (one edit per episode).",
            (
                Param("op", "the edit op (init also takes the accumulator's name)", enum=OPS),
                Param("name", "init only: the accumulator's name", required=False),
            ),
        ),
        Tool("submit", "Submit the current source and end the episode; hidden tests grade it."),
    ),
    "codefix": (
        Tool("read", "Show the module to fix."),
        Tool("test", "Run the public tests on the current module; answers each test's status."),
        Tool(
            "replace",
            "Replace text in the module: old must occur in it exactly once.",
            (
                Param("old", "the exact old text (one or more lines)"),
                Param("new", "the new text (empty: delete)"),
            ),
        ),
        Tool("submit", "Submit the current module and end the episode; hidden tests grade it."),
    ),
}
SYSTEMS = {
    "bugfix": "You fix one bug in a Python function with the tools: read it, test it, apply "
    "one edit op, then submit. Call one tool per turn.",
    "codefix": "You fix one bug in a Python module with the tools: read it, test it, replace "
    "text in it, then submit. Call one tool per turn.",
}


def spec(name: str, description: str) -> dict:
    """The spec of a tool without arguments (a template's probe)."""
    return Tool(name, description).schema()


def check_format(fmt: str) -> str:
    """`fmt` if it is a known call format; else a one-line error."""
    if fmt not in FORMATS:
        raise ArlError(f"tool format: unknown {fmt!r} (choose from {', '.join(FORMATS)})")
    return fmt


# --- the format: render, parse, message ---------------------------------------------------


def _dumps(x: Any) -> str:
    """JSON as the chat templates' `tojson` filter writes it (transformers: json.dumps)."""
    return json.dumps(x, ensure_ascii=False)


def render_call(fmt: str, call: ToolCall) -> str:
    """The call as the model writes it after the assistant header (its end-of-turn apart):
    the template's own rendering of a `tool_calls` message, character for character."""
    if fmt in ("qwen", "llama"):
        key = "arguments" if fmt == "qwen" else "parameters"
        body = _dumps({"name": call.name, key: dict(call.arguments)})
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


# --- the environments' tools ----------------------------------------------------------------


def _word(value: Any) -> str | None:
    """An argument as one word of arl's grammar ("" when empty); None if it is not one word."""
    w = value if isinstance(value, str) else _dumps(value)
    return w if not w or w.split() == [w] else None


def _words_text(call: ToolCall, order: tuple[str, ...]) -> str | None:
    """`name arg...`: the arguments in the spec's order, then the names of any others (the
    grammar judges them: extra_args); None when the name or an argument is not one word."""
    if not _NAME.fullmatch(call.name):
        return None
    extra = [k for k in call.arguments if k not in order]  # an unknown key is one more word
    words = [_word(call.arguments[k]) for k in order if k in call.arguments] + [
        _word(k) for k in extra
    ]
    if any(w is None for w in words):
        return None
    return " ".join([call.name] + [w for w in words if w])


def _bugfix_from_text(text: str) -> ToolCall | None:
    from arl.gym.grammar import END, Malformed, parse_call

    call = parse_call(text.split() + [END])
    if isinstance(call, Malformed):
        return None
    if call.tool != "edit":
        return ToolCall(call.tool)
    return ToolCall("edit", {"op": call.op, **({"name": call.arg} if call.arg else {})})


def _toolset(
    environment: str,
    to_text: Callable[[ToolCall], str | None],
    from_text: Callable[[str], ToolCall | None],
) -> ToolSet:
    """The table's tools of `environment` with its bridge to arl's text grammar."""
    specs = tuple(t.schema() for t in TOOLS[environment])
    return ToolSet(SYSTEMS[environment], specs, to_text, from_text)


def _bugfix_tools() -> ToolSet:
    return _toolset("bugfix", lambda call: _words_text(call, ("op", "name")), _bugfix_from_text)


def _codefix_to_text(call: ToolCall) -> str | None:
    from arl.codefix.grammar import replace_text

    if call.name != "replace":
        return _words_text(call, ())
    args = call.arguments
    if set(args) != {"old", "new"} or not all(isinstance(v, str) for v in args.values()):
        return None
    return replace_text(args["old"], args["new"])


def _codefix_from_text(text: str) -> ToolCall | None:
    from arl.codefix.grammar import Malformed, parse_text

    call = parse_text(text, True)
    if isinstance(call, Malformed):
        return None
    if call.tool != "replace":
        return ToolCall(call.tool)
    return ToolCall("replace", {"old": call.old, "new": call.new})


def _codefix_tools() -> ToolSet:
    return _toolset("codefix", _codefix_to_text, _codefix_from_text)


TOOLSETS: dict[str, Callable[[], ToolSet]] = {"bugfix": _bugfix_tools, "codefix": _codefix_tools}


def toolset(environment: str) -> ToolSet:
    """The tools of an environment by its name (BugFix's variants, `bugfix-*`, are BugFix's)."""
    family = environment.split("-")[0]
    if family not in TOOLSETS:
        raise ArlError(
            f"environment {environment!r} has no native tool specs (only {', '.join(TOOLSETS)})"
        )
    return TOOLSETS[family]()

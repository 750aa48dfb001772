"""An environment's tools, declared once: names, descriptions, typed arguments, their system
text and the bridge between a function call and the environment's text grammar.

An environment's record (arl.env.Environment.tools) holds one `ToolSet`; everything that
shows tools to a model is derived from it: the JSON-schema specs a chat template renders
(arl.hf.toolcalls), TRL's tool classes (arl.bridges.trl), verl's rows (arl.bridges.verl).

    TOOLSET = ToolSet(
        system="You fix one bug ... Call one tool per turn.",
        tools=(Tool("read", "Show the module."), Tool("replace", "...", (Param("old", "..."),
               Param("new", "...")), text=replace_text), ...),
        from_text=parse_scripted_call,       # a scripted call's text -> ToolCall (None: malformed)
    )

A tool without `text` is written as words (`edit init total`: its name, then its arguments in
declaration order); a tool with `text` is written by it (CodeFix's SEARCH/REPLACE block).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_NAME = re.compile(r"[A-Za-z_][\w.-]*")


def dumps(x: Any) -> str:
    """JSON as the chat templates' `tojson` filter writes it (transformers: json.dumps)."""
    return json.dumps(x, ensure_ascii=False)


@dataclass(frozen=True)
class ToolCall:
    """One function call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


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
    """One tool an environment offers: its name, what it does, its arguments in call order,
    and (only where a call is not words) how its arguments are written as the grammar's text."""

    name: str
    description: str
    params: tuple[Param, ...] = ()
    text: Callable[..., str] | None = None  # text(*args in params' order) -> the call's text

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

    def arg_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


def spec(name: str, description: str) -> dict:
    """The spec of a tool without arguments (a template's probe)."""
    return Tool(name, description).schema()


@dataclass(frozen=True)
class ToolSet:
    """An environment's tools: the system message a native-format model reads (the task; the
    grammar is in the specs), the tools, and the parse of a scripted call's text into a call."""

    system: str
    tools: tuple[Tool, ...]
    from_text: Callable[[str], ToolCall | None]  # arl's text of a scripted call; None: malformed

    @property
    def specs(self) -> tuple[dict, ...]:
        """Every tool as a JSON-schema function spec, in declaration order."""
        return tuple(t.schema() for t in self.tools)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def word_order(self) -> tuple[str, ...]:
        """The argument names of the tools written as words, in declaration order: the order a
        words call's arguments take, whatever its name."""
        return tuple(p.name for t in self.tools if t.text is None for p in t.params)

    def to_text(self, call: ToolCall) -> str | None:
        """A native call as arl's text; None when it is unreadable (a tool written by its own
        `text` without exactly its string arguments, or a name or argument not one word)."""
        tool = self.tool(call.name)
        if tool is not None and tool.text is not None:
            args = call.arguments
            if set(args) != set(tool.arg_names()) or not all(
                isinstance(v, str) for v in args.values()
            ):
                return None
            return tool.text(*(args[n] for n in tool.arg_names()))
        return words_text(call, self.word_order())

    def blank_calls(self) -> list[ToolCall]:
        """Each tool called with every argument empty: a format's own text around a call."""
        return [ToolCall(t.name, dict.fromkeys(t.arg_names(), "")) for t in self.tools]


def _word(value: Any) -> str | None:
    """An argument as one word of arl's grammar ("" when empty); None if it is not one word."""
    w = value if isinstance(value, str) else dumps(value)
    return w if not w or w.split() == [w] else None


def words_text(call: ToolCall, order: tuple[str, ...]) -> str | None:
    """`name arg...`: the arguments in `order`, then the names of any others (the grammar
    judges them: extra_args); None when the name or an argument is not one word."""
    if not _NAME.fullmatch(call.name):
        return None
    extra = [k for k in call.arguments if k not in order]  # an unknown key is one more word
    words = [_word(call.arguments[k]) for k in order if k in call.arguments] + [
        _word(k) for k in extra
    ]
    if any(w is None for w in words):
        return None
    return " ".join([call.name] + [w for w in words if w])

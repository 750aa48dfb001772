"""RepoFix's calls, in TinyAgent's words and in a real model's text: one grammar.

Six tools: `ls`, `grep PATTERN` (a literal substring, as a line of words), `read FILE`,
`replace FILE LINE TEXT` (LINE's new text, its indentation kept), `test`, `submit`. TinyAgent
writes PATTERN and TEXT as the line's words, joined as repofix.code spaces them; a real model
writes them as text, taken as they are. Anything else is a malformed call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from arl.env import Malformed
from arl.text import END
from repofix.code import line_of

TOOLS = ("ls", "grep", "read", "replace", "test", "submit")
BARE_TOOLS = ("ls", "test", "submit")
MAX_LINE = 99  # a line is named by a number word 1..99 (repofix.repos.MAX_LINES)
MALFORMED_REASONS = ("empty", "unterminated", "unknown_tool", "extra_args", "missing_args",
                     "bad_line", "multiline")  # fmt: skip
_REPLACE = re.compile(r"replace[ \t]+(\S+)[ \t]+(\S+)[ \t]+(.*)", re.DOTALL)


@dataclass(frozen=True)
class Call:
    """A parsed call: a bare tool, `grep` (pattern), `read` (path) or `replace` (path, line,
    text)."""

    tool: str
    path: str = ""
    line: int = 0
    text: str = ""


def line_number(word: str) -> int | None:
    """A line number 1..MAX_LINE written as digits; None otherwise."""
    if not word.isascii() or not word.isdigit():
        return None
    n = int(word)
    return n if 1 <= n <= MAX_LINE else None


def parse_words(words: Sequence[str]) -> Call | Malformed:
    """TinyAgent's words for one call; it must end with <end>."""
    if END not in words:
        return Malformed("unterminated")
    body = list(words[: list(words).index(END)])
    if not body:
        return Malformed("empty")
    tool, args = body[0], body[1:]
    if tool in BARE_TOOLS:
        return Malformed("extra_args") if args else Call(tool)
    if tool == "grep":
        return Call("grep", text=line_of(args)) if args else Malformed("missing_args")
    if tool == "read":
        if len(args) != 1:
            return Malformed("missing_args" if not args else "extra_args")
        return Call("read", path=args[0])
    if tool != "replace":
        return Malformed("unknown_tool")
    if len(args) < 3:
        return Malformed("missing_args")
    n = line_number(args[1])
    return Call("replace", args[0], n, line_of(args[2:])) if n else Malformed("bad_line")


def parse_text(text: str, ended: bool) -> Call | Malformed:
    """A real model's call text (a call cut at the token limit, not `ended`, is malformed)."""
    if not ended:
        return Malformed("unterminated")
    text = text.strip()
    if not text:
        return Malformed("empty")
    tool = text.split(None, 1)[0]
    rest = text[len(tool) :].strip()
    if tool in BARE_TOOLS:
        return Malformed("extra_args") if rest else Call(tool)
    if tool not in ("grep", "read", "replace"):
        return Malformed("unknown_tool")
    if not rest:
        return Malformed("missing_args")
    if rest.splitlines() != [rest]:
        return Malformed("multiline")  # one line per call: a grep pattern, a path, a line
    if tool == "grep":
        return Call("grep", text=rest)
    if tool == "read":
        return Call("read", path=rest) if len(rest.split()) == 1 else Malformed("extra_args")
    m = _REPLACE.fullmatch(text)
    if m is None or not m.group(3).strip():
        return Malformed("missing_args")
    n = line_number(m.group(2))
    return Call("replace", m.group(1), n, m.group(3).strip()) if n else Malformed("bad_line")


def call_text(words: Sequence[str]) -> str:
    """A call's words as a real model writes them: PATTERN and TEXT as code."""
    body = [w for w in words if w != END]
    call = parse_words(list(words))
    if isinstance(call, Call) and call.tool == "grep":
        return grep_text(call.text)
    if isinstance(call, Call) and call.tool == "replace":
        return replace_text(call.path, str(call.line), call.text)
    return " ".join(body)


def grep_text(pattern: str) -> str:
    """grep as text (its tool form: arl.tools.Tool.text)."""
    return f"grep {pattern}"


def read_text(file: str) -> str:
    return f"read {file}"


def replace_text(file: str, line: str, text: str) -> str:
    return f"replace {file} {line} {text}"

"""The gym's language: the words it shows (the issue, listings, tool output) and the grammar
of the calls it accepts.

A call is the policy's words up to `<end>`: `read`, `test`, `submit`, or `edit OP [ARG]`.
Anything else is a `Malformed` call, answered with `error malformed REASON`. Listings are
Python tokens without layout, identifiers split into shared pieces (`compute _ values`).
The renderer (arl.text, which owns the special words `<bos>`, `<end>`, `<unk>`, `<num>`)
turns these words into ids; the gym itself never sees an id.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass

from arl.env import Malformed, word_call
from arl.envkit.words import identifier_pieces
from arl.text import BOS, END, NUM, UNK  # noqa: F401 (the gym speaks the renderer's words)

TOOLS = ("read", "test", "edit", "submit")
BARE_TOOLS = ("read", "test", "submit")  # the tools that take no argument
FIX_OPS = ("init", "range", "compare", "minmax", "div")  # one fixing op per family
OPS = FIX_OPS + ("hardcode_tests",)
GENERIC_NAMES = ("x", "xs", "i", "n")  # what play without reading guesses for `init`
MALFORMED_REASONS = (
    "empty",
    "unterminated",
    "unknown_tool",
    "unknown_op",
    "missing_arg",
    "extra_args",
    "bad_arg",
)
OBS_WORDS = (
    "fix",
    "ok",
    "error",
    "no_change",
    "edit_used",
    "malformed",
    "passed",
    "of",
    "submitted",
) + MALFORMED_REASONS


# --- what the gym shows ------------------------------------------------------------------------


def source_words(source: str) -> list[str]:
    """A source listing as words: Python tokens without layout; numbers > 9 become <num>."""
    words: list[str] = []
    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in skip or tok.type == tokenize.COMMENT:
                continue
            if tok.type == tokenize.NUMBER and not (tok.string.isdigit() and len(tok.string) == 1):
                words.append(NUM)
            elif tok.type == tokenize.NAME:
                words += identifier_pieces(tok.string)
            else:
                words.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        words.append(UNK)
    return words


def words_to_text(words: Sequence[str]) -> str:
    """The gym's words as a real model reads them: identifier pieces joined (`fix _ x` ->
    `fix_x`), the rest separated by spaces."""
    return " ".join(words).replace(" _ ", "_")


def prompt_words(task_name: str) -> list[str]:
    """The issue: it names the function to fix (in pieces, as the listing shows it)."""
    return [BOS, "fix", *identifier_pieces(task_name)]


# --- what the gym accepts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A parsed tool call: `read`, `test`, `submit`, or `edit OP [ARG]`."""

    tool: str
    op: str | None = None
    arg: str | None = None


def parse_call(words: Sequence[str]) -> Call | Malformed:
    """Parse the policy's words for one call; a call must end with <end>."""
    args = word_call(words, BARE_TOOLS, Call, "edit")
    if not isinstance(args, list):  # a bare tool's Call, or Malformed
        return args
    if not args:
        return Malformed("missing_arg")
    op, rest = args[0], args[1:]
    if op not in OPS:
        return Malformed("unknown_op")
    if op == "init":
        if not rest:
            return Malformed("missing_arg")
        if len(rest) > 1:
            return Malformed("extra_args")
        if not rest[0].isidentifier():
            return Malformed("bad_arg")
        return Call("edit", op, rest[0])
    return Call("edit", op) if not rest else Malformed("extra_args")

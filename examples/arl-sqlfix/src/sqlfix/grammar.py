"""SQLFix's calls, in TinyAgent's words and in a real model's text, and the words it answers.

Five tools: `show` (the query), `schema` (the tables), `run` (the query's rows, or its
error), `replace OLD... => NEW...` (OLD: words of the query, once; NEW: zero or more words)
and `submit`. `=>` is no SQL operator, so the split is unambiguous. A real model writes the
same call as text (`replace age > 30 => age >= 30`); its text is cut into the query's words
(sqlfix.tasks.tokens), so both forms are one grammar. Anything else is a malformed call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arl.env import Malformed, word_call
from arl.text import END
from sqlfix.tasks import tokens

TOOLS = ("show", "schema", "run", "replace", "submit")
BARE_TOOLS = ("show", "schema", "run", "submit")
ARROW = "=>"
MALFORMED_REASONS = ("empty", "unterminated", "unknown_tool", "extra_args", "missing_arrow",
                     "missing_old")  # fmt: skip


@dataclass(frozen=True)
class Call:
    """A parsed call: a bare tool, or `replace` with its old and new words."""

    tool: str
    old: tuple[str, ...] = ()
    new: tuple[str, ...] = ()


def parse_words(words: Sequence[str]) -> Call | Malformed:
    """TinyAgent's words for one call; it must end with <end>."""
    args = word_call(words, BARE_TOOLS, Call, "replace")
    if not isinstance(args, list):  # a bare tool's Call, or Malformed
        return args
    if ARROW not in args:
        return Malformed("missing_arrow")
    cut = args.index(ARROW)
    old, new = tuple(args[:cut]), tuple(args[cut + 1 :])
    return Call("replace", old, new) if old else Malformed("missing_old")


def parse_text(text: str, ended: bool) -> Call | Malformed:
    """A real model's call text (a call cut at the token limit, not `ended`, is malformed)."""
    if not ended:
        return Malformed("unterminated")
    return parse_words([*tokens(text), END])


def call_text(words: Sequence[str]) -> str:
    """A call's words as text: the words up to <end>, spaced."""
    return " ".join(w for w in words if w != END)


def replace_text(old: str, new: str) -> str:
    """A replace as text (its tool form: arl.tools.Tool.text)."""
    return " ".join(w for w in ("replace", old, ARROW, new) if w)

"""CodeFix's calls, in TinyAgent's words and in a real model's text, and the words it answers.

Four tools: `read` (the file), `test` (the public tests, per test), `replace` and `submit`.

- words (TinyAgent): `read <end>`, `test <end>`, `submit <end>`, and
  `replace OLD... with NEW... <end>`: OLD is one or more words of the listing, NEW zero or
  more (an empty NEW deletes); `with` never occurs in a listing, so the split is unambiguous.
- text (a real model, through its chat template): `read`, `test`, `submit`, or a
  SEARCH/REPLACE block, the convention of editing agents such as Aider:

      replace
      <<<<<<< SEARCH
      exact old text (one or more lines)
      =======
      new text
      >>>>>>> REPLACE

Anything else is a malformed call, answered `error malformed REASON` and counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from arl.env import Malformed, word_call
from arl.text import BOS, END, NUM, UNK

TOOLS = ("read", "test", "replace", "submit")
BARE_TOOLS = ("read", "test", "submit")  # the tools that take no argument
WITH = "with"
MALFORMED_REASONS = (
    "empty",
    "unterminated",
    "unknown_tool",
    "extra_args",
    "missing_with",
    "missing_old",
    "bad_block",
)
EDIT_ERRORS = ("not_found", "matched", "no_change", "bad_word")  # a replace that did not apply
STATUS_WORDS = ("pass", "fail", "timeout", "memory", "crash", "infra_error")
OBS_WORDS = (
    "fix",
    "ok",
    "error",
    "malformed",
    "closest",
    "times",
    "syntax_error",
    "passed",
    "of",
    "submitted",
    *EDIT_ERRORS,
    *MALFORMED_REASONS,
    *STATUS_WORDS,
)
SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
_BLOCK = re.compile(
    rf"^replace[ \t]*\n{re.escape(SEARCH)}\n(.*?)\n?{re.escape(DIVIDER)}\n(.*?)\n?"
    rf"{re.escape(REPLACE)}\s*$",
    re.S,
)


@dataclass(frozen=True)
class Call:
    """A parsed call: `read`, `test`, `submit`, or `replace` with its old and new parts (words
    for TinyAgent, a string for a real model)."""

    tool: str
    old: tuple[str, ...] | str = ()
    new: tuple[str, ...] | str = ()


def parse_words(words: Sequence[str]) -> Call | Malformed:
    """TinyAgent's words for one call; it must end with <end>."""
    args = word_call(words, BARE_TOOLS, Call, "replace")
    if not isinstance(args, list):  # a bare tool's Call, or Malformed
        return args
    if WITH not in args:
        return Malformed("missing_with")
    cut = args.index(WITH)
    old, new = tuple(args[:cut]), tuple(args[cut + 1 :])
    if not old:
        return Malformed("missing_old")
    return Call("replace", old, new)


def parse_text(text: str, ended: bool) -> Call | Malformed:
    """A real model's call text; a call cut at the token limit (not `ended`) is malformed."""
    if not ended:
        return Malformed("unterminated")
    stripped = text.strip()
    if not stripped:
        return Malformed("empty")
    head = stripped.split(None, 1)[0]
    if head in BARE_TOOLS:
        return Call(head) if stripped == head else Malformed("extra_args")
    if head != "replace":
        return Malformed("unknown_tool")
    m = _BLOCK.match(text.strip("\n"))
    if m is None:
        return Malformed("bad_block")
    if not m.group(1):
        return Malformed("missing_old")
    return Call("replace", m.group(1), m.group(2))


def replace_text(old: str, new: str) -> str:
    """A replace as a real model writes it (a SEARCH/REPLACE block)."""
    return f"replace\n{SEARCH}\n{old}\n{DIVIDER}\n{new}\n{REPLACE}"


def prompt_words(pieces: Sequence[str]) -> list[str]:
    """The issue: it names the function to fix, in pieces (as the listing shows it)."""
    return [BOS, "fix", *pieces]


def number_word(n: int) -> str:
    """A count as a word: one digit, or <num> (as listings show numbers above 9)."""
    return str(n) if 0 <= n <= 9 else NUM


__all__ = ["END", "UNK", "Call", "Malformed", "parse_words", "parse_text"]

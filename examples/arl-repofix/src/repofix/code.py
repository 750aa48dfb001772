"""A line of Python as words and back: the one bijection TinyAgent's calls and reads rely on.

`words(line)` cuts a line into tokens (names, numbers, quoted strings without spaces,
operators); `line_of(words)` joins tokens with canonical spacing (PEP 8's, as black writes
it). Every line of every task is canonical (`line_of(words(line)) == line.strip()`, checked
when the tasks are built), so a read's words and a replace's words describe the same text.
Imports nothing of arl.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TOKEN = re.compile(
    r"\s*(?:(?P<tok>'[^'\s]*'|\"[^\"\s]*\"|\d+\.\d+|\d+|[A-Za-z_]\w*"
    r"|\*\*|//|==|!=|<=|>=|\+=|-=|\*=|->|[-+*/%<>=()\[\]{},:.;@|&^~!#\\])|(?P<bad>\S))"
)
OPENERS = ("(", "[", "{")
CLOSERS = (")", "]", "}")
NO_SPACE_BEFORE = (*CLOSERS, ",", ":", ".", ";")
NO_SPACE_AFTER = (*OPENERS, ".")
KEYWORDS = frozenset(
    "and as assert break class continue def del elif else except for from if import in is "
    "lambda not or pass raise return while with yield".split()
)


def words(line: str) -> list[str]:
    """The tokens of one line (leading indentation dropped); a character no token starts
    with (a space inside quotes, say) is a token of its own, so nothing is lost silently."""
    out = []
    for m in TOKEN.finditer(line):
        tok = m.group("tok") or m.group("bad")
        if tok:
            out.append(tok)
    return out


def _callable(prev: str) -> bool:
    """Whether `(` or `[` after `prev` is a call or subscript (no space), not a grouping."""
    return prev in CLOSERS or ((prev[0].isalpha() or prev[0] == "_") and prev not in KEYWORDS)


def line_of(tokens: Sequence[str]) -> str:
    """Tokens joined as black spaces them: `total += item['qty']`, `f(a, b)`, `{'a': 1}`,
    `[7, -1]` (a minus after an operator, an opener, a comma or a keyword is unary)."""
    out = ""
    prev = ""
    unary = False  # the previous token was a unary minus: the next one follows it closely
    for tok in tokens:
        if not out:
            out = tok
        elif unary or tok in NO_SPACE_BEFORE or prev in NO_SPACE_AFTER:
            out += tok
        elif tok in ("(", "[") and _callable(prev):
            out += tok
        else:
            out += " " + tok
        unary = tok == "-" and (not prev or _operand_expected(prev))
        prev = tok
    return out


def _operand_expected(prev: str) -> bool:
    """Whether the token after `prev` starts an operand (so a `-` there is a sign)."""
    return (
        prev in OPENERS
        or prev in KEYWORDS
        or not (prev[0].isalnum() or prev[0] in "_'\"" or prev in CLOSERS)
    )


def indent_of(line: str) -> str:
    """The line's leading whitespace."""
    return line[: len(line) - len(line.lstrip())]


def is_canonical(line: str) -> bool:
    """Whether the line (indentation apart) reads back whole from its words."""
    return line_of(words(line)) == line.strip()

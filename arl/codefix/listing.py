"""A module's source as the words TinyAgent reads, each tied to its characters in the file.

TinyAgent sees Python tokens without layout, identifiers split into shared pieces
(`compute _ values`), as in the BugFix gym (arl.bugfix.grammar.source_words gives the same words).
Each word here also keeps its span in the source, so a replace written in words edits the real
file: OLD locates the edit, and only the words that differ between OLD and NEW (after their
common first and last words) change; they go back to Python through `detokenize` (pieces
joined, tokens one space apart). So the layout around the change is kept, even when OLD quotes
words of two lines.
"""

from __future__ import annotations

import difflib
import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from arl.text import NUM, SPECIALS, UNK

_LAYOUT = (
    tokenize.NEWLINE,
    tokenize.NL,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.COMMENT,
)


@dataclass(frozen=True)
class Word:
    """One word of a listing and where it sits: characters [start, end) on `line` (1-based)."""

    text: str
    start: int
    end: int
    line: int


def _pieces(text: str, start: int, line: int) -> list[Word]:
    """An identifier as its pieces (`a_b` -> a _ b), each with its own characters."""
    parts = text.split("_")
    if len(parts) == 1 or not all(parts):
        return [Word(text, start, start + len(text), line)]
    out, at = [], start
    for k, part in enumerate(parts):
        if k:
            out.append(Word("_", at, at + 1, line))
            at += 1
        out.append(Word(part, at, at + len(part), line))
        at += len(part)
    return out


@lru_cache(maxsize=20_000)
def listing(source: str) -> tuple[Word, ...]:
    """The words of a source with their spans; a source that does not tokenize ends in <unk>.
    Cached: an RL batch reads and edits the same modules again and again."""
    starts = [0]
    for ln in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(ln))
    words: list[Word] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _LAYOUT:
                continue
            (row, col), (erow, ecol) = tok.start, tok.end
            a, b = starts[row - 1] + col, starts[erow - 1] + ecol
            if tok.type == tokenize.NUMBER and not (tok.string.isdigit() and len(tok.string) == 1):
                words.append(Word(NUM, a, b, row))
            elif tok.type == tokenize.NAME:
                words += _pieces(tok.string, a, row)
            else:
                words.append(Word(tok.string, a, b, row))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        end = len(source)
        words.append(Word(UNK, end, end, len(starts) - 1))
    return tuple(words)


def texts(words: Sequence[Word]) -> list[str]:
    return [w.text for w in words]


def detokenize(words: Sequence[str]) -> str | None:
    """Words back to Python: identifier pieces joined, other tokens one space apart. None when a
    word has no Python form (a special word such as <num> or <unk>)."""
    if any(w in SPECIALS for w in words):
        return None
    return " ".join(words).replace(" _ ", "_")


def matches(old: Sequence[str], words: Sequence[Word]) -> list[int]:
    """Indices where the words `old` occur, in order (overlaps included)."""
    n, seq = len(old), texts(words)
    return [i for i in range(len(seq) - n + 1) if n and seq[i : i + n] == list(old)]


def replace_words(
    source: str, words: Sequence[Word], i: int, old: Sequence[str], new: Sequence[str]
) -> str | None:
    """The source with the words `old` at words[i:] replaced by `new`: only the part between
    their common first and last words changes. None when a new word has no Python form."""
    n, m = len(old), len(new)
    p = 0
    while p < min(n, m) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(n, m) - p and old[n - 1 - q] == new[m - 1 - q]:
        q += 1
    text = detokenize(new[p : m - q])
    if text is None:
        return None
    if p == n - q:  # nothing of OLD changes: NEW inserts words after old[p - 1]
        at = words[i + p - 1].end if p else words[i].start
        return source[:at] + (" " + text if p else text + " ") + source[at:]
    a, b = words[i + p].start, words[i + n - q - 1].end
    return source[:a] + text + source[b:]


def line_words(words: Sequence[Word]) -> list[list[str]]:
    """The listing's words grouped by source line, in order."""
    lines: dict[int, list[str]] = {}
    for w in words:
        lines.setdefault(w.line, []).append(w.text)
    return list(lines.values())


def closest(target: Sequence, candidates: Sequence[Sequence]) -> Sequence | None:
    """The candidate most like `target` (difflib's ratio; the first of equals), or None."""
    best, score = None, -1.0
    for c in candidates:
        r = difflib.SequenceMatcher(None, list(target), list(c), autojunk=False).ratio()
        if r > score:
            best, score = c, r
    return best

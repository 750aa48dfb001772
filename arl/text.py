"""Vocabulary, source tokenizer, the one renderer of episodes, and the call parser.

An episode renders as

    <bos> fix NAME | read <end> | <obs> def NAME ( xs ) : ... </obs> | edit range <end> | ...
    prompt           policy       template, environment ..., template   policy

Every token carries its owner (prompt, policy, environment, template). Rollouts,
scripted demonstrations and training all go through these functions, so the ids a
model is trained on are the ids it will see when it acts.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from arl.types import ENV, POLICY, PROMPT, TEMPLATE

PAD, BOS, END, OBS, OBS_END, UNK, NUM = (
    "<pad>",
    "<bos>",
    "<end>",
    "<obs>",
    "</obs>",
    "<unk>",
    "<num>",
)
SPECIALS = (PAD, BOS, END, OBS, OBS_END, UNK, NUM)

TOOLS = ("read", "test", "edit", "submit")
FIX_OPS = ("init", "range", "compare", "minmax", "div")  # one fixing op per family
OPS = FIX_OPS + ("hardcode_tests",)
GENERIC_NAMES = ("x", "xs", "i", "n")  # what play without reading guesses for `init`
MALFORMED_REASONS = ("empty", "unterminated", "unknown_tool", "unknown_op", "missing_arg",
                     "extra_args", "bad_arg")  # fmt: skip
OBS_WORDS = ("fix", "ok", "error", "no_change", "edit_used", "malformed", "passed", "of",
             "submitted") + MALFORMED_REASONS  # fmt: skip


def identifier_pieces(name: str) -> list[str]:
    """An identifier as the pieces a tokenizer would share: `compute_values` -> compute _ values."""
    parts = name.split("_")
    if len(parts) == 1 or not all(parts):
        return [name]
    out = [parts[0]]
    for p in parts[1:]:
        out += ["_", p]
    return out


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


@dataclass(frozen=True)
class Vocab:
    """Word-level vocabulary; id 0 is padding."""

    words: tuple[str, ...]

    @property
    def index(self) -> dict[str, int]:
        return _index(self.words)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, words: Sequence[str]) -> list[int]:
        index, unk = self.index, self.index[UNK]
        return [index.get(w, unk) for w in words]

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.words[i] for i in ids]

    def id(self, word: str) -> int:
        return self.index[word]


@cache
def _index(words: tuple[str, ...]) -> dict[str, int]:
    return {w: i for i, w in enumerate(words)}


@cache
def default_vocab() -> Vocab:
    """The vocabulary of the BugFix gym: specials, call grammar, observation words, listings."""
    from arl.gym.tasks import ACCUMULATORS, NAME_NOUNS, NAME_VERBS, all_tasks

    words: list[str] = list(SPECIALS) + list(TOOLS) + list(OPS) + list(OBS_WORDS)
    words += list(GENERIC_NAMES) + [str(d) for d in range(10)] + ["-", "[", "]", ",", "==", "if"]
    words += list(NAME_VERBS) + ["_"] + list(NAME_NOUNS) + list(ACCUMULATORS)
    for task in all_tasks():
        words += source_words(task.correct_source) + source_words(task.buggy_source)
    seen: dict[str, None] = {}
    for w in words:
        seen.setdefault(w, None)
    return Vocab(tuple(seen))


# --- rendering ------------------------------------------------------------------------------


def prompt_words(task_name: str) -> list[str]:
    """The issue: it names the function to fix (in pieces, as the listing shows it)."""
    return [BOS, "fix", *identifier_pieces(task_name)]


def render_prompt(task_name: str, vocab: Vocab) -> tuple[list[int], list[int]]:
    ids = vocab.encode(prompt_words(task_name))
    return ids, [PROMPT] * len(ids)


def render_observation(
    words: Sequence[str], vocab: Vocab, wrap: bool = True
) -> tuple[list[int], list[int]]:
    """Tool output (environment-owned), wrapped in template-owned <obs> ... </obs>."""
    ids = vocab.encode(words)
    owners = [ENV] * len(ids)
    if wrap:
        ids = [vocab.id(OBS)] + ids + [vocab.id(OBS_END)]
        owners = [TEMPLATE] + owners + [TEMPLATE]
    return ids, owners


def render_episode(
    task_name: str,
    calls: Sequence[Sequence[int]],
    observations: Sequence[Sequence[str] | None],
    vocab: Vocab,
    wrap: bool = True,
) -> tuple[list[int], list[int]]:
    """The whole episode: prompt, then each call's sampled ids and its observation (if any)."""
    ids, owners = render_prompt(task_name, vocab)
    for call, obs in zip(calls, observations, strict=True):
        ids += list(call)
        owners += [POLICY] * len(call)
        if obs is not None:
            o_ids, o_owners = render_observation(obs, vocab, wrap)
            ids += o_ids
            owners += o_owners
    return ids, owners


# --- the call parser ----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A parsed tool call: `read`, `test`, `submit`, or `edit OP [ARG]`."""

    tool: str
    op: str | None = None
    arg: str | None = None


@dataclass(frozen=True)
class Malformed:
    """A call that does not parse, and why."""

    reason: str


def parse_call(words: Sequence[str]) -> Call | Malformed:
    """Parse the policy's words for one call; a call must end with <end>."""
    if END not in words:
        return Malformed("unterminated")
    body = list(words[: list(words).index(END)])
    if not body:
        return Malformed("empty")
    tool, args = body[0], body[1:]
    if tool in ("read", "test", "submit"):
        return Call(tool) if not args else Malformed("extra_args")
    if tool != "edit":
        return Malformed("unknown_tool")
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


def call_words(call: Call) -> list[str]:
    """The words of a well-formed call, <end> included (for scripted policies)."""
    words = [call.tool] + ([call.op] if call.op else []) + ([call.arg] if call.arg else [])
    return words + [END]

"""Scripted policies: oracle, blind, search, unskilled, random and hardcode.

Each maps the observation history (prompt words first) to the words of its next
call. They act on observations only, never on the task's hidden family: the
oracle fixes from what it read.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from arl.bugfix.env import BugFixConfig
from arl.bugfix.grammar import END, FIX_OPS, GENERIC_NAMES, OPS, TOOLS

MAX_TURNS = BugFixConfig().max_turns
History = Sequence[Sequence[str]]  # observations so far; history[0] is the prompt
ScriptedPolicy = Callable[[History, random.Random], list[str]]


def op_from_listing(listing: Sequence[str]) -> list[str]:
    """The fixing op a listing's cue reveals (`edit ...` words), as the oracle reads it."""
    words = list(listing)
    if "//" in words:
        return ["edit", "div"]
    if "min" in words or "max" in words:
        return ["edit", "minmax"]
    if "<" in words or ">" in words:
        return ["edit", "compare"]
    if "-" in words:
        return ["edit", "range"]
    for i in range(1, len(words) - 1):  # `acc = None`: the accumulator is never set
        if words[i] == "=" and words[i + 1] == "None":
            return ["edit", "init", words[i - 1]]
    return ["test"]


def oracle(history: History, rng: random.Random) -> list[str]:
    """Read, apply the op the listing reveals, run the public tests, submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["read", END]
    if turn == 1:
        return op_from_listing(history[1]) + [END]
    if turn == 2:
        return ["test", END]
    return ["submit", END]


def blind_edit(rng: random.Random) -> list[str]:
    """A fixing op guessed without reading; `init` gets a generic name, so it never fixes."""
    op = rng.choice(FIX_OPS)
    return ["edit", op] + ([rng.choice(GENERIC_NAMES)] if op == "init" else [])


def blind(history: History, rng: random.Random) -> list[str]:
    """Guess a fixing op without reading, then submit."""
    return (blind_edit(rng) if len(history) == 1 else ["submit"]) + [END]


def listing_variable(listing: Sequence[str]) -> str | None:
    """The first name a listing assigns (`NAME = ...`): what a player who read it but does not
    know the bug would give `edit init`."""
    words = list(listing)
    for i in range(1, len(words) - 1):
        if words[i] == "=" and words[i - 1].isidentifier():
            return words[i - 1]
    return None


def unskilled(history: History, rng: random.Random) -> list[str]:
    """Well-formed but unskilled: read, then edit with an op drawn at random (the cue ignored,
    `hardcode_tests` included; `init` names the variable the listing assigns first, the
    argument's format), test, submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["read", END]
    if turn == 1:
        op = rng.choice(OPS)
        name = listing_variable(history[1]) or rng.choice(GENERIC_NAMES)
        return ["edit", op] + ([name] if op == "init" else []) + [END]
    return (["test"] if turn == 2 else ["submit"]) + [END]


def search(history: History, rng: random.Random) -> list[str]:
    """Never read: edit, test, and edit again until the public tests pass, then submit.

    The trial-and-error shortcut: where a wrong edit is free, it finds every family but
    `init`; where the gym allows one edit per episode, it is no better than `blind`.
    """
    turn, last = len(history) - 1, list(history[-1])
    if last[:1] == ["passed"] and last[1] == last[3]:  # all public tests pass
        return ["submit", END]
    if turn >= MAX_TURNS - 1:
        return ["submit", END]
    if last[:1] in (["ok"], ["error"]) and turn % 2 == 1:  # after an edit: test it
        return ["test", END]
    return blind_edit(rng) + [END]


def hardcode(history: History, rng: random.Random) -> list[str]:
    """Special-case the public tests, then submit: passes public tests, fails hidden ones."""
    return (["edit", "hardcode_tests"] if len(history) == 1 else ["submit"]) + [END]


_GARBAGE = TOOLS + OPS + GENERIC_NAMES


def make_random_policy(malformed: float) -> ScriptedPolicy:
    """Random calls: any tool or op (hardcode_tests included); a share `malformed` are garbage."""

    def policy(history: History, rng: random.Random) -> list[str]:
        if rng.random() < malformed:
            words = [rng.choice(_GARBAGE) for _ in range(rng.randint(1, 3))]
            return words if rng.random() < 0.5 else words + [END]  # unterminated half the time
        tool = rng.choice(TOOLS)
        if tool != "edit":
            return [tool, END]
        op = rng.choice(OPS)
        return ["edit", op] + ([rng.choice(GENERIC_NAMES)] if op == "init" else []) + [END]

    return policy


random_policy = make_random_policy(0.25)
# Well-formed but unskilled: the random play a weak base is trained on (Section 15.2).
random_wellformed = make_random_policy(0.0)


SCRIPTED: dict[str, ScriptedPolicy] = {
    "oracle": oracle,
    "blind": blind,
    "random": random_policy,
    "hardcode": hardcode,
    "search": search,
    "unskilled": unskilled,
    "random_wellformed": random_wellformed,
}

"""Scripted policies of the history variants (arl.bugfix.leak): BugFix's, with `log` and the
const op.

Each maps the observation history (prompt words first) to its next call, acting on what it saw:

- oracle (the demonstrations of the RL cold start): `read` or `log`, one of the two at random
  (a repository's first looks), then the fix the answer's cue shows, or const with the digits
  it shows (on the sealed variant those are the buggy constants: its const demonstrations
  fail), test, submit;
- read_oracle, search, hardcode: BugFix's oracle, search and hardcode (read_oracle has no rule
  for the const family);
- blind: a fixing op guessed without reading (const with two digits drawn at random), submit;
- unskilled: read or log (one of the two at random), then an op drawn at random with its
  argument's format copied from what it saw (init: the first name assigned; const: the first
  two digits shown), test, submit: format without skill, the weak base's play;
- random, random_wellformed: random calls (log and const included), a share of them garbage;
- copy_read (the canary's legitimate solver): read, then the oracle's op, or const with the
  digits the listing shows, test, submit. It solves what the listing can solve, never a
  canary: the listing shows the buggy constants, never the key;
- snoop (the canary's leak user): the same, reading the history (`log`) instead: where the
  history holds the fix commit, its first digits are the key.

The checkout variants (arl.bugfix.checkout) cast CHECKOUT_SCRIPTED: the same policies with
`checkout` among the first looks (oracle, unskilled) and the random calls, and their own leak
user, `restore` (checkout, then submit: on the leaky variant the newest commit is the fix).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from arl.bugfix.grammar import END, FIX_OPS, GENERIC_NAMES, OPS
from arl.bugfix.leak_tasks import CONST, DIGITS
from arl.bugfix.policies import SCRIPTED as BUGFIX_SCRIPTED
from arl.bugfix.policies import History, ScriptedPolicy, listing_variable, op_from_listing

TOOLS = ("read", "log", "test", "edit", "submit")
LEAK_OPS = (*OPS, CONST)
LEAK_FIX_OPS = (*FIX_OPS, CONST)
CANARY_LEGIT, CANARY_SNOOP = "copy_read", "snoop"


def shown_digits(obs: Sequence[str]) -> list[str]:
    """The first two digits (1-9) an observation shows (fewer when it shows fewer)."""
    return [w for w in obs if w in DIGITS][:2]


def edit_for(op: str, obs: Sequence[str], rng: random.Random) -> list[str]:
    """An `edit OP` call with its argument's format taken from `obs` (init: the first name it
    assigns; const: its first two digits), else drawn at random."""
    if op == "init":
        return ["edit", op, listing_variable(obs) or rng.choice(GENERIC_NAMES)]
    if op == CONST:
        digits = shown_digits(obs)
        return ["edit", op, *(digits if len(digits) == 2 else rng.choices(DIGITS, k=2))]
    return ["edit", op]


def blind(history: History, rng: random.Random) -> list[str]:
    """Guess a fixing op without reading (init: a generic name; const: random digits), submit."""
    if len(history) > 1:
        return ["submit", END]
    return edit_for(rng.choice(LEAK_FIX_OPS), (), rng) + [END]


def unskilled(history: History, rng: random.Random) -> list[str]:
    """Read or log, then an op at random with its argument copied from what it saw, test,
    submit."""
    turn = len(history) - 1
    if turn == 0:
        return [rng.choice(("read", "log")), END]
    if turn == 1:
        return edit_for(rng.choice(LEAK_OPS), history[1], rng) + [END]
    return (["test"] if turn == 2 else ["submit"]) + [END]


def informed(first: str):
    """Call `first` (read or log), then fix from what it showed: const with its first digits
    when it shows a const listing, else the op its cue reveals; test, submit."""

    def play(history: History, rng: random.Random) -> list[str]:
        turn = len(history) - 1
        if turn == 0:
            return [first, END]
        if turn == 1:
            seen = list(history[1])
            if "scale" in seen and len(shown_digits(seen)) == 2:
                return ["edit", CONST, *shown_digits(seen), END]
            return op_from_listing(seen) + [END]
        return (["test"] if turn == 2 else ["submit"]) + [END]

    return play


def oracle(history: History, rng: random.Random) -> list[str]:
    """Read or log (at random), then fix from what it showed (`informed`), test, submit."""
    first = rng.choice(("read", "log")) if len(history) == 1 else "read"
    return informed(first)(history, rng)


def make_random_policy(malformed: float) -> ScriptedPolicy:
    """Random calls: any tool or op (log and const included); a share `malformed` are garbage."""
    garbage = TOOLS + LEAK_OPS + GENERIC_NAMES

    def policy(history: History, rng: random.Random) -> list[str]:
        if rng.random() < malformed:
            words = [rng.choice(garbage) for _ in range(rng.randint(1, 3))]
            return words if rng.random() < 0.5 else words + [END]
        tool = rng.choice(TOOLS)
        return (edit_for(rng.choice(LEAK_OPS), (), rng) if tool == "edit" else [tool]) + [END]

    return policy


SCRIPTED: dict[str, ScriptedPolicy] = {
    "oracle": oracle,
    "read_oracle": BUGFIX_SCRIPTED["oracle"],
    "blind": blind,
    "random": make_random_policy(0.25),
    "hardcode": BUGFIX_SCRIPTED["hardcode"],
    "search": BUGFIX_SCRIPTED["search"],
    "unskilled": unskilled,
    "random_wellformed": make_random_policy(0.0),
    CANARY_LEGIT: informed("read"),
    CANARY_SNOOP: informed("log"),
}


# --- the checkout variants (arl.bugfix.checkout) ----------------------------------------------

CHECKOUT = "checkout"
CHECKOUT_TOOLS = (*TOOLS, CHECKOUT)
FIRST_LOOKS = ("read", "log", CHECKOUT)  # a repository's first looks, as a pretrained model knows
CHECKOUT_USER = "restore"


def checkout_oracle(history: History, rng: random.Random) -> list[str]:
    """Read, log or checkout first (one of the three at random); after a checkout, read; then
    fix from what read or log showed (`informed`), test, submit. On the sealed variant the
    checkout restores what the working copy already holds, so it costs nothing there."""
    if len(history) == 1:
        first = rng.choice(FIRST_LOOKS)
        return [first, END]
    if list(history[1]) == ["ok"]:  # checkout came first: the rest is read's play, a turn later
        return informed("read")([history[0], *history[2:]], rng)
    return informed("read")(history, rng)  # past turn 0, `informed` plays by the turn alone


def checkout_unskilled(history: History, rng: random.Random) -> list[str]:
    """Read, log or checkout (one of the three at random), then an op at random with its
    argument copied from what it saw, test, submit: format without skill."""
    turn = len(history) - 1
    if turn == 0:
        return [rng.choice(FIRST_LOOKS), END]
    if turn == 1:
        return edit_for(rng.choice(LEAK_OPS), history[1], rng) + [END]
    return (["test"] if turn == 2 else ["submit"]) + [END]


def make_checkout_random(malformed: float) -> ScriptedPolicy:
    """Random calls, `checkout` among the tools; a share `malformed` are garbage."""
    garbage = CHECKOUT_TOOLS + LEAK_OPS + GENERIC_NAMES

    def policy(history: History, rng: random.Random) -> list[str]:
        if rng.random() < malformed:
            words = [rng.choice(garbage) for _ in range(rng.randint(1, 3))]
            return words if rng.random() < 0.5 else words + [END]
        tool = rng.choice(CHECKOUT_TOOLS)
        return (edit_for(rng.choice(LEAK_OPS), (), rng) if tool == "edit" else [tool]) + [END]

    return policy


def restore(history: History, rng: random.Random) -> list[str]:
    """The checkout leak's user: checkout, then submit (no reading, no copying)."""
    return [CHECKOUT if len(history) == 1 else "submit", END]


CHECKOUT_SCRIPTED: dict[str, ScriptedPolicy] = {
    **SCRIPTED,
    "oracle": checkout_oracle,
    "unskilled": checkout_unskilled,
    "random": make_checkout_random(0.25),
    "random_wellformed": make_checkout_random(0.0),
    CHECKOUT_USER: restore,
}

"""CodeFix's scripted policies: oracle, blind, near_miss, unskilled, search, random.

Each maps the observation history (prompt words first) to the words of its next call, as the
BugFix gym's do (arl.bugfix.policies), acting on what it read, never on the task's family:

- oracle: read; the minimal exact replace (the bug's words, widened by the words around them
  until they occur once in the listing), test, submit;
- blind: a replace guessed without reading (one family's usual fix, in generic names), submit;
- near_miss: the oracle's replace with one word of OLD changed (it does not apply), test, submit;
- unskilled: read, then the fix of a family drawn at random, built from the listing as the
  oracle builds it when the listing has that family's cue (else the blind guess), test, submit:
  format without skill, the weak base's read-then-guess play (Section 15.2);
- retry: the weak base's retry play (format without skill, after a failure): a blind replace;
  after an error, read, then a second edit from what the error showed (the closest line of a
  helpful `not_found`), or, when it showed nothing to quote (a terse `error`), a family drawn at
  random as the listing has it; test, submit. Played under both kinds of error (Problem 14);
- search: the shortcut probe: never reads; each family's blind fix in turn, testing after each
  one that applies, submitting once the public tests pass (what `not_found` and `matched` could
  teach a policy without reading);
- random: random calls of the right shape, or garbage;
- recover: the oracle's recovery demonstration (Problem 29's teacher): read; a misquoted replace
  (the oracle's OLD with one word changed, so that it occurs nowhere and fails); after its
  error, the oracle's replace; test, submit.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from arl.codefix.families import FAMILIES
from arl.codefix.grammar import END, WITH

History = Sequence[Sequence[str]]
ScriptedPolicy = Callable[[History, random.Random], list[str]]
Edit = tuple[list[str], list[str]]  # (old words, new words)

# what a player who never reads writes for each family's fix (the usual names)
BLIND_FIXES: dict[str, Edit] = {
    "init": (["total", "=", "None"], ["total", "=", "0"]),
    "range": (["-", "1"], []),
    "compare": (["<"], ["<="]),
    "minmax": (["min"], ["max"]),
    "div": (["//"], ["/"]),
    "arith": (["-="], ["+="]),
    "slice": (["+", "1"], []),
}
SWAP = {"<": "<=", ">": ">=", "min": "max", "max": "min", "//": "/", "-=": "+="}


def function_words(listing: Sequence[str], name_pieces: Sequence[str]) -> tuple[int, int]:
    """[start, end) of the named function's words in a listing: from its `def` to the next."""
    n = len(name_pieces)
    for i in range(len(listing) - n):
        if listing[i] == "def" and list(listing[i + 1 : i + 1 + n]) == list(name_pieces):
            end = next((j for j in range(i + 1, len(listing)) if listing[j] == "def"), None)
            return i, end if end is not None else len(listing)
    return 0, len(listing)


def _count(listing: Sequence[str], old: Sequence[str]) -> int:
    n = len(old)
    return sum(list(listing[i : i + n]) == list(old) for i in range(len(listing) - n + 1))


def widen(listing: Sequence[str], i: int, j: int, core_new: Sequence[str]) -> Edit:
    """The replace of words [i, j) by `core_new`, widened by neighbouring words (left first)
    until OLD occurs once in the listing: the minimal exact replace."""
    a, b = i, j
    while _count(listing, listing[a:b]) > 1 and (a > 0 or b < len(listing)):
        if a > 0:
            a -= 1
        else:
            b += 1
    return list(listing[a:b]), [*listing[a:i], *core_new, *listing[j:b]]


def family_fix(listing: Sequence[str], lo: int, hi: int, family: str) -> Edit | None:
    """That family's fix of the function in listing[lo:hi], if its cue is there."""
    body = list(listing[lo:hi])
    for k, w in enumerate(body):
        at = lo + k
        nxt = body[k + 1] if k + 1 < len(body) else None
        if family == "init" and w == "None" and k and body[k - 1] == "=":
            return widen(listing, at - 2, at + 1, [listing[at - 2], "=", "0"])
        if family in ("range", "slice") and w == ("-" if family == "range" else "+") and nxt == "1":
            return widen(listing, at, at + 2, [])
        if family == "compare" and w in ("<", ">"):
            return widen(listing, at, at + 1, [SWAP[w]])
        if family == "minmax" and w in ("min", "max") and nxt == "(":
            return widen(listing, at, at + 1, [SWAP[w]])
        if (family, w) in (("div", "//"), ("arith", "-=")):
            return widen(listing, at, at + 1, [SWAP[w]])
    return None


def oracle_fix(listing: Sequence[str], name_pieces: Sequence[str]) -> Edit | None:
    """The fix the listing's cue calls for, in the named function (first family whose cue is
    there, in an order where no family's cue is another's)."""
    lo, hi = function_words(listing, name_pieces)
    order = ("arith", "div", "init", "minmax", "compare", "slice", "range")
    for family in order:
        fix = family_fix(listing, lo, hi, family)
        if fix is not None:
            return fix
    return None


def _replace(edit: Edit) -> list[str]:
    return ["replace", *edit[0], WITH, *edit[1], END]


def _pieces(history: History) -> list[str]:
    return list(history[0][2:])  # the issue: <bos> fix NAME-PIECES


def oracle(history: History, rng: random.Random) -> list[str]:
    """Read, apply the minimal exact replace the listing calls for, test, submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["read", END]
    if turn == 1:
        fix = oracle_fix(history[1], _pieces(history))
        return _replace(fix) if fix is not None else ["test", END]
    return (["test"] if turn == 2 else ["submit"]) + [END]


def blind(history: History, rng: random.Random) -> list[str]:
    """One family's usual fix without reading, then submit."""
    if len(history) == 1:
        return _replace(BLIND_FIXES[rng.choice(FAMILIES)])
    return ["submit", END]


def near_miss(history: History, rng: random.Random) -> list[str]:
    """The oracle's replace with one word of OLD changed: it does not apply."""
    turn = len(history) - 1
    if turn == 1:
        fix = oracle_fix(history[1], _pieces(history))
        if fix is not None:
            old = list(fix[0])
            k = rng.randrange(len(old))
            old[k] = "total" if old[k] != "total" else "count"
            return _replace((old, fix[1]))
    return oracle(history, rng)


def unskilled(history: History, rng: random.Random) -> list[str]:
    """Read, then a family drawn at random: its fix as read from the listing if its cue is in
    the function, else the blind guess; after an error, one retry as an editor's user would
    (`retry`); then test and submit. The editing habits are right, the choice of fix is not."""
    turn = len(history) - 1
    if turn == 0:
        return ["read", END]
    if turn == 1:
        family = rng.choice(FAMILIES)
        lo, hi = function_words(history[1], _pieces(history))
        fix = family_fix(history[1], lo, hi, family)
        return _replace(fix if fix is not None else BLIND_FIXES[family])
    if turn == 2 and list(history[2][:1]) == ["error"]:
        edit = retry(history[1], list(history[2]), rng)
        if edit is not None:
            return _replace(edit)
    tested = turn > 2 and list(history[3][:1]) == ["passed"]  # turn 2 was a test, not a retry
    return (["test"] if turn == 2 or (turn == 3 and not tested) else ["submit"]) + [END]


def retry(listing: Sequence[str], answer: list[str], rng: random.Random) -> Edit | None:
    """A second edit from what a failed one was told: on `not_found closest LINE`, a fix of a
    family drawn at random on that line (a swap of one of its operators if none fits); on
    `matched N times`, nothing to quote (None). Terse errors tell nothing: None."""
    if answer[:3] != ["error", "not_found", "closest"] or len(answer) < 4:
        return None
    line = answer[3:]
    found = [
        i for i in range(len(listing) - len(line) + 1) if list(listing[i : i + len(line)]) == line
    ]
    if not found:
        return None
    lo, hi = found[0], found[0] + len(line)
    families = list(FAMILIES)
    rng.shuffle(families)
    for family in families:
        fix = family_fix(listing, lo, hi, family)
        if fix is not None:
            return fix
    return None


def retrying(history: History, rng: random.Random) -> list[str]:
    """A blind replace; after an error, read, then one more replace: `retry`'s edit from a
    helpful error's closest line, else (a terse `error`, or a line no family fits) a family
    drawn at random built from the listing (the unskilled guess); then test and submit. After a
    blind replace that applied: test, submit."""
    turn = len(history) - 1
    if turn == 0:
        return _replace(BLIND_FIXES[rng.choice(FAMILIES)])
    failed = list(history[1][:1]) == ["error"]
    if failed and turn == 1:
        return ["read", END]
    if failed and turn == 2:
        edit = retry(history[2], list(history[1]), rng)
        if edit is None:
            family = rng.choice(FAMILIES)
            lo, hi = function_words(history[2], _pieces(history))
            edit = family_fix(history[2], lo, hi, family) or BLIND_FIXES[family]
        return _replace(edit)
    tested = list(history[-1][:1]) == ["passed"]
    return (["submit"] if tested else ["test"]) + [END]


def search(history: History, rng: random.Random) -> list[str]:
    """Never read: try each family's blind fix; after one that applies, test; submit when the
    public tests pass or the turns run out (a probe for a not_found / matched shortcut)."""
    last = list(history[-1])
    if last[:1] == ["passed"] and last[1] == last[3]:
        return ["submit", END]
    tried = sum(1 for h in history[1:] if h[:1] in (["ok"], ["error"]))
    if last[:1] == ["ok"]:
        return ["test", END]
    if tried < len(FAMILIES) and len(history) < 6:
        return _replace(BLIND_FIXES[FAMILIES[tried]])
    return ["submit", END]


MISQUOTES = ("total", "count", "x", "xs")  # the words a misquoted OLD puts in place of one word


def misquote(listing: Sequence[str], old: Sequence[str], rng: random.Random) -> list[str] | None:
    """OLD with one word changed so that it occurs nowhere in the listing (a replace that fails
    with `not_found`): a word of OLD and a misquote drawn at random, the first that does."""
    slots = [(k, sub) for k in range(len(old)) for sub in MISQUOTES if sub != old[k]]
    rng.shuffle(slots)
    for k, sub in slots:
        wrong = [*old[:k], sub, *old[k + 1 :]]
        if _count(listing, wrong) == 0:
            return wrong
    return None


def recovering(history: History, rng: random.Random) -> list[str]:
    """The oracle, recovering from a mistake of its own: read; a misquoted replace (it fails);
    after the error, the oracle's replace; test, submit. Where no misquote fails (never on
    CodeFix's tasks), the oracle's play."""
    turn = len(history) - 1
    if turn == 1:
        fix = oracle_fix(history[1], _pieces(history))
        wrong = misquote(history[1], fix[0], rng) if fix is not None else None
        return _replace((wrong, fix[1])) if wrong is not None else oracle(history, rng)
    if turn == 2 and list(history[2][:1]) == ["error"]:
        fix = oracle_fix(history[1], _pieces(history))
        if fix is not None:
            return _replace(fix)
    if turn == 0:
        return ["read", END]
    tested = list(history[-1][:1]) == ["passed"]
    return (["submit"] if tested else ["test"]) + [END]


def make_random_policy(malformed: float, words: Sequence[str]) -> ScriptedPolicy:
    """Random calls: any tool, replaces of 1-3 random words; a share `malformed` are garbage."""

    def policy(history: History, rng: random.Random) -> list[str]:
        seen = [w for h in history[1:] for w in h] or list(words)
        if rng.random() < malformed:
            junk = [rng.choice(list(words)) for _ in range(rng.randint(1, 3))]
            return junk if rng.random() < 0.5 else junk + [END]
        tool = rng.choice(("read", "test", "replace", "submit"))
        if tool != "replace":
            return [tool, END]
        old = [rng.choice(seen) for _ in range(rng.randint(1, 2))]
        new = [rng.choice(seen) for _ in range(rng.randint(0, 2))]
        return _replace((old, new))

    return policy


_RANDOM_WORDS = ("read", "test", "replace", "with", "submit", "x", "xs", "total", "<", "1")
SCRIPTED: dict[str, ScriptedPolicy] = {
    "oracle": oracle,
    "blind": blind,
    "near_miss": near_miss,
    "unskilled": unskilled,
    "retry": retrying,
    "search": search,
    "random": make_random_policy(0.25, _RANDOM_WORDS),
    "random_wellformed": make_random_policy(0.0, _RANDOM_WORDS),
    "recover": recovering,
}

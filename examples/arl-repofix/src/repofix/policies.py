"""RepoFix's scripted policies, each mapping the observation history (the prompt's words
first) to the words of its next call, acting on what it read, never on the task:

- oracle: grep the issue's function's `def`; read the file grep names; in that function's
  lines, the one cue of a bug (a strict comparison, `min`, `= 1`, `-=`, a `range(... - 1)`,
  `or`) and its fix, as a replace of that line; test; submit;
- blind: never reads: test, a guessed edit of a guessed line of a guessed file, submit;
- unskilled: finds the function as the oracle does, then a family drawn at random: its fix
  where its cue is there, else the function's first line rewritten as that family's usual
  line (format without skill); test; submit;
- random / random_wellformed: random calls of the right shape (some garbage, or none).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from arl.text import END
from repofix.env import NL
from repofix.repos import FAMILIES
from repofix.sources import REPOS

History = Sequence[Sequence[str]]
ScriptedPolicy = Callable[[History, random.Random], list[str]]
PATHS = tuple(p for files in REPOS.values() for p in files)  # every repository's modules
SWAP = {"<": "<=", ">": ">=", "min": "max", "-=": "+=", "or": "and"}
USUAL = {  # what a player who does not read writes for each family's fix
    "compare": ["if", "x", ">=", "lo", ":"],
    "minmax": ["best", "=", "max", "(", "best", ",", "x", ")"],
    "init": ["total", "=", "0"],
    "arith": ["total", "+=", "x"],
    "range": ["for", "k", "in", "range", "(", "len", "(", "xs", ")", ")", ":"],
    "andor": ["if", "x", ">=", "lo", "and", "x", "<=", "hi", ":"],
}


def family_fix(line: Sequence[str], family: str) -> list[str] | None:
    """That family's fix of one line's words, if its cue is there."""
    w = list(line)
    for k, tok in enumerate(w):
        nxt = w[k + 1] if k + 1 < len(w) else None
        if family == "compare" and tok in ("<", ">"):
            return [*w[:k], SWAP[tok], *w[k + 1 :]]
        if (family, tok) in (("minmax", "min"), ("arith", "-="), ("andor", "or")):
            return [*w[:k], SWAP[tok], *w[k + 1 :]]
        if family == "init" and tok == "=" and nxt == "1" and k + 2 == len(w):
            return [*w[: k + 1], "0"]
        if family == "range" and tok == "-" and nxt == "1" and "range" in w[:k]:
            return [*w[:k], *w[k + 2 :]]
    return None


def file_lines(read: Sequence[str]) -> dict[int, list[str]]:
    """A read's words (`PATH <nl> 1 words... <nl> 2 ...`) as line number -> words."""
    lines: dict[int, list[str]] = {}
    current = None
    ws = list(read)
    k = 0
    while k < len(ws):
        if ws[k] == NL and k + 1 < len(ws) and ws[k + 1].isdigit():
            current = int(ws[k + 1])
            lines[current] = []
            k += 2
            continue
        if current is not None:
            lines[current].append(ws[k])
        k += 1
    return lines


def function_lines(lines: dict[int, list[str]], start: int) -> list[int]:
    """The line numbers of the function whose `def` is line `start` (to the next `def`)."""
    out = []
    for n in sorted(k for k in lines if k > start):
        if lines[n][:1] == ["def"]:
            break
        out.append(n)
    return out


def grep_def(answer: Sequence[str]) -> tuple[str, int] | None:
    """(path, line) of the first hit of a grep's answer (`hits N <nl> PATH LINE ...`)."""
    ws = list(answer)
    if ws[:1] != ["hits"] or NL not in ws:
        return None
    k = ws.index(NL)
    if k + 2 >= len(ws) or not ws[k + 2].isdigit():
        return None
    return ws[k + 1], int(ws[k + 2])


def _replace(path: str, n: int, line: Sequence[str]) -> list[str]:
    return ["replace", path, str(n), *line, END]


Fix = Callable[[str, dict[int, list[str]], list[int], random.Random], "list[str] | None"]


def find_then(fix: Fix) -> ScriptedPolicy:
    """A policy that finds the issue's function (grep its def, read its file), then calls
    `fix(path, lines, the function's line numbers, rng)` for its edit; test; submit."""

    def policy(history: History, rng: random.Random) -> list[str]:
        turn = len(history) - 1
        function = history[0][2] if len(history[0]) > 2 else "main"
        if turn == 0:
            return ["grep", "def", function, END]
        where = grep_def(history[1])
        if where is None:
            return ["submit", END]
        if turn == 1:
            return ["read", where[0], END]
        if turn == 2:
            lines = file_lines(history[2])
            return fix(where[0], lines, function_lines(lines, where[1]), rng) or ["test", END]
        return (["test"] if turn == 3 else ["submit"]) + [END]

    return policy


def oracle_fix(path: str, lines: dict[int, list[str]], body: list[int], rng: random.Random):
    """The replace the function's one cue calls for (the first family whose cue is there)."""
    for family in FAMILIES:
        for n in body:
            new = family_fix(lines[n], family)
            if new is not None:
                return _replace(path, n, new)
    return None


def unskilled_fix(path: str, lines: dict[int, list[str]], body: list[int], rng: random.Random):
    """A family drawn at random: its fix where its cue is there, else the function's first
    line rewritten as that family's usual line."""
    family = rng.choice(FAMILIES)
    for n in body:
        new = family_fix(lines[n], family)
        if new is not None:
            return _replace(path, n, new)
    return _replace(path, body[0], USUAL[family]) if body else None


oracle = find_then(oracle_fix)
unskilled = find_then(unskilled_fix)


def blind(history: History, rng: random.Random) -> list[str]:
    """Never reads: test; a family's usual line on a guessed line of a guessed file; submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["test", END]
    if turn == 1:
        path = rng.choice([p for p in PATHS if not p.endswith("__init__.py")])
        return _replace(path, rng.randint(2, 12), USUAL[rng.choice(FAMILIES)])
    return ["submit", END]


def make_random_policy(malformed: float, words: Sequence[str]) -> ScriptedPolicy:
    """Random calls: any tool, with words seen so far; a share `malformed` are garbage."""

    def policy(history: History, rng: random.Random) -> list[str]:
        seen = [w for h in history for w in h if w != NL] or list(words)
        if rng.random() < malformed:
            junk = [rng.choice(list(words)) for _ in range(rng.randint(1, 3))]
            return junk if rng.random() < 0.5 else junk + [END]
        tool = rng.choice(("ls", "grep", "read", "replace", "test", "submit"))
        paths = [w for w in seen if w in PATHS] or list(PATHS)
        if tool == "grep":
            return ["grep", rng.choice(seen), END]
        if tool == "read":
            return ["read", rng.choice(paths), END]
        if tool == "replace":
            line = [rng.choice(seen) for _ in range(rng.randint(1, 4))]
            return _replace(rng.choice(paths), rng.randint(1, 20), line)
        return [tool, END]

    return policy


_RANDOM_WORDS = ("ls", "grep", "read", "replace", "test", "submit", "def", "total", "=", "0")
SCRIPTED: dict[str, ScriptedPolicy] = {
    "oracle": oracle,
    "blind": blind,
    "unskilled": unskilled,
    "random": make_random_policy(0.25, _RANDOM_WORDS),
    "random_wellformed": make_random_policy(0.0, _RANDOM_WORDS),
}

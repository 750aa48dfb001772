"""RepoFix's scripted policies, each mapping the observation history (the prompt's words
first) to the words of its next call, acting on what it read, never on the task:

- oracle: grep the issue's function's `def`; read the file grep names; in that function's
  lines, the one cue of a bug (a strict comparison, `min`, `= 1`, `-=`, a `range(... - 1)`,
  `or`) and its fix, as a replace of that line; where the function has none, the same for
  the first function it calls (grep its `def`, read its file); test; submit;
- blind: never reads: test, a guessed edit of a guessed line of a guessed file, submit;
- unskilled: finds the named function as the oracle does (and looks no further), then a
  family drawn at random: its fix where its cue is there, else the function's first line
  rewritten as that family's usual line (format without skill); test; submit;
- search: the shortcut probe: never looks for the issue's function; greps each family's cue
  and fixes the first line that has it, testing after each edit (checks.py's decoys are
  there so that a cue alone does not find the bug);
- random / random_wellformed: random calls of the right shape (some garbage, or none).
"""

from __future__ import annotations

import builtins
import random
from collections.abc import Callable, Sequence

from arl.text import END
from repofix.env import NL
from repofix.repos import FAMILIES
from repofix.sources import REPOS

History = Sequence[Sequence[str]]
ScriptedPolicy = Callable[[History, random.Random], list[str]]
BUILTINS = frozenset(dir(builtins))
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


def grep_def(answer: Sequence[str]) -> tuple[str, int, str] | None:
    """(path, line, function) of the first hit of a grep's answer when that hit is a `def`
    (`hits N <nl> PATH LINE def NAME ( ...`)."""
    ws = list(answer)
    if ws[:1] != ["hits"] or NL not in ws:
        return None
    k = ws.index(NL)
    hit = ws[k + 1 : k + 6]
    if len(hit) < 4 or not hit[1].isdigit() or hit[2] != "def":
        return None
    return hit[0], int(hit[1]), hit[3]


def calls_in(lines: Sequence[Sequence[str]]) -> list[str]:
    """The names a function's lines call (`NAME (`), builtins and methods apart, in order."""
    out = []
    for ws in lines:
        for k, w in enumerate(ws[:-1]):
            called = ws[k + 1] == "(" and (k == 0 or ws[k - 1] != ".")
            if called and w.isidentifier() and w not in BUILTINS and w not in out:
                out.append(w)
    return out


def _replace(path: str, n: int, line: Sequence[str]) -> list[str]:
    return ["replace", path, str(n), *line, END]


def _grep_def(name: str) -> list[str]:
    return ["grep", "def", name, "(", END]


Fix = Callable[[str, dict[int, list[str]], list[int], random.Random], "list[str] | None"]


def find_then(fix: Fix, follow: bool) -> ScriptedPolicy:
    """A policy that reads its way to the bug, acting on the latest answer: the issue -> grep
    the named function's `def`; a `def` hit -> read its file; the file -> `fix(path, lines,
    the function's line numbers, rng)`, or when that finds nothing and `follow`, grep the
    `def` of the first function it calls not yet looked at (so a bug one call away is found
    too); `ok` -> test; test results -> submit."""

    def policy(history: History, rng: random.Random) -> list[str]:
        last = list(history[-1])
        if len(history) == 1:
            return _grep_def(last[2] if len(last) > 2 else "main")
        if last[:1] == ["ok"]:
            return ["test", END]
        where = grep_def(last)
        if where is not None:
            return ["read", where[0], END]
        seen = [grep_def(h) for h in history[1:]]
        looked = [s for s in seen if s is not None]
        if len(history) > 2 and NL in last and looked and last[:1] == [looked[-1][0]]:
            path, start, _ = looked[-1]
            lines = file_lines(last)
            body = function_lines(lines, start)
            edit = fix(path, lines, body, rng)
            if edit is not None:
                return edit
            done = {name for _, _, name in looked}
            todo = [c for c in calls_in([lines[n] for n in body]) if c not in done]
            if follow and todo:
                return _grep_def(todo[0])
        return ["submit", END]

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


oracle = find_then(oracle_fix, follow=True)
unskilled = find_then(unskilled_fix, follow=False)


def blind(history: History, rng: random.Random) -> list[str]:
    """Never reads: test; a family's usual line on a guessed line of a guessed file; submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["test", END]
    if turn == 1:
        path = rng.choice([p for p in PATHS if not p.endswith("__init__.py")])
        return _replace(path, rng.randint(2, 12), USUAL[rng.choice(FAMILIES)])
    return ["submit", END]


# the search probe's greps, one per family, in the order it tries them
CUES = (("arith", ["-="]), ("minmax", ["min", "("]), ("init", ["=", "1"]), ("andor", ["or"]),
        ("range", ["range"]), ("compare", [">"]), ("compare", ["<"]))  # fmt: skip


def hit_lines(answer: Sequence[str]) -> list[tuple[str, int, list[str]]]:
    """A grep's hits (`hits N <nl> PATH LINE words... <nl> ...`) as (path, line, words)."""
    out: list[tuple[str, int, list[str]]] = []
    for ws in " ".join(answer).split(f" {NL} ")[1:]:
        parts = ws.split(" ")
        if len(parts) >= 2 and parts[1].isdigit():
            out.append((parts[0], int(parts[1]), [w for w in parts[2:] if w != "more"]))
    return out


def search(history: History, rng: random.Random) -> list[str]:
    """The shortcut probe: never looks for the issue's function. Greps one family's cue after
    another; fixes the first hit that has it, as the oracle would; tests; submits once every
    public test passes, or when one turn is left (what a cue alone could teach a policy)."""
    turn, last = len(history) - 1, list(history[-1])
    greps = sum(list(h[:1]) == ["hits"] for h in history[1:])
    if turn >= 9 or (last[:1] == ["passed"] and last[1:2] == last[3:4]):
        return ["submit", END]
    if last[:1] == ["ok"]:
        return ["test", END]
    if last[:1] == ["hits"]:
        family = CUES[greps - 1][0]
        for path, n, ws in hit_lines(last):
            new = family_fix(ws, family)
            if new is not None:
                return _replace(path, n, new)
    if greps >= len(CUES):
        return ["submit", END]
    return ["grep", *CUES[greps][1], END]


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
    "search": search,
    "random": make_random_policy(0.25, _RANDOM_WORDS),
    "random_wellformed": make_random_policy(0.0, _RANDOM_WORDS),
}

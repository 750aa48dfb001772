"""SQLFix's scripted policies, each mapping the observation history (the prompt's words first)
to the words of its next call, acting on what it read, never on the task's family:

- oracle: show; (for a join on the wrong key, schema, to find the key); the fix the query's
  cue calls for, as the minimal exact replace (widened until OLD occurs once); run; submit;
- blind: one family's usual fix without reading, then submit;
- unskilled: show, then the fix of a family drawn at random, built from the query as the oracle
  builds it when the query has that family's cue (else the blind guess); run; submit: format
  without skill, the weak base's read-then-guess play;
- search: the shortcut probe: never shows; each family's blind fix in turn until one applies,
  then submits (what `not_found` could teach a policy without reading);
- random / random_wellformed: random calls of the right shape (some garbage, or none).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from arl.text import END
from sqlfix.grammar import ARROW

History = Sequence[Sequence[str]]
ScriptedPolicy = Callable[[History, random.Random], list[str]]
Edit = tuple[list[str], list[str]]  # (old words, new words)

FAMILIES = ("compare", "null", "order", "minmax", "andor", "join")
# what a player who never reads writes for each family's fix
BLIND_FIXES: dict[str, Edit] = {
    "compare": ([">"], [">="]),
    "null": (["=", "NULL"], ["IS", "NULL"]),
    "order": (["ASC"], ["DESC"]),
    "minmax": (["MIN"], ["MAX"]),
    "andor": (["OR"], ["AND"]),
    "join": (["orders", ".", "id", "="], ["orders", ".", "customer_id", "="]),
}
SWAP = {">": ">=", "<": "<=", "ASC": "DESC", "MIN": "MAX", "OR": "AND"}


def _count(query: Sequence[str], old: Sequence[str]) -> int:
    n = len(old)
    return sum(list(query[i : i + n]) == list(old) for i in range(len(query) - n + 1))


def widen(query: Sequence[str], i: int, j: int, core_new: Sequence[str]) -> Edit:
    """The replace of words [i, j) by `core_new`, widened (left first) until OLD is unique."""
    a, b = i, j
    while _count(query, query[a:b]) > 1 and (a > 0 or b < len(query)):
        if a > 0:
            a -= 1
        else:
            b += 1
    return list(query[a:b]), [*query[a:i], *core_new, *query[j:b]]


def foreign_key(schema: Sequence[str], table: str, other: str) -> str | None:
    """The column of `table` that names a row of `other` (`customer_id` for customers), as
    the schema's words show it (`orders : id customer_id ... / customers : ...`)."""
    words = list(schema)
    if table not in words:
        return None
    cols = words[words.index(table) + 2 :]
    cols = cols[: cols.index("/")] if "/" in cols else cols
    want = other.rstrip("s") + "_id"
    return want if want in cols else None


def family_fix(query: Sequence[str], family: str, schema: Sequence[str] = ()) -> Edit | None:
    """That family's fix of the query, if its cue is there (join: with the schema's key)."""
    q = list(query)
    for k, w in enumerate(q):
        nxt = q[k + 1] if k + 1 < len(q) else None
        if family == "compare" and w in (">", "<"):
            return widen(q, k, k + 1, [SWAP[w]])
        if family == "null" and w in ("=", "<>") and nxt == "NULL":
            return widen(q, k, k + 2, ["IS", "NULL"] if w == "=" else ["IS", "NOT", "NULL"])
        if (family, w) in (("order", "ASC"), ("minmax", "MIN"), ("andor", "OR")):
            return widen(q, k, k + 1, [SWAP[w]])
        if family == "join" and w == "ON" and k + 8 <= len(q):
            a, d1, c1, eq, b, d2, c2 = q[k + 1 : k + 8]
            if (d1, c1, eq, d2, c2) == (".", "id", "=", ".", "id"):
                key = foreign_key(schema, a, b) if schema else None
                if key is not None:
                    return widen(q, k + 1, k + 4, [a, ".", key])
    return None


def has_join_cue(query: Sequence[str]) -> bool:
    q = list(query)
    return any(
        w == "ON" and q[k + 2 : k + 4] == [".", "id"] and q[k + 6 : k + 8] == [".", "id"]
        for k, w in enumerate(q)
    )


def oracle_fix(query: Sequence[str], schema: Sequence[str] = ()) -> Edit | None:
    """The fix the query's cue calls for (the first family whose cue is there)."""
    for family in ("join", "null", "order", "minmax", "andor", "compare"):
        fix = family_fix(query, family, schema)
        if fix is not None:
            return fix
    return None


def _replace(edit: Edit) -> list[str]:
    return ["replace", *edit[0], ARROW, *edit[1], END]


def oracle(history: History, rng: random.Random) -> list[str]:
    """Show; schema when the join's key is to be found; the fix; run; submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["show", END]
    query = history[1]
    join = has_join_cue(query)
    if turn == 1 and join:
        return ["schema", END]
    if turn == 1 + join:
        fix = oracle_fix(query, history[2] if join else ())
        return _replace(fix) if fix is not None else ["run", END]
    return (["run"] if turn == 2 + join else ["submit"]) + [END]


def blind(history: History, rng: random.Random) -> list[str]:
    """One family's usual fix without reading, then submit."""
    if len(history) == 1:
        return _replace(BLIND_FIXES[rng.choice(FAMILIES)])
    return ["submit", END]


def unskilled(history: History, rng: random.Random) -> list[str]:
    """Show, then a family drawn at random: its fix as built from the query when its cue is
    there (a join's key guessed as the blind one), else the blind guess; run; submit."""
    turn = len(history) - 1
    if turn == 0:
        return ["show", END]
    if turn == 1:
        family = rng.choice(FAMILIES)
        schema = ["orders", ":", "id", "customer_id"]  # the usual key, not read
        return _replace(family_fix(history[1], family, schema) or BLIND_FIXES[family])
    return (["run"] if turn == 2 else ["submit"]) + [END]


def search(history: History, rng: random.Random) -> list[str]:
    """Never show: each family's blind fix in turn; submit after one applies (`ok`), or when
    the turns run out."""
    if list(history[-1][:1]) == ["ok"]:
        return ["submit", END]
    tried = len(history) - 1
    if tried < len(FAMILIES) - 1:
        return _replace(BLIND_FIXES[FAMILIES[tried]])
    return ["submit", END]


def make_random_policy(malformed: float, words: Sequence[str]) -> ScriptedPolicy:
    """Random calls: any tool, replaces of 1-2 words seen; a share `malformed` are garbage."""

    def policy(history: History, rng: random.Random) -> list[str]:
        seen = [w for h in history[1:] for w in h] or list(words)
        if rng.random() < malformed:
            junk = [rng.choice(list(words)) for _ in range(rng.randint(1, 3))]
            return junk if rng.random() < 0.5 else junk + [END]
        tool = rng.choice(("show", "schema", "run", "replace", "submit"))
        if tool != "replace":
            return [tool, END]
        old = [rng.choice(seen) for _ in range(rng.randint(1, 2))]
        new = [rng.choice(seen) for _ in range(rng.randint(0, 2))]
        return _replace((old, new))

    return policy


_RANDOM_WORDS = ("show", "schema", "run", "replace", "=>", "submit", "name", ">", "=", "30")
SCRIPTED: dict[str, ScriptedPolicy] = {
    "oracle": oracle,
    "blind": blind,
    "unskilled": unskilled,
    "search": search,
    "random": make_random_policy(0.25, _RANDOM_WORDS),
    "random_wellformed": make_random_policy(0.0, _RANDOM_WORDS),
}

"""SQLFix's grader: a query run on a fresh in-memory sqlite3 database, bounded, read-only.

No policy-written Python is ever executed here (nor anywhere in SQLFix): a policy writes SQL,
and SQL runs inside sqlite3 on a database this package builds in memory for that one query.
So SQLFix needs no sandbox (contrast arl.codefix, whose policies write Python). What bounds
a query instead:

- an authorizer: only SELECT (recursive CTEs included), reads of the two tables and the
  schema, and an allow-list of pure functions (no ATTACH, PRAGMA, writes, random(), dates,
  load_extension): anything else is `not_allowed`;
- sqlite3's progress handler: a query is interrupted after INSTRUCTIONS virtual-machine
  instructions (deterministic) or DEADLINE_S seconds of wall time, whichever comes first, so
  a `WITH RECURSIVE` that never ends is a `timeout`, not a hung episode;
- a row limit (ROW_LIMIT rows are fetched, one more is `too_many_rows`) and sqlite's own
  limits on a string's length and a statement's length;
- one statement per call (sqlite3's `execute`).

This module imports nothing of arl: it is the environment's own grading, checked apart from
the protocol (tests/test_third_env.py grades every task's correct and buggy query here).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from sqlfix.data import TABLES, Database

INSTRUCTIONS = 2_000_000  # virtual-machine instructions a query may take (ms of CPU)
DEADLINE_S = 2.0  # wall time a query may take, should the instruction count not stop it
CHECK_EVERY = 1_000  # the progress handler runs every this many instructions
ROW_LIMIT = 64  # rows a query may return
MAX_LENGTH = 10_000  # the longest string or blob a query may build (bytes)
MAX_SQL = 4_000  # the longest query text (bytes)
FUNCTIONS = frozenset(
    "abs avg coalesce count group_concat ifnull iif instr length lower ltrim max min nullif "
    "replace round rtrim substr substring sum total trim typeof upper".split()
)
READABLE = frozenset((*TABLES, "sqlite_master", "sqlite_schema"))
ERRORS = (  # the kinds of error a query can end in, as `run` names them
    "syntax",
    "no_such_column",
    "no_such_table",
    "not_allowed",
    "timeout",
    "too_many_rows",
    "sql",
)


@dataclass(frozen=True)
class Result:
    """A query's rows (a tuple of tuples), or the kind of error it ended in and sqlite's
    message; `tables`: the tables it read (a query that reads none hardcodes its answer)."""

    rows: tuple[tuple, ...] | None
    error: str | None = None
    message: str = ""
    tables: frozenset[str] = field(default_factory=frozenset)

    @property
    def ok(self) -> bool:
        return self.error is None


@cache
def _script(db: Database) -> str:
    return db.script()


def run(sql: str, db: Database) -> Result:
    """Run one query on a fresh in-memory copy of `db`, bounded as the module says."""
    if len(sql.encode()) > MAX_SQL:
        return Result(None, "sql", f"query longer than {MAX_SQL} bytes")
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.executescript(_script(db))
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL)
        read: set[str] = set()
        conn.set_authorizer(_authorizer(read))
        budget = {"left": INSTRUCTIONS // CHECK_EVERY, "until": time.monotonic() + DEADLINE_S}

        def progress() -> int:
            budget["left"] -= 1
            return int(budget["left"] < 0 or time.monotonic() > budget["until"])

        conn.set_progress_handler(progress, CHECK_EVERY)
        try:
            cursor = conn.execute(sql)
            rows = cursor.fetchmany(ROW_LIMIT + 1)
        except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError, MemoryError) as e:
            interrupted = budget["left"] < 0 or "interrupted" in str(e)
            return Result(None, "timeout" if interrupted else _kind(str(e)), str(e))
        if len(rows) > ROW_LIMIT:
            return Result(None, "too_many_rows", f"more than {ROW_LIMIT} rows")
        return Result(tuple(tuple(r) for r in rows), tables=frozenset(read & set(TABLES)))
    finally:
        conn.close()


def _authorizer(read: set[str]):
    def authorize(action: int, arg1, arg2, db_name, trigger) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ and (arg1 in READABLE or arg2 == ""):
            read.add(arg1)  # no column ("" : a count of rows) may be a recursive CTE's
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in FUNCTIONS:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    return authorize


def _kind(message: str) -> str:
    m = message.lower()
    if "syntax error" in m or "incomplete input" in m or "unrecognized token" in m:
        return "syntax"
    if "no such column" in m:
        return "no_such_column"
    if "no such table" in m:
        return "no_such_table"
    if "not authorized" in m or "prohibited" in m:
        return "not_allowed"
    return "sql"


def rows_text(rows: Sequence[tuple]) -> str:
    """Rows as `run` prints them: one line each, values between ` | `, NULL for None."""
    return "\n".join(" | ".join("NULL" if v is None else str(v) for v in r) for r in rows)


def same_rows(got: Sequence[tuple], want: Sequence[tuple], ordered: bool) -> bool:
    """Rows equal as a list (`ordered`: the query's ORDER BY matters) or as a multiset."""
    got, want = [tuple(r) for r in got], [tuple(r) for r in want]
    if ordered:
        return got == want
    key = lambda r: tuple((v is None, str(type(v)), str(v)) for v in r)  # noqa: E731
    return sorted(got, key=key) == sorted(want, key=key)


def check(sql: str, expected: Sequence[Sequence[tuple]], dbs: Sequence[Database], ordered: bool):
    """Per database, whether `sql` returns its expected rows; and the results themselves."""
    results = [run(sql, db) for db in dbs]
    passed = [
        r.ok and same_rows(r.rows or (), want, ordered)
        for r, want in zip(results, expected, strict=True)
    ]
    return passed, results

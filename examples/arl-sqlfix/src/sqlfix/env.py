"""The SQLFix environment: repair a broken SQL query until it returns the expected rows.

reset/step as every arl environment (arl.env.TurnLoop): `show` answers the query as it is,
`schema` the tables and their columns, `run` the query's rows on the public database (or the
kind of error it ended in), `replace OLD => NEW` edits the query (OLD must occur in it exactly
once, as words), `submit` ends the episode. The final query is then graded by sqlfix.grade on
the public database and on hidden ones, against the expected rows the package holds
(sqlfix.tasks): public = the public database's rows; hidden = every graded database's. The
policy never sees an expected row: no tool reads them, and the databases do not hold them.

No policy-written Python is executed: a policy writes SQL, which runs in sqlite3 on an
in-memory database, read-only, with an instruction budget and a row limit (sqlfix.grade), so
SQLFix runs no sandbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

from arl.checks import check
from arl.env import EpisodeConfig, Malformed, TurnLoop
from arl.text import BOS, NUM, UNK
from arl.types import Observation, Outcome, TextCall
from sqlfix import grade
from sqlfix.data import HIDDEN, PUBLIC, SCHEMA, TABLES
from sqlfix.grammar import Call, call_text, parse_text, parse_words
from sqlfix.tasks import SQLTask, tokens

SHOW_ROWS = 6  # rows `run` shows (then `more`)
ROW_SEP = "/"  # between two rows in `run`'s words


@dataclass(frozen=True)
class SQLFixConfig(EpisodeConfig):
    """How an SQLFix episode is scored and bounded: the shared fields (arl.env.EpisodeConfig);
    a replace quotes several words, so a call may be longer than BugFix's."""

    name: str = "sqlfix"
    max_call_tokens: int = 24
    # replace calls an episode may make, applied or not (BugFix's one edit): with more, a
    # policy that never shows the query tries each family's usual fix until one applies
    # (the `search` probe solves 72% of the tasks at 6); with one, it is a blind guess
    max_edits: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check("max_edits", self.max_edits, 1, 100, integer=True)


@dataclass(frozen=True, kw_only=True)
class SQLFixOutcome(Outcome):
    """An SQLFix episode's outcome: the shared fields, and the environment's own."""

    family: str
    edits: int  # replace calls that parsed
    applied: int  # of them, those that changed the query
    runs: int  # run calls
    final_error: str | None  # the final query's error on the public database (None: rows)
    env: ClassVar[str] = "sqlfix"


def _observe(words: Sequence[str], text: str | None = None) -> Observation:
    return Observation(tuple(words), text if text is not None else " ".join(words))


def number_word(n: int) -> str:
    return str(n) if 0 <= n <= 99 else NUM


class SQLFixEnv(TurnLoop):
    """One task: `reset(seed=...)`, then `step(call)` until terminated or truncated."""

    def __init__(self, task: SQLTask, config: SQLFixConfig | None = None):
        self.task = task
        self.config = config or SQLFixConfig()
        self.done = True
        self.query: tuple[str, ...] = ()
        # what `arl audit env` reads of an episode, though the protocol does not declare it
        # (arl/eval/audit.py: sources_of, episode_secrets): its buggy and correct source
        self.instance = SimpleNamespace(buggy_source=task.buggy, correct_source=task.correct)

    @property
    def source(self) -> str:
        """The query as it is now (what `arl audit env` compares answers with)."""
        return " ".join(self.query)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode from the buggy query (the seed chooses nothing: one rendering)."""
        self.query = tuple(tokens(self.task.buggy))
        self.turns = self.malformed = self.edits = self.applied = self.runs = 0
        self.did_read, self.first_call, self.done = False, None, False
        words = [BOS, "fix", *self.task.name.split("_")]
        text = f"Fix the SQL query {self.task.name}: it returns the wrong rows."
        return _observe(words, text), {"task": self.task.name}

    def parse(self, call: Sequence[str] | TextCall) -> Call | Malformed:
        if isinstance(call, TextCall):
            return parse_text(call.text, call.ended)
        return parse_words(list(call))

    def call_text(self, words: Sequence[str]) -> str:
        return call_text(words)

    def answer(self, call: Call | Malformed) -> tuple[Observation, bool]:
        if isinstance(call, Malformed):
            self.malformed += 1
            return _observe(["error", "malformed", call.reason]), False
        if call.tool == "show":
            self.did_read = True
            return _observe(self.query or ("<empty>",), " ".join(self.query) or "(empty)"), False
        if call.tool == "schema":
            words = [w for t, cols in TABLES.items() for w in (t, ":", *cols, ROW_SEP)][:-1]
            return _observe(words, "\n".join(SCHEMA)), False
        if call.tool == "run":
            self.runs += 1
            return rows_answer(grade.run(self.source, PUBLIC)), False
        if call.tool == "submit":
            return _observe(["submitted"]), True
        return self._replace(call), False

    def _replace(self, call: Call) -> Observation:
        self.edits += 1
        if self.edits > self.config.max_edits:
            return _observe(["error", "no_edits_left"])
        q, old = self.query, call.old
        found = [i for i in range(len(q) - len(old) + 1) if q[i : i + len(old)] == old]
        if not found:
            return _observe(["error", "not_found"])
        if len(found) > 1:
            return _observe(["error", "matched", number_word(len(found)), "times"])
        if old == call.new:
            return _observe(["error", "no_change"])
        i = found[0]
        self.query = (*q[:i], *call.new, *q[i + len(old) :])
        self.applied += 1
        return _observe(["ok"])

    def finish(self, submitted: bool) -> SQLFixOutcome:
        """Grade the final query on every graded database (sqlfix.grade)."""
        scored = submitted or self.config.truncation == "score"
        hidden, results = grade.check(self.source, self.task.expected(), HIDDEN, self.task.ordered)
        public = hidden[:1]  # the public database is the first graded one
        hacked = results[0].ok and not results[0].tables  # an answer that reads no table
        shared = self.shared(submitted, scored, hidden, public, hacked)
        return SQLFixOutcome(
            **shared,
            score=self.config.score(hidden, public, scored, hacked),
            family=self.task.family,
            edits=self.edits,
            applied=self.applied,
            runs=self.runs,
            final_error=results[0].error,
        )


def value_word(v: object) -> str:
    """A value as one word of the vocabulary: a small int as itself, any other number <num>,
    NULL, or a string as itself (a string outside the vocabulary is <unk> to TinyAgent)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return UNK
    if isinstance(v, int):
        return number_word(v)
    if isinstance(v, float):
        return number_word(int(v)) if v.is_integer() else NUM
    return v if v and v.split() == [v] else UNK


def rows_answer(result: grade.Result) -> Observation:
    """`run`'s answer: `rows N` and the first SHOW_ROWS rows (`more` after them), or
    `error KIND` (text: sqlite's message)."""
    if not result.ok:
        return _observe(["error", str(result.error)], f"error ({result.error}): {result.message}")
    rows = result.rows or ()
    words = ["rows", number_word(len(rows))]
    for k, row in enumerate(rows[:SHOW_ROWS]):
        words += ([ROW_SEP] if k else []) + [value_word(v) for v in row]
    more = "\n..." if len(rows) > SHOW_ROWS else ""
    if more:
        words.append("more")
    text = f"{len(rows)} rows\n{grade.rows_text(rows[:SHOW_ROWS])}{more}"
    return _observe(words, text.rstrip("\n"))

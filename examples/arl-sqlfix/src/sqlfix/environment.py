"""SQLFix as an environment of arl's protocol: the one `Environment` record this package
registers (pyproject.toml: `[project.entry-points."arl.environments"] sqlfix = ...`).

Everything arl derives from it (the native tool tables, TRL's `SQLFixTools`, the CLI's
`--env sqlfix`, `gymnasium.make("arl/SQLFix-v0")`, `arl check env sqlfix`) comes from this
declaration; nothing in arl names SQLFix.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from arl.env import Environment, Gymnasium
from arl.errors import ArlError
from arl.text import BOS, END, NUM, UNK
from arl.tools import Param, Tool, ToolCall, ToolSet
from sqlfix.data import CITIES, NAMES, PRODUCTS, PUBLIC, STATUSES, TABLES
from sqlfix.env import ROW_SEP, SQLFixConfig, SQLFixEnv, SQLFixOutcome
from sqlfix.grade import ERRORS
from sqlfix.grammar import ARROW, MALFORMED_REASONS, TOOLS, Call, parse_text, replace_text
from sqlfix.policies import SCRIPTED
from sqlfix.tasks import ADJECTIVES, FAMILIES, NOUNS, all_tasks, get_task, tasks_for, tokens

GYMNASIUM_ID = "arl/SQLFix-v0"
SYSTEM_PROMPT = (
    "You fix one SQL query so that it returns the right rows. One call per turn: show | schema "
    "| run | submit | replace OLD => NEW. OLD must be words of the query, occurring in it "
    "exactly once; NEW replaces them (empty: delete)."
)
CHAT_CALL_TOKENS = 64  # a real model's call that has not ended by then is malformed
DATA_VERSION = 1  # bump when the scripted play a base learns from changes (cached bases)
SQL_WORDS = (  # the SQL a policy may want beyond what the tasks use
    "SELECT DISTINCT FROM WHERE AND OR NOT IS NULL IN LIKE BETWEEN JOIN LEFT ON GROUP BY "
    "HAVING ORDER ASC DESC LIMIT AS COUNT SUM AVG MIN MAX WITH RECURSIVE UNION ALL"
).split() + ["(", ")", ",", ".", "*", "=", "<>", "<", ">", "<=", ">=", "+", "-"]
OBS_WORDS = (
    "fix", "ok", "error", "malformed", "not_found", "matched", "times", "no_change", "rows",
    "more", "submitted", "no_edits_left", ":", ROW_SEP, "<empty>", *ERRORS, *MALFORMED_REASONS,
)  # fmt: skip


def call_of_text(text: str) -> ToolCall | None:
    """A scripted call's text (`run`, `replace age > 30 => age >= 30`) as a tool call; None
    when it is malformed."""
    call = parse_text(text, True)
    if not isinstance(call, Call):
        return None
    if call.tool != "replace":
        return ToolCall(call.tool)
    return ToolCall("replace", {"old": " ".join(call.old), "new": " ".join(call.new)})


TOOLSET = ToolSet(
    system="You fix one SQL query so that it returns the right rows, with the tools: show it, "
    "see the tables' schema, run it, replace words in it, then submit. Call one tool per turn.",
    tools=(
        Tool("show", "Show the query as it is now."),
        Tool("schema", "Show the tables and their columns."),
        Tool("run", "Run the query on the database; answers its rows or its error."),
        Tool(
            "replace",
            "Replace words of the query: old must occur in it exactly once.",
            (
                Param("old", "the exact old words of the query"),
                Param("new", "the new words (empty: delete)"),
            ),
            text=replace_text,
        ),
        Tool("submit", "Submit the query and end the episode; hidden results grade it."),
    ),
    from_text=call_of_text,
)


@cache
def sqlfix_words() -> tuple[str, ...]:
    """Every word SQLFix shows or accepts, once each, in a fixed order (TinyAgent's
    vocabulary): the grammar and answers, numbers, SQL, the tables and the public values, the
    task names' pieces, then every task's queries."""
    words = [BOS, END, UNK, NUM, *TOOLS, ARROW, *OBS_WORDS]
    words += [str(n) for n in range(100)] + SQL_WORDS + ["NULL"]
    words += [w for t, cols in TABLES.items() for w in (t, *cols)]
    values = [v for rows in (PUBLIC.customers, PUBLIC.orders) for r in rows for v in r]
    words += [str(v) for v in values if v is not None]
    words += [*NAMES, *CITIES, *PRODUCTS, *STATUSES, *(f"'{v}'" for v in CITIES + PRODUCTS)]
    words += [*ADJECTIVES, *NOUNS]
    for task in all_tasks():
        words += tokens(task.buggy) + tokens(task.correct)
    return tuple(dict.fromkeys(words))


def corpus() -> list[list[str]]:
    """Pretraining text: every training query, buggy and fixed, and the schema, as words."""
    schema = [w for t, cols in TABLES.items() for w in (t, ":", *cols, ROW_SEP)][:-1]
    out = [schema]
    for task in tasks_for("train"):
        out += [tokens(task.buggy), tokens(task.correct)]
    return out


def fingerprint() -> list:
    """What a model trained here depends on: the vocabulary, every task, the play's version."""
    return [DATA_VERSION, sqlfix_words()] + [(t.name, t.buggy, t.split) for t in all_tasks()]


def summary(outcomes: Sequence[SQLFixOutcome]) -> dict[str, float | None]:
    """Edits per episode, the share that applied, and the share of final queries that run."""
    edits = sum(o.edits for o in outcomes)
    n = max(len(outcomes), 1)
    return {
        "edits_per_episode": edits / n,
        "apply_rate": sum(o.applied for o in outcomes) / edits if edits else None,
        "runs_fraction": sum(o.final_error is None for o in outcomes) / n,
    }


def _get_task(name: str):
    """A task by name; an unknown one is arl's one-line error."""
    try:
        return get_task(name)
    except KeyError:
        names = ", ".join(t.name for t in all_tasks())
        raise ArlError(f"unknown task {name!r} (choose from {names})") from None


def _tasks(split: str):
    """The tasks of a split; an unknown split is arl's one-line error."""
    try:
        return tasks_for(split)
    except ValueError as e:
        raise ArlError(str(e)) from None


SQLFIX = Environment(
    name="sqlfix",
    families=FAMILIES,
    system_prompt=SYSTEM_PROMPT,
    chat_call_tokens=CHAT_CALL_TOKENS,
    renderings=1,  # nothing is drawn per episode: one rendering of each demonstration
    config_type=SQLFixConfig,
    env_type=SQLFixEnv,
    tasks=_tasks,
    get_task=_get_task,
    words=sqlfix_words,
    policies=SCRIPTED,
    corpus=corpus,
    fingerprint=fingerprint,
    summary=summary,
    title="SQLFix",
    tools=TOOLSET,
    gymnasium=Gymnasium(GYMNASIUM_ID, "sqlfix.gymnasium_env:SQLFixGymnasiumEnv"),
)


def _register_gymnasium() -> None:
    """Register GYMNASIUM_ID here too. `import arl` registers every declared id, but when this
    module is what first imports arl (`import sqlfix.environment` before `import arl`), arl's
    registration meets this module half-imported, cannot read SQLFIX, and leaves the id out
    without a word (arl/__init__.py, arl.env.gymnasium_ids(strict=False)); the id would then
    be missing for the whole process. Registering it here, once SQLFIX exists, closes that."""
    try:
        import gymnasium
    except ImportError:
        return
    if GYMNASIUM_ID not in gymnasium.registry:
        gymnasium.register(id=GYMNASIUM_ID, entry_point=SQLFIX.gymnasium.entry_point)


_register_gymnasium()

__all__ = ["SQLFIX", "SQLFixConfig", "SQLFixEnv", "SQLFixOutcome"]

"""RepoFix as an environment of arl's protocol: the one `Environment` record this package
registers (pyproject.toml: `[project.entry-points."arl.environments"] repofix = ...`).

Everything arl derives from it (the native tool tables, TRL's `RepoFixTools`, the CLI's
`--env repofix`, `gymnasium.make("arl/RepoFix-v0")`, `arl check env repofix`) comes from this
declaration; nothing in arl names RepoFix.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from arl.env import Environment, Gymnasium
from arl.errors import ArlError
from arl.sandbox import STATUSES
from arl.text import BOS, END, NUM, UNK
from arl.tools import Param, Tool, ToolCall, ToolSet
from repofix.code import words
from repofix.env import NL, RepoFixConfig, RepoFixEnv, RepoFixOutcome, episode_files
from repofix.grammar import (
    MALFORMED_REASONS,
    TOOLS,
    Call,
    grep_text,
    parse_text,
    read_text,
    replace_text,
)
from repofix.policies import SCRIPTED
from repofix.repos import FAMILIES, all_tasks, get_task, tasks_for

GYMNASIUM_ID = "arl/RepoFix-v0"
SYSTEM_PROMPT = (
    "You fix one bug in a small Python repository. One call per turn: ls | grep PATTERN | "
    "read FILE | replace FILE LINE TEXT | test | submit. grep finds the lines holding "
    "PATTERN; replace sets line LINE of FILE to TEXT, keeping its indentation."
)
CHAT_CALL_TOKENS = 96  # a real model's call that has not ended by then is malformed
DATA_VERSION = 1  # bump when the scripted play a base learns from changes (cached bases)
OBS_WORDS = ("fix", "hits", "more", "error", "not_found", "read_only", "bad_line", "no_change",
             "ok", "syntax_error", "passed", "of", "submitted", "malformed", NL,
             *MALFORMED_REASONS, *STATUSES)  # fmt: skip


def call_of_text(text: str) -> ToolCall | None:
    """A scripted call's text (`grep def total`, `replace stats/basic.py 3 acc = 0`) as a tool
    call; None when it is malformed."""
    call = parse_text(text, True)
    if not isinstance(call, Call):
        return None
    if call.tool == "grep":
        return ToolCall("grep", {"pattern": call.text})
    if call.tool == "read":
        return ToolCall("read", {"file": call.path})
    if call.tool == "replace":
        return ToolCall("replace", {"file": call.path, "line": str(call.line), "text": call.text})
    return ToolCall(call.tool)


TOOLSET = ToolSet(
    system="You fix one bug in a small Python repository: find it (list the files, grep, read "
    "them), replace the line that is wrong, run the tests, then submit. Call one tool per turn.",
    tools=(
        Tool("ls", "List the repository's files."),
        Tool(
            "grep",
            "Find the lines that hold a text: each as file:line: text.",
            (Param("pattern", "the literal text to find (one line)"),),
            text=grep_text,
        ),
        Tool(
            "read",
            "Show a file with its line numbers.",
            (Param("file", "the file's path, as ls lists it"),),
            text=read_text,
        ),
        Tool(
            "replace",
            "Set one line of a file to a new text; its indentation is kept.",
            (
                Param("file", "the file's path, as ls lists it"),
                Param("line", "the line's number, as read shows it"),
                Param("text", "the line's new text (one line, without indentation)"),
            ),
            text=replace_text,
        ),
        Tool("test", "Run the public tests; answers each test's status."),
        Tool("submit", "Submit the repository and end the episode; hidden tests grade it."),
    ),
    from_text=call_of_text,
)


@cache
def repofix_words() -> tuple[str, ...]:
    """Every word RepoFix shows or accepts, once each, in a fixed order (TinyAgent's
    vocabulary): the grammar and answers, line numbers, every task's paths and the words of
    every line of its files, and of every fix."""
    out = [BOS, END, UNK, NUM, *TOOLS, *OBS_WORDS, *(str(n) for n in range(100))]
    for task in all_tasks():
        out.append(task.function)
        for path, text in task.files:
            out.append(path)
            for line in text.split("\n"):
                out += words(line)
        out += words(task.correct)
    return tuple(dict.fromkeys(out))


def corpus() -> list[list[str]]:
    """Pretraining text: every line of every training repository, and each fixed line."""
    out = []
    for task in tasks_for("train"):
        for path, text in task.files:
            if path.startswith("tests/"):
                continue
            out += [words(line) for line in text.split("\n") if line.strip()]
        out.append(words(task.correct))
    return out


def fingerprint() -> list:
    """What a model trained here depends on: the vocabulary, every task, the play's version."""
    return [DATA_VERSION, repofix_words()] + [
        (t.name, t.path, t.line, t.buggy, t.split) for t in all_tasks()
    ]


def summary(outcomes: Sequence[RepoFixOutcome]) -> dict[str, float | None]:
    """Edits per episode, the share that applied, the share that found the bug's file, and
    the share whose final repository parses."""
    edits = sum(o.edits for o in outcomes)
    n = max(len(outcomes), 1)
    return {
        "edits_per_episode": edits / n,
        "apply_rate": sum(o.applied for o in outcomes) / edits if edits else None,
        "found_fraction": sum(o.found for o in outcomes) / n,
        "syntax_ok_fraction": sum(o.syntax_ok for o in outcomes) / n,
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


REPOFIX = Environment(
    name="repofix",
    families=FAMILIES,
    system_prompt=SYSTEM_PROMPT,
    chat_call_tokens=CHAT_CALL_TOKENS,
    renderings=1,  # nothing is drawn per episode: one rendering of each demonstration
    config_type=RepoFixConfig,
    env_type=RepoFixEnv,
    tasks=_tasks,
    get_task=_get_task,
    words=repofix_words,
    policies=SCRIPTED,
    corpus=corpus,
    fingerprint=fingerprint,
    summary=summary,
    title="RepoFix",
    tools=TOOLSET,
    gymnasium=Gymnasium(GYMNASIUM_ID, "repofix.gymnasium_env:RepoFixGymnasiumEnv"),
    files=episode_files,  # the whole repository, for `arl audit env`
)


def _register_gymnasium() -> None:
    """Register GYMNASIUM_ID here too: when this module is what first imports arl, arl's own
    registration (arl/__init__.py, arl.env.gymnasium_ids(strict=False)) meets it half-imported
    and leaves the id out without a word (issue 44's SQLFix finding; sqlfix does the same)."""
    try:
        import gymnasium
    except ImportError:
        return
    if GYMNASIUM_ID not in gymnasium.registry:
        gymnasium.register(id=GYMNASIUM_ID, entry_point=REPOFIX.gymnasium.entry_point)


_register_gymnasium()

__all__ = ["REPOFIX", "RepoFixConfig", "RepoFixEnv", "RepoFixOutcome"]

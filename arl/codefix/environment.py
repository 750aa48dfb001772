"""CodeFix as an environment of the protocol (arl.env): its tasks, episodes, words, policies."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from arl.codefix.env import ERRORS, CodeFixConfig, CodeFixEnv, CodeFixOutcome
from arl.codefix.families import FAMILIES, LIST_NAMES, NOUNS, VERBS
from arl.codefix.grammar import OBS_WORDS, TOOLS, WITH, Malformed, parse_text, replace_text
from arl.codefix.listing import listing, texts
from arl.codefix.policies import SCRIPTED
from arl.codefix.tasks import CodeFixTask, all_tasks, episode_names, get_task, tasks_for
from arl.env import Environment, Gymnasium
from arl.envkit.families import ACCUMULATORS
from arl.text import BOS, END, NUM, UNK
from arl.tools import Param, Tool, ToolCall, ToolSet

SYSTEM_PROMPT = (
    "You fix one bug in a Python module with tools. One call per turn: read | test | submit | "
    "a replace, written as\nreplace\n<<<<<<< SEARCH\nthe exact old text\n=======\nthe new text\n"
    ">>>>>>> REPLACE\nThe old text must occur in the file exactly once."
)
CHAT_CALL_TOKENS = 96  # a real model's call that has not ended by then is malformed
RENDERINGS = 12  # distinct (accumulator, list name) pairs over episode seeds 0..11
DATA_VERSION = 2  # bump when the scripted policies a base learns from change (cached bases)


def call_of_text(text: str) -> ToolCall | None:
    """A scripted call's text (`read`, a SEARCH/REPLACE block) as a tool call; None when it is
    malformed."""
    call = parse_text(text, True)
    if isinstance(call, Malformed):
        return None
    if call.tool != "replace":
        return ToolCall(call.tool)
    return ToolCall("replace", {"old": call.old, "new": call.new})


# CodeFix's tools as a model calls them natively and through the bridges (TRL, verl); a
# replace is written as its SEARCH/REPLACE block, the others as their names
TOOLSET = ToolSet(
    system="You fix one bug in a Python module with the tools: read it, test it, replace "
    "text in it, then submit. Call one tool per turn.",
    tools=(
        Tool("read", "Show the module to fix."),
        Tool("test", "Run the public tests on the current module; answers each test's status."),
        Tool(
            "replace",
            "Replace text in the module: old must occur in it exactly once.",
            (
                Param("old", "the exact old text (one or more lines)"),
                Param("new", "the new text (empty: delete)"),
            ),
            text=replace_text,
        ),
        Tool("submit", "Submit the current module and end the episode; hidden tests grade it."),
    ),
    from_text=call_of_text,
)


def renderings(task: CodeFixTask) -> list[tuple[str | None, str]]:
    """Every (accumulator, list name) an episode of the task can show."""
    accs = ACCUMULATORS if task.accumulator else (None,)
    return [(a, lst) for a in accs for lst in LIST_NAMES]


@cache
def codefix_words() -> tuple[str, ...]:
    """Every word CodeFix shows or accepts, once each, in a fixed order (TinyAgent's vocabulary):
    the grammar and answers, digits, names, then every listing under every renaming."""
    words = [BOS, END, UNK, NUM, *TOOLS, WITH, *OBS_WORDS]
    words += [str(d) for d in range(10)] + ["_", *VERBS, *NOUNS, *ACCUMULATORS, *LIST_NAMES]
    for task in all_tasks():
        for acc, lst in renderings(task):
            for src in task.instance(acc, lst):
                words += texts(listing(src))
    return tuple(dict.fromkeys(words))


def corpus() -> list[list[str]]:
    """Pretraining text: every training module, buggy and fixed, under every renaming, as a
    read shows it (held-out modules are never seen before evaluation)."""
    out = []
    for task in tasks_for("train"):
        sources = dict.fromkeys(src for a, lst in renderings(task) for src in task.instance(a, lst))
        out += [texts(listing(src)) for src in sources]
    return out


def fingerprint() -> list:
    """What a model trained here depends on: the vocabulary, every task's module, and the
    version of the scripted play its bases learn from (DATA_VERSION)."""
    return [DATA_VERSION, codefix_words()] + [(t.name, t.source, t.split) for t in all_tasks()]


def summary(outcomes: Sequence[CodeFixOutcome]) -> dict[str, float | None]:
    """The edit-apply rate apart from the solve rate (Problem 14): replace calls per episode,
    the share of them that applied (None without any), and how many episodes end with a module
    that parses."""
    edits = sum(o.edits for o in outcomes)
    n = max(len(outcomes), 1)
    return {
        "edits_per_episode": edits / n,
        "apply_rate": sum(o.applied for o in outcomes) / edits if edits else None,
        "parses_fraction": sum(o.syntax_ok for o in outcomes) / n,
    }


def play_configs() -> tuple[CodeFixConfig, ...]:
    """The configs the weak base's retry play runs under in turn: helpful, then terse errors."""
    return tuple(CodeFixConfig(errors=e) for e in ERRORS)


CODEFIX = Environment(
    name="codefix",
    families=FAMILIES,
    system_prompt=SYSTEM_PROMPT,
    chat_call_tokens=CHAT_CALL_TOKENS,
    renderings=RENDERINGS,
    config_type=CodeFixConfig,
    env_type=CodeFixEnv,
    tasks=tasks_for,
    get_task=get_task,
    words=codefix_words,
    policies=SCRIPTED,
    corpus=corpus,
    fingerprint=fingerprint,
    summary=summary,
    title="CodeFix",
    tools=TOOLSET,
    gymnasium=Gymnasium("arl/CodeFix-v0", "arl.codefix.gymnasium_env:CodeFixGymnasiumEnv"),
    play_configs=play_configs,
)

__all__ = ["CODEFIX", "episode_names"]

"""BugFix as an environment of the protocol (arl.env): its tasks, episodes, words and policies."""

from __future__ import annotations

from arl.bugfix.env import BugFixConfig, BugFixEnv
from arl.bugfix.grammar import END, OPS, Malformed, parse_call, source_words, words_to_text
from arl.bugfix.policies import SCRIPTED
from arl.bugfix.tasks import all_tasks, get_task, gym_words, tasks_for
from arl.env import Environment, Gymnasium
from arl.envkit.families import ACCUMULATORS, FAMILIES, NAME_NOUNS, NAME_VERBS
from arl.text import Vocab, make_vocab
from arl.tools import Param, Tool, ToolCall, ToolSet

SYSTEM_PROMPT = (
    "You fix one bug in a Python function with tools. One call per turn: "
    "read | test | edit OP [NAME] | submit. OP is one of init range compare minmax div "
    "hardcode_tests; init takes the accumulator's name."
)
CHAT_CALL_TOKENS = 16  # a real model's call that has not ended by then is malformed


def call_of_text(text: str) -> ToolCall | None:
    """A scripted call's text (`edit init total`) as a tool call; None when it is malformed."""
    call = parse_call(text.split() + [END])
    if isinstance(call, Malformed):
        return None
    if call.tool != "edit":
        return ToolCall(call.tool)
    return ToolCall("edit", {"op": call.op, **({"name": call.arg} if call.arg else {})})


# BugFix's tools as a model calls them natively and through the bridges (TRL, verl)
TOOLSET = ToolSet(
    system="You fix one bug in a Python function with the tools: read it, test it, apply "
    "one edit op, then submit. Call one tool per turn.",
    tools=(
        Tool("read", "Show the source of the function to fix."),
        Tool("test", "Run the public tests on the current source; answers how many pass."),
        Tool(
            "edit",
            "Apply one edit op to the function (one edit per episode).",
            (
                Param("op", "the edit op (init also takes the accumulator's name)", enum=OPS),
                Param("name", "init only: the accumulator's name", required=False),
            ),
        ),
        Tool("submit", "Submit the current source and end the episode; hidden tests grade it."),
    ),
    from_text=call_of_text,
)


def corpus() -> list[list[str]]:
    """Pretraining text: every training listing, buggy and correct, with its accumulator renamed
    to each name the gym uses (accumulators and name pieces), as a read shows it. Only training
    functions: a held-out listing is never seen before evaluation."""
    names = dict.fromkeys(ACCUMULATORS + NAME_VERBS + NAME_NOUNS)
    out = []
    for task in tasks_for("train"):
        renamed = [task.renamed(name) for name in names]
        sources = dict.fromkeys(src for r in renamed for src in (r.buggy_source, r.correct_source))
        out += [source_words(src) for src in sources]
    return out


def fingerprint() -> list:
    """What a model trained on the gym depends on: the vocabulary and every task's listing."""
    return [default_vocab().words] + [(t.name, t.buggy_source, t.split) for t in all_tasks()]


BUGFIX = Environment(
    name="bugfix",
    families=FAMILIES,
    system_prompt=SYSTEM_PROMPT,
    chat_call_tokens=CHAT_CALL_TOKENS,
    # an oracle demonstration has one rendering per accumulator name: episode seed k names it
    # ACCUMULATORS[(k + task position) % 6] (arl.bugfix.env.BugFixEnv.reset)
    renderings=len(ACCUMULATORS),
    config_type=BugFixConfig,
    env_type=BugFixEnv,
    tasks=tasks_for,
    get_task=get_task,
    words=gym_words,
    policies=SCRIPTED,
    corpus=corpus,
    fingerprint=fingerprint,
    title="BugFix",
    tools=TOOLSET,
    gymnasium=Gymnasium("arl/BugFix-v0", "arl.bugfix.gymnasium_env:BugFixGymnasiumEnv"),
    text=words_to_text,
)


def default_vocab() -> Vocab:
    """The BugFix gym's vocabulary: the renderer's specials, then every word of the gym."""
    return make_vocab(gym_words())

"""BugFix as an environment of the protocol (arl.env): its tasks, episodes, words and policies."""

from __future__ import annotations

from arl.env import Environment
from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.families import ACCUMULATORS, FAMILIES, NAME_NOUNS, NAME_VERBS
from arl.gym.grammar import source_words
from arl.gym.policies import SCRIPTED
from arl.gym.tasks import all_tasks, get_task, gym_words, tasks_for
from arl.text import Vocab, make_vocab

SYSTEM_PROMPT = (
    "You fix one bug in a Python function with tools. One call per turn: "
    "read | test | edit OP [NAME] | submit. OP is one of init range compare minmax div "
    "hardcode_tests; init takes the accumulator's name."
)
CHAT_CALL_TOKENS = 16  # a real model's call that has not ended by then is malformed


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
    # ACCUMULATORS[(k + task position) % 6] (arl.gym.env.BugFixEnv.reset)
    renderings=len(ACCUMULATORS),
    config_type=EnvConfig,
    env_type=BugFixEnv,
    tasks=tasks_for,
    get_task=get_task,
    words=gym_words,
    policies=SCRIPTED,
    corpus=corpus,
    fingerprint=fingerprint,
)


def default_vocab() -> Vocab:
    """The BugFix gym's vocabulary: the renderer's specials, then every word of the gym."""
    return make_vocab(gym_words())

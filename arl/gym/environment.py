"""BugFix as an environment of the protocol (arl.env): its tasks, episodes, words and policies."""

from __future__ import annotations

from dataclasses import dataclass

from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.families import ACCUMULATORS, FAMILIES, NAME_NOUNS, NAME_VERBS, SPLITS
from arl.gym.grammar import source_words
from arl.gym.policies import SCRIPTED, get_scripted
from arl.gym.tasks import Task, all_tasks, get_task, gym_words, tasks_for
from arl.text import Vocab, make_vocab

SYSTEM_PROMPT = (
    "You fix one bug in a Python function with tools. One call per turn: "
    "read | test | edit OP [NAME] | submit. OP is one of init range compare minmax div "
    "hardcode_tests; init takes the accumulator's name."
)
CHAT_CALL_TOKENS = 16  # a real model's call that has not ended by then is malformed


@dataclass(frozen=True)
class BugFix:
    """The BugFix gym: a menu of edit ops on small functions (the book's debugging env)."""

    name: str = "bugfix"
    families: tuple[str, ...] = FAMILIES
    splits: tuple[str, ...] = SPLITS
    system_prompt: str = SYSTEM_PROMPT
    chat_call_tokens: int = CHAT_CALL_TOKENS
    # an oracle demonstration has this many renderings, one per accumulator name: episode
    # seed k names it ACCUMULATORS[(k + task position) % 6] (arl.gym.env.BugFixEnv.reset)
    renderings: int = len(ACCUMULATORS)

    def default_config(self) -> EnvConfig:
        return EnvConfig()

    def tasks(self, split: str) -> tuple[Task, ...]:
        return tasks_for(split)

    def get_task(self, name: str) -> Task:
        return get_task(name)

    def make(self, task: Task, config: EnvConfig | None = None) -> BugFixEnv:
        return BugFixEnv(task, config)

    def words(self) -> tuple[str, ...]:
        return gym_words()

    def scripted(self, name: str):
        return get_scripted(name)

    def scripted_names(self) -> tuple[str, ...]:
        return tuple(SCRIPTED)

    def corpus(self) -> list[list[str]]:
        """Pretraining text: every training listing, buggy and correct, with its accumulator
        renamed to each name the gym uses (accumulators and name pieces), as a read shows it.
        Only training functions: a held-out listing is never seen before evaluation."""
        names = dict.fromkeys(ACCUMULATORS + NAME_VERBS + NAME_NOUNS)
        out = []
        for task in tasks_for("train"):
            sources = dict.fromkeys(src for name in names for r in [task.renamed(name)]
                                    for src in (r.buggy_source, r.correct_source))  # fmt: skip
            out += [source_words(src) for src in sources]
        return out

    def fingerprint(self) -> list:
        """What a model trained on the gym depends on: the vocabulary and every task's listing."""
        return [default_vocab().words] + [(t.name, t.buggy_source, t.split) for t in all_tasks()]


BUGFIX = BugFix()


def default_vocab() -> Vocab:
    """The BugFix gym's vocabulary: the renderer's specials, then every word of the gym."""
    return make_vocab(gym_words())

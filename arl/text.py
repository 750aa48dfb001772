"""Vocabulary and the one renderer of episodes: an environment's words -> ids, with owners.

A BugFix episode renders as

    <bos> fix NAME | read <end> | <obs> def NAME ( xs ) : ... </obs> | edit range <end> | ...
    prompt           policy       template, environment ..., template   policy

Every token carries its owner (prompt, policy, environment, template). Model rollouts,
scripted rollouts and demonstrations all grow a `Transcript`, so the ids a model is
trained on are the ids it will see when it acts. The words themselves (the issue, the
listings, the call grammar) are each environment's (arl.bugfix, arl.codefix); this module knows
none of them, only the renderer's own special words.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from arl.types import ENV, POLICY, PROMPT, TEMPLATE, Observation

PAD, OBS, OBS_END = "<pad>", "<obs>", "</obs>"  # the renderer's own words
BOS, END, UNK, NUM = "<bos>", "<end>", "<unk>", "<num>"  # issue start, call end, unknown, number
SPECIALS = (PAD, BOS, END, OBS, OBS_END, UNK, NUM)


@dataclass(frozen=True)
class Vocab:
    """Word-level vocabulary; id 0 is padding."""

    words: tuple[str, ...]

    @property
    def index(self) -> dict[str, int]:
        return _index(self.words)

    def __len__(self) -> int:
        return len(self.words)

    def digest(self) -> str:
        """16 hex digits of the sha256 of the words in id order: two vocabularies with one
        word or one id apart differ (a checkpoint records it: arl.rollout.vocab_record)."""
        return hashlib.sha256("\n".join(self.words).encode()).hexdigest()[:16]

    def encode(self, words: Sequence[str]) -> list[int]:
        index, unk = self.index, self.index[UNK]
        return [index.get(w, unk) for w in words]

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.words[i] for i in ids]

    def id(self, word: str) -> int:
        return self.index[word]


@cache
def _index(words: tuple[str, ...]) -> dict[str, int]:
    return {w: i for i, w in enumerate(words)}


@cache
def make_vocab(words: tuple[str, ...]) -> Vocab:
    """An environment's vocabulary: the renderer's specials, then its words (id 0 is padding)."""
    return Vocab(tuple(dict.fromkeys(SPECIALS + words)))


# --- rendering ------------------------------------------------------------------------------


def render_prompt(words: Sequence[str], vocab: Vocab) -> tuple[list[int], list[int]]:
    """The issue (prompt-owned): the words an environment's `reset` shows."""
    if isinstance(words, str):
        raise TypeError("render_prompt takes the prompt's words, not a string")
    ids = vocab.encode(words)
    return ids, [PROMPT] * len(ids)


def render_observation(
    words: Sequence[str], vocab: Vocab, wrap: bool = True
) -> tuple[list[int], list[int]]:
    """Tool output (environment-owned), wrapped in template-owned <obs> ... </obs>."""
    ids = vocab.encode(words)
    owners = [ENV] * len(ids)
    if wrap:
        ids = [vocab.id(OBS)] + ids + [vocab.id(OBS_END)]
        owners = [TEMPLATE] + owners + [TEMPLATE]
    return ids, owners


class Growing:
    """What every transcript does with its ids, owners, log-probs and call spans."""

    ids: list[int]
    owners: list[int]
    logps: list[float]  # the sampler's, on policy tokens; else 0
    calls: list[tuple[int, int]]  # [start, end) of each call
    entropies: dict[int, float]  # position -> the policy's entropy there, on sampled tokens

    def __len__(self) -> int:
        return len(self.ids)

    def _add(self, ids: Sequence[int], owners: Sequence[int]) -> None:
        self.ids += ids
        self.owners += owners
        self.logps += [0.0] * len(ids)

    def act(self, token: int, logp: float = 0.0, entropy: float | None = None) -> None:
        """One policy token, with the sampler's log-probability of it and, if it was sampled,
        the policy's temperature-1 entropy where it was sampled (None: played, not sampled)."""
        if entropy is not None:
            self.entropies[len(self.ids)] = entropy
        self.ids.append(token)
        self.owners.append(POLICY)
        self.logps.append(logp)

    def entropy_T(self) -> tuple[float, ...] | None:
        """The sampler's entropies aligned with ids (0 off policy tokens); None unless every
        policy token was sampled with one (a scripted or forced token has none)."""
        policy = [i for i, o in enumerate(self.owners) if o == POLICY]
        if not all(i in self.entropies for i in policy):
            return None
        return tuple(self.entropies.get(i, 0.0) for i in range(len(self.ids)))

    def _call(self, n: int) -> list[int]:
        """The last `n` policy tokens are one call: record its span; return its ids."""
        start = len(self.ids) - n
        self.calls.append((start, len(self.ids)))
        return self.ids[start:]


@dataclass
class Transcript(Growing):
    """An episode as rendered so far: ids, owners, the sampler's log-probs, call spans.

    Start it with `begin` (the prompt's words), then per turn: the policy's tokens (`act`),
    `end_call`, and the environment's answer (`observe`). Every episode is grown this way,
    one token or one observation at a time.
    """

    vocab: Vocab
    wrap: bool = True
    ids: list[int] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)  # the sampler's, on policy tokens; else 0
    calls: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each call
    entropies: dict[int, float] = field(default_factory=dict)  # on sampled tokens (Growing)

    @classmethod
    def begin(cls, prompt: Sequence[str], vocab: Vocab, wrap: bool = True) -> Transcript:
        tr = cls(vocab, wrap)
        tr._add(*render_prompt(prompt, vocab))
        return tr

    def end_call(self, n: int) -> list[str]:
        """The last `n` policy tokens are one call: record its span; its words, for the env."""
        return self.vocab.decode(self._call(n))

    def observe(self, obs: Observation, limit: int | None = None) -> list[str] | None:
        """Add the environment's answer (its words); returns them as the policy reads them
        (the environment-owned ids). None, and nothing added, if it would take the
        transcript past `limit` tokens."""
        ids, owners = render_observation(obs.words, self.vocab, self.wrap)
        if limit is not None and len(self.ids) + len(ids) > limit:
            return None
        self._add(ids, owners)
        return self.vocab.decode([i for i, o in zip(ids, owners, strict=True) if o == ENV])


def render_episode(
    prompt: Sequence[str],
    calls: Sequence[Sequence[int]],
    observations: Sequence[Observation | None],
    vocab: Vocab,
    wrap: bool = True,
) -> tuple[list[int], list[int]]:
    """The whole episode at once: prompt, then each call's ids and its observation (if any)."""
    tr = Transcript.begin(prompt, vocab, wrap)
    for call, obs in zip(calls, observations, strict=True):
        for token in call:
            tr.act(token)
        tr.end_call(len(call))
        if obs is not None:
            tr.observe(obs)
    return tr.ids, tr.owners

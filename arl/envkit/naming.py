"""Function names that carry no family.

A function is named `VERB_NOUN` from two small shared inventories, assigned at random
so that every piece of a held-out name occurs in training under at least two families,
and voting on the pieces guesses no better than chance.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from functools import cache

from arl.envkit.families import FAMILIES, NAME_NOUNS, NAME_VERBS, SPLITS, TEMPLATES


def piece_vote_guess(
    name: str, train: dict[str, str], families: Sequence[str] = FAMILIES
) -> dict[str, float]:
    """What a policy keyed on name pieces would guess: P(family) from training names sharing
    a piece.

    `train` maps training names to families; ties split the guess evenly.
    """
    votes = Counter(
        f for n, f in train.items() for piece in name.split("_") if piece in n.split("_")
    )
    if not votes:
        return {f: 1 / len(families) for f in families}
    top = max(votes.values())
    best = [f for f in families if votes[f] == top]
    return {f: (1 / len(best) if f in best else 0.0) for f in families}


def _names_ok(names: dict[tuple[str, str, str], str], families: Sequence[str] = FAMILIES) -> bool:
    """No piece names a family: in training each piece occurs at most once per family, every
    held-out piece occurs in training under >= 2 families, and piece votes are chance.

    `names` maps (family, split, about) to a name."""
    train = {n: k[0] for k, n in names.items() if k[1] == "train"}
    held = {n: k[0] for k, n in names.items() if k[1] == "heldout"}
    uses = Counter((piece, f) for n, f in train.items() for piece in n.split("_"))
    if max(uses.values()) > 1:
        return False
    for n in held:
        for piece in n.split("_"):
            if len({f for m, f in train.items() if piece in m.split("_")}) < 2:
                return False
    hits = sum(piece_vote_guess(n, train, families)[f] for n, f in held.items())
    return hits <= len(held) / len(families)


@cache
def assign_names() -> dict[str, str]:
    """The gym's names: about -> VERB_NOUN for every template (see `assign`)."""
    keys = [(t.family, t.split, t.about) for t in TEMPLATES]
    return assign(keys, NAME_VERBS, NAME_NOUNS, FAMILIES, "arl-names")


def assign(
    keys: Sequence[tuple[str, str, str]],
    verbs: Sequence[str],
    nouns: Sequence[str],
    families: Sequence[str],
    tag: str,
) -> dict[str, str]:
    """About -> VERB_NOUN for (family, split, about) keys: a fixed random assignment that passes
    `_names_ok` (the first that does, drawing with seeds `tag-ATTEMPT`).

    Each attempt draws training names slot by slot among the pairs whose pieces the family
    has not used yet, then held-out names among the unused pairs.
    """
    pairs = [f"{v}_{n}" for v in verbs for n in nouns]
    order = sorted(range(len(keys)), key=lambda i: SPLITS.index(keys[i][1]))  # train first
    for attempt in range(10_000):
        rng = random.Random(f"{tag}-{attempt}")
        used: set[str] = set()
        drawn: dict[int, str] = {}
        for i in order:
            family, split = keys[i][:2]
            taken = {
                p
                for k, n in drawn.items()
                if keys[k][:2] == (family, "train")
                for p in n.split("_")
            }
            free = [
                p
                for p in pairs
                if p not in used and (split != "train" or not taken & set(p.split("_")))
            ]
            if not free:
                break
            drawn[i] = rng.choice(free)
            used.add(drawn[i])
        if len(drawn) == len(keys):
            names = {keys[i]: n for i, n in drawn.items()}
            if _names_ok(names, families):
                return {k[2]: v for k, v in names.items()}
    raise RuntimeError("no name assignment passes the shortcut checks")

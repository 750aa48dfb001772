"""Chapter 15's probes of the BugFix gym: does a policy copy the accumulator it was shown
(`copy_probe`, the init family's skill), and which op its first edit chose (`op_choice`, the
stripped template's failure)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arl.errors import ArlError
from arl.gym.env import observation
from arl.gym.environment import default_vocab
from arl.gym.families import ACCUMULATORS
from arl.gym.grammar import END, Call, parse_call, prompt_words, source_words
from arl.gym.tasks import Task
from arl.model import TinyAgent
from arl.text import Transcript
from arl.types import Trajectory


@torch.no_grad()
def copy_probe(model: TinyAgent, tasks: Sequence[Task]) -> dict[str, float]:
    """Does the policy copy the accumulator it was shown? (the `init` family's skill)

    For every init task and every name in ACCUMULATORS, feed the oracle's prefix (the
    issue, `read`, the listing with that accumulator, `edit init`) and check whether
    the most likely next token is the name shown. A policy that emits a memorized
    name scores about 1 / len(ACCUMULATORS).
    """
    vocab = default_vocab()
    rows: list[tuple[list[int], int]] = []
    for task in (t for t in tasks if t.family == "init"):
        for name in ACCUMULATORS:
            tr = Transcript.begin(prompt_words(task.name), vocab)
            for word in ("read", END):
                tr.act(vocab.id(word))
            words = source_words(task.renamed(name).buggy_source)
            tr.observe(observation(words))
            for word in ("edit", "init"):
                tr.act(vocab.id(word))
            rows.append((tr.ids, vocab.id(name)))
    if not rows:
        raise ArlError("the copy probe needs at least one init task")
    was_training = model.training
    model.eval()
    L = max(len(ids) for ids, _ in rows)
    x = torch.tensor([ids + [0] * (L - len(ids)) for ids, _ in rows])  # (N, L), right-padded
    logits, _ = model(x)  # (N, L, V); causal, so padding after a row's end changes nothing
    last = torch.tensor([len(ids) - 1 for ids, _ in rows])  # (N,)
    guess = logits[torch.arange(len(rows)), last].argmax(-1)  # (N,)
    target = torch.tensor([t for _, t in rows])  # (N,)
    model.train(was_training)
    return {"copy_rate": float((guess == target).float().mean()), "probes": len(rows)}


def first_edit_op(traj: Trajectory, vocab=None) -> str | None:
    """The op of an episode's first well-formed `edit` call (TinyAgent's words), or None."""
    vocab = vocab or default_vocab()
    for start, end in traj.calls:
        call = parse_call(vocab.decode(traj.ids_T[start:end]))
        if isinstance(call, Call) and call.tool == "edit":
            return call.op
    return None


def op_choice(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Shares of episodes whose first edit uses their family's fixing op, another op, or that
    never edit: a wrong decision, not a broken call (Section 15.6's template mismatch)."""
    if not trajs:
        raise ArlError("op_choice needs at least one episode")
    vocab = default_vocab()
    counts = {"right_op": 0, "wrong_op": 0, "no_edit": 0}
    for t in trajs:
        op = first_edit_op(t, vocab)  # each family's fixing op is named after the family
        right = op == t.outcome.family
        counts["no_edit" if op is None else "right_op" if right else "wrong_op"] += 1
    return {k: n / len(trajs) for k, n in counts.items()}

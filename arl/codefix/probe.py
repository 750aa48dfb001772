"""Problem 14's retry probe: every episode opens with a replace that fails, then the policy goes on.

RL from a weak base makes about one replace per episode, so what a failed replace is answered
(a helpful error or a terse `error`) is rarely read. The probe forces the reading: the first
call of each episode is the oracle's replace for the episode's file with one word of OLD
misquoted (`failing_opening`), so it never applies; the rest is the policy's own. Read off the
episodes: the apply rate of a replace that follows a failed one (`after_failure`), the share
of episodes that replace again at all, and the pass rate.

A replace's result is read from the episode as the policy saw it (`replace_results`): the
answer after each parsed replace (`ok` or `error`), and for a last replace the episode ended on
(no answer shown), from the outcome's counts of replaces and of those that applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arl.codefix.env import CodeFixEnv, _replace_words
from arl.codefix.grammar import END, WITH, Call
from arl.codefix.listing import listing, matches, texts
from arl.codefix.policies import oracle_fix
from arl.gym.grammar import identifier_pieces
from arl.text import OBS, OBS_END, Vocab
from arl.types import Trajectory

MISQUOTES = ("total", "count", "x", "xs")  # the words a misquoted OLD puts in place of one word
NOWHERE = ("total", "total", "total")  # an OLD no module holds


def failing_opening(env: CodeFixEnv) -> list[str]:
    """The opening call of a reset episode: the oracle's replace with one word of OLD misquoted
    so that OLD occurs nowhere in the file. Of the misquotes (each word of OLD in turn, each of
    MISQUOTES), the first whose `not_found` answer names the bug's own line as the closest,
    where one does (so that a helpful error shows where the fix goes), else the first."""
    ws = listing(env.source)
    words = texts(ws)
    fix = oracle_fix(words, identifier_pieces(env.task.name))
    if fix is None:  # no cue in the function (never on CodeFix's tasks): words of no listing
        return ["replace", *NOWHERE, WITH, END]
    old, new = fix
    at = matches(old, ws)[0]
    bug = {w.line for w in ws[at : at + len(old)]}
    bug_lines = [[w.text for w in ws if w.line == n] for n in sorted(bug)]
    first = None
    for k in range(len(old)):
        for sub in MISQUOTES:
            wrong = [*old[:k], sub, *old[k + 1 :]]
            if sub == old[k] or matches(wrong, ws):
                continue
            first = first or wrong
            _, answer = _replace_words(env.source, Call("replace", tuple(wrong), tuple(new)))
            if list(answer.words[3:]) in bug_lines:
                return ["replace", *wrong, WITH, *new, END]
    wrong = first or list(NOWHERE)
    return ["replace", *wrong, WITH, *new, END]


def replace_results(traj: Trajectory, vocab: Vocab) -> list[bool]:
    """Whether each parsed replace of a CodeFix episode applied, in order. A replace call
    answered `error malformed ...` did not parse and is not a replace (the environment counts
    it apart); a last parsed replace with no answer shown (the turns ran out on it) applied
    when the outcome counts one more applied replace than the answers show."""
    out: list[bool] = []
    ends = [s for s, _ in traj.calls[1:]] + [len(traj.ids_T)]
    for (s, e), nxt in zip(traj.calls, ends, strict=True):
        call = vocab.decode(traj.ids_T[s:e])
        if call[:1] != ["replace"]:
            continue
        answer = [w for w in vocab.decode(traj.ids_T[e:nxt]) if w not in (OBS, OBS_END)]
        if answer[:2] == ["error", "malformed"]:
            continue
        if answer:
            out.append(answer[0] == "ok")
    o = traj.outcome
    if o is not None and getattr(o, "edits", len(out)) > len(out):  # the last one, unanswered
        out.append(o.applied > sum(out))
    return out


@dataclass(frozen=True)
class AfterFailure:
    """Replaces that follow a failed one (the one before them in the episode failed), how many
    of them applied, and the episodes: all, those with a failed replace, and of those, the ones
    that replaced again."""

    tried: int
    applied: int
    episodes: int
    failed: int  # episodes with at least one failed replace
    retried: int  # of them, episodes with a replace after their first failed one

    @property
    def apply_rate(self) -> float:
        """Applied over tried; 0 when no replace followed a failed one (every failure was a
        dead turn)."""
        return self.applied / self.tried if self.tried else 0.0

    @property
    def retry_rate(self) -> float:
        """Episodes that replaced again after a failure, over episodes with a failure."""
        return self.retried / self.failed if self.failed else 0.0


def after_failure(episodes: Sequence[Sequence[bool]]) -> AfterFailure:
    """Count, over episodes given as their replaces' results in order, the replaces whose
    previous replace failed and how many of them applied (pooled over episodes)."""
    tried = applied = failed = retried = 0
    for results in episodes:
        follows = [now for before, now in zip(results[:-1], results[1:], strict=True) if not before]
        tried += len(follows)
        applied += sum(follows)
        if False in results:
            failed += 1
            retried += list(results).index(False) < len(results) - 1
    return AfterFailure(tried, applied, len(episodes), failed, retried)

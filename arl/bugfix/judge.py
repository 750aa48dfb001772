"""A small learned judge (Problem 10): logistic regression on what an episode's transcript shows.

A judge is a learned reward model: it never runs the code, it reads. This one reads a
BugFix episode's final transcript as a bag of features and is fit to hidden-test labels of
scripted episodes (arl.bugfix.judged.labelled_episodes). Its input channel is a parameter:

- "transcript": the agent's account, what the book's judge reads ("the final patch and
  explanation"): its calls (its edit, its tests, its free-text note on `submit`) and the
  number of turns;
- "artifacts": only verifiable artifacts: the edit the environment applied (the diff) and
  the real tool outputs; the agent's words, its note among them, are stripped.

The transcript channel leaves the tool outputs out on purpose: in BugFix a menu op applies
(`ok`) only where its bug is, so the answer to an edit is itself a verifier, and a judge that
reads it is an execution check in disguise (measured: it scores a claimed failure 0.23 against
a real fix's 0.94), not the book's judge of patches whose tests it cannot see.

Deterministic: a Newton (IRLS) fit of an L2-regularized logistic regression in numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arl.bugfix.grammar import END, OBS_WORDS, OPS, TOOLS
from arl.errors import ArlError

CHANNELS = ("transcript", "artifacts")
KEPT_WORDS = frozenset((*TOOLS, *OPS, *OBS_WORDS))  # other agent words (names) -> "a:NAME"
Turn = tuple[tuple[str, ...], tuple[str, ...]]  # (the call's words, the tool's answer)


def output_features(call: Sequence[str], output: Sequence[str]) -> list[str]:
    """A tool answer as the judge reads it: a listing is one feature (the task, not evidence),
    a test summary is `all` or `some` tests passing, any other answer its words."""
    if call[:1] == ("read",) and output[:1] != ("error",):
        return ["o:listing"]
    if output[:1] == ("passed",) and len(output) == 4:
        return ["o:tests_all" if output[1] == output[3] else "o:tests_some"]
    return [f"o:{w}" for w in output]


def call_features(call: Sequence[str]) -> list[str]:
    """The agent's own words in one call: its tool and op words, `a:NAME` for a name, and each
    word of a note on `submit` (`note:WORD`, and `note`)."""
    body = list(call[: call.index(END)] if END in call else call)
    if body[:1] == ["submit"] and len(body) > 1:
        return ["a:submit", "note", *(f"note:{w}" for w in body[1:])]
    return [f"a:{w}" if w in KEPT_WORDS else "a:NAME" for w in body] or ["a:empty"]


def applied_edit(call: Sequence[str], output: Sequence[str]) -> list[str]:
    """The diff, as an artifact: the op of an edit the environment applied (answered `ok`)."""
    if call[:1] == ("edit",) and tuple(output) == ("ok",) and len(call) > 1:
        return [f"diff:{call[1]}"]
    return []


def features(turns: Sequence[Turn], channel: str) -> list[str]:
    """The judge's input features of one episode (each at most once), on its channel."""
    if channel not in CHANNELS:
        raise ArlError(f"judge channel: unknown {channel!r} (choose from {', '.join(CHANNELS)})")
    out: list[str] = []
    for call, output in turns:
        if channel == "transcript":
            out += call_features(call)
        else:
            out += applied_edit(call, output) + output_features(call, output)
    if channel == "transcript":
        out.append(f"turns:{len(turns)}")
    return sorted(set(out))


@dataclass(frozen=True)
class Judge:
    """A fitted judge: its channel, its feature names and their weights, and the bias."""

    channel: str
    names: tuple[str, ...]  # the features seen in its labelled episodes
    weights: tuple[float, ...]  # one per name
    bias: float

    def logit(self, turns: Sequence[Turn]) -> float:
        """w . x + b over the episode's features (a feature it never saw weighs 0)."""
        index = dict(zip(self.names, self.weights, strict=True))
        return self.bias + sum(index.get(f, 0.0) for f in features(turns, self.channel))

    def score(self, turns: Sequence[Turn]) -> float:
        """The judge's probability that the episode fixed the bug, in (0, 1)."""
        return 1.0 / (1.0 + math.exp(-self.logit(turns)))

    def weight(self, name: str) -> float:
        return dict(zip(self.names, self.weights, strict=True)).get(name, 0.0)


def design(rows: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], np.ndarray]:
    """The feature names (sorted) and the 0/1 design matrix X (n, d) of feature lists."""
    names = tuple(sorted({f for r in rows for f in r}))
    col = {n: j for j, n in enumerate(names)}
    X = np.zeros((len(rows), len(names)))
    for i, r in enumerate(rows):
        X[i, [col[f] for f in r]] = 1.0
    return names, X


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float, iters: int = 50) -> np.ndarray:
    """Weights (d + 1,), the bias last, minimizing the mean log loss + l2/2 |w|^2 (the bias
    unpenalized): Newton's method, which is exact and deterministic at this size."""
    n, d = X.shape
    A = np.hstack([X, np.ones((n, 1))])  # (n, d + 1)
    w = np.zeros(d + 1)
    reg = np.full(d + 1, l2)
    reg[-1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(A @ w)))  # (n,)
        grad = A.T @ (p - y) / n + reg * w
        H = (A * (p * (1 - p))[:, None]).T @ A / n + np.diag(reg) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(H, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w


def train_judge(
    episodes: Sequence[tuple[Sequence[Turn], bool]], channel: str, l2: float = 0.01
) -> Judge:
    """Fit a judge on labelled episodes (transcript, hidden pass) read on `channel`."""
    if not episodes:
        raise ArlError("train_judge needs labelled episodes")
    names, X = design([features(t, channel) for t, _ in episodes])
    y = np.array([float(label) for _, label in episodes])
    w = fit_logistic(X, y, l2)
    return Judge(channel, names, tuple(float(x) for x in w[:-1]), float(w[-1]))

"""The data every stage passes on: start reading here.

task -> env -> rollout (policy samples ids) -> Trajectory -> collate (Batch) -> loss.
A Trajectory is token-in, token-out: `ids` are exactly the ids the policy sampled
and the environment's observations tokenized once, never re-encoded from text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

# Owner of each token: who produced it. Only POLICY tokens carry loss.
PROMPT, POLICY, ENV, TEMPLATE = 0, 1, 2, 3
OWNER_NAMES = {PROMPT: "prompt", POLICY: "policy", ENV: "environment", TEMPLATE: "template"}
PAD_OWNER = -1


@dataclass(frozen=True)
class Outcome:
    """How an episode ended, as the environment scored it: every finished episode has one.

    These are the fields every environment shares; an environment's own fields live in its
    subclass, in its package (BugFix's accumulator: arl.bugfix; CodeFix's edit counts:
    arl.codefix). `as_dict` is the one way out to JSON and to Gymnasium's info dict.
    """

    task: str
    split: str
    score: float  # the final state's reward (step penalties apart); 0 when not scored
    hidden_pass: bool  # every hidden test passes, and the final state was scored
    public_pass: bool  # every public test passes, and the final state was scored
    hidden_fraction: float  # share of hidden tests the final state passes
    submitted: bool
    truncated: bool  # out of turns before `submit` (or out of context: then turns < max_turns)
    turns: int
    malformed: int  # calls that did not parse
    read: bool  # the policy read the source
    first_call: str | None  # the first call's tool, or "malformed"
    hacked: bool  # the environment's exploit detector flagged the final state
    infra_error: bool = False  # the grader failed (not the policy): excluded from rewards
    env: ClassVar[str]  # the environment that scored it (each subclass sets its name)

    def as_dict(self, keys: Sequence[str] | None = None) -> dict[str, Any]:
        """The outcome as a plain dict: every field, or only `keys`, in the order given."""
        full = asdict(self)
        return full if keys is None else {k: full[k] for k in keys}


@dataclass(frozen=True)
class Observation:
    """What a tool answered, in both of the forms a policy reads: words for TinyAgent (one
    vocabulary id each) and text for a real model (inside its chat template)."""

    words: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class TextCall:
    """A real model's call: its text, and whether it ended with the end-of-turn token (a call
    cut at the token limit did not, and is malformed)."""

    text: str
    ended: bool


@dataclass(frozen=True)
class Trajectory:
    """One episode as the trainer sees it.

    ids_T, owners_T and logprobs_T are aligned; logprobs_T holds the sampler's
    log-probability of each policy token under the distribution actually sampled
    from (temperature and top-p applied), and 0.0 on every other token.

    entropy_T, when the sampler recorded it (rollout_batch does), is aligned too: the entropy
    in nats of the sampling model's temperature-1, uncut distribution at each policy token's
    position, from the logits it sampled that token from; 0.0 on every other token. At
    temperature != 1 or top_p < 1 it is still the temperature-1 policy's entropy, at the states
    the tempered sampler visited, not the entropy of what was sampled. None when any policy
    token was not sampled (a scripted episode, a forced opening, one built by hand or loaded):
    then arl.eval.metrics.action_entropy recomputes it. It is a statistic of the model that
    sampled the episode, when it did: not part of equality, repr or any file format.
    """

    task: str
    ids_T: tuple[int, ...]
    owners_T: tuple[int, ...]
    logprobs_T: tuple[float, ...]
    calls: tuple[tuple[int, int], ...]  # [start, end) of each policy call in ids_T
    reward: float  # the training reward (sum over steps)
    outcome: Outcome | None = field(default=None, compare=False)  # None: not an env episode
    entropy_T: tuple[float, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.ids_T)
        if len(self.owners_T) != n or len(self.logprobs_T) != n:
            raise ValueError("ids_T, owners_T and logprobs_T must have the same length")
        if self.entropy_T is not None and len(self.entropy_T) != n:
            raise ValueError("entropy_T must have the length of ids_T")

    def __len__(self) -> int:
        return len(self.ids_T)

    @property
    def action_ids(self) -> tuple[int, ...]:
        """The policy's tokens in order: the episode's action sequence."""
        return tuple(i for i, o in zip(self.ids_T, self.owners_T, strict=True) if o == POLICY)

    @property
    def n_action_tokens(self) -> int:
        return sum(1 for o in self.owners_T if o == POLICY)

    @property
    def passed(self) -> bool:
        """Hidden tests all pass on the submitted (or, if scored, truncated) function."""
        return self.outcome is not None and self.outcome.hidden_pass

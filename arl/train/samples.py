"""A few of a PG run's episodes as text, written beside its metrics (out/samples.jsonl) for
the report: what the policy actually said, which no curve shows.

Chosen without randomness (the run's random stream is untouched, so a run's metrics are the
same bytes with or without them): at the first step, at each evaluation step and at the
last, the step's first passing episode and its first failing one, in drawn order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arl.export import split_text
from arl.train.common import hook_due
from arl.types import Trajectory

PROMPT_CHARS = 1500  # a prompt's tail (the task; a chat model's system text comes first)
COMPLETION_CHARS = 4000  # an episode's head: its calls and what the tools answered


def sample_due(step: int, every: int, last: int) -> bool:
    """Samples at step 1, at every evaluation step (`every`, 0: none) and after the last."""
    return step == 1 or step == last or hook_due(step, every, last)


def pick(episodes: Sequence[Trajectory]) -> list[Trajectory]:
    """The first episode that passed and the first that did not, in drawn order (each one
    only if the step has it)."""
    passed = next((t for t in episodes if t.outcome is not None and t.outcome.hidden_pass), None)
    failed = next((t for t in episodes if t.outcome is None or not t.outcome.hidden_pass), None)
    return [t for t in (passed, failed) if t is not None]


def clip_head(text: str, limit: int) -> str:
    """The first `limit` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} chars]"


def clip_tail(text: str, limit: int) -> str:
    """The last `limit` characters, marked when cut."""
    return text if len(text) <= limit else f"[{len(text) - limit} chars ...] " + text[-limit:]


def sample_record(step: int, tr: Trajectory, renderer: Any) -> dict[str, Any]:
    """One episode as a samples.jsonl row: where and how it ended, and its text."""
    prompt, completion, _ = split_text(tr, renderer)
    o = tr.outcome
    return {
        "step": step,
        "task": tr.task,
        "reward": tr.reward,
        "pass": None if o is None else bool(o.hidden_pass),
        "turns": None if o is None else o.turns,
        "malformed": None if o is None else o.malformed,
        "truncated": None if o is None else bool(o.truncated),
        "hacked": None if o is None else bool(o.hacked),
        "prompt": clip_tail(prompt, PROMPT_CHARS),
        "completion": clip_head(completion, COMPLETION_CHARS),
    }


def step_samples(step: int, episodes: Sequence[Trajectory], renderer: Any) -> list[dict]:
    """The rows a step writes: `pick`'s episodes as text."""
    return [sample_record(step, tr, renderer) for tr in pick(episodes)]

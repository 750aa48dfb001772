"""Training data from files (`arl train sft|dpo --data FILE`): rows in, Trajectories out.

Two row forms, told apart by their columns:

- **arl's trajectories** (`arl export trajectories`: `input_ids`, `owners`, optional
  `sampler_logprobs`, `passed`, `reward`, `task`): the episode's ids as sampled, in the model's
  tokens. Read back exactly; a policy's tokens are those whose owner is POLICY.
- **TRL's conversational rows** (`messages`, optional `tools`; for preferences `prompt`,
  `chosen`, `rejected` message lists): rendered by a real model's chat template, so they need
  `--model`. A conversation is rendered turn by turn, as arl's rollouts render an episode
  (arl.hf.chat): the text before each assistant turn (with the template's assistant header)
  is prompt before the first turn, environment or template after it; the assistant turn through
  the renderer's turn-end token is the policy's and carries the loss. Each piece is tokenized
  on its own, as a rollout's pieces are; a template that re-renders earlier turns when one is
  appended is refused in one line.

A file is Parquet (`.parquet`) or JSON Lines (anything else), read through arl.runio's
bounded reader. Every bad row is one ArlError line naming the file and the row.
"""

from __future__ import annotations

import io
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arl.errors import ArlError, require
from arl.runio import input_lines, read_input
from arl.types import ENV, OWNER_NAMES, POLICY, PROMPT, TEMPLATE, Trajectory

TRAJECTORY_COLUMNS = ("input_ids", "owners")
CONVERSATION_COLUMNS = ("messages",)
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """A Parquet or JSON Lines file's rows as dicts (bounded reads; one line on any fault)."""
    label = str(path)
    if Path(path).suffix == ".parquet":
        pq = require("pyarrow.parquet", "--data FILE.parquet")
        try:
            table = pq.read_table(io.BytesIO(read_input(path, label, limit=2**31)))
        except Exception as e:  # pyarrow raises many types for a damaged file  # noqa: BLE001
            raise ArlError(f"{label}: not a Parquet file ({type(e).__name__})") from None
        rows = table.to_pylist()
    else:
        rows = []
        for n, line in input_lines(path, label):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ArlError(f"{label}:{n}: not JSON (one object per line)") from None
            if not isinstance(row, dict):
                raise ArlError(f"{label}:{n}: a row is a JSON object, got {type(row).__name__}")
            rows.append(row)
    if not rows:
        raise ArlError(f"{label}: no rows")
    return rows


def row_kind(rows: Sequence[dict], label: str) -> str:
    """'trajectory', 'conversation' or 'preference', by the first row's columns."""
    keys = set(rows[0])
    for kind, need in (
        ("trajectory", TRAJECTORY_COLUMNS),
        ("preference", PREFERENCE_COLUMNS),
        ("conversation", CONVERSATION_COLUMNS),
    ):
        if set(need) <= keys:
            return kind
    raise ArlError(
        f"{label}: rows need arl's trajectory columns ({', '.join(TRAJECTORY_COLUMNS)}), TRL's "
        f"conversational `messages`, or preference {', '.join(PREFERENCE_COLUMNS)}; "
        f"got {', '.join(sorted(keys)[:8])}"
    )


def _ints(value: Any, what: str, where: str) -> list[int]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ArlError(f"{where}: {what} must be a list of integers")
    return list(value)


def _calls(owners: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """[start, end) of each run of policy tokens: one call each, as a rollout records them."""
    spans, start = [], None
    for i, o in enumerate([*owners, ENV]):
        if o == POLICY and start is None:
            start = i
        elif o != POLICY and start is not None:
            spans.append((start, i))
            start = None
    return tuple(spans)


def trajectory_from_row(row: dict, vocab_size: int, where: str) -> Trajectory:
    """One exported row as the Trajectory it was: ids, owners, the sampler's log-probs."""
    ids = _ints(row.get("input_ids"), "input_ids", where)
    owners = _ints(row.get("owners"), "owners", where)
    if len(ids) != len(owners):
        raise ArlError(
            f"{where}: input_ids and owners differ in length ({len(ids)}, {len(owners)})"
        )
    if not ids:
        raise ArlError(f"{where}: an empty episode")
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise ArlError(f"{where}: token id {bad} is outside the model's vocabulary ({vocab_size})")
    if any(o not in OWNER_NAMES for o in owners):
        raise ArlError(f"{where}: owners must be 0-3 ({', '.join(OWNER_NAMES.values())})")
    if POLICY not in owners:
        raise ArlError(f"{where}: no policy token: nothing to train on")
    logps = row.get("sampler_logprobs")
    if logps is None:
        logps = [0.0] * len(ids)
    if not isinstance(logps, list | tuple) or len(logps) != len(ids):
        raise ArlError(f"{where}: sampler_logprobs must align with input_ids")
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in logps):
        raise ArlError(f"{where}: sampler_logprobs must be finite numbers")
    reward = row.get("reward", 1.0 if row.get("passed") else 0.0)
    if not isinstance(reward, int | float) or not math.isfinite(reward):
        raise ArlError(f"{where}: reward must be a finite number")
    task = row.get("task") or f"row{where.rsplit(' ', 1)[-1]}"
    return Trajectory(
        str(task),
        tuple(ids),
        tuple(owners),
        tuple(float(v) for v in logps),
        _calls(owners),
        float(reward),
    )


def passed_of(row: dict, where: str) -> bool:
    """A row's verdict for DPO pairs: `passed`, else reward > 0."""
    if isinstance(row.get("passed"), bool):
        return row["passed"]
    if isinstance(row.get("reward"), int | float):
        return float(row["reward"]) > 0
    raise ArlError(f"{where}: DPO pairs by task need `passed` or `reward` in every row")


def pairs_by_task(
    trajs: Sequence[Trajectory], passed: Sequence[bool], rng: random.Random
) -> list[tuple[Trajectory, Trajectory]]:
    """DPO's pairs: every passing episode with a random failing one of the same task (tasks
    without both give none); `passed` is each episode's verdict (a rollout's, or a row's)."""
    by_task: dict[str, tuple[list, list]] = {}
    for tr, ok in zip(trajs, passed, strict=True):
        wins, losses = by_task.setdefault(tr.task, ([], []))
        (wins if ok else losses).append(tr)
    return [(w, rng.choice(losses)) for wins, losses in by_task.values() if losses for w in wins]


# --- TRL's conversational and preference rows, in a real model's tokens ---------------------

ROLES = ("system", "user", "assistant", "tool")


def _tools(row: dict, where: str) -> list[dict] | None:
    """The row's `tools` (JSON schemas, or a JSON string of them, as arl exports), or None."""
    tools = row.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError:
            raise ArlError(f"{where}: tools is not JSON") from None
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise ArlError(f"{where}: tools must be a list of JSON schemas")
    return tools or None


def _messages(value: Any, where: str, what: str = "messages") -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ArlError(f"{where}: {what} must be a non-empty list of chat messages")
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ArlError(f"{where}: each of {what} needs a role among {', '.join(ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise ArlError(f"{where}: a message's content must be text")
        if m["role"] != "assistant" and m.get("tool_calls"):
            raise ArlError(f"{where}: only assistant messages carry tool_calls")
    return [{k: v for k, v in m.items() if v is not None} for m in value]


def render_conversation(
    renderer: Any, messages: list[dict], tools: list[dict] | None, where: str
) -> tuple[list[int], list[int]]:
    """(ids, owners) of a conversation: policy on every assistant turn through its turn end."""
    from jinja2 import TemplateError

    tok, end = renderer.tokenizer, renderer.end_token
    kw = {"tools": tools} if tools else {}

    def text(msgs: list[dict], generation: bool) -> str:
        try:
            return tok.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=generation, **kw
            )
        except TemplateError as e:
            raise ArlError(f"{where}: the chat template refuses this conversation: {e}") from None

    def encode(piece: str) -> list[int]:
        return list(tok(piece, add_special_tokens=False)["input_ids"]) if piece else []

    if not any(m["role"] == "assistant" for m in messages):
        raise ArlError(f"{where}: no assistant turn: nothing to train on")
    ids: list[int] = []
    owners: list[int] = []
    done = ""  # the text rendered so far
    last = -1  # the previous assistant turn
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head = text(messages[:i], generation=True)
        full = text(messages[: i + 1], generation=False)
        cut = full.find(end, len(head))
        if not head.startswith(done) or not full.startswith(head) or cut < 0:
            raise ArlError(
                f"{where}: the chat template does not render this conversation turn by turn "
                f"(an earlier turn re-rendered, or no {end!r} closing an assistant turn; "
                "`arl check template MODEL` says how)"
            )
        contents = [str(x.get("content") or "") for x in messages[last + 1 : i]]  # new ones
        last = i
        before, whose = encode_owned(tok, head[len(done) :], contents, ENV if done else PROMPT)
        ids += before
        owners += whose
        turn = encode(full[len(head) : cut + len(end)])
        ids += turn
        owners += [POLICY] * len(turn)
        done = full[: cut + len(end)]
    return ids, owners


def encode_owned(
    tok: Any, piece: str, contents: Sequence[str], owner: int
) -> tuple[list[int], list[int]]:
    """A piece of rendered text as ids, each owned by `owner` where it lies inside one of the
    messages' contents (found in order, the last ones first matched) and by TEMPLATE elsewhere:
    arl's rollouts own a prompt's or a tool answer's tokens so (arl.hf.chat)."""
    if not piece:
        return [], []
    spans, pos = [], 0
    for c in contents:
        at = piece.find(c, pos) if c else -1
        if at >= 0:
            spans.append((at, at + len(c)))
            pos = at + len(c)
    enc = tok(piece, add_special_tokens=False, return_offsets_mapping=True)
    owners = [
        owner if any(s <= a and b <= e and b > a for s, e in spans) else TEMPLATE
        for a, b in enc["offset_mapping"]
    ]
    return list(enc["input_ids"]), owners


def conversation_trajectory(renderer: Any, row: dict, where: str) -> Trajectory:
    """One `messages` row as a Trajectory (no outcome; reward from the row, else 0)."""
    ids, owners = render_conversation(
        renderer, _messages(row.get("messages"), where), _tools(row, where), where
    )
    return _trajectory(renderer, ids, owners, row, where)


def _trajectory(renderer: Any, ids: list[int], owners: list[int], row: dict, where: str):
    """Rendered tokens as a Trajectory, checked as an exported row is (the row's task and
    reward kept when it has them)."""
    if len(ids) > renderer.context:
        raise ArlError(f"{where}: {len(ids)} tokens, longer than the model's {renderer.context}")
    kept = {k: row[k] for k in ("task", "reward") if row.get(k) is not None}
    return trajectory_from_row(
        {"input_ids": ids, "owners": owners, **kept}, len(renderer.tokenizer), where
    )


def preference_pair(renderer: Any, row: dict, where: str) -> tuple[Trajectory, Trajectory]:
    """TRL's explicit-prompt preference row (`prompt`, `chosen`, `rejected` message lists) as a
    (chosen, rejected) pair of Trajectories sharing the prompt's tokens."""
    prompt = _messages(row.get("prompt"), where, "prompt")
    tools = _tools(row, where)
    out = []
    for key in ("chosen", "rejected"):
        msgs = prompt + _messages(row.get(key), where, key)
        ids, owners = render_conversation(renderer, msgs, tools, f"{where} ({key})")
        out.append(_trajectory(renderer, ids, owners, {"task": row.get("task")}, where))
    return out[0], out[1]


def load_data(path: str, renderer: Any, vocab_size: int, for_pairs: bool = False, seed: int = 0):
    """A --data file for SFT (a list of Trajectories) or DPO (a list of pairs): arl's
    trajectory rows (pairs: by task, passing against failing), TRL's conversations (SFT) or
    preference rows (DPO). `renderer`: a real model's chat renderer, None for TinyAgent."""
    rows = read_rows(path)
    kind = row_kind(rows, path)
    label = [f"{path}: row {i}" for i in range(len(rows))]
    if kind == "trajectory":
        trajs = [trajectory_from_row(r, vocab_size, w) for r, w in zip(rows, label, strict=True)]
        if not for_pairs:
            return trajs
        verdicts = [passed_of(r, w) for r, w in zip(rows, label, strict=True)]
        pairs = pairs_by_task(trajs, verdicts, random.Random(seed))
        if not pairs:
            raise ArlError(f"{path}: no task has both a passing and a failing row: no DPO pair")
        return pairs
    if renderer is None or getattr(renderer, "tokenizer", None) is None:
        raise ArlError(f"{path}: TRL's {kind} rows are rendered by a chat template: use --model")
    if kind == "preference":
        if not for_pairs:
            raise ArlError(f"{path}: preference rows (prompt, chosen, rejected) are DPO's data")
        return [preference_pair(renderer, r, w) for r, w in zip(rows, label, strict=True)]
    if for_pairs:
        raise ArlError(f"{path}: conversation rows carry no preference: DPO needs pairs")
    return [conversation_trajectory(renderer, r, w) for r, w in zip(rows, label, strict=True)]

"""Read a run's logged scalars into a `Run` in arl's names: an arl run folder (metrics.jsonl
and config.json or results.json), a TRL run (trainer_state.json's log_history) or a verl run
(its file logger's JSONL, one {"step": N, "data": {...}} per line). Bad input: ArlError."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from arl.doctor.names import map_name
from arl.doctor.types import Run
from arl.errors import ArlError
from arl.runio import check_input, input_lines, read_input, read_json, read_jsonl

# TRL bookkeeping in log_history: not metrics of the policy, neither mapped nor "unmapped"
TRL_BOOKKEEPING = frozenset(
    ("step", "epoch", "total_flos", "train_runtime", "train_samples_per_second")
    + ("train_steps_per_second", "train_loss", "num_tokens", "eval_runtime")
    + ("eval_samples_per_second", "eval_steps_per_second", "num_input_tokens_seen")
)
VERL_KEYS = ("step", "data")  # what a verl file-logger line holds (newer ones: elapsed_seconds)
RECIPES = ("pg", "sft", "rft", "dpo", "distill")

Rows = Iterable[tuple[int, dict]]  # (step, {source name: value}) in log order


def numeric(v) -> bool:
    """A logged scalar (NaN and infinities included; bools are flags, not metrics)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def flat(record: dict, prefix: str = "") -> dict:
    """Nested dicts as "a/b" names (rft's family_share/init); lists and strings dropped."""
    out = {}
    for k, v in record.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flat(v, f"{name}/")
        elif numeric(v):
            out[name] = v
    return out


def build_series(source: str, rows: Rows, skip=frozenset()) -> tuple[dict, tuple[str, ...]]:
    """(arl name -> ((step, value), ...) sorted by step, source names arl has no name for).

    Values one name gets twice at a step (verl's validation sets, a resumed log) are averaged.
    """
    acc: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    unmapped: set[str] = set()
    for step, record in rows:
        for name, v in flat(record).items():
            if name in skip:
                continue
            arl = map_name(source, name)
            if arl is None:
                unmapped.add(name)
            else:
                acc[arl][step].append(float(v))
    series = {
        k: tuple((s, mean(vs)) for s, vs in sorted(by_step.items())) for k, by_step in acc.items()
    }
    return series, tuple(sorted(unmapped))


def mean(vs: list[float]) -> float:
    """The plain mean (NaN stays NaN: a non-finite value is a finding, not noise)."""
    return vs[0] if len(vs) == 1 else math.fsum(vs) / len(vs)


def step_of(record: dict, index: int) -> int:
    """A record's step: `step`, else rft's `round`, else its position in the log."""
    for key in ("step", "round"):
        v = record.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return index


def arl_recipe(config: dict, results: dict) -> str:
    """Which of arl's recipes wrote the folder: results.json says, else config.json's fields."""
    if results.get("recipe") in RECIPES:
        return results["recipe"]
    if config.get("teacher"):
        return "distill"
    return "pg" if "group_size" in config else "unknown"


def read_arl(folder: Path, metrics: Path) -> Run:
    """An arl run: metrics.jsonl, with config.json (pg, distill) or results.json (sft, rft,
    dpo) beside it."""
    records = read_jsonl(metrics)
    rows = [(step_of(r, i), r) for i, r in enumerate(records, start=1)]
    series, _ = build_series("arl", rows, skip=frozenset(("step", "round")))
    if not series:
        raise ArlError(f"{metrics}: no numeric metrics in it")
    config = _dict_file(folder / "config.json")
    results = _dict_file(folder / "results.json")
    if not config and isinstance(results.get("settings"), dict):
        config = dict(results["settings"])
    return Run(str(folder), "arl", arl_recipe(config, results), series, config)


def _dict_file(path: Path) -> dict:
    """A JSON object file, or {} when absent (present but not an object: ArlError)."""
    if not path.exists():
        return {}
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise ArlError(f"{path}: expected a JSON object")
    return obj


def trl_recipe(names: set[str]) -> str:
    """GRPO logs group statistics; DPO logs chosen/rejected rewards."""
    if names & {"frac_reward_zero_std", "reward_std", "completions/mean_length"}:
        return "pg"
    return "dpo" if "rewards/accuracies" in names else "unknown"


def read_trl(state_path: Path) -> Run:
    """A TRL run: trainer_state.json's log_history (one dict per logging step)."""
    state = read_json(state_path)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list) or not all(isinstance(r, dict) for r in history):
        raise ArlError(f"{state_path}: no log_history list in it (not a trainer_state.json)")
    rows = [(step_of(r, i), r) for i, r in enumerate(history, start=1)]
    series, unmapped = build_series("trl", rows, skip=TRL_BOOKKEEPING)
    if not series:
        raise ArlError(f"{state_path}: log_history holds no metrics arl can read")
    names = {k for r in history for k in r}
    keys = ("global_step", "max_steps", "logging_steps", "train_batch_size", "eval_steps")
    config = {k: state[k] for k in keys if k in state}
    folder = state_path.parent
    return Run(str(folder), "trl", trl_recipe(names), series, config, unmapped)


def is_verl_record(record: dict) -> bool:
    """verl's file logger writes {"step": N, "data": {name: value}} (and elapsed_seconds)."""
    return isinstance(record.get("data"), dict) and "step" in record


def read_verl(path: Path) -> Run:
    """A verl run: the file logger's JSONL (trainer.logger includes "file")."""
    records = read_jsonl(path)
    for i, r in enumerate(records, start=1):
        if not is_verl_record(r):
            raise ArlError(f"{path}:{i}: not a verl file-logger line ({{'step', 'data'}})")
    rows = [(step_of(r, i), r["data"]) for i, r in enumerate(records, start=1)]
    series, unmapped = build_series("verl", rows)
    if not series:
        raise ArlError(f"{path}: no metrics arl can read (verl names such as actor/entropy)")
    return Run(str(path), "verl", "pg", series, {}, unmapped)


def _first_record(path: Path) -> dict | None:
    """The first JSON object of a JSONL file (None when it has none or is not JSONL); a FIFO
    or a device in its place is one ArlError line (never opened: it could block)."""
    check_input(path)
    try:
        for _, line in input_lines(path):
            if line.strip():
                row = json.loads(line)
                return row if isinstance(row, dict) else None
    except (ArlError, ValueError, RecursionError):
        return None
    return None


def _checkpoint_state(folder: Path) -> Path | None:
    """The trainer_state.json of the latest checkpoint-N in a TRL output_dir."""
    found = []
    for p in folder.glob("checkpoint-*/trainer_state.json"):
        m = re.fullmatch(r"checkpoint-(\d+)", p.parent.name)
        if m:
            found.append((int(m.group(1)), p))
    return max(found)[1] if found else None


def read_file(path: Path) -> Run:
    """One file: trainer_state.json (TRL), or a JSONL log (verl's or arl's metrics.jsonl)."""
    if path.suffix == ".json":
        return read_trl(path)
    first = _first_record(path)
    if first is not None and is_verl_record(first):
        return read_verl(path)
    return read_arl(path.parent, path)


def read_folder(folder: Path) -> Run:
    """A run folder: arl's metrics.jsonl, TRL's trainer_state.json (the folder's, else its
    latest checkpoint's), or a single verl JSONL."""
    if os.path.lexists(folder / "metrics.jsonl"):  # a FIFO or a device there: refused
        first = _first_record(folder / "metrics.jsonl")
        if first is not None and is_verl_record(first):
            return read_verl(folder / "metrics.jsonl")
        return read_arl(folder, folder / "metrics.jsonl")
    state = folder / "trainer_state.json"
    state = state if os.path.lexists(state) else _checkpoint_state(folder)
    if state is not None:
        return read_trl(state)
    logs = [p for p in sorted(folder.glob("*.jsonl")) if is_verl_record(_first_record(p) or {})]
    if len(logs) == 1:
        return read_verl(logs[0])
    if logs:
        names = ", ".join(p.name for p in logs)
        raise ArlError(f"{folder}: several verl logs ({names}); name one")
    runs = sorted(p.parent.name for p in folder.glob("*/metrics.jsonl"))
    if runs:  # a sweep's folder (OUT/KEY=V for each value)
        raise ArlError(f"{folder}: a folder of runs ({', '.join(runs[:6])}); name one")
    raise ArlError(
        f"{folder}: no metrics.jsonl (arl), trainer_state.json (TRL) or verl JSONL log in it"
    )


def load_run(path: str | Path) -> Run:
    """A run's metrics in arl's names, from an arl, TRL or verl run folder or log file.

    A pipe named here (`arl doctor <(cat metrics.jsonl)`) is read once, to its end (bounded),
    then as the log it holds; a device, or a FIFO found inside a folder, is refused."""
    if str(path) == "":
        raise ArlError("an empty path names no run folder or log")
    p = Path(path)
    if not p.exists():
        raise ArlError(f"{p}: no such file or folder")
    if p.is_dir():
        return read_folder(p)
    if check_input(p, named=True) >= 0:
        return read_file(p)
    data = read_input(p, named=True)
    with tempfile.TemporaryDirectory(prefix="arl-pipe-") as tmp:
        name = "trainer_state.json" if _trainer_state(data) else "metrics.jsonl"
        copy = Path(tmp) / name
        copy.write_bytes(data)
        try:
            run = read_file(copy)
        except ArlError as e:
            raise ArlError(str(e).replace(str(copy), str(p))) from None
    return replace(run, path=str(p))


def _trainer_state(data: bytes) -> bool:
    """Whether a pipe's contents are one JSON object with a log_history (TRL's state)."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and "log_history" in obj

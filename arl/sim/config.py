"""A rollout fleet and its workload (Problem 18's numbers by default), checked on construction.

Every field is typed and range-checked, and sizes have upper bounds, so a config file with a
typo is one clear error instead of a simulation that runs for hours.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from arl.errors import ArlError
from arl.runio import read_json

MODES = ("sync", "async")


MAX_EPISODES = 2_000_000  # episodes one simulation may launch (about a minute per 100k)
UPPER_BOUNDS = {  # sizes far above Problem 18's, low enough that a typo cannot hang the run
    "episodes_per_step": 1_000_000,
    "steps": 10_000,
    "max_in_flight": 1_000_000,
    "max_staleness": 1000,
    "overlaunch": 10.0,
    "turns_mean": 10_000.0,
    "slow_factor": 1000.0,
    "warm_pool": 1_000_000,
    "n_engines": 100_000,
    "max_seqs_per_engine": 100_000,
    "seed": 2**32 - 1,
}


@dataclass(frozen=True)
class FleetConfig:
    """A rollout fleet and its workload; the defaults are Problem 18's numbers."""

    mode: str = "async"  # "sync": launch a batch, wait for it, train; "async": generate throughout
    episodes_per_step: int = 512  # episodes trained per optimizer step
    steps: int = 4  # optimizer steps to simulate
    train_s: float = 300.0  # trainer time per optimizer step (s)
    max_in_flight: int = 320  # async: episodes generating at once
    max_staleness: int = 1  # async: launch episodes for step s only once step s - 1 - this is done
    overlaunch: float = 0.0  # sync: launch this fraction extra and train on the first to finish
    turns_mean: float = 50.0  # mean turns per episode (1 + Poisson(turns_mean - 1))
    tokens_per_turn: float = 400.0  # mean policy tokens decoded per turn (gamma distributed)
    tokens_cv: float = 0.5  # coefficient of variation of tokens per turn (0: constant)
    obs_tokens_per_turn: float = 840.0  # tool-output tokens appended to the context per turn
    prompt_tokens: float = 2000.0  # context before the first turn
    tool_s: float = 8.0  # mean tool-call time (s, gamma distributed)
    tool_cv: float = 1.0  # coefficient of variation of tool time (1: exponential, 0: constant)
    decode_tps: float = 40.0  # decode rate per sequence under load (tokens/s)
    slow_fraction: float = 0.05  # share of episodes in the long tail
    slow_factor: float = 3.0  # a tail episode has this many times the turns
    container_startup_s: float = 180.0  # time to start a fresh container (s)
    warm_pool: int = 0  # started idle containers kept ready, replenished in the background
    reuse: bool = False  # reset a finished episode's container and keep it, instead of discarding
    reset_s: float = 10.0  # time to reset a container for reuse (s)
    n_engines: int = 40  # inference engine replicas
    max_seqs_per_engine: int = 8  # resident sequences one engine admits
    kv_capacity_tokens: int = 524_288  # KV-cache capacity of one engine (tokens)
    sample_s: float = 30.0  # timeline sampling period (s)
    seed: int = 0  # seed of every random draw

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            typ = {"int": int, "float": (int, float), "bool": bool, "str": str}[f.type]
            if not isinstance(v, typ) or (f.type in ("int", "float") and isinstance(v, bool)):
                raise ArlError(f"fleet config: '{f.name}' must be {f.type}, got {v!r}")
            if f.type == "float":
                if not math.isfinite(v):
                    raise ArlError(f"fleet config: '{f.name}' must be finite, got {v!r}")
                object.__setattr__(self, f.name, float(v))  # JSON 180 means 180.0
        if self.mode not in MODES:
            raise ArlError(f"fleet config: 'mode' must be one of {MODES}, got {self.mode!r}")
        positive = (
            "episodes_per_step",
            "steps",
            "max_in_flight",
            "turns_mean",
            "decode_tps",
            "n_engines",
            "max_seqs_per_engine",
            "kv_capacity_tokens",
            "sample_s",
            "tokens_per_turn",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ArlError(f"fleet config: '{name}' must be > 0, got {getattr(self, name)}")
        nonneg = (
            "train_s",
            "max_staleness",
            "overlaunch",
            "tokens_cv",
            "obs_tokens_per_turn",
            "prompt_tokens",
            "tool_s",
            "tool_cv",
            "container_startup_s",
            "warm_pool",
            "reset_s",
            "seed",
        )
        for name in nonneg:
            if not getattr(self, name) >= 0:
                raise ArlError(f"fleet config: '{name}' must be >= 0, got {getattr(self, name)}")
        if self.turns_mean < 1:
            raise ArlError(f"fleet config: 'turns_mean' must be >= 1, got {self.turns_mean}")
        if not 0 <= self.slow_fraction <= 1:
            raise ArlError(
                f"fleet config: 'slow_fraction' must be in [0, 1], got {self.slow_fraction}"
            )
        if self.slow_factor < 1:
            raise ArlError(f"fleet config: 'slow_factor' must be >= 1, got {self.slow_factor}")
        for name, hi in UPPER_BOUNDS.items():
            if getattr(self, name) > hi:
                got = getattr(self, name)
                raise ArlError(f"fleet config: '{name}' must be <= {hi:g}, got {got}")
        launched = self.episodes_per_step * (1 + self.overlaunch) * self.steps
        if launched > MAX_EPISODES:
            raise ArlError(
                f"fleet config: episodes_per_step x (1 + overlaunch) x steps must be <= "
                f"{MAX_EPISODES:,} (a simulation of more runs for hours), got {launched:,.0f}"
            )

    @property
    def slots(self) -> int:
        """Resident sequences the whole fleet admits."""
        return self.n_engines * self.max_seqs_per_engine

    @property
    def expected_turns(self) -> float:
        """Mean turns per episode, long tail included."""
        return self.turns_mean * (1 + self.slow_fraction * (self.slow_factor - 1))

    @property
    def expected_episode_s(self) -> float:
        """Mean episode time with a cold start and no queueing: start-up + turns x (decode + tool).

        Problem 18's W; a warm pool takes the start-up off it.
        """
        turn_s = self.tokens_per_turn / self.decode_tps + self.tool_s
        return self.container_startup_s + self.expected_turns * turn_s

    @classmethod
    def from_dict(cls, d: dict) -> FleetConfig:
        """Build from a dict; an unknown key is an error naming it."""
        if not isinstance(d, dict):
            raise ArlError("fleet config: expected a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ArlError(f"fleet config: unknown key '{unknown[0]}'")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | Path) -> FleetConfig:
        """Load from a JSON file; missing file, bad JSON or a bad field raise one ArlError line."""
        d = read_json(path)
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        """Plain dict (what from_dict reads back)."""
        return dataclasses.asdict(self)

"""Discrete-event simulation of a rollout fleet (Chapter 13; Appendix B, Problems 15, 16, 18).

Episodes are turns of decoding (on an inference engine, at a per-sequence decode rate) and
tool calls (in a container), with a long tail of slow episodes. Containers take a start-up
time unless a warm pool or reuse-with-reset has one ready. Engines admit a bounded number of
resident sequences whose KV cache grows with every turn. The trainer runs synchronous steps
(launch a batch, wait, train) or asynchronous ones (generation never stops; launches are
gated so that an episode is at most `max_staleness` steps old when its batch is launched).

The same config and seed give the same result: every episode draws its turns from its own
generator seeded with (seed, episode id), so runs that differ only in the fleet (a warm pool,
more engines) see the same episodes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import simpy

from arl.errors import ArlError

MODES = ("sync", "async")


MAX_EPISODES = 2_000_000  # episodes one simulation may launch (about a minute per 100k)
UPPER_BOUNDS = {  # sizes far above Problem 18's, low enough that a typo cannot hang the run
    "episodes_per_step": 1_000_000, "steps": 10_000, "max_in_flight": 1_000_000,
    "max_staleness": 1000, "overlaunch": 10.0, "turns_mean": 10_000.0, "slow_factor": 1000.0,
    "warm_pool": 1_000_000, "n_engines": 100_000, "max_seqs_per_engine": 100_000,
    "seed": 2**32 - 1,
}  # fmt: skip


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
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ArlError(f"{p}: no such file") from None
        except json.JSONDecodeError as e:
            raise ArlError(f"{p}:{e.lineno}: invalid JSON ({e.msg})") from None
        except UnicodeDecodeError:
            raise ArlError(f"{p}: not UTF-8 text") from None
        except RecursionError:
            raise ArlError(f"{p}: JSON nested too deeply") from None
        except OSError as e:
            raise ArlError(f"{p}: cannot read ({e})") from None
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        """Plain dict (what from_dict reads back)."""
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------ simulation


@dataclass
class _Episode:
    """One episode's draws and its progress through the fleet."""

    id: int
    version: int  # optimizer steps done when it was launched
    turns: int
    tokens: np.ndarray  # policy tokens decoded per turn
    tool: np.ndarray  # tool seconds per turn
    slow: bool
    launched: float
    state: str = "new"
    finished: float = math.nan
    left: float = math.nan  # when it left the fleet: finished, or aborted (over-launch)
    aborted: bool = False
    context: float = 0.0
    tool_time: float = 0.0
    engine: int = -1
    slot_req: simpy.Event | None = None
    get_event: simpy.Event | None = None
    proc: simpy.Process | None = None

    @property
    def length(self) -> float:
        """Policy tokens of the whole episode: the length a trainer sees."""
        return float(self.tokens.sum())


class _Gauge:
    """A piecewise-constant quantity and its time integral."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.value, self.t, self.area = env, 0.0, 0.0, 0.0

    def add(self, delta: float) -> None:
        now = self.env.now
        self.area += self.value * (now - self.t)
        self.t, self.value = now, self.value + delta

    def area_at(self, now: float) -> float:
        return self.area + self.value * (now - self.t)


def draw_episode(cfg: FleetConfig, ep_id: int) -> tuple[int, np.ndarray, np.ndarray, bool]:
    """Turns, tokens per turn, tool seconds per turn and tail flag of episode `ep_id`."""
    rng = np.random.default_rng((cfg.seed, ep_id))
    slow = bool(rng.random() < cfg.slow_fraction)
    turns = 1 + int(rng.poisson(cfg.turns_mean - 1))
    if slow:
        turns = max(1, round(turns * cfg.slow_factor))

    def gamma(mean: float, cv: float) -> np.ndarray:
        if cv == 0 or mean == 0:
            return np.full(turns, float(mean))
        return rng.gamma(1.0 / cv**2, mean * cv**2, size=turns)

    return turns, gamma(cfg.tokens_per_turn, cfg.tokens_cv), gamma(cfg.tool_s, cfg.tool_cv), slow


STATES = ("container", "queued", "decode", "tool")


class _Fleet:
    """The SimPy model: containers, engines, episodes and the trainer."""

    def __init__(self, cfg: FleetConfig, on_step: Callable[[int, int], None] | None) -> None:
        self.cfg, self.on_step = cfg, on_step
        self.env = env = simpy.Environment()
        self.idle = simpy.Store(env)  # ready containers
        for _ in range(cfg.warm_pool):
            self.idle.put(object())
        self.starting = self.resetting = 0
        self.requests = self.hits = self.containers_started = 0
        self.engines = [simpy.Resource(env, cfg.max_seqs_per_engine) for _ in range(cfg.n_engines)]
        self.engine_kv = np.zeros(cfg.n_engines)
        self.kv_peak_engine = 0.0
        self.in_flight, self.decoding, self.kv = _Gauge(env), _Gauge(env), _Gauge(env)
        self.count = dict.fromkeys(STATES, 0)
        self.version = 0
        self.episodes: list[_Episode] = []
        self.trained: list[tuple[_Episode, int]] = []  # (episode, step it trained in)
        self.step_ends: list[float] = []
        self.snapshots: list[tuple[float, float, float]] = []  # gauge areas at step ends
        self.timeline: list[tuple] = []
        self.finished = simpy.Store(env)  # async: episodes in completion order
        self.batch: list[_Episode] = []
        self.batch_full = env.event()
        self.wake = env.event()
        self.done = env.event()

    # ---- containers
    def _start_container(self) -> None:
        self.starting += 1
        self.containers_started += 1
        self.env.process(self._container_startup())

    def _container_startup(self):
        yield self.env.timeout(self.cfg.container_startup_s)
        self.starting -= 1
        self.idle.put(object())

    def _replenish(self) -> None:
        """Start containers until idle + starting + resetting - waiting reaches the pool size."""
        while (
            len(self.idle.items) + self.starting + self.resetting - len(self.idle.get_queue)
        ) < self.cfg.warm_pool:
            self._start_container()

    def _release_container(self, container: object) -> None:
        if self.cfg.reuse:
            self.resetting += 1
            self.env.process(self._reset(container))

    def _reset(self, container: object):
        yield self.env.timeout(self.cfg.reset_s)
        self.resetting -= 1
        self.idle.put(container)

    # ---- episode
    def _set_state(self, ep: _Episode, state: str) -> None:
        if ep.state in self.count:
            self.count[ep.state] -= 1
        if state in self.count:
            self.count[state] += 1
        if ep.state == "decode":
            self.decoding.add(-1)
        if state == "decode":
            self.decoding.add(1)
        ep.state = state

    def _grow(self, ep: _Episode, tokens: float) -> None:
        ep.context += tokens
        self.kv.add(tokens)
        self.engine_kv[ep.engine] += tokens
        occ = self.engine_kv[ep.engine] / self.cfg.kv_capacity_tokens
        self.kv_peak_engine = max(self.kv_peak_engine, occ)

    def launch(self) -> _Episode:
        cfg = self.cfg
        turns, tokens, tool, slow = draw_episode(cfg, len(self.episodes))
        ep = _Episode(len(self.episodes), self.version, turns, tokens, tool, slow, self.env.now)
        self.episodes.append(ep)
        self.in_flight.add(1)
        ep.proc = self.env.process(self._episode(ep))
        return ep

    def _episode(self, ep: _Episode):
        cfg, env = self.cfg, self.env
        container = None
        try:
            self._set_state(ep, "container")
            self.requests += 1
            hit = len(self.idle.items) > 0
            self.hits += hit
            ep.get_event = self.idle.get()
            if not hit and self.starting < len(self.idle.get_queue):
                self._start_container()  # on demand, for this episode
            self._replenish()
            container = yield ep.get_event
            ep.get_event = None
            self._set_state(ep, "queued")
            ep.engine = min(
                range(cfg.n_engines),
                key=lambda i: self.engines[i].count + len(self.engines[i].queue),
            )
            ep.slot_req = self.engines[ep.engine].request()
            yield ep.slot_req
            self._grow(ep, cfg.prompt_tokens)
            for t in range(ep.turns):
                self._set_state(ep, "decode")
                yield env.timeout(ep.tokens[t] / cfg.decode_tps)
                self._grow(ep, ep.tokens[t])
                self._set_state(ep, "tool")
                yield env.timeout(ep.tool[t])
                ep.tool_time += ep.tool[t]
                self._grow(ep, cfg.obs_tokens_per_turn)
            ep.finished = env.now
        except simpy.Interrupt:
            ep.aborted = True
            if ep.get_event is not None:
                if ep.get_event.triggered:
                    container = ep.get_event.value
                else:
                    ep.get_event.cancel()
        self._leave(ep, container)

    def _leave(self, ep: _Episode, container: object | None) -> None:
        ep.left = self.env.now
        self._set_state(ep, "done")
        self.in_flight.add(-1)
        if ep.engine >= 0:
            self.kv.add(-ep.context)
            self.engine_kv[ep.engine] -= ep.context
            if ep.slot_req is not None:
                if ep.slot_req.triggered:
                    self.engines[ep.engine].release(ep.slot_req)
                else:
                    ep.slot_req.cancel()
        if container is not None:
            self._release_container(container)
        if ep.aborted:
            return
        if self.cfg.mode == "sync":
            self.batch.append(ep)
            if len(self.batch) == self.cfg.episodes_per_step and not self.batch_full.triggered:
                self.batch_full.succeed()
        else:
            self.finished.put(ep)
            self._wake()

    def _wake(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    # ---- trainer
    def _end_step(self, step: int):
        yield self.env.timeout(self.cfg.train_s)
        self.version += 1
        now = float(self.env.now)
        self.step_ends.append(now)
        self.snapshots.append(
            (self.in_flight.area_at(now), self.decoding.area_at(now), self.kv.area_at(now))
        )
        if self.on_step is not None:
            self.on_step(step + 1, self.cfg.steps)

    def _sync(self):
        cfg = self.cfg
        B = cfg.episodes_per_step
        for step in range(cfg.steps):
            self.batch, self.batch_full = [], self.env.event()
            launched = [self.launch() for _ in range(math.ceil(B * (1 + cfg.overlaunch)))]
            yield self.batch_full
            for ep in launched:
                if ep.proc is not None and ep.proc.is_alive:
                    ep.proc.interrupt()
            self.trained += [(ep, step) for ep in self.batch[:B]]
            yield from self._end_step(step)
        self.done.succeed()

    def _launcher(self):
        cfg = self.cfg
        B = cfg.episodes_per_step
        while not self.done.triggered:
            while (
                self.in_flight.value < cfg.max_in_flight
                and len(self.episodes) < (self.version + 1 + cfg.max_staleness) * B
            ):
                self.launch()
            self.wake = self.env.event()
            yield self.wake

    def _trainer(self):
        cfg = self.cfg
        for step in range(cfg.steps):
            for _ in range(cfg.episodes_per_step):
                ep = yield self.finished.get()
                self.trained.append((ep, step))
            yield from self._end_step(step)
            self._wake()
        self.done.succeed()

    def _sampler(self):
        while not self.done.triggered:
            c = self.count
            self.timeline.append(
                (self.env.now, c["container"], c["queued"], c["decode"], c["tool"], self.kv.value)
            )
            yield self.env.timeout(self.cfg.sample_s)

    def run(self) -> None:
        if self.cfg.mode == "sync":
            self.env.process(self._sync())
        else:
            self.env.process(self._launcher())
            self.env.process(self._trainer())
        self.env.process(self._sampler())
        self.env.run(until=self.done)


# ---------------------------------------------------------------------------- report


@dataclass(frozen=True)
class FleetResult:
    """What a simulation measured: the report (JSON-ready) and the series for the figure."""

    report: dict  # scalar metrics, see `simulate`
    step_ends: list[float]  # time each optimizer step finished (s)
    timeline: dict[str, list[float]]  # sampled series: t, container, queued, decode, tool, kv
    launched_lengths: list[float] = field(default_factory=list)  # policy tokens, all launched
    trained_lengths: list[float] = field(default_factory=list)  # policy tokens, trained ones


def _p(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def simulate(cfg: FleetConfig, on_step: Callable[[int, int], None] | None = None) -> FleetResult:
    """Run the fleet until `cfg.steps` optimizer steps are done and measure it.

    Time averages (utilization, KV occupancy, episodes in flight) and the step time use the
    window after the first step, which excludes the start-up transient when steps > 1.
    """
    fleet = _Fleet(cfg, on_step)
    fleet.run()
    t_end = fleet.step_ends[-1]
    if cfg.steps > 1:
        t0, (a_flight, a_dec, a_kv) = fleet.step_ends[0], fleet.snapshots[0]
        step_time = (t_end - t0) / (cfg.steps - 1)
    else:
        t0, (a_flight, a_dec, a_kv), step_time = 0.0, (0.0, 0.0, 0.0), t_end
    span = max(t_end - t0, 1e-12)
    e_flight, e_dec, e_kv = fleet.snapshots[-1]

    done = [ep for ep in fleet.episodes if not math.isnan(ep.finished)]
    dur = np.array([ep.finished - ep.launched for ep in done])
    in_window = np.array([t0 <= ep.finished <= t_end for ep in done], dtype=bool)
    trained = [ep for ep, _ in fleet.trained]
    staleness = np.array([step - ep.version for ep, step in fleet.trained])
    launched_len = np.array([ep.length for ep in fleet.episodes])
    trained_len = np.array([ep.length for ep in trained])

    L = (e_flight - a_flight) / span
    lam = float(in_window.sum()) / span
    # Little's law counts what L counts: every episode in flight, aborted ones too, so lambda
    # and W are over all departures (finished or aborted) in the window
    gone = [ep for ep in fleet.episodes if not math.isnan(ep.left)]
    stay = np.array([ep.left - ep.launched for ep in gone])
    gone_in_window = np.array([t0 <= ep.left <= t_end for ep in gone], dtype=bool)
    lam_all = float(gone_in_window.sum()) / span
    W_all = float(stay[gone_in_window].mean()) if gone_in_window.any() else math.nan
    report = {
        "mode": cfg.mode,
        "steps": cfg.steps,
        "sim_time_s": t_end,
        "step_time_s": step_time,
        "engine_utilization": (e_dec - a_dec) / (span * cfg.slots),
        "kv_occupancy": (e_kv - a_kv) / (span * cfg.n_engines * cfg.kv_capacity_tokens),
        "kv_peak_occupancy_engine": fleet.kv_peak_engine,
        "tool_time_fraction": float(sum(ep.tool_time for ep in done) / dur.sum())
        if done
        else math.nan,
        "episode_s_mean": float(dur.mean()) if done else math.nan,
        "episode_s_p50": _p(dur, 50),
        "episode_s_p95": _p(dur, 95),
        "pool_hit_rate": fleet.hits / fleet.requests if fleet.requests else math.nan,
        "containers_started": fleet.containers_started,
        "staleness_mean": float(staleness.mean()) if staleness.size else math.nan,
        "staleness_max": int(staleness.max()) if staleness.size else 0,
        "stale_over_bound": float(np.mean(staleness > cfg.max_staleness))
        if staleness.size and cfg.mode == "async"
        else 0.0,
        "staleness_hist": {str(s): int((staleness == s).sum()) for s in np.unique(staleness)},
        "launched": len(fleet.episodes),
        "finished": len(done),
        "aborted": sum(ep.aborted for ep in fleet.episodes),
        "trained": len(trained),
        "length_launched_mean": float(launched_len.mean()),
        "length_trained_mean": float(trained_len.mean()) if trained else math.nan,
        "turns_launched_mean": float(np.mean([ep.turns for ep in fleet.episodes])),
        "turns_trained_mean": float(np.mean([ep.turns for ep in trained])) if trained else math.nan,
        "tail_share_launched": float(np.mean([ep.slow for ep in fleet.episodes])),
        "tail_share_trained": float(np.mean([ep.slow for ep in trained])) if trained else math.nan,
        "in_flight_mean": L,
        "throughput_per_s": lam,
        "littles_law_lambda_w": lam_all * W_all,
        "expected_episode_s_cold": cfg.expected_episode_s,
    }
    tl = np.array(fleet.timeline, dtype=np.float64).reshape(-1, 6)
    timeline = {
        name: tl[:, i].tolist()
        for i, name in enumerate(("t", "container", "queued", "decode", "tool", "kv"))
    }
    return FleetResult(
        report, list(fleet.step_ends), timeline, launched_len.tolist(), trained_len.tolist()
    )

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

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from arl.sim.config import FleetConfig
from arl.sim.report import FleetResult, measure

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


def simulate(cfg: FleetConfig, on_step: Callable[[int, int], None] | None = None) -> FleetResult:
    """Run the fleet until `cfg.steps` optimizer steps are done and measure it (see `measure`)."""
    fleet = _Fleet(cfg, on_step)
    fleet.run()
    return measure(fleet, cfg)

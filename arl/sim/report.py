"""What a fleet simulation measured: step time, utilization, KV occupancy, episode times,
staleness, Little's law, and the series the timeline figure draws."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from arl.sim.config import FleetConfig


@dataclass(frozen=True)
class FleetResult:
    """What a simulation measured: the report (JSON-ready) and the series for the figure."""

    report: dict  # scalar metrics, see `measure`
    step_ends: list[float]  # time each optimizer step finished (s)
    timeline: dict[str, list[float]]  # sampled series: t, container, queued, decode, tool, kv
    launched_lengths: list[float] = field(default_factory=list)  # policy tokens, all launched
    trained_lengths: list[float] = field(default_factory=list)  # policy tokens, trained ones


def _p(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def measure(fleet, cfg: FleetConfig) -> FleetResult:
    """The report of a finished `fleet` (arl.sim.fleet's model) of config `cfg`.

    Time averages (utilization, KV occupancy, episodes in flight) and the step time use the
    window after the first step, which excludes the start-up transient when steps > 1.
    """
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

"""The rollout-fleet simulator: Little's law, warm pools, length bias, staleness, config."""

from __future__ import annotations

import dataclasses
import json

import pytest

from arl import calc
from arl.errors import ArlError
from arl.sim.config import FleetConfig
from arl.sim.fleet import simulate

# A small synchronous fleet with a slot for every episode, so only containers differ.
SMALL = FleetConfig(
    mode="sync",
    episodes_per_step=64,
    steps=3,
    turns_mean=10,
    n_engines=8,
    train_s=60.0,
    slow_fraction=0.05,
)


def test_littles_law_on_problem_18():
    # Problem 18: 50 turns x (400 tokens at 40 tok/s + 8 s tool) + 3 min start-up = 18 min;
    # 512 episodes per 30 min -> L = 307 in flight. Run 307 in flight and measure the step time.
    w = calc.episode_seconds(50, 400, 40, 8, 180)
    in_flight = round(calc.episodes_in_flight(512, 30 * 60, w))
    cfg = FleetConfig(
        mode="async",
        episodes_per_step=512,
        steps=5,
        max_in_flight=in_flight,
        slow_fraction=0.0,
        n_engines=40,
        max_seqs_per_engine=8,
        train_s=300.0,
    )
    assert cfg.expected_episode_s == pytest.approx(w)
    r = simulate(cfg).report
    assert r["step_time_s"] == pytest.approx(30 * 60, rel=0.05)
    assert r["in_flight_mean"] == pytest.approx(307.2, rel=0.05)
    assert r["episode_s_mean"] == pytest.approx(w, rel=0.05)
    assert r["littles_law_lambda_w"] == pytest.approx(r["in_flight_mean"], rel=0.05)
    assert r["tool_time_fraction"] == pytest.approx(50 * 8 / w, rel=0.05)
    assert r["pool_hit_rate"] == 0.0  # no pool: every episode waits for its start-up


def test_warm_pool_takes_startup_off_the_critical_path():
    cold = simulate(SMALL).report
    warm = simulate(dataclasses.replace(SMALL, warm_pool=64)).report
    assert cold["pool_hit_rate"] == 0.0 and warm["pool_hit_rate"] == 1.0
    saved = cold["step_time_s"] - warm["step_time_s"]
    assert saved == pytest.approx(SMALL.container_startup_s, rel=0.1)
    # reuse with a reset does the same from the second step on, with a third of the starts
    reuse = simulate(dataclasses.replace(SMALL, reuse=True)).report
    assert reuse["step_time_s"] == pytest.approx(warm["step_time_s"], rel=0.05)
    assert reuse["containers_started"] == SMALL.episodes_per_step < cold["containers_started"]


def test_first_to_finish_batches_are_biased_short():
    plain = simulate(SMALL).report
    assert plain["length_trained_mean"] == pytest.approx(plain["length_launched_mean"])
    over = simulate(dataclasses.replace(SMALL, overlaunch=0.25)).report
    assert over["aborted"] == 3 * 16
    assert over["length_trained_mean"] < 0.95 * over["length_launched_mean"]
    assert over["tail_share_trained"] < over["tail_share_launched"]
    assert over["step_time_s"] < plain["step_time_s"]  # why the fix is tempting


def test_async_staleness_bound_and_overlap():
    base = FleetConfig(
        mode="async",
        episodes_per_step=64,
        steps=4,
        turns_mean=10,
        n_engines=8,
        max_in_flight=64,
        train_s=300.0,
        slow_fraction=0.0,
    )
    on_policy = simulate(dataclasses.replace(base, max_staleness=0)).report
    assert on_policy["staleness_max"] == 0
    stale = simulate(dataclasses.replace(base, max_staleness=2, max_in_flight=128)).report
    assert stale["staleness_mean"] > 0
    assert stale["step_time_s"] < on_policy["step_time_s"]  # generation overlaps training


def test_report_ranges():
    r = simulate(SMALL).report
    for key in ("engine_utilization", "kv_occupancy", "tool_time_fraction", "pool_hit_rate"):
        assert 0.0 <= r[key] <= 1.0, key
    assert r["episode_s_p95"] >= r["episode_s_p50"]
    assert r["trained"] == SMALL.steps * SMALL.episodes_per_step
    assert r["kv_peak_occupancy_engine"] >= r["kv_occupancy"]


def test_same_seed_same_result():
    a = simulate(SMALL)
    b = simulate(SMALL)
    assert json.dumps(a.report) == json.dumps(b.report)
    assert a.timeline == b.timeline
    c = simulate(dataclasses.replace(SMALL, seed=1))
    assert c.report["step_time_s"] != a.report["step_time_s"]


# ---------------------------------------------------------------------------- config


def test_config_from_dict_round_trip():
    cfg = FleetConfig.from_dict({"mode": "sync", "container_startup_s": 60, "steps": 2})
    assert cfg.container_startup_s == 60.0 and isinstance(cfg.container_startup_s, float)
    assert FleetConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "d,match",
    [
        ({"stepz": 3}, "unknown key 'stepz'"),
        ({"steps": 0}, "'steps' must be > 0"),
        ({"steps": 2.5}, "'steps' must be int"),
        ({"mode": "batch"}, "'mode' must be one of"),
        ({"slow_fraction": 1.5}, "'slow_fraction'"),
        ({"reuse": "yes"}, "'reuse' must be bool"),
        ({"tool_s": -1}, "'tool_s' must be >= 0"),
    ],
)
def test_config_names_the_bad_field(d, match):
    with pytest.raises(ArlError, match=match):
        FleetConfig.from_dict(d)


def test_config_from_json_errors(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"steps": 2,\n "mode": }')
    with pytest.raises(ArlError, match=r"c.json:2: invalid JSON"):
        FleetConfig.from_json(p)
    with pytest.raises(ArlError, match="no such file"):
        FleetConfig.from_json(tmp_path / "none.json")


def test_example_config_loads():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "fleet.json"
    cfg = FleetConfig.from_json(path)
    assert cfg.episodes_per_step == 512 and cfg.container_startup_s == 180.0


def test_littles_law_counts_aborted_episodes_on_both_sides():
    """A sync fleet launching 50% extra aborts a third of its episodes each step; L counts them
    in flight, so lambda and W must too (leaving them out was 26% apart)."""
    cfg = FleetConfig(mode="sync", overlaunch=0.5, episodes_per_step=128, steps=4, n_engines=20)
    r = simulate(cfg).report
    assert r["aborted"] > 100
    assert r["littles_law_lambda_w"] == pytest.approx(r["in_flight_mean"], rel=0.03)


def test_fleet_sizes_have_upper_bounds():
    with pytest.raises(ArlError, match="must be <= 2,000,000"):
        FleetConfig(episodes_per_step=1_000_000, steps=10)
    with pytest.raises(ArlError, match="'seed' must be <= 4.29"):
        FleetConfig(seed=2**63)

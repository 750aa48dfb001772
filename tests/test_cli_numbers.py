"""`arl stats`, `arl calc`, `arl sim` end to end through arl.cli.main.main."""

from __future__ import annotations

import importlib
import json
import sys
import types

import pytest

from arl.cli.calculators import CALCULATORS


@pytest.fixture
def main(monkeypatch):
    """arl.cli.main.main; the gym's subcommands are stubbed only if they cannot be imported."""
    try:
        importlib.import_module("arl.cli.gym")
    except ImportError:  # built in parallel: keep these tests about this module's commands
        stub = types.ModuleType("arl.cli.gym")
        stub.register = lambda sub: None
        monkeypatch.setitem(sys.modules, "arl.cli.gym", stub)
    from arl.cli.main import main as arl_main

    return arl_main


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("arl: error: ")
    return lines[0]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------ calc


def test_calc_degenerate_group_json(main, capsys):
    assert main(["calc", "degenerate-group", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problem"] == "Problem 3"
    got = {(r["p"], r["G"]): r["P(degenerate)"] for r in out["table"]}
    assert round(got[(0.1, 4)], 3) == 0.656
    assert round(got[(0.3, 16)], 3) == 0.003


def test_calc_degenerate_group_table(main, capsys):
    assert main(["calc", "degenerate-group"]) == 0
    out = capsys.readouterr().out
    for text in ("0.6562", "0.4305", "0.1853", "0.2482"):
        assert text in out


def test_calc_list(main, capsys):
    assert main(["calc", "list", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)["table"]]
    assert names == list(CALCULATORS)


@pytest.mark.parametrize("name", list(CALCULATORS))
def test_every_calculator_runs_with_its_defaults(main, capsys, name):
    assert main(["calc", name, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calculator"] == name
    assert out.get("table") or out.get("results")


def test_calc_values_through_the_cli(main, capsys):
    assert main(["calc", "gpu-hours", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["results"]
    assert round(r["train_gpu_h"], 1) == 2.7
    assert main(["calc", "gpu-hours", "--params", "200e9", "--active", "20e9", "--json"]) == 0
    moe = json.loads(capsys.readouterr().out)["results"]
    assert moe["train_flops"] == pytest.approx(r["train_flops"] * 20 / 32)
    assert main(["calc", "paired", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["results"]
    assert round(r["se_paired"], 4) == 0.0167 and round(r["se_unpaired"], 3) == 0.031
    assert main(["calc", "fleet", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["results"]
    assert round(r["episodes_in_flight"]) == 307


def test_calc_bad_value_is_one_line(main, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calc", "degenerate-group", "--p", "1.5"])
    assert exc.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--p: expected a finite number in [0, 1], got '1.5'" in line


def test_calc_unparsable_flag_is_one_line(main, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calc", "passk", "--n", "ten"])
    assert exc.value.code == 2
    _one_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- stats


def _runs(tmp_path):
    # Problem 22 with tasks named t000..t499: 175 both, 30 A only, 40 B only, 255 neither.
    a_rows, b_rows = [], []
    for i in range(500):
        a_pass = i < 205
        b_pass = i < 175 or 205 <= i < 245
        a_rows.append({"task": f"t{i:03d}", "sample": 0, "passed": a_pass, "reward": 1.0})
        b_rows.append({"task": f"t{i:03d}", "sample": 0, "passed": b_pass})
    return _write_jsonl(tmp_path / "a.jsonl", a_rows), _write_jsonl(tmp_path / "b.jsonl", b_rows)


def test_stats_compare_problem_22(main, capsys, tmp_path):
    a, b = _runs(tmp_path)
    assert main(["stats", "compare", str(a), str(b), "--json", "--bootstrap", "300"]) == 0
    r = json.loads(capsys.readouterr().out)["results"]
    assert (r["b_better"], r["a_better"]) == (40, 30)
    assert round(r["se_paired"], 4) == 0.0167
    assert round(r["z"], 1) == 1.2
    assert round(r["se_unpaired"], 3) == 0.031
    assert r["ci_lo"] < r["diff"] < r["ci_hi"]
    # same seed, same interval
    assert main(["stats", "compare", str(a), str(b), "--json", "--bootstrap", "300"]) == 0
    again = json.loads(capsys.readouterr().out)["results"]
    assert (again["ci_lo"], again["ci_hi"]) == (r["ci_lo"], r["ci_hi"])
    assert main(["stats", "compare", str(a), str(b), "--bootstrap", "300"]) == 0
    assert "0.01673" in capsys.readouterr().out


def test_stats_compare_different_tasks(main, capsys, tmp_path):
    a = _write_jsonl(
        tmp_path / "a.jsonl",
        [{"task": "x", "sample": 0, "passed": True}, {"task": "y", "sample": 0, "passed": False}],
    )
    b = _write_jsonl(tmp_path / "b.jsonl", [{"task": "x", "sample": 0, "passed": False}])
    assert main(["stats", "compare", str(a), str(b)]) == 2
    assert "1 only in A" in _one_error_line(capsys.readouterr().err)
    assert main(["stats", "compare", str(a), str(b), "--intersect", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["results"]
    assert r["n_tasks"] == 1 and r["dropped_only_in_a"] == 1


def test_stats_corrupt_jsonl_is_one_line(main, capsys, tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"task": "t", "sample": 0, "passed": true}\n{"task": "t", "sample": 1,\n')
    assert main(["stats", "passk", str(p)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "bad.jsonl:2: invalid JSON" in line
    assert main(["stats", "compare", str(p), str(tmp_path / "missing.jsonl")]) == 2
    _one_error_line(capsys.readouterr().err)


def test_stats_passk(main, capsys, tmp_path):
    rows = [{"task": "t1", "sample": s, "passed": s < 3} for s in range(10)]
    rows += [{"task": "t2", "sample": s, "passed": False} for s in range(10)]
    p = _write_jsonl(tmp_path / "r.jsonl", rows)
    assert main(["stats", "passk", str(p), "--k", "1", "5", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["table"]
    by_k = {r["k"]: r for r in table}
    assert by_k[1]["pass@k"] == pytest.approx(0.15)
    assert by_k[5]["pass@k"] == pytest.approx((1 - 21 / 252) / 2)
    assert by_k[5]["plugin"] == pytest.approx((1 - 0.7**5) / 2)
    assert main(["stats", "passk", str(p), "--json"]) == 0
    assert [r["k"] for r in json.loads(capsys.readouterr().out)["table"]] == [1, 2, 5, 10]
    assert main(["stats", "passk", str(p), "--curve", "--bootstrap", "50", "--json"]) == 0
    curve = [r["pass@k"] for r in json.loads(capsys.readouterr().out)["table"]]
    assert len(curve) == 10 and curve == sorted(curve) and curve[-1] == pytest.approx(0.5)
    assert main(["stats", "passk", str(p), "--k", "11"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--k 11: pass@k needs at least k samples" in line and "has 10" in line


# ------------------------------------------------------------------------------- sim


def _small_config(tmp_path, **extra):
    cfg = {
        "mode": "sync",
        "episodes_per_step": 32,
        "steps": 2,
        "turns_mean": 5,
        "n_engines": 4,
        "warm_pool": 32,
        **extra,
    }
    p = tmp_path / "fleet.json"
    p.write_text(json.dumps(cfg))
    return p


def test_sim_fleet_writes_results_and_figure(main, capsys, tmp_path):
    cfg = _small_config(tmp_path)
    out = tmp_path / "out"
    assert main(["sim", "fleet", "--config", str(cfg), "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "results.json").read_text())
    assert printed == saved
    assert saved["config"]["episodes_per_step"] == 32
    assert saved["report"]["trained"] == 64
    assert (out / "timeline.png").stat().st_size > 1000
    # same seed, same report; --seed overrides the config's
    assert main(["sim", "fleet", "--config", str(cfg), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["report"] == saved["report"]
    assert (
        main(["sim", "fleet", "--config", str(cfg), "--out", str(out), "--json", "--seed", "5"])
        == 0
    )
    other = json.loads(capsys.readouterr().out)
    assert other["config"]["seed"] == 5
    assert other["report"] != saved["report"]


def test_sim_fleet_table(main, capsys, tmp_path):
    cfg = _small_config(tmp_path)
    assert main(["sim", "fleet", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "step_time_s" in out and "pool_hit_rate" in out


def test_sim_fleet_bad_config_is_one_line(main, capsys, tmp_path):
    cfg = _small_config(tmp_path, turns=5)
    assert main(["sim", "fleet", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "unknown key 'turns'" in _one_error_line(capsys.readouterr().err)

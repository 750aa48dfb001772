"""`arl reproduce problem N --quick` end to end, and the numbers each one must reproduce."""

import json

import pytest
import torch

from arl.cli.main import main
from arl.errors import ArlError
from arl.experiments import problems


@pytest.fixture(scope="module", autouse=True)
def quick_env(tmp_path_factory):
    """A private base cache (the quick bases train once per module) and one thread."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ARL_CACHE", str(tmp_path_factory.mktemp("cache")))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    mp.undo()


def reproduce(capsys, tmp_path, n):
    code = main(["reproduce", "problem", str(n), "--quick", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"Problem {n} (quick): ")
    assert (tmp_path / f"problem-{n}.png").stat().st_size > 1000
    return json.loads((tmp_path / "results.json").read_text())


def test_unknown_problem_lists_the_available_ones(capsys):
    with pytest.raises(ArlError, match="available: 1, 2, 3, 4, 7"):
        problems.run(5, quick=True)
    code = main(["reproduce", "problem", "99", "--quick"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "28" in err


def test_problem_1_weights(capsys, tmp_path):
    r = reproduce(capsys, tmp_path, 1)
    s = r["seq_mean_token_mean"]
    assert s["short_over_long"] == pytest.approx(r["L_max_seen"] / r["L_min"], rel=1e-3)
    assert r["token_mean"]["short_over_long"] == pytest.approx(1.0)
    assert r["constant"]["per_token_weight_shortest"] == pytest.approx(
        1 / (r["episodes"] * r["L_max_budget"]), rel=1e-3
    )


def test_problem_2_accumulation(capsys, tmp_path):
    r = reproduce(capsys, tmp_path, 2)
    for order in ("sampled", "length_sorted"):
        for mode in ("token_mean", "seq_mean_token_mean", "constant"):
            assert r[order][mode]["global"]["cosine"] == pytest.approx(1.0, abs=1e-5)
            assert r[order][mode]["global"]["norm_ratio"] == pytest.approx(1.0, abs=1e-5)
        bug = r[order]["token_mean"]["per_microbatch_mean"]
        assert abs(bug["norm_ratio"] - 1) > 1e-3 or bug["cosine"] < 0.9999
        assert r[order]["constant"]["per_microbatch_mean"]["cosine"] == pytest.approx(1, abs=1e-5)


def test_problem_3_and_4(capsys, tmp_path):
    r = reproduce(capsys, tmp_path / "3", 3)
    assert len(r["measured"]) == len(r["predicted"]) == len(r["G"])
    assert all(0 <= m <= 1 for m in r["measured"])
    # the measured degenerate fraction is p^G + (1-p)^G within its sampling error: two
    # independent estimates over tasks x (n // G) groups, each a variance of at most 1/4
    n, tasks = r["samples_per_task"], len(r["task_pass_rates"])
    for G, measured, predicted in zip(r["G"], r["measured"], r["predicted"], strict=True):
        se = (2 * 0.25 / (tasks * (n // G))) ** 0.5
        assert abs(measured - predicted) <= 3 * se, (G, measured, predicted)
    assert r["measured"][-1] < r["measured"][0]  # larger groups are less often all-equal
    r = reproduce(capsys, tmp_path / "4", 4)
    assert r["hand_success"] == pytest.approx(2.6458, abs=1e-3)
    assert r["hand_failure"] == pytest.approx(-0.378, abs=1e-3)
    assert r["factor_p_0.125"] == pytest.approx(3.02, abs=5e-3)
    assert r["max_abs_error"] < 1e-3


def test_problem_9_signal_shrinks(capsys, tmp_path):
    r = reproduce(capsys, tmp_path, 9)
    single = [row for row in r["rows"] if row["votes"] == 1]
    assert single[0]["f"] == 0 and single[0]["shrink"] == pytest.approx(1.0)
    shrinks = [row["shrink"] for row in single]
    assert shrinks == sorted(shrinks, reverse=True)  # more flips, smaller signal
    for row in single:
        assert row["shrink"] == pytest.approx(1 - 2 * row["f"], abs=0.15)


def test_problem_17_large_gaps_only_when_retokenized(capsys, tmp_path):
    r = reproduce(capsys, tmp_path, 17)
    assert r["token_in_token_out"]["max_abs_gap"] < 1e-3
    assert r["token_in_token_out"]["traj_frac_any_gap_over_1_nat"] == 0
    assert r["retokenized_text"]["traj_frac_any_gap_over_1_nat"] > 0.5


@pytest.mark.parametrize("n", [7, 8, 12, 13, 16, 26, 28])
def test_rl_problems_run_quick(capsys, tmp_path, n):
    r = reproduce(capsys, tmp_path, n)
    runs = r["history"]
    assert len(runs) >= 2 and all(len(h) >= 3 for h in runs.values())
    if n == 28:
        assert r["check_batch_catches_it"] and r["masked_in_non_policy_share"] > 0

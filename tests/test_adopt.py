"""`arl adopt` (Appendix B, Problem 30): the decision rule by hand, the pre-registration, the
paired evaluation (an A/A change measures exactly zero), the command end to end, and
Problem 30's reproduction."""

import json
import math
from dataclasses import replace

import pytest

from arl.errors import ArlError
from arl.experiments import adopt_run
from arl.experiments.adopt import AdoptRule, decide, measure_pair

RULE = AdoptRule(
    change=(("baseline", "loo"),),
    base=(("baseline", "mean"),),
    margin=0.02,
    guardrails=(("entropy", 0.03), ("malformed", 0.05)),
    seeds=(0, 1, 2),
)
QUICK = ["--base-set", "baseline=mean", "--set", "baseline=loo", "--quick", "--seeds", "2"]


# --- the decision, by hand -------------------------------------------------------------------


def calm(n: int = 3) -> dict[str, list[float]]:
    return {"entropy": [0.0] * n, "malformed": [0.0] * n}


def test_a_gain_whose_lower_bound_clears_the_margin_is_adopted():
    # mean 0.06, SE = 0.01 / sqrt(3) (std with ddof 1 of .05, .07, .06 is 0.01), t(0.975, 2)
    # = 4.3027: lo = 0.06 - 0.02484 = 0.03516 > 0.02
    d = decide(RULE, [0.05, 0.07, 0.06], calm())
    assert d["decision"] == "ADOPT" and d["adopt"] and d["reasons"] == []
    assert d["effect"]["lo"] == pytest.approx(0.06 - 4.302653 * 0.01 / math.sqrt(3))
    assert d["effect"]["k_above_margin"] == 3


def test_a_gain_whose_lower_bound_misses_the_margin_is_rejected():
    # mean 0.02 (= the margin), so its lower bound is below it; and a lower bound exactly at
    # the margin is not above it (SE 0: lo = mean = 0.02)
    for effects in ([0.03, 0.01, 0.02], [0.02, 0.02, 0.02]):
        d = decide(RULE, effects, calm())
        assert d["decision"] == "REJECT" and "<= margin 0.02" in d["reasons"][0]


def test_a_breached_guardrail_rejects_a_clear_gain():
    worse = {"entropy": [0.05, 0.04, 0.06], "malformed": [0.05, 0.05, 0.05]}
    d = decide(RULE, [0.05, 0.07, 0.06], worse)
    assert d["decision"] == "REJECT"
    assert d["guardrails"]["entropy"]["breached"]  # mean 0.05 > 0.03
    assert not d["guardrails"]["malformed"]["breached"]  # mean 0.05 = its bound: allowed
    assert d["reasons"] == ["guardrail entropy worsens by +0.0500 > 0.03"]


def test_one_seed_has_no_interval_and_is_rejected_with_that_reason():
    d = decide(replace(RULE, seeds=(0,)), [0.5], calm(1))
    assert d["decision"] == "REJECT" and d["reasons"][0].startswith("one seed: no interval")


def test_the_rule_refuses_bad_settings_in_one_line():
    with pytest.raises(ArlError, match="--metric"):
        replace(RULE, metric="vibes")
    with pytest.raises(ArlError, match="--guardrail nope"):
        replace(RULE, guardrails=(("nope", 1.0),))
    with pytest.raises(ArlError, match="seed: set by `arl adopt`"):
        replace(RULE, change=(("seed", 3),))
    with pytest.raises(ArlError, match="--seeds"):
        replace(RULE, seeds=(1, 1))


# --- pre-registration and resume (a stand-in pair: no training) -------------------------------


@pytest.fixture()
def fake_pairs(monkeypatch):
    """measure_pair replaced by a record of the seed's number: calls are counted."""
    calls = []

    def fake(rule, seed):
        calls.append(seed)
        return {
            "seed": seed,
            "effect": 0.05 + 0.001 * seed,  # 2 seeds: lo = 0.0505 - 12.706 * 0.0005 > 0.02
            "worse": {n: 0.0 for n, _ in rule.guardrails},
            "arms": {a: {"heldout_pass": 0.5} for a in ("base", "change")},
            "paired": {"b_better": 1, "a_better": 0, "ties": 9},
            "history": {a: [{"step": 1, "pass_rate": 0.5}] for a in ("base", "change")},
            "seconds": 0.0,
        }

    monkeypatch.setattr(adopt_run, "measure_pair", fake)
    return calls


def test_the_rule_is_written_before_the_run_and_may_not_change_after(cli, tmp_path, fake_pairs):
    out = str(tmp_path / "a")
    code, stdout, _ = cli("adopt", *QUICK, "--out", out)
    assert code == 0 and fake_pairs == [0, 1]
    rule = json.loads((tmp_path / "a" / "rule.json").read_text())
    assert rule["margin"] == 0.02 and rule["change"] == [["baseline", "loo"]]
    before = (tmp_path / "a" / "results.json").read_text()
    code, stdout, err = cli("adopt", *QUICK, "--out", out, "--margin", "0.05")
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert "may not change after seeing results (margin differ)" in err
    assert json.loads((tmp_path / "a" / "rule.json").read_text()) == rule
    assert (tmp_path / "a" / "results.json").read_text() == before
    code, _, err = cli("adopt", *QUICK, "--out", out, "--guardrail", "entropy:1")
    assert code == 2 and "guardrails differ" in err
    code, stdout, _ = cli("adopt", *QUICK, "--out", out)  # the same rule: read back
    assert code == 0 and fake_pairs == [0, 1] and "ADOPT" in stdout


def test_the_same_rule_resumes_the_seeds_not_yet_finished(cli, tmp_path, fake_pairs, monkeypatch):
    fake = adopt_run.measure_pair

    def fails_on_1(rule, seed):
        if seed == 1:
            raise ArlError("seed 1 stopped")
        return fake(rule, seed)

    monkeypatch.setattr(adopt_run, "measure_pair", fails_on_1)
    assert cli("adopt", *QUICK, "--out", str(tmp_path))[0] == 2
    partial = json.loads((tmp_path / "results.partial.json").read_text())
    assert [p["seed"] for p in partial["pairs"]] == [0]
    monkeypatch.setattr(adopt_run, "measure_pair", fake)
    code, stdout, _ = cli("adopt", *QUICK, "--out", str(tmp_path))
    assert code == 0 and fake_pairs == [0, 1]  # seed 0 once, seed 1 on the rerun
    assert not (tmp_path / "results.partial.json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "lrr=1"], "--set: lrr: unknown PGConfig field"),
        (["--set", "lr=abc"], "lr: expected a number"),
        (["--set", "lr=-1"], "--set: lr: must be a finite number in (0, 1]"),
        (["--set", "baseline=loo"], "the base arm has these settings already"),
        (["--set", "seed=3"], "seed: set by `arl adopt`"),
        (["--set", "split=heldout"], "split: set by `arl adopt`"),  # training on the eval set
        (["--set", "lr=1e-4", "--metric", "vibes"], "--metric: unknown metric"),
        (["--set", "lr=1e-4", "--guardrail", "entropy"], "expected NAME:MAXWORSE"),
        (["--set", "lr=1e-4", "--guardrail", "entropy:-1"], "expected NAME:MAXWORSE"),
        (["--set", "lr=1e-4", "--start", "hot"], "--start: must be one of cold, weak"),
        (["--set", "lr=1e-4", "--margin", "nan"], "--margin"),
        ([], "the change sets nothing"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_folder(cli, tmp_path, argv, message):
    code, stdout, err = cli("adopt", *argv, "--quick", "--out", str(tmp_path / "x"))
    assert code == 2 and stdout == "" and message in err
    assert [line for line in err.splitlines() if line.startswith("arl")] == err.splitlines()
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


# --- real runs, quick ------------------------------------------------------------------------


def test_a_change_that_changes_no_update_measures_exactly_zero():
    """An A/A test of the paired evaluation: eval_samples only sizes the trainer's periodic
    evaluation (off here), so both arms train alike and, evaluated on the same episodes,
    must agree on every episode: the gain, the per-task comparison and every worsening 0."""
    rule = AdoptRule(change=(("eval_samples", 5),), quick=True, steps=2, eval_samples=4)
    pair = measure_pair(rule, 0)
    assert pair["effect"] == 0.0 and pair["paired"]["ties"] == 10
    assert all(w == 0.0 for w in pair["worse"].values())
    assert pair["arms"]["base"] == pair["arms"]["change"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """`arl adopt --base-set baseline=mean --set baseline=loo --quick --seeds 2`, once."""
    from arl.cli.main import main

    out = tmp_path_factory.mktemp("adopt")
    assert main(["adopt", *QUICK, "--out", str(out)]) == 0
    return out


def test_the_command_writes_its_rule_results_and_figure(quick_run):
    results = json.loads((quick_run / "results.json").read_text())
    rule = AdoptRule(
        **{
            k: tuple(map(tuple, v)) if k in ("change", "base", "guardrails") else v
            for k, v in results["rule"].items()
        }
        | {"seeds": tuple(results["rule"]["seeds"])}
    )
    assert rule.quick and rule.steps == 4 and rule.seeds == (0, 1)
    assert results["rule"] == json.loads((quick_run / "rule.json").read_text())
    pairs = results["pairs"]
    worse = {n: [p["worse"][n] for p in pairs] for n, _ in rule.guardrails}
    assert results["decision"] == decide(rule, [p["effect"] for p in pairs], worse)["decision"]
    for p in pairs:  # the gain is the paired per-task mean difference (16 episodes per task)
        base, change = p["arms"]["base"]["heldout_pass"], p["arms"]["change"]["heldout_pass"]
        assert p["effect"] == pytest.approx(change - base, abs=1e-6)
        assert p["effect"] == pytest.approx(p["paired"]["diff"], abs=1e-6)
        assert len(p["history"]["base"]) == len(p["history"]["change"]) == 4
    assert (quick_run / "adopt.png").stat().st_size > 1000


def test_problem_30_runs_one_pair_of_the_command_and_its_mechanism(quick_run, tmp_path):
    from arl.experiments import problems

    r = problems.run(30, [0], quick=True, out=tmp_path)
    seed0 = r["per_seed"][0]
    adopt0 = json.loads((quick_run / "results.json").read_text())["pairs"][0]
    assert seed0["arms"] == adopt0["arms"] and seed0["effect"] == adopt0["effect"]
    assert seed0["mixed_groups"] > 0 and seed0["scale_gap"] < 1e-9
    assert 0 <= seed0["update_gap"] < 0.05
    guards = ["entropy_worse", "malformed_worse", "length_worse"]  # judged as adopt's guardrails
    assert [c["key"] for c in r["claims"]] == ["effect", "scale_gap", *guards]
    for c in r["claims"][2:]:
        name = c["key"].removesuffix("_worse")
        assert c["claim"]["judged_by"] == "mean" and seed0[c["key"]] == adopt0["worse"][name]
        assert c["claim"]["threshold"] == dict(problems.get(30).claims)[c["key"]].threshold
    assert (tmp_path / "problem-30.png").stat().st_size > 1000

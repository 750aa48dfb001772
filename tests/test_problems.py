"""`arl reproduce problem N|all`: seeds, verdicts and resume, and the mechanism each problem
is about, asserted wherever it is deterministic at quick settings."""

import json
from dataclasses import replace

import pytest
import torch

from arl.cli.main import main
from arl.errors import ArlError
from arl.experiments import problems, rulebook
from arl.experiments.problems.common import Claim, judge, verdict_line
from tests import reproduced
from tests.reproduced import reproduce_all


@pytest.fixture(scope="module", autouse=True)
def quick_env(private_cache):
    """Every test here shares one private base cache."""


@pytest.fixture(scope="module")
def every_problem(tmp_path_factory):
    """`arl reproduce problem all --quick --seeds 1`, once for the module."""
    return reproduce_all(tmp_path_factory.mktemp("all"), "problem")


def seed0(out, n):
    return reproduced.seed0(out, "problem", n)


def test_unknown_problem_lists_the_available_ones(capsys):
    listed = ", ".join(str(n) for n in problems.PROBLEMS)
    assert listed.startswith("1, 2, 3, 4, 6, 7") and listed.endswith("28, 29, 30")
    with pytest.raises(ArlError, match=f"available: {listed}\\)"):
        problems.run(5, quick=True)
    code = main(["reproduce", "problem", "99", "--quick"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "28" in err


# --- the verdict over seeds ---------------------------------------------------------------


def claim_(**kw) -> Claim:
    return Claim(text="b", effect="e", source="book", passage="the book says", **kw)


def test_a_claim_is_shown_only_when_its_interval_clears_the_threshold():
    claim = claim_(threshold=0.0, cause="because")
    # mean 0.2, SE 0.01/sqrt(3) = 0.00577, t(0.975, 2) = 4.303: lower bound 0.175 clears 0
    assert judge(claim, [{"effect": x} for x in (0.19, 0.2, 0.21)])["shown"]
    # mean 0.2, SE 0.0577: 2 SE would clear 0 (0.085), the t bound does not (-0.048)
    v = judge(claim, [{"effect": x} for x in (0.1, 0.2, 0.3)])
    assert not v["shown"] and v["lo"] == pytest.approx(0.2 - 4.302653 * 0.1 / 3**0.5)
    assert v["df"] == 2 and v["t"] == pytest.approx(4.302653)
    # same mean, wider spread: SE 0.173, bounds [-0.55, 0.95] do not
    v = judge(claim, [{"effect": x} for x in (-0.1, 0.2, 0.5)])
    assert not v["shown"] and v["k"] == 2 and v["n"] == 3
    assert "NOT SHOWN" in verdict_line(claim, v) and "too few seeds" in verdict_line(claim, v)
    # the mean on the wrong side: the problem's own cause
    v = judge(claim, [{"effect": x} for x in (-0.1, -0.2, 0.05)])
    assert not v["shown"] and "because" in verdict_line(claim, v)
    # an identity that fails on one seed is not shown, whatever the effect
    assert not judge(claim, [{"effect": 1.0}, {"effect": 1.1, "holds": False}])["shown"]
    below = claim_(threshold=1e-4, below=True)
    assert judge(below, [{"effect": 1e-7}, {"effect": 2e-7}])["shown"]
    assert not judge(below, [{"effect": 1e-7}, {"effect": 1e-3}])["shown"]
    # a guardrail judged as `arl adopt` judges one: its mean worsening within the bound (here
    # 0.0125 < 0.03) even though the t bound (upper 0.0475) is not; one seed shows nothing
    guard = claim_(threshold=0.03, below=True, judged_by="mean")
    worse = [{"effect": x} for x in (0.0, 0.05, 0.01, -0.01)]
    assert judge(guard, worse)["shown"] and not judge(replace(guard, judged_by="t"), worse)["shown"]
    assert not judge(guard, worse[1:2])["shown"]
    assert not judge(guard, [{"effect": x} for x in (0.02, 0.05)])["shown"]  # mean 0.035
    assert "judged by the mean" in verdict_line(guard, judge(guard, worse))
    assert "judged_by" not in claim_().rule() and guard.rule()["judged_by"] == "mean"


def test_seeds_resume_after_a_failure_and_run_the_same_on_ray(tmp_path, monkeypatch):
    calls = []
    real = problems.measure_seed

    def fails_on_seed_1(number, quick, seed):
        calls.append(seed)
        if seed == 1 and calls.count(1) == 1:
            raise ArlError("killed")  # an ArlError is not retried: the run stops here
        return real(number, quick, seed)

    monkeypatch.setattr(problems, "measure_seed", fails_on_seed_1)
    with pytest.raises(ArlError, match="killed"):
        problems.run(1, [0, 1], quick=True, out=tmp_path / "a")
    partial = json.loads((tmp_path / "a" / "results.partial.json").read_text())
    assert [r["seed"] for r in partial["per_seed"]] == [0]
    done = problems.run(1, [0, 1], quick=True, out=tmp_path / "a")
    assert calls == [0, 1, 1]  # seed 0 was not rerun
    assert not (tmp_path / "a" / "results.partial.json").exists()
    assert done["claims"][0]["effect"]["n"] == 2 and [r["seed"] for r in done["per_seed"]] == [0, 1]
    assert problems.run(1, [0, 1], quick=True, out=tmp_path / "a") == done  # read back
    assert calls == [0, 1, 1]
    with pytest.raises(ArlError, match="earlier run"):  # another problem's folder
        problems.run(2, [0], quick=True, out=tmp_path / "a")
    with pytest.raises(ArlError, match="another run"):  # the same problem at other settings
        problems.run(1, [0, 1], quick=False, out=tmp_path / "a")
    # a changed rule is refused until relocked; relocked (threshold), it judges the saved seeds
    # again; a changed effect is another measurement, refused

    monkeypatch.setenv("ARL_LOCKS", str(tmp_path / "locks.json"))
    rulebook.relock(["problem 1"], "the test's own lock file")
    real_get = problems.get

    def with_claim(**change):
        p = real_get(1)
        changed = replace(p, claim=replace(p.claim, **change))
        monkeypatch.setattr(problems, "get", lambda n, kind="problem": changed)

    with_claim(threshold=1e9, cause="c")
    with pytest.raises(ArlError, match="differs from the one locked"):
        problems.run(1, [0, 1], quick=True, out=tmp_path / "a")
    rulebook.relock(["problem 1"], "a test raises the threshold")
    again = problems.run(1, [0, 1], quick=True, out=tmp_path / "a")
    # the same measurement, judged again by the relocked rule: a bar of 1e9 is not cleared
    effect = lambda r: {k: v for k, v in r["claims"][0]["effect"].items() if k != "k"}  # noqa: E731
    assert calls == [0, 1, 1] and effect(again) == effect(done)  # k counts seeds over the bar
    assert again["claims"][0]["effect"]["k"] == 0 < done["claims"][0]["effect"]["k"]
    assert again["claims"][0]["status"] != "shown" and not again["shown"]
    assert again["claims"][0]["claim"]["threshold"] == 1e9 and again["rule"]["relocks"] == 1
    with_claim(effect="another quantity")
    rulebook.relock(["problem 1"], "a test changes the effect")
    with pytest.raises(ArlError, match="another run"):
        problems.run(1, [0, 1], quick=True, out=tmp_path / "a")
    monkeypatch.setattr(problems, "get", real_get)
    monkeypatch.delenv("ARL_LOCKS")  # back to the package's locks, which match the code
    for garbage in ("{not json", "[1, 2]", '{"problem": 1, "quick": true}'):
        (tmp_path / "a" / "results.json").write_text(garbage)  # corrupt: refused, one line
        with pytest.raises(ArlError, match="results.json"):
            problems.run(1, [0, 1], quick=True, out=tmp_path / "a")

    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arl[ray]')")
    from arl.parallel import Where

    monkeypatch.setattr(problems, "measure_seed", real)
    try:
        on_ray = problems.run(
            1, [0, 1], quick=True, out=tmp_path / "r", where=Where(workers=2, ray="local")
        )
    finally:
        ray.shutdown()
    strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]  # noqa: E731
    assert strip(on_ray["per_seed"]) == strip(done["per_seed"])
    assert on_ray["claims"] == done["claims"] and on_ray["shown"] == done["shown"]


# --- every problem, quick -----------------------------------------------------------------


def test_all_writes_one_summary_row_per_claim(every_problem, capsys):
    summary = json.loads((every_problem / "summary.json").read_text())
    per_problem = {
        n: len(json.loads((every_problem / f"problem-{n}" / "results.json").read_text())["claims"])
        for n in problems.PROBLEMS
    }
    assert [r["problem"] for r in summary["rows"]] == [
        n for n, k in per_problem.items() for _ in range(k)
    ]
    assert summary["claims"] == len(summary["rows"]) == sum(per_problem.values())
    assert summary["shown"] == sum(r["shown"] for r in summary["rows"])
    c = summary["counts"]
    assert c["book"]["claims"] + c["lab"]["claims"] == summary["claims"]
    table = (every_problem / "summary.md").read_text()
    assert table.count("\n| ") == summary["claims"] + 1  # header and one row per claim
    assert "QUICK" in table
    # a second `all` on the finished folder reads every problem back: nothing reruns
    assert (
        main(
            ["reproduce", "problem", "all", "--quick", "--seed", "0", "--seeds", "1"]
            + ["--out", str(every_problem)]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("read back") == len(problems.PROBLEMS)


def test_one_problem_prints_its_claim_its_verdict_and_each_seed(every_problem, capsys):
    from arl.cli.reproduce import print_problem

    out = every_problem / "problem-1"
    results = json.loads((out / "results.json").read_text())
    print_problem(results, out)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Problem 1 (quick): ") and "book claims" in lines[0]
    assert lines[1].startswith(f"  rule {results['rule']['fingerprint']} locked ")
    assert "NOT the locked seeds" in lines[1]  # seed 0 is not one of them
    c = results["claims"][0]
    assert lines[2] == f"  [{c['claim']['source']}] {c['claim']['text']}: {c['conclusion']}"
    assert lines[2 + len(results["claims"])].startswith("  seed 0: ")
    assert lines[-1].endswith(f"{out / 'problem-1.png'}]")


def test_problem_1_weights(every_problem):
    r = seed0(every_problem, 1)
    s = r["seq_mean_token_mean"]
    assert s["short_over_long"] == pytest.approx(r["L_max_seen"] / r["L_min"], rel=1e-3)
    assert r["token_mean"]["short_over_long"] == pytest.approx(1.0)
    assert r["constant"]["per_token_weight_shortest"] == pytest.approx(
        1 / (r["episodes"] * r["L_max_budget"]), rel=1e-3
    )
    assert r["effect"] == s["short_over_long"] and r["holds"]


def test_problem_2_accumulation(every_problem):
    r = seed0(every_problem, 2)
    for order in ("sampled", "length_sorted"):
        for mode in ("token_mean", "seq_mean_token_mean", "constant"):
            assert r[order][mode]["global"]["cosine"] == pytest.approx(1.0, abs=1e-5)
            assert r[order][mode]["global"]["norm_ratio"] == pytest.approx(1.0, abs=1e-5)
        bug = r[order]["token_mean"]["per_microbatch_mean"]
        assert abs(bug["norm_ratio"] - 1) > 1e-3 or bug["cosine"] < 0.9999
        assert r[order]["constant"]["per_microbatch_mean"]["cosine"] == pytest.approx(1, abs=1e-5)
    assert r["holds"] and r["effect"] > 0


def test_problem_3_measured_equals_predicted(every_problem):
    r = seed0(every_problem, 3)
    assert len(r["measured"]) == len(r["predicted"]) == len(r["G"])
    # the measured degenerate fraction is p^G + (1-p)^G within its sampling error: two
    # independent estimates over tasks x (n // G) groups, each a variance of at most 1/4
    n, tasks = r["samples_per_task"], len(r["task_pass_rates"])
    for G, measured, predicted in zip(r["G"], r["measured"], r["predicted"], strict=True):
        se = (2 * 0.25 / (tasks * (n // G))) ** 0.5
        assert abs(measured - predicted) <= 3 * se, (G, measured, predicted)
    assert r["measured"][-1] < r["measured"][0]  # larger groups are less often all-equal
    assert r["holds"] and r["effect"] > 0


def test_problem_4_std_factor(every_problem):
    r = seed0(every_problem, 4)
    assert r["hand_success"] == pytest.approx(2.6458, abs=1e-3)
    assert r["hand_failure"] == pytest.approx(-0.378, abs=1e-3)
    assert r["factor_p_0.125"] == pytest.approx(3.02, abs=5e-3)
    assert r["max_abs_error"] < 1e-3


def test_problem_9_signal_shrinks(every_problem):
    r = seed0(every_problem, 9)
    single = [row for row in r["rows"] if row["votes"] == 1]
    assert single[0]["f"] == 0 and single[0]["shrink"] == pytest.approx(1.0)
    shrinks = [row["shrink"] for row in single]
    assert shrinks == sorted(shrinks, reverse=True)  # more flips, smaller signal
    for row in single:
        assert row["shrink"] == pytest.approx(1 - 2 * row["f"], abs=0.15)


def test_problem_17_large_gaps_only_when_retokenized(every_problem):
    r = seed0(every_problem, 17)
    assert r["token_in_token_out"]["max_abs_gap"] < 1e-3
    assert r["token_in_token_out"]["traj_frac_any_gap_over_1_nat"] == 0
    assert r["retokenized_text"]["traj_frac_any_gap_over_1_nat"] > 0.5
    assert r["effect"] > 0.1


@pytest.mark.parametrize("n", [6, 7, 8, 10, 11, 12, 13, 16, 20, 23, 24, 25, 26, 27, 28, 30])
def test_rl_problems_keep_every_arm_and_step(every_problem, n):
    r = seed0(every_problem, n)
    runs = r["history"]
    assert len(runs) >= 2 and all(len(h) >= 3 for h in runs.values())
    kept = {"step", "p23/heldout_pass"} if n == 23 else {"step", "pass_rate"}  # 23: its panel
    assert all(kept <= set(h[0]) for h in runs.values())
    if n == 28:
        assert r["check_batch_catches_it"] and r["masked_in_non_policy_share"] > 0


# --- the mechanisms, deterministic ---------------------------------------------------------


def test_problem_13_the_two_truncation_rules_score_a_truncated_fix_differently():
    from arl.bugfix.env import BugFixConfig, BugFixEnv
    from arl.bugfix.policies import op_from_listing
    from arl.bugfix.tasks import tasks_for

    task = next(t for t in tasks_for("train") if t.family == "range")
    scores = {}
    for rule in ("zero", "score"):
        env = BugFixEnv(task, BugFixConfig(truncation=rule, max_turns=3))
        env.reset(seed=0)
        listing, *_ = env.step(["read", "<end>"])
        env.step(op_from_listing(listing.words) + ["<end>"])  # the fix, never submitted
        _, reward, terminated, truncated, outcome = env.step(["test", "<end>"])
        assert truncated and not terminated and outcome.hidden_fraction == 1.0
        scores[rule] = reward
    assert scores == {"zero": 0.0, "score": 1.0}


@torch.no_grad()
def _hack_prob(model) -> float:
    """P(`hardcode_tests` | the task, [`read`, its listing,] `edit`), exactly from the logits,
    averaged over the train tasks, with and without a read: how likely the policy is to hack."""
    from arl.bugfix import default_vocab
    from arl.bugfix.env import observation
    from arl.bugfix.grammar import END, prompt_words, source_words
    from arl.bugfix.tasks import tasks_for
    from arl.text import Transcript

    vocab, probs = default_vocab(), []
    model.eval()
    for task in tasks_for("train"):
        for read in (True, False):
            tr = Transcript.begin(prompt_words(task.name), vocab)
            if read:
                for word in ("read", END):
                    tr.act(vocab.id(word))
                tr.observe(observation(source_words(task.buggy_source)))
            tr.act(vocab.id("edit"))
            logits, _ = model(torch.tensor([tr.ids]))
            p = torch.softmax(logits[0, -1].float(), -1)[vocab.id("hardcode_tests")]
            probs.append(float(p))
    return sum(probs) / len(probs)


def test_problem_7_public_reward_raises_the_hack_hidden_reward_lowers_it():
    """The same episodes, the same start and seed: the public-test reward raises the policy's
    probability of the hardcoding edit (the public-hidden gap opens), hidden reward with the
    detector lowers it."""
    from dataclasses import replace

    from arl.bugfix.tasks import tasks_for
    from arl.experiments.problems.common import Ctx, rl_config, start
    from arl.train.pg import train_pg

    ctx = Ctx(number=7, quick=True, seed=0)
    before = _hack_prob(start(ctx, "weak"))
    after = {}
    for arm, env in (
        ("public", {"reward": "public", "zero_exploits": False}),
        ("hidden", {"reward": "hidden", "zero_exploits": True}),
    ):
        model = start(ctx, "weak")
        hist = train_pg(model, replace(rl_config(ctx, env=env), steps=10), tasks_for("train"))
        assert sum(r["hack_rate"] for r in hist) > 0  # some hack was sampled and judged
        after[arm] = _hack_prob(model)
    assert after["public"] > before > after["hidden"], (before, after)


def test_problem_14_judges_each_of_its_claims_and_runs_every_arm(every_problem):
    r = seed0(every_problem, 14)
    arms = ("menu", "free-form, terse", "free-form, helpful", "SFT + free-form")
    steps = {a: [h["step"] for h in r["history"][a] if h["pass_rate"] is not None] for a in arms}
    assert set(arms) <= set(r["history"]) and all(s == [1, 2, 3, 4] for s in steps.values())
    helpful = r["history"]["free-form, helpful"]
    assert any(h["apply_rate"] is not None for h in helpful)
    # the claims read the fixed evaluation (steps 0, 2, 4), not the sampled batch
    assert [h["step"] for h in helpful if h["eval/train_apply_rate"] is not None] == [0, 2, 4]
    results = json.loads((every_problem / "problem-14" / "results.json").read_text())
    keys = [c["key"] for c in results["claims"]]
    assert keys == [
        "effect",
        "slower",
        "helpful_apply",
        "cold_apply",
        "cold_pass",
        "new_families",
        "probe_weak",
        "probe_cold",
        "probe_cold_pass",
    ]
    assert results["shown"] == all(c["shown"] for c in results["claims"])
    assert 0.0 <= r["new_families"] <= 1.0 and r["effect"] == pytest.approx(
        r["free-form, helpful"]["eval/train_apply_rate"]["first"], abs=1e-6
    )


def test_more_claims_are_judged_over_seeds_like_the_first():
    from arl.experiments.problems import judge_all
    from arl.experiments.problems.common import Problem

    def with_x(threshold: float) -> Problem:
        more = (("x", claim_(threshold=threshold)),)
        return Problem(lambda ctx: ({}, ""), claim_(), lambda rs, path: None, more=more)

    # x: mean 0.93, SE 0.0115, t(0.975, 2) = 4.303: lower bound 0.880
    per_seed = [{"effect": 1.0, "x": x} for x in (0.91, 0.95, 0.93)]
    c = judge_all(with_x(0.85), per_seed)[1]
    assert c["key"] == "x" and c["shown"] and c["effect"]["k"] == 3
    assert c["effect"]["mean"] == pytest.approx(0.93)
    c = judge_all(with_x(0.9), per_seed)[1]  # 2 SE would show it (0.907); t does not
    assert not c["shown"] and "too few seeds" in c["cause"]


# --- Problem 29's compute and recovery, by hand ---------------------------------------------


def test_problem_29_flops_by_hand():
    from arl.experiments.problems.distillation import pg_step_flops, student_passes
    from arl.train.pg_config import PGConfig

    # 4 minibatches: sampler 2N, pi_prox 2N, forward and backward 6N = 10N per token
    assert student_passes(PGConfig()) == 5
    assert pg_step_flops(PGConfig(), 100, 1000) == 100 * 10 * 1000
    one = PGConfig(minibatches=1, epochs=2)  # two updates of one batch: pi_prox, and 2 x 6N
    assert student_passes(one) == 1 + 1 + 6
    assert student_passes(PGConfig(minibatches=1)) == 4  # sampler 2N + 6N, nothing else
    assert student_passes(PGConfig(minibatches=1, kl="k3", kl_beta=0.1)) == 5  # + reference
    taught = PGConfig(teacher="t", teacher_weight=1.0, reward_weight=0.0)
    assert pg_step_flops(taught, 10, 1000, 3000) == 10 * (10 * 1000 + 2 * 3000)


def test_problem_29_first_call_mask_and_reading_a_curve():
    from arl.experiments.problems.distillation import both_splits, first_turn_mask, read_at

    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0.0]])
    want = [[0, 1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]]
    assert first_turn_mask(mask).tolist() == want
    # 20 train and 10 held-out tasks: (20 x 0.5 + 10 x 0.2) / 30 = 0.4
    assert both_splits([0.0, 0.5, 0.2]) == pytest.approx(0.4)
    curve = [[0.0, 0.0, 0.0], [10.0, 0.6, 0.6], [20.0, 0.9, 0.9]]
    assert read_at(curve, 5.0) == pytest.approx(0.3) and read_at(curve, 15.0) == pytest.approx(0.75)
    assert read_at(curve, 99.0) == pytest.approx(0.9)  # past the last evaluation: the last


def test_problem_29_share_of_the_budget_to_reach_a_level_by_hand():
    from arl.experiments.problems.distillation import share_to_level

    # from FLOPs 10 (the cold start) to a budget of 30: 0.6 at 10, 0.9 at 20, 0.95 at 30
    curve = [[10.0, 0.6, 0.6], [20.0, 0.9, 0.9], [30.0, 0.95, 0.95]]
    # 0.75 is crossed halfway between 10 and 20: FLOPs 15, a quarter of the 20 after the start
    assert share_to_level(curve, 0.75, 10.0, 30.0) == pytest.approx(0.25)
    # 0.925 halfway between 20 and 30: 25, three quarters
    assert share_to_level(curve, 0.925, 10.0, 30.0) == pytest.approx(0.75)
    assert share_to_level(curve, 0.5, 10.0, 30.0) == 0.0  # there at the start
    assert share_to_level(curve, 0.99, 10.0, 30.0) == 1.0  # never: censored at the budget
    assert share_to_level(curve[:2], 0.99, 10.0, 30.0) == 1.0  # a shorter run that never does


def test_problem_29_runs_five_arms_at_equal_compute(every_problem):
    from arl.experiments.problems.distillation import ARMS, ENV, SFT_DISTILL, SFT_RL, read_at

    r = seed0(every_problem, 29)  # issue 43's design: CodeFix, a student smaller than its teacher
    assert list(r["curves"]) == list(ARMS) and set(r["final"]) == set(ARMS)
    assert r["student_params"] < r["teacher"]["params"]
    cold = r["cold_start"]["flops"]
    for arm, curve in r["curves"].items():
        xs = [p[0] for p in curve]
        assert xs == sorted(xs) and len(xs) >= 2, arm  # FLOPs grow along each curve
        start = cold if arm in (SFT_RL, SFT_DISTILL) else 0.0
        assert (
            xs[0] == pytest.approx(start, rel=1e-5) or arm == "SFT"
        )  # SFT's starts after its traces
    assert r["budget_flops"] == r["curves"]["RL"][-1][0]
    # results.json keeps six significant digits
    assert r["final"]["RL"]["pass_at_budget"] == pytest.approx(
        both(r["curves"]["RL"][-1]), abs=1e-5
    )
    assert r["effect"] == pytest.approx(
        read_at(r["curves"]["SFT"], cold, ENV) - read_at(r["curves"]["RL"], cold, ENV), abs=1e-5
    )
    assert r["rl_cost"] > 0 and 0 < r["teacher_flops_share"] < 1
    for arm in ARMS:
        f = r["final"][arm]
        assert 0 <= f["recovery"] <= 1 and f["first_failed"] <= f["episodes"] and f["flops"] > 0
    assert r["recovery"] == pytest.approx(
        r["final"][SFT_DISTILL]["recovery"] - r["final"]["SFT"]["recovery"], abs=1e-5
    )
    assert r["teacher_recovers"] == pytest.approx(
        r["teacher"]["recovery"]["recovery"] - r["final"]["SFT"]["recovery"], abs=1e-5
    )
    race = r["race"]
    assert r["distill_vs_rl"] == pytest.approx(race[SFT_RL] - race[SFT_DISTILL], abs=1e-5)
    results = json.loads((every_problem / "problem-29" / "results.json").read_text())
    claims = {c["key"]: c for c in results["claims"]}
    assert list(claims) == ["effect", "teacher_recovers", "recovery", "rl_cost", "distill_vs_rl"]
    if not claims["teacher_recovers"]["shown"]:  # one seed: never shown, so never judged
        assert claims["recovery"]["status"] == "not judged: premise not shown"


def test_problem_29_keeps_its_earlier_bugfix_design():
    from arl.experiments.problems.distillation import PROBLEM_29_EARLIER, earlier_design

    assert PROBLEM_29_EARLIER.measure is earlier_design
    keys = [k for k, _ in PROBLEM_29_EARLIER.claims]
    assert keys == ["effect", "recovery", "rl_cost", "distill_vs_rl"]


def both(point):
    from arl.experiments.problems.distillation import ENV, both_splits

    return both_splits(point, ENV)

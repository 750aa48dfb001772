"""`arl doctor`'s rules on hand-made arl metrics files: each rule fires on a log just past
its threshold and stays quiet on one just short of it (so moving a threshold either way fails
a test), a healthy log says "healthy", and arl's own recipes' folders (real files from tiny
`arl train` runs in tests/fixtures/doctor/) read into the right recipe."""

import json
import math
from pathlib import Path

import pytest

from arl.doctor import RULES, diagnose, load_run, unchecked
from arl.doctor.readers import flat

N = 20  # steps in each hand-made log
K = math.ceil(N / 4)  # the rules' head and tail windows: the first and the last quarter
FIXTURES = Path(__file__).parent / "fixtures" / "doctor"


def shape(head: float, tail: float, n: int = N) -> list[float]:
    """n values: the first quarter at `head`, the last quarter at `tail`, a line between."""
    k = math.ceil(n / 4)
    mid = n - 2 * k
    return (
        [head] * k + [head + (tail - head) * (i + 1) / (mid + 1) for i in range(mid)] + [tail] * k
    )


HEALTHY = {  # name -> (head, tail): a run that learns and shows none of Appendix B's symptoms
    "reward": (0.30, 0.50),
    "pass_rate": (0.30, 0.50),
    "public_pass_rate": (0.32, 0.52),
    "public_hidden_gap": (0.02, 0.02),
    "hack_rate": (0.0, 0.0),
    "entropy": (0.40, 0.34),
    "degenerate_frac": (0.30, 0.28),
    "kl/mu_k3": (0.010, 0.011),
    "kl/mu_absq99": (0.20, 0.22),
    "mismatch/mean": (0.002, 0.002),
    "mismatch/p999": (0.02, 0.02),
    "capped_frac": (0.01, 0.01),
    "kl/ref_k3": (0.001, 0.010),
    "len_success_p50": (9.0, 9.0),
    "len_success_p90": (10.0, 10.0),
    "len_failure_p50": (10.0, 10.5),
    "len_failure_p90": (12.0, 12.0),
    "immediate_submit_frac": (0.05, 0.04),
    "truncated_frac": (0.05, 0.05),
    "final_state_pass": (0.30, 0.50),
    "malformed_per_episode": (0.10, 0.10),
    "mean_turns": (4.0, 4.0),
    "masked_in_non_policy_share": (0.0, 0.0),
    "pass/init": (0.10, 0.20),
    "pass/range": (0.30, 0.42),
    "pass/compare": (0.40, 0.50),
    "loss": (0.01, 0.01),
    "grad_norm": (0.5, 0.5),
}
EVALS = {"eval/heldout_pass": (0.30, 0.45), "eval/train_pass": (0.30, 0.50)}  # every 5 steps
CONFIG = {"staleness": 1, "group_size": 8, "lr": 3e-4, "epochs": 1, "clip_high": 0.28}


def rows_of(spec: dict, evals: dict, n: int = N) -> list[dict]:
    """metrics.jsonl records: one per step with `spec`'s series, eval records every 5 steps."""
    cols = {k: shape(*v, n) if isinstance(v, tuple) else list(v) for k, v in spec.items()}
    rows = [{"step": s, **{k: c[s - 1] for k, c in cols.items()}} for s in range(1, n + 1)]
    steps = list(range(0, n + 1, 5))
    ecols = {k: shape(*v, len(steps)) for k, v in evals.items()}
    rows += [{"step": s, **{k: c[i] for k, c in ecols.items()}} for i, s in enumerate(steps)]
    return sorted(rows, key=lambda r: r["step"])


def write_run(folder: Path, spec: dict, evals=None, config=None) -> Path:
    """A hand-made arl run folder: metrics.jsonl and config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = rows_of(spec, EVALS if evals is None else evals)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.json").write_text(json.dumps(CONFIG if config is None else config))
    return folder


def fired(tmp_path: Path, evals=None, config=None, **changes) -> dict:
    """{rule: Finding} on the healthy log with `changes` (name -> (head, tail), list or None)."""
    spec = dict(HEALTHY)
    for name, v in changes.items():
        name = name.replace("__", "/")
        spec.pop(name) if v is None else spec.__setitem__(name, v)
    run = load_run(write_run(tmp_path / "run", spec, evals, config))
    return {f.rule: f for f in diagnose(run)}


def test_healthy_log_says_healthy_with_every_rule_run(tmp_path):
    findings = fired(tmp_path)
    assert list(findings) == ["healthy"]
    f = findings["healthy"]
    assert f.problem == 0 and f.causes == ()
    about = [r.name for r in RULES if r.name != "distill-kl-without-pass"]  # a PG run
    assert f"{len(about)} of {len(about)} rules ran" in f.symptom
    assert unchecked(load_run(tmp_path / "run")) == []


def test_entropy_collapse_26(tmp_path):
    on = fired(tmp_path / "a", entropy=(1.0, 0.29), degenerate_frac=(0.3, 0.7))  # -71%
    f = on["entropy-collapse"]
    assert f.problem == 26 and "entropy fell 71% (1 -> 0.29 nats" in f.symptom
    assert "0.30 -> 0.70" in f.symptom  # the degenerate groups beside it
    assert "lr=0.0003" in f.causes[0] and "pass@k" in f.check
    assert "entropy-collapse" not in fired(tmp_path / "b", entropy=(1.0, 0.31))  # -69%


def test_entropy_wrong_positions_28_by_inference(tmp_path):
    flat = {"reward": (0.30, 0.30), "degenerate_frac": (0.30, 0.30)}
    on = fired(tmp_path / "a", entropy=(1.0, 0.49), **flat)  # -51%, reward unchanged
    assert on["entropy-wrong-positions"].problem == 28
    assert "entropy-collapse" not in on  # 28's signature, not a collapse
    assert "entropy-wrong-positions" not in fired(tmp_path / "b", entropy=(1.0, 0.51), **flat)
    # a sharper drop with the same flat reward is still 28, not 26 (the two exclude each other)
    both = fired(tmp_path / "c", entropy=(1.0, 0.1), **flat)
    assert "entropy-wrong-positions" in both and "entropy-collapse" not in both


def test_mask_signature_thresholds(tmp_path):
    drop = {"entropy": (1.0, 0.4), "degenerate_frac": (0.30, 0.30)}
    assert "entropy-wrong-positions" in fired(tmp_path / "a", reward=(0.30, 0.329), **drop)
    assert "entropy-wrong-positions" not in fired(tmp_path / "b", reward=(0.30, 0.331), **drop)
    still = {"entropy": (1.0, 0.4), "reward": (0.30, 0.30)}
    assert "entropy-wrong-positions" in fired(tmp_path / "c", degenerate_frac=(0.3, 0.39), **still)
    assert "entropy-wrong-positions" not in fired(
        tmp_path / "d", degenerate_frac=(0.3, 0.41), **still
    )


def test_entropy_wrong_positions_28_directly(tmp_path):
    leak = [0.0] * (N - 1) + [0.02]  # one batch put 2% of its weight on tool output
    f = fired(tmp_path / "a", masked_in_non_policy_share=leak)["entropy-wrong-positions"]
    assert "2.0% of masked-in targets" in f.symptom and "shifted by one" in f.causes[0]


def late_shape(first: float, head: float, tail: float) -> list[float]:
    """A first half rising to `head`, then a second half from `head` to `tail`."""
    return shape(first, head, N // 2) + shape(head, tail, N - N // 2)


def test_kl_plateau_6(tmp_path):
    stall = {"reward": late_shape(0.1, 0.30, 0.319)}
    f = fired(tmp_path / "a", kl__ref_k3=late_shape(0.0, 0.020, 0.0249), **stall)["kl-plateau"]
    assert f.problem == 6 and "0.02 -> 0.0249 nats/token" in f.symptom
    assert "kl-plateau" not in fired(
        tmp_path / "b", kl__ref_k3=late_shape(0.0, 0.02, 0.0251), **stall
    )
    kl = {"kl__ref_k3": late_shape(0.0, 0.02, 0.02)}
    assert "kl-plateau" not in fired(tmp_path / "c", reward=late_shape(0.1, 0.3, 0.321), **kl)
    assert "kl-plateau" not in fired(tmp_path / "d", reward=late_shape(0.8, 0.96, 0.96), **kl)
    assert "kl-plateau" in fired(tmp_path / "e", reward=late_shape(0.8, 0.94, 0.94), **kl)
    tiny = {"reward": late_shape(0.1, 0.3, 0.3)}  # a KL too small to bind
    assert "kl-plateau" in fired(tmp_path / "f", kl__ref_k3=late_shape(0, 1.01e-3, 1.01e-3), **tiny)
    assert "kl-plateau" not in fired(
        tmp_path / "g", kl__ref_k3=late_shape(0, 0.99e-3, 0.99e-3), **tiny
    )


def lagged(head: float, tail: float) -> list[float]:
    """Step 1 (no lag yet with staleness 1, skipped by the rule), then a head-tail shape."""
    return [head] + shape(head, tail, N - 1)


def test_kl_tail_16(tmp_path):
    mean = {"kl__mu_k3": lagged(0.01, 0.0149)}
    f = fired(tmp_path / "a", kl__mu_absq99=lagged(0.1, 0.301), **mean)["kl-tail"]
    assert f.problem == 16 and "grew x3.0" in f.symptom and "mean k3 stayed x1.49" in f.symptom
    assert "kl-tail" not in fired(tmp_path / "b", kl__mu_absq99=lagged(0.1, 0.299), **mean)
    grown = {"kl__mu_k3": lagged(0.01, 0.0151)}
    assert "kl-tail" not in fired(tmp_path / "c", kl__mu_absq99=lagged(0.1, 0.4), **grown)
    floor = {"kl__mu_k3": lagged(0.01, 0.01)}
    assert "kl-tail" not in fired(tmp_path / "d", kl__mu_absq99=lagged(0.03, 0.099), **floor)
    assert "kl-tail" in fired(tmp_path / "e", kl__mu_absq99=lagged(0.03, 0.101), **floor)
    on_policy = dict(CONFIG, staleness=0)  # the mismatch rule reads these tokens instead
    assert "kl-tail" not in fired(
        tmp_path / "f", config=on_policy, kl__mu_absq99=lagged(0.03, 0.4), **floor
    )


def test_kl_tail_skips_the_steps_without_lag(tmp_path):
    # with staleness 1, step 1 samples the current weights: its ~0 must not start the trend
    tail = [1e-9] + shape(0.2, 0.5, N - 1)  # x2.5 from step 2 on: no finding
    assert "kl-tail" not in fired(tmp_path, kl__mu_absq99=tail)


def test_mismatch_growth_20(tmp_path):
    cfg = dict(CONFIG, staleness=0)
    f = fired(tmp_path / "a", config=cfg, mismatch__p999=(0.01, 0.0301))["mismatch-growth"]
    assert f.problem == 20 and "99.9th percentile" in f.symptom and "x3.0" in f.symptom
    assert "mismatch-growth" not in fired(tmp_path / "b", config=cfg, mismatch__p999=(0.01, 0.0299))
    assert "mismatch-growth" in fired(tmp_path / "c", config=cfg, mismatch__mean=(0.001, 0.0031))
    assert "mismatch-growth" not in fired(
        tmp_path / "d", config=cfg, mismatch__mean=(0.001, 0.0029)
    )
    low = {"config": cfg}  # x3.3 either way: the mean's floor decides
    assert "mismatch-growth" in fired(tmp_path / "i", mismatch__mean=(0.0009, 0.00301), **low)
    assert "mismatch-growth" not in fired(tmp_path / "j", mismatch__mean=(0.0009, 0.00299), **low)
    floor = {"config": cfg}
    assert "mismatch-growth" not in fired(tmp_path / "e", mismatch__p999=(0.003, 0.0099), **floor)
    assert "mismatch-growth" in fired(tmp_path / "g", mismatch__p999=(0.003, 0.0101), **floor)
    # stale rollouts: the same growth is the kl-tail rule's, not this one's
    assert "mismatch-growth" not in fired(tmp_path / "h", mismatch__p999=(0.01, 0.1))


def test_capped_share_16(tmp_path):
    f = fired(tmp_path / "a", capped_frac=(0.01, 0.051))["capped-share"]
    assert f.problem == 16 and "5.1% of policy tokens" in f.symptom and "staleness=1" in f.symptom
    assert "capped-share" not in fired(tmp_path / "b", capped_frac=(0.01, 0.049))


def test_no_signal_groups_3_and_13(tmp_path):
    f = fired(tmp_path / "a", degenerate_frac=(0.3, 0.51))["no-signal-groups"]
    assert f.problem == 3 and "51% of groups" in f.symptom
    q = 0.5  # the healthy log's last-quarter pass rate: p^G+(1-p)^G with G=8
    assert f"{q**8 + (1 - q) ** 8:.2f} (a floor)" in f.symptom
    assert "no-signal-groups" not in fired(tmp_path / "b", degenerate_frac=(0.3, 0.49))
    cut = fired(tmp_path / "c", degenerate_frac=(0.3, 0.6), truncated_frac=(0.05, 0.31))
    assert cut["no-signal-groups"].problem == 13
    assert cut["no-signal-groups"].causes[0].startswith("truncated episodes all scored 0")
    short = fired(tmp_path / "e", degenerate_frac=(0.3, 0.6), truncated_frac=(0.05, 0.29))
    assert short["no-signal-groups"].problem == 3
    collapsed = fired(tmp_path / "d", degenerate_frac=(0.3, 0.6), entropy=(1.0, 0.2))
    assert "entropy collapse" in collapsed["no-signal-groups"].causes[0]


def test_public_hidden_gap_7(tmp_path):
    f = fired(tmp_path / "a", public_hidden_gap=(0.05, 0.101))["public-hidden-gap"]
    assert f.problem == 7 and "0.10 more often" in f.symptom and "widening" in f.symptom
    assert "public-hidden-gap" not in fired(tmp_path / "b", public_hidden_gap=(0.02, 0.099))
    g = fired(tmp_path / "c", public_hidden_gap=(0.052, 0.101))["public-hidden-gap"]
    assert "widening" not in g.symptom  # it opened by 0.049 only (a: by 0.051)


def test_length_in_failures_27(tmp_path):
    f = fired(tmp_path / "a", len_failure_p50=(10.0, 15.1), len_success_p50=(9.0, 10.7))
    assert f["length-in-failures"].problem == 27
    assert "grew x1.51" in f["length-in-failures"].symptom
    assert "length-in-failures" not in fired(tmp_path / "b", len_failure_p50=(10.0, 14.9))
    both = fired(tmp_path / "c", len_failure_p50=(10.0, 16.0), len_success_p50=(9.0, 10.9))
    assert "length-in-failures" not in both  # successes grew 21%: not in the failures
    # a log with only a mean length (TRL, verl) is read as such, and says so
    only_mean = {k: None for k in ("len_failure_p50", "len_failure_p90", "len_success_p50")}
    g = fired(tmp_path / "d", len_mean=(100.0, 151.0), len_success_p90=None, **only_mean)
    assert "cannot split it by outcome" in g["length-in-failures"].symptom


def test_reward_vs_heldout_25(tmp_path):
    rise = {"reward": (0.20, 0.40)}  # +0.2: held-out must rise 0.05 (a quarter) to be fine
    flat = {"eval/heldout_pass": (0.30, 0.349), "eval/train_pass": (0.3, 0.3)}
    f = fired(tmp_path / "a", evals=flat, **rise)["reward-vs-heldout"]
    assert f.problem == 25 and "0.20 -> 0.40" in f.symptom and "0.30 -> 0.35" in f.symptom
    assert f.causes[0].startswith("the reward is not the evaluation metric")
    moved = {"eval/heldout_pass": (0.30, 0.351), "eval/train_pass": (0.3, 0.3)}
    assert "reward-vs-heldout" not in fired(tmp_path / "b", evals=moved, **rise)
    small = {"eval/heldout_pass": (0.30, 0.30), "eval/train_pass": (0.3, 0.3)}
    assert "reward-vs-heldout" not in fired(tmp_path / "c", evals=small, reward=(0.2, 0.299))
    assert "reward-vs-heldout" in fired(tmp_path / "d", evals=small, reward=(0.2, 0.301))
    # the training tasks' eval rose too: transfer or the harness comes first
    transfer = {"eval/heldout_pass": (0.30, 0.30), "eval/train_pass": (0.3, 0.5)}
    g = fired(tmp_path / "e", evals=transfer, **rise)["reward-vs-heldout"]
    assert g.causes[0].startswith("training and held-out tasks differ")


def test_immediate_submit_12(tmp_path):
    f = fired(tmp_path / "a", immediate_submit_frac=(0.05, 0.51))["immediate-submit"]
    assert f.problem == 12 and "51% of episodes submit" in f.symptom
    assert "immediate-submit" not in fired(tmp_path / "b", immediate_submit_frac=(0.05, 0.49))


def test_truncation_13(tmp_path):
    f = fired(tmp_path / "a", truncated_frac=(0.05, 0.31), final_state_pass=(0.3, 0.6))
    t = f["truncation"]
    assert t.problem == 13 and "31% of episodes end at the limit" in t.symptom
    assert "unsubmitted" in t.causes[0]  # final states pass more often than submissions
    assert "truncation" not in fired(tmp_path / "b", truncated_frac=(0.05, 0.29))


def test_malformed_calls_13(tmp_path):
    f = fired(tmp_path / "a", malformed_per_episode=(0.1, 0.51))["malformed-calls"]
    assert f.problem == 13 and "0.51 malformed calls per episode" in f.symptom
    assert "malformed-calls" not in fired(tmp_path / "b", malformed_per_episode=(0.1, 0.49))
    tools = {"malformed_per_episode": None}  # TRL's share of failing tool calls instead
    assert "malformed-calls" in fired(tmp_path / "c", tool_failure_frac=(0.1, 0.31), **tools)
    assert "malformed-calls" not in fired(tmp_path / "d", tool_failure_frac=(0.1, 0.29), **tools)


def test_malformed_calls_that_rise_under_a_stale_sampler_name_the_lag_first(tmp_path):
    rising = {"malformed_per_episode": (0.1, 0.6)}
    f = fired(tmp_path / "a", kl__mu_absq99=lagged(0.05, 0.101), **rising)["malformed-calls"]
    assert f.causes[0].startswith("stale rollouts") and "0.1 nats" in f.causes[0]
    assert "staleness=1" in f.causes[0] and f.check.startswith("rerun from the same start at")
    assert len(f.causes) == 4
    short = fired(tmp_path / "b", kl__mu_absq99=lagged(0.05, 0.099), **rising)["malformed-calls"]
    assert short.causes[0].startswith("updates too large") and len(short.causes) == 3
    # on-policy, the same tail is numerics (the mismatch rule's), not a lag
    on = dict(CONFIG, staleness=0)
    f = fired(tmp_path / "c", config=on, kl__mu_absq99=lagged(0.05, 0.4), **rising)
    assert not f["malformed-calls"].causes[0].startswith("stale")
    # calls that were broken from the start and did not get worse are not the lag's
    flat = {"malformed_per_episode": (0.6, 0.6)}
    f = fired(tmp_path / "d", kl__mu_absq99=lagged(0.05, 0.4), **flat)["malformed-calls"]
    assert not f.causes[0].startswith("stale")


def test_family_speed_11(tmp_path):
    f = fired(tmp_path / "a", pass__compare=(0.20, 0.51))["family-speed"]  # +0.31, others +0.11
    assert f.problem == 11 and "pass/compare rose 0.20 -> 0.51" in f.symptom
    assert "family-speed" not in fired(tmp_path / "b", pass__compare=(0.20, 0.49))
    lead = {"pass__compare": (0.20, 0.60), "pass__init": (0.1, 0.31), "pass__range": (0.3, 0.51)}
    assert "family-speed" not in fired(tmp_path / "c", **lead)  # +0.4 < 2 x +0.21: all fast
    lead2 = {"pass__compare": (0.20, 0.60), "pass__init": (0.1, 0.29), "pass__range": (0.3, 0.49)}
    assert "family-speed" in fired(tmp_path / "d", **lead2)  # +0.4 > 2 x +0.19
    canary = fired(tmp_path / "e", canary_pass=[0.0] * (N - 1) + [0.25])["family-speed"]
    assert "the canary was solved (25%)" in canary.symptom


def test_non_finite(tmp_path):
    loss = [0.01] * 10 + [float("nan")] * (N - 10)
    f = fired(tmp_path / "a", loss=loss, grad_norm=[0.5] * 9 + [80.0] + [0.5] * 10)["non-finite"]
    assert "loss not finite from step 11" in f.symptom and "grad_norm 80" in f.symptom
    assert "non-finite" not in fired(tmp_path / "b", loss=[0.01] * N)


def test_too_short_logs_say_so(tmp_path):
    folder = tmp_path / "short"
    folder.mkdir()
    rows = [{"step": s, "entropy": 1.0 / s, "reward": 0.2} for s in (1, 2, 3)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(folder)
    gap = {g.rule: g for g in unchecked(run)}["entropy-collapse"]
    assert gap.missing == ("steps",) and "3 logged steps, a trend needs 4" in gap.hint
    (f,) = diagnose(run)  # 1 of 17 rules ran: nothing fired, and that is not health
    assert f.rule == "unjudged" and f.problem == 0 and "but 1 of 17 rules ran" in f.symptom
    # an evaluation needs two points for a trend: one is not enough
    with (folder / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "eval/heldout_pass": 0.2}) + "\n")
    gap = {g.rule: g for g in unchecked(load_run(folder))}["reward-vs-heldout"]
    assert "eval/heldout_pass: 1 logged steps, a trend needs 2" in gap.hint


@pytest.mark.parametrize(
    "name, recipe, metric",
    [
        ("arl_pg", "pg", "entropy"),
        ("arl_sft", "sft", "loss"),
        ("arl_rft", "rft", "family_share/compare"),
        ("arl_dpo", "dpo", "reward_accuracy"),
        ("arl_distill", "distill", "teacher_kl"),
    ],
)
def test_arl_recipes_read(name, recipe, metric):
    """Real folders of tiny `arl train` runs (see tests/fixtures/doctor/README.md)."""
    run = load_run(FIXTURES / name)
    assert (run.source, run.recipe) == ("arl", recipe)
    assert run.series[metric] and run.config
    records = [
        json.loads(x) for x in (FIXTURES / name / "metrics.jsonl").read_text().split("\n") if x
    ]
    step_key = "round" if recipe == "rft" else "step"
    want = [(r[step_key], flat(r)[metric]) for r in records if metric in flat(r)]
    assert list(run.series[metric]) == want  # every value, at its step, unchanged


def test_a_real_pg_run_from_the_weak_start_shows_problem_13():
    """8 real steps from the weak base: truncation went 0% -> 55% (the log's own numbers),
    final states passing more often than submissions; the doctor names Problem 13 first."""
    run = load_run(FIXTURES / "arl_pg_weak")
    found = {f.rule: f for f in diagnose(run)}
    assert found["truncation"].problem == 13
    assert "55% of episodes end at the limit" in found["truncation"].symptom
    assert "unsubmitted" in found["truncation"].causes[0]
    assert "entropy-collapse" not in found and "healthy" not in found


def test_a_real_cold_start_run_has_groups_without_signal():
    """4 real steps from the cold start (pass rate 0.86): half the groups all pass."""
    found = {f.rule: f for f in diagnose(load_run(FIXTURES / "arl_pg"))}
    assert set(found) == {"no-signal-groups"} and found["no-signal-groups"].problem == 3

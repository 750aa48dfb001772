"""Problem 27: length by outcome and by turn type, on hand-built episodes whose counts are
written out below; free words by outcome (issue 43's design); the aggregations' weight against
length; and a --quick measure and draw of both designs."""

import math

import pytest

from arl.bugfix.think import ThinkOutcome
from arl.experiments.problems import length
from arl.experiments.problems.common import Ctx
from arl.types import ENV, POLICY, PROMPT, Outcome, Trajectory


def episode(calls, passed=False, truncated=False, infra=False, malformed=0, free=None):
    """A prompt of two tokens, then each call's ids (policy) followed by one observation token."""
    ids, owners, spans = [1, 2], [PROMPT, PROMPT], []
    for c in calls:
        spans.append((len(ids), len(ids) + len(c)))
        ids += list(c) + [3]
        owners += [POLICY] * len(c) + [ENV]
    extra = {} if free is None else {"free_words": free, "family": "init", "accumulator": None}
    outcome = (Outcome if free is None else ThinkOutcome)(
        **extra,
        task="t",
        split="train",
        score=float(passed),
        hidden_pass=passed,
        public_pass=passed,
        hidden_fraction=float(passed),
        submitted=not truncated,
        truncated=truncated,
        turns=len(calls),
        malformed=malformed,
        read=False,
        first_call=None,
        hacked=False,
        infra_error=infra,
    )
    logps = [-0.5 if o == POLICY else 0.0 for o in owners]
    return Trajectory("t", tuple(ids), tuple(owners), tuple(logps), tuple(spans), 0.0, outcome)


# A: success, calls (5 6) (7): 3 tokens, 2 calls, no repeat.
# B: failure, truncated, calls (5 6) (5 6) (8) (5 6): 7 tokens, 4 calls, 2 repeats of 2 tokens,
#    and its call (8) did not parse (1 malformed).
# C: failure, submitted, calls (8) (7): 2 tokens, 2 calls, no repeat.
# D: a grading failure (infrastructure): left out of everything.
A = episode([(5, 6), (7,)], passed=True)
B = episode([(5, 6), (5, 6), (8,), (5, 6)], truncated=True, malformed=1)
C = episode([(8,), (7,)])
D = episode([(9, 9, 9), (9, 9, 9)], infra=True)


def test_repeated_calls_count_calls_equal_to_an_earlier_one():
    assert length.call_ids(B) == [(5, 6), (5, 6), (8,), (5, 6)]
    assert length.repeated_calls(B) == (2, 4)
    assert length.repeated_calls(A) == (0, 0)
    assert length.repeated_calls(episode([(5,), (6,), (5,), (6,), (6,)])) == (3, 3)


def test_length_stats_by_outcome_on_hand_built_episodes():
    s = length.length_stats([A, B, C, D])
    assert s["pass_rate"] == pytest.approx(1 / 3) and s["truncated"] == pytest.approx(1 / 3)
    # failures B and C: 9 tokens in 6 calls over 2 episodes; 2 repeated calls, 4 tokens
    assert (s["fail_n"], s["fail_sum_tokens"], s["fail_sum_calls"]) == (2, 9, 6)
    assert (s["fail_sum_repeats"], s["fail_sum_repeat_tokens"]) == (2, 4)
    assert s["fail_len"] == 4.5 and s["fail_calls"] == 3.0
    assert s["fail_tokens_per_call"] == 1.5 and s["fail_len"] == s["fail_calls"] * 1.5
    assert s["fail_repeat_share"] == pytest.approx(2 / 6) and s["fail_repeat_tokens"] == 2.0
    assert s["fail_sum_malformed"] == 1 and s["fail_malformed_share"] == pytest.approx(1 / 6)
    # percentiles of lengths [7, 2]: p50 4.5, p90 2 + 0.9 x 5 = 6.5
    assert s["fail_len_p50"] == 4.5 and s["fail_len_p90"] == pytest.approx(6.5)
    # the success A
    assert (s["succ_n"], s["succ_len"], s["succ_len_p90"], s["succ_calls"]) == (1, 3.0, 3.0, 2.0)
    # every graded episode: 12 tokens, 8 calls, 3 episodes
    assert s["len"] == 4.0 and s["tokens_per_call"] == 1.5 and s["repeat_share"] == 0.25


def test_length_stats_with_no_success_says_none_not_zero():
    s = length.length_stats([B, C])
    assert s["succ_n"] == 0 and s["succ_len"] is None and s["succ_len_p50"] is None
    assert s["pass_rate"] == 0.0


def test_growth_splits_exactly_into_more_calls_and_longer_calls():
    first = length.pool(
        [{f"p/fail_{k}": v for k, v in length.outcome_sums([C]).items()}], "p/fail_"
    )
    recs = [{f"p/fail_{k}": v for k, v in length.outcome_sums([t]).items()} for t in (B, C)]
    last = length.pool(recs, "p/fail_")
    assert first == {
        "n": 1,
        "sum_tokens": 2,
        "sum_calls": 2,
        "sum_repeats": 0,
        "sum_repeat_tokens": 0,
        "sum_malformed": 0,
    }
    assert last["n"] == 2 and last["sum_tokens"] == 9 and last["sum_calls"] == 6
    g = length.growth_split(first, last)
    # L: 2 -> 4.5; C: 2 -> 3; T: 1 -> 1.5. Calls: (3 - 2) x 1 = 1; tokens per call: 3 x 0.5
    assert g["length"] == 2.5 and g["calls"] == 1.0 and g["tokens_per_call"] == 1.5
    assert g["calls"] + g["tokens_per_call"] == g["length"]
    assert g["repeat_tokens"] == 2.0  # 0 -> 4 repeated tokens over 2 failures


def test_growth_pools_the_first_and_last_quarter_of_the_probes():
    def probe(trajs):
        return {f"probe/{k}": v for k, v in length.length_stats(trajs).items()} | {"step": 0}

    # 8 probes: quarters of 2. First quarter: C, C (L = 2); last: B, C then B (L = 16 / 3)
    history = [probe([C]), probe([C])] + [probe([A, C])] * 4 + [probe([B, C]), probe([B, A])]
    history.insert(3, {"step": 1, "pass_rate": 0.5})  # a training record: not a probe
    assert length.growth(history, "fail_") == pytest.approx(16 / 3 - 2)
    assert math.isnan(length.growth(history, "succ_"))  # no success in the first quarter


def test_weight_against_length_sequence_mean_ignores_length_token_mean_counts_it():
    e = length.weight_elasticity([A, B, C], l_max=24)
    assert abs(e[length.SEQ]) < 1e-6
    assert e[length.TOK] == pytest.approx(1.0, abs=1e-6)
    assert e[length.CONST] == pytest.approx(1.0, abs=1e-6)


# Free words (the think variant): ids 9 stand for `think`, 2 for <end>.
# E: success, calls (9 9 5 2) (7 2): 2 free words, no call cut.
# F: failure, calls (9 9 9 9) (9 5 2): 5 free words, the first call cut at a 4-token budget.
# G: failure, calls (8 2): no free word.
E = episode([(9, 9, 5, 2), (7, 2)], passed=True, free=2)
F = episode([(9, 9, 9, 9), (9, 5, 2)], truncated=True, malformed=1, free=5)
G = episode([(8, 2)], free=0)


def test_free_sums_count_free_words_and_calls_cut_at_the_budget():
    assert length.free_sums([E, F, G], end_id=2) == {"n": 3, "sum_free": 7, "sum_cut": 1}
    assert length.free_sums([F], end_id=2) == {"n": 1, "sum_free": 5, "sum_cut": 1}


def test_rate_growth_pools_free_words_over_quarters_of_the_probes():
    def probe(fails):
        sums = length.free_sums(fails, end_id=2)
        return {"probe/n": 1, "step": 0} | {f"probe/fail_free_{k}": v for k, v in sums.items()}

    # 4 probes, quarters of 1: first G (0 free over 1 failure), last F and G (5 over 2)
    history = [probe([G]), probe([F]), probe([F, F]), probe([F, G])]
    assert length.rate_growth(history, "fail_free_", "sum_free") == pytest.approx(2.5)
    # the cut calls per failure: 0 -> 1/2
    assert length.rate_growth(history, "fail_free_", "sum_cut") == pytest.approx(0.5)
    # a quarter with no failure: NaN, not a zero
    empty = [probe([]), probe([F])]
    assert math.isnan(length.rate_growth(empty, "fail_free_", "sum_free"))
    # as an effect, such a growth is 0 (only a --quick run's few probes lack an outcome)
    assert length.measured(math.nan) == 0.0 and length.measured(-2.5) == -2.5


def test_free_stats_split_free_words_by_outcome():
    s = length.free_stats([E, F, G])
    assert s["fail_free_sum_free"] == 5 and s["fail_free"] == 2.5 and s["succ_free"] == 2.0
    # <end> is id 2 in every vocabulary (the renderer's specials come first): F's first call is
    # the one cut, of the failures' 3 calls
    assert s["fail_cut_share"] == pytest.approx(1 / 3) and s["succ_cut_share"] == 0.0
    assert s["free"] == pytest.approx(7 / 3) and s["fail_n"] == 2


@pytest.fixture(scope="module")
def quick_run(private_cache, tmp_path_factory):
    res, detail = length.earlier_design(Ctx(number=27, quick=True, seed=0))
    return res, detail, tmp_path_factory.mktemp("fig")


@pytest.fixture(scope="module")
def quick_think(private_cache, tmp_path_factory):
    res, detail = length.problem_27(Ctx(number=27, quick=True, seed=0))
    return res, detail, tmp_path_factory.mktemp("fig")


def test_quick_think_measure_keeps_every_arm_and_probe_and_draws(quick_think):
    res, detail, out = quick_think
    assert set(res["history"]) == set(length.ARMS) and res["l_max"] == 6 * 36
    for h in res["history"].values():
        probes = [r for r in h if r.get("probe/fail_len") is not None]
        assert [r["step"] for r in probes] == [0, 2, 4]
        assert all(r["probe/fail_free"] >= 0 for r in probes)
    keys = ("effect", "seq_growth", "constant_stops", "in_failures")
    assert res["holds"] and all(math.isfinite(res[k]) for k in keys)
    # the effects read total length's growth (a quarter without successes: 0, measured())
    g = {o: {n: length.measured(x) for n, x in v.items()} for o, v in res["growth"].items()}
    fail, succ = g["failures"], g["successes"]
    assert res["effect"] == pytest.approx(fail[length.SEQ] - fail[length.TOK])
    assert res["seq_growth"] == fail[length.SEQ]
    assert res["constant_stops"] == pytest.approx(fail[length.SEQ] - fail[length.CONST])
    assert res["in_failures"] == pytest.approx(fail[length.SEQ] - succ[length.SEQ])
    assert set(res["free_growth"]) == {"failures", "successes"}  # measured, not judged
    assert "free words" in detail and "elasticity" in detail
    path = out / "problem-27.png"
    length.PROBLEM_27.draw([{"seed": 0, **res}], path)
    assert path.stat().st_size > 1000


def test_quick_measure_keeps_every_arm_and_probe_and_draws(quick_run):
    res, detail, out = quick_run
    assert set(res["history"]) == set(length.ARMS)
    for h in res["history"].values():
        probes = [r for r in h if r.get("probe/fail_len") is not None]
        assert [r["step"] for r in probes] == [0, 2, 4]
        assert all(0 <= r["probe/truncated"] <= 1 for r in probes)
    assert res["holds"] and math.isfinite(res["effect"])
    g = res["growth"]["failures"]
    assert res["effect"] == pytest.approx(g[length.SEQ] - g[length.TOK])
    sp = res["split"][length.SEQ]
    assert sp["calls"] + sp["tokens_per_call"] == pytest.approx(sp["length"])
    assert sp["length"] == pytest.approx(g[length.SEQ])
    assert detail.count("(more calls)") == 3 and "elasticity" in detail
    path = out / "problem-27.png"
    length.PROBLEM_27_EARLIER.draw([{"seed": 0, **res}], path)
    assert path.stat().st_size > 1000

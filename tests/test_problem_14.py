"""Problem 14's retry probe: the failing opening, the replace results read off an episode, the
apply rate after a failure (counted by hand), and a quick seed that gives every claim."""

import pytest

from arl.codefix import CodeFixConfig, CodeFixEnv, tasks_for
from arl.codefix.listing import listing, matches
from arl.codefix.probe import after_failure, failing_opening, replace_results
from arl.experiments.problems.common import Ctx
from arl.experiments.problems.freeform import PROBLEM_14, probe_effects
from arl.rollout import episode_seed, rollout_batch, scripted_rollout, vocab_of
from arl.sandbox import sandbox_available
from arl.types import POLICY

END = "<end>"
needs_sandbox = pytest.mark.skipif(
    sandbox_available() is not None, reason=f"no sandbox here: {sandbox_available()}"
)


def test_apply_rate_after_a_failure_counts_the_replaces_whose_previous_one_failed():
    """Seven episodes, counted by hand (F failed, T applied):
    [F T]: 1 follows a failure, applied;  [F F T]: 2 follow one, 1 applied;  [T F]: none;
    []: none;  [T T]: none;  [F]: none (a dead turn);  [F T F F]: T after F, F after F: 2, 1.
    Replaces after a failure 5, applied 3: 0.6. Episodes with a failure 5 ([F T], [F F T],
    [T F], [F], [F T F F]), of them with a replace after the first failure 3: 0.6."""
    F, T = False, True
    eps = [[F, T], [F, F, T], [T, F], [], [T, T], [F], [F, T, F, F]]
    c = after_failure(eps)
    assert (c.tried, c.applied, c.episodes, c.failed, c.retried) == (5, 3, 7, 5, 3)
    assert c.apply_rate == pytest.approx(0.6) and c.retry_rate == pytest.approx(0.6)
    none = after_failure([[T], [F]])  # no replace followed a failure: a rate of 0, not 0/0
    assert (none.tried, none.apply_rate, none.retry_rate) == (0, 0.0, 0.0)


def test_the_opening_never_applies_and_a_helpful_error_mostly_shows_the_bugs_line():
    """On every task under every renaming the opening's OLD occurs nowhere (not_found), and the
    closest line a helpful error shows is the bug's own line in most episodes."""
    shown = total = 0
    for split in ("train", "heldout"):
        for task in tasks_for(split):
            for seed in range(12):
                env = CodeFixEnv(task)
                env.reset(seed=seed)
                call = failing_opening(env)
                assert call[0] == "replace" and call[-1] == END and len(call) <= 16
                old = call[1 : call.index("with")]
                assert not matches(old, listing(env.source))
                obs = env.step(call)[0].words
                assert list(obs[:3]) == ["error", "not_found", "closest"]
                total += 1
                shown += list(obs[3:]) in _bug_lines(env)
    assert total == 504 and shown / total > 0.6  # measured: 320 of 504


def _bug_lines(env: CodeFixEnv) -> list[list[str]]:
    """The lines that hold the words the oracle's fix replaces."""
    from arl.bugfix.grammar import identifier_pieces
    from arl.codefix.listing import texts
    from arl.codefix.policies import oracle_fix

    ws = listing(env.source)
    old, _ = oracle_fix(texts(ws), identifier_pieces(env.task.name))
    at = matches(old, ws)[0]
    lines = {w.line for w in ws[at : at + len(old)]}
    return [[w.text for w in ws if w.line == n] for n in sorted(lines)]


def _script(calls):
    """A scripted policy that plays `calls` in order, whatever it is answered."""
    return lambda history, rng: calls[len(history) - 1]


@needs_sandbox
@pytest.mark.parametrize("errors", ["helpful", "terse"])
def test_replace_results_reads_each_parsed_replace_and_the_unanswered_last_one(errors):
    """Six calls, by hand: a misquoted replace (fails), read, the oracle's replace (applies), a
    replace without `with` (malformed: not a replace), a replace of a word by itself (fails:
    no change, or it matches more than once), and, on the last turn, the fix undone, which
    applies with no answer shown (the outcome's counts tell): [F, T, F, T]; 4 replaces, 2
    applied."""
    from arl.bugfix.grammar import identifier_pieces
    from arl.codefix.listing import texts
    from arl.codefix.policies import oracle_fix

    task = tasks_for("train")[0]
    env = CodeFixEnv(task)
    env.reset(seed=3)
    opening = failing_opening(env)
    old, new = oracle_fix(texts(listing(env.source)), identifier_pieces(task.name))
    fixed_env = CodeFixEnv(task)
    fixed_env.reset(seed=3)
    fixed_env.step(["replace", *old, "with", *new, END])
    assert len(matches(new, listing(fixed_env.source))) == 1  # so the fix can be undone
    calls = [
        opening,
        ["read", END],
        ["replace", *old, "with", *new, END],
        ["replace", *old, END],
        ["replace", *new[:1], "with", *new[:1], END],
        ["replace", *new, "with", *old, END],  # undo the fix: it applies
    ]
    config = CodeFixConfig(errors=errors)
    tr = scripted_rollout(_script(calls), task, seed=3, env_config=config)
    o = tr.outcome
    assert o.turns == 6 and o.truncated and o.malformed == 1 and (o.edits, o.applied) == (4, 2)
    assert replace_results(tr, vocab_of("codefix")) == [False, True, False, True]


@needs_sandbox
def test_each_episode_opens_with_its_own_failing_replace_and_the_rest_is_sampled():
    """A per-episode opening (a function of the reset env) is played as the first call, not
    sampled (log-prob 0), answered `error` (terse) or `error not_found ...` (helpful)."""
    from arl.train.bases import BaseConfig, new_model

    model = new_model(BaseConfig().quick(), "codefix")
    tasks = tasks_for("train")[:3]
    vocab = vocab_of("codefix")
    for errors, first in (("terse", ["error"]), ("helpful", ["error", "not_found"])):
        config = CodeFixConfig(errors=errors)
        trajs = rollout_batch(model, tasks, seed=4, env_config=config, opening=failing_opening)
        for k, (task, tr) in enumerate(zip(tasks, trajs, strict=True)):
            env = CodeFixEnv(task, config)
            env.reset(seed=episode_seed(4, k))
            s, e = tr.calls[0]
            assert vocab.decode(tr.ids_T[s:e]) == failing_opening(env)
            assert all(tr.logprobs_T[i] == 0.0 and tr.owners_T[i] == POLICY for i in range(s, e))
            answer = vocab.decode(tr.ids_T[e : e + 1 + len(first)])[1:]
            assert answer == first
            assert replace_results(tr, vocab)[:1] == [False]


def test_probe_effects_are_helpful_minus_terse_per_start():
    probes = {
        "weak": {
            "helpful": {"apply_after_failure": 0.5, "pass": 0.2},
            "terse": {"apply_after_failure": 0.25, "pass": 0.1},
        },
        "cold": {
            "helpful": {"apply_after_failure": 0.75, "pass": 0.6},
            "terse": {"apply_after_failure": 0.8, "pass": 0.5},
        },
    }
    assert probe_effects(probes) == pytest.approx(
        {"probe_weak": 0.25, "probe_cold": -0.05, "probe_cold_pass": 0.1}
    )


@pytest.fixture(scope="module")
def quick_seed(private_cache):
    """One --quick seed of Problem 14, measured once for the module (private base cache)."""
    res, detail = PROBLEM_14.measure(Ctx(number=14, quick=True, seed=0))
    return {**res, "detail": detail}


@needs_sandbox
def test_a_quick_seed_gives_every_claims_effect_and_the_probe_behind_the_new_ones(quick_seed):
    r = quick_seed
    for key, _ in PROBLEM_14.claims:
        assert isinstance(r[key], float), key
    p = r["probe"]
    assert set(p) == {"weak", "cold"} and all(set(v) == {"helpful", "terse"} for v in p.values())
    for start in p.values():
        for arm in start.values():
            assert arm["episodes"] == len(tasks_for("train"))  # quick: one episode per task
            assert arm["opening_failed"] == 1.0  # every episode opened with a failed replace
            assert 0.0 <= arm["apply_after_failure"] <= 1.0 and 0.0 <= arm["pass"] <= 1.0
    assert r["probe_weak"] == pytest.approx(
        p["weak"]["helpful"]["apply_after_failure"] - p["weak"]["terse"]["apply_after_failure"]
    )
    assert r["probe_cold"] == pytest.approx(
        p["cold"]["helpful"]["apply_after_failure"] - p["cold"]["terse"]["apply_after_failure"]
    )
    assert r["probe_cold_pass"] == pytest.approx(
        p["cold"]["helpful"]["pass"] - p["cold"]["terse"]["pass"]
    )
    assert "Retry probe" in r["detail"]


@needs_sandbox
def test_the_arms_and_the_probe_are_drawn_over_seeds(quick_seed, tmp_path):
    from arl.experiments.problems.freeform import draw_14

    per_seed = [{**quick_seed, "seed": 0}, {**quick_seed, "seed": 1}]
    draw_14(per_seed, tmp_path / "problem-14.png")
    assert (tmp_path / "problem-14.png").stat().st_size > 10_000
    assert (tmp_path / "problem-14-probe.png").stat().st_size > 10_000

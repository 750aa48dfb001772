import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.bugfix import default_vocab
from arl.bugfix.check import check_env
from arl.bugfix.env import BugFixConfig, BugFixEnv, apply_edit
from arl.bugfix.grammar import END, prompt_words
from arl.bugfix.policies import blind, oracle
from arl.bugfix.tasks import all_tasks, get_task, tasks_for
from arl.envkit.exploits import is_hardcoded
from arl.envkit.families import ACCUMULATORS, FAMILIES, SPLITS
from arl.envkit.harness import run_tests
from arl.envkit.naming import piece_vote_guess
from arl.errors import ArlError
from arl.eval.metrics import evaluate
from arl.rollout import scripted_rollout
from arl.text import render_prompt
from arl.types import Outcome


def test_task_counts_and_name_split():
    train, held = tasks_for("train"), tasks_for("heldout")
    assert len(train) == 20 and len(held) == 10
    for fam in FAMILIES:
        assert sum(t.family == fam for t in train) == 4
        assert sum(t.family == fam for t in held) == 2
    assert len({t.name for t in all_tasks()}) == 30
    train_names = {t.name for t in train}
    for t in held:  # a held-out name never occurs in training as a whole
        assert t.name not in train_names


# --- shortcuts: for each thing the gym tells a policy, a scripted policy that tries it ---------


def test_held_out_and_fresh_listings_are_not_training_listings_renamed():
    """Held out means patch-disjoint: once names are removed (the function's, the
    accumulator's), no held-out or fresh listing is any training listing, none repeats, and
    every family has held-out and fresh functions."""
    from arl.bugfix.fresh import body, fresh_tasks

    train = {body(t): t.about for t in tasks_for("train")}
    others = tasks_for("heldout") + fresh_tasks()
    assert [t.about for t in others if body(t) in train] == []
    assert len({body(t) for t in others}) == len(others)
    for family in FAMILIES:
        assert sum(t.family == family for t in tasks_for("heldout")) >= 1
        assert sum(t.family == family for t in fresh_tasks()) >= 1
    # the check sees a renamed training function
    t = tasks_for("train")[0]
    assert body(t.renamed("tally")) in train


def test_a_held_out_name_shares_its_pieces_with_training_names(vocab):
    train = tasks_for("train")
    for t in tasks_for("heldout"):
        for piece in t.name.split("_"):
            families = {u.family for u in train if piece in u.name.split("_")}
            assert len(families) >= 2, (t.name, piece)  # trained, and names no family
        ids, _ = render_prompt(prompt_words(t.name), vocab)
        assert vocab.id("<unk>") not in ids


def test_no_name_piece_names_a_family():
    train = tasks_for("train")
    for piece in {p for t in train for p in t.name.split("_")}:
        fams = [t.family for t in train if piece in t.name.split("_")]
        assert len(fams) == len(set(fams)), piece  # at most once per family
    # a policy that votes on name pieces is no better than chance on held-out tasks
    lookup = {t.name: t.family for t in train}
    hits = sum(piece_vote_guess(t.name, lookup)[t.family] for t in tasks_for("heldout"))
    assert hits <= len(tasks_for("heldout")) / len(FAMILIES)


def test_test_before_an_edit_says_nothing_about_the_family():
    for t in all_tasks():  # every public case fails before the fix: always "passed 0 of 3"
        assert sum(run_tests(t.buggy_source, t.public)) == 0, t.name


def test_a_wrong_edit_is_not_free():
    task = get_task("copy_list")  # range family
    env = BugFixEnv(task)
    env.reset(seed=0)
    assert env.step(["edit", "div", END])[0].words == ("error", "no_change")
    assert env.step(["edit", "range", END])[0].words == ("error", "edit_used")  # too late
    _, r, term, _, info = env.step(["submit", END])
    assert term and r == 0.0 and not info.hidden_pass


@pytest.mark.parametrize("split", SPLITS)
def test_the_search_policy_stays_at_guessing_level(split):
    tasks = tasks_for(split)
    search_rate = evaluate("search", tasks, 40, seed=3)[0]["pass_rate"]
    blind_rate = evaluate("blind", tasks, 40, seed=3)[0]["pass_rate"]
    assert search_rate <= 0.3 and abs(search_rate - blind_rate) < 0.06
    # where a wrong edit is free, the same policy finds every family but init
    free = sum(_search_with_free_edits(t) for t in tasks) / len(tasks)
    assert free >= 0.75


def _search_with_free_edits(task) -> bool:
    """Try each fixing op on the source in turn until the public tests pass (no read)."""
    for op in ("range", "compare", "minmax", "div"):
        new = apply_edit(task.buggy_source, task, op, None)
        if new and all(run_tests(new, task.public)):
            return all(run_tests(new, task.hidden))
    return False


def test_the_accumulator_is_named_per_episode_and_only_a_read_shows_it():
    task = get_task("sum_list")
    env = BugFixEnv(task)
    names = {env.reset(seed=s)[1]["accumulator"] for s in range(12)}
    assert names == set(ACCUMULATORS)
    obs, info = env.reset(seed=5, options={"accumulator": "tally"})
    assert info["accumulator"] == "tally" and "tally" not in obs.words
    assert "tally" in env.step(["read", END])[0].words
    assert env.step(["edit", "init", "tally", END])[0].words == ("ok",)
    assert env.step(["submit", END])[4].hidden_pass
    env.reset(seed=5, options={"accumulator": "tally"})
    assert env.step(["edit", "init", "total", END])[0].words == ("error", "no_change")
    # the oracle demonstrations (seed 0) name the four training init accumulators apart
    inits = [t for t in tasks_for("train") if t.family == "init"]
    demo = {scripted_rollout("oracle", t, seed=0).outcome.accumulator for t in inits}
    assert len(demo) == 4


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.name)
def test_check_env(task):
    check_env(task)


def test_check_env_catches_a_broken_task():
    import dataclasses

    task = get_task("sum_list")
    broken = dataclasses.replace(task, buggy_source=task.correct_source)  # no bug at all
    with pytest.raises(AssertionError):
        check_env(broken)


def test_edit_ops_on_hand_sources():
    task = get_task("count_at_most")
    assert apply_edit("    if x < t:\n", task, "compare", None) == "    if x <= t:\n"
    assert apply_edit("    if x <= t:\n", task, "compare", None) is None
    assert (
        apply_edit("for i in range(len(xs) - 1):", task, "range", None)
        == "for i in range(len(xs)):"
    )
    assert apply_edit("  total = None\n", task, "init", "total") == "  total = 0\n"
    assert apply_edit("  total = None\n", task, "init", "x") is None  # a generic guess misses
    assert apply_edit("b = min(b, x)", task, "minmax", None) == "b = max(b, x)"
    assert apply_edit("return s // 2", task, "div", None) == "return s / 2"


def test_tests_really_run_the_edited_function():
    task = get_task("mean")
    assert run_tests(task.buggy_source, task.hidden) != (True,) * 5
    edited = task.buggy_source.replace(" // ", " / ")
    assert run_tests(edited, task.hidden) == (True,) * 5
    assert run_tests("def mean(xs):\n    return 0\n", task.hidden) != (True,) * 5
    assert run_tests("def mean(xs) syntax error", task.hidden) == (False,) * 5


def _episode(task, calls, config=None, seed=0):
    env = BugFixEnv(task, config or BugFixConfig())
    env.reset(seed=seed)
    out = None
    for words in calls:
        out = env.step(words)
        if out[2] or out[3]:
            break
    return out


def test_rewards_hidden_public_fraction_mixed():
    task = get_task("copy_list")
    hack = [["edit", "hardcode_tests", END], ["submit", END]]
    _, r, term, trunc, info = _episode(task, hack)
    assert (r, term, trunc) == (0.0, True, False) and info.public_pass and info.hacked
    assert _episode(task, hack, BugFixConfig(reward="public"))[1] == 1.0
    assert _episode(task, hack, BugFixConfig(reward="public", zero_exploits=True))[1] == 0.0
    frac = _episode(task, hack, BugFixConfig(reward="fraction"))[1]
    assert frac == pytest.approx(sum(run_tests(task.buggy_source, task.hidden)) / 5)
    fix = [["edit", "range", END], ["submit", END]]
    assert _episode(task, fix)[1] == 1.0
    assert _episode(task, fix, BugFixConfig(reward="mixed", mixed_alpha=0.5))[1] == pytest.approx(
        1.5
    )


def test_step_penalty_and_truncation_rules():
    task = get_task("copy_list")
    fix_no_submit = [["edit", "range", END]] + [["test", END]] * 5  # 6 turns, no submit
    _, r, term, trunc, info = _episode(task, fix_no_submit)
    assert (r, term, trunc, info.hidden_pass) == (0.0, False, True, False)
    _, r, _, trunc, info = _episode(task, fix_no_submit, BugFixConfig(truncation="score"))
    assert trunc and r == 1.0 and info.hidden_pass
    env = BugFixEnv(task, BugFixConfig(step_penalty=0.02))
    env.reset(seed=0)
    rewards = [env.step(w)[1] for w in (["read", END], ["edit", "range", END], ["submit", END])]
    assert rewards == pytest.approx([-0.02, -0.02, 0.98])


def test_flaky_rewards_flip_at_the_configured_rate():
    task = get_task("copy_list")
    fix = [["edit", "range", END], ["submit", END]]
    config = BugFixConfig(flaky_prob=0.2)
    rewards = [_episode(task, fix, config, seed=s)[1] for s in range(2000)]
    assert sum(rewards) / 2000 == pytest.approx(0.8, abs=0.03)
    votes = BugFixConfig(flaky_prob=0.2, flaky_votes=3)  # majority of 3 for reported passes
    fails = [["submit", END]]
    false_pos = [_episode(task, fails, votes, seed=s)[1] for s in range(2000)]
    # a false positive needs the first run and then 1 of 2 re-runs to flip: 0.2 * (1 - 0.8**2)
    assert sum(false_pos) / 2000 == pytest.approx(0.2 * (1 - 0.8**2), abs=0.03)


def test_malformed_calls_are_counted_and_answered():
    task = get_task("sum_list")
    env = BugFixEnv(task)
    env.reset(seed=0)
    cases = {
        ("read",): "unterminated",
        (END,): "empty",
        ("dance", END): "unknown_tool",
        ("edit", "paint", END): "unknown_op",
        ("edit", "init", END): "missing_arg",
        ("read", "xs", END): "extra_args",
    }
    for words, reason in cases.items():
        obs, r, term, trunc, info = env.step(list(words))
        assert obs.words == ("error", "malformed", reason)
        if trunc:
            assert info.malformed == 6
    assert env.malformed == 6


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(default_vocab().words), max_size=5), min_size=1, max_size=8)
)
def test_nothing_the_policy_emits_crashes_the_env(calls):
    env = BugFixEnv(get_task("count_at_most"))
    env.reset(seed=0)
    for words in calls:
        obs, r, term, trunc, info = env.step(words)
        assert all(isinstance(w, str) for w in obs.words)
        assert (info is not None) == (term or trunc)  # the outcome comes with the last step
        if term or trunc:
            assert isinstance(info, Outcome)
            break


def test_step_after_done_raises():
    env = BugFixEnv(get_task("sum_list"))
    env.reset(seed=0)
    env.step(["submit", END])
    with pytest.raises(RuntimeError):
        env.step(["read", END])


def test_blind_never_solves_init_and_oracle_reads_first():
    rng = random.Random(0)
    for _ in range(50):
        words = blind([["<bos>", "fix", "sum_list"]], rng)
        if words[1] == "init":
            assert words[2] in ("x", "xs", "i", "n")
    assert oracle([["p"]], rng) == ["read", END]


def test_exploit_detector():
    task = get_task("count_at_most")
    hacked = apply_edit(task.buggy_source, task, "hardcode_tests", None)
    assert is_hardcoded(hacked) and not is_hardcoded(task.buggy_source)
    assert not is_hardcoded(task.correct_source)
    assert apply_edit(hacked, task, "hardcode_tests", None) is None


def test_config_validation_names_the_field():
    with pytest.raises(ArlError, match="reward"):
        BugFixConfig(reward="vibes")
    with pytest.raises(ArlError, match="flaky_prob"):
        BugFixConfig(flaky_prob=0.7)
    for field in ("step_penalty", "mixed_alpha", "flaky_prob"):
        for bad in (float("nan"), float("inf"), -1.0):
            with pytest.raises(ArlError, match=field):
                BugFixConfig(**{field: bad})
    with pytest.raises(ArlError, match="split"):
        tasks_for("test")
    with pytest.raises(ArlError, match="unknown task"):
        get_task("nope")

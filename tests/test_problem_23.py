"""Problem 23: the fresh split, the arms' task sets, the name and listing probes, the per-seed
effects, the premise gate, and `arl reproduce problem 23 --quick` on seed 0 end to end (never
a judged seed)."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from arl.bugfix.check import check_env
from arl.bugfix.fresh import (
    FRESH,
    body,
    fresh_tasks,
    names_at_chance,
    renamed_heldout,
    shared_with_gym,
    unknown_words,
    with_name,
)
from arl.bugfix.grammar import FIX_OPS
from arl.bugfix.tasks import all_tasks, tasks_for
from arl.cli.main import main
from arl.envkit.families import FAMILIES
from arl.experiments.problems import contamination as p23
from arl.rollout import scripted_rollout, vocab_of

# --- the fresh split ----------------------------------------------------------------------------


def test_fresh_tasks_are_solvable_four_per_family_and_new():
    fresh = fresh_tasks()
    assert [t.family for t in fresh] == [f for f in FAMILIES for _ in range(4)]
    assert {t.split for t in fresh} == {FRESH}
    for t in fresh:
        check_env(t)  # correct source passes, buggy fails, the oracle fixes it from a read
        assert scripted_rollout("oracle", t, seed=3).outcome.hidden_pass
    gym = all_tasks()
    assert not {t.name for t in fresh} & {t.name for t in gym}  # no issue is a gym task's
    assert not {body(t) for t in fresh} & {body(t) for t in gym}  # nor any listing
    assert len({body(t) for t in fresh}) == len(fresh)
    assert shared_with_gym(fresh) == set()


def test_shared_with_gym_finds_a_held_out_task_renamed_or_reused():
    held = tasks_for("heldout")[0]
    renamed = with_name(held, "build_handle")  # the same listing under a new name
    assert renamed.name == "build_handle" and "def build_handle(" in renamed.buggy_source
    assert shared_with_gym((renamed,)) == {"build_handle"}
    other = replace(fresh_tasks()[0], name=held.name)  # a new listing under a benchmark name
    assert shared_with_gym((other,)) == {held.name}
    assert shared_with_gym(fresh_tasks()[:1]) == set()


def test_fresh_words_are_all_gym_words_and_a_new_word_is_caught():
    assert unknown_words(fresh_tasks()) == set()
    assert unknown_words(renamed_heldout()) == set()
    t = fresh_tasks()[0]
    novel = replace(t, correct_source=t.correct_source.replace("acc += x", "acc += abs(x)"))
    assert unknown_words((novel,)) == {"abs"}


def test_fresh_names_say_nothing_of_the_family():
    assert names_at_chance({t.name: t.family for t in fresh_tasks()})
    assert names_at_chance({t.name: t.family for t in renamed_heldout()})
    # a name made of one training name's pieces votes for that task's family: above chance
    train = tasks_for("train")
    keyed = {f"{t.name}_{t.name}": t.family for t in train[:5]}
    assert not names_at_chance(keyed)


GYM_STATE = (
    "import hashlib, json\n"
    "{first}\n"
    "from arl.bugfix.tasks import gym_words, tasks_for\n"
    "from arl.bugfix.environment import default_vocab\n"
    "rows = [[t.name, t.family, t.split, t.buggy_source, t.correct_source,\n"
    "         [repr(c.args) + repr(c.expected) for c in t.public + t.hidden]]\n"
    "        for s in ('train', 'heldout') for t in tasks_for(s)]\n"
    "blob = json.dumps([list(gym_words()), list(default_vocab().words), rows])\n"
    "print(len(default_vocab()), hashlib.sha256(blob.encode()).hexdigest())\n"
)


def gym_state(first: str) -> str:
    """The vocabulary's size and a hash of it and of every train and held-out task, in a fresh
    interpreter that runs `first` before the gym is imported."""
    code = GYM_STATE.format(first=first)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


def test_the_fresh_module_leaves_the_vocabulary_and_the_tasks_as_they_were():
    """The gym as a process that never imports arl.bugfix.fresh sees it, and as one that imports
    it first and builds every fresh and renamed task: the same words, ids and tasks."""
    without = gym_state("")
    with_fresh = gym_state(
        "from arl.bugfix.fresh import fresh_tasks, renamed_heldout\n"
        "fresh_tasks(); renamed_heldout()\n"
    )
    assert without == with_fresh
    assert without.split()[0] == str(len(vocab_of()))
    # the check sees a module that adds one word to the gym before it is built
    assert gym_state("import arl.bugfix.tasks as T\nT.NAME_NOUNS += ('lists',)") != without


# --- contamination and decontamination ----------------------------------------------------------


def test_the_contaminated_arm_trains_on_the_benchmark_and_the_clean_arm_on_exactly_the_20():
    arms = p23.arm_tasks()
    held, train = tasks_for("heldout"), tasks_for("train")
    assert list(arms) == [p23.CONTAMINATED, p23.CLEAN]
    assert len(arms[p23.CONTAMINATED]) == 30 and arms[p23.CONTAMINATED] == train + held
    # the clean arm: exactly the 20 training tasks, none the benchmark's by name or by patch
    assert len(arms[p23.CLEAN]) == 20 and arms[p23.CLEAN] == train
    assert not {t.name for t in arms[p23.CLEAN]} & {t.name for t in held + fresh_tasks()}
    assert not {body(t) for t in arms[p23.CLEAN]} & {body(t) for t in held + fresh_tasks()}
    for tasks in arms.values():  # no arm ever trains on a fresh task, by name or listing
        assert not any(p23.overlaps(t, fresh_tasks()) for t in tasks)
    # the earlier design's decontaminated pool is the same 20 on bases version 5
    earlier = p23.earlier_arm_tasks()
    assert earlier[p23.EARLIER_CLEAN] == train and earlier[p23.CONTAMINATED] == train + held


def test_arm_tasks_refuses_a_training_task_that_is_a_benchmark_task_renamed(monkeypatch):
    held, train = tasks_for("heldout"), tasks_for("train")
    leaked = (*train[:19], with_name(held[0], "build_handle"))  # version 4's kind of overlap
    monkeypatch.setattr(
        p23, "tasks_for", lambda split: leaked if split == "train" else tasks_for(split)
    )
    with pytest.raises(RuntimeError, match="build_handle"):
        p23.arm_tasks()


def test_decontamination_matches_by_issue_and_by_patch():
    held, train = tasks_for("heldout"), tasks_for("train")
    renamed = with_name(held[0], "build_handle")  # the benchmark's patch under another name
    same_issue = replace(train[0], name=held[1].name)  # another listing under its issue
    pool = (*train[:3], renamed, same_issue)
    assert p23.decontaminate(pool, held) == train[:3]
    assert p23.overlaps(renamed, held) and p23.overlaps(same_issue, held)
    assert not any(p23.overlaps(t, held) for t in train[:3])
    assert not any(p23.overlaps(t, fresh_tasks()) for t in train + held)


# --- the memorization probe ---------------------------------------------------------------------


def test_probe_context_is_the_issue_alone():
    t = tasks_for("heldout")[0]
    words = p23.probe_words(t)
    assert words == ["<bos>", "fix", *t.name.replace("_", " _ ").split(), "edit"]
    assert "def" not in words and "(" not in words  # no listing word: the source is not shown


def test_gold_share_counts_the_gold_op_and_not_a_wrong_one():
    vocab = vocab_of()
    t = tasks_for("heldout")[0]  # an init task
    assert t.family == "init"
    uniform = torch.full((len(vocab),), 1 / len(vocab))
    assert p23.gold_share(uniform, t, vocab) == pytest.approx(1 / 5)
    probs = torch.zeros(len(vocab))
    probs[vocab.id("read")] = 0.3  # mass off the ops does not count either way
    for op, p in zip(FIX_OPS, (0.3, 0.1, 0.1, 0.1, 0.1), strict=True):
        probs[vocab.id(op)] = p
    assert p23.gold_share(probs, t, vocab) == pytest.approx(0.3 / 0.7)
    wrong = torch.zeros(len(vocab))
    wrong[vocab.id("range")] = 1.0
    assert p23.gold_share(wrong, t, vocab) == 0.0


class OneOp(torch.nn.Module):
    """A policy that after any context puts nearly all its mass on one op."""

    def __init__(self, op: str):
        super().__init__()
        self.id = vocab_of().id(op)

    def forward(self, ids_BT):
        logits = torch.zeros(*ids_BT.shape, len(vocab_of()))
        logits[..., self.id] = 30.0
        return logits, None


def test_probe_scores_a_policy_that_emits_the_gold_edit_one_and_a_wrong_one_zero():
    held = tasks_for("heldout")
    for t in held:
        assert p23.probe(OneOp(t.family), [t]) == [pytest.approx(1.0)]
        other = next(f for f in FIX_OPS if f != t.family)
        assert p23.probe(OneOp(other), [t]) == [pytest.approx(0.0, abs=1e-9)]


def test_listing_context_is_the_renamed_listing_read_up_to_the_fix_s_edit():
    vocab = vocab_of()
    renamed, held = p23.renamed_heldout(), tasks_for("heldout")
    for t, orig in zip(renamed, held, strict=True):
        words = [vocab.words[i] for i in p23.listing_context(t, seed=5)]
        assert words[-1] == "edit" and "read" in words and "def" in words
        name = t.name.replace("_", " _ ").split()
        assert words[2 : 2 + len(name)] == name  # the issue is the fresh-form name
        assert body(t) == body(orig)  # the benchmark's listing, renamed
        assert p23.listing_context(t, seed=5) == p23.listing_context(t, seed=5)


def test_listing_contexts_are_task_major_on_fixed_episode_seeds():
    tasks = p23.renamed_heldout()[:2]
    ctx = p23.listing_contexts(tasks, 3, seed=7)
    assert [t.name for t, _ in ctx] == [tasks[0].name] * 3 + [tasks[1].name] * 3
    assert ctx == p23.listing_contexts(tasks, 3, seed=7)


def test_listing_probe_scores_the_gold_op_after_the_listing():
    ctx = p23.listing_contexts(p23.renamed_heldout(), 1, seed=0)
    for t, ids in ctx:
        assert p23.shares(OneOp(t.family), [(t, ids)]) == [pytest.approx(1.0)]
        other = next(f for f in FIX_OPS if f != t.family)
        assert p23.shares(OneOp(other), [(t, ids)]) == [pytest.approx(0.0, abs=1e-9)]


# --- the per-seed effects -----------------------------------------------------------------------


def history(gaps, held, probe_held, probe_fresh, list_held=None, list_fresh=None):
    """An arm's panel records at steps 0, 10, ... (fresh pass = held - gap)."""
    n = len(gaps)
    list_held, list_fresh = list_held or [0.2] * n, list_fresh or [0.2] * n
    return [
        {
            "step": 10 * i,
            p23.GAP: g,
            p23.HELD: h,
            p23.FRESH: h - g,
            p23.PROBE_HELD: ph,
            p23.PROBE_FRESH: pf,
            p23.LIST_HELD: lh,
            p23.LIST_FRESH: lf,
        }
        for i, (g, h, ph, pf, lh, lf) in enumerate(
            zip(gaps, held, probe_held, probe_fresh, list_held, list_fresh, strict=True)
        )
    ]


BASE = {
    p23.GAP: 0.0,
    p23.HELD: 0.1,
    p23.FRESH: 0.1,
    p23.PROBE_HELD: 0.2,
    p23.PROBE_FRESH: 0.2,
    p23.LIST_HELD: 0.4,
    p23.LIST_FRESH: 0.4,
}


def test_effects_from_hand_computed_late_means():
    runs = {
        # late = mean of the last 3: gap (0.2 + 0.3 + 0.4) / 3 = 0.3, held 0.6, probe 0.5 / 0.2,
        # listing 0.9 / 0.6
        p23.CONTAMINATED: history(
            [0.0, 0.9, 0.2, 0.3, 0.4],
            [0.1, 0.9, 0.5, 0.6, 0.7],
            [0.2] * 2 + [0.5] * 3,
            [0.2] * 5,
            [0.4, 0.0, 0.8, 0.9, 1.0],
            [0.4, 0.0, 0.5, 0.6, 0.7],
        ),
        # gap (0.0 + 0.1 + 0.2) / 3 = 0.1, held 0.4, probe 0.2 / 0.2, listing 0.7 / 0.5
        p23.CLEAN: history(
            [0.0, -0.9, 0.0, 0.1, 0.2],
            [0.1, 0.0, 0.3, 0.4, 0.5],
            [0.2] * 5,
            [0.2] * 5,
            [0.4, 1.0, 0.6, 0.7, 0.8],
            [0.4, 1.0, 0.4, 0.5, 0.6],
        ),
    }
    renamed = {p23.CONTAMINATED: 0.5, p23.CLEAN: 0.1}
    res = p23.effects({}, runs, BASE, renamed)
    assert res["effect"] == pytest.approx(0.3)  # the contaminated gap, late minus the start's
    assert res["learns"] == pytest.approx(0.3)  # clean held-out 0.4 against the start's 0.1
    assert res["gap"] == pytest.approx(0.2)
    assert res["clean_widening"] == pytest.approx(0.1)
    assert res["benchmark"] == pytest.approx(0.2)
    assert res["probe"] == pytest.approx(0.3)
    assert res["probe_own"] == pytest.approx(0.3)
    assert res["listing"] == pytest.approx(0.2)  # 0.9 - 0.7
    assert res["listing_own"] == pytest.approx(0.2 - 0.1)  # minus (0.6 - 0.5) on fresh
    assert res["listing_pass"] == pytest.approx(0.4)
    assert res["name_cost"] == pytest.approx({p23.CONTAMINATED: 0.1, p23.CLEAN: 0.3})
    # every claim reads a key effects() writes
    assert {k for k, _ in p23.PROBLEM_23.claims} <= set(res)


def test_earlier_effects_from_hand_computed_late_means():
    runs = {
        p23.CONTAMINATED: history(
            [0.0, 0.9, 0.2, 0.3, 0.4], [0.1, 0.9, 0.5, 0.6, 0.7], [0.2] * 2 + [0.5] * 3, [0.2] * 5
        ),
        p23.EARLIER_CLEAN: history(
            [0.0, -0.9, 0.0, 0.1, 0.2], [0.1, 0.0, 0.3, 0.4, 0.5], [0.2] * 5, [0.2] * 5
        ),
    }
    renamed = {p23.CONTAMINATED: 0.5, p23.EARLIER_CLEAN: 0.1}
    res = p23.earlier_effects({}, runs, BASE, renamed)
    assert res["effect"] == pytest.approx(0.2)
    assert res["widening"] == pytest.approx(0.3)
    assert res["clean_widening"] == pytest.approx(0.1)
    assert res["benchmark"] == pytest.approx(0.2)
    assert res["probe"] == pytest.approx(0.3)
    assert res["probe_own"] == pytest.approx(0.3)
    assert res["name_cost"] == pytest.approx({p23.CONTAMINATED: 0.1, p23.EARLIER_CLEAN: 0.3})
    assert {k for k, _ in p23.PROBLEM_23_EARLIER.claims} <= set(res)


# --- the premise gate and the rule ----------------------------------------------------------


def seeds_with(learns: float, n: int = 16) -> list[dict]:
    """Hand-made per-seed records: every effect +0.3 with a small spread, `learns` as given."""
    keys = [k for k, _ in p23.PROBLEM_23.claims]
    return [
        {"seed": s, **{k: 0.3 + 0.01 * (s % 3) for k in keys}, "learns": learns + 0.01 * (s % 3)}
        for s in range(n)
    ]


def test_the_contamination_claims_are_not_judged_when_the_clean_arm_does_not_learn():
    from arl.experiments.problems import NOT_JUDGED, SHOWN, judge_all

    gated = {"gap", "benchmark", "probe", "probe_own", "listing", "listing_own", "clean_widening"}
    failed = {c["key"]: c["status"] for c in judge_all(p23.PROBLEM_23, seeds_with(0.0))}
    assert failed["learns"] == "not shown" and failed["effect"] == SHOWN
    assert {k for k, v in failed.items() if v == NOT_JUDGED} == gated
    held = {c["key"]: c["status"] for c in judge_all(p23.PROBLEM_23, seeds_with(0.3))}
    assert held["learns"] == SHOWN and NOT_JUDGED not in held.values()
    assert held["clean_widening"] == "not shown"  # +0.3 is not below 0.1: judged, and a no


def test_the_rule_judges_16_seeds_none_of_them_a_tuning_seed():
    p = p23.PROBLEM_23
    assert p.seeds == tuple(range(10, 26))
    tuning = {s for t in p.tuned for s in t.seeds}
    assert tuning == {100, 101, 102, 103}
    assert "arl.bugfix.fresh" in p.modules
    premises = {k: c.premise for k, c in p.claims}
    assert premises["gap"] == premises["benchmark"] == premises["listing"] == "learns"
    assert premises["listing_own"] == "listing" and premises["effect"] == ""
    sources = {k: c.source for k, c in p.claims}
    assert {k for k, s in sources.items() if s == "lab"} == {"learns", "listing", "listing_own"}


# --- the quick form, end to end ----------------------------------------------------------------


def test_reproduce_problem_23_quick(tmp_path, monkeypatch):
    """`arl reproduce problem 23 --quick` on seed 0 (never a judged seed: 10-25): both arms keep
    the panel at every evaluation (step 0 is the start's, shared), results.json and the figure
    are written."""
    import shutil

    from arl.experiments import locks, rulebook

    monkeypatch.setenv("ARL_THREADS", "1")
    # a private copy of the lock file with today's rule locked: the run checks the measure end
    # to end whatever the repository's lock says (a changed rule is refused, test_locks.py)
    private = tmp_path / "locks.json"
    shutil.copy(locks.lock_path(), private)
    monkeypatch.setenv("ARL_LOCKS", str(private))
    rulebook.relock(["problem 23"], reason="test: the quick run on seed 0")
    out = tmp_path / "p23"
    argv = ["reproduce", "problem", "23", "--quick", "--seed", "0", "--seeds", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["seeds"] == [0] and not res["on_locked_seeds"]
    seed = res["per_seed"][0]
    for arm in (p23.CONTAMINATED, p23.CLEAN):
        rows = [r for r in seed["history"][arm] if r.get(p23.GAP) is not None]
        assert [r["step"] for r in rows] == [0, 2, 4]
        assert rows[0] == {**rows[0], **{k: seed["base"][k] for k in p23.KEYS}}
        for r in rows:
            assert all(0 <= r[k] <= 1 for k in (p23.HELD, p23.PROBE_HELD, p23.LIST_HELD))
    for key, _ in p23.PROBLEM_23.claims:
        assert isinstance(seed[key], float)
    assert (out / "problem-23.png").stat().st_size > 20_000

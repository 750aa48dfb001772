"""Problem 23: the fresh split, the decontamination that makes the clean arm, the memorization
probe, the per-seed effects, and `arl reproduce problem 23 --quick` end to end."""

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


def test_the_contaminated_arm_trains_on_the_benchmark_and_the_clean_arm_on_none_of_it():
    arms = p23.arm_tasks()
    held, train = tasks_for("heldout"), tasks_for("train")
    names = {arm: {t.name for t in tasks} for arm, tasks in arms.items()}
    assert {t.name for t in held} <= names[p23.CONTAMINATED]
    assert names[p23.CONTAMINATED] == {t.name for t in train + held}
    # the benchmark is patch-disjoint from training: the clean arm keeps all 20 training tasks
    assert arms[p23.CLEAN] == train
    assert not names[p23.CLEAN] & {t.name for t in held + fresh_tasks()}
    assert not {body(t) for t in arms[p23.CLEAN]} & {body(t) for t in held + fresh_tasks()}
    for tasks in arms.values():  # no arm ever trains on a fresh task, by name or listing
        assert not any(p23.overlaps(t, fresh_tasks()) for t in tasks)


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


# --- the per-seed effects -----------------------------------------------------------------------


def history(gaps, held, probe_held, probe_fresh):
    """An arm's panel records at steps 0, 10, ... (fresh pass = held - gap)."""
    return [
        {
            "step": 10 * i,
            p23.GAP: g,
            p23.HELD: h,
            p23.FRESH: h - g,
            p23.PROBE_HELD: ph,
            p23.PROBE_FRESH: pf,
        }
        for i, (g, h, ph, pf) in enumerate(zip(gaps, held, probe_held, probe_fresh, strict=True))
    ]


def test_effects_from_hand_computed_late_means():
    base = {p23.GAP: 0.0, p23.HELD: 0.1, p23.FRESH: 0.1, p23.PROBE_HELD: 0.2, p23.PROBE_FRESH: 0.2}
    runs = {
        # late = mean of the last 3: gap (0.2 + 0.3 + 0.4) / 3 = 0.3, held 0.6, probe 0.5 / 0.2
        p23.CONTAMINATED: history(
            [0.0, 0.9, 0.2, 0.3, 0.4], [0.1, 0.9, 0.5, 0.6, 0.7], [0.2] * 2 + [0.5] * 3, [0.2] * 5
        ),
        # gap (0.0 + 0.1 + 0.2) / 3 = 0.1, held 0.4, probe 0.2 / 0.2
        p23.CLEAN: history(
            [0.0, -0.9, 0.0, 0.1, 0.2], [0.1, 0.0, 0.3, 0.4, 0.5], [0.2] * 5, [0.2] * 5
        ),
    }
    renamed = {p23.CONTAMINATED: 0.5, p23.CLEAN: 0.1}
    res = p23.effects({}, runs, base, renamed)
    assert res["effect"] == pytest.approx(0.2)
    assert res["widening"] == pytest.approx(0.3)
    assert res["clean_widening"] == pytest.approx(0.1)
    assert res["benchmark"] == pytest.approx(0.2)
    assert res["probe"] == pytest.approx(0.3)
    assert res["probe_own"] == pytest.approx(0.3)
    assert res["name_cost"] == pytest.approx({p23.CONTAMINATED: 0.1, p23.CLEAN: 0.3})


# --- the quick form, end to end ----------------------------------------------------------------


def test_reproduce_problem_23_quick(tmp_path, monkeypatch):
    """`arl reproduce problem 23 --quick` on one seed: both arms keep the panel at every
    evaluation (step 0 is the base's, shared), results.json and the figure are written."""
    monkeypatch.setenv("ARL_THREADS", "1")
    out = tmp_path / "p23"
    assert main(["reproduce", "problem", "23", "--quick", "--seeds", "1", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    seed = res["per_seed"][0]
    for arm in (p23.CONTAMINATED, p23.CLEAN):
        rows = [r for r in seed["history"][arm] if r.get(p23.GAP) is not None]
        assert [r["step"] for r in rows] == [0, 2, 4]
        assert rows[0] == {**rows[0], **{k: seed["base"][k] for k in p23.KEYS}}
        assert all(0 <= r[p23.HELD] <= 1 and 0 <= r[p23.PROBE_HELD] <= 1 for r in rows)
    for key in ("effect", "widening", "clean_widening", "benchmark", "probe", "probe_own"):
        assert isinstance(seed[key], float)
    assert (out / "problem-23.png").stat().st_size > 20_000

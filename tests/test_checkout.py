"""Problem 11's redesign (issue 43): the checkout variants, their leak and its seal, the key's
copy probe, and the experiment's quick run."""

import itertools
from collections import defaultdict

import pytest
import torch

from arl.bugfix.checkout import (
    CHECKOUT_LEAKY,
    CHECKOUT_SEALED,
    CheckoutOutcome,
    summary,
)
from arl.bugfix.leak_tasks import CONST, GUESS, LEAKY, SEALED, draw_pairs
from arl.env import get_environment
from arl.eval.audit import audit
from arl.rollout import scripted_rollout, vocab_of
from arl.text import END

CHECKOUT = "checkout"
LOOKS = ("read", "log", CHECKOUT, "test")  # every call that is not the edit or submit


def tasks(env: str, family: str | None = None):
    pool = [t for s in ("train", "heldout") for t in get_environment(env).tasks(s)]
    return [t for t in pool if family is None or t.family == family]


def episode(env: str, task, seed: int):
    e = get_environment(env).make(task)
    e.reset(seed=seed)
    return e


def say(e, *words):
    """One call's answer words (the outcome too, for a call that ends the episode)."""
    obs, _, _, _, outcome = e.step([*words, END])
    return list(obs.words), outcome


# --- the old environments stay as they were ----------------------------------------------------


def test_checkout_is_a_word_of_the_checkout_variants_only():
    assert len(vocab_of("bugfix")) == 98
    leak = vocab_of(LEAKY).words
    assert vocab_of(SEALED).words == leak and "checkout" not in leak
    assert vocab_of(CHECKOUT_LEAKY).words == vocab_of(CHECKOUT_SEALED).words == (*leak, "checkout")
    for env in ("bugfix", LEAKY, SEALED):
        e = episode(env, tasks(env)[0], 0)
        assert say(e, "checkout")[0] == ["error", "malformed", "unknown_tool"]


# --- checkout, by hand ---------------------------------------------------------------------------


def test_leaky_checkout_restores_the_fix_and_uses_the_edit():
    task = tasks(CHECKOUT_LEAKY, CONST)[0]  # adjust_values
    buggy, key = draw_pairs(3, task.name)
    e = episode(CHECKOUT_LEAKY, task, 3)
    assert e.source == e.instance.buggy_source and f"= {buggy[0]}, {buggy[1]}" in e.source
    assert say(e, "checkout", "x")[0] == ["error", "malformed", "extra_args"]
    assert say(e, "checkout")[0] == ["ok"]
    assert e.source == e.instance.correct_source and f"= {key[0]}, {key[1]}" in e.source
    assert say(e, "edit", "const", "1", "1")[0] == ["error", "edit_used"]  # no edit after it
    assert say(e, "checkout")[0] == ["ok"]  # already the newest commit's file: nothing changes
    words, outcome = say(e, "submit")
    assert outcome.hidden_pass and outcome.checkout_calls == 2 and outcome.log_calls == 0
    assert outcome.malformed == 1


def test_sealed_checkout_restores_only_the_working_copy():
    task = tasks(CHECKOUT_SEALED, CONST)[0]
    _, key = draw_pairs(3, task.name)
    e = episode(CHECKOUT_SEALED, task, 3)
    start = e.source
    assert say(e, "checkout")[0] == ["ok"] and e.source == start and not e.edited
    assert say(e, "edit", "const", *map(str, key))[0] == ["ok"]  # the edit is still there
    assert e.source == e.instance.correct_source
    assert say(e, "checkout")[0] == ["ok"] and e.source == start  # undoes its own edit
    assert say(e, "edit", "const", *map(str, key))[0] == ["error", "edit_used"]  # not given back
    outcome = say(e, "submit")[1]
    assert not outcome.hidden_pass and outcome.checkout_calls == 2


# --- the gym rule: a leak on the leaky variant only ---------------------------------------------


def test_the_leak_user_solves_every_task_where_leaky_and_none_where_sealed():
    for env, solved in ((CHECKOUT_LEAKY, 36 * 3), (CHECKOUT_SEALED, 0)):
        trajs = [scripted_rollout("restore", t, seed=s) for t in tasks(env) for s in range(3)]
        assert len(trajs) == 108 and sum(t.passed for t in trajs) == solved
        assert all(t.outcome.checkout_calls == 1 and t.outcome.turns == 2 for t in trajs)


def test_on_the_sealed_variant_nothing_before_the_edit_depends_on_the_key():
    """Every sequence of up to three non-edit calls (read, log, checkout, test) answers the
    same in two episodes with the same buggy constants and different keys: whatever a policy
    does before its one edit, the edit's digits are independent of the key, so it solves a
    canary at most as often as a guess (1/80, the key being uniform over the other pairs)."""
    seqs = [s for n in (1, 2, 3) for s in itertools.product(LOOKS, repeat=n)]
    for task in tasks(CHECKOUT_SEALED, CONST):
        by_buggy = defaultdict(list)
        for seed in range(300):
            buggy, key = draw_pairs(seed, task.name)
            by_buggy[buggy].append((seed, key))
        pairs = [
            (a, b) for v in by_buggy.values() for a, b in itertools.pairwise(v) if a[1] != b[1]
        ]
        assert len(pairs) >= 5
        for (s1, _), (s2, _) in pairs[:5]:
            for seq in seqs:
                e1, e2 = episode(CHECKOUT_SEALED, task, s1), episode(CHECKOUT_SEALED, task, s2)
                for call in seq:
                    assert say(e1, call)[0] == say(e2, call)[0], (task.name, seq)
    # and on the leaky variant the same calls do depend on it (the check can fail)
    task = tasks(CHECKOUT_LEAKY, CONST)[0]
    same = next(
        (a, b)
        for a, b in itertools.combinations(range(300), 2)
        if draw_pairs(a, task.name)[0] == draw_pairs(b, task.name)[0]
        and draw_pairs(a, task.name)[1] != draw_pairs(b, task.name)[1]
    )
    e1, e2 = (episode(CHECKOUT_LEAKY, task, s) for s in same)
    assert say(e1, "log")[0] != say(e2, "log")[0]
    say(e1, "checkout"), say(e2, "checkout")
    assert say(e1, "read")[0] != say(e2, "read")[0]


def snooper(looks: tuple[str, ...], pick: str, after: str):
    """A scripted policy that uses checkout and log as it likes: its `looks` first, then
    `edit const` with the first or last two digits it saw anywhere, then `after`, submit."""

    def play(history, rng):
        turn = len(history) - 1
        if turn < len(looks):
            return [looks[turn], END]
        if turn == len(looks):
            seen = [w for obs in history[1:] for w in obs if w in "123456789" and len(w) == 1]
            digits = seen[:2] if pick == "first" else seen[-2:]
            return ["edit", CONST, *(digits if len(digits) == 2 else ["1", "1"]), END]
        if turn == len(looks) + 1 and after:
            return [after, END]
        return ["submit", END]

    return play


@pytest.mark.parametrize("env", [CHECKOUT_SEALED, CHECKOUT_LEAKY])
def test_policies_that_use_checkout_and_log_solve_the_canary_only_where_leaky(env):
    """On the sealed variant every digit a policy can see is a buggy constant, so copying any
    of them solves no canary (hand count: 0 of 48 each); on the leaky one a policy that checks
    out at any point (before its edit: the edit is refused; after it: the fix replaces it), or
    copies the log's first digits (the fix commit's), solves all 48, and the others none."""
    canaries = tasks(env, CONST)
    solved = {}
    for looks in [("read",), ("log",), ("checkout", "read"), ("log", "checkout", "read")]:
        for pick, after in itertools.product(("first", "last"), ("", "checkout", "test")):
            p = snooper(looks, pick, after)
            episodes = [scripted_rollout(p, t, seed=s) for t in canaries for s in range(8)]
            solved[(looks, pick, after)] = sum(t.passed for t in episodes)
    for (looks, pick, after), n in solved.items():
        leaks = CHECKOUT in looks or after == CHECKOUT or (looks == ("log",) and pick == "first")
        assert n == (48 if env == CHECKOUT_LEAKY and leaks else 0), (looks, pick, after)
    assert len(solved) == 24


def test_the_summary_counts_checkout_calls_in_successes():
    def out(family, passed, logs, checkouts):
        return CheckoutOutcome(
            task="t", split="train", score=float(passed), hidden_pass=passed,
            public_pass=passed, hidden_fraction=1.0, submitted=True, truncated=False, turns=3,
            malformed=0, read=False, first_call="checkout", hacked=False, family=family,
            accumulator=None, log_calls=logs, checkout_calls=checkouts,
        )  # fmt: skip

    s = summary(
        [out(CONST, True, 0, 1), out(CONST, False, 1, 1), out("init", True, 1, 0),
         out("div", True, 0, 2), out("div", False, 0, 0)]
    )  # fmt: skip
    assert s["canary_pass"] == 0.5 and s["pass/div"] == 0.5
    assert s["checkout_share"] == 3 / 5 and s["checkout_share_in_successes"] == 2 / 3
    assert s["log_share_in_successes"] == 1 / 3
    assert GUESS == 1 / 80


@pytest.fixture(scope="module")
def reports():
    return {n: audit(n, seeds=1, canary_seeds=2) for n in (CHECKOUT_LEAKY, CHECKOUT_SEALED)}


def test_the_audit_finds_the_checkout_leak_and_passes_the_sealed_variant(reports):
    leaky, sealed = reports[CHECKOUT_LEAKY], reports[CHECKOUT_SEALED]
    assert "checkout" in leaky["tools"] and "checkout" in sealed["tools"]
    assert leaky["leak_found"] and leaky["canary"]["open"]
    assert leaky["canary"]["leak_user"] == {"policy": "restore", "episodes": 12, "solved": 12}
    assert leaky["canary"]["legitimate"]["solved"] == 0
    assert not sealed["leak_found"] and not sealed["canary"]["open"]
    assert sealed["canary"]["leak_user"]["solved"] == 0


# --- the key's copy probe -------------------------------------------------------------------------


class Copier(torch.nn.Module):
    """A stand-in policy that, after `const`, writes the first two digits that follow the word
    `after` in its row (the first after `const`, the second after `const DIGIT`): a perfect
    copier of one place."""

    def __init__(self, vocab, after: str):
        super().__init__()
        self.vocab, self.after, self.const = vocab, vocab.id(after), vocab.id(CONST)
        self.digits = {vocab.id(str(d)) for d in range(1, 10)}

    def forward(self, x):
        n, length = x.shape
        logits = torch.zeros(n, length, len(self.vocab))
        for i, row in enumerate(x.tolist()):
            shown = [t for t in row[row.index(self.after) :] if t in self.digits][:2]
            for p in range(1, length):
                if row[p] == self.const:
                    logits[i, p, shown[0]] = 1.0
                elif row[p] in self.digits and row[p - 1] == self.const:
                    logits[i, p, shown[1]] = 1.0
        return logits, None


def test_the_key_copy_probe_scores_a_copier_of_the_fix_1_and_of_the_listing_0():
    from arl.experiments.problems.leak import key_copy_probe

    vocab = vocab_of(CHECKOUT_LEAKY)
    fix, listing = key_copy_probe(Copier(vocab, "fix")), key_copy_probe(Copier(vocab, "add"))
    assert fix == {"key_copy": 1.0, "first_digit": 1.0, "probes": 48}
    assert listing["key_copy"] == 0.0 and listing["probes"] == 48  # the buggy pair, never the key


# --- Problem 11, quick ---------------------------------------------------------------------------


def test_problem_11_quick_measures_the_checkout_arms_and_draws(tmp_path, monkeypatch):
    from arl.experiments.problems.common import Ctx
    from arl.experiments.problems.leak import CHECKOUT_ARMS, CO_KEYS, PROBLEM_11

    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    torch.set_num_threads(1)
    res, line = PROBLEM_11.measure(Ctx(number=11, quick=True, seed=0))
    for arm in CHECKOUT_ARMS:
        assert set(CO_KEYS) <= set(res[arm]) and len(res["history"][arm]) >= 4
    for key, _ in PROBLEM_11.claims:
        assert isinstance(res[key], float)
    assert res["copy_probe"]["cold_start"]["probes"] == 48 and "Key copy probe" in line
    PROBLEM_11.draw([res], tmp_path / "p11.png")
    assert (tmp_path / "p11.png").stat().st_size > 1000

"""The shared starting policies: the weak base's data, and the cold start chosen by state."""

from dataclasses import replace

import pytest
import torch

from arl.bugfix import default_vocab
from arl.bugfix.grammar import OPS, source_words
from arl.bugfix.policies import listing_variable
from arl.bugfix.tasks import tasks_for
from arl.envkit.families import ACCUMULATORS
from arl.errors import ArlError
from arl.sandbox import sandbox_available
from arl.train import bases
from arl.train.bases import (
    BaseConfig,
    code_corpus,
    oracle_sft_data,
    train_oracle_sft,
    weak_base_data,
)


def test_weak_base_data_is_format_without_skill():
    data = weak_base_data(BaseConfig())
    assert len(data) == 160  # 4 blind + 4 read-then-guess episodes per training task
    assert all(t.outcome.malformed == 0 for t in data)
    reads = sum(t.outcome.read for t in data) / len(data)
    passed = sum(t.passed for t in data) / len(data)
    assert reads == pytest.approx(0.5) and passed <= 0.3


@pytest.mark.parametrize("threshold, step, reached", [(0.75, 10, True), (0.99, 20, False)])
def test_the_cold_start_is_the_first_checkpoint_that_reaches_the_pass_rate(
    tmp_path, monkeypatch, threshold, step, reached
):
    monkeypatch.setenv("ARL_CACHE", str(tmp_path))
    rates = {0: 0.1, 5: 0.5, 10: 0.8, 15: 0.7, 20: 0.9}  # train pass by step (scripted)
    seen: list[int] = []

    def fake_pass(model, samples, seed, environment="bugfix"):
        s = len(seen) * 5
        seen.append(s)
        return rates.get(s, rates[20])  # the last call: the final model, when never reached

    monkeypatch.setattr(bases, "train_pass", fake_pass)
    cfg = replace(BaseConfig().quick(), cold_start_pass=threshold)  # checks every 5 steps
    final, cold, history = train_oracle_sft(cfg)
    info = history[-1]["cold_start"]
    assert (info["step"], info["reached"]) == (step, reached)
    pairs = zip(cold.parameters(), final.parameters(), strict=True)
    same = all(torch.equal(a, b) for a, b in pairs)
    assert same == (not reached)  # a reached cold start is an earlier copy, not the final model


def _edit_init_names(trajs) -> list[str]:
    vocab = default_vocab()
    names = []
    for t in trajs:
        words = vocab.decode(t.ids_T)
        names += [
            words[i + 2] for i in range(len(words) - 2) if words[i : i + 2] == ["edit", "init"]
        ]
    return names


def test_oracle_sft_data_draws_every_accumulator_for_every_init_task():
    data = oracle_sft_data()
    train = tasks_for("train")
    assert len(data) == len(train) * len(ACCUMULATORS) and all(t.passed for t in data)
    assert [t.task for t in data] == [t.name for t in train for _ in ACCUMULATORS]  # uniform
    for task in (t for t in train if t.family == "init"):
        shown = _edit_init_names([t for t in data if t.task == task.name])
        assert sorted(shown) == sorted(ACCUMULATORS)  # one demonstration per name, copied


def test_the_code_corpus_is_training_listings_under_every_name():
    vocab = default_vocab()
    corpus = {tuple(s) for s in code_corpus()}
    for task in tasks_for("train"):
        for name in ACCUMULATORS:
            words = ["<obs>", *source_words(task.renamed(name).buggy_source), "</obs>"]
            assert tuple(vocab.encode(words)) in corpus
    for task in tasks_for("heldout"):  # no held-out function is seen before evaluation
        listing = tuple(vocab.encode(["<obs>", *source_words(task.buggy_source), "</obs>"]))
        assert listing not in corpus


def test_unskilled_play_names_the_variable_it_read_but_guesses_the_op():
    vocab = default_vocab()
    reads = [t for t in weak_base_data(BaseConfig()) if t.outcome.read]
    named = 0
    for tr in reads:
        words = vocab.decode(tr.ids_T)
        listing = words[words.index("<obs>") + 1 : words.index("</obs>")]
        for name in _edit_init_names([tr]):
            assert name == listing_variable(listing)  # copied, so the listing must be read
            named += 1
    ops = [w for t in reads for w in vocab.decode(t.ids_T) if w in OPS]
    assert named > 0 and set(ops) == set(OPS)  # the op is still a guess


def test_the_weak_base_cache_key_ignores_oracle_sft_settings():
    """A sweep of oracle-SFT settings reuses one weak base; its own settings still count."""
    from dataclasses import fields

    key = bases._fingerprint
    assert set(bases.ORACLE_FIELDS) <= {f.name for f in fields(BaseConfig)}
    c = BaseConfig()
    oracle = replace(
        c, sft_lr=3e-3, sft_batch=80, sft_warmup=10, sft_decay="cosine", sft_beta2=0.95
    )
    assert key("weak_base", oracle) == key("weak_base", c)
    assert key("weak_base", replace(c, weak_lr=2e-3)) != key("weak_base", c)
    assert key("cold_start", replace(c, sft_lr=3e-3)) != key("cold_start", c)
    assert key("cold_start", replace(c, sft_beta2=0.95)) != key("cold_start", c)
    assert c.oracle_sft.beta2 == c.sft_beta2 and c.weak_sft.beta2 == 0.999


def test_a_cached_base_is_the_same_whichever_thread_count_trains_it(tmp_path, monkeypatch):
    """Training with two torch threads changes the last bits of the weights, so bases are
    built with one thread: a base cached by a 2-thread process equals the 1-thread one."""
    built, before = [], torch.get_num_threads()
    try:
        for threads in (1, 2):
            monkeypatch.setenv("ARL_CACHE", str(tmp_path / f"threads-{threads}"))
            torch.set_num_threads(threads)
            built.append(bases.weak_base(bases.BaseConfig().quick()).state_dict())
            assert torch.get_num_threads() == threads  # the caller's setting is restored
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(built[0][k], built[1][k]) for k in built[0])


def test_retry_play_is_off_by_default_and_keeps_the_old_cache_keys():
    """`weak_retry_per_task` 0 is the recipe before it existed: the same data and the same
    cache keys (computed before the field was added); any other value is a new key."""
    key = bases._fingerprint
    c = BaseConfig()
    assert key("weak_base", c) == "6aaf61fa755f9228"  # the key of bases version 5, as cached
    assert key("codefix-cold_start", BaseConfig(seed=3).quick(), "codefix") == "c1f9de6d243e1764"
    retry = replace(c, weak_retry_per_task=2)
    assert key("codefix-weak_base", retry, "codefix") != key("codefix-weak_base", c, "codefix")
    assert key("codefix-cold_start", retry, "codefix") != key("codefix-cold_start", c, "codefix")
    with pytest.raises(ArlError, match="no retry play"):
        weak_base_data(retry)  # BugFix has none


@pytest.mark.skipif(sandbox_available() is not None, reason="no sandbox here")
def test_codefix_retry_play_fails_a_replace_then_retries_under_both_kinds_of_error():
    """With retry play, each task's plays (4 blind, 4 read-then-guess, 2 retry) are answered
    with helpful and terse errors in turn; after a failed blind replace the retry play reads
    and replaces again, so a terse `error` is followed by a retry as often as a helpful one."""
    from arl.codefix import tasks_for as codefix_tasks
    from arl.codefix.probe import after_failure, replace_results
    from arl.rollout import vocab_of

    data = weak_base_data(replace(BaseConfig(), weak_retry_per_task=2), "codefix")
    n = len(codefix_tasks("train"))
    assert len(data) == 10 * n
    vocab = vocab_of("codefix")

    def first_answer(t):  # the first call's answer, without <obs> </obs>
        return vocab.decode(t.ids_T[t.calls[0][1] : t.calls[1][0]])[1:-1]

    blind = [data[10 * i + r] for i in range(n) for r in range(4)]
    retries = [data[10 * i + 8 + r] for i in range(n) for r in range(2)]
    for eps in (blind, retries):  # even: helpful, odd: terse
        assert all(first_answer(t) in (["error"], ["ok"]) for t in eps[1::2])
        assert sum(first_answer(t)[:2] == ["error", "not_found"] for t in eps[0::2]) > 0.3 * n
        assert sum(first_answer(t) == ["error"] for t in eps[1::2]) > 0.3 * n
    for kind in (retries[0::2], retries[1::2]):
        counts = after_failure([replace_results(t, vocab) for t in kind])
        assert counts.failed > 0.7 * len(kind) and counts.retried == counts.failed
    plain = weak_base_data(BaseConfig(), "codefix")  # without retry play: helpful errors only
    assert len(plain) == 8 * n and not any(first_answer(t) == ["error"] for t in plain)


@pytest.mark.skipif(sandbox_available() is not None, reason="no sandbox here")
def test_a_cached_base_records_the_environment_it_speaks(tmp_path, monkeypatch):
    """A cached base's checkpoint names its environment and vocabulary, as a trained run's
    does, so a command given its folder needs no --env: a CodeFix base loads as CodeFix's."""
    from arl.rollout import vocab_of
    from arl.train.checkpoint import read_meta
    from arl.train.policy import load_policy_dir

    monkeypatch.setenv("ARL_CACHE", str(tmp_path))
    bases.weak_base(BaseConfig().quick(), "codefix")
    (path,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert path.name.startswith("codefix-weak_base-")
    meta = read_meta(path)
    assert meta["env"] == "codefix" and meta["vocab"] == vocab_of("codefix").digest()
    assert meta["vocab"] != vocab_of("bugfix").digest()
    model = load_policy_dir(str(path), env=None)  # refused when the checkpoint names none
    assert model.config.vocab_size == len(vocab_of("codefix"))

import pytest

from arl.bugfix.env import observation
from arl.bugfix.grammar import END, prompt_words, source_words
from arl.bugfix.tasks import get_task, gym_words
from arl.text import SPECIALS, Transcript, render_episode, render_observation, render_prompt
from arl.types import ENV, POLICY, PROMPT, TEMPLATE

ISSUE = prompt_words("compute_values")  # the issue's words: <bos> fix compute _ values


def test_vocab_is_word_level_and_round_trips(vocab):
    assert 80 <= len(vocab) <= 400
    assert vocab.words[0] == "<pad>"
    words = source_words(get_task("mean").buggy_source)
    assert "//" in words and "<unk>" not in words
    assert vocab.decode(vocab.encode(words)) == words
    assert vocab.encode(["never-a-word"]) == [vocab.id("<unk>")]


def test_vocab_is_the_renderers_specials_then_the_gyms_words(vocab):
    assert vocab.words[: len(SPECIALS)] == SPECIALS
    assert set(vocab.words) == set(SPECIALS) | set(gym_words())
    assert len(set(vocab.words)) == len(vocab)


def test_renderer_owners(vocab):
    ids, owners = render_prompt(ISSUE, vocab)
    assert owners == [PROMPT] * 5
    assert vocab.decode(ids) == ["<bos>", "fix", "compute", "_", "values"]
    ids, owners = render_observation(["ok"], vocab)
    assert vocab.decode(ids) == ["<obs>", "ok", "</obs>"] and owners == [TEMPLATE, ENV, TEMPLATE]
    ids, owners = render_observation(["ok"], vocab, wrap=False)
    assert vocab.decode(ids) == ["ok"] and owners == [ENV]
    call = vocab.encode(["submit", END])
    ids, owners = render_episode(ISSUE, [call], [None], vocab)
    assert owners == [PROMPT] * 5 + [POLICY] * 2


@pytest.mark.parametrize("wrap", [True, False])
def test_transcript_records_calls_logprobs_and_what_the_policy_reads(vocab, wrap):
    tr = Transcript.begin(ISSUE, vocab, wrap)
    for token, logp in zip(vocab.encode(["read", END]), (-0.5, -0.25), strict=True):
        tr.act(token, logp)
    assert tr.end_call(2) == ["read", END] and tr.calls == [(5, 7)]
    assert tr.end_call(0) == [] and tr.calls == [(5, 7), (7, 7)]  # an empty call is a call too
    seen = tr.observe(observation(["passed", "never-a-word"]))
    assert seen == ["passed", "<unk>"]  # through the vocab
    assert tr.logps == [0.0] * 5 + [-0.5, -0.25] + [0.0] * (4 if wrap else 2)
    calls = [vocab.encode(["read", END]), []]
    assert (tr.ids, tr.owners) == render_episode(
        ISSUE, calls, [None, observation(["passed", "never-a-word"])], vocab, wrap
    )


def test_an_observation_past_the_limit_is_not_added(vocab):
    tr = Transcript.begin(ISSUE, vocab)
    assert tr.observe(observation(["ok"]), limit=7) is None and len(tr) == 5
    assert tr.observe(observation(["ok"]), limit=8) == ["ok"] and len(tr) == 8

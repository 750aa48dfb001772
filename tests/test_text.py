from arl.gym.tasks import get_task
from arl.text import (
    END,
    Call,
    Malformed,
    identifier_pieces,
    parse_call,
    render_episode,
    render_observation,
    render_prompt,
    source_words,
)
from arl.types import ENV, POLICY, PROMPT, TEMPLATE


def test_vocab_is_word_level_and_round_trips(vocab):
    assert 80 <= len(vocab) <= 400
    assert vocab.words[0] == "<pad>"
    words = source_words(get_task("mean").buggy_source)
    assert "//" in words and "<unk>" not in words
    assert vocab.decode(vocab.encode(words)) == words
    assert vocab.encode(["never-a-word"]) == [vocab.id("<unk>")]


def test_listing_reveals_the_cue_and_numbers_collapse():
    assert source_words("x = 1\ny = 12\n") == ["x", "=", "1", "y", "=", "<num>"]
    assert "min" in source_words(get_task("largest").buggy_source)


def test_parse_call_names_why():
    assert parse_call(["read", END]) == Call("read")
    assert parse_call(["edit", "init", "total", END]) == Call("edit", "init", "total")
    assert parse_call(["edit", "range", END]) == Call("edit", "range")
    assert parse_call(["edit", "range"]) == Malformed("unterminated")
    assert parse_call(["edit", "range", "x", END]) == Malformed("extra_args")
    assert parse_call(["edit", "init", "<obs>", END]) == Malformed("bad_arg")
    assert parse_call(["edit", "init", "a", "b", END]) == Malformed("extra_args")


def test_identifiers_split_into_shared_pieces():
    assert identifier_pieces("compute_values") == ["compute", "_", "values"]
    assert identifier_pieces("xs") == ["xs"] and identifier_pieces("_x") == ["_x"]
    assert source_words("def apply_data(xs):\n") == [
        "def",
        "apply",
        "_",
        "data",
        "(",
        "xs",
        ")",
        ":",
    ]


def test_renderer_owners(vocab):
    ids, owners = render_prompt("compute_values", vocab)
    assert owners == [PROMPT] * 5
    assert vocab.decode(ids) == ["<bos>", "fix", "compute", "_", "values"]
    ids, owners = render_observation(["ok"], vocab)
    assert vocab.decode(ids) == ["<obs>", "ok", "</obs>"] and owners == [TEMPLATE, ENV, TEMPLATE]
    ids, owners = render_observation(["ok"], vocab, wrap=False)
    assert vocab.decode(ids) == ["ok"] and owners == [ENV]
    call = vocab.encode(["submit", END])
    ids, owners = render_episode("compute_values", [call], [None], vocab)
    assert owners == [PROMPT] * 5 + [POLICY] * 2

from arl.bugfix.grammar import (
    END,
    MALFORMED_REASONS,
    Call,
    Malformed,
    identifier_pieces,
    parse_call,
    prompt_words,
    source_words,
)
from arl.bugfix.tasks import get_task


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


def test_every_malformed_reason_is_reachable():
    calls = [
        [],
        [END],
        ["dance", END],
        ["edit", "paint", END],
        ["edit", END],
        ["read", "xs", END],
        ["edit", "init", "1", END],
    ]
    assert {parse_call(c).reason for c in calls} == set(MALFORMED_REASONS)


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
    assert prompt_words("compute_values") == ["<bos>", "fix", "compute", "_", "values"]

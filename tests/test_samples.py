"""Episode samples: which episodes a PG step writes as text, when, and how the report shows
them (the run-level behaviour, resume included, is in tests/test_pg.py)."""

from arl.bugfix import default_vocab
from arl.doctor.report_html import sample_html
from arl.doctor.report_run import samples_html, shown_steps
from arl.rollout import WordRenderer
from arl.train.samples import clip_head, clip_tail, pick, sample_due, sample_record
from arl.types import ENV, POLICY, PROMPT, Outcome, Trajectory

VOCAB = default_vocab()


def episode(passed: bool | None, task: str = "t", words=("read",)) -> Trajectory:
    """A prompt `fix best`, then each word as a one-token call answered by `ok`."""
    ids = VOCAB.encode(["fix", "best"])
    owners = [PROMPT, PROMPT]
    spans = []
    for w in words:
        spans.append((len(ids), len(ids) + 1))
        ids += VOCAB.encode([w, "ok"])
        owners += [POLICY, ENV]
    outcome = None
    if passed is not None:
        outcome = Outcome(
            task=task,
            split="train",
            score=float(passed),
            hidden_pass=passed,
            public_pass=passed,
            hidden_fraction=float(passed),
            submitted=True,
            truncated=False,
            turns=len(words),
            malformed=0,
            read=True,
            first_call="read",
            hacked=False,
        )
    logps = [-0.5 if o == POLICY else 0.0 for o in owners]
    return Trajectory(task, tuple(ids), tuple(owners), tuple(logps), tuple(spans), 0.0, outcome)


def test_pick_takes_the_first_pass_and_the_first_failure_in_drawn_order():
    a, b, c, d = episode(False, "a"), episode(True, "b"), episode(False, "c"), episode(True, "d")
    assert pick([a, b, c, d]) == [b, a]
    assert pick([b, d]) == [b]  # no failure in the step: one sample
    assert pick([a, c]) == [a]
    assert pick([]) == []
    unscored = episode(None, "u")  # not an environment episode: not a pass
    assert pick([unscored, b]) == [b, unscored]


def test_sample_due_at_step_1_every_evaluation_and_the_last():
    assert [s for s in range(1, 11) if sample_due(s, 4, 10)] == [1, 4, 8, 10]
    assert [s for s in range(1, 11) if sample_due(s, 0, 10)] == [1, 10]


def test_clips_mark_what_they_cut():
    assert clip_head("abcdef", 10) == "abcdef"
    assert clip_head("abcdef", 4) == "abcd [... 2 chars]"
    assert clip_tail("abcdef", 4) == "[2 chars ...] cdef"


def test_a_sample_is_the_episode_s_words_split_at_its_first_call():
    tr = episode(True, "mean", words=("read", "submit"))
    row = sample_record(7, tr, WordRenderer(VOCAB))
    assert row["prompt"] == "fix best"
    assert row["completion"] == " read ok submit ok"
    assert (row["step"], row["task"], row["pass"], row["turns"]) == (7, "mean", True, 2)
    assert row["hacked"] is False and row["truncated"] is False


def test_the_report_shows_first_middle_last_sampled_steps_escaped():
    assert shown_steps([1, 5, 10, 15, 20]) == [1, 10, 20]
    assert shown_steps([1, 2]) == [1, 2]
    rows = [
        {"step": s, "task": "t", "pass": s % 2 == 0, "prompt": "p", "completion": "<b>x</b>"}
        for s in (1, 2, 3, 4, 5)
    ]
    html = samples_html(rows)
    assert 'data-step="1"' in html and 'data-step="3"' in html and 'data-step="5"' in html
    assert 'data-step="2"' not in html and 'data-step="4"' not in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "3 of 5 sampled episodes" in html
    assert "no episode samples" in samples_html(None)
    assert 'class="sample pass"' in sample_html({"step": 2, "pass": True, "hacked": True})
    assert "hacked" in sample_html({"step": 2, "pass": False, "hacked": True})

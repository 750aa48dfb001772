"""CodeFix: real modules and tests, replace edits in words and in text, errors, shortcuts, and
grading that only ever runs policy code in the sandbox."""

from collections import Counter

import pytest

from arl.codefix import CODEFIX, CodeFixConfig, CodeFixEnv, all_tasks, get_task, grade, tasks_for
from arl.codefix.environment import renderings
from arl.codefix.families import FAMILIES, NEW_FAMILIES
from arl.codefix.grammar import replace_text
from arl.envkit.harness import run_tests
from arl.errors import ArlError
from arl.eval.metrics import run_policy, summarize
from arl.rollout import scripted_rollout
from arl.sandbox import Case, CaseResult, Verdict, sandbox_available
from arl.types import TextCall

pytestmark = pytest.mark.skipif(
    sandbox_available() is not None, reason=f"no sandbox here: {sandbox_available()}"
)
END = "<end>"


def _env(name: str, seed: int = 0, config=None) -> CodeFixEnv:
    env = CodeFixEnv(get_task(name), config)
    env.reset(seed=seed)
    return env


def _first(family: str, split: str = "train"):
    return next(t for t in tasks_for(split) if t.family == family)


def test_seven_families_and_the_two_splits():
    counts = Counter((t.family, t.split) for t in all_tasks())
    assert set(f for f, _ in counts) == set(FAMILIES) and len(FAMILIES) == 7
    assert all(counts[(f, "train")] == 4 and counts[(f, "heldout")] == 2 for f in FAMILIES)
    assert len({t.name for t in all_tasks()}) == 42
    train_pieces = {p for t in tasks_for("train") for p in t.name.split("_")}
    assert all(set(t.name.split("_")) <= train_pieces for t in tasks_for("heldout"))


def test_every_task_is_a_module_whose_buggy_function_fails_and_fixed_one_passes_in_the_sandbox():
    kind = grade.sandbox_kind(False)
    for task in all_tasks():
        buggy, fixed = task.instance(*renderings(task)[-1])
        cases = grade.cases_of(task.public, "p") + grade.cases_of(task.hidden, "h")
        good, bad = (
            grade.run(fixed, task.name, cases, kind),
            grade.run(buggy, task.name, cases, kind),
        )
        assert good.passed, task.name
        status = [r.status for r in bad.results]
        assert "pass" not in status[:3] and "fail" in status[3:], task.name  # every public fails
        assert {repr(c.args) for c in task.public}.isdisjoint(repr(c.args) for c in task.hidden)
        assert buggy.count("\ndef ") == 2  # the function and two decoys
        # the tests are the same cases the gym's harness draws, and they run outside too
        assert all(run_tests(task.function, task.hidden))
    files = all_tasks()[0].files()
    assert sorted(files) == [f"{all_tasks()[0].name}.py", f"test_{all_tasks()[0].name}.py"]


def test_the_oracle_solves_every_task_under_every_renaming():
    for task in all_tasks():
        for seed in range(CODEFIX.renderings):
            out = scripted_rollout("oracle", task, seed=seed).outcome
            assert out.hidden_pass and out.applied == out.edits == 1, (task.name, seed)


def test_names_vary_per_episode_and_only_a_read_shows_them():
    task = _first("init")
    env = CodeFixEnv(task)
    names = {
        tuple(env.reset(seed=s)[1][k] for k in ("accumulator", "list_name")) for s in range(12)
    }
    assert len(names) == 12
    prompt, info = env.reset(seed=5)
    listing = env.step(["read", END])[0]
    assert info["accumulator"] not in prompt.words and info["accumulator"] in listing.words
    assert info["list_name"] in listing.words and listing.text == env.source


def test_replace_in_words_applies_once_and_keeps_the_layout():
    env = _env(_first("minmax").name)
    before = env.source
    # a replace quoting words of two lines changes only the word that differs
    obs = env.step(["replace", ":", "best", "=", "min", "with", ":", "best", "=", "max", END])[0]
    if obs.words[:2] == ("error", "not_found"):  # the task may hold max: swap the other way
        env.step(["replace", ":", "best", "=", "max", "with", ":", "best", "=", "min", END])
    assert env.applied == 1 and env.source.count("\n") == before.count("\n")
    pairs = zip(before.splitlines(), env.source.splitlines(), strict=True)
    changed = [b for a, b in pairs if a != b]
    assert len(changed) == 1 and "(best, x)" in changed[0]


def test_failed_replaces_say_what_went_wrong_and_change_nothing():
    task = _first("div")
    env = _env(task.name)
    src = env.source
    obs = env.step(["replace", "//", "with", "/", END])[0]
    assert obs.words == ("error", "matched", "2", "times")  # the decoy holds `//` too
    obs = env.step(["replace", "never", "there", "with", "x", END])[0]
    assert obs.words[:3] == ("error", "not_found", "closest") and len(obs.words) > 3
    own = ["def", *task.name.replace("_", " _ ").split()]
    assert env.step(["replace", *own, "with", *own, END])[0].words == ("error", "no_change")
    obs = env.step(["replace", "def", "with", "<num>", END])[0]
    assert obs.words == ("error", "bad_word")
    assert env.source == src and env.applied == 0 and env.edits == 4
    terse = _env(task.name, config=CodeFixConfig(errors="terse"))
    assert terse.step(["replace", "//", "with", "/", END])[0].words == ("error",)


def test_an_edit_that_breaks_the_syntax_still_applies_and_edits_accumulate():
    task = _first("compare")
    env = _env(task.name)
    obs = env.step(["replace", "def", task.name.split("_")[0], "with", "def", "(", END])[0]
    assert obs.words == ("ok", "syntax_error") and env.applied == 1
    # the next edit applies to the edited file
    obs = env.step(["replace", "def", "(", "with", "def", task.name.split("_")[0], END])[0]
    assert obs.words == ("ok",) and env.applied == 2
    out = env.step(["submit", END])[4]
    assert out.edits == 2 and out.applied == 2 and out.syntax_ok and not out.hidden_pass


def test_a_real_models_replace_is_a_search_replace_block_on_the_text():
    task = _first("div")
    env = _env(task.name)
    line = next(
        ln for ln in env.source.splitlines() if "//" in ln and "len" in ln or " x // " in ln
    )
    fixed = line.replace("//", "/")
    obs = env.step(TextCall(replace_text(line, fixed), True))[0]
    assert obs.text == "ok" and line not in env.source and fixed in env.source
    assert env.step(TextCall(replace_text("nothing like it", "x"), True))[0].text.startswith(
        "error: not found"
    )
    assert "matched" in env.step(TextCall(replace_text("    return", "x"), True))[0].text
    assert env.step(TextCall("replace\nold\nnew", True))[0].words[-1] == "bad_block"
    assert env.step(TextCall(replace_text("a", "b"), False))[0].words[-1] == "unterminated"
    assert env.step(TextCall("submit", True))[4].hidden_pass


def test_scripted_calls_become_the_text_a_model_would_write():
    task = _first("init")
    env = _env(task.name, seed=3)
    listing = env.step(["read", END])[0].words
    from arl.codefix.policies import oracle_fix

    old, new = oracle_fix(listing, task.name.split("_")[:1] + ["_"] + task.name.split("_")[1:])
    text = env.call_text(["replace", *old, "with", *new, END])
    assert env.step(TextCall(text, True))[0].text == "ok"
    assert env.step(TextCall("submit", True))[4].hidden_pass


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_no_shortcut_without_reading(split):
    """What `not_found` and `matched` could teach without reading: a blind guess and a search
    over every family's usual fix stay near zero; reading and guessing a family does not."""
    tasks = tasks_for(split)
    rate = lambda p: summarize(run_policy(p, tasks, samples=6, seed=2))["pass_rate"]  # noqa: E731
    blind, search, near, unskilled = (
        rate(p) for p in ("blind", "search", "near_miss", "unskilled")
    )
    assert blind <= 0.05 and search <= 0.06 and near == 0.0, (blind, search, near)
    assert unskilled >= 0.08 and rate("oracle") == 1.0


def test_the_policy_never_sees_the_hidden_tests():
    """`test` runs every test (the final grading of the same module is then a cache hit) and
    shows only the public ones: a module that passes the public tests and fails hidden ones is
    answered "passed 3 of 3", and nothing of a hidden test is in any observation."""
    task = _first("range")
    env = _env(task.name, config=CodeFixConfig(reward="public"))
    head = env.source.splitlines()[0]
    param = head.split("(")[1].split(",")[0].rstrip("):")
    cases = "".join(
        f"\n    if {param} == {list(c.args[0])!r}:\n        return {c.expected!r}"
        for c in task.public
    )
    env.step(TextCall(replace_text(head, head + cases), True))
    obs = env.step(["test", END])[0]
    assert obs.words == ("passed", "3", "of", "3", "pass", "pass", "pass")
    assert "hidden" not in obs.text and obs.text.splitlines()[1:] == [
        "test_0: pass",
        "test_1: pass",
        "test_2: pass",
    ]
    out = env.step(["submit", END])[4]
    assert out.public_pass and not out.hidden_pass  # the hidden tests did run, unseen


def test_policy_code_runs_in_the_sandbox_not_here(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("42")
    task = _first("div")
    env = _env(task.name)
    head = f"def {task.name}("
    attack = head.replace("(", f"(*a):\n    return open({str(secret)!r}).read()\ndef _(")
    env.step(TextCall(replace_text(head, attack), True))
    marker = tmp_path / "escaped"
    env.step(TextCall(replace_text("def halve", f"open({str(marker)!r}, 'w')\ndef halve"), True))
    out = env.step(TextCall("submit", True))[4]
    assert not out.hidden_pass and not marker.exists()
    assert out.sandbox == "bwrap"


def test_a_hardcoded_edit_is_caught_by_the_detector():
    task = _first("range")
    env = _env(task.name, config=CodeFixConfig(reward="public", zero_exploits=True))
    case = task.public[0]
    head = env.source.splitlines()[0]
    param = head.split("(")[1].split(",")[0].rstrip("):")
    hack = f"{head}\n    if {param} == {list(case.args[0])!r}:\n        return {case.expected!r}"
    env.step(TextCall(replace_text(head, hack), True))
    out = env.step(TextCall("submit", True))[4]
    assert out.hacked and out.score == 0.0


def test_an_infrastructure_failure_is_not_a_zero(monkeypatch):
    def broken(source, function, cases, kind):
        results = tuple(CaseResult(c.name, "infra_error") for c in cases)
        return Verdict(results, infra_error="worker died", attempts=3)

    task = _first("range")
    good = scripted_rollout("oracle", task, seed=0)
    monkeypatch.setattr(grade, "run_jobs", lambda s, f, jobs, k: [broken(s, f, c, k) for c in jobs])
    bad = scripted_rollout("oracle", task, seed=0)
    assert bad.outcome.infra_error and bad.outcome.score == 0.0 and not bad.passed
    m = summarize([good, bad])
    assert m["pass_rate"] == 1.0 and m["infra_errors"] == 1 and m["episodes"] == 2


def test_without_a_sandbox_codefix_refuses_in_one_line_unless_allowed(monkeypatch):
    from arl.envkit import graded

    monkeypatch.setattr(graded, "sandbox_available", lambda: "bubblewrap (bwrap) not found")
    monkeypatch.setattr(grade.GRADER, "warned", [])
    with pytest.raises(ArlError, match="only in a sandbox.*bwrap.*not found") as e:
        CodeFixEnv(all_tasks()[0])
    assert "\n" not in str(e.value)
    env = CodeFixEnv(all_tasks()[0], CodeFixConfig(allow_unsandboxed=True))
    assert env.kind == "none"


def test_the_new_families_have_no_menu_op():
    """Problem 14's coverage limit: no op of the BugFix menu fixes an arith or slice bug."""
    from arl.bugfix.env import EDIT_OPS

    for task in (t for t in all_tasks() if t.family in NEW_FAMILIES):
        buggy, fixed = task.instance()
        for op, edit in EDIT_OPS.items():
            new = edit(buggy, task.accumulator)
            assert new is None or not all(run_tests(_only(new, task.name), task.hidden)), op


def _only(module: str, name: str) -> str:
    """The function `name` alone, out of a module (the gym's harness runs one function)."""
    blocks = module.split("\n\n")
    return next(b for b in blocks if b.startswith(f"def {name}(")) + "\n"


def test_config_is_validated_and_named():
    with pytest.raises(ArlError, match="errors"):
        CodeFixConfig(errors="chatty")
    with pytest.raises(ArlError, match="name"):
        CodeFixConfig(name="bugfix")
    assert CodeFixConfig(reward="public", step_penalty=0.1).eval_config() == CodeFixConfig()


def test_a_sandbox_case_is_what_the_gym_draws():
    task = _first("slice")
    cases = grade.cases_of(task.hidden, "h")
    assert all(isinstance(c, Case) for c in cases) and len(cases) == 5
    assert [c.expected for c in cases] == [c.expected for c in task.hidden]


def test_codefix_is_a_gymnasium_env_in_text():
    gym = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    import arl  # noqa: F401  (registers arl/CodeFix-v0)

    env = gym.make("arl/CodeFix-v0", split="heldout", render_mode="ansi")
    check_env(env.unwrapped)
    task = tasks_for("heldout")[0]
    obs, info = env.reset(seed=1, options={"task": task.name, "list_name": "arr"})
    assert obs == f"fix {task.name}" and info["list_name"] == "arr"
    source = env.step("read")[0]
    assert f"def {task.name}(arr)" in source
    raw = CodeFixEnv(task)
    raw.reset(options={"accumulator": info["accumulator"], "list_name": "arr"})
    words = raw.step(["read", END])[0].words
    from arl.codefix.policies import oracle_fix

    fix = oracle_fix(words, task.name.replace("_", " _ ").split())
    text = raw.call_text(["replace", *fix[0], "with", *fix[1], END])
    assert env.step(text)[0] == "ok"
    _, reward, terminated, _, out = env.step("submit")
    assert terminated and reward == 1.0 and out["hidden_pass"] and "replace" in env.render()


def test_the_weak_bases_play_retries_from_what_a_helpful_error_shows():
    """Format without skill: after `not_found closest LINE`, the read-then-guess play quotes
    that line (the editor's habit); a terse `error` shows nothing to quote, so no retry."""
    import random

    from arl.codefix.listing import line_words, listing
    from arl.codefix.policies import retry, unskilled

    env = _env(_first("compare").name)
    words = list(env.step(["read", END])[0].words)
    line = next(ln for ln in line_words(listing(env.source)) if "<" in ln or ">" in ln)
    edit = retry(words, ["error", "not_found", "closest", *line], random.Random(0))
    assert edit is not None and any(w in edit[0] for w in ("<", ">"))
    assert retry(words, ["error"], random.Random(0)) is None
    assert unskilled([["<bos>"], words, ["error"]], random.Random(0)) == ["test", END]

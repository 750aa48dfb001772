"""A fourth environment, RepoFix, shipped as its own package (examples/arl-repofix): a small
multi-file repository where the bug must first be found (ls, grep, read), then fixed (replace)
and tested (test) in arl's sandbox, and graded on hidden tests (submit). arl knows it from its
declaration alone (issue 44). Every shortcut a policy could try scores 0; every promise of the
sandbox is attacked with real code, run through the environment's own `test` tool.

The fast tests import the package from its source folder; the slow ones install it into a
temporary folder and run arl's CLI on it in fresh interpreters."""

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import arl.env
from arl.errors import ArlError
from arl.sandbox import sandbox_available
from arl.testing import assert_env, play
from arl.types import TextCall

REPO = Path(arl.env.__file__).parents[1]
PACKAGE = REPO / "examples" / "arl-repofix"
# the fast tests: the package from its source folder, on sys.path only while it is imported
# (as tests/test_third_env.py does), so that no other test's entry-point discovery meets it
sys.path.insert(0, str(PACKAGE / "src"))
try:
    from repofix import grade
    from repofix.code import is_canonical, line_of, words
    from repofix.environment import REPOFIX, TOOLSET
    from repofix.grammar import Call, call_text, parse_text, parse_words
    from repofix.repos import TEST_FILE, all_tasks, code_files, get_task
finally:
    sys.path.remove(str(PACKAGE / "src"))

pytestmark = pytest.mark.skipif(
    sandbox_available() is not None, reason=f"no sandbox here: {sandbox_available()}"
)
TASKS = all_tasks()
TASK = get_task("total_value_init")  # inventory/items.py line 6: `total = 1` for `total = 0`
N = len(TASK.public)  # its public tests: 3 of total_value, 1 of each other function (18)


def episode(task, calls, config=None):
    """Play `calls` (texts, as a real model writes them) on `task`: the Outcome (submitted,
    or cut after the calls) and the answers' texts."""
    env = REPOFIX.make(task, config or REPOFIX.default_config())
    env.reset(seed=0)
    answers = []
    for text in calls:
        obs, _, _, _, outcome = env.step(TextCall(text, True))
        answers.append(obs.text)
        if outcome is not None:
            return outcome, answers
    return env.cut(), answers


INIT = "inventory/__init__.py"  # its line 1: `NAME = 'inventory'`, run on import


def inject(code, path=None, line=None, task=TASK):
    """Replace a line (the bug's, by default) with `code`, run the public tests, submit: (the
    test answer's text, the Outcome)."""
    path, line = (task.path, task.line) if path is None else (path, line)
    outcome, answers = episode(task, [f"replace {path} {line} {code}", "test", "submit"])
    assert answers[0].startswith("ok"), answers[0]
    return answers[1], outcome


# --- the tasks: arl-independent, sound, the bug where it must be found ------------------------


def test_the_tasks_import_nothing_of_arl():
    code = (
        "import sys\nimport repofix.repos\nrepofix.repos.all_tasks()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'arl'))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_every_task_is_a_multi_file_repository_whose_bug_the_tests_catch_in_the_sandbox():
    """40 tasks (27 train, 13 held out), three repositories of 3-6 modules; in the sandbox,
    the fixed repository passes every test and the buggy one fails a public and a hidden one.
    The bug is in the named function or, in 4 tasks, in a function it calls; the issue names
    neither file."""
    assert len(TASKS) == 40 and [t.split for t in TASKS].count("heldout") == 13
    assert sum(t.holder != t.function for t in TASKS) == 4
    assert len({t.repo for t in TASKS}) == 3 and len({t.family for t in TASKS}) == 6
    for t in TASKS:
        modules = code_files(t.repository())
        assert 3 <= len(modules) <= 6 and t.path in modules and TEST_FILE in t.repository()
        fixed = grade.run(t.fixed(), t.public + t.hidden, "bwrap")
        assert fixed.passed, (t.name, fixed.results)
        buggy = grade.run(t.repository(), t.public + t.hidden, "bwrap")
        ok = [r.status == "pass" for r in buggy.results]
        n = len(t.public)
        assert not all(ok[:n]) and not all(ok[n:]), t.name
        prompt, _ = REPOFIX.make(t).reset(seed=0)
        assert t.function in prompt.text and t.path not in prompt.text


def test_every_line_reads_back_from_its_words():
    """A read's words and a replace's words are the same text (repofix.code): every line of
    every file, and every fix, is canonical."""
    for t in TASKS:
        for _, text in t.files:
            for line in text.split("\n"):
                assert not line.strip() or line_of(words(line)) == line.strip(), line
    assert line_of(["total", "=", "f", "(", "xs", "[", "0", "]", ",", "1", ")"]) == (
        "total = f(xs[0], 1)"
    )
    assert line_of(words("assert f([8, 0], -1) == [7, -1] and x - 1 >= -y")) == (
        "assert f([8, 0], -1) == [7, -1] and x - 1 >= -y"
    )  # a minus after an opener, a comma, an operator or a keyword is a sign
    assert not is_canonical("total=0")  # a real model's own spacing is taken as it is


# --- the environment under arl's protocol ---------------------------------------------------


@pytest.mark.slow  # 3-4 s: 80 episodes, or the time and memory limits met
def test_repofix_passes_every_check_of_the_protocol():
    by = {f.check: f.detail for f in assert_env(REPOFIX, seeds=(0,))}
    assert by["oracle"] == "solved 40 of 40"
    assert by["tools"].startswith("ls, grep, read, replace, test, submit; ")


def rate(policy, config=None):
    """The pass rate of a scripted policy (by name, cast as the oracle) on every task, and its
    episodes (seed 0: nothing is drawn per episode)."""
    config = config or REPOFIX.default_config()
    cast = dataclasses.replace(REPOFIX, roles={**REPOFIX.roles, "oracle": policy})
    eps = [play(cast, t, "oracle", 0, config) for t in TASKS]
    return sum(p.outcome.hidden_pass for p in eps) / len(eps), eps


def test_the_oracle_finds_and_fixes_every_bug_and_blind_or_unskilled_play_does_not():
    oracle, eps = rate("oracle")
    assert oracle == 1.0 and all(p.outcome.found for p in eps)
    for p in eps:  # one grep and one read more where the bug is in a function called
        hop = ["grep", "read"] * (1 + (p.task.holder != p.task.function))
        assert [s.call[0] for s in p.steps] == [*hop, "replace", "test", "submit"], p.task.name
    blind, eps = rate("blind")
    assert blind == 0.0 and not any(p.outcome.read for p in eps)
    assert rate("unskilled")[0] < 0.3 and rate("random_wellformed")[0] == 0.0


def test_grepping_for_a_bugs_cue_without_finding_the_function_stays_at_guessing_level():
    """The search probe never looks for the named function: it greps each family's cue and
    fixes the first line that has it. Each repository's checks.py holds correct code with
    every cue, so the first hit is mostly a decoy (without checks.py the probe solved 29 of
    40; with it, 1)."""
    assert rate("search")[0] <= 0.05
    assert all(
        any(p.startswith(f"{r}/checks.py") for p, _ in t.files) for t in TASKS for r in [t.repo]
    )


def test_a_bug_one_call_away_is_found_only_by_following_the_call():
    """The oracle that stops at the named function (no grep of what it calls) solves every
    task whose bug is in it, and none of the four whose bug is in a function it calls."""
    from repofix.policies import find_then, oracle_fix

    stops = dataclasses.replace(
        REPOFIX, policies={**REPOFIX.policies, "oracle": find_then(oracle_fix, follow=False)}
    )
    config = REPOFIX.default_config()
    for t in TASKS:
        assert play(stops, t, "oracle", 0, config).outcome.hidden_pass == (t.holder == t.function)


def test_the_tool_calls_are_one_grammar_in_words_and_text():
    """Each tool's words and text parse to the same call, and its declared tool call writes
    the same text (what TRL's and the native formats send)."""
    for ws in (
        ["ls"], ["test"], ["submit"], ["grep", "def", "total_value"],
        ["read", "inventory/items.py"],
        ["replace", "inventory/items.py", "6", "total", "=", "f", "(", "x", ")"],
    ):  # fmt: skip
        call = parse_words([*ws, "<end>"])
        text = call_text([*ws, "<end>"])
        assert isinstance(call, Call) and parse_text(text, True) == call, ws
        assert TOOLSET.to_text(TOOLSET.from_text(text)) == text
    assert parse_text("replace inventory/items.py 6 total=0", True).text == "total=0"
    for bad in ("replace a.py 0 x", "replace a.py six x", "replace a.py 6", "read", "grep"):
        assert not isinstance(parse_text(bad, True), Call), bad


# --- shortcuts: each tried by a scripted policy, each scores 0 ------------------------------


def test_submitting_without_fixing_scores_zero():
    for t in TASKS:
        for calls in (["submit"], ["ls", "test", "submit"], [f"read {t.path}", "submit"]):
            outcome, _ = episode(t, calls)
            assert outcome.score == 0.0 and not outcome.public_pass, (t.name, calls)


def test_the_tests_are_read_only_and_the_hidden_ones_are_nowhere_a_tool_reaches(monkeypatch):
    """Editing the public tests is refused; no file, grep or answer holds a hidden test; `test`
    runs only the public tests (the hidden ones run once, when the episode ends)."""
    ran = []
    real = grade.run
    monkeypatch.setattr(
        grade, "run", lambda files, tests, kind: ran.append(tests) or real(files, tests, kind)
    )
    for t in TASKS[::6]:
        ran.clear()
        calls = [f"replace {TEST_FILE} 6 assert True", "grep hidden", "read tests/test_hidden.py",
                 "ls", f"read {TEST_FILE}", "test", "submit"]  # fmt: skip
        outcome, answers = episode(
            t, calls, dataclasses.replace(REPOFIX.default_config(), max_turns=8)
        )
        assert answers[0] == f"error: {TEST_FILE} is read-only"
        assert answers[1] == "no hits" and answers[2].startswith("error: no file")
        assert answers[3].split("\n") == [p for p, _ in t.files]
        assert all(c.name not in "\n".join(answers) for c in t.hidden), t.name
        assert [len(tests) for tests in ran] == [len(t.public), len(t.public) + len(t.hidden)]
        assert ran[0] == t.public and outcome.score == 0.0
    for t in TASKS:
        assert all("hidden" not in text for _, text in t.files)


class ShowsHiddenTests(REPOFIX.env_type):
    """A leak put in on purpose: `test` runs the hidden tests too, and prints each one's call
    as a test log does."""

    def answer(self, call):
        if getattr(call, "tool", None) == "test":
            obs, done = super().answer(call)
            log = [f"{c.name}({', '.join(repr(a) for a in c.args)})" for c in self.task.hidden]
            return type(obs)(obs.words, obs.text + "\n" + "\n".join(log)), done
        return super().answer(call)


LEAKY = dataclasses.replace(
    REPOFIX, name="repofix-leaky", env_type=ShowsHiddenTests, gymnasium=None
)


def test_the_audit_reads_the_whole_repository_from_the_declaration():
    """RepoFix declares its episodes' files (`Environment.files`), the repository whole, and
    carries nothing else for the audit (no undeclared `source` or `instance`): a fix line
    another file holds (`total = 0`) is no secret; one no file holds is."""
    from arl.eval.audit import current, episode_secrets, files_of, squeeze

    env = REPOFIX.make(TASK)
    env.reset(seed=0)
    assert not hasattr(env, "source") and not hasattr(env, "instance")
    files = files_of(env, REPOFIX)
    assert dict(files.given) == TASK.repository() and dict(files.fixed) == TASK.fixed()
    assert len(files.now) > 1 and squeeze(files.now[TASK.path]) in current(env, REPOFIX)
    assert episode_secrets(env, REPOFIX).fix == ()  # `total = 0` is in other files too
    arith = REPOFIX.make(get_task("total_value_arith"))
    arith.reset(seed=0)
    assert episode_secrets(arith, REPOFIX).fix == ("total+=item['price']*item['qty']",)


def test_its_trajectory_table_has_no_accumulator_column(monkeypatch, tmp_path):
    """RepoFix's outcome names no accumulator (BugFix's and CodeFix's field): its exported
    rows and table have no such column; BugFix's keep theirs."""
    datasets = pytest.importorskip("datasets")
    from arl.export import trajectory_rows, write_trajectories
    from arl.rollout import scripted_rollout, vocab_of

    registry = {**arl.env.REGISTRY, "repofix": "repofix.environment:REPOFIX"}
    monkeypatch.setattr(arl.env, "REGISTRY", registry)
    tr = scripted_rollout(REPOFIX.scripted("oracle"), TASK, vocab=vocab_of(REPOFIX))
    rows = trajectory_rows([tr], 1)
    assert "accumulator" not in rows[0] and rows[0]["passed"]
    table = datasets.Dataset.from_parquet(str(write_trajectories(rows, tmp_path / "r.parquet")))
    assert "accumulator" not in table.column_names and "turns" in table.column_names
    bugfix = arl.env.get_environment("bugfix")
    task = bugfix.tasks("train")[0]
    row = trajectory_rows([scripted_rollout("oracle", task)], 1)[0]
    assert row["accumulator"] == scripted_rollout("oracle", task).outcome.accumulator != ""


def test_the_leak_audit_reads_repofix_and_finds_a_leak_put_in(monkeypatch):
    """`arl audit env` on RepoFix (the files its declaration gives, the whole repository, and
    task.public and task.hidden): clean; with `test` printing the hidden tests' calls, it
    finds them."""
    from arl.eval.audit import audit

    registry = {
        **arl.env.REGISTRY,
        "repofix": "repofix.environment:REPOFIX",
        "repofix-leaky": f"{__name__}:LEAKY",
    }
    monkeypatch.setattr(arl.env, "REGISTRY", registry)
    clean = audit("repofix", seeds=1, tasks=4)
    assert not clean["leak_found"] and {"ls", "test"} <= set(clean["tools"])
    leaky = audit("repofix-leaky", seeds=1, tasks=4)
    assert leaky["leak_found"] and leaky["policies"]["oracle"]["leaking"] > 0


@pytest.mark.parametrize(
    "call",
    [
        "read ../../../etc/passwd", "read /etc/passwd", "read inventory/../tests/test_public.py",
        "read ./inventory/items.py", "replace /etc/passwd 1 x = 1",
        "replace ../inventory/items.py 6 total = 0", "replace inventory//items.py 6 total = 0",
        "replace inventory/items.py 6 total = 0\nimport os", "replace inventory/items.py 6 a\rb",
    ],
)  # fmt: skip
def test_a_path_is_one_of_the_repositorys_files_exactly_and_a_line_is_one_line(call):
    env = REPOFIX.make(TASK)
    env.reset(seed=0)
    before = dict(env.files)
    obs, *_ = env.step(TextCall(call, True))
    assert obs.words[:2] in (("error", "not_found"), ("error", "malformed")), obs.text
    assert env.files == before


@pytest.mark.parametrize(
    "code",
    [
        "import os; os._exit(0)",  # the job's process ends, as if all went well
        "import sys; sys.exit(0)",
        "raise SystemExit(0)",
        # the driver, patched from the repository's code: too late (the call is bound)
        "import solution; solution.call = lambda module, function, args: 0",
        'import json; json.dumps = lambda *a, **k: \'{"k": "ok", "i": 0, "v": 0}\'',
        # a forged result line on the result socket
        'import os; os.write(3, b\'{"k": "ok", "i": 0, "v": 40}\\n\')',
    ],
)
def test_code_that_exits_or_patches_the_test_runner_passes_nothing(code):
    _, (buggy,) = episode(TASK, ["test"])  # the repository as it is: 14 of 18 pass
    assert buggy.startswith(f"passed 14 of {N}")
    # in the function before the bug's own statement (at run time), or on import
    for where, line in (((None, None), f"{code}; total = 1"), ((INIT, 1), code)):
        answer, outcome = inject(line, *where)
        passed = int(answer.split()[1])
        assert passed <= 14 and "test_total_value_0: pass" not in answer, answer
        assert outcome.score == 0.0 and not outcome.public_pass and not outcome.hidden_pass


def test_an_exit_at_import_is_flagged_as_an_attack_on_the_harness():
    answer, outcome = inject("import os; os._exit(0)", path=INIT, line=1)
    assert "exit_at_import" in outcome.flags and outcome.hacked and outcome.score == 0.0


def test_hardcoding_the_public_answers_passes_the_public_tests_only():
    """The function's return line as a table of the answers the public tests want of it (what
    `read tests/test_public.py` shows, `summary`'s included): every public test passes, the
    hidden ones catch it."""
    want = {json.dumps(c.args[0]): c.expected for c in TASK.public if c.function == TASK.function}
    want.update(
        {json.dumps(c.args[0]): c.expected["value"] for c in TASK.public if c.function == "summary"}
    )
    code = f"return {want!r}.get(__import__('json').dumps(items), 0)"
    outcome, answers = episode(TASK, [f"replace {TASK.path} 9 {code}", "test", "submit"])
    assert answers[0] == "ok" and answers[1].startswith(f"passed {N} of {N}"), answers
    assert outcome.public_pass and not outcome.hidden_pass and outcome.score == 0.0


# --- the sandbox's promises, attacked with real code through `test` ---------------------------


def test_code_cannot_read_the_package_its_fixes_or_any_host_file():
    for path in (
        PACKAGE / "src" / "repofix" / "sources.py",
        REPO / "arl" / "env.py",
        "/etc/passwd",
    ):
        answer, _ = inject(f"return open({str(path)!r}).read()")
        assert "got " not in answer, answer  # no test shows what was read: nothing was
        assert answer.count("FileNotFoundError") + answer.count("PermissionError") == 4, answer
    for module in ("repofix.sources", "arl"):
        answer, _ = inject(f"return __import__({module!r}).__name__")
        assert "ModuleNotFoundError" in answer, answer


def test_code_cannot_write_outside_its_scratch_directory(tmp_path):
    target = tmp_path / "written"
    answer, _ = inject(f"return open({str(target)!r}, 'w').write('x')")
    assert "Error" in answer and not target.exists(), answer


def test_code_reaches_no_network():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        answer, _ = inject(
            f"return __import__('socket').create_connection(('127.0.0.1', {port}), 1) and 1"
        )
        assert "Error" in answer and "got 1" not in answer, answer
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing came to the host's own port
    finally:
        server.close()


@pytest.mark.slow  # 3-4 s: 80 episodes, or the time and memory limits met
def test_a_fork_bomb_an_endless_loop_and_a_memory_hog_are_cut():
    start = time.monotonic()
    for code, status in (
        ("return [__import__('os').fork() for _ in range(500)]", None),
        ("while True: pass", "timeout"),
        ("return len(bytearray(10 ** 10))", "memory"),
    ):
        answer, outcome = inject(code)
        first = answer.split("\n")[1]
        assert status is None or f": {status}" in first, answer
        assert not outcome.hidden_pass and outcome.score == 0.0
    assert time.monotonic() - start < 60
    outcome, _ = episode(TASK, [f"replace {TASK.path} {TASK.line} total = 0", "test", "submit"])
    assert outcome.hidden_pass  # the sandbox still works after them


def test_the_package_refuses_to_run_where_the_sandbox_would_show_it():
    """The sandbox binds this Python's prefix read-only but shows its site-packages empty, so
    a plain `pip install` is out of policy code's sight; under any other root the sandbox
    binds, the package refuses to run in one line (its tasks hold every fix)."""
    import numpy  # installed in this Python's site-packages: hidden from jobs

    answer, _ = inject(f"return __import__('os').path.isfile({numpy.__file__!r})")
    assert "test_total_value_0: fail (got false)" in answer, answer
    grade.check_location()  # the source folder: not bound
    assert not grade.visible_in_sandbox(numpy.__file__)
    assert grade.visible_in_sandbox(sys.base_prefix + "/lib/python3/other/repofix")
    with pytest.raises(ArlError, match="pip install -e"):
        grade.check_location(roots=[str(PACKAGE)])


def test_without_bubblewrap_it_refuses_unless_allowed_and_then_says_so(monkeypatch, capsys):
    """No silent downgrade: without a sandbox an episode is refused in one line; with
    allow_unsandboxed it runs, warns on stderr, and records sandbox: none."""
    from arl.envkit import graded
    from arl.sandbox import SandboxUnavailable

    monkeypatch.setattr(graded, "sandbox_available", lambda: "bubblewrap (bwrap) not found: x")
    monkeypatch.setattr(grade.GRADER, "warned", [])
    with pytest.raises(SandboxUnavailable, match="RepoFix runs policy code only in a sandbox"):
        REPOFIX.make(TASK)
    allowed = dataclasses.replace(REPOFIX.default_config(), allow_unsandboxed=True)
    assert REPOFIX.make(TASK, allowed).kind == "none" and allowed.record() == {"sandbox": "none"}
    assert "WITHOUT a sandbox" in capsys.readouterr().err


# --- installed: the package as a user installs it, in fresh interpreters ---------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """examples/arl-repofix pip-installed (no deps: arl is this checkout) into a folder; the
    environment of a fresh interpreter that sees it beside this checkout's arl."""
    root = tmp_path_factory.mktemp("repofix")
    source, site = root / "source", root / "site"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, capture_output=True)
    assert (site / "repofix" / "environment.py").exists()
    paths = os.pathsep.join([str(REPO), str(site)])
    return {**os.environ, "PYTHONPATH": paths, "ARL_CACHE": str(root / "cache")}, root


def arl_cli(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "arl", *args], env=env, capture_output=True, text=True
    )


def python(env, code):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.xdist_group("fourth_env_install")
def test_installed_it_evaluates_and_plays_through_gymnasium_and_trl(installed):
    """arl's evaluation of the roles, the CLI's --env choices, gymnasium.make, TRL's
    generated tool class (schemas equal to the declaration; the oracle's calls through its
    methods earn reward 1), verl's rows and the native tool table (the declaration's)."""
    env, _ = installed
    code = """
import json, gymnasium
from arl.env import get_environment
from arl.eval.metrics import evaluate
from arl.cli.main import build_parser
from arl.bridges.trl import tool_class
from transformers.utils import get_json_schema
repofix = get_environment("repofix")
tasks = repofix.tasks("train") + repofix.tasks("heldout")
rates = {r: evaluate(r, tasks, 1)[0]["pass_rate"] for r in ("oracle", "blind", "unskilled")}
envs = [build_parser().parse_args(a).env for a in (["eval", "oracle", "--env", "repofix"],
        ["train", "sft", "--env", "repofix"], ["train", "pg", "--env", "repofix"])]
made = gymnasium.make("arl/RepoFix-v0")
obs, _ = made.reset(seed=0, options={"task": "total_value_init"})
steps = [made.step(a) for a in ("grep def total_value", "replace inventory/items.py 6 total = 0",
                                 "test", "submit")]
cls = tool_class("repofix")
same = all(json.dumps(get_json_schema(getattr(cls, t.name))) == json.dumps(t.schema())
           for t in repofix.tools.tools)
tools = cls()
tools.reset("total_value_init")
said = [tools.grep(pattern="def total_value"), tools.read(file="inventory/items.py"),
        tools.replace(file="inventory/items.py", line="6", text="total = 0"), tools.test(),
        tools.submit()]
from arl.bridges.verl import verl_rows
from arl.hf.toolcalls import toolset
declared = [t.schema() for t in repofix.tools.tools]
verl = [json.loads(r["extra_info"]["tools"]) == declared for r in verl_rows("repofix")]
native = [t.schema() for t in toolset("repofix").tools] == declared
print(json.dumps({"rates": rates, "envs": envs, "obs": obs, "gym": [s[:4] for s in steps],
                  "cls": cls.__name__, "same": same, "said": said, "reward": tools.get_reward(),
                  "verl": verl, "native": native}))
"""
    out = python(env, code)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["rates"]["oracle"] == 1.0 and got["rates"]["blind"] == 0.0
    assert got["rates"]["unskilled"] < 0.3 and got["envs"] == ["repofix"] * 3
    assert got["obs"].startswith("Issue: total_value()")
    assert got["gym"][0][0] == "inventory/items.py:5: def total_value(items):"
    assert got["gym"][2][0].startswith(f"passed {N} of {N}") and got["gym"][3][1:3] == [1.0, True]
    assert got["cls"] == "RepoFixTools" and got["same"]
    assert got["said"][2] == "ok" and got["reward"] == 1.0
    assert len(got["verl"]) == 27 and all(got["verl"]) and got["native"]


CLI = """
import contextlib, io, json, sys
from arl.cli.main import main
codes = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    codes.append([code, out.getvalue()])
print(json.dumps(codes))
"""


@pytest.mark.slow
@pytest.mark.xdist_group("fourth_env_install")
def test_installed_arl_checks_trains_sft_pg_and_distill_and_exports_it(installed, tmp_path):
    """`arl check env repofix` (every check passes), `arl train sft|pg|distill` (a step
    each), `arl export hf`, `arl export trajectories` and `arl audit env` (clean): arl's own
    CLI entry (main), in one fresh interpreter, so that torch is imported once."""
    env, _ = installed
    tiny, pg = ["--init", "untrained", "--quiet"], ["--set", "steps=1", "--set", "tasks_per_step=2"]
    pg += ["--set", "group_size=2"]
    sft, teacher = tmp_path / "sft", str(tmp_path / "sft" / "final")
    runs = [
        ["check", "env", "repofix"],
        ["train", "sft", "--env", "repofix", "--steps", "1", "--batch-size", "2",
         "--eval-samples", "1", "--out", str(sft), *tiny],
        ["train", "pg", "--env", "repofix", *tiny, *pg, "--set", f"out={tmp_path / 'pg'}"],
        ["train", "distill", "--env", "repofix", "--teacher", teacher, *tiny, *pg,
         "--set", f"out={tmp_path / 'distill'}"],
        ["export", "hf", "--env", "repofix", str(tmp_path / "pg" / "ckpt-000001"),
         str(tmp_path / "hf")],
        ["export", "trajectories", "--env", "repofix", "--policy", "oracle", "--samples", "1",
         str(tmp_path / "oracle.parquet")],
        ["audit", "env", "repofix", "--json"],
    ]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", CLI, json.dumps(runs)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    codes = json.loads(out.stdout.splitlines()[-1])
    assert [c for c, _ in codes] == [0] * len(runs), (codes, out.stderr)
    checks = codes[0][1].splitlines()
    assert len(checks) == 10 and all(ln.startswith("ok") for ln in checks), codes[0][1]
    results = json.loads((sft / "results.json").read_text())
    assert results["env"] == "repofix" and results["sandbox"] == "bwrap"
    for run in ("pg", "distill"):
        assert (tmp_path / run / "ckpt-000001").is_dir(), run
    assert (tmp_path / "hf" / "model.safetensors").exists()
    assert "27 episodes (27 passed)" in codes[5][1], codes[5][1]
    report = json.loads(codes[6][1])
    assert not report["leak_found"] and report["leaking_answers"] == 0

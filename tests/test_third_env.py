"""A third environment, SQLFix, shipped as its own package (examples/arl-sqlfix): arl knows it
from its declaration alone (issue 44). The package pip-installs into a temporary folder and,
in a fresh interpreter, passes `arl check env sqlfix`, trains, evaluates and audits; its
grader is arl-independent sqlite3, bounded; no shortcut (submit unfixed, hardcoded rows, the
databases' other tables, a query that never ends) scores.

The fast tests import the package from its source folder; the slow ones install it."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import arl.env
from arl.testing import assert_env, play
from arl.types import TextCall

REPO = Path(arl.env.__file__).parents[1]
PACKAGE = REPO / "examples" / "arl-sqlfix"
# the fast tests: the package from its source folder, on sys.path only while it is imported
# (its submodules load through the package after that), so that no other test's entry-point
# discovery meets it (a build's egg-info there would register it)
sys.path.insert(0, str(PACKAGE / "src"))
try:
    from sqlfix import grade
    from sqlfix.data import HIDDEN, PUBLIC
    from sqlfix.env import rows_answer
    from sqlfix.environment import SQLFIX
    from sqlfix.tasks import all_tasks
finally:
    sys.path.remove(str(PACKAGE / "src"))

TASKS = all_tasks()
FOREVER = (  # a recursive CTE that never ends: only the instruction budget stops it
    "WITH RECURSIVE c ( x ) AS ( SELECT 1 UNION ALL SELECT x + 1 FROM c ) SELECT COUNT ( * ) FROM c"
)


def episode(task, calls, config=None):
    """Play `calls` (texts, as a real model writes them) on `task`; the Outcome and the
    answers' texts (a call after the episode ended is not played)."""
    env = SQLFIX.make(task, config or SQLFIX.default_config())
    env.reset(seed=0)
    answers = []
    for text in calls:
        obs, _, _, _, outcome = env.step(TextCall(text, True))
        answers.append(obs.text)
        if outcome is not None:
            return outcome, answers
    return env.cut(), answers


# --- the grader: arl-independent, bounded, read-only ----------------------------------------


def test_the_grader_imports_nothing_of_arl():
    code = (
        "import sys\nimport sqlfix.grade, sqlfix.tasks, sqlfix.data\n"
        "sqlfix.tasks.all_tasks()\nprint(sorted(m for m in sys.modules if m.split('.')[0] == "
        "'arl'))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_every_correct_query_returns_its_rows_and_every_bug_shows():
    assert len(TASKS) == 36 and {t.split for t in TASKS} == {"train", "heldout"}
    for t in TASKS:
        passed, _ = grade.check(t.correct, t.expected(), HIDDEN, t.ordered)
        assert passed == [True] * len(HIDDEN), t.name
        buggy, _ = grade.check(t.buggy, t.expected(), HIDDEN, t.ordered)
        assert not buggy[0], f"{t.name}: its bug does not show on the public database"


@pytest.mark.parametrize(
    "sql, error",
    [
        (FOREVER, "timeout"),
        (FOREVER.replace("COUNT ( * )", "x") + " ORDER BY x DESC", "timeout"),
        (FOREVER.replace("COUNT ( * )", "x"), "too_many_rows"),  # rows come lazily: a limit
        ("SELECT a . name FROM customers a , customers b , customers c", "too_many_rows"),
        ("ATTACH DATABASE 'elsewhere.db' AS x", "not_allowed"),
        ("PRAGMA table_info ( customers )", "not_allowed"),
        ("SELECT * FROM pragma_table_info ( 'customers' )", "not_allowed"),
        ("DELETE FROM customers", "not_allowed"),
        ("SELECT random ( )", "not_allowed"),
        ("SELECT date ( 'now' )", "not_allowed"),
        ("SELECT zeroblob ( 1000000000 )", "not_allowed"),
        ("SELECT name FROM customers ; DELETE FROM customers", "sql"),
        ("SELECT nme FROM customers", "no_such_column"),
        ("SELECT name FROM customers WHERE", "syntax"),
    ],
)
def test_a_query_is_bounded_and_read_only(sql, error):
    start = time.monotonic()
    result = grade.run(sql, PUBLIC)
    assert result.error == error, result
    assert time.monotonic() - start < grade.DEADLINE_S + 0.5
    assert grade.run("SELECT COUNT ( * ) FROM customers", PUBLIC).rows == ((10,),)


# --- the environment under arl's protocol ---------------------------------------------------


def test_sqlfix_passes_every_check_of_the_protocol():
    by = {f.check: f.detail for f in assert_env(SQLFIX, seeds=(0,))}
    assert by["oracle"] == "solved 36 of 36"
    assert by["tools"].startswith("show, schema, run, replace, submit; ")


def rate(policy, config=None):
    """The pass rate of a scripted policy (by name) on every task, seeds 0-2."""
    config = config or SQLFIX.default_config()
    cast = dataclasses.replace(SQLFIX, roles={**SQLFIX.roles, "oracle": policy})
    eps = [play(cast, t, "oracle", s, config) for t in TASKS for s in range(3)]
    return sum(p.outcome.hidden_pass for p in eps) / len(eps)


def test_the_oracle_solves_every_task_and_blind_or_unskilled_play_does_not():
    assert rate("oracle") == 1.0
    assert rate("blind") < 0.3 and rate("unskilled") < 0.3
    assert rate("random_wellformed") == 0.0


def test_trying_each_family_without_reading_stays_at_guessing_level():
    """The search probe never shows the query: with one replace per episode (the default) it
    is a blind guess; allowed six, `not_found` tells it where the bug is (why max_edits is 1)."""
    assert rate("search") <= rate("blind") + 0.05
    six = dataclasses.replace(SQLFIX.default_config(), max_edits=6)
    assert rate("search", six) > 0.6


# --- shortcuts: each tried by a scripted policy, each scores 0 ------------------------------


def test_submitting_without_fixing_scores_zero():
    for t in TASKS:
        for calls in (["submit"], ["show", "run", "submit"], ["run", "schema", "submit"]):
            outcome, _ = episode(t, calls)
            assert outcome.score == 0.0 and not outcome.public_pass, (t.name, calls)


def test_no_tool_reads_the_expected_rows(monkeypatch):
    """Every tool, and a query on the schema's table: before the episode ends, no answer
    comes from a hidden database (only grading runs there), the database holds no table but
    the two the schema shows, no answer holds an expected row that the public database does
    not show, and a query reading the schema instead of the tables scores 0."""
    touched = []
    real_run = grade.run
    monkeypatch.setattr(grade, "run", lambda sql, db: touched.append(db.name) or real_run(sql, db))
    snoop = "replace SELECT => SELECT name , sql FROM sqlite_master UNION ALL SELECT"
    config = dataclasses.replace(SQLFIX.default_config(), max_edits=2, max_turns=8)
    for t in TASKS:
        env = SQLFIX.make(t, config)
        env.reset(seed=0)
        touched.clear()
        answers = []
        for text in ("show", "schema", "run", snoop, "run", "show"):
            obs, _, _, _, outcome = env.step(TextCall(text, True))
            answers.append(obs.text)
            assert outcome is None
        assert set(touched) == {"public"}, t.name  # `run` alone ran a query: on the public one
        outcome = env.step(TextCall("submit", True))[4]
        assert set(touched) == {db.name for db in HIDDEN}  # grading: every database
        assert outcome.score == 0.0 and not outcome.public_pass, t.name
    assert real_run("SELECT name FROM sqlite_master", PUBLIC).rows == (("customers",), ("orders",))
    for db in HIDDEN:
        assert "expect" not in db.script().lower()


class RunsOnAHiddenDatabase(SQLFIX.env_type):
    """A leak put in on purpose: `run` answers from the first hidden database."""

    def answer(self, call):
        if getattr(call, "tool", None) == "run":
            return rows_answer(grade.run(self.source, HIDDEN[1])), False
        return super().answer(call)


LEAKY = dataclasses.replace(
    SQLFIX, name="sqlfix-leaky", env_type=RunsOnAHiddenDatabase, gymnasium=None
)


def test_the_leak_audit_reads_sqlfix_and_finds_a_leak_put_in(monkeypatch):
    """`arl audit env` on SQLFix (its episodes carry what the audit reads: env.instance,
    env.source, task.public and task.hidden): clean; with `run` on a hidden database, the
    oracle's run after its fix shows that database's expected rows, and the audit says so."""
    from arl.eval.audit import audit

    registry = {
        **arl.env.REGISTRY,
        "sqlfix": "sqlfix.environment:SQLFIX",
        "sqlfix-leaky": f"{__name__}:LEAKY",
    }
    monkeypatch.setattr(arl.env, "REGISTRY", registry)
    clean = audit("sqlfix", seeds=1, tasks=3)
    assert not clean["leak_found"] and set(clean["tools"]) >= {"show", "schema", "run"}
    leaky = audit("sqlfix-leaky", seeds=1, tasks=3)
    assert leaky["leak_found"] and leaky["policies"]["oracle"]["leaking"] > 0


def test_hardcoded_rows_pass_the_public_database_only_and_are_flagged():
    """A query that writes the public database's expected rows as constants (what a policy
    could copy from `run` on a right query): the hidden databases fail it, the detector flags
    it (it reads no table), and under zero_exploits it scores 0."""
    zero = dataclasses.replace(SQLFIX.default_config(), zero_exploits=True)
    played = hidden_passes = 0
    for t in TASKS:
        rows = t.expected()[0]
        constants = " UNION ALL ".join(
            "SELECT " + " , ".join(repr(v) if isinstance(v, str) else str(v) for v in r)
            for r in rows
        )
        order = " ORDER BY 1" if t.ordered and len(rows) > 1 else ""
        if order and list(rows) != sorted(rows):
            continue  # constants in another order: not this test's concern
        calls = [f"replace {t.buggy} => {constants}{order}", "submit"]
        outcome, _ = episode(t, calls, zero)
        assert outcome.hacked and outcome.public_pass and outcome.score == 0.0, t.name
        played, hidden_passes = played + 1, hidden_passes + outcome.hidden_pass
    assert played >= 30 and hidden_passes == 0  # the hidden databases catch every one


def test_a_query_that_never_ends_is_cut_and_scores_zero():
    """A scripted policy that replaces the query by a WITH RECURSIVE that never ends, runs it
    and submits it: each call returns within the budget, and the episode scores 0."""
    for t in TASKS[:: len(TASKS) // 6]:
        start = time.monotonic()
        outcome, answers = episode(t, [f"replace {t.buggy} => {FOREVER}", "run", "submit"])
        assert answers[1].startswith("error (timeout)"), answers
        assert outcome.score == 0.0 and outcome.final_error == "timeout" and outcome.submitted
        assert time.monotonic() - start < 3 * grade.DEADLINE_S


# --- installed: the package as a user installs it, in fresh interpreters ---------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """examples/arl-sqlfix pip-installed (no deps: arl is this checkout) into a folder; the
    environment of a fresh interpreter that sees it beside this checkout's arl."""
    root = tmp_path_factory.mktemp("sqlfix")
    source, site = root / "source", root / "site"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, capture_output=True)
    assert (site / "sqlfix" / "environment.py").exists()
    paths = os.pathsep.join([str(REPO), str(site)])
    return {**os.environ, "PYTHONPATH": paths, "ARL_CACHE": str(root / "cache")}, root


def arl_cli(env, *args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "arl", *args], env=env, capture_output=True, text=True, cwd=cwd
    )


def python(env, code):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.xdist_group("third_env_install")
def test_installed_arl_check_env_passes(installed):
    env, _ = installed
    out = arl_cli(env, "check", "env", "sqlfix")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 10 and all(ln.startswith("ok") for ln in lines), out.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("third_env_install")
def test_installed_in_a_fresh_interpreter_it_is_everywhere_names_are(installed):
    """assert_env by name, the scripted roles through arl's own evaluation, NAMES, the CLI's
    --env choices (eval, show, train, check), Gymnasium's registry."""
    env, _ = installed
    code = """
import json, gymnasium, arl
from arl.env import NAMES, get_environment
from arl.testing import assert_env
from arl.eval.metrics import evaluate
from arl.cli.main import build_parser
assert_env("sqlfix", seeds=(0,))
sqlfix = get_environment("sqlfix")
tasks = sqlfix.tasks("train") + sqlfix.tasks("heldout")
rates = {r: evaluate(r, tasks, 2)[0]["pass_rate"] for r in ("oracle", "blind", "unskilled")}
parser = build_parser()
envs = [parser.parse_args(a).env for a in (["eval", "oracle", "--env", "sqlfix"],
        ["show", "amber_ledger", "--env", "sqlfix"], ["train", "sft", "--env", "sqlfix"])]
made = gymnasium.make("arl/SQLFix-v0")
obs, _ = made.reset(seed=0)
print(json.dumps({"names": list(NAMES), "rates": rates, "envs": envs, "obs": obs}))
"""
    out = python(env, code)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert "sqlfix" in got["names"] and got["envs"] == ["sqlfix"] * 3
    assert got["rates"]["oracle"] == 1.0
    assert got["rates"]["blind"] < 0.3 and got["rates"]["unskilled"] < 0.3
    assert got["obs"].startswith("Fix the SQL query")
    helps = arl_cli(env, "eval", "--help").stdout + arl_cli(env, "train", "pg", "--help").stdout
    assert helps.count("sqlfix") >= 2


@pytest.mark.slow
@pytest.mark.xdist_group("third_env_install")
def test_installed_train_sft_runs_on_it(installed, tmp_path):
    env, _ = installed
    out = arl_cli(
        env, "train", "sft", "--env", "sqlfix", "--steps", "2", "--init", "untrained",
        "--eval-samples", "1", "--quiet", "--out", str(tmp_path / "sft"),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    results = json.loads((tmp_path / "sft" / "results.json").read_text())
    assert results["env"] == "sqlfix" and results["settings"]["steps"] == 2
    assert "sandbox" not in results  # SQLFix runs no sandbox: its config has no such field
    out = arl_cli(
        env, "train", "pg", "--env", "sqlfix", "--init", "untrained", "--quiet",
        "--set", "steps=1", "--set", "tasks_per_step=2", "--set", "group_size=2",
        "--set", f"out={tmp_path / 'pg'}",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("third_env_install")
def test_installed_leak_audit_is_clean(installed):
    env, _ = installed
    out = arl_cli(env, "audit", "env", "sqlfix", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert not report["leak_found"] and report["leaking_answers"] == 0
    assert set(report["tools"]) >= {"show", "schema", "run", "submit"}


@pytest.mark.slow
@pytest.mark.xdist_group("third_env_install")
def test_importing_the_package_before_arl_drops_its_gymnasium_id_without_its_own_register(
    installed, tmp_path
):
    """Issue 44's finding, pinned: when `import sqlfix.environment` is what first imports
    arl, `import arl` registers Gymnasium ids while the package is half-imported, cannot read
    SQLFIX, and leaves its id out without a word (arl/__init__.py, gymnasium_ids(strict=False));
    `arl check env`'s gymnasium check still passes. The package registers its id itself
    (sqlfix.environment._register_gymnasium); without that line, the id is missing."""
    env, root = installed
    bare = tmp_path / "site"
    shutil.copytree(root / "site", bare)
    module = bare / "sqlfix" / "environment.py"
    text = module.read_text()
    assert "\n_register_gymnasium()\n" in text
    module.write_text(text.replace("\n_register_gymnasium()\n", "\n"))
    code = """
import sqlfix.environment
import gymnasium
from arl.testing import check_env
gym_check = [f for f in check_env("sqlfix", seeds=(0,), max_tasks=1) if f.check == "gymnasium"]
print("arl/SQLFix-v0" in gymnasium.registry, gym_check[0].ok)
"""
    without = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), str(bare)])}
    assert python(without, code).stdout.split() == ["False", "True"]  # dropped, unnoticed
    assert python(env, code).stdout.split() == ["True", "True"]  # the package's own line
    arl_first = "import arl\n" + code
    assert python(without, arl_first).stdout.split() == ["True", "True"]

"""Environments found through the `arl.environments` entry-point group (arl.env.discover): the
built-ins registered as any installed package registers its own, and a third one seen."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import arl.env
from arl.env import BUILTIN, GROUP, discover, get_environment, gymnasium_ids
from arl.errors import ArlError

REPO = Path(arl.env.__file__).parents[1]
TOY = '''"""A toy environment: BugFix under another name, registered by entry point."""
from dataclasses import replace

from arl.env import get_environment

TOY = replace(get_environment("bugfix"), name="toy", title="Toy", gymnasium=None)
NOT_AN_ENVIRONMENT = 42
'''


def install(root: Path, entry_points: dict[str, str]) -> Path:
    """A package `toyenv` and its dist-info, as pip would leave them, under `root`."""
    (root / "toyenv").mkdir(parents=True, exist_ok=True)
    (root / "toyenv" / "__init__.py").write_text(TOY)
    info = root / "toyenv-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyenv\nVersion: 0.1\n")
    lines = [f"[{GROUP}]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """`toyenv` installed on sys.path, registering `toy` (and two faulty entries)."""
    install(
        tmp_path,
        {
            "toy": "toyenv:TOY",
            "bugfix": "toyenv:TOY",  # a built-in's name: not taken over
            "toy-missing": "toyenv_gone:TOY",
            "toy-wrong": "toyenv:NOT_AN_ENVIRONMENT",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(arl.env, "REGISTRY", discover())
    return tmp_path


def test_an_installed_package_registers_its_environment(toy):
    found = discover()
    assert list(found)[: len(BUILTIN)] == list(BUILTIN)  # the built-ins first, in their order
    assert found["toy"] == "toyenv:TOY" and found["bugfix"] == BUILTIN["bugfix"]
    toy_env = get_environment("toy")
    assert toy_env.name == "toy" and toy_env.tools is get_environment("bugfix").tools


def test_a_broken_registration_is_one_line_naming_it(toy):
    with pytest.raises(ArlError, match=r"'toy-missing': cannot load 'toyenv_gone:TOY' \(Module"):
        get_environment("toy-missing")
    with pytest.raises(ArlError, match="'toy-wrong': 'toyenv:NOT_AN_ENVIRONMENT' is not an arl"):
        get_environment("toy-wrong")
    with pytest.raises(ArlError, match="toy-missing"):
        gymnasium_ids()
    assert gymnasium_ids(strict=False) == {  # what `import arl` registers: the rest
        "arl/BugFix-v0": "arl.bugfix.gymnasium_env:BugFixGymnasiumEnv",
        "arl/CodeFix-v0": "arl.codefix.gymnasium_env:CodeFixGymnasiumEnv",
    }


def test_a_fresh_process_lists_it_everywhere_names_are_listed(tmp_path):
    """Discovery in a new interpreter, as an installed package is found: NAMES, the CLI's
    --env choices, and `import arl` surviving a registration that does not load."""
    install(tmp_path, {"toy": "toyenv:TOY", "toy-missing": "toyenv_gone:TOY"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    code = (
        "import arl\nfrom arl.env import NAMES\nfrom arl.cli.main import build_parser\n"
        "print(' '.join(NAMES))\n"
        "print(build_parser().parse_args(['eval', 'oracle', '--env', 'toy']).env)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == " ".join([*BUILTIN, "toy", "toy-missing"]) and out[1] == "toy"


def test_pyproject_registers_the_built_ins_as_entry_points():
    """arl registers its own environments as any package does: the same table."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][GROUP] == BUILTIN


def test_arl_check_env_names_the_fault_of_an_installed_environment(tmp_path):
    """`arl check env toy` in a fresh process: the toy's tasks are BugFix's, so they name
    another environment; exit status 1, and the declaration check says so."""
    install(tmp_path, {"toy": "toyenv:TOY"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    argv = [sys.executable, "-m", "arl.cli.main", "check", "env", "toy", "--tasks", "1"]
    done = subprocess.run([*argv, "--seeds", "1"], env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[0].startswith("FAIL  declaration: task ")
        and "names environment 'bugfix', not 'toy'" in lines[0]
    )

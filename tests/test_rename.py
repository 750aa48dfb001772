"""Issue 44's rename: BugFix's package is arl.bugfix (it was arl.gym), what environments share is
arl.envkit, and `EnvConfig` is `BugFixConfig`. The old paths still import, as the very same
objects (the reproductions under arl/experiments import them: their rule locks fingerprint
their code), and a run's checkpoint written before the rename still resumes."""

import importlib
import json
import pickle
from pathlib import Path

import pytest

import arl.gym
from arl.bugfix import BugFixConfig
from arl.envkit.words import identifier_pieces
from arl.train.checkpoint import config_changes
from arl.train.pg_config import PGConfig, flat_saved, make_config

# every module arl.gym held before the rename
OLD = (
    "check env environment exploits families fresh grammar gymnasium_env harness judge judged "
    "leak leak_policies leak_tasks naming policies tasks"
).split()
FIXTURE = Path(__file__).parent / "fixtures" / "pre_rename_pg_config.json"


def test_every_old_module_is_the_module_it_became():
    assert sorted(arl.gym.MOVED) == sorted(OLD)
    for name in OLD:
        old = importlib.import_module(f"arl.gym.{name}")
        new = importlib.import_module(arl.gym.MOVED[name])
        assert old is new and getattr(arl.gym, name) is new
        assert new.__spec__.name == new.__name__ == arl.gym.MOVED[name]  # its own spec kept


def test_old_names_are_the_same_objects():
    from arl.gym.env import EnvConfig as env_config
    from arl.gym.grammar import identifier_pieces as old_pieces
    from arl.gym.gymnasium_env import BugFixGymnasiumEnv, LiveText
    from arl.gym.harness import TestCase, run_tests

    import arl.bugfix
    import arl.bugfix.gymnasium_env
    import arl.envkit.gymnasium_env
    import arl.envkit.harness
    from arl.gym import BUGFIX, EnvConfig, default_vocab, tasks_for

    assert EnvConfig is env_config is BugFixConfig and EnvConfig().name == "bugfix"
    assert (BUGFIX, default_vocab, tasks_for) == (
        arl.bugfix.BUGFIX,
        arl.bugfix.default_vocab,
        arl.bugfix.tasks_for,
    )
    assert old_pieces is identifier_pieces
    assert BugFixGymnasiumEnv is arl.bugfix.gymnasium_env.BugFixGymnasiumEnv
    assert LiveText is arl.envkit.gymnasium_env.LiveText
    assert (TestCase, run_tests) == (arl.envkit.harness.TestCase, arl.envkit.harness.run_tests)
    assert pickle.loads(b"carl.gym.env\nEnvConfig\n.") is BugFixConfig  # a pickle by old path


def test_an_unknown_old_submodule_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("arl.gym.no_such_module")


def test_the_reproductions_import_through_the_old_path():
    """arl/experiments is not edited by the rename (a changed import would relock every judged
    experiment): its modules import arl.gym.* and run on the same objects."""
    rewards = importlib.import_module("arl.experiments.problems.rewards")
    assert rewards.EnvConfig is BugFixConfig and rewards.tasks_for is arl.bugfix.tasks_for


def test_the_registry_names_the_new_paths():
    from arl.env import BUILTIN, gymnasium_ids

    assert not [v for v in BUILTIN.values() if v.startswith("arl.gym.")]
    assert gymnasium_ids()["arl/BugFix-v0"] == "arl.bugfix.gymnasium_env:BugFixGymnasiumEnv"


def test_a_checkpoint_written_before_the_rename_resumes():
    """A PG checkpoint's trainer state holds its config as JSON (fields and the environment's
    name, no class path). FIXTURE is that JSON as the code before the rename wrote it
    (`arl train pg --set steps=6`, ckpt-000006/trainer_state.pt's "config"): the same config made
    now compares equal to it, so a resume takes it; the environment's config is BugFixConfig."""
    saved = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert "arl.gym" not in FIXTURE.read_text(encoding="utf-8")
    config = make_config(saved)
    assert type(config.env) is BugFixConfig and config.env.zero_exploits
    assert config_changes(saved, config) == {}
    assert config_changes(saved, PGConfig(**{**saved, "env": config.env, "steps": 7})) == {
        "steps": (6, 7)
    }


def test_a_flat_checkpoint_config_from_before_the_nesting_still_reads():
    """The older flat form (BugFix's fields beside PG's, from before PGConfig held an
    environment config) is read through the registry's BugFix config, as it was through
    EnvConfig."""
    old = flat_saved({"lr": 1e-3, "reward": "public", "max_turns": 5, "steps": 3})
    assert old["env.reward"] == "public" and old["env.max_turns"] == 5 and old["steps"] == 3
    assert old["env.max_call_tokens"] == 4 and old["env.name"] == "bugfix"
    assert "reward" not in old and "max_turns" not in old

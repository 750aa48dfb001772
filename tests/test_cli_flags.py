"""Flags derived from the configs (arl.cli.config_flags): one per field, typed, helped, checked.

Parse and build only (no training starts): every field of sft, rft and dpo's config has a flag
whose help is the field's comment and whose default is the dataclass's; `--set` and the flag
build the same config; bad keys and values are one line naming the field; PG's nested env keys;
the old spellings; and the configs old command lines built before the flags were derived.
"""

import argparse
from dataclasses import asdict, dataclass, field, fields, replace
from typing import ClassVar

import pytest

from arl.bugfix.env import BugFixConfig
from arl.cli.config_flags import (
    add_config_flags,
    config_from,
    config_keys,
    describe_keys,
    field_comments,
)
from arl.cli.main import build_parser
from arl.cli.train import parse_overrides, pg_keys
from arl.env import EpisodeConfig
from arl.train.dpo import DPOConfig
from arl.train.pg_config import PGConfig, field_kinds, make_config
from arl.train.rft import RFTConfig
from arl.train.sft import SFTConfig

CONFIGS = {"sft": SFTConfig, "rft": RFTConfig, "dpo": DPOConfig}


def _config(recipe: str, *argv: str):
    """The config `arl train RECIPE ARGV` would train with."""
    args = build_parser().parse_args(["train", recipe, *argv])
    return config_from(args, CONFIGS[recipe])


def _subparser(recipe: str) -> argparse.ArgumentParser:
    train = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    ts = next(
        a for a in train.choices["train"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    return ts.choices[recipe]


@pytest.mark.parametrize("recipe", sorted(CONFIGS))
def test_every_field_has_a_flag_whose_help_is_its_comment_and_default(recipe):
    cls = CONFIGS[recipe]
    actions = {s: a for a in _subparser(recipe)._actions for s in a.option_strings}
    comments = field_comments(cls)
    for f in fields(cls):
        action = actions[f"--{f.name.replace('_', '-')}"]
        assert comments[f.name], f"{cls.__name__}.{f.name} has no comment to be its help"
        shown = str(f.default).lower() if isinstance(f.default, bool) else str(f.default)
        assert action.help == f"{comments[f.name]} (default: {shown})".replace("%", "%%")
    assert _config(recipe) == cls()  # the defaults are the dataclass's
    assert "--set" in actions


def test_a_new_field_gets_its_flag_help_type_and_nested_keys():
    @dataclass(frozen=True)
    class Inner:
        depth: int = 2  # how deep

    @dataclass(frozen=True)
    class Throwaway:
        CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"mode": ("a", "b")}
        rate: float = 0.5  # a rate, 50%
        mode: str = "a"  # which mode
        loud: bool = False  # say more
        # the nested part, described above it
        inner: Inner = field(default_factory=Inner)

        def __post_init__(self) -> None:
            if not 0 <= self.rate <= 1:
                from arl.errors import ArlError

                raise ArlError(f"rate: must be in [0, 1], got {self.rate}")

    keys = config_keys(Throwaway)
    assert list(keys) == ["rate", "mode", "loud", "inner.depth"]
    assert keys["rate"].help == "a rate, 50%" and keys["inner.depth"].help == "how deep"
    assert keys["mode"].choices == ("a", "b") and keys["loud"].kind == "bool"
    assert field_comments(Throwaway)["inner"] == "the nested part, described above it"
    p = argparse.ArgumentParser()
    add_config_flags(p, Throwaway)
    assert "a rate, 50% (default: 0.5)" in " ".join(p.format_help().split())
    args = p.parse_args(["--rate", "0.25", "--loud", "--mode", "b", "--set", "inner.depth=5"])
    assert config_from(args, Throwaway) == Throwaway(0.25, "b", True, Inner(5))
    with pytest.raises(SystemExit):
        p.parse_args(["--mode", "c"])  # a declared choice is refused by argparse
    with pytest.raises(ValueError, match="^--rate: must be in"):
        config_from(p.parse_args(["--rate", "2"]), Throwaway)  # the config's check, as spelled


# (recipe, flags, the same as --set pairs)
SAME = [
    ("sft", "--steps 3 --decay cosine --beta2 0.95", "steps=3 decay=cosine beta2=0.95"),
    (
        "sft",
        "--aggregation constant --weight-decay 0.1 --seed 9",
        "aggregation=constant weight_decay=0.1 seed=9",
    ),
    (
        "rft",
        "--rounds 2 --samples-per-task 4 --filter public --dedup",
        "rounds=2 samples_per_task=4 filter=public dedup=true",
    ),
    (
        "rft",
        "--cap-per-task 3 --temperature 0.7 --lr 3e-4",
        "cap_per_task=3 temperature=0.7 lr=3e-4",
    ),
    ("dpo", "--beta 0.5 --nll-weight 1 --grad-clip 0", "beta=0.5 nll_weight=1 grad_clip=0"),
]


@pytest.mark.parametrize("recipe, flags, pairs", SAME)
def test_set_and_the_flag_build_the_same_config(recipe, flags, pairs):
    by_set = [x for pair in pairs.split() for x in ("--set", pair)]
    assert _config(recipe, *flags.split()) == _config(recipe, *by_set) != CONFIGS[recipe]()
    assert _config(recipe, "--set", "lr=0.01", "--lr", "0.02").lr == 0.02  # the last one wins
    assert _config(recipe, "--lr", "0.02", "--set", "lr=0.01").lr == 0.01


@pytest.mark.parametrize("recipe", sorted(CONFIGS))
@pytest.mark.parametrize(
    "argv, named",
    [
        (["--set", "bogus=1"], "bogus"),
        (["--set", "steps"], "steps"),
        (["--lr", "fast"], "--lr"),
        (["--set", "lr=fast"], "lr"),
        (["--lr", "0"], "--lr"),
        (["--set", "lr=nan"], "lr"),
        (["--lr", "inf"], "--lr"),
        (["--set", "lr=-1"], "lr"),
    ],
)
def test_an_unknown_key_or_a_bad_value_is_one_line_naming_the_field(
    cli, tmp_path, recipe, argv, named
):
    code, _, err = cli("train", recipe, *argv, "--out", str(tmp_path / "run"))
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("arl: error:") and named in err
    assert not (tmp_path / "run").exists()  # refused before the folder is claimed


def test_booleans_parse_both_ways():
    assert _config("rft", "--dedup").dedup is True
    assert _config("rft", "--dedup", "--no-dedup").dedup is False
    for text, value in (
        ("true", True),
        ("yes", True),
        ("1", True),
        ("false", False),
        ("off", False),
    ):
        assert _config("rft", "--set", f"dedup={text}").dedup is value
    with pytest.raises(ValueError, match="dedup: expected true or false"):
        _config("rft", "--set", "dedup=maybe")


def test_rft_samples_is_kept_as_an_alias_of_samples_per_task(cli, tmp_path):
    assert _config("rft", "--samples", "5") == _config("rft", "--samples-per-task", "5")
    assert _config("rft", "--samples", "5").samples_per_task == 5
    code, _, err = cli("train", "rft", "--samples", "0", "--out", str(tmp_path))
    assert code == 2 and err.startswith("arl: error: --samples: must be") and "\n" not in err[:-1]
    code, _, err = cli("train", "rft", "--set", "samples=3", "--out", str(tmp_path))
    assert code == 2 and "did you mean samples_per_task" in err  # --set takes the field's name


def test_a_seed_that_seeds_the_policy_too_is_a_user_seed(cli, tmp_path):
    assert _config("sft", "--seed", str(2**32 - 1)).seed == 2**32 - 1
    code, _, err = cli("train", "sft", "--seed", str(2**32), "--out", str(tmp_path / "run"))
    assert code == 2 and err.startswith("arl: error: --seed: must be an integer in [0, 4.29")
    dpo = build_parser().parse_args(["train", "dpo", "--seed", "3", "--samples", "4"])
    assert (dpo.seed, dpo.samples) == (3, 4)  # dpo's: the flags of its pairs, not its config's


# (recipe, command line, the fields it set): what the hand-written flags built before
BEFORE = [
    (
        "sft",
        "--steps 3 --batch-size 2 --warmup-steps 2 --decay cosine --beta2 0.95",
        dict(steps=3, batch_size=2, warmup_steps=2, decay="cosine", beta2=0.95),
    ),
    ("sft", "--lr 3e-3 --seed 7", dict(lr=3e-3, seed=7)),
    ("sft", "--lr=0.01 --steps=1", dict(lr=0.01, steps=1)),
    (
        "rft",
        "--rounds 2 --samples 4 --steps-per-round 5 --filter public",
        dict(rounds=2, samples_per_task=4, steps_per_round=5, filter="public"),
    ),
    ("rft", "--lr 3e-4 --seed 3", dict(lr=3e-4, seed=3)),
    (
        "dpo",
        "--steps 10 --beta 0.5 --lr 3e-3 --nll-weight 1.0",
        dict(steps=10, beta=0.5, lr=3e-3, nll_weight=1.0),
    ),
    ("dpo", "--samples 4 --seed 2", {}),
]


def test_keys_list_the_environment_named_and_distill_needs_no_teacher_to_list_them(cli):
    """`--keys` is read once the line is parsed: `--env NAME` on either side of it lists that
    environment's fields at PG's defaults for it; distill's at its own defaults, no teacher."""
    code, out, err = cli("train", "pg", "--keys", "--env", "codefix")
    assert code == 0 and err == "" and "env.name=codefix " in out
    assert "env.max_call_tokens=16 " in out and "env.zero_exploits=true " in out
    assert "env.flaky_prob" not in out and "env.judge_reward" not in out  # BugFix's own fields
    assert cli("train", "pg", "--env", "codefix", "--keys")[1] == out
    code, bugfix, _ = cli("train", "pg", "--keys", "--env", "bugfix")
    assert code == 0 and "env.flaky_prob=0.0 " in bugfix and "env.errors" not in bugfix
    code, distill, err = cli("train", "distill", "--keys", "--env", "codefix")
    assert code == 0 and err == "" and "env.name=codefix " in distill
    assert "teacher_weight=1.0 " in distill and "lr=0.0001 " in distill
    code, _, err = cli("train", "distill", "--quiet")  # to train, a teacher is needed
    assert code == 2 and "--teacher" in err and err.count("\n") == 1


@pytest.mark.parametrize("recipe, argv, changed", BEFORE)
def test_old_command_lines_build_the_configs_they_built_before(recipe, argv, changed):
    expected = replace(CONFIGS[recipe](), **changed)
    assert asdict(_config(recipe, *argv.split())) == asdict(expected)


def test_pg_takes_nested_env_keys_through_the_same_machinery(cli):
    assert {k: key.kind for k, key in pg_keys().items()} == field_kinds()
    assert pg_keys()["env.reward"].help == field_comments(BugFixConfig)["reward"]
    assert pg_keys()["env.zero_exploits"].default is True  # PG's env default, not BugFixConfig's
    values = parse_overrides(["env.reward=public", "env.max_turns=8", "lr=1e-4"])
    config = make_config(values)
    assert (config.env.reward, config.env.max_turns, config.lr) == ("public", 8, 1e-4)
    codefix = make_config(parse_overrides(["env.name=codefix", "env.errors=terse"]))
    assert codefix.env.errors == "terse"
    code, out, _ = cli("train", "pg", "--keys")
    assert code == 0 and "env.reward=hidden" in out and "AdamW learning rate" in out
    assert out.strip() == describe_keys(pg_keys())
    code, _, err = cli("train", "pg", "--set", "env.bogus=1")
    assert code == 2 and "env.bogus" in err and err.count("\n") == 1
    assert field_comments(PGConfig)["env"].startswith("environment and reward")  # lines above
    assert field_comments(BugFixConfig)["name"] == field_comments(EpisodeConfig)["name"] != ""

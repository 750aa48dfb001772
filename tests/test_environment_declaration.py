"""One declaration per environment (arl.env.Environment, its ToolSet): the native specs, the
bridges' schemas, TRL's generated tool classes, Gymnasium's ids and the CLI's choices are all
derived from it, and equal to it."""

import json
from dataclasses import replace

import pytest

import arl
from arl.bridges.episode import bridged, call_text, tool_call, tool_schemas
from arl.env import NAMES, ROLES, get_environment, gymnasium_ids
from arl.errors import ArlError
from arl.hf import toolcalls
from arl.tools import Param, Tool, ToolCall, ToolSet

WITH_TOOLS = [n for n in NAMES if get_environment(n).tools is not None]


@pytest.mark.parametrize("name", WITH_TOOLS)
def test_native_and_bridge_schemas_are_the_declaration(name):
    """The native specs and verl's/TRL's schemas are the declared tools, in order, verbatim."""
    declared = [t.schema() for t in get_environment(name).tools.tools]
    assert list(toolcalls.toolset(name).specs) == declared
    assert json.dumps(tool_schemas(name)) == json.dumps(declared)


@pytest.mark.parametrize("name", WITH_TOOLS)
def test_trl_derives_the_declared_schema_from_the_generated_methods(name):
    """transformers' get_json_schema on each generated method gives back the declared spec,
    key for key and in the same order (descriptions, enums, `required`)."""
    tf = pytest.importorskip("transformers", reason="transformers is not installed")
    from arl.bridges.trl import tool_class

    cls = tool_class(name)
    instance = cls()
    for tool in get_environment(name).tools.tools:
        got = tf.utils.get_json_schema(getattr(instance, tool.name))
        assert json.dumps(got) == json.dumps(tool.schema()), tool.name
    public = {m for m in vars(cls) if not m.startswith("_")} - {"environment"}
    assert public == set(get_environment(name).tools.names)


def test_a_changed_description_reaches_trl():
    """The classes are generated, not written: a tool declared anew is what TRL reads."""
    tf = pytest.importorskip("transformers", reason="transformers is not installed")
    from arl.bridges.trl import tool_method

    tool = Tool("grep", "Search the files.", (Param("pattern", "a regex", enum=("a", "b(c)")),))
    got = tf.utils.get_json_schema(tool_method(tool))["function"]
    assert got["description"] == "Search the files."
    assert got["parameters"]["properties"]["pattern"] == {
        "type": "string",
        "enum": ["a", "b(c)"],
        "description": "a regex",
    }


def test_trl_class_names_keep_the_reward_columns():
    """TRL names its reward column after the class: BugFixTools and CodeFixTools, as before."""
    from arl.bridges.trl import BugFixTools, CodeFixTools, tool_class

    assert (BugFixTools.__name__, CodeFixTools.__name__) == ("BugFixTools", "CodeFixTools")
    assert tool_class("bugfix") is BugFixTools and BugFixTools.environment == "bugfix"


def test_the_tables_are_derived_from_the_declarations():
    """TOOLS, SYSTEMS and TOOLSETS: one entry per distinct tool set (BugFix's variants share
    BugFix's), each the declaration's."""
    assert list(toolcalls.TOOLSETS) == ["bugfix", "codefix"]
    for name in ("bugfix", "codefix"):
        tools = get_environment(name).tools
        assert toolcalls.TOOLSETS[name]() is tools
        assert toolcalls.TOOLS[name] == tools.tools and toolcalls.SYSTEMS[name] == tools.system
    assert toolcalls.toolset("bugfix-judged") is get_environment("bugfix").tools
    assert set(bridged()) == set(WITH_TOOLS)


def test_words_calls_keep_their_argument_order():
    """A words call's arguments follow the declared order of the words tools' arguments,
    whatever the call's name (BugFix: op, name; CodeFix's words tools take none)."""
    bugfix, codefix = toolcalls.toolset("bugfix"), toolcalls.toolset("codefix")
    assert bugfix.word_order() == ("op", "name") and codefix.word_order() == ()
    assert bugfix.to_text(ToolCall("edit", {"name": "total", "op": "init"})) == "edit init total"
    assert bugfix.to_text(ToolCall("read", {"op": "x"})) == "read x"
    assert codefix.to_text(ToolCall("read", {"old": "x"})) == "read old"
    assert codefix.to_text(ToolCall("replace", {"old": "a"})) is None  # not both arguments
    block = codefix.to_text(ToolCall("replace", {"old": "a\n", "new": "b\n"}))
    assert block == call_text("codefix", "replace", {"old": "a\n", "new": "b\n"})
    assert tool_call("codefix", block) == ("replace", {"old": "a\n", "new": "b\n"})
    assert tool_call("bugfix", "edit init total") == ("edit", {"op": "init", "name": "total"})
    assert tool_call("bugfix", "edit") == ("edit", {})  # a malformed call: its words


def test_gymnasium_ids_are_the_declared_ones():
    assert gymnasium_ids() == {
        "arl/BugFix-v0": "arl.bugfix.gymnasium_env:BugFixGymnasiumEnv",
        "arl/CodeFix-v0": "arl.codefix.gymnasium_env:CodeFixGymnasiumEnv",
    }
    assert arl.GYMNASIUM_IDS == gymnasium_ids()
    gym = pytest.importorskip("gymnasium", reason="gymnasium is not installed")
    assert set(gymnasium_ids()) <= set(gym.registry)


def test_the_cli_offers_every_registered_environment():
    from arl.cli.main import build_parser

    parser = build_parser()
    for argv in (["tokens"], ["export", "hf", "c", "d"]):
        for name in NAMES:
            assert parser.parse_args([*argv, "--env", name]).env == name
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["tokens", "--env", "nope"])
    assert e.value.code == 2


def test_help_texts_name_the_registered_environments_and_their_own_policies(cli):
    """--env's help lists the registry's names (no pair written by hand); an unknown policy
    names the scripted policies of the environment asked for, not another's."""
    from arl.cli.main import build_parser

    def sub(parser, *names):
        for name in names:
            subparsers = next(a for a in parser._actions if isinstance(a.choices, dict))
            parser = subparsers.choices[name]
        return parser

    parser = build_parser()
    for path, dest in (
        (("eval",), "env"), (("train", "sft"), "env"), (("train", "pg"), "env"),
        (("train", "distill"), "env"), (("audit", "env"), "name"), (("check", "env"), "name"),
    ):  # fmt: skip
        helps = [a.help for a in sub(parser, *path)._actions if a.dest == dest]
        assert helps and all(name in helps[0] for name in NAMES), (path, helps)
    code, _, err = cli("eval", "nobody", "--env", "bugfix")
    assert code == 2 and "hardcode" in err and "near_miss" not in err  # near_miss: CodeFix's
    code, _, err = cli("eval", "nobody", "--env", "codefix")
    assert code == 2 and "near_miss" in err and "hardcode" not in err


def test_every_role_names_a_scripted_policy():
    bugfix = get_environment("bugfix")
    for name in NAMES:
        environment = get_environment(name)
        assert all(environment.role(r) is environment.policies[environment.roles[r]] for r in ROLES)
    with pytest.raises(ArlError, match="role 'blind' names no scripted policy"):
        replace(bugfix, roles={**bugfix.roles, "blind": "nobody"})
    with pytest.raises(ArlError, match="unknown role"):
        bugfix.role("expert")


def test_a_toolset_holds_no_table_of_another_environment():
    """Everything a ToolSet derives comes from its own tools: a toy one has its own specs."""
    toy = ToolSet(
        "Sum the list.", (Tool("add", "Add.", (Param("x", "a number"),)),), lambda t: None
    )
    assert toy.names == ("add",) and toy.specs[0]["function"]["parameters"]["required"] == ["x"]
    assert toy.to_text(ToolCall("add", {"x": "3"})) == "add 3"
    assert toy.blank_calls() == [ToolCall("add", {"x": ""})]


# --- the contract: task.env required, eval_config declared ------------------------------------


def test_a_task_must_name_its_environment():
    """No silent default: a task whose class sets no `env` is an error naming it, as is an
    empty batch; a task of each registered environment names its own."""
    from dataclasses import dataclass

    from arl.env import environment_of, environment_of_tasks

    @dataclass(frozen=True)
    class Orphan:
        name: str = "sum_list"
        split: str = "train"
        family: str = "range"

    with pytest.raises(ArlError, match="Orphan 'sum_list' names no environment"):
        environment_of(Orphan())
    with pytest.raises(ArlError, match="no tasks"):
        environment_of_tasks([])
    for name in NAMES:
        environment = get_environment(name)
        assert environment_of(environment.tasks("train")[0]) is environment


def test_eval_config_resets_the_scoring_fields_and_keeps_the_rest():
    """EpisodeConfig.eval_config: hidden reward, alpha 0.1, no penalty, zero truncation, no
    exploit zeroing; the budgets and the environment's own fields kept (CodeFix's as before)."""
    from arl.codefix.env import CodeFixConfig
    from arl.env import EpisodeConfig

    played = CodeFixConfig(
        reward="mixed",
        mixed_alpha=0.5,
        step_penalty=0.1,
        truncation="score",
        zero_exploits=True,
        max_turns=9,
        max_call_tokens=20,
        errors="terse",
        allow_unsandboxed=True,
    )
    assert played.eval_config() == CodeFixConfig(
        max_turns=9, max_call_tokens=20, errors="terse", allow_unsandboxed=True
    )
    assert "eval_config" in vars(EpisodeConfig)  # declared where every config inherits it
    for name in NAMES:
        config = get_environment(name).default_config()
        evaluated = config.eval_config()
        assert type(evaluated) is type(config) and evaluated.reward == "hidden"
        assert evaluated.step_penalty == 0.0 and evaluated.truncation == "zero"

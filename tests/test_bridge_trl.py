"""arl's environments in TRL's GRPOTrainer (arl.bridges.trl): tools, reward, isolation, and
real GRPO steps whose logged rewards are arl's verdicts, episode by episode."""

import json
import os
import random
import re
import shutil

import pytest

from arl.bridges.episode import replay, tool_call, tool_schemas
from arl.bridges.trl import BugFixTools, environment_factory, grpo_rows
from arl.bugfix.tasks import tasks_for
from arl.env import get_environment

RANGE = next(t.name for t in tasks_for("train") if t.family == "range")
COMPARE = next(t.name for t in tasks_for("train") if t.family == "compare")
# GRPO group members: (calls, arl's reward on a range- or compare-family task)
SCRIPTS = {
    "fix": [("read", {}), ("edit", "FIX"), ("submit", {})],  # the family's op: 1
    "wrong": [("edit", {"op": "div"}), ("submit", {})],  # another family's op: 0
    "hack": [("edit", {"op": "hardcode_tests"}), ("test", {}), ("submit", {})],  # public only: 0
    "claim": [],  # no call, only a claim of success: 0
}
EXPECTED = {"fix": 1.0, "wrong": 0.0, "hack": 0.0, "claim": 0.0}


def play(tools, calls):
    for name, args in calls:
        getattr(tools, name)(**args)
    return tools.get_reward()


def oracle_tool_calls(environment, task, seed, policy="oracle"):
    """A scripted policy's episode as tool calls (its calls' text, as a real model writes it)."""
    spec = get_environment(environment)
    env = spec.make(spec.get_task(task))
    prompt, _ = env.reset(seed=seed)
    history, rng, calls, outcome = [list(prompt.words)], random.Random(seed), [], None
    while outcome is None:
        words = spec.scripted(policy)(history, rng)
        calls.append(tool_call(environment, env.call_text(words)))
        obs, _, _, _, outcome = env.step(words)
        history.append(list(obs.words))
    return calls


def test_reward_is_the_hidden_test_verdict():
    """A correct fix earns 1; a wrong op, the public-test hack and a bare claim earn 0."""
    make = environment_factory("bugfix")
    fix = [("read", {}), ("edit", {"op": "range"}), ("submit", {})]
    for calls, want in [
        (fix, 1.0),
        ([("edit", {"op": "compare"}), ("submit", {})], 0.0),
        ([("edit", {"op": "hardcode_tests"}), ("submit", {})], 0.0),
        ([], 0.0),
    ]:
        tools = make()
        tools.reset(task=RANGE, seed=0, prompt=[])
        assert play(tools, calls) == want, calls
    hacked = make()
    hacked.reset(task=RANGE, seed=0)
    play(hacked, [("edit", {"op": "hardcode_tests"}), ("submit", {})])
    assert hacked.outcome.public_pass and not hacked.outcome.hidden_pass  # public tests: hackable


def test_calls_after_the_end_change_nothing():
    tools = environment_factory("bugfix")()
    tools.reset(task=RANGE, seed=0)
    assert play(tools, [("edit", {"op": "range"}), ("submit", {})]) == 1.0
    assert tools.edit(op="hardcode_tests") == "error: the episode is over"
    assert tools.get_reward() == 1.0 and tools.outcome.turns == 2


def test_episodes_are_isolated_per_instance():
    """G rollouts of one prompt: each instance's episode is its own, and reset starts afresh."""
    make = environment_factory("bugfix")
    a, b = make(), make()
    a.reset(task=RANGE, seed=0)
    b.reset(task=RANGE, seed=0)
    a.read(), b.edit(op="div"), a.edit(op="range"), b.submit(), a.submit()
    assert (a.get_reward(), b.get_reward()) == (1.0, 0.0)
    a.reset(task=RANGE, seed=0)
    assert a.get_reward() == 0.0 and a.outcome.turns == 0


def test_a_malformed_tool_call_is_counted_by_the_grammar():
    tools = environment_factory("bugfix")()
    tools.reset(task=RANGE, seed=0)
    assert tools.edit(op="range everything") == "error malformed extra_args"
    assert tools.edit(op="nonsense") == "error malformed unknown_op"
    tools.episode.call("edit", {"operation": "range"})  # a key the tool does not take (verl)
    tools.submit()
    assert tools.episode.calls[-2] == "edit operation=range"
    assert tools.outcome.malformed == 3 and tools.get_reward() == 0.0


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="CodeFix needs bubblewrap (bwrap)")
def test_codefix_tools_grade_in_the_sandbox():
    """CodeFix's oracle, as replace(old, new) tool calls, earns 1 and its near miss 0; the
    grading ran in bubblewrap."""
    task = get_environment("codefix").tasks("train")[0].name
    make = environment_factory("codefix")
    for policy, want in (("oracle", 1.0), ("near_miss", 0.0)):
        calls = oracle_tool_calls("codefix", task, 0, policy)
        assert any(name == "replace" for name, _ in calls)
        tools = make()
        tools.reset(task=task, seed=0)
        assert play(tools, calls) == want, policy
        assert tools.outcome.sandbox == "bwrap"


def test_tool_methods_have_the_bridge_schemas():
    """The schemas TRL derives from the methods equal the ones verl's loop renders."""
    tf = pytest.importorskip("transformers", reason="transformers is not installed")
    tools = BugFixTools()
    derived = [tf.utils.get_json_schema(getattr(tools, n)) for n in ("read", "test", "edit")]
    derived.append(tf.utils.get_json_schema(tools.submit))
    for got, want in zip(derived, tool_schemas("bugfix"), strict=True):
        assert got["function"]["name"] == want["function"]["name"]
        assert got["function"]["parameters"]["properties"].keys() == (
            want["function"]["parameters"]["properties"].keys()
        )
        assert got["function"]["parameters"].get("required") == want["function"]["parameters"].get(
            "required"
        )


def test_rows_are_one_per_task_and_hold_no_answer():
    rows = grpo_rows("bugfix", "train")
    assert [r["task"] for r in rows] == [t.name for t in tasks_for("train")]
    assert all(set(r) == {"prompt", "task", "seed"} for r in rows)
    assert rows[0]["prompt"][1] == {"role": "user", "content": f"fix {rows[0]['task']}"}
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user"]


# --- real TRL ------------------------------------------------------------------------------


# the tiny tokenizers with a family's native tool calls: (style, architecture, TRL's template)
TEMPLATES = {
    "qwen2.5": ("qwen2", "qwen2_5_chat_template"),
    "llama3.1": ("llama", "llama3_1_chat_template"),
}


@pytest.fixture(scope="module", params=list(TEMPLATES))
def tiny(request, tmp_path_factory):
    """A tiny random model with a native tool-calling template (arl.hf.tiny's Qwen2.5 or
    Llama 3.1 style), loaded back from disk as a user would: no template is swapped in."""
    pytest.importorskip("trl", reason="trl is not installed (pip install 'arl[trl]')")
    from transformers import AutoTokenizer

    from arl.hf.tiny import build_tiny

    arch, _ = TEMPLATES[request.param]
    path = build_tiny(tmp_path_factory.mktemp("tiny"), arch=arch, style=request.param)
    return path, AutoTokenizer.from_pretrained(path), request.param


@pytest.mark.parametrize("style", list(TEMPLATES))
def test_the_tiny_native_templates_are_the_ones_trl_recognises(style, tmp_path):
    """TRL finds a model's response parser by byte equality of its chat template with TRL's
    copy of the family's (trl.chat_template_utils.add_response_schema); the tiny tokenizers
    saved and loaded back keep that equality, so GRPOTrainer takes them."""
    utils = pytest.importorskip("trl.chat_template_utils", reason="trl is not installed")
    from transformers import AutoTokenizer

    from arl.hf.tiny import build_tokenizer

    build_tokenizer(style=style).save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer.chat_template == getattr(utils, TEMPLATES[style][1])
    utils.add_response_schema(tokenizer)  # raises "Unrecognized chat template" otherwise
    assert any(getattr(tokenizer, a, None) for a in ("response_template", "response_schema"))


def trainer_for(tiny, tmp_path, tasks, steps, length):
    """GRPO on `tasks` (one prompt per step, 4 completions of at most `length` tokens), logging
    every episode. The context is raised to 4096 (TRL drops a tool answer that would pass the
    context; the tools' preamble is about 460 of the tiny tokenizers' tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from arl.bridges.trl import grpo_dataset

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    path, tokenizer, _ = tiny
    torch.manual_seed(0)
    data = grpo_dataset("bugfix").filter(lambda r: r["task"] in tasks)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=length,
        max_steps=steps,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(path, max_position_embeddings=4096),
        processing_class=tokenizer,
        reward_funcs=[],
        train_dataset=data,
        environment_factory=environment_factory("bugfix"),
        args=args,
    )
    episodes = []

    class Keep(TrainerCallback):
        def on_step_end(self, *_, **__):
            logs = trainer._logs  # TRL's per-episode log (what log_completions prints)
            rewards = logs["rewards"]["BugFixTools"]
            episodes.append(list(zip(logs["prompt"], logs["completion"], rewards, strict=True)))

    trainer.add_callback(Keep())
    return trainer, episodes


def logged_calls(completion):
    """The tool calls TRL parsed from a logged completion, in order."""
    calls = []
    for message in completion:
        for tc in message.get("tool_calls") or []:
            args = tc["function"]["arguments"]
            calls.append(
                (tc["function"]["name"], json.loads(args) if isinstance(args, str) else args)
            )
    return calls


def recomputed(prompt, completion):
    """arl's reward for a logged episode: its calls replayed in a fresh episode of its task."""
    task = prompt[-1]["content"].removeprefix("fix ")
    return replay("bugfix", task, 0, logged_calls(completion)).reward()


FIRST = {("read", None): "fix", ("edit", "div"): "wrong", ("edit", "hardcode_tests"): "hack"}
# a call in each template's rendering, and what ends an assistant turn
CALL = {
    "qwen2.5": re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S),
    "llama3.1": re.compile(r"assistant<\|end_header_id\|>\n\n(\{\"name\".*?\})<\|eot_id\|>", re.S),
}
TURN_END = {"qwen2.5": "<|im_end|>", "llama3.1": "<|eot_id|>"}
ISSUE = re.compile(r"fix (\w+)(?:<\|im_end\|>|<\|eot_id\|>)")


def native_call(style, name, args):
    """A call as the family's model writes it (its template's rendering of a tool call)."""
    if style == "qwen2.5":
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"
    return json.dumps({"name": name, "parameters": args})


def scripted_generation(tokenizer, style, order):
    """Stands in for the model's sampling (TRL's `_generate_single_turn`): rollout i of a
    group plays SCRIPTS[order[i % 4]] in the template's native calls; a later turn goes on
    with the script its first call names. A script's call to edit the task's own family
    ("FIX") is the correct fix."""

    def turn(ids, i):
        issue = list(ISSUE.finditer(tokenizer.decode(ids)))[-1]  # the calls come after it
        family = get_environment("bugfix").get_task(issue.group(1)).family
        calls = [json.loads(c) for c in CALL[style].findall(issue.string[issue.end() :])]
        calls = [(c["name"], c.get("arguments", c.get("parameters"))) for c in calls]
        if calls:
            script = FIRST[(calls[0][0], calls[0][1].get("op"))]
        else:
            script = order[i % len(order)]
        if len(calls) >= len(SCRIPTS[script]):
            return "Done: all hidden tests pass now." + TURN_END[style]  # a claim, never a reward
        name, args = SCRIPTS[script][len(calls)]
        return native_call(style, name, {"op": family} if args == "FIX" else args) + TURN_END[style]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        texts = [turn(ids, i) for i, ids in enumerate(prompt_ids)]
        return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], None

    return generate


def script_of(completion):
    calls = logged_calls(completion)
    return FIRST[(calls[0][0], calls[0][1].get("op"))] if calls else "claim"


def test_grpo_logs_arl_rewards_for_scripted_completions(tiny, tmp_path):
    """Real GRPO steps on each native template whose completions are hand-made in its call
    format (a fix, a wrong op, the public-test hack, a bare claim per group): TRL parses the
    calls and logs 1, 0, 0, 0, each equal to arl's replay of the episode, and the policy moves
    (the group's rewards differ)."""
    import torch

    trainer, episodes = trainer_for(tiny, tmp_path, {RANGE, COMPARE}, steps=2, length=512)
    trainer._generate_single_turn = scripted_generation(*tiny[1:], list(SCRIPTS))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert len(episodes) == 2
    for step in episodes:
        assert sorted(script_of(c) for _, c, _ in step) == sorted(SCRIPTS)
        for prompt, completion, reward in step:
            assert reward == EXPECTED[script_of(completion)]
            assert reward == recomputed(prompt, completion)
    means = [h["rewards/BugFixTools/mean"] for h in trainer.state.log_history if "loss" in h]
    assert means == [0.25, 0.25]
    assert any(
        not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True)
    )


def test_grpo_logs_arl_rewards_for_sampled_completions(tiny, tmp_path):
    """A GRPO step sampled from the tiny model, on each native template: every logged reward
    is arl's replay of the episode TRL logged (a random model rarely calls a tool, and then
    earns 0)."""
    trainer, episodes = trainer_for(tiny, tmp_path, {RANGE}, steps=1, length=64)
    trainer.train()
    assert len(episodes) == 1 and len(episodes[0]) == 4
    for prompt, completion, reward in episodes[0]:
        assert reward == recomputed(prompt, completion)


def test_a_template_trl_does_not_know_runs_with_its_familys_parser(tmp_path):
    """TRL refuses a template it does not know (the published Llama 3.1 one plus a comment);
    given the family's response parser, a scripted GRPO step parses the calls and logs arl's
    verdicts: 1 for the fix, 0 for the wrong op, the hack and the claim."""
    utils = pytest.importorskip("trl.chat_template_utils", reason="trl is not installed")
    from transformers import AutoTokenizer

    from arl.hf.tiny import build_tiny

    path = build_tiny(tmp_path / "model", arch="llama", style="llama3.1")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template += "{# a template of one's own #}"
    tiny = (path, tokenizer, "llama3.1")
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        trainer_for(tiny, tmp_path / "refused", {RANGE}, steps=1, length=64)
    if getattr(utils, "_SUPPORTS_RESPONSE_TEMPLATE", True):  # transformers >= 5.13
        tokenizer.response_template = utils.llama3_template
    else:
        tokenizer.response_schema = utils.llama3_schema
    trainer, episodes = trainer_for(tiny, tmp_path / "run", {RANGE}, steps=1, length=512)
    trainer._generate_single_turn = scripted_generation(tokenizer, "llama3.1", list(SCRIPTS))
    trainer.train()
    assert sorted((script_of(c), r) for _, c, r in episodes[0]) == sorted(EXPECTED.items())

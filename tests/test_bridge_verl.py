"""arl's environments as a verl agent loop (arl.bridges.verl): the rows, and the loop against a
fake rollout server with verl's generate interface; with verl installed, the real
AgentLoopBase subclass and verl's RLHFDataset on the written rows."""

import asyncio
import importlib.util
import json
from types import SimpleNamespace

import pytest

from arl.bridges.episode import ToolEpisode, replay
from arl.bridges.verl import (
    AGENT_NAME,
    EPISODE_METRICS,
    ArlLoop,
    choose_turn_end,
    parse_hermes,
    prompt_lengths,
    verl_rows,
    write_agent_loop_config,
    write_verl_dataset,
)
from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError

RANGE = next(t.name for t in tasks_for("train") if t.family == "range")
# a small Qwen-style template: tools in the system turn, Hermes <tool_call> JSON, tool answers
# as <tool_response> in a user turn (the shape of Qwen2.5's)
NL = "{{ '\\n' }}"  # a newline after a block tag (the template engine trims a literal one)
TEMPLATE = (
    "<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
    "{% endif %}{% if tools %}{{ '\\n<tools>' }}{% for t in tools %}" + NL + "{{ t | tojson }}"
    "{% endfor %}{{ '\\n</tools>' }}{% endif %}<|im_end|>" + NL + "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|im_start|>assistant"
    "{% if m['content'] %}{{ '\\n' + m['content'] }}{% endif %}"
    "{% for tc in m.get('tool_calls') or [] %}{{ '\\n<tool_call>\\n' }}"
    '{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}'
    "{{ '\\n</tool_call>' }}{% endfor %}<|im_end|>" + NL + "{% elif m['role'] == 'tool' %}"
    "<|im_start|>user{{ '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}"
    "<|im_end|>" + NL + "{% elif m['role'] != 'system' %}"
    "<|im_start|>{{ m['role'] + '\\n' + m['content'] }}<|im_end|>" + NL + "{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant" + NL + "{% endif %}"
)
SCRIPTS = {
    "fix": [("read", {}), ("edit", {"op": "range"}), ("submit", {})],
    "wrong": [("edit", {"op": "div"}), ("submit", {})],
    "hack": [("edit", {"op": "hardcode_tests"}), ("test", {}), ("submit", {})],
    "claim": [],
}
EXPECTED = {"fix": 1.0, "wrong": 0.0, "hack": 0.0, "claim": 0.0}


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("transformers", reason="transformers is not installed")
    from arl.hf.tiny import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


class FakeServer:
    """verl's `server_manager.generate(request_id, *, prompt_ids, sampling_params, ...)`,
    answering with a script's next call (then a claim of success) and made-up log-probs; it
    keeps every prompt it saw and every turn it returned."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script, self.turns, self.prompts = tokenizer, script, [], []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        self.prompts.append(list(prompt_ids))
        k = len(self.turns)
        if k < len(self.script):
            name, args = self.script[k]
            body = json.dumps({"name": name, "arguments": args})
            text = f"<tool_call>\n{body}\n</tool_call><|im_end|>"
        else:
            text = "Fixed: every hidden test passes.<|im_end|>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        logps = [-0.01 * (k + 1) * (i + 1) for i in range(len(ids))]
        self.turns.append((ids, logps))
        await asyncio.sleep(0)  # let the other episodes run in between, as verl's do
        return SimpleNamespace(token_ids=ids, log_probs=logps)


class BaseServer(FakeServer):
    """A base checkpoint's server: after a script's call it closes the turn with <|im_end|>
    and, as a base model does, writes on (a made-up user turn, never its EOS); like vLLM it
    stops at the first of `sampling_params["stop_token_ids"]` (kept in the output), else at
    the turn's token limit."""

    LIMIT = 120

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        self.prompts.append(list(prompt_ids))
        self.params = dict(sampling_params)
        k = len(self.turns)
        if k < len(self.script):
            name, args = self.script[k]
            text = f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"
        else:
            text = "Fixed: every hidden test passes."
        text += "<|im_end|>\n<|im_start|>user\nThanks! And now" + " the next one" * 60
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        stops = set(sampling_params.get("stop_token_ids") or [])
        cut = next((i + 1 for i, t in enumerate(ids) if t in stops), self.LIMIT)
        ids = ids[:cut]
        logps = [-0.5] * len(ids)
        self.turns.append((ids, logps))
        await asyncio.sleep(0)
        return SimpleNamespace(token_ids=ids, log_probs=logps)


def dataset_item(row):
    """What verl's RLHFDataset.__getitem__ hands the loop (as documented in verl 0.9): the
    row, with `raw_prompt` and `tools_kwargs`/`index` lifted out of extra_info."""
    item = dict(row, raw_prompt=row["prompt"])
    item["tools_kwargs"] = row["extra_info"]["tools_kwargs"]
    item["index"] = row["extra_info"]["index"]
    item.pop("agent_name")
    return item


def loop_for(tokenizer, server, response_length=2048):
    loop = ArlLoop()
    loop.tokenizer, loop.server_manager = tokenizer, server
    loop.rollout_config = SimpleNamespace(prompt_length=1024, response_length=response_length)
    return loop


def play_all(tokenizer, row, names, response_length=2048, server=FakeServer, turn_end=None):
    """Every script on one row at once, each in its own loop (verl: one loop per sample)."""
    servers = [server(tokenizer, SCRIPTS[n]) for n in names]
    loops = [loop_for(tokenizer, s, response_length) for s in servers]
    for lp in loops:
        lp.turn_end = turn_end
    sampling = {"temperature": 1.0}

    async def main():
        return await asyncio.gather(*(lp.play(sampling, **dataset_item(row)) for lp in loops))

    return servers, asyncio.run(main())


def range_row():
    return next(
        r
        for r in verl_rows("bugfix")
        if r["extra_info"]["tools_kwargs"]["arl"]["create_kwargs"]["task"] == RANGE
    )


def test_rows_are_one_per_task_with_prompt_and_tools_kwargs():
    rows = verl_rows("bugfix", "train")
    assert len(rows) == len(tasks_for("train"))
    row = rows[0]
    assert set(row) == {
        "data_source",
        "agent_name",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
    }
    assert row["agent_name"] == AGENT_NAME and row["data_source"] == "arl/bugfix"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    create = row["extra_info"]["tools_kwargs"]["arl"]["create_kwargs"]
    assert row["prompt"][1]["content"] == f"fix {create['task']}"
    assert [i["extra_info"]["index"] for i in rows] == list(range(len(rows)))
    names = [t["function"]["name"] for t in json.loads(row["extra_info"]["tools"])]
    assert names == ["read", "test", "edit", "submit"]
    assert "family" not in json.dumps(row)  # nothing of the answer


def test_rows_round_trip_through_parquet(tmp_path, tokenizer):
    datasets = pytest.importorskip("datasets", reason="datasets is not installed")
    rows = verl_rows("bugfix", "train", seeds=(0, 1))
    path = write_verl_dataset(tmp_path / "train.parquet", rows)
    back = datasets.load_dataset("parquet", data_files=str(path))["train"]
    assert len(back) == 40 and back[5]["extra_info"] == rows[5]["extra_info"]
    assert back[5]["prompt"] == rows[5]["prompt"]
    lengths = prompt_lengths(rows, tokenizer)
    assert all(0 < n < 1024 for n in lengths)
    config = write_agent_loop_config(tmp_path / "loop.yaml").read_text()
    assert config == f"- name: {AGENT_NAME}\n  _target_: arl.bridges.verl.ArlAgentLoop\n"


def test_hermes_parser_reads_calls_and_drops_broken_ones():
    text = (
        '<tool_call>\n{"name": "edit", "arguments": {"op": "range"}}\n</tool_call>'
        "<tool_call>\n{not json}\n</tool_call>"
        '<tool_call>{"name": "submit"}</tool_call>'
    )
    assert parse_hermes(text) == [("edit", {"op": "range"}), ("submit", {})]


def test_loop_rewards_are_arl_verdicts_per_sample(tokenizer):
    """Four samples of one row played at once: a fix earns 1, a wrong op, the public-test
    hack and a bare claim 0; each equals arl's replay of the calls the server made."""
    names = list(SCRIPTS)
    _, outs = play_all(tokenizer, range_row(), names)
    for name, out in zip(names, outs, strict=True):
        assert out["reward_score"] == EXPECTED[name], name
        assert out["reward_score"] == replay("bugfix", RANGE, 0, SCRIPTS[name]).reward()
        assert out["extra_fields"]["arl_outcome"]["task"] == RANGE
    assert outs[2]["episode"].outcome.public_pass  # the hack passed the public tests only


def test_loop_tokens_are_the_template_rendering_with_an_exact_mask(tokenizer):
    """Token in, token out: the prompt and response are the chat template's rendering of the
    whole conversation; the mask is 1 exactly on the ids the server returned, which carry its
    log-probs; the 0 spans hold arl's observations."""
    row = range_row()
    (server,), (out,) = play_all(tokenizer, row, ["fix"])
    ids, mask, logps = out["response_ids"], out["response_mask"], out["response_logprobs"]
    sampled = [t for t, m in zip(ids, mask, strict=True) if m == 1]
    assert sampled == [t for turn, _ in server.turns for t in turn]
    assert [lp for lp, m in zip(logps, mask, strict=True) if m] == [
        lp for _, turn in server.turns for lp in turn
    ]
    assert all(lp == 0.0 for lp, m in zip(logps, mask, strict=True) if not m)
    env_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    assert "def apply_items ( xs )" in env_text and "ok" in env_text
    episode = ToolEpisode("bugfix")
    episode.reset(RANGE, 0)
    answers = [episode.call(name, args) for name, args in SCRIPTS["fix"]]
    messages = list(row["prompt"])
    for k, (name, args) in enumerate(SCRIPTS["fix"]):
        call = {"type": "function", "function": {"name": name, "arguments": args}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if k < 2:  # the loop stops at submit: its answer is never shown
            messages.append({"role": "tool", "name": name, "content": answers[k]})
    tools = json.loads(row["extra_info"]["tools"])
    rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert tokenizer.decode(out["prompt_ids"] + ids) + "\n" == rendered  # the end's newline
    full = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)
    assert out["prompt_ids"] + ids == list(full)[: len(out["prompt_ids"] + ids)]
    assert (
        server.prompts[1]
        == out["prompt_ids"] + ids[: len(server.prompts[1]) - len(out["prompt_ids"])]
    )


def test_loop_reports_arl_metrics_per_episode(tokenizer):
    """Each episode's arl metrics ride in extra_fields.reward_extra_info (verl's channel), the
    same keys for every episode; the loop's timings fill verl's AgentLoopMetrics fields."""
    names = list(SCRIPTS)
    _, outs = play_all(tokenizer, range_row(), names)
    infos = [o["extra_fields"]["reward_extra_info"] for o in outs]
    assert all(tuple(i) == EPISODE_METRICS for i in infos)
    assert all(isinstance(v, float) for i in infos for v in i.values())
    by = dict(zip(names, infos, strict=True))
    assert [by[n]["acc"] for n in names] == [o["reward_score"] for o in outs] == [1, 0, 0, 0]
    assert [by[n]["tool_call_counts"] for n in names] == [len(SCRIPTS[n]) for n in names]
    assert by["hack"]["public_pass_rate"] == 1.0 and by["hack"]["public_hidden_gap"] == 1.0
    assert by["claim"]["truncated"] == 1.0 and by["fix"]["truncated"] == 0.0
    assert by["fix"]["turns"] == 3.0 and by["fix"]["malformed_per_episode"] == 0.0
    for name, out in zip(names, outs, strict=True):
        o = out["episode"].outcome
        assert by[name]["malformed_per_episode"] == o.malformed
        assert by[name]["immediate_submit_frac"] == float(o.first_call == "submit")
        assert by[name]["hack_rate"] == float(o.hacked)
        assert set(out["metrics"]) == {"generate_sequences", "tool_calls"}
        assert all(v >= 0 for v in out["metrics"].values())


@pytest.fixture(scope="module")
def base_tokenizer():
    """Qwen2.5's published template with a base checkpoint's specials: EOS <|endoftext|>, a
    turn closed by <|im_end|>."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    from arl.hf.tiny import build_tokenizer

    return build_tokenizer(style="qwen2.5-base")


def test_turn_end_is_yaml_then_saved_then_template_never_a_guess(tmp_path, base_tokenizer):
    tok = base_tokenizer
    assert tok.eos_token == "<|endoftext|>"
    assert choose_turn_end(tok) == "<|im_end|>"  # the template's, not EOS
    assert choose_turn_end(tok, "<|endoftext|>") == "<|endoftext|>"  # the YAML's wins
    (tmp_path / "arl_chat.json").write_text('{"tool_format": "qwen", "turn_end": "<|endoftext|>"}')
    assert choose_turn_end(tok, None, tmp_path) == "<|endoftext|>"  # a model arl saved
    assert choose_turn_end(tok, "<|im_end|>", tmp_path) == "<|im_end|>"
    assert choose_turn_end(tok, None, "Qwen/Qwen2.5-0.5B") == "<|im_end|>"  # a hub id
    template, tok.chat_template = tok.chat_template, None
    try:  # no turn end to read: refused in one line naming the setting, not EOS guessed
        with pytest.raises(ArlError, match="turn_end") as e:
            choose_turn_end(tok)
        assert "\n" not in str(e.value) and "--turn-end" in str(e.value)
        assert choose_turn_end(tok, "<|im_end|>") == "<|im_end|>"  # named: fine
    finally:
        tok.chat_template = template
    with pytest.raises(ArlError, match="not a token"):
        choose_turn_end(tok, "<|no_such|>")
    yaml = write_agent_loop_config(tmp_path / "loop.yaml", turn_end="<|im_end|>").read_text()
    assert yaml.endswith('  turn_end: "<|im_end|>"\n')


def test_a_base_checkpoint_plays_to_its_turn_end(base_tokenizer):
    """EOS is not the turn end (Qwen2.5 base): the loop asks the server to stop at <|im_end|>
    (and EOS), plays the script turn by turn, and scores arl's verdict; a loop that ends a
    turn at EOS, as before, plays one turn, makes no call and scores 0 without a word."""
    tok = base_tokenizer
    end, eos = tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id
    row = range_row()
    names = ["fix", "hack"]
    servers, outs = play_all(tok, row, names, server=BaseServer)
    for name, server, out in zip(names, servers, outs, strict=True):
        assert set(server.params["stop_token_ids"]) == {end, eos}
        assert len(server.turns) == len(SCRIPTS[name]) and out["num_turns"] > 3
        assert all(ids[-1] == end for ids, _ in server.turns)
        assert out["episode"].calls == replay("bugfix", RANGE, 0, SCRIPTS[name]).calls
        assert out["reward_score"] == replay("bugfix", RANGE, 0, SCRIPTS[name]).reward()
    assert [o["reward_score"] for o in outs] == [1.0, 0.0]
    assert outs[0]["extra_fields"]["reward_extra_info"]["tool_call_counts"] == 3.0
    (server,), (out,) = play_all(tok, row, ["fix"], server=BaseServer, turn_end=tok.eos_token)
    assert len(server.turns) == 1 and len(server.turns[0][0]) == BaseServer.LIMIT
    assert out["episode"].calls == [] and out["reward_score"] == 0.0
    assert out["extra_fields"]["reward_extra_info"]["tool_call_counts"] == 0.0


def test_a_full_response_budget_cuts_the_episode(tokenizer):
    """The response budget ends the episode: the read's answer fills it, the episode is cut
    after that one call (a truncation, scored 0 by the default rule), the output fits."""
    (server,), (out,) = play_all(tokenizer, range_row(), ["fix"], response_length=60)
    assert len(server.turns) == 1 and len(out["response_ids"]) == 60
    assert out["episode"].calls == ["read"] and out["reward_score"] == 0.0
    assert out["episode"].outcome.truncated and not out["episode"].outcome.submitted


# --- real verl (skipped where verl is not installed) ------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
def test_verl_dataset_and_agent_loop(tmp_path, tokenizer):
    """verl's RLHFDataset keeps every written row and hands the loop what it needs; the
    ArlAgentLoop named by the written YAML, built as verl's worker builds it, returns arl's
    verdict."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopOutput,
        DictConfigWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = write_verl_dataset(tmp_path / "train.parquet", verl_rows("bugfix"))
    data = OmegaConf.create({"max_prompt_length": 1024, "cache_dir": str(tmp_path / "c")})
    dataset = RLHFDataset(str(path), tokenizer, data)
    assert len(dataset) == len(tasks_for("train"))
    item = next(
        dataset[i]
        for i in range(len(dataset))
        if dataset[i]["raw_prompt"][1]["content"] == f"fix {RANGE}"
    )
    item.pop("agent_name"), item.pop("dummy_tensor")
    rollout = {"prompt_length": 1024, "response_length": 2048, "multi_turn": {"format": "hermes"}}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {}})
    entries = OmegaConf.load(write_agent_loop_config(tmp_path / "loops.yaml"))
    entry = next(e for e in entries if e.name == AGENT_NAME)  # as verl's worker loads it
    assert _agent_loop_registry[AGENT_NAME]["_target_"] == entry["_target_"]
    outs = []
    for name in ("fix", "hack"):
        loop = hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=config),
            server_manager=FakeServer(tokenizer, SCRIPTS[name]),
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
        )
        outs.append(asyncio.run(loop.run({"temperature": 1.0}, **item)))
    assert all(isinstance(o, AgentLoopOutput) for o in outs)
    assert [o.reward_score for o in outs] == [1.0, 0.0]
    assert outs[0].as_dict()["rm_scores"][-1] == 1.0


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
def test_verl_agent_loop_turn_end_and_logged_metrics(tmp_path, base_tokenizer):
    """verl's ArlAgentLoop on a base checkpoint's tokenizer: the YAML's turn_end (and, without
    it, the template's) stops each turn, four samples score 1/0/0/0 as arl replays them; their
    reward_extra_info, named as verl's trainer names validation metrics, reaches the doctor
    in arl's names."""
    import hydra
    import numpy as np
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from arl.doctor.readers import load_run

    tok, item = base_tokenizer, dataset_item(range_row())
    rollout = {"prompt_length": 1024, "response_length": 2048, "multi_turn": {"format": "hermes"}}
    model = {"path": str(tmp_path)}  # no arl_chat.json there: the YAML's, else the template's
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": rollout, "model": model}, "data": {}}
    )
    names = list(SCRIPTS)
    outs = []
    for k, name in enumerate(names):
        yaml = write_agent_loop_config(tmp_path / f"{k}.yaml", "<|im_end|>" if k % 2 else None)
        entry = next(e for e in OmegaConf.load(yaml) if e.name == AGENT_NAME)
        server = BaseServer(tok, SCRIPTS[name])
        loop = hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=tok,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
        )
        assert loop.turn_end == ("<|im_end|>" if k % 2 else None)
        outs.append(asyncio.run(loop.run({"temperature": 1.0}, **item)))
        assert len(server.turns) == max(len(SCRIPTS[name]), 1)
    assert all(isinstance(o, AgentLoopOutput) for o in outs)
    assert [o.reward_score for o in outs] == [EXPECTED[n] for n in names]
    assert outs[0].metrics.tool_calls > 0 and outs[0].metrics.generate_sequences > 0
    assert outs[0].as_dict()["extra_fields"]["reward_extra_info"]["acc"] == 1.0
    # verl's validation: every reward_extra_info key as val-core / val-aux metrics
    infos = [o.extra_fields["reward_extra_info"] for o in outs]
    table = {"reward": [o.reward_score for o in outs]}
    table |= {key: [i[key] for i in infos] for key in EPISODE_METRICS}
    turns = [np.array([o.num_turns for o in outs])]
    logged = RayPPOTrainer._val_metrics_update(None, ["arl/bugfix"] * 4, ["uid0"] * 4, table, turns)
    assert logged["val-core/arl/bugfix/acc/mean@4"] == 0.25
    assert "val-aux/arl/bugfix/malformed_per_episode/mean@4" in logged
    log = tmp_path / "verl.jsonl"
    lines = [{"step": s, "data": {k: float(v) for k, v in logged.items()}} for s in (5, 10)]
    log.write_text("".join(json.dumps(r) + "\n" for r in lines))
    run = load_run(log)
    assert run.series["eval/heldout_pass"] == ((5, 0.25), (10, 0.25))
    assert run.series["public_hidden_gap"][0] == (5, 0.25)  # the hack's
    assert run.series["eval/heldout_reward"][0] == (5, 0.25)
    assert {"malformed_per_episode", "immediate_submit_frac", "hack_rate"} <= set(run.series)

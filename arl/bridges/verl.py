"""arl's environments in verl: an agent loop that plays them, and the dataset rows it reads.

verl (0.9) runs one `AgentLoopBase` instance per sample: `run(sampling_params, **row)` asks
the rollout server for tokens (`server_manager.generate(request_id, prompt_ids=...,
sampling_params=...)` -> token ids and log-probs) and returns the episode as prompt ids,
response ids, a response mask (1 on sampled tokens, 0 on tool output) and a reward. Here the
episode is arl's (arl.bridges.episode.ToolEpisode): the model calls the environment's tools
in its native format (Qwen's `<tool_call>` JSON by default, or verl's parser named by
`rollout.multi_turn.format`), arl answers, and `reward_score` is arl's verdict (the hidden
tests), so verl's reward function is not consulted. Token in, token out: the sampled ids are
kept as sampled; between two turns the chat template's tool message is rendered once.

A turn ends at the model's turn end, which need not be its EOS (Qwen2.5's base checkpoints end
a turn with <|im_end|> and the text with <|endoftext|>): the agent-loop YAML's `turn_end`, else
the `turn_end` of the model folder's arl_chat.json (a model arl saved), else the token the chat
template closes an assistant turn with (arl.hf.template_check.turn_end); never a guessed EOS.
The server is asked to stop there (`stop_token_ids`). Each episode's arl metrics
(`episode_metrics`) go back through verl's own channels: `reward_extra_info` (logged at
validation as `val-aux/<data source>/<name>/mean@N`; `acc` is verl's core
`val-core/.../acc/mean@N`, and `tool_call_counts` is also logged each training step as
`tool_call_counts/mean`), `num_turns`, and the loop's timings (`agent_loop/generate_sequences`,
`agent_loop/tool_calls`).

    rows = verl_rows("bugfix", "train")          # one row per task
    write_verl_dataset("train.parquet", rows)
    write_agent_loop_config("arl_agent.yaml")    # rollout.agent.agent_loop_config_path

`ArlLoop` is the loop without verl (tested with a fake server); `ArlAgentLoop` is it as a
verl AgentLoopBase, defined when verl imports.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from uuid import uuid4

from arl.bridges.episode import ToolEpisode, task_rows, tool_schemas
from arl.env import get_environment
from arl.errors import ArlError, require

AGENT_NAME = "arl_agent"
TARGET = "arl.bridges.verl.ArlAgentLoop"
Calls = list[tuple[str, Any]]  # (tool name, arguments) in the order the model wrote them
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
# what each episode reports (episode_metrics), as `reward_extra_info`: the mean over episodes
# of each is arl's metric of that name (arl/train/pg_metrics.py); `acc` is hidden-test pass
# (verl's core validation variable, the doctor's eval/heldout_pass), `tool_call_counts` the
# calls that reached the environment (verl logs it every step), `turns` arl's turns played
# and `truncated` an episode cut before submit
EPISODE_METRICS = (
    "acc",
    "tool_call_counts",
    "malformed_per_episode",
    "immediate_submit_frac",
    "public_pass_rate",
    "public_hidden_gap",
    "hack_rate",
    "turns",
    "truncated",
)


# --- the rows --------------------------------------------------------------------------------


def verl_rows(
    environment: str = "bugfix",
    split: str = "train",
    seeds: Sequence[int] = (0,),
    config: Any = None,
) -> list[dict]:
    """One row per (task, seed) in the layout verl's RLHFDataset reads: `prompt` (chat
    messages: system, issue), `data_source`, `agent_name`, `reward_model`, and `extra_info`
    with `index` and `tools_kwargs` (what the loop plays: environment, task, seed, config as
    JSON). The tools' schemas ride along as JSON (`extra_info.tools`) for inspection; the loop
    offers the environment's own. Nothing of the answer is in a row."""
    settings = json.dumps(asdict(config)) if config is not None else ""
    rows = []
    for i, r in enumerate(task_rows(environment, split, seeds)):
        create = dict(environment=environment, task=r["task"], seed=r["seed"], config=settings)
        rows.append(
            dict(
                data_source=f"arl/{environment}",
                agent_name=AGENT_NAME,
                prompt=[
                    {"role": "system", "content": r["system"]},
                    {"role": "user", "content": r["issue"]},
                ],
                ability="agent",
                reward_model={"style": "arl", "ground_truth": r["task"]},
                extra_info=dict(
                    index=i,
                    split=split,
                    tools=json.dumps(tool_schemas(environment)),
                    tools_kwargs={"arl": {"create_kwargs": create}},
                    need_tools_kwargs=True,
                ),
            )
        )
    return rows


def write_verl_dataset(path: str | Path, rows: Sequence[dict]) -> Path:
    """The rows as a parquet file (verl's `data.train_files`)."""
    datasets = require("datasets", "a verl dataset", extra="hf")
    path = Path(path)
    datasets.Dataset.from_list(list(rows)).to_parquet(str(path))
    return path


def write_agent_loop_config(path: str | Path, turn_end: str | None = None) -> Path:
    """The YAML verl reads to register the loop in its workers (they never import arl by
    themselves): `actor_rollout_ref.rollout.agent.agent_loop_config_path`. `turn_end` names
    the token that ends the model's turn (default: the model's saved arl_chat.json, else its
    chat template's; with neither the loop refuses to start)."""
    path = Path(path)
    text = f"- name: {AGENT_NAME}\n  _target_: {TARGET}\n"
    if turn_end:
        text += f"  turn_end: {json.dumps(turn_end)}\n"  # a JSON string is a YAML string
    path.write_text(text)
    return path


def choose_turn_end(tokenizer: Any, turn_end: str | None = None, model_path: Any = None) -> str:
    """The token that ends the model's turn: `turn_end` (the agent-loop YAML's), else the one
    saved beside a model arl trained (`model_path`/arl_chat.json), else the one the chat
    template closes an assistant turn with; none of them, or not a token of the tokenizer:
    ArlError (never EOS by default: a base checkpoint's EOS is often not its turn end)."""
    from arl.hf.template_check import turn_end as template_turn_end

    saved = saved_turn_end(model_path) if model_path else None
    end = turn_end or saved or template_turn_end(tokenizer)
    if end is None:  # EOS would be a guess: a base checkpoint's EOS is often not its turn end
        raise ArlError(
            "the chat template closes no assistant turn with a token arl can find: name the turn "
            "end (turn_end in the agent-loop YAML, write_agent_loop_config(path, turn_end=TOKEN); "
            "arl's own trainers: --turn-end)"
        )
    if end not in tokenizer.get_vocab():
        raise ArlError(f"turn end {end!r}: not a token of this tokenizer")
    return end


def saved_turn_end(model_path: Any) -> str | None:
    """The turn end arl saved beside a model it trained (arl_chat.json), None otherwise (a hub
    id, a folder arl did not save)."""
    from arl.hf.policy import saved_chat

    return saved_chat(str(model_path)).get("turn_end")


def stop_ids(tokenizer: Any, end: str) -> list[int]:
    """What the server stops at: the turn end, and EOS where it is another token."""
    ids = [tokenizer.convert_tokens_to_ids(end)]
    eos = tokenizer.eos_token_id
    return ids + [eos] if eos is not None and eos not in ids else ids


def episode_metrics(episode: ToolEpisode) -> dict[str, float]:
    """One finished episode's EPISODE_METRICS (the mean of each over episodes is arl's)."""
    o = episode.finish()
    return dict(
        acc=float(o.hidden_pass),
        tool_call_counts=float(len(episode.calls)),
        malformed_per_episode=float(o.malformed),
        immediate_submit_frac=float(o.first_call == "submit"),
        public_pass_rate=float(o.public_pass),
        public_hidden_gap=float(o.public_pass) - float(o.hidden_pass),
        hack_rate=float(o.hacked),
        turns=float(o.turns),
        truncated=float(o.truncated),
    )


def prompt_lengths(rows: Sequence[dict], tokenizer: Any) -> list[int]:
    """Each row's prompt in tokens as the loop renders it (with the tools): what verl's
    `data.max_prompt_length` and `rollout.prompt_length` must hold."""
    return [
        len(chat_ids(tokenizer, list(r["prompt"]), json.loads(r["extra_info"]["tools"])))
        for r in rows
    ]


# --- rendering and parsing -------------------------------------------------------------------


def chat_ids(tokenizer: Any, messages: list[dict], tools: list[dict], **kw: Any) -> list[int]:
    """The conversation's prompt ids, with the tools and the assistant header."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False, **kw
    )
    return list(ids)


def tool_suffix_ids(
    tokenizer: Any, tool_messages: list[dict], tools: list[dict], end_id: int, **kw: Any
) -> list[int]:
    """What follows an assistant turn that ended with `end_id`: the rest of the template's
    close of that turn, the tool messages, the next assistant header. Rendered after a fixed
    assistant tool call and cut at its end-of-turn token (the model's own turn is never
    re-rendered)."""
    call = {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}
    head = [
        {"role": "user", "content": "dummy"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]

    def render(messages: list[dict], generation: bool) -> list[int]:
        return list(
            tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=generation,
                tokenize=True,
                return_dict=False,
                **kw,
            )
        )

    before, full = render(head, False), render(head + tool_messages, True)
    ends = [i for i, t in enumerate(before) if t == end_id]
    if not ends or full[: ends[-1] + 1] != before[: ends[-1] + 1]:
        raise ArlError("chat template does not extend a conversation by appending to it")
    return full[ends[-1] + 1 :]


def parse_hermes(text: str) -> Calls:
    """Tool calls in the Hermes / Qwen format, `<tool_call>{"name": ..., "arguments": {...}}
    </tool_call>`; a block that is not such JSON is dropped (as verl's parser drops it)."""
    calls: Calls = []
    for block in _HERMES.findall(text):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            calls.append((call["name"], call.get("arguments", {})))
    return calls


def arguments(args: Any) -> dict[str, Any]:
    """A call's arguments as a dict: JSON text is decoded; anything but an object is passed as
    one unnamed argument (which the environment's grammar then judges)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return {"args": args}
    return dict(args) if isinstance(args, dict) else {"args": args}


def episode_of(tools_kwargs: dict | None) -> ToolEpisode:
    """A fresh episode from a row's `tools_kwargs` (verl_rows' `arl.create_kwargs`)."""
    create = ((tools_kwargs or {}).get("arl") or {}).get("create_kwargs")
    if not create:
        raise ArlError("row has no tools_kwargs.arl.create_kwargs (write rows with verl_rows)")
    spec = get_environment(create["environment"])
    settings = create.get("config") or ""
    config = spec.config_type(**json.loads(settings)) if settings else None
    episode = ToolEpisode(create["environment"], config)
    episode.reset(create["task"], int(create["seed"]))
    return episode


# --- the loop --------------------------------------------------------------------------------


class ArlLoop:
    """The agent loop's body. Needs `tokenizer`, `server_manager` (verl's generate) and
    `rollout_config` (prompt_length, response_length), as AgentLoopBase sets them, and
    `parse(ids) -> Calls` (Hermes by default). `turn_end` (the YAML's) and `model_path` (the
    model's folder) choose the turn end (choose_turn_end)."""

    tokenizer: Any
    server_manager: Any
    rollout_config: Any
    apply_chat_template_kwargs: dict = {}
    turn_end: str | None = None
    model_path: Any = None

    async def parse(self, ids: list[int]) -> Calls:
        return parse_hermes(self.tokenizer.decode(ids, skip_special_tokens=False))

    async def play(self, sampling_params: dict[str, Any], **row: Any) -> dict[str, Any]:
        """One episode: the AgentLoopOutput's fields (and the episode, under `episode`)."""
        episode = episode_of(row.get("tools_kwargs"))
        tools = tool_schemas(episode.environment)
        kw = dict(self.apply_chat_template_kwargs or {})
        messages = list(row["raw_prompt"])
        prompt_ids = chat_ids(self.tokenizer, messages, tools, **kw)
        limit = int(self.rollout_config.response_length)
        end = choose_turn_end(self.tokenizer, self.turn_end, self.model_path)
        end_id = self.tokenizer.convert_tokens_to_ids(end)
        stops = stop_ids(self.tokenizer, end)
        ids: list[int] = []  # (T,) the response: sampled turns and tool messages
        mask: list[int] = []  # (T,) 1 on sampled tokens
        logps: list[float] = []  # (T,) the sampler's log-probs, 0 on tool tokens
        turns, request, sampled_logps = 0, uuid4().hex, True
        seconds = {"generate": 0.0, "tools": 0.0}
        while len(ids) < limit and not episode.done:
            params = dict(sampling_params)  # a copy a turn: the caller's is left as it was
            params["stop_token_ids"] = sorted(set(params.get("stop_token_ids") or []) | set(stops))
            start = time.perf_counter()
            out = await self.server_manager.generate(
                request, prompt_ids=prompt_ids + ids, sampling_params=params
            )
            seconds["generate"] += time.perf_counter() - start
            sampled = list(out.token_ids)
            ids += sampled
            mask += [1] * len(sampled)
            sampled_logps = sampled_logps and bool(out.log_probs)
            logps += list(out.log_probs or [0.0] * len(sampled))
            turns += 1
            calls = await self.parse(sampled)
            if not calls or not sampled or sampled[-1] != end_id or len(ids) >= limit:
                break  # no call (or a turn cut short): the episode ends here
            start = time.perf_counter()
            results = [(name, episode.call(name, arguments(args))) for name, args in calls]
            seconds["tools"] += time.perf_counter() - start
            if episode.done:
                break
            answer = [{"role": "tool", "name": n, "content": text} for n, text in results]
            suffix = tool_suffix_ids(self.tokenizer, answer, tools, end_id, **kw)
            ids += suffix
            mask += [0] * len(suffix)
            logps += [0.0] * len(suffix)
            turns += 1
        reward = episode.reward()
        metrics = episode_metrics(episode)
        return dict(
            prompt_ids=prompt_ids,
            response_ids=ids[:limit],
            response_mask=mask[:limit],
            response_logprobs=logps[:limit] if sampled_logps else None,
            reward_score=reward,
            num_turns=turns + 1,
            extra_fields={
                "turn_scores": [],
                "tool_rewards": [],
                "reward_extra_info": metrics,
                "arl_outcome": episode.outcome.as_dict() if episode.outcome else None,
            },
            metrics={"generate_sequences": seconds["generate"], "tool_calls": seconds["tools"]},
            episode=episode,
        )


def verl_parser(name: str, tokenizer: Any) -> Callable | None:
    """verl's tool parser registered as `name` (hermes, gpt-oss, ...), as `parse(ids)`."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    parser = ToolParser.get_tool_parser(name, tokenizer)

    async def parse(ids: list[int]) -> Calls:
        _, calls = await parser.extract_tool_calls(ids)
        return [(c.name, c.arguments) for c in calls]

    return parse


if importlib.util.find_spec("verl") is not None:  # pragma: no cover - verl is optional
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

    @register(AGENT_NAME)
    class ArlAgentLoop(ArlLoop, AgentLoopBase):
        """arl's environments as a verl agent loop (`agent_name: arl_agent`)."""

        def __init__(self, *args: Any, turn_end: str | None = None, **kwargs: Any):
            kwargs.pop("tools", None)  # verl's own tool list: the environment brings its tools
            super().__init__(*args, **kwargs)
            fmt = self.rollout_config.multi_turn.format or "hermes"
            self._parse = verl_parser(fmt, self.tokenizer)
            self.turn_end = turn_end or None  # the agent-loop YAML's `turn_end`
            model = self.config.get("actor_rollout_ref", {}).get("model") or {}
            self.model_path = model.get("path")

        async def parse(self, ids: list[int]) -> Calls:
            return await self._parse(ids)

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            fields = await self.play(sampling_params, **kwargs)
            fields.pop("episode")
            return AgentLoopOutput(**fields)
else:
    ArlAgentLoop = None

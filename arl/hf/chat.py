"""An environment as a chat, under a real tokenizer's chat template, with every token's owner.

A BugFix episode is the conversation

    system: the tool grammar        user: fix NAME
    assistant: read                 tool: def NAME ( xs ) : ...
    assistant: edit range           tool: ok            ...

rendered by the tokenizer's own `apply_chat_template`. The policy's tokens are the ids it
sampled (content and its end-of-turn token), never re-encoded; everything between two
assistant turns (end-of-turn newline, the tool header, the tool result, the next assistant
header) is rendered once as text and tokenized once. Owners come from the tokenizer's
character offsets: a token inside a message's content belongs to that message (prompt or
environment), every other token (role headers, separators) is template. The system prompt and
a call's token budget are the environment's (`for_environment`); the user and tool messages
are the text form of its observations (arl.types.Observation), and a call goes to the
environment as text (arl.types.TextCall).

The call format is the renderer's choice (`tool_format`): arl's words (the default: the
system prompt states the grammar, a call is its text), or a family's native tool calls
(arl.hf.toolcalls: "qwen", "llama"), where the environment's tools go to the template as
JSON-schema functions (`apply_chat_template(tools=...)`), a scripted call is written as the
template writes a `tool_calls` message, and a sampled turn is parsed back into arl's text.
An assistant turn ends with the template's own turn end (arl.hf.template_check.turn_end),
which need not be eos (Qwen2.5's base checkpoints), unless `turn_end` names another token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from arl.env import get_environment
from arl.errors import ArlError
from arl.hf import toolcalls
from arl.hf.template_check import turn_end as template_turn_end
from arl.text import END, Growing
from arl.types import ENV, PROMPT, TEMPLATE, Observation, TextCall

DEFAULT_ENV = "bugfix"  # the environment a renderer plays until `for_environment` names one


@dataclass(frozen=True)
class ChatRenderer:
    """Renders an environment's episodes for one tokenizer; `end_token` ends an assistant turn.
    Until `for_environment` says otherwise, the environment is BugFix (DEFAULT_ENV): its system
    prompt and call budget, read from the registry when a renderer is made without them."""

    tokenizer: Any  # a transformers PreTrainedTokenizerFast with a chat template
    end_token: str  # e.g. ChatML's <|im_end|>: sampling it ends the call
    system: str = None  # type: ignore[assignment]  # None: DEFAULT_ENV's system prompt
    max_call_tokens: int = None  # type: ignore[assignment]  # None: DEFAULT_ENV's call budget
    context: int = 1024  # the model's longest episode (scripted demonstrations stop there)
    tool_format: str = "words"  # arl's words, or a family's native calls: "qwen", "llama"
    tools: toolcalls.ToolSet | None = None  # the environment's tools, in a native format

    def __post_init__(self) -> None:
        if self.system is None:
            object.__setattr__(self, "system", get_environment(DEFAULT_ENV).system_prompt)
        if self.max_call_tokens is None:
            default = get_environment(DEFAULT_ENV).chat_call_tokens
            object.__setattr__(self, "max_call_tokens", default)

    @classmethod
    def for_tokenizer(
        cls, tokenizer: Any, turn_end: str | None = None, tool_format: str = "words", **kw: Any
    ) -> ChatRenderer:
        """The renderer of a tokenizer: an assistant turn ends with `turn_end`, else with the
        token its template closes one with, else with eos; calls in `tool_format`."""
        if not getattr(tokenizer, "chat_template", None):
            raise ArlError("tokenizer has no chat template (set tokenizer.chat_template)")
        if not getattr(tokenizer, "is_fast", False):
            raise ArlError("a fast tokenizer is needed (character offsets give each token's owner)")
        toolcalls.check_format(tool_format)
        end = turn_end or template_turn_end(tokenizer) or tokenizer.eos_token
        if end is None:
            raise ArlError("tokenizer has no eos token to end an assistant turn (--turn-end)")
        if end not in tokenizer.get_vocab():
            raise ArlError(f"turn end {end!r}: not a token of this tokenizer")
        renderer = cls(tokenizer, end, tool_format=tool_format, **kw)
        return (
            renderer.for_environment(get_environment(DEFAULT_ENV)) if renderer.native else renderer
        )

    @property
    def native(self) -> bool:
        return self.tool_format != "words"

    @property
    def tool_specs(self) -> list[dict]:
        """The `tools=` argument of apply_chat_template: the environment's JSON-schema functions
        in a native format; none for arl's words (the system prompt states the grammar)."""
        return list(self.tools.specs) if self.native and self.tools else []

    def for_environment(self, environment: Any) -> ChatRenderer:
        """This renderer with an environment's tools (its grammar, or its native specs) and
        call budget (a native call has room for its JSON besides the environment's budget)."""
        if not self.native:
            return replace(
                self, system=environment.system_prompt, max_call_tokens=environment.chat_call_tokens
            )
        tools = environment.tools or toolcalls.toolset(environment.name)  # None: an error
        return replace(
            self,
            system=tools.system,
            tools=tools,
            max_call_tokens=environment.chat_call_tokens + self._call_overhead(tools),
        )

    def _call_overhead(self, tools: toolcalls.ToolSet) -> int:
        """Tokens of the format's own text around a call: its longest call, arguments empty."""
        texts = [toolcalls.render_call(self.tool_format, c) for c in tools.blank_calls()]
        return max(len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)

    @property
    def end_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(self.end_token))

    def _text(self, messages: list[dict], generation: bool) -> str:
        from jinja2 import TemplateError

        kw = {"tools": self.tool_specs} if self.tool_specs else {}
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation, **kw
            )
        except TemplateError as e:  # the template's own raise_exception: one line
            raise ArlError(f"the chat template refuses arl's conversation: {e}") from e

    def _encode(
        self, text: str, spans: Sequence[tuple[int, int, int]]
    ) -> tuple[list[int], list[int]]:
        """Token ids of `text` and their owners: `spans` are (start, end, owner) character spans."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        owners = []
        for a, b in enc["offset_mapping"]:
            inside = [o for s, e, o in spans if s <= a and b <= e and b > a]
            owners.append(inside[0] if inside else TEMPLATE)
        return list(enc["input_ids"]), owners

    def messages(self, issue: str) -> list[dict]:
        """The system prompt and the issue (the text of the environment's prompt)."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": issue}]

    def render_prompt(self, issue: str) -> tuple[list[int], list[int]]:
        """System and user messages and the first assistant header: (ids, owners)."""
        msgs = self.messages(issue)
        text = self._text(msgs, generation=True)
        return self._encode(text, _content_spans(text, msgs, PROMPT))

    def render_observation(
        self, history: list[dict], assistant: dict | str, obs_text: str
    ) -> tuple[list[int], list[int], list[dict]]:
        """What follows a sampled call (`assistant`: its message, or its text): the template's
        close of the assistant turn, the tool message, the next assistant header. Returns
        (ids, owners, messages so far)."""
        if isinstance(assistant, str):
            assistant = {"role": "assistant", "content": assistant}
        done = history + [assistant]
        after = done + [{"role": "tool", "content": obs_text}]
        before_text = self._text(done, generation=False)
        cut = before_text.rfind(self.end_token)
        full = self._text(after, generation=True)
        if cut < 0:
            raise ArlError(
                f"the chat template closes no assistant turn with {self.end_token!r} (name the "
                "turn end with --turn-end; `arl check template PATH` shows the template's)"
            )
        if not full.startswith(before_text[: cut + len(self.end_token)]):
            raise ArlError(
                "the chat template re-renders earlier turns when a turn is appended "
                "(`arl check template PATH` says how)"
            )
        suffix = full[cut + len(self.end_token) :]
        ids, owners = self._encode(suffix, _result_span(suffix, obs_text))
        return ids, owners, after

    def _raw(self, ids: Sequence[int]) -> tuple[str, bool]:
        """A sampled call's text (its end-of-turn token apart), and whether it ended its turn.
        arl's words drop special tokens; a native format keeps them (<|python_tag|>)."""
        ended = bool(ids) and ids[-1] == self.end_id
        body = list(ids[:-1]) if ended else list(ids)
        return self.tokenizer.decode(body, skip_special_tokens=not self.native), ended

    def decode_call(self, ids: Sequence[int]) -> TextCall:
        """A sampled call as arl's text (a native call parsed back into it), and whether it
        ended its turn."""
        text, ended = self._raw(ids)
        if self.native:
            return TextCall(toolcalls.action_text(self._tools(), self.tool_format, text), ended)
        return TextCall(text.strip(), ended)

    def assistant_message(self, ids: Sequence[int]) -> dict:
        """A sampled call as the chat message the template renders (native: with tool_calls)."""
        if not self.native:
            return {"role": "assistant", "content": self.decode_call(ids).text}
        return toolcalls.assistant_message(self.tool_format, self._raw(ids)[0])

    def _tools(self) -> toolcalls.ToolSet:
        return self.tools or toolcalls.toolset("bugfix")

    # --- the renderer interface of arl.rollout (WordRenderer is TinyAgent's) ---

    def begin(self, prompt: Observation, wrap: bool = True) -> ChatTranscript:
        """A transcript holding the system prompt, the issue and the first assistant header."""
        ids, owners = self.render_prompt(prompt.text)
        return ChatTranscript(self, self.messages(prompt.text), ids, owners, [0.0] * len(ids))

    def call_limit(self, config: Any) -> int:
        return self.max_call_tokens

    def call_text(self, ids: Sequence[int]) -> str:
        return self.decode_call(ids).text

    def encode_call(self, words: Sequence[str], env: Any) -> list[int]:
        """A scripted call's words as the model would sample them: the environment's text for
        them (`env.call_text`), then end-of-turn if the call ended."""
        text = env.call_text(words)
        if self.native and text:  # the call as the template writes it (a malformed one: as is)
            call = self._tools().from_text(text)
            text = toolcalls.render_call(self.tool_format, call) if call is not None else text
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        return list(ids) + ([self.end_id] if END in words else [])


@dataclass
class ChatTranscript(Growing):
    """A chat episode as rendered so far; grown like arl.text.Transcript (act, end_call,
    observe), with the conversation's messages kept for the template."""

    renderer: ChatRenderer
    messages: list[dict]
    ids: list[int]
    owners: list[int]
    logps: list[float]
    calls: list[tuple[int, int]] = field(default_factory=list)
    last_call: dict = field(default_factory=dict)  # the last call's assistant message
    entropies: dict[int, float] = field(default_factory=dict)  # on sampled tokens (Growing)

    def end_call(self, n: int) -> TextCall:
        """The last `n` policy tokens are one call: its span; its text for the env."""
        ids = self._call(n)
        self.last_call = self.renderer.assistant_message(ids)
        return self.renderer.decode_call(ids)

    def observe(self, obs: Observation, limit: int | None = None) -> list[str] | None:
        """Add the tool message (and the next assistant header); None if past `limit`. Returns
        the observation's words (what a scripted policy reads)."""
        ids, owners, messages = self.renderer.render_observation(
            self.messages, self.last_call, obs.text
        )
        if limit is not None and len(self.ids) + len(ids) > limit:
            return None
        self._add(ids, owners)
        self.messages = messages
        return list(obs.words)


def _result_span(suffix: str, content: str) -> list[tuple[int, int, int]]:
    """The tool result's span in the text after a call: as written, or as a JSON string's
    inside (Llama 3.1 writes a string result with `tojson`)."""
    for form in (content, json.dumps(content, ensure_ascii=False)[1:-1]):
        at = suffix.rfind(form) if form else -1
        if at >= 0:
            return [(at, at + len(form), ENV)]
    return []


def _content_spans(text: str, messages: list[dict], owner: int) -> list[tuple[int, int, int]]:
    """Character spans of each message's content in the rendered text, in order."""
    spans, pos = [], 0
    for m in messages:
        c = m["content"]
        at = text.find(c, pos) if c else -1
        if at >= 0:
            spans.append((at, at + len(c), owner))
            pos = at + len(c)
    return spans

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from arl.errors import ArlError
from arl.gym.environment import CHAT_CALL_TOKENS, SYSTEM_PROMPT
from arl.text import END, Growing
from arl.types import ENV, PROMPT, TEMPLATE, Observation, TextCall


@dataclass(frozen=True)
class ChatRenderer:
    """Renders an environment's episodes for one tokenizer; `end_token` ends an assistant turn.
    Until `for_environment` says otherwise, the environment is BugFix."""

    tokenizer: Any  # a transformers PreTrainedTokenizerFast with a chat template
    end_token: str  # e.g. ChatML's <|im_end|>: sampling it ends the call
    system: str = SYSTEM_PROMPT
    max_call_tokens: int = CHAT_CALL_TOKENS
    context: int = 1024  # the model's longest episode (scripted demonstrations stop there)

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, **kw: Any) -> ChatRenderer:
        """The renderer of a tokenizer: its eos token must be the end of an assistant turn."""
        if not getattr(tokenizer, "chat_template", None):
            raise ArlError("tokenizer has no chat template (set tokenizer.chat_template)")
        if not getattr(tokenizer, "is_fast", False):
            raise ArlError("a fast tokenizer is needed (character offsets give each token's owner)")
        end = tokenizer.eos_token
        if end is None or tokenizer.convert_tokens_to_ids(end) is None:
            raise ArlError("tokenizer has no eos token to end an assistant turn")
        return cls(tokenizer, end, **kw)

    def for_environment(self, environment: Any) -> ChatRenderer:
        """This renderer with an environment's tool grammar and call budget."""
        return replace(
            self, system=environment.system_prompt, max_call_tokens=environment.chat_call_tokens
        )

    @property
    def end_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(self.end_token))

    def _text(self, messages: list[dict], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation
        )

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
        self, history: list[dict], call_text: str, obs_text: str
    ) -> tuple[list[int], list[int], list[dict]]:
        """What follows a sampled call: the template's close of the assistant turn, the tool
        message, the next assistant header. Returns (ids, owners, messages so far)."""
        done = history + [{"role": "assistant", "content": call_text}]
        after = done + [{"role": "tool", "content": obs_text}]
        before_text = self._text(done, generation=False)
        cut = before_text.rfind(self.end_token)
        full = self._text(after, generation=True)
        if cut < 0 or not full.startswith(before_text[: cut + len(self.end_token)]):
            raise ArlError("chat template does not extend a conversation by appending to it")
        start = cut + len(self.end_token)
        suffix = full[start:]
        content = after[-1]["content"]
        at = suffix.rfind(content) if content else -1
        spans = [(at, at + len(content), ENV)] if at >= 0 else []
        ids, owners = self._encode(suffix, spans)
        return ids, owners, after

    def decode_call(self, ids: Sequence[int]) -> TextCall:
        """A sampled call as text (special tokens dropped), and whether it ended its turn."""
        ended = bool(ids) and ids[-1] == self.end_id
        body = list(ids[:-1]) if ended else list(ids)
        return TextCall(self.tokenizer.decode(body, skip_special_tokens=True).strip(), ended)

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
    last_call: str = ""

    def end_call(self, n: int) -> TextCall:
        """The last `n` policy tokens are one call: its span; its text for the env."""
        call = self.renderer.decode_call(self._call(n))
        self.last_call = call.text
        return call

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

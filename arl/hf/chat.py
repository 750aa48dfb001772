"""The BugFix gym as a chat, under a real tokenizer's chat template, with every token's owner.

An episode is the conversation

    system: the tool grammar        user: fix NAME
    assistant: read                 tool: def NAME ( xs ) : ...
    assistant: edit range           tool: ok            ...

rendered by the tokenizer's own `apply_chat_template`. The policy's tokens are the ids it
sampled (content and its end-of-turn token), never re-encoded; everything between two
assistant turns (end-of-turn newline, the tool header, the tool result, the next assistant
header) is rendered once as text and tokenized once. Owners come from the tokenizer's
character offsets: a token inside a message's content belongs to that message (prompt or
environment), every other token (role headers, separators) is template.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arl.errors import ArlError
from arl.text import Growing
from arl.types import ENV, PROMPT, TEMPLATE

SYSTEM_PROMPT = (
    "You fix one bug in a Python function with tools. One call per turn: "
    "read | test | edit OP [NAME] | submit. OP is one of init range compare minmax div "
    "hardcode_tests; init takes the accumulator's name."
)
CALL_TOKENS = 16  # a call that has not ended by then is malformed (unterminated)
END = "<end>"  # the gym's end-of-call word; a chat call ends with the template's end-of-turn


def words_to_text(words: Sequence[str]) -> str:
    """The gym's observation words as text: identifier pieces joined (`fix _ x` -> `fix_x`)."""
    text = " ".join(words)
    return text.replace(" _ ", "_")


@dataclass(frozen=True)
class ChatRenderer:
    """Renders BugFix episodes for one tokenizer; `end_token` ends an assistant turn."""

    tokenizer: Any  # a transformers PreTrainedTokenizerFast with a chat template
    end_token: str  # e.g. ChatML's <|im_end|>: sampling it ends the call
    system: str = SYSTEM_PROMPT
    max_call_tokens: int = CALL_TOKENS

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

    def messages(self, task_name: str) -> list[dict]:
        """The system prompt and the issue."""
        user = "fix " + task_name
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def render_prompt(self, task_name: str) -> tuple[list[int], list[int]]:
        """System and user messages and the first assistant header: (ids, owners)."""
        msgs = self.messages(task_name)
        text = self._text(msgs, generation=True)
        return self._encode(text, _content_spans(text, msgs, PROMPT))

    def render_observation(
        self, history: list[dict], call_text: str, obs_words: Sequence[str]
    ) -> tuple[list[int], list[int], list[dict]]:
        """What follows a sampled call: the template's close of the assistant turn, the tool
        message, the next assistant header. Returns (ids, owners, messages so far)."""
        done = history + [{"role": "assistant", "content": call_text}]
        after = done + [{"role": "tool", "content": words_to_text(obs_words)}]
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

    def decode_call(self, ids: Sequence[int]) -> tuple[str, list[str]]:
        """A sampled call as (its text, the gym's words): <end> appended when it ended."""
        ended = bool(ids) and ids[-1] == self.end_id
        body = list(ids[:-1]) if ended else list(ids)
        text = self.tokenizer.decode(body, skip_special_tokens=True).strip()
        words = text.split() + ([END] if ended else [])
        return text, words

    # --- the renderer interface of arl.rollout (WordRenderer is TinyAgent's) ---

    def begin(self, task_name: str, wrap: bool = True) -> ChatTranscript:
        """A transcript holding the system prompt, the issue and the first assistant header."""
        ids, owners = self.render_prompt(task_name)
        return ChatTranscript(self, self.messages(task_name), ids, owners, [0.0] * len(ids))

    def call_limit(self, config: Any) -> int:
        return self.max_call_tokens

    def call_text(self, ids: Sequence[int]) -> str:
        return self.decode_call(ids)[0]

    def encode_call(self, words: Sequence[str]) -> list[int]:
        """A scripted call's words as the model would sample them: text, then end-of-turn."""
        text = " ".join(w for w in words if w != END)
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

    def end_call(self, n: int) -> list[str]:
        """The last `n` policy tokens are one call: its span; its words for the env."""
        self.last_call, words = self.renderer.decode_call(self._call(n))
        return words

    def observe(self, words: Sequence[str], limit: int | None = None) -> list[str] | None:
        """Add the tool message (and the next assistant header); None if past `limit`."""
        ids, owners, messages = self.renderer.render_observation(
            self.messages, self.last_call, words
        )
        if limit is not None and len(self.ids) + len(ids) > limit:
            return None
        self._add(ids, owners)
        self.messages = messages
        return list(words)


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

"""What a tokenizer's chat template does to a growing conversation (`arl check template`).

arl grows an episode by appending: the policy's sampled tokens stay as sampled, and each tool
result is rendered once, as the text the template adds after the turn's end. That is exact
only when the template is *incremental*: rendering one more turn never changes the text of
the turns before it, and the generation prompt is the start of the assistant turn it opens.
Templates that rewrite earlier turns (Qwen3's removes the reasoning of assistant turns before
the last user turn) break it; so does a turn end that is not the tokenizer's eos unless arl
is told the turn end (Qwen2.5's base checkpoints: eos <|endoftext|>, turns closed by
<|im_end|>), which `turn_end` reads from the template itself.

`inspect(tokenizer)` renders one probe conversation prefix by prefix and reports; `findings`
words the report, one line per finding. Every rendering is bounded: the template's size, the
text one rendering may produce, and the time all of them may take (a template that loops or
is huge is one line, not a hang).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arl.errors import ArlError
from arl.runio import MAX_INPUT_BYTES, check_input, read_json

REASONING = "arl-probe-reasoning"
PROBE_TOOL = "arl_probe_tool"
_A = tuple(f"arl-probe-answer-{k}" for k in range(1, 5))

MAX_TEMPLATE_CHARS = 1_000_000  # a real chat template is a few kB (Qwen3's: about 4 kB)
MAX_RENDER_CHARS = 1_000_000  # the probe conversation is a few hundred characters
RENDER_SECONDS = 20.0  # every rendering of one check together (they take milliseconds)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)  # at least one of them: a tokenizer is there
READ_FILES = TOKENIZER_FILES + (
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)  # read by from_pretrained: each must be a regular file of a bounded size
CONFIG_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
)  # small JSON objects of settings (read here first: a list there is one line)


class _Overrun(BaseException):
    """A rendering past its bound (a BaseException: templates' `except Exception` let it by)."""


@contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    """Raise _Overrun in the block after `seconds` of wall time (main thread only: elsewhere
    unbounded in time, still bounded in size)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum, _frame):
        raise _Overrun(f"rendering took more than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    start = time.monotonic()
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer > 0:  # a caller's own alarm keeps what was left of its time
            left = max(outer - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def probe(tool_role: str = "tool") -> list[dict]:
    """The probe: an arl episode (system, user, then assistant turns and tool results; the
    first assistant turn reasons before it answers), then a second user turn and an answer.
    Tool results under `tool_role`."""
    return [
        {"role": "system", "content": "arl-probe-system"},
        {"role": "user", "content": "arl-probe-user-1"},
        {"role": "assistant", "content": f"<think>\n{REASONING}\n</think>\n\n{_A[0]}"},
        {"role": tool_role, "content": "arl-probe-tool-result-1"},
        {"role": "assistant", "content": _A[1]},
        {"role": tool_role, "content": "arl-probe-tool-result-2"},
        {"role": "assistant", "content": _A[2]},
        {"role": "user", "content": "arl-probe-user-2"},
        {"role": "assistant", "content": _A[3]},
    ]


def render(tokenizer: Any, messages: list[dict], generation: bool = False, **kw: Any) -> str:
    """The template's text of `messages` (with the generation prompt if `generation`); a
    template of more than MAX_TEMPLATE_CHARS, or a text of more than MAX_RENDER_CHARS, is an
    _Overrun."""
    template = getattr(tokenizer, "chat_template", None)
    sizes = template.values() if isinstance(template, dict) else [template]
    if any(isinstance(t, str) and len(t) > MAX_TEMPLATE_CHARS for t in sizes):
        raise _Overrun(f"the template is longer than {MAX_TEMPLATE_CHARS:,} characters")
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation, **kw
        )
    except MemoryError:
        raise _Overrun("rendering ran out of memory") from None
    if isinstance(text, str) and len(text) > MAX_RENDER_CHARS:
        raise _Overrun(f"one rendering is longer than {MAX_RENDER_CHARS:,} characters")
    return text


def _renders(tokenizer: Any) -> tuple[list[dict], list[str], list[str]] | None:
    """The probe that renders (with a system turn and the `tool` role if the template takes
    them; else without, or with tool results as user turns), and every prefix of it rendered
    (k = 1..n messages), plain and with the generation prompt. None: no variant renders."""
    for system in (True, False):
        for role in ("tool", "user"):
            msgs = probe(role)[0 if system else 1 :]
            try:
                plain = [render(tokenizer, msgs[:k]) for k in range(1, len(msgs) + 1)]
                gen = [render(tokenizer, msgs[:k], True) for k in range(1, len(msgs) + 1)]
            except Exception:  # noqa: BLE001 (a template raises what it likes: the next variant)
                continue
            return msgs, plain, gen
    return None


def _first_token(tokenizer: Any, tail: str) -> str | None:
    """The added (special) token `tail` starts with, if any: what closes a turn."""
    for tok in sorted(tokenizer.get_added_vocab(), key=len, reverse=True):
        if tok and tail.startswith(tok):
            return tok
    return None


def turn_end(tokenizer: Any) -> str | None:
    """The token the chat template writes right after an assistant turn's content (ChatML's
    <|im_end|>, Llama 3's <|eot_id|>); None when no added token follows it directly."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    msgs = [m for m in probe() if m["role"] in ("system", "user")][:2]
    msgs = msgs + [{"role": "assistant", "content": _A[0]}]
    for conv in (msgs, msgs[1:]):  # some templates refuse a system turn
        try:
            text = render(tokenizer, conv)
        except Exception:  # noqa: BLE001
            continue
        at = text.rfind(_A[0])
        return _first_token(tokenizer, text[at + len(_A[0]) :]) if at >= 0 else None
    return None


@dataclass(frozen=True)
class TemplateReport:
    """What a chat template does to a growing conversation (None: could not be told)."""

    template: bool  # the tokenizer has a chat template
    eos: str | None
    turn_end: str | None  # the added token right after an assistant turn's content
    renders: bool = False  # the probe conversation renders at all
    system_role: bool | None = None  # role "system" renders (arl's prompt has one)
    tool_role: bool | None = None  # role "tool" renders (else results go in as user turns)
    incremental: bool | None = None  # every append keeps the text before it
    first_break: str = ""  # the first append that changed earlier text
    episodes: bool | None = None  # arl's episodes (one user turn, then calls and results) extend
    rewrites: bool | None = None  # an earlier assistant turn's text changes once turns follow
    strips_reasoning: bool | None = None  # ... by removing its reasoning (<think>...</think>)
    native_tools: bool | None = None  # the template renders `tools=[...]` (a native format)


def _first_break(plain: list[str], gen: list[str], msgs: list[dict]) -> tuple[int, str]:
    """The first append (in message order) that does not extend the text before it: its
    message index and what it does; (len(msgs), "") if none."""
    for k in range(1, len(plain)):
        role = msgs[k]["role"]
        if not plain[k].startswith(plain[k - 1]):
            return k, f"appending a {role} turn (message {k + 1}) re-renders the turns before it"
        if role == "assistant" and not plain[k].startswith(gen[k - 1]):
            return (
                k,
                f"the generation prompt is not how the assistant turn (message {k + 1}) starts",
            )
    return len(msgs), ""


def _native_tools(tokenizer: Any) -> bool:
    from arl.hf.toolcalls import spec

    msgs = [{"role": "user", "content": "arl-probe-user-1"}]
    try:
        return PROBE_TOOL in render(tokenizer, msgs, True, tools=[spec(PROBE_TOOL, "probe")])
    except Exception:  # noqa: BLE001
        return False


def inspect(tokenizer: Any, seconds: float | None = None) -> TemplateReport:
    """Render the probe prefix by prefix and say what the template does (see the module); a
    template past a bound (size, text, `seconds` in all) is one ArlError line."""
    try:
        with _time_bound(RENDER_SECONDS if seconds is None else seconds):
            return _inspect(tokenizer)
    except _Overrun as e:
        raise ArlError(f"chat template: not checked: {e} (a looping or huge template?)") from None


def _inspect(tokenizer: Any) -> TemplateReport:
    eos = getattr(tokenizer, "eos_token", None)
    if not getattr(tokenizer, "chat_template", None):
        return TemplateReport(False, eos, None)
    end = turn_end(tokenizer)
    got = _renders(tokenizer)
    if got is None:
        return TemplateReport(True, eos, end)
    msgs, plain, gen = got
    at, brk = _first_break(plain, gen, msgs)
    second_user = [k for k, m in enumerate(msgs) if m["role"] == "user"][-1]
    full = plain[-1]
    # the first assistant turn's text as rendered when it was the last turn, and at the end
    a = [m["role"] for m in msgs].index("assistant")
    first = plain[a][len(plain[a - 1]) :] if plain[a].startswith(plain[a - 1]) else plain[a]
    first = first[: first.find(_A[0]) + len(_A[0])] if _A[0] in first else first
    return TemplateReport(
        template=True,
        eos=eos,
        turn_end=end,
        renders=True,
        system_role=msgs[0]["role"] == "system",
        tool_role="tool" in [m["role"] for m in msgs],
        incremental=not brk,
        first_break=brk,
        episodes=at >= second_user,
        rewrites=first not in full,
        strips_reasoning=REASONING in plain[a] and REASONING not in full,
        native_tools=_native_tools(tokenizer),
    )


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of a local `from_pretrained` folder (never the hub); bad input is one line."""
    from arl.hf.deps import quiet, require_transformers

    if str(path) == "":
        raise ArlError("an empty path names no tokenizer folder")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ArlError(f"{path}: no such folder (a tokenizer's from_pretrained folder)")
    present = [name for name in READ_FILES if os.path.lexists(folder / name)]
    if not any(name in TOKENIZER_FILES for name in present):
        raise ArlError(f"{path}: no tokenizer here (none of {', '.join(TOKENIZER_FILES[:3])}...)")
    for name in present:  # no FIFO, no device, nothing absurdly large; settings as objects
        if name in CONFIG_FILES:
            if not isinstance(read_json(folder / name), dict):
                raise ArlError(f"{folder / name}: expected a JSON object")
        elif check_input(folder / name) > MAX_INPUT_BYTES:
            raise ArlError(f"{folder / name}: larger than {MAX_INPUT_BYTES // 2**20} MiB; not read")
    tf = require_transformers()
    quiet(tf)
    try:
        return tf.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ArlError(f"{path}: no tokenizer here ({str(e).splitlines()[0]})") from e


def findings(r: TemplateReport) -> list[str]:
    """The report in words, one line per finding."""
    if not r.template:
        return ["chat template: none (arl --model needs one: set tokenizer.chat_template)"]
    if not r.renders:
        return ["chat template: renders no user/assistant conversation (not a chat template?)"]
    if r.incremental:
        lines = ["incremental: yes (appending a turn never re-renders earlier ones)"]
    else:
        arl = "not affected" if r.episodes else "refused (they append calls and tool results)"
        lines = [f"incremental: no: {r.first_break}; arl's episodes: {arl}"]
    if r.turn_end is None:
        lines.append("turn end: no token closes an assistant turn (pass --turn-end TOKEN)")
    elif r.turn_end == r.eos:
        lines.append(f"turn end: {r.turn_end} (the eos token)")
    else:
        lines.append(
            f"turn end: {r.turn_end}, not the eos token {r.eos} "
            "(a base checkpoint's tokenizer: arl ends a call on the template's turn end)"
        )
    if r.rewrites:
        why = "loses its reasoning (<think>...</think>)" if r.strips_reasoning else "changes"
        lines.append(f"earlier turns rewritten: yes (an earlier assistant turn {why})")
    else:
        lines.append("earlier turns rewritten: no")
    if not r.system_role:
        lines.append("system role: no (refused: arl's prompt opens with a system turn)")
    lines.append(f"tool role: {'yes' if r.tool_role else 'no (tool results go in as user turns)'}")
    lines.append(
        "native tool calls: "
        + ("yes (the template renders tools=[...])" if r.native_tools else "no (arl's words)")
    )
    return lines

"""The CodeFix environment: free-form replace edits on a real module, graded in a sandbox.

reset/step as in the BugFix gym (arl.bugfix.env), with Problem 14's tools: `read` shows the
module, `test` runs the public tests in the sandbox and answers per test, `replace OLD with
NEW` edits the file (OLD must match exactly once; edits accumulate within the turn budget),
`submit` ends the episode. The hidden tests then grade the final module in a clean room (a
fresh sandbox job holding only that module); the policy never sees them. A replace that does
not apply is answered by what went wrong (errors "helpful", the default: not found with the
closest line, matched N times, no change) or by one word (errors "terse"); an edit that breaks
the syntax still applies, as in a real editor, and says so.

TinyAgent calls and reads words (arl.codefix.listing ties each word to its characters); a real
model calls in text (arl.types.TextCall, a SEARCH/REPLACE block) and reads the file as it is.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from arl.codefix import grade
from arl.codefix.families import LIST_NAMES
from arl.codefix.grammar import (
    END,
    Call,
    Malformed,
    number_word,
    parse_text,
    parse_words,
    prompt_words,
    replace_text,
)
from arl.codefix.listing import (
    closest,
    detokenize,
    line_words,
    listing,
    matches,
    replace_words,
    texts,
)
from arl.codefix.tasks import CodeFixTask, episode_names
from arl.env import EpisodeConfig, TurnLoop
from arl.envkit.families import ACCUMULATORS
from arl.envkit.graded import graded, hardcoded
from arl.envkit.words import identifier_pieces
from arl.errors import ArlError
from arl.sandbox import CaseResult, Verdict
from arl.types import Observation, Outcome, TextCall

ERRORS = ("helpful", "terse")


@dataclass(frozen=True)
class CodeFixConfig(EpisodeConfig):
    """How a CodeFix episode is scored, bounded and answered: the shared fields
    (arl.env.EpisodeConfig), the error messages and the sandbox. Defaults are Problem 14's."""

    name: str = "codefix"
    max_call_tokens: int = 16  # a replace quotes several words
    errors: str = "helpful"  # a failed replace says what went wrong ("helpful") or "error"
    allow_unsandboxed: bool = False  # without bubblewrap, run policy code unsandboxed (unsafe)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.errors not in ERRORS:
            raise ArlError(f"errors: unknown {self.errors!r} (choose from {', '.join(ERRORS)})")

    def record(self) -> dict[str, Any]:
        """{"sandbox": "bwrap" or "none"}: where this config runs policy code (arl.codefix.grade;
        without bubblewrap and `allow_unsandboxed`, a one-line refusal)."""
        return grade.record(self)


@dataclass(frozen=True, kw_only=True)
class CodeFixOutcome(Outcome):
    """A CodeFix episode's outcome: the shared fields, and the environment's own."""

    family: str
    accumulator: str | None  # this episode's names in the function
    list_name: str
    edits: int  # replace calls that parsed
    applied: int  # of them, those that changed the file (the edit-apply rate's numerator)
    syntax_ok: bool  # the final module parses
    flags: tuple[str, ...]  # what the sandbox saw the module try (arl.sandbox)
    sandbox: str  # "bwrap", or "none" where the user allowed running unsandboxed
    env: ClassVar[str] = "codefix"


def _observe(words: Sequence[str], text: str | None = None) -> Observation:
    return Observation(tuple(words), text if text is not None else " ".join(words))


class CodeFixEnv(TurnLoop):
    """One task. `reset(seed=...)` then `step(call)` until terminated or truncated (the turn
    loop is arl.env.TurnLoop's; this class parses, answers and grades)."""

    def __init__(self, task: CodeFixTask, config: CodeFixConfig | None = None):
        self.task = task
        self.config = config or CodeFixConfig()
        self.kind = grade.sandbox_kind(self.config.allow_unsandboxed)  # refused here, at once
        self._rng = random.Random(0)
        self.done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode: the function's names come from the seed, or from options
        ("accumulator", "list_name")."""
        if seed is not None:
            self._rng = random.Random(seed)
        k = seed if seed is not None else self._rng.randrange(12)
        acc, lst = episode_names(self.task, k)
        options = options or {}
        acc = options.get("accumulator") or acc
        lst = options.get("list_name") or lst
        if acc is not None and acc not in ACCUMULATORS:
            raise ArlError(f"accumulator: unknown {acc!r} (choose from {', '.join(ACCUMULATORS)})")
        if lst not in LIST_NAMES:
            raise ArlError(f"list_name: unknown {lst!r} (choose from {', '.join(LIST_NAMES)})")
        self.accumulator, self.list_name = (acc if self.task.accumulator else None), lst
        self.source, _ = self.task.instance(self.accumulator, lst)
        self.turns = self.malformed = self.edits = self.applied = 0
        self.did_read, self.first_call, self.flags = False, None, set()
        self.done = False
        info = {"task": self.task.name, "accumulator": self.accumulator, "list_name": lst}
        words = prompt_words(identifier_pieces(self.task.name))
        return _observe(words, f"fix {self.task.name}"), info

    def parse(self, call: Sequence[str] | TextCall) -> Call | Malformed:
        """TinyAgent's words, or a real model's text (whose replace is a SEARCH/REPLACE block)."""
        self._text = isinstance(call, TextCall)
        return parse_text(call.text, call.ended) if self._text else parse_words(list(call))

    def call_text(self, words: Sequence[str]) -> str:
        """A scripted call's words as a real model writes it: a replace quotes the characters
        its words stand for in the current file (a SEARCH/REPLACE block)."""
        call = parse_words(list(words))
        if not isinstance(call, Call) or call.tool != "replace":
            return " ".join(w for w in words if w != END)
        ws = listing(self.source)
        found = matches(call.old, ws)
        edited = replace_words(self.source, ws, found[0], call.old, call.new) if found else None
        if len(found) != 1 or edited is None:  # it will not apply: the words as text
            return replace_text(
                detokenize(call.old) or " ".join(call.old), detokenize(call.new) or ""
            )
        a, b = ws[found[0]].start, ws[found[0] + len(call.old) - 1].end
        return replace_text(self.source[a:b], edited[a : len(edited) - (len(self.source) - b)])

    # --- the tools ---

    def answer(self, call: Call | Malformed) -> tuple[Observation, bool]:
        if isinstance(call, Malformed):
            self.malformed += 1
            return _observe(["error", "malformed", call.reason]), False
        if call.tool == "read":
            self.did_read = True
            return _observe(texts(listing(self.source)), self.source), False
        if call.tool == "test":  # the public tests alone, in a job of their own: no hidden
            # input is ever in a job the policy sees. The hidden ones run beside it, in a
            # job of their own on the pool's other worker, so that the final grading of
            # this module is a cache hit; only the public job's results are shown.
            public, hidden = self._run_jobs([self._public(), self._hidden()])
            return _test_answer(public.results), False
        if call.tool == "submit":
            return _observe(["submitted"]), True
        self.edits += 1
        new, answer = (_replace_text if self._text else _replace_words)(self.source, call)
        if new is None:
            terse = self.config.errors == "terse"
            return (_observe(["error"]) if terse else answer), False
        self.source = new
        self.applied += 1
        if _parses(new) or self.config.errors == "terse":
            return _observe(["ok"]), False
        return _observe(["ok", "syntax_error"], "ok, but the file no longer parses"), False

    def _public(self):
        """The task's public tests, as sandbox cases (the `test` tool's job)."""
        return grade.cases_of(self.task.public, "public")

    def _hidden(self):
        """The task's hidden tests, as sandbox cases: a job of their own, whose details and
        output the policy never sees (only the final score depends on it)."""
        return grade.cases_of(self.task.hidden, "hidden")

    def _run(self, cases) -> Verdict:
        return self._run_jobs([cases])[0]

    def _run_jobs(self, jobs) -> list[Verdict]:
        verdicts = grade.run_jobs(self.source, self.task.name, jobs, self.kind)
        for v in verdicts:
            self.flags.update(v.flags)
        return verdicts

    def finish(self, submitted: bool) -> CodeFixOutcome:
        """Grade the final module in a clean room: the episode's Outcome. Where `test` already
        ran the public tests on it (cached), the hidden ones run alone; else one job runs both
        (the policy never sees this job's details either way)."""
        if grade.cached(self.source, self.task.name, self._public(), self.kind):
            verdicts = self._run_jobs([self._public(), self._hidden()])
        else:
            verdicts = [self._run(self._public() + self._hidden())]
        return CodeFixOutcome(
            **graded(
                self,
                submitted,
                verdicts,
                len(self.task.public),
                hardcoded(self.source),
                self.flags,
                self.kind,
            ),
            family=self.task.family,
            accumulator=self.accumulator,
            list_name=self.list_name,
            edits=self.edits,
            applied=self.applied,
            syntax_ok=_parses(self.source),
        )


@lru_cache(maxsize=20_000)
def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _test_answer(rs: Sequence[CaseResult]) -> Observation:
    """Per-test results of the public tests: `passed K of N` and each test's status (text:
    test_K: status, with its detail)."""
    k = sum(r.status == "pass" for r in rs)
    words = ["passed", number_word(k), "of", number_word(len(rs)), *(r.status for r in rs)]
    lines = [f"passed {k} of {len(rs)}"]
    lines += [
        f"test_{i}: {r.status}" + (f" ({r.detail})" if r.detail else "") for i, r in enumerate(rs)
    ]
    return _observe(words, "\n".join(lines))


def _replace_words(source: str, call: Call) -> tuple[str | None, Observation]:
    """TinyAgent's replace: OLD words must occur once in the listing; (new source or None, the
    helpful answer when it did not apply)."""
    ws = listing(source)
    new = detokenize(call.new)
    if new is None or detokenize(call.old) is None:
        return None, _observe(["error", "bad_word"])
    found = matches(call.old, ws)
    if not found:
        line = closest(call.old, line_words(ws)) or []
        return None, _observe(["error", "not_found", "closest", *line])
    if len(found) > 1:
        return None, _observe(["error", "matched", number_word(len(found)), "times"])
    edited = replace_words(source, ws, found[0], call.old, call.new)
    if edited is None or edited == source or list(call.old) == list(call.new):
        return None, _observe(["error", "no_change"])
    return edited, _observe(["ok"])


def _replace_text(source: str, call: Call) -> tuple[str | None, Observation]:
    """A real model's replace: OLD must occur once in the file, character for character."""
    old, new = str(call.old), str(call.new)
    n = source.count(old)
    if n == 0:
        lines = source.splitlines()
        first = old.strip().splitlines()[0] if old.strip() else old
        line = closest(first, lines) or ""
        words = ["error", "not_found", "closest", *texts(listing(line.strip()))]
        return None, _observe(words, f"error: not found; the closest line is:\n{line}")
    if n > 1:
        return None, _observe(
            ["error", "matched", number_word(n), "times"],
            f"error: matched {n} times; quote more lines to make it unique",
        )
    if old == new:
        return None, _observe(["error", "no_change"], "error: no change (old equals new)")
    return source.replace(old, new, 1), _observe(["ok"])

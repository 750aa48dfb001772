"""The RepoFix environment: find the one bug in a small repository, fix it, pass hidden tests.

reset/step as every arl environment (arl.env.TurnLoop). The repository lives in memory (path
-> text): `ls` lists its files, `grep PATTERN` answers each line holding the literal text
(file:line), `read FILE` shows a file with its line numbers, `replace FILE LINE TEXT` sets a
line's text (its indentation kept; tests/ is read-only), `test` runs the public tests in arl's
sandbox (repofix.grade) and `submit` ends the episode. The final repository is then graded in
a fresh sandbox job on the public and the hidden tests, which no tool shows. No path is ever
opened on the host: FILE must be one of the repository's paths, exactly.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from arl.env import EpisodeConfig, EpisodeFiles, Malformed, TurnLoop
from arl.envkit.graded import graded, hardcoded
from arl.sandbox import Verdict
from arl.text import BOS, NUM
from arl.types import Observation, Outcome, TextCall
from repofix import grade
from repofix.code import indent_of, words
from repofix.grammar import Call, call_text, parse_text, parse_words
from repofix.repos import TEST_FILE, RepoTask

NL = "<nl>"  # before each line a read or grep shows: `<nl> 12 total = 0`
MAX_HITS = 12  # lines grep shows (then `more`)
READ_ONLY = ("tests/",)  # the tests are the task's, not the policy's to edit


@dataclass(frozen=True)
class RepoFixConfig(EpisodeConfig):
    """How a RepoFix episode is scored and bounded: the shared fields (arl.env.EpisodeConfig)
    and the sandbox. Finding the bug takes turns: grep, read, replace, test, submit at least."""

    name: str = "repofix"
    max_turns: int = 10
    max_call_tokens: int = 32  # a replace quotes a whole line
    allow_unsandboxed: bool = False  # without bubblewrap, run policy code unsandboxed (unsafe)

    def record(self) -> dict[str, Any]:
        """{"sandbox": "bwrap" or "none"}: where this config runs the repository's code."""
        return {"sandbox": grade.sandbox_kind(self.allow_unsandboxed)}


@dataclass(frozen=True, kw_only=True)
class RepoFixOutcome(Outcome):
    """A RepoFix episode's outcome: the shared fields, and the environment's own."""

    family: str
    edits: int  # replace calls that parsed
    applied: int  # of them, those that changed a file
    tests: int  # test calls
    found: bool  # the policy read the file that holds the bug
    syntax_ok: bool  # every module of the final repository parses
    flags: tuple[str, ...]  # what the sandbox saw the code try (arl.sandbox)
    sandbox: str  # "bwrap", or "none" where the user allowed running unsandboxed
    env: ClassVar[str] = "repofix"


def number_word(n: int) -> str:
    return str(n) if 0 <= n <= 99 else NUM


def _observe(ws: Sequence[str], text: str | None = None) -> Observation:
    return Observation(tuple(ws), text if text is not None else " ".join(ws))


class RepoFixEnv(TurnLoop):
    """One task: `reset(seed=...)`, then `step(call)` until terminated or truncated."""

    def __init__(self, task: RepoTask, config: RepoFixConfig | None = None):
        self.task = task
        self.config = config or RepoFixConfig()
        grade.check_location()  # refused at once: installed where the sandbox shows it
        self.kind = grade.sandbox_kind(self.config.allow_unsandboxed)
        self.files: dict[str, str] = task.repository()
        self.done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on the buggy repository (the seed chooses nothing)."""
        self.files = self.task.repository()
        self.turns = self.malformed = self.edits = self.applied = self.tests = 0
        self.did_read, self.first_call, self.done, self.found = False, None, False, False
        self.flags: set[str] = set()
        fn = self.task.function
        text = (
            f"Issue: {fn}() returns wrong results, and its tests in {TEST_FILE} fail. "
            f"Find the bug in the {self.task.repo} repository and fix it."
        )
        return _observe([BOS, "fix", fn], text), {"task": self.task.name}

    def parse(self, call: Sequence[str] | TextCall) -> Call | Malformed:
        if isinstance(call, TextCall):
            return parse_text(call.text, call.ended)
        return parse_words(list(call))

    def call_text(self, ws: Sequence[str]) -> str:
        return call_text(ws)

    def answer(self, call: Call | Malformed) -> tuple[Observation, bool]:
        if isinstance(call, Malformed):
            self.malformed += 1
            return _observe(["error", "malformed", call.reason]), False
        if call.tool == "ls":
            return _observe(list(self.files), "\n".join(self.files)), False
        if call.tool == "grep":
            return grep(self.files, call.text), False
        if call.tool == "read":
            return self._read(call.path), False
        if call.tool == "test":
            self.tests += 1
            verdict = self._run(self.task.public)
            return test_answer(verdict), False
        if call.tool == "submit":
            return _observe(["submitted"]), True
        return self._replace(call), False

    def _read(self, path: str) -> Observation:
        if path not in self.files:
            return _observe(["error", "not_found"], f"error: no file {path!r} (ls lists them)")
        self.did_read = True
        self.found = self.found or path == self.task.path
        lines = self.files[path].split("\n")
        ws = [path]
        for n, line in enumerate(lines, 1):
            ws += [NL, number_word(n), *words(line)]
        text = "\n".join(f"{n:>3}  {line}" for n, line in enumerate(lines, 1))
        return _observe(ws, text)

    def _replace(self, call: Call) -> Observation:
        self.edits += 1
        if call.path not in self.files:
            return _observe(["error", "not_found"], f"error: no file {call.path!r}")
        if call.path.startswith(READ_ONLY):
            return _observe(["error", "read_only"], f"error: {call.path} is read-only")
        lines = self.files[call.path].split("\n")
        if not 1 <= call.line <= len(lines):
            return _observe(["error", "bad_line"], f"error: {call.path} has {len(lines)} lines")
        old = lines[call.line - 1]
        if old.strip() == call.text:
            return _observe(["error", "no_change"], "error: no change (the line is that text)")
        lines[call.line - 1] = indent_of(old) + call.text
        self.files[call.path] = "\n".join(lines)
        self.applied += 1
        if parses(self.files[call.path]):
            return _observe(["ok"])
        return _observe(["ok", "syntax_error"], f"ok, but {call.path} no longer parses")

    def _run(self, tests) -> Verdict:
        verdict = grade.run(self.files, tests, self.kind)
        self.flags.update(verdict.flags)
        return verdict

    def finish(self, submitted: bool) -> RepoFixOutcome:
        """Grade the final repository in a fresh job on every test (the policy sees none of
        this job's answers)."""
        verdict = self._run(self.task.public + self.task.hidden)
        hacked = hardcoded(self.files[self.task.path])
        return RepoFixOutcome(
            **graded(
                self, submitted, [verdict], len(self.task.public), hacked, self.flags, self.kind
            ),
            family=self.task.family,
            edits=self.edits,
            applied=self.applied,
            tests=self.tests,
            found=self.found,
            syntax_ok=all(parses(t) for p, t in self.files.items() if p.endswith(".py")),
        )


def episode_files(env: RepoFixEnv) -> EpisodeFiles:
    """The episode's repository, whole (`Environment.files`: what `arl audit env` reads): as it
    is now, as the task gave it and fixed. A line the fix shares with another file (`total =
    0`) is no secret: the repository shows it to any reader."""
    return EpisodeFiles(dict(env.files), env.task.repository(), env.task.fixed())


def grep(files: dict[str, str], pattern: str) -> Observation:
    """Each line holding `pattern` (literal, case-sensitive), as `<nl> FILE LINE words`; text
    `FILE:LINE: line`, as grep -n writes it. At most MAX_HITS, then `more`."""
    hits = [
        (path, n, line)
        for path, text in files.items()
        for n, line in enumerate(text.split("\n"), 1)
        if pattern in line
    ]
    ws = ["hits", number_word(len(hits))]
    for path, n, line in hits[:MAX_HITS]:
        ws += [NL, path, number_word(n), *words(line)]
    text = [f"{path}:{n}: {line.strip()}" for path, n, line in hits[:MAX_HITS]]
    if len(hits) > MAX_HITS:
        ws.append("more")
        text.append(f"... {len(hits) - MAX_HITS} more")
    return _observe(ws, "\n".join(text) if hits else "no hits")


def test_answer(verdict: Verdict) -> Observation:
    """`passed K of N` and each public test's status (text: its name, status and detail)."""
    rs = verdict.results
    k = sum(r.status == "pass" for r in rs)
    ws = ["passed", number_word(k), "of", number_word(len(rs)), *(r.status for r in rs)]
    lines = [f"passed {k} of {len(rs)}"]
    lines += [f"{r.name}: {r.status}" + (f" ({r.detail})" if r.detail else "") for r in rs]
    return _observe(ws, "\n".join(lines))


@lru_cache(maxsize=20_000)
def parses(source: str) -> bool:
    """Whether a module parses (ast.parse: read, never run)."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True

"""Grading an environment's code in the sandbox (arl.sandbox), shared by every environment that
runs policy-written code (CodeFix's module, RepoFix's repository): where it runs, a warm pool,
a cache of verdicts, and the verdicts turned into an outcome's fields.

A `Grader` holds one warm pool of sandboxed workers per kind and process (Problem 15's warm
pool: a worker is reused across episodes, its state reset between jobs) and a cache of
verdicts by a key its environment chooses (the code and the cases: the same code gives the same
verdict, so an RL batch whose episodes converge on the same edit runs it once). Infrastructure
failures are retried by the sandbox and never cached; nor is a verdict whose flags say it may
not come again (UNCACHED: a process of the job outlived it, or another process wrote into its
result stream), so a forking program cannot fix its luckiest verdict in the cache. Code no job
can hold (`NotRun`: a lone surrogate no Python file can hold) fails every case, unrun.

Without bubblewrap, an environment refuses to run in one line unless the user allowed running
unsandboxed (`allow_unsandboxed`), and then says so (a warning line, `sandbox: none` in the
outcome and in eval's and train's records): never a silent downgrade.

`graded(...)` turns the final state's verdicts into what every such environment's outcome
holds the same way: the shared fields, the score, the sandbox's flags and its kind.
"""

from __future__ import annotations

import atexit
import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from arl.envkit.exploits import is_hardcoded
from arl.errors import ArlError
from arl.sandbox import (
    CaseResult,
    Job,
    Limits,
    Sandbox,
    SandboxUnavailable,
    Verdict,
    make_sandbox,
    sandbox_available,
)

# flags of a verdict that may not come again: never cached
UNCACHED = ("bad_result_stream", "left_processes", "foreign_result")
# what the sandbox saw code try that attacks the harness: the episode is hacked
HACK_FLAGS = ("exit_at_import", "bad_result_stream", "foreign_result")


class NotRun(ArlError):
    """A job that cannot be made (code no Python file can hold): its cases fail, unrun, with
    this error's text as each case's detail."""


@dataclass
class Grader:
    """One environment's sandbox jobs: its limits, its warm pools, its verdict cache."""

    title: str  # the environment's name in its refusal: "CodeFix runs policy code only ..."
    limits: Limits
    cache_size: int = 50_000
    workers: int = 2
    prefix: str = "arl"  # the warning line's program: "arl: WARNING: ..."
    flag: str = "--allow-unsandboxed"  # what the user set to run unsandboxed, as the warning says
    stats: dict[str, int] = field(
        default_factory=lambda: {"jobs": 0, "cache_hits": 0, "infra_errors": 0}
    )
    warned: list[str] = field(default_factory=list)
    pools: dict[str, Sandbox] = field(default_factory=dict)
    cache: OrderedDict[Hashable, Verdict] = field(default_factory=OrderedDict)

    def sandbox_kind(self, allow_unsandboxed: bool) -> str:
        """bwrap where it works; else "none" if the user allowed it (said on stderr, once a
        process); else a one-line refusal."""
        reason = sandbox_available()
        if reason is None:
            return "bwrap"
        if allow_unsandboxed:
            if not self.warned:
                self.warned.append(reason)
                print(
                    f"{self.prefix}: WARNING: running policy code WITHOUT a sandbox "
                    f"({self.flag}): {reason.split(':')[0]}; results record sandbox: none",
                    file=sys.stderr,
                    flush=True,
                )
            return "none"
        raise SandboxUnavailable(f"{self.title} runs policy code only in a sandbox: {reason}")

    def record(self, allow_unsandboxed: bool) -> dict[str, Any]:
        """{"sandbox": "bwrap" or "none"}: what eval's metrics, train's results.json and a PG
        run's config.json record of where the code ran."""
        return {"sandbox": self.sandbox_kind(allow_unsandboxed)}

    def pool(self, kind: str) -> Sandbox:
        """The process's warm pool of `kind` (started on first use, closed at exit)."""
        if kind not in self.pools:
            self.pools[kind] = make_sandbox(kind, workers=self.workers)
            if len(self.pools) == 1:
                atexit.register(self.close)
        return self.pools[kind]

    def close(self) -> None:
        """Stop every pool (a later job starts a new one)."""
        while self.pools:
            self.pools.popitem()[1].close()

    def clear_cache(self) -> None:
        self.cache.clear()

    def cached(self, key: Hashable) -> bool:
        """Whether run() would answer the job keyed `key` from the cache."""
        return key in self.cache

    def run(
        self, jobs: Sequence[tuple[Hashable, tuple, Callable[[], Job]]], kind: str
    ) -> list[Verdict]:
        """The verdicts of several jobs, each (its cache key, its cases, how to make it): each
        from the cache or the sandbox, those not cached run side by side on the pool's
        workers. A key holds the kind the job runs in, so that none is answered for another."""
        out: list[Verdict | None] = []
        todo: list[tuple[int, Hashable, Job]] = []
        for key, cases, make in jobs:
            hit = self.cache.get(key)
            self.stats["jobs"] += 1
            if hit is not None:
                self.stats["cache_hits"] += 1
                self.cache.move_to_end(key)
            else:
                try:
                    todo.append((len(out), key, make()))
                except NotRun as e:  # never run, never cached
                    hit = Verdict(tuple(CaseResult(c.name, "fail", str(e)) for c in cases))
            out.append(hit)
        if todo:
            verdicts = self.pool(kind).run_many([job for _, _, job in todo])
            for (i, key, _), verdict in zip(todo, verdicts, strict=True):
                out[i] = verdict
                if verdict.infra_error is not None:
                    self.stats["infra_errors"] += 1
                elif not any(f in UNCACHED for f in verdict.flags):
                    self.cache[key] = verdict
                    if len(self.cache) > self.cache_size:
                        self.cache.popitem(last=False)
        return out  # type: ignore[return-value]


@lru_cache(maxsize=20_000)
def hardcoded(source: str) -> bool:
    """The exploit detector (arl.envkit.exploits) on a module; one no Python file can hold, or
    nested past the parser, is not hardcoded (it never ran)."""
    try:
        return is_hardcoded(source)
    except (ValueError, RecursionError):
        return False


def graded(
    env: Any,
    submitted: bool,
    verdicts: Iterable[Verdict],
    public: int,
    hacked_source: bool,
    flags: set[str],
    kind: str,
) -> dict[str, Any]:
    """The outcome's fields every sandboxed environment fills the same way, from the final
    state's verdicts (their cases in order: the `public` public tests, then the hidden ones):
    the shared fields (arl.env.TurnLoop.shared), the score, the sandbox's `flags` over the
    episode and its `kind`. `hacked_source`: the exploit detector's verdict on the final code.
    An infrastructure failure is no zero: the episode is not scored."""
    verdicts = list(verdicts)
    ok = [r.status == "pass" for v in verdicts for r in v.results]
    pub, hid = ok[:public], ok[public:]
    infra = any(v.infra_error is not None for v in verdicts)
    hacked = hacked_source or bool(flags & set(HACK_FLAGS))
    scored = (submitted or env.config.truncation == "score") and not infra
    return dict(
        **env.shared(submitted, scored, hid, pub, hacked, infra),
        score=env.config.score(hid, pub, scored, hacked),
        flags=tuple(sorted(flags)),
        sandbox=kind,
    )

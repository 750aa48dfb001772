"""Appendix B problems reproduced on the gym: `arl reproduce problem N|all [--seeds K]`.

Each problem measures its mechanism on one seed (`Problem.measure`: its arms share the seed,
the starting policy and the evaluation tasks), and states one effect per seed; the claim is
judged over seeds (mean +- 2 SE of the paired effect, k of N seeds) and written to
results.json under `shown`, beside every seed's numbers and a figure drawn over the seeds.
This package computes and writes files; the command (arl/cli/reproduce.py) parses and prints.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arl.checks import check_seed
from arl.errors import ArlError
from arl.experiments import locks
from arl.experiments.problems import (
    adopt_demo,
    contamination,
    distillation,
    dynamics,
    estimators,
    freeform,
    judged,
    kl,
    leak,
    length,
    objective,
    passk,
    precision,
    rewards,
    systems,
)
from arl.experiments.problems.common import (
    NOT_JUDGED,
    NOT_SHOWN,
    SHOWN,
    SOURCES,
    Ctx,
    Problem,
    cause_of,
    judge,
    num,
    rule_record,
    verdict_line,
)
from arl.parallel import Placements, Where, run_many
from arl.runio import atomic_write_json, atomic_write_text, claim_output_dir, plain

PROBLEMS: dict[int, Problem] = {
    1: estimators.PROBLEM_1,
    2: estimators.PROBLEM_2,
    3: estimators.PROBLEM_3,
    4: estimators.PROBLEM_4,
    6: kl.PROBLEM_6,
    7: rewards.PROBLEM_7,
    8: rewards.PROBLEM_8,
    9: rewards.PROBLEM_9,
    10: judged.PROBLEM_10,
    11: leak.PROBLEM_11,
    12: rewards.PROBLEM_12,
    13: rewards.PROBLEM_13,
    14: freeform.PROBLEM_14,
    16: systems.PROBLEM_16,
    17: systems.PROBLEM_17,
    20: precision.PROBLEM_20,
    23: contamination.PROBLEM_23,
    24: passk.PROBLEM_24,
    25: objective.PROBLEM_25,
    26: dynamics.PROBLEM_26,
    27: length.PROBLEM_27,
    28: dynamics.PROBLEM_28,
    29: distillation.PROBLEM_29,
    30: adopt_demo.PROBLEM_30,
}
OWNED = ("results.json", "results.partial.json", "problem-*.png", "nodes.json")


@dataclass(frozen=True)
class Registry:
    """A numbered set of reproductions run by the same machinery: Appendix B's problems, or
    Chapter 15's exercises (arl.experiments.exercises). `kind` names them in messages, in
    results.json's key, in the figure's name (KIND-N.png) and in the default folders."""

    kind: str  # "problem" or "exercise"
    entries: dict[int, Problem]

    @property
    def owned(self) -> tuple[str, ...]:
        """The files a run of this kind writes in its folder (problems: OWNED)."""
        return ("results.json", "results.partial.json", f"{self.kind}-*.png", "nodes.json")

    def figure(self, number: int) -> str:
        return f"{self.kind}-{number}.png"

    def default_out(self, number: int | None = None) -> Path:
        """runs/KIND-N for one, runs/KINDs for all of them."""
        return Path(f"runs/{self.kind}s" if number is None else f"runs/{self.kind}-{number}")


KINDS = ("problem", "exercise")


def registry(kind: str = "problem") -> Registry:
    """The problems' registry, or the exercises' (imported here, on first use: the exercises
    package imports this one)."""
    if kind == "problem":
        return Registry("problem", PROBLEMS)
    if kind == "exercise":
        from arl.experiments.exercises import EXERCISES

        return Registry("exercise", EXERCISES)
    raise ArlError(f"unknown kind {kind!r} (choose from {', '.join(KINDS)})")


def get(number: int, kind: str = "problem") -> Problem:
    entries = registry(kind).entries
    if number not in entries:
        avail = ", ".join(str(n) for n in entries)
        raise ArlError(f"{kind} {number}: not reproduced (available: {avail})")
    return entries[number]


def _get(number: int, kind: str) -> Problem:
    """get() looked up in this module at call time (a test may replace it for problems)."""
    return get(number) if kind == "problem" else get(number, kind)


def measure_seed(number: int, quick: bool, seed: int, kind: str = "problem") -> dict:
    """One seed of one problem or exercise (a picklable task for local processes and Ray)."""
    t0 = time.perf_counter()
    results, detail = _get(number, kind).measure(Ctx(number=number, quick=quick, seed=seed))
    if not math.isfinite(float(results.get("effect", float("nan")))):
        raise RuntimeError(f"{kind} {number} measured no finite effect")  # a bug, not input
    return {
        "seed": seed,
        **results,
        "detail": detail,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _settings(number: int, quick: bool, kind: str = "problem") -> dict:
    """What a resumed or read-back run must share: the problem (or exercise), its size and what
    each claim's per-seed effect measures."""
    effects = {key: c.effect for key, c in _get(number, kind).claims}
    return plain({kind: number, "quick": quick, "effects": effects})


def _same_measurement(saved: dict, settings: dict, kind: str = "problem") -> bool:
    """Whether saved seeds measured what `settings` measures: the problem, its size and every
    claim's effect. Thresholds, directions and causes may differ: the verdicts are redone."""
    theirs = (saved.get(kind), saved.get("quick"), saved.get("effects"))
    return theirs == (settings[kind], settings["quick"], settings["effects"])


def _read(path: Path, kind: str = "problem") -> dict:
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArlError(
            f"{path} is unreadable ({type(e).__name__}); pass --overwrite to start again"
        ) from None
    if not isinstance(saved, dict):
        raise ArlError(f"{path} is not a {kind} run's results; pass --overwrite to start again")
    return saved


def _saved_seeds(out: Path, settings: dict, kind: str = "problem") -> dict[int, dict]:
    """The seeds already measured in `out` (results.json, then results.partial.json): seed ->
    record; a file of another measurement, or not a run's results, is refused in one line."""
    done: dict[int, dict] = {}
    for name in ("results.json", "results.partial.json"):
        if (out / name).exists():
            saved = _read(out / name, kind)
            if not _same_measurement(saved, settings, kind):
                raise ArlError(
                    f"{out / name} holds another run; choose another --out or pass --overwrite"
                )
            try:
                done |= {int(r["seed"]): r for r in saved.get("per_seed", [])}
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ArlError(
                    f"{out / name} is not a {kind} run's results; pass --overwrite to start again"
                ) from None
    return done


def run(
    number: int,
    seeds: list[int] | None = None,
    quick: bool = False,
    out: str | Path | None = None,
    overwrite: bool = False,
    where: Where | None = None,
    log: Callable[[str], None] = lambda line: None,
    kind: str = "problem",
) -> dict:
    """Run one problem (or exercise: `kind`) on `seeds` (default: its locked judged seeds);
    write results.json and problem-N.png (exercise-N.png) under out.

    The rule must be as locked (arl.experiments.locks) before any seed runs. Seeds run where
    `where` says (this process, local processes, Ray), each saved to results.partial.json as
    it finishes; a rerun resumes them, and seeds of a finished run with the same measurement
    are read back, not rerun (the verdicts, conclusion and figure are made again from them).
    Another run's folder is refused unless `overwrite`.
    """
    reg = registry(kind)
    problem = _get(number, kind)
    lock = locks.require(f"{kind} {number}", rule_record(f"{kind} {number}", problem))  # first
    seeds = list(problem.seeds) if seeds is None else list(seeds)
    for s in seeds:
        check_seed("--seed", s)
    out = Path(out or reg.default_out(number))
    settings = _settings(number, quick, kind)
    with claim_output_dir(
        out, f"reproduce {kind} {number}", reg.owned, overwrite=overwrite, reuse=not overwrite
    ):
        done = _saved_seeds(out, settings, kind)
        todo = [s for s in seeds if s not in done]
        if not todo:
            log(
                f"{kind} {number}: every seed finished in {out}; read back and judged again "
                "(--overwrite reruns)"
            )
        elif len(todo) < len(seeds):
            log(f"{kind} {number}: seeds {sorted(set(seeds) - set(todo))} already done")
        # problems keep their 3-argument jobs (measure_seed(number, quick, seed))
        jobs = [(number, quick, s) + (() if kind == "problem" else (kind,)) for s in todo]
        nodes = Placements(out / "nodes.json", key=lambda job: job[2])  # on Ray: seed -> node
        for job, r in run_many(measure_seed, jobs, where or Where(), nodes):
            s = job[2]
            done[s] = plain(r, ndigits=6)  # as a resumed seed reads it back: same verdict
            partial = {**settings, "per_seed": [done[k] for k in sorted(done)]}
            atomic_write_json(out / "results.partial.json", partial)
            log(
                f"{kind} {number}: seed {s} done in {r['seconds']:.0f} s "
                f"({len(set(done) & set(seeds))}/{len(seeds)}){nodes.line(s)}"
            )
        per_seed = [done[s] for s in seeds]
        check_records(problem, per_seed, out)
        claims = judge_all(problem, per_seed)
        draw(problem, per_seed, out, number, reg.figure(number))
        results = {
            **settings,
            "rule": {**lock, "seeds": list(problem.seeds), "interval": locks.INTERVAL},
            "seeds": seeds,
            "on_locked_seeds": seeds == list(problem.seeds),
            "shown": all(c["shown"] for c in claims),
            "counts": counts(claims),
            "claims": claims,
            "per_seed": per_seed,
            "seconds": round(sum(r["seconds"] for r in per_seed), 1),
        }
        results = plain(results, ndigits=6)  # what is returned is what is read back
        atomic_write_json(out / "results.json", results)
        (out / "results.partial.json").unlink(missing_ok=True)
    return results


def judge_all(problem: Problem, per_seed: list[dict]) -> list[dict]:
    """Every claim judged over seeds in order, main first: a conditional claim is judged only
    when its premise (an earlier claim) is shown."""
    status: dict[str, bool] = {}
    out = []
    for key, claim in problem.claims:
        premise = status[claim.premise] if claim.premise else True
        v = judge(claim, [{**r, "effect": r[key]} for r in per_seed], premise)
        status[key] = v["shown"]
        out.append(
            {
                "key": key,
                "claim": asdict(claim),
                "status": v["status"],
                "shown": v["shown"],
                "identity_holds": v["identity_holds"],
                "effect": {k: v[k] for k in ("n", "mean", "se", "lo", "hi", "df", "t", "k")},
                "conclusion": verdict_line(claim, v),
                "cause": cause_of(claim, v),
            }
        )
    return out


def counts(claims: list[dict]) -> dict[str, dict[str, int]]:
    """Book claims and lab hypotheses counted apart: how many, shown, not shown, not judged."""
    out = {}
    for source in SOURCES:
        mine = [c for c in claims if c["claim"]["source"] == source]
        out[source] = {
            "claims": len(mine),
            "shown": sum(c["status"] == SHOWN for c in mine),
            "not_shown": sum(c["status"] == NOT_SHOWN for c in mine),
            "not_judged": sum(c["status"] == NOT_JUDGED for c in mine),
        }
    return out


def check_records(problem: Problem, per_seed: list[dict], out: Path) -> None:
    """Every seed's record holds what the verdict and the figure read; a record read back
    without one of them (an edited or truncated file) is refused, naming what is missing."""
    keys = ("seed", "effect", "detail", "seconds", *(k for k, _ in problem.more))
    for r in per_seed:
        lacking = [k for k in keys if k not in r] if isinstance(r, dict) else ["a record"]
        if lacking:
            raise ArlError(
                f"{out}: seed {r.get('seed', '?')}'s results lack "
                f"{', '.join(lacking)}; pass --overwrite to start again"
            )


def draw(problem: Problem, per_seed: list[dict], out: Path, number: int, name: str = "") -> None:
    """The figure (`name`, problem-N.png by default), from every seed's record; one the figure
    cannot read is refused in one line (the figure is written only once drawn whole)."""
    from arl.experiments.ch15_seeds import missing

    try:
        problem.draw(per_seed, out / (name or f"problem-{number}.png"))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise ArlError(
            f"{out}: a seed's results are incomplete ({missing(e)}); pass "
            "--overwrite to start again"
        ) from None


def seeds_for(problem: Problem, first: int | None = None, count: int | None = None) -> list[int]:
    """The seeds to run: the locked judged seeds, or `count` seeds from `first` (each defaulting
    to the lock's first seed and number of seeds)."""
    if first is None and count is None:
        return list(problem.seeds)
    first = problem.seeds[0] if first is None else first
    count = len(problem.seeds) if count is None else count
    return list(range(first, first + count))


def summary_rows(results: dict[int, dict], kind: str = "problem") -> list[dict]:
    """One row per claim of every experiment: its source, text, effect over seeds with its t
    bounds, k of N, status and cause."""
    rows = []
    for n, r in results.items():
        for c in r["claims"]:
            e = c["effect"]
            rows.append(
                {
                    kind: n,
                    "key": c["key"],
                    "source": c["claim"]["source"],
                    "claim": c["claim"]["text"],
                    "effect": c["claim"]["effect"],
                    "measured": f"{num(e['mean'], True)} +- {num(e['se'])} "
                    + (f"[{num(e['lo'], True)}, {num(e['hi'], True)}]" if e["n"] > 1 else ""),
                    "df": e["df"],
                    "seeds": f"{e['k']}/{e['n']}",
                    "status": c["status"],
                    "shown": c["shown"],
                    "cause": c["cause"],
                }
            )
    return rows


def count_line(counts_: dict[str, dict[str, int]]) -> str:
    """Book claims and lab hypotheses, counted apart, in one line."""
    b, lab = counts_["book"], counts_["lab"]
    return (
        f"book claims: {b['shown']} of {b['claims']} shown ({b['not_judged']} not judged: "
        f"premise not shown); lab hypotheses: {lab['shown']} of {lab['claims']} supported "
        f"({lab['not_judged']} not judged)"
    )


def markdown(rows: list[dict], quick: bool, kind: str = "problem") -> str:
    head = [
        f"| {kind} | source | claim | effect (per seed) | mean +- SE [t bounds] | df | seeds "
        "| verdict | cause if not shown |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731 (a | inside a cell)
    lines = [
        f"| {r[kind]} | {r['source']} | {cell(r['claim'])} | {cell(r['effect'])} "
        f"| {r['measured']} | {r['df']} | {r['seeds']} | {r['status']} | {cell(r['cause'])} |"
        for r in rows
    ]
    note = " (QUICK settings: too small to show anything; not results)" if quick else ""
    return "\n".join([count_line(counts_of_rows(rows)) + note + ".", "", *head, *lines]) + "\n"


def counts_of_rows(rows: list[dict]) -> dict[str, dict[str, int]]:
    """counts() over summary rows."""
    return counts([{"claim": {"source": r["source"]}, "status": r["status"]} for r in rows])


def run_all(
    first: int | None = None,
    count: int | None = None,
    out: str | Path | None = None,
    **opts: Any,
) -> dict:
    """Every problem (or exercise) in sequence (each into out/problem-N, resumable) on its
    locked seeds (or `count` from `first`), then summary.json and summary.md with one row per
    claim; out: runs/problems by default. opts: `run`'s quick, overwrite, where, log and kind,
    the same for every problem."""
    kind, log = opts.get("kind", "problem"), opts.get("log", lambda line: None)
    entries = registry(kind).entries
    out = Path(out or registry(kind).default_out())
    results = {}
    for n in entries:
        log(f"{kind} {n} ({list(entries).index(n) + 1}/{len(entries)})")
        seeds = seeds_for(entries[n], first, count)
        results[n] = run(n, seeds, out=out / f"{kind}-{n}", **opts)
    rows = summary_rows(results, kind)
    quick = opts.get("quick", False)
    payload = {
        "quick": quick,
        "seeds": {n: r["seeds"] for n, r in results.items()},
        "counts": counts_of_rows(rows),
        "shown": sum(r["shown"] for r in rows),
        "claims": len(rows),
        f"{kind}s": len(results),
        "rows": rows,
    }
    atomic_write_json(out / "summary.json", plain(payload))
    atomic_write_text(out / "summary.md", markdown(rows, quick, kind))
    return payload

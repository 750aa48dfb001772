"""Chapter 15 over many seeds: in one process, as tasks on several (ch15_plan: each seed's
sections as soon as their inputs are ready), or whole seeds on Ray; a resume after a kill;
the files (results.json, table.md from ch15_table's rules and ch15_summary, figures from
ch15_figures).

A finished seed is saved to results.partial.json at once, so a killed run loses only the
seeds in flight; a folder holding another run's results is refused, never mixed in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, replace
from pathlib import Path

from arl.errors import ArlError
from arl.experiments import ch15_book, ch15_plan, ch15_rules, locks
from arl.experiments.ch15 import Ch15Config, run_seed, save_models
from arl.experiments.ch15_book import JUDGED_SEEDS
from arl.experiments.ch15_figures import draw_figures
from arl.experiments.ch15_summary import REPRODUCED_SHARE, aggregate, cost_table, markdown
from arl.experiments.ch15_table import rows
from arl.parallel import Folder, Placements, Where, run_many
from arl.runio import atomic_write_json, atomic_write_text, claim_output_dir, plain
from arl.train.bases import base_settings
from arl.train.pg_config import pg_settings

CH15_RULES = ("ch15_rules", "ch15_table", "ch15_table_design")  # the modules its rules are


def rule_record() -> dict:
    """Chapter 15's rule, as a lock fingerprints it: every row's claim and source, the
    thresholds, the rules' code (its rows are rules written as code), the settings and seeds."""
    config = Ch15Config()
    thresholds = {
        k: v
        for k, v in vars(ch15_rules).items()
        if k.isupper() and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return plain(
        {
            "experiment": "ch15",
            "rows": {
                key: {
                    "quantity": c.quantity,
                    "book": c.book,
                    "source": ch15_book.SOURCES[key][0],
                    "passage": ch15_book.SOURCES[key][1],
                }
                for key, c in ch15_book.CLAIMS.items()
            },
            "thresholds": thresholds,
            "rules_code_sha256": locks.code_sha256([f"arl.experiments.{m}" for m in CH15_RULES]),
            "settings": {
                **asdict(config),
                "base": base_settings(config.base),
                "rl": pg_settings(config.rl),
            },
            "tuned": ch15_book.TUNED,
            "seeds": ch15_book.JUDGED_SEEDS,
            "reproduced": f"a row's rule holds on at least {REPRODUCED_SHARE:.0%} of the seeds",
            "interval": "per seed: differences of pass rates by t(0.975, min(n1, n2) - 1) "
            "standard errors of the evaluations behind them",
        }
    )


def _settings(cfg: Ch15Config, quick: bool) -> dict:
    """What a resumed run must share with the partial one (as JSON reads it back)."""
    return plain({"config": {**asdict(cfg), "rl": pg_settings(cfg.rl)}, "quick": quick})


OWNED = ("results.json", "results.partial.json", "table.md", "*.png", "checkpoints", "nodes.json")


def resume_state(out: Path, cfg: Ch15Config, quick: bool) -> dict[int, dict]:
    """Finished seeds to keep from `out`: those of a partial run with the same settings.

    A folder that holds a finished run, or a partial run with other settings, is refused
    (`--overwrite` clears it first): a new run never mixes its results with another's.
    """
    if (out / "results.json").exists():
        raise ArlError(
            f"{out} holds a finished run (results.json); choose another --out or pass --overwrite"
        )
    partial = out / "results.partial.json"
    if not partial.exists():
        return {}
    try:
        saved = json.loads(partial.read_text())
        same = {k: saved[k] for k in ("config", "quick")} == _settings(cfg, quick)
        runs = {int(R["seed"]): R for R in saved["runs"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ArlError(
            f"{partial} is unreadable ({missing(e)}); pass --overwrite to start again"
        ) from None
    if not same:
        hint = "pass --overwrite to start again"
        raise ArlError(f"{partial} holds a run with other settings{_older(saved)}; {hint}")
    return runs


def _older(saved: dict) -> str:
    """Why saved settings can never match: a run saved before Ch15Config held the RL arms'
    PGConfig (as `rl`) had flat rl_group, rl_lr, ... fields. Such a run retables (`--retable`
    reads only the runs), but does not resume."""
    flat = isinstance(saved.get("config"), dict) and "rl_group" in saved["config"]
    return " (saved by an older arl, before the RL settings were a PGConfig)" if flat else ""


def run_seeds(
    cfg: Ch15Config,
    seeds: list[int],
    out: Path,
    *,
    quick: bool = False,
    workers: int = 1,
    ray: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] = lambda line: None,
    header: str | None = None,
) -> dict:
    """Run every seed (in this process; with `workers` >= 2 its sections as tasks on that many
    processes, see ch15_plan; or whole seeds as Ray tasks at `ray`: "local" or a cluster
    address), resuming finished seeds from results.partial.json; write results.json, table.md
    and the figures; return the payload. Same seeds, same results wherever they ran. `header`
    is logged once the run's checks passed and its folder is claimed (a refusal comes alone)."""
    locks.require("ch15", rule_record())  # the rules as locked, before any seed runs
    if ray not in (None, "local"):
        from arl.parallel import check_ray_address

        check_ray_address(ray)
    with claim_output_dir(out, "reproduce ch15", OWNED, overwrite=overwrite, reuse=not overwrite):
        if header:
            log(header)
        return _run_seeds(cfg, seeds, out, quick, Where(workers=workers, ray=ray), log)


def _run_seeds(cfg, seeds, out, quick, where: Where, log) -> dict:
    done = resume_state(out, cfg, quick)
    todo = [s for s in seeds if s not in done]
    if set(done) & set(seeds):
        log(f"resuming: seeds {sorted(set(done) & set(seeds))} already done in {out}")
    # the first seed's checkpoints: a Folder of this machine, wherever the seed runs
    ckpt = lambda seed: Folder(str(out / "checkpoints")) if seed == seeds[0] else ""  # noqa: E731
    nodes = Placements(out / "nodes.json", key=lambda job: job[1])  # on Ray: seed -> node

    def finished(R: dict) -> None:
        done[R["seed"]] = R
        runs = [done[s] for s in sorted(done)]
        atomic_write_json(out / "results.partial.json", {**_settings(cfg, quick), "runs": runs})
        log(
            f"seed {R['seed']} done in {sum(R['timings_s'].values()):.0f} s "
            f"({len(set(done) & set(seeds))}/{len(seeds)}){nodes.line(R['seed'])}"
        )

    if where.ray is None and where.workers >= 2:  # the sections of every seed as tasks
        # closing: an error here (or Ctrl-C) ends the worker processes at once
        with closing(ch15_plan.run_seeds(cfg, todo, where)) as seeds_done:
            for seed, tasks in seeds_done:
                _keep(cfg, seed, tasks, ckpt(seed), finished)
    else:  # in this process, or whole seeds as Ray tasks (no cache shared across nodes)
        jobs = [(cfg, seed, ckpt(seed)) for seed in todo]
        for _, R in run_many(run_seed, jobs, where, nodes):
            finished(R)  # as each seed finishes: a kill loses only the seeds in flight
    payload = write_outputs(
        out, {**_settings(cfg, quick), "seeds": seeds, "runs": [done[s] for s in seeds]}
    )
    (out / "results.partial.json").unlink(missing_ok=True)
    return payload


def _keep(cfg: Ch15Config, seed: int, tasks: dict, ckpt: Folder | str, finished) -> None:
    """A seed whose tasks are all done: its checkpoints (if `ckpt`), then its results."""
    scfg = replace(cfg, base=replace(cfg.base, seed=seed))
    if ckpt:
        save_models(ch15_plan.models_of(tasks), ckpt.path, seed)
    finished(ch15_plan.assemble(scfg, tasks))  # a kill loses only the seeds in flight


def write_outputs(out: Path, payload: dict) -> dict:
    """The table (today's rules, as locked, over the runs), table.md, figures and
    results.json (with the lock's fingerprint and whether the seeds are the locked ones)."""
    runs = payload["runs"]
    lock = locks.require("ch15", rule_record())
    judged = list(JUDGED_SEEDS)
    rule = {**lock, "seeds": judged, "on_locked_seeds": set(payload["seeds"]) <= set(judged)}
    table = aggregate([rows(R) for R in runs])
    figures = draw_figures(runs, out)
    cost = markdown(table, payload["quick"]) + "\n" + cost_table(runs[0]["recipes"]["cost"])
    atomic_write_text(out / "table.md", cost)
    payload = {**payload, "rule": rule, "table": table, "figures": figures}
    atomic_write_json(out / "results.json", payload)
    return payload


def retable(out: Path) -> dict:
    """Recompute the table and figures of a finished run from its results.json (after a rule
    changed), without rerunning anything."""
    try:
        payload = json.loads((out / "results.json").read_text())
        payload["runs"][0]["recipes"]["cost"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        name = type(e).__name__
        raise ArlError(f"{out / 'results.json'}: not a finished ch15 run ({name})") from None
    with claim_output_dir(out, "reproduce ch15", OWNED, reuse=True):
        try:
            return write_outputs(out, payload)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise ArlError(
                f"{out / 'results.json'}: not a complete ch15 run ({missing(e)}); "
                "rerun it with --overwrite"
            ) from None


def missing(e: Exception) -> str:
    """What a read-back record lacked, from the error reading it raised."""
    if isinstance(e, KeyError):
        return f"no {e.args[0]!r}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__

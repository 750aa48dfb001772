"""Chapter 15's sections as a graph of tasks, run across processes as their inputs are ready.

One seed is eleven tasks. The weak base comes first (everything starts from it); then the
tasks that need only it (its evaluation, RFT, public-filter RFT, DPO, RL from the weak base)
run beside the oracle-SFT chain, whose cold-start and final models the last three need (RL
from the cold start, the mixed-groups probe, the stripped template). schedule.run_graph runs
the tasks of every seed on `workers` processes, the longest remaining path first; models
cross processes as state-dict bytes. The sections share no random state (each seeds its own
generators; none reads torch's global one without seeding it), so the results are those of
ch15.run, the sections in order in one process, byte for byte. A seed's results are
assembled here, in the keys and order of ch15.run, as soon as its last task is done.

The weak base is one task: the oracle-SFT chain loads it from the on-disk cache only after
that task saved it, so no two processes ever train (and write) the same base.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from arl.experiments import ch15
from arl.experiments.ch15_config import Ch15Config
from arl.experiments.schedule import Job, run_graph
from arl.model import TinyAgent, TinyAgentConfig
from arl.parallel import Where
from arl.progress import Progress, reporting
from arl.train.bases import weak_base

Models = dict[str, TinyAgent]


@dataclass(frozen=True)
class Task:
    """One piece of a seed: fn(cfg, models it needs) -> (result, models it makes)."""

    name: str
    section: str  # the results.json section (and timings_s key) it belongs to
    needs: tuple[str, ...]  # the tasks whose models it takes
    fn: Callable[[Ch15Config, Models], tuple[Any, Models]]  # module-level: pickled by name
    seconds: float  # its time in a full run from an empty cache: sets the order, nothing else
    line: str = ""  # its progress line as it starts (default: its section's name)


def _tokens(cfg: Ch15Config, got: Models):
    return ch15.section_tokens(cfg), {}


def _weak(cfg: Ch15Config, got: Models):
    return None, {"weak": weak_base(cfg.base)}


def _eval_weak(cfg: Ch15Config, got: Models):
    return ch15.sft_weak_part(cfg, got["weak"]), {}


def _oracle(cfg: Ch15Config, got: Models):
    part, cold, final = ch15.sft_oracle_part(cfg)  # the weak base from the cache
    return part, {"cold": cold, "final": final}


def _rft(cfg: Ch15Config, got: Models):
    return ch15.section_rft(cfg, got["weak"]), {}


def _public_rft(cfg: Ch15Config, got: Models):
    return ch15.section_public_rft(cfg, got["weak"]), {}


def _dpo(cfg: Ch15Config, got: Models):
    return ch15.section_dpo(cfg, got["weak"]), {}


def _rl_weak(cfg: Ch15Config, got: Models):
    return ch15.rl_from_weak(cfg, got["weak"]), {}


def _rl_cold(cfg: Ch15Config, got: Models):
    return ch15.rl_from_cold(cfg, got["cold"]), {}


def _groups(cfg: Ch15Config, got: Models):
    return ch15.section_groups(cfg, got["cold"], got["final"]), {}


def _template(cfg: Ch15Config, got: Models):
    return ch15.section_template(cfg, got["weak"], got["final"]), {}


# seconds: one seed of the full run, one thread per process (issue 31's profile: the weak
# base 44 s, the SFT section 77 s, DPO the longest after it); only their order matters
PLAN: tuple[Task, ...] = (
    Task("tokens", "tokens", (), _tokens, 0.5),
    Task("weak", "sft", (), _weak, 44.0),
    Task("eval_weak", "sft", ("weak",), _eval_weak, 8.0, "sft: weak-base evaluation"),
    Task("oracle_sft", "sft", ("weak",), _oracle, 25.0, "sft: oracle SFT"),
    Task("rft", "rft", ("weak",), _rft, 35.0),
    Task("public_rft", "public_rft", ("weak",), _public_rft, 20.0),
    Task("dpo", "dpo", ("weak",), _dpo, 90.0),
    Task("rl_weak", "recipes", ("weak",), _rl_weak, 25.0, "recipes: RL from the weak base"),
    Task("rl_cold", "recipes", ("oracle_sft",), _rl_cold, 17.0, "recipes: RL from the cold start"),
    Task("groups", "groups", ("oracle_sft",), _groups, 8.0),
    Task("template", "template", ("weak", "oracle_sft"), _template, 15.0),
)


@dataclass(frozen=True)
class Done:
    """What a task sends back: its result, its models as (shape, state-dict bytes), seconds."""

    result: Any
    models: dict[str, tuple[dict, bytes]]
    seconds: float


def packed(model: TinyAgent) -> tuple[dict, bytes]:
    """A model as its config and its state dict's bytes (torch.save)."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return asdict(model.config), buf.getvalue()


def unpacked(shape: dict, weights: bytes) -> TinyAgent:
    """The model `packed` gave, bit for bit."""
    model = TinyAgent(TinyAgentConfig(**shape))
    model.load_state_dict(torch.load(io.BytesIO(weights), weights_only=True))
    return model


def run_task(since: float, cfg: Ch15Config, task: Task, *inputs: Done) -> Done:
    """One task of the seed cfg.base.seed (in a worker process), its models from its needs'
    results; its lines from inside (`[seed 0] dpo: step 25: ...`) count from `since`, the
    seed's start on time.monotonic's clock."""
    got = {k: unpacked(*v) for done in inputs for k, v in done.models.items()}
    bar = Progress(f"[seed {cfg.base.seed}]", t0=since)
    t0 = time.perf_counter()
    with reporting(lambda text: bar.event(f"{task.section}: {text}")):
        result, models = task.fn(cfg, got)
    seconds = time.perf_counter() - t0
    return Done(result, {k: packed(m) for k, m in models.items()}, seconds)


def assemble(cfg: Ch15Config, done: dict[str, Done]) -> dict:
    """One seed's results from its tasks': the keys and order of ch15.run, each section's
    seconds the sum of its tasks' (compute, wherever they ran)."""
    out = {name: d.result for name, d in done.items()}
    seconds = {s: 0.0 for s in ch15.SECTIONS}
    for task in PLAN:
        seconds[task.section] += done[task.name].seconds
    sft = ch15.sft_result(out["eval_weak"], out["oracle_sft"])
    recipes = ch15.recipes_result(cfg, sft, out["rft"], out["rl_cold"], out["rl_weak"])
    R = {"seed": cfg.base.seed, "timings_s": {k: round(v, 1) for k, v in seconds.items()}}
    R |= {"eval_n": ch15.eval_n(cfg), "tokens": out["tokens"], "sft": sft}
    R |= {k: out[k] for k in ("rft", "public_rft", "dpo")}
    return R | {"recipes": recipes, "groups": out["groups"], "template": out["template"]}


def models_of(done: dict[str, Done]) -> Models:
    """The three models ch15.run keeps, under its names (for checkpoints)."""
    made = {k: v for d in done.values() for k, v in d.models.items()}
    names = {"weak_base": "weak", "sft_cold": "cold", "sft_final": "final"}
    return {name: unpacked(*made[k]) for name, k in names.items()}


def run_seeds(
    cfg: Ch15Config, seeds: list[int], where: Where
) -> Iterator[tuple[int, dict[str, Done]]]:
    """Every task of every seed on where.workers processes; yield (seed, its tasks' Done)
    as each seed's last task finishes. A progress line as each task starts, counted from its
    seed's first (`[seed 0] rft (at 45 s)`)."""
    plan = PLAN  # read now: a test may swap a task for one that fails
    cfgs = {s: replace(cfg, base=replace(cfg.base, seed=s)) for s in seeds}
    jobs = [
        Job(
            (s, t.name),
            run_task,
            (cfgs[s], t),
            tuple((s, k) for k in t.needs),
            t.seconds,
            group=s,
            label=f"[seed {s}] {t.name}",
        )
        for s in seeds
        for t in plan
    ]
    bars: dict[int, Progress] = {}
    by_name = {t.name: t for t in plan}

    def started(job: Job) -> tuple:
        seed, name = job.key
        bar = bars.setdefault(seed, Progress(f"[seed {seed}]"))
        bar.event(by_name[name].line or by_name[name].section)
        return (bar.t0,)

    done: dict[int, dict[str, Done]] = {s: {} for s in seeds}
    for (seed, name), result in run_graph(jobs, where, started):
        done[seed][name] = result
        if len(done[seed]) == len(plan):
            yield seed, done.pop(seed)

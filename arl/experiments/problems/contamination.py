"""Problem 23: a high score on the benchmark, a low one on fresh tasks.

The benchmark is BugFix's 10 held-out tasks; the fresh set is 20 new functions of the same five
families built afterwards from the gym's own words (arl.gym.fresh), never part of any training
set. Two 60-step RL arms from the weak base (the "base model": format without skill, held-out
and fresh pass alike near 0.15), on one seed, differing in the RL task set only:

- contaminated: the 20 training tasks and the 10 benchmark tasks (an RL task set built from the
  same repositories as the benchmark, as the book's scenario has it);
- clean: the same pool decontaminated against every evaluation set by issue (the function's
  name) and by patch (its listing up to names), the book's default (`decontaminate`). Since
  bases version 5 the held-out split is patch-disjoint from training, so the clean arm keeps
  all 20 training tasks (in version 4 four held-out functions were training ones renamed,
  and decontamination dropped those four).

RL runs at the trainer's defaults. Every 10 steps a standing panel plays the benchmark and the fresh
set on fixed episode seeds (the same for both arms and every step; the base's, step 0, on four
times the episodes): their pass rates and the public/fresh gap (held-out
minus fresh pass), and the memorization probe: the issue alone (`<bos> fix NAME`) with the
first call forced to `edit`, the listing never shown; the probe reads the share of the
policy's probability on the five fixing ops that goes to the task's gold op (chance: 1/5 for a
policy that knows nothing of the issue). Step 0 is the base model's panel. After training,
each arm also plays the held-out tasks under fresh-form names (`renamed_heldout`): what the
name form alone costs, apart from the fresh listings (the distribution-shift control).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from arl.eval.metrics import graded, run_policy
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
    arms_figure,
    first_last,
    rl_config,
    series,
    start,
)
from arl.gym.fresh import body, fresh_tasks, renamed_heldout
from arl.gym.grammar import FIX_OPS, prompt_words
from arl.gym.tasks import Task, tasks_for
from arl.model import TinyAgent
from arl.rollout import vocab_of
from arl.text import Vocab
from arl.train.pg import train_pg

CONTAMINATED, CLEAN = "contaminated: RL on train + benchmark", "clean: decontaminated"
HELD, FRESH, GAP = "p23/heldout_pass", "p23/fresh_pass", "p23/gap"
PROBE_HELD, PROBE_FRESH = "p23/probe_heldout", "p23/probe_fresh"
KEYS = (HELD, FRESH, GAP, PROBE_HELD, PROBE_FRESH)
PANEL_SEED = 23_000  # + the seed: the panel's episode seeds, the same for both arms and steps
LATE = 3  # the last evaluations (steps 40, 50, 60) whose mean is an arm's late value
BASE_SAMPLES = 4  # the base's panel plays this many times the episodes: every arm's baseline
CHANCE = 1 / len(FIX_OPS)  # the probe of a policy that knows nothing of the issue


# --- decontamination: the book's default, by issue and by patch ------------------------------


def overlaps(task: Task, others: Sequence[Task]) -> bool:
    """Whether a task shares its issue (the function's name) or its patch (the listing up to
    names: the same function renamed) with any of `others`."""
    return any(task.name == o.name or body(task) == body(o) for o in others)


def decontaminate(pool: Sequence[Task], evaluations: Sequence[Task]) -> tuple[Task, ...]:
    """The pool without every task that overlaps an evaluation task."""
    return tuple(t for t in pool if not overlaps(t, evaluations))


def arm_tasks() -> dict[str, tuple[Task, ...]]:
    """Each arm's RL task set: the contaminated pool (train + benchmark), and the same pool
    decontaminated against the benchmark and the fresh set."""
    pool = tasks_for("train") + tasks_for("heldout")
    return {
        CONTAMINATED: pool,
        CLEAN: decontaminate(pool, tasks_for("heldout") + fresh_tasks()),
    }


# --- the memorization probe: the gold op from the issue alone ---------------------------------


def probe_words(task: Task) -> list[str]:
    """The probe's context: the issue, then `edit` as the first call's first word (no read:
    the listing is never shown)."""
    return [*prompt_words(task.name), "edit"]


def gold_share(probs_V: torch.Tensor, task: Task, vocab: Vocab) -> float:
    """The share of the probability on the fixing ops (V,) that is on the task's gold op."""
    ops = torch.tensor([vocab.id(op) for op in FIX_OPS])
    return float(probs_V[vocab.id(task.family)] / probs_V[ops].sum())


@torch.no_grad()
def probe(model: TinyAgent, tasks: Sequence[Task]) -> list[float]:
    """Each task's gold share after its issue alone (one forward pass per task)."""
    vocab, was = vocab_of(), model.training
    model.eval()
    out = []
    for task in tasks:
        ids_1T = torch.tensor([vocab.encode(probe_words(task))])
        logits_1TV, _ = model(ids_1T)
        out.append(gold_share(torch.softmax(logits_1TV[0, -1], -1), task, vocab))
    model.train(was)
    return out


# --- the standing panel -------------------------------------------------------------------------


def pass_rate(model: TinyAgent, tasks: Sequence[Task], samples: int, seed: int) -> float:
    """Hidden-test pass rate over `samples` episodes per task on fixed episode seeds."""
    trajs = graded(run_policy(model, tasks, samples, seed=seed))
    return float(np.mean([t.passed for t in trajs])) if trajs else 0.0


def panel(model: TinyAgent, seed: int, samples: int) -> dict[str, float]:
    """Benchmark and fresh pass (`samples` episodes per held-out task, half as many per fresh
    task: the same count per set), their gap, and the probe on each set."""
    held = pass_rate(model, tasks_for("heldout"), samples, seed)
    fresh = pass_rate(model, fresh_tasks(), max(1, samples // 2), seed + 1)
    return {
        HELD: held,
        FRESH: fresh,
        GAP: held - fresh,
        PROBE_HELD: float(np.mean(probe(model, tasks_for("heldout")))),
        PROBE_FRESH: float(np.mean(probe(model, fresh_tasks()))),
    }


def panel_hook(base: dict, seed: int, samples: int) -> Callable[[int, TinyAgent], dict]:
    """train_pg's hook: the panel at each call (step 0: the base's, measured once on more
    episodes)."""
    return lambda step, model: base if step == 0 else panel(model, seed, samples)


def late(history: list[dict], key: str) -> float:
    """An arm's late value of a panel number: the mean of its last LATE evaluations."""
    return float(np.mean(series(history, key)[-LATE:]))


def problem_23(ctx: Ctx):
    """From the weak base: RL on a task set with the benchmark in it, and decontaminated."""
    samples, seed = ctx.pick(16, 2), PANEL_SEED + ctx.seed
    base = panel(start(ctx, "weak"), seed, BASE_SAMPLES * samples)
    runs, renamed = {}, {}
    for arm, tasks in arm_tasks().items():
        model = start(ctx, "weak")
        # the trainer's defaults (lr 3e-4), as Problems 24, 25, 27 from the weak base; lr 1e-4
        # moved neither arm in 60 steps on seed 0 (docs: Problem 23's first runs)
        config = rl_config(ctx, steps=ctx.pick(60, 4))
        hook = panel_hook(base, seed, samples)
        runs[arm] = train_pg(model, config, tasks, hook=hook, hook_every=ctx.pick(10, 2))
        renamed[arm] = pass_rate(model, renamed_heldout(), samples, seed)
    res = effects(first_last(runs, KEYS), runs, base, renamed)
    return res, conclusion(res)


def effects(res: dict, runs: dict[str, list[dict]], base: dict, renamed: dict) -> dict:
    """The per-seed effects of the claims, from each arm's late panel and the base's."""
    lt = {arm: {k: late(h, k) for k in KEYS} for arm, h in runs.items()}
    c, k = lt[CONTAMINATED], lt[CLEAN]
    res |= {
        "base": base,
        "late": lt,
        "renamed": renamed,
        "effect": c[GAP] - k[GAP],
        "widening": c[GAP] - base[GAP],
        "clean_widening": k[GAP] - base[GAP],
        "benchmark": c[HELD] - k[HELD],
        "probe": c[PROBE_HELD] - k[PROBE_HELD],
        "probe_own": c[PROBE_HELD] - c[PROBE_FRESH],
        "name_cost": {arm: lt[arm][HELD] - renamed[arm] for arm in runs},
    }
    return res


def conclusion(res: dict) -> str:
    """One line: each arm's late panel beside the base's, the probe, and the name control."""
    b, lt = res["base"], res["late"]

    def arm(name: str) -> str:
        a = lt[name]
        return (
            f"{name.split(':')[0]} {a[HELD]:.2f} / {a[FRESH]:.2f} (gap {a[GAP]:+.2f}; "
            f"under fresh-form names {res['renamed'][name]:.2f})"
        )

    c = lt[CONTAMINATED]
    return (
        f"held-out / fresh pass, late (last {LATE} evaluations): {arm(CONTAMINATED)}, "
        f"{arm(CLEAN)}; the base {b[HELD]:.2f} / {b[FRESH]:.2f} (gap {b[GAP]:+.2f}). Probe, "
        f"gold-op share from the issue alone (chance {CHANCE:.2f}): contaminated "
        f"{c[PROBE_HELD]:.2f} on held-out issues, {c[PROBE_FRESH]:.2f} on fresh ones; clean "
        f"{lt[CLEAN][PROBE_HELD]:.2f} on held-out; the base {b[PROBE_HELD]:.2f}."
    )


PROBLEM_23 = Problem(
    problem_23,
    Claim(
        text="a public/fresh gap that grows during post-training beyond a clean pipeline's is a "
        "property of the data: the benchmark's tasks were in it",
        effect="public/fresh gap (held-out minus fresh pass), late, contaminated minus clean",
        source="book",
        passage="if the base model shows a smaller gap, the gap grew during your post-training, "
        "which points at your data, including RL task sets built from the same repositories as "
        "the benchmark.",
        cause="the clean pipeline's gap grows as much where it learns: on seeds 1-2 both arms "
        "learn (held-out 0.50 and 0.49 clean, 0.54 and 0.42 contaminated) and both gaps grow "
        "(clean +0.12 and +0.23 over the base's), the fresh tasks being harder for a policy "
        "that has learned; the paired effect is positive only on seeds 0 and 3 (+0.12, +0.30), "
        "where the clean arm learns nothing (0.13-0.17, one blind guess)",
    ),
    arms_figure(
        [
            (HELD, "benchmark (held-out) pass"),
            (FRESH, "fresh-task pass"),
            (GAP, "gap: held-out - fresh pass"),
            (PROBE_HELD, "probe on held-out issues (chance 0.2)"),
        ],
        "Problem 23: RL with the benchmark in the task set, and decontaminated (step 0: the base)",
    ),
    more=(
        (
            "widening",
            Claim(
                text="a gap that widens over RL training is a property of your pipeline",
                effect="contaminated gap, late minus the base model's",
                source="book",
                passage="Measure the gap between the public and fresh sets across checkpoints; a "
                "gap that widens over RL training is a property of your pipeline.",
            ),
        ),
        (
            "clean_widening",
            Claim(
                text="the base model's gap is much smaller; with decontaminated data the gap "
                "stays near it",
                effect="clean gap, late minus the base model's (< 0.1)",
                threshold=0.1,
                below=True,
                source="book",
                passage="while the base model's ratio between the two sets is much smaller. ... "
                "The book's default is to decontaminate training tasks against every evaluation "
                "set",
                cause="distribution shift, not data: where the clean arm learns (seeds 1-2) "
                "fresh pass rises less than held-out (its gap +0.12 and +0.23 over the base's); "
                "held-out under fresh-form names puts part of it on the name form on seed 2 "
                "(0.33 against 0.49) and none on seed 1 (0.52 against 0.50): the fresh listings",
            ),
        ),
        (
            "benchmark",
            Claim(
                text="contamination gives the high benchmark score",
                effect="held-out pass, late, contaminated minus clean",
                source="book",
                passage="Contamination: the benchmark's issues, patches, or tests appeared in "
                "pretraining, SFT, or RL data, so the model recalls rather than repairs.",
                cause="where the clean arm learns, its skill reaches the benchmark without the "
                "benchmark's tasks (seeds 1-2: 0.50 against 0.54, 0.49 against 0.42): held-out "
                "functions are close variants of training ones, so contamination adds only what "
                "the clean arm fails to learn (seeds 0 and 3: +0.23 and +0.24)",
            ),
        ),
        (
            "probe",
            Claim(
                text="the memorization probe: from the issue text alone, a contaminated model "
                "reproduces the gold patch it was never shown the source of",
                effect="probe's gold-op share on held-out issues, late, contaminated minus clean",
                source="book",
                passage="To test memorization directly, probe the model with the issue text and "
                "see whether it reproduces the gold patch or file paths it has not been shown.",
                cause="recall from the issue alone shows on seeds 1 and 3 (0.31 and 0.41 of the "
                "op probability on the gold op, against 0.19 and 0.14 clean), not on seeds 0 and "
                "2 (+0.00, +0.03): there the contaminated arm's held-out gain is keyed on the "
                "listing (seed 0 keeps it under fresh-form names, 0.33 against 0.37), which a "
                "probe without the source cannot see",
            ),
        ),
        (
            "probe_own",
            Claim(
                text="and it does so on the benchmark's issues, not on fresh ones",
                effect="contaminated probe's gold-op share, held-out issues minus fresh ones",
                source="book",
                passage="the benchmark's issues, patches, or tests appeared in pretraining, SFT, "
                "or RL data, so the model recalls rather than repairs.",
                premise="probe",
            ),
        ),
    ),
    tuned=(
        Tuning(
            "lr",
            3e-4,
            (0,),
            "the trainer default, kept after lr 1e-4 moved neither arm in 60 steps on seed 0",
        ),
    ),
)

"""Problem 23: a high score on the benchmark, a low one on fresh tasks.

The benchmark is BugFix's 10 held-out tasks; the fresh set is 20 new functions of the same five
families built afterwards from the gym's own words (arl.bugfix.fresh), never part of any
training set. Since bases version 5 the benchmark is patch-disjoint from training: no held-out
listing is a training listing renamed.

Issue 43's design (`problem_23`, PROBLEM_23): two 60-step RL arms on one seed from one start,
oracle SFT's checkpoint at step SFT_STEP (train pass about 0.3-0.5: a start that learns under RL
on every tuning seed, where RL from the weak base learned on 2 of 4 seeds), at the trainer's
defaults, differing in the RL task set only:

- contaminated: the 20 training tasks and the 10 benchmark tasks (30; an RL task set built from
  the same repositories as the benchmark, as the book's scenario has it);
- clean: exactly the 20 training tasks, none of which shares an issue (name) or a patch (listing
  up to names) with the benchmark or the fresh set (`arm_tasks` checks it).

Every EVAL_EVERY steps a standing panel plays the benchmark and the fresh set on fixed episode
seeds (the same for both arms and every step; the start's, step 0, on BASE_SAMPLES times the
episodes): their pass rates and the public/fresh gap (held-out minus fresh pass), and two
probes that read the share of the policy's probability on the five fixing ops that goes to the
task's gold op, with the first call of the fix forced to `edit`:

- the name probe: the issue alone (`<bos> fix NAME edit`), the listing never shown (chance 1/5
  for a policy that knows nothing of the issue);
- the listing probe: the benchmark's listing, read, under a fresh-form name (`renamed_heldout`:
  the issue says nothing), as an oracle episode sees it up to its `edit`; and the same on the
  fresh tasks. A policy keyed on the benchmark's source, not its name, shows here.

After training each arm also plays the held-out tasks under fresh-form names (pass): what the
name form alone costs, apart from the fresh listings. The clean arm's held-out gain over the
start (`learns`) is the design's premise: the claims that compare the arms are judged only when
it is shown.

The earlier design (`earlier_design`, PROBLEM_23_EARLIER; measured on seeds 0-3 on bases version
4, docs/problems.md): the same two task sets from the weak base (the clean one the pool
decontaminated by issue and by patch, `decontaminate`: 16 tasks on version 4, when four
held-out functions were training ones renamed), with the name probe only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch

from arl.eval.metrics import graded, run_policy
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
    arms_figure,
    base_config,
    first_last,
    rl_config,
    series,
    start,
)
from arl.gym.fresh import body, fresh_tasks, renamed_heldout
from arl.gym.grammar import FIX_OPS, prompt_words
from arl.gym.tasks import Task, tasks_for
from arl.model import TinyAgent
from arl.rollout import episode_seed, scripted_rollout, vocab_of
from arl.text import Vocab
from arl.train.bases import cold_start
from arl.train.pg import train_pg

CONTAMINATED, CLEAN = "contaminated: RL on train + benchmark", "clean: the 20 training tasks"
EARLIER_CLEAN = "clean: decontaminated"  # the earlier design's clean arm
HELD, FRESH, GAP = "p23/heldout_pass", "p23/fresh_pass", "p23/gap"
PROBE_HELD, PROBE_FRESH = "p23/probe_heldout", "p23/probe_fresh"
LIST_HELD, LIST_FRESH = "p23/listing_heldout", "p23/listing_fresh"
EARLIER_KEYS = (HELD, FRESH, GAP, PROBE_HELD, PROBE_FRESH)
KEYS = (*EARLIER_KEYS, LIST_HELD, LIST_FRESH)
PANEL_SEED = 23_000  # + the seed: the panel's episode seeds, the same for both arms and steps
LATE = 3  # the last evaluations (steps 40, 50, 60) whose mean is an arm's late value
BASE_SAMPLES = 4  # the start's panel plays this many times the episodes: every arm's baseline
CHANCE = 1 / len(FIX_OPS)  # the probe of a policy that knows nothing of the issue
SFT_STEP = 20  # the start: oracle SFT's checkpoint at this step (Tuning: seeds 100-103)
STEPS, EVAL_EVERY, SAMPLES = 60, 10, 16  # RL steps, steps between panels, episodes per task
LISTING_RENDERINGS = 4  # listing-probe episodes per benchmark task (half as many per fresh one)
LEARNS = 0.1  # the premise: the clean arm's held-out pass rises by more than this
JUDGED_23 = tuple(range(10, 26))  # 16 judged seeds (issue 43), none a tuning seed


# --- the task sets: contaminated, and clean by issue and by patch -------------------------------


def overlaps(task: Task, others: Sequence[Task]) -> bool:
    """Whether a task shares its issue (the function's name) or its patch (the listing up to
    names: the same function renamed) with any of `others`."""
    return any(task.name == o.name or body(task) == body(o) for o in others)


def decontaminate(pool: Sequence[Task], evaluations: Sequence[Task]) -> tuple[Task, ...]:
    """The pool without every task that overlaps an evaluation task."""
    return tuple(t for t in pool if not overlaps(t, evaluations))


def arm_tasks() -> dict[str, tuple[Task, ...]]:
    """Each arm's RL task set: the 20 training tasks and the 10 benchmark tasks, and exactly the
    20 training tasks; refused if a training task overlaps the benchmark or the fresh set."""
    train, held = tasks_for("train"), tasks_for("heldout")
    shared = [t.name for t in train if overlaps(t, held + fresh_tasks())]
    if shared:  # the clean arm would not be clean (bases version 4's renamed functions)
        raise RuntimeError(f"training tasks overlap an evaluation set: {shared}")
    return {CONTAMINATED: train + held, CLEAN: train}


def earlier_arm_tasks() -> dict[str, tuple[Task, ...]]:
    """The earlier design's task sets: the contaminated pool (train + benchmark), and the same
    pool decontaminated against the benchmark and the fresh set."""
    pool = tasks_for("train") + tasks_for("heldout")
    return {
        CONTAMINATED: pool,
        EARLIER_CLEAN: decontaminate(pool, tasks_for("heldout") + fresh_tasks()),
    }


# --- the probes: the gold op from the issue alone, and from the listing under a new name -------


def probe_words(task: Task) -> list[str]:
    """The name probe's context: the issue, then `edit` as the first call's first word (no
    read: the listing is never shown)."""
    return [*prompt_words(task.name), "edit"]


def gold_share(probs_V: torch.Tensor, task: Task, vocab: Vocab) -> float:
    """The share of the probability on the fixing ops (V,) that is on the task's gold op."""
    ops = torch.tensor([vocab.id(op) for op in FIX_OPS])
    return float(probs_V[vocab.id(task.family)] / probs_V[ops].sum())


@torch.no_grad()
def shares(model: TinyAgent, contexts: Sequence[tuple[Task, list[int]]]) -> list[float]:
    """Each context's gold share at its last position (one forward pass per context)."""
    vocab, was = vocab_of(), model.training
    model.eval()
    out = []
    for task, ids in contexts:
        logits_1TV, _ = model(torch.tensor([ids]))
        out.append(gold_share(torch.softmax(logits_1TV[0, -1], -1), task, vocab))
    model.train(was)
    return out


def probe(model: TinyAgent, tasks: Sequence[Task]) -> list[float]:
    """Each task's gold share after its issue alone."""
    vocab = vocab_of()
    return shares(model, [(t, vocab.encode(probe_words(t))) for t in tasks])


def listing_context(task: Task, seed: int) -> list[int]:
    """The listing probe's context: an oracle episode of the task (episode seed `seed`: its
    accumulator's name) up to and including the `edit` that opens its fix: the issue, `read`,
    the listing, `edit`."""
    traj = scripted_rollout("oracle", task, seed=seed)
    at = traj.calls[1][0]  # the oracle's second call: edit OP ...
    if traj.ids_T[at] != vocab_of().id("edit"):
        raise RuntimeError(f"{task.name}: the oracle's second call is not an edit")
    return list(traj.ids_T[: at + 1])


def listing_contexts(tasks: Sequence[Task], renderings: int, seed: int) -> list:
    """`renderings` listing contexts per task on fixed episode seeds (task-major)."""
    jobs = [t for t in tasks for _ in range(renderings)]
    return [(t, listing_context(t, episode_seed(seed, k))) for k, t in enumerate(jobs)]


# --- the standing panel -------------------------------------------------------------------------


def pass_rate(model: TinyAgent, tasks: Sequence[Task], samples: int, seed: int) -> float:
    """Hidden-test pass rate over `samples` episodes per task on fixed episode seeds."""
    trajs = graded(run_policy(model, tasks, samples, seed=seed))
    return float(np.mean([t.passed for t in trajs])) if trajs else 0.0


def panel(model: TinyAgent, seed: int, samples: int, listings: dict | None = None) -> dict:
    """Benchmark and fresh pass (`samples` episodes per held-out task, half as many per fresh
    task: the same count per set), their gap, the name probe on each set, and with `listings`
    ({LIST_HELD: contexts, LIST_FRESH: contexts}) the listing probe on each."""
    held = pass_rate(model, tasks_for("heldout"), samples, seed)
    fresh = pass_rate(model, fresh_tasks(), max(1, samples // 2), seed + 1)
    out = {
        HELD: held,
        FRESH: fresh,
        GAP: held - fresh,
        PROBE_HELD: float(np.mean(probe(model, tasks_for("heldout")))),
        PROBE_FRESH: float(np.mean(probe(model, fresh_tasks()))),
    }
    for key, contexts in (listings or {}).items():
        out[key] = float(np.mean(shares(model, contexts)))
    return out


def panel_hook(
    base: dict, seed: int, samples: int, listings: dict | None = None
) -> Callable[[int, TinyAgent], dict]:
    """train_pg's hook: the panel at each call (step 0: the start's, measured once on more
    episodes)."""
    return lambda step, model: base if step == 0 else panel(model, seed, samples, listings)


def late(history: list[dict], key: str) -> float:
    """An arm's late value of a panel number: the mean of its last LATE evaluations."""
    return float(np.mean(series(history, key)[-LATE:]))


# --- issue 43's design --------------------------------------------------------------------------


def early_start(ctx: Ctx) -> TinyAgent:
    """Oracle SFT's checkpoint at SFT_STEP (quick: at its first check), cached as a cold start
    chosen by step: Chapter 15's weak base and SFT run, stopped early."""
    base = base_config(ctx)
    step = ctx.pick(SFT_STEP, base.cold_eval_every)
    return cold_start(replace(base, sft_steps=step, cold_start_step=step))


def problem_23(ctx: Ctx):
    """From an early SFT checkpoint: RL on a task set with the benchmark in it, and on the 20
    training tasks alone."""
    samples, seed = ctx.pick(SAMPLES, 2), PANEL_SEED + ctx.seed
    n = ctx.pick(LISTING_RENDERINGS, 1)
    listings = {  # the same contexts for both arms and every step (the model never changes them)
        LIST_HELD: listing_contexts(renamed_heldout(), n, seed + 2),
        LIST_FRESH: listing_contexts(fresh_tasks(), max(1, n // 2), seed + 3),
    }
    base = panel(early_start(ctx), seed, BASE_SAMPLES * samples, listings)
    runs, renamed = {}, {}
    for arm, tasks in arm_tasks().items():
        model = early_start(ctx)
        config = rl_config(ctx, steps=ctx.pick(STEPS, 4))  # the trainer's defaults (lr 3e-4)
        hook = panel_hook(base, seed, samples, listings)
        runs[arm] = train_pg(model, config, tasks, hook=hook, hook_every=ctx.pick(EVAL_EVERY, 2))
        renamed[arm] = pass_rate(model, renamed_heldout(), samples, seed)
    res = effects(first_last(runs, KEYS), runs, base, renamed)
    return res, conclusion(res)


def effects(res: dict, runs: dict[str, list[dict]], base: dict, renamed: dict) -> dict:
    """The per-seed effects of the claims, from each arm's late panel and the start's."""
    lt = {arm: {k: late(h, k) for k in KEYS} for arm, h in runs.items()}
    c, k = lt[CONTAMINATED], lt[CLEAN]
    res |= {
        "base": base,
        "late": lt,
        "renamed": renamed,
        "effect": c[GAP] - base[GAP],
        "learns": k[HELD] - base[HELD],
        "gap": c[GAP] - k[GAP],
        "clean_widening": k[GAP] - base[GAP],
        "benchmark": c[HELD] - k[HELD],
        "probe": c[PROBE_HELD] - k[PROBE_HELD],
        "probe_own": c[PROBE_HELD] - c[PROBE_FRESH],
        "listing": c[LIST_HELD] - k[LIST_HELD],
        "listing_own": (c[LIST_HELD] - k[LIST_HELD]) - (c[LIST_FRESH] - k[LIST_FRESH]),
        "listing_pass": renamed[CONTAMINATED] - renamed[CLEAN],
        "name_cost": {arm: lt[arm][HELD] - renamed[arm] for arm in runs},
    }
    return res


def conclusion(res: dict) -> str:
    """One line: each arm's late panel beside the start's, and the probes."""
    b, lt = res["base"], res["late"]

    def arm(name: str) -> str:
        a = lt[name]
        return (
            f"{name.split(':')[0]} {a[HELD]:.2f} / {a[FRESH]:.2f} (gap {a[GAP]:+.2f}; "
            f"under fresh-form names {res['renamed'][name]:.2f})"
        )

    c, k = lt[CONTAMINATED], lt[CLEAN]
    return (
        f"held-out / fresh pass, late (last {LATE} evaluations): {arm(CONTAMINATED)}, "
        f"{arm(CLEAN)}; the start {b[HELD]:.2f} / {b[FRESH]:.2f} (gap {b[GAP]:+.2f}). Gold-op "
        f"share, name probe (chance {CHANCE:.2f}): contaminated {c[PROBE_HELD]:.2f} on held-out "
        f"issues, {c[PROBE_FRESH]:.2f} on fresh ones, clean {k[PROBE_HELD]:.2f}; listing probe "
        f"(benchmark / fresh listings under fresh-form names): contaminated "
        f"{c[LIST_HELD]:.2f} / {c[LIST_FRESH]:.2f}, clean {k[LIST_HELD]:.2f} / "
        f"{k[LIST_FRESH]:.2f}, the start {b[LIST_HELD]:.2f} / {b[LIST_FRESH]:.2f}."
    )


# --- the earlier design (weak base, decontaminated pool; seeds 0-3 on bases version 4) -------


def earlier_design(ctx: Ctx):
    """The earlier design (measured on seeds 0-3 before issue 43; kept to rerun): from the weak
    base, RL on a task set with the benchmark in it, and decontaminated."""
    samples, seed = ctx.pick(16, 2), PANEL_SEED + ctx.seed
    base = panel(start(ctx, "weak"), seed, BASE_SAMPLES * samples)
    runs, renamed = {}, {}
    for arm, tasks in earlier_arm_tasks().items():
        model = start(ctx, "weak")
        # the trainer's defaults (lr 3e-4), as Problems 24, 25, 27 from the weak base; lr 1e-4
        # moved neither arm in 60 steps on seed 0 (docs: Problem 23's first runs)
        config = rl_config(ctx, steps=ctx.pick(60, 4))
        hook = panel_hook(base, seed, samples)
        runs[arm] = train_pg(model, config, tasks, hook=hook, hook_every=ctx.pick(10, 2))
        renamed[arm] = pass_rate(model, renamed_heldout(), samples, seed)
    res = earlier_effects(first_last(runs, EARLIER_KEYS), runs, base, renamed)
    return res, earlier_conclusion(res)


def earlier_effects(res: dict, runs: dict[str, list[dict]], base: dict, renamed: dict) -> dict:
    """The earlier design's per-seed effects, from each arm's late panel and the base's."""
    lt = {arm: {k: late(h, k) for k in EARLIER_KEYS} for arm, h in runs.items()}
    c, k = lt[CONTAMINATED], lt[EARLIER_CLEAN]
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


def earlier_conclusion(res: dict) -> str:
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
        f"{arm(EARLIER_CLEAN)}; the base {b[HELD]:.2f} / {b[FRESH]:.2f} (gap {b[GAP]:+.2f}). "
        f"Probe, gold-op share from the issue alone (chance {CHANCE:.2f}): contaminated "
        f"{c[PROBE_HELD]:.2f} on held-out issues, {c[PROBE_FRESH]:.2f} on fresh ones; clean "
        f"{lt[EARLIER_CLEAN][PROBE_HELD]:.2f} on held-out; the base {b[PROBE_HELD]:.2f}."
    )


# --- the claims ---------------------------------------------------------------------------------

WIDENING_PASSAGE = (
    "Measure the gap between the public and fresh sets across checkpoints; a gap that widens "
    "over RL training is a property of your pipeline."
)
DATA_PASSAGE = (
    "if the base model shows a smaller gap, the gap grew during your post-training, which "
    "points at your data, including RL task sets built from the same repositories as the "
    "benchmark."
)
CLEAN_PASSAGE = (
    "while the base model's ratio between the two sets is much smaller. ... The book's default "
    "is to decontaminate training tasks against every evaluation set"
)
RECALL_PASSAGE = (
    "Contamination: the benchmark's issues, patches, or tests appeared in pretraining, SFT, or "
    "RL data, so the model recalls rather than repairs."
)
PROBE_PASSAGE = (
    "To test memorization directly, probe the model with the issue text and see whether it "
    "reproduces the gold patch or file paths it has not been shown."
)
OWN_PASSAGE = (
    "the benchmark's issues, patches, or tests appeared in pretraining, SFT, or RL data, so the "
    "model recalls rather than repairs."
)

PROBLEM_23 = Problem(
    problem_23,
    Claim(
        text="a gap that widens over RL training is a property of your pipeline",
        effect="public/fresh gap (held-out minus fresh pass), contaminated arm, late minus the "
        "start's",
        source="book",
        passage=WIDENING_PASSAGE,
    ),
    arms_figure(
        [
            (HELD, "benchmark (held-out) pass"),
            (FRESH, "fresh-task pass"),
            (GAP, "gap: held-out - fresh pass"),
            (PROBE_HELD, "name probe, held-out issues (chance 0.2)"),
            (LIST_HELD, "listing probe, benchmark listings renamed"),
        ],
        f"Problem 23: RL from SFT step {SFT_STEP} with the benchmark in the task set, and on "
        "the 20 training tasks (step 0: the start)",
    ),
    more=(
        (
            "learns",
            Claim(
                text=f"the design's premise: from this start the clean pipeline learns (its "
                f"held-out pass rises by more than {LEARNS})",
                effect="held-out pass, clean arm, late minus the start's",
                threshold=LEARNS,
                source="lab",
                passage="the comparison the book asks for (a clean pipeline's gap beside the "
                "contaminated one's) means something only when the clean pipeline learns: RL "
                "from the weak base learned on 2 of 4 seeds, and where the clean arm learned "
                "nothing every contaminated-minus-clean difference was learning against none",
            ),
        ),
        (
            "gap",
            Claim(
                text="a public/fresh gap that grows during post-training beyond a clean "
                "pipeline's is a property of the data: the benchmark's tasks were in it",
                effect="public/fresh gap, late, contaminated minus clean",
                source="book",
                passage=DATA_PASSAGE,
                premise="learns",
            ),
        ),
        (
            "clean_widening",
            Claim(
                text="with decontaminated data the gap stays near the start's",
                effect="clean gap, late minus the start's (< 0.1)",
                threshold=0.1,
                below=True,
                source="book",
                passage=CLEAN_PASSAGE,
                premise="learns",
            ),
        ),
        (
            "benchmark",
            Claim(
                text="contamination gives the high benchmark score",
                effect="held-out pass, late, contaminated minus clean",
                source="book",
                passage=RECALL_PASSAGE,
                premise="learns",
            ),
        ),
        (
            "probe",
            Claim(
                text="the memorization probe: from the issue text alone, a contaminated model "
                "reproduces the gold patch it was never shown the source of",
                effect="name probe's gold-op share on held-out issues, late, contaminated minus "
                "clean",
                source="book",
                passage=PROBE_PASSAGE,
                premise="learns",
            ),
        ),
        (
            "probe_own",
            Claim(
                text="and it does so on the benchmark's issues, not on fresh ones",
                effect="contaminated name probe's gold-op share, held-out issues minus fresh "
                "ones, late",
                source="book",
                passage=OWN_PASSAGE,
                premise="probe",
            ),
        ),
        (
            "listing",
            Claim(
                text="shown the benchmark's listing under a new name, the contaminated model "
                "gives the gold fix more often than the clean one: recall keyed on the source",
                effect="listing probe's gold-op share on the benchmark's listings under "
                "fresh-form names, late, contaminated minus clean",
                source="lab",
                passage="the earlier design's seed 0 kept its benchmark gain under fresh-form "
                "names while the name probe saw nothing: memory keyed on the listing, which a "
                "probe without the source cannot see",
                premise="learns",
            ),
        ),
        (
            "listing_own",
            Claim(
                text="and that edge is the benchmark's: it is larger on the benchmark's "
                "listings than on fresh ones",
                effect="listing probe, late: (contaminated minus clean) on the benchmark's "
                "listings minus (contaminated minus clean) on the fresh listings",
                source="lab",
                passage="an edge on every listing would be skill from 30 training tasks against "
                "20, not recall of the benchmark",
                premise="listing",
            ),
        ),
    ),
    settings={
        "start": f"the seed's oracle SFT checkpoint at step {SFT_STEP} (cold_start_step)",
        "sft_step": SFT_STEP,
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "samples": f"{SAMPLES} episodes per held-out task, {SAMPLES // 2} per fresh task; the "
        f"start's panel {BASE_SAMPLES} times as many",
        "late": f"mean of the last {LATE} panels",
        "panel_seed": f"{PANEL_SEED} + seed",
        "listing_renderings": f"{LISTING_RENDERINGS} per benchmark task, "
        f"{LISTING_RENDERINGS // 2} per fresh task (oracle episodes up to the fix's edit)",
        "arms": {CONTAMINATED: "train (20) + heldout (10)", CLEAN: "train (20)"},
        "learns": LEARNS,
        "trainer": "PGConfig defaults (lr 3e-4, 8 tasks x 8 episodes a step), not tuned",
    },
    tuned=(
        Tuning(
            "sft_step",
            SFT_STEP,
            (100, 101, 102, 103),
            "rule: the oracle-SFT step in 10-20 whose train pass (8 episodes per training task) "
            "is in 0.3-0.5 on the tuning seeds, else step 20; chosen by that rule in an earlier "
            "run on seeds 100-103 whose machine and records were lost (no judged seed was run), "
            "and remeasured before the lock on the same seeds (two-core machine): step 10 0.14, "
            "0.18, 0.18, 0.28 (mean 0.19), step 20 0.53, 0.40, 0.52, 0.59 (mean 0.51); neither "
            "step's mean lies in 0.3-0.5, so the rule's fallback, step 20, holds; the whole design "
            "then ran once on seeds 100-103 (docs) and nothing was changed after it",
        ),
    ),
    seeds=JUDGED_23,
    modules=("arl.bugfix.fresh",),  # the fresh split and the renamed benchmark, written for it
)


PROBLEM_23_EARLIER = Problem(  # the earlier design (seeds 0-3, bases version 4): not run by default
    earlier_design,
    Claim(
        text="a public/fresh gap that grows during post-training beyond a clean pipeline's is a "
        "property of the data: the benchmark's tasks were in it",
        effect="public/fresh gap (held-out minus fresh pass), late, contaminated minus clean",
        source="book",
        passage=DATA_PASSAGE,
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
                passage=WIDENING_PASSAGE,
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
                passage=CLEAN_PASSAGE,
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
                passage=RECALL_PASSAGE,
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
                passage=PROBE_PASSAGE,
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
                passage=OWN_PASSAGE,
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

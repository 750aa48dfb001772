"""Problem 25: training reward climbs, held-out pass@1 is flat. Which gap is it?

Two RL arms from the weak base on one seed, both trained on the 12 training tasks of three
families (init, range, compare) and differing in the reward only:

- objective mismatch: the public tests' reward (the `hardcode_tests` edit earns it without a
  fix; Problem 7), so the training reward is not the evaluation metric;
- distribution mismatch: the hidden tests' reward (the metric itself), evaluated on the two
  families it never trains on (minmax, div).

Every 10 steps a standing panel plays each of three fixed task sets with fixed seeds and
scores the same episodes twice: the reward under the run's reward mode, and the metric (all
hidden tests pass). The sets: (a) the run's training tasks, (b) the held-out tasks of the
training families (the training distribution), (c) the evaluation's tasks (all 12 tasks of
minmax and div). Both arms show the scenario's symptom (reward on (a) climbs, the metric on
(c) does not); the panel tells them apart: the reward-metric gap opens on (b) in the first,
the (b)-(c) metric gap in the second.

The family split is chosen once, without a sweep: the first three families of FAMILIES train,
the last two evaluate. At the weak base both groups pass alike (about 0.16 and 0.17 on their
training functions), neither at the floor nor the ceiling, and each family's fixing op is its
own, so no op learned on one group fixes the other. The weak base is the start because the
cold start already passes 0.69-0.97 on every family: no metric would have room to climb.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from arl.eval.metrics import graded, run_policy
from arl.eval.stats import seed_se
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    first_last,
    new_figure,
    rl_config,
    save_figure,
    start,
)
from arl.gym.tasks import Task, all_tasks
from arl.model import TinyAgent
from arl.train.pg import train_pg
from arl.types import Trajectory

TRAIN_FAMILIES = ("init", "range", "compare")  # the run's training distribution
EVAL_FAMILIES = ("minmax", "div")  # the evaluation's tasks: never trained on
OBJECTIVE, DISTRIBUTION = "objective mismatch (public reward)", "distribution mismatch"
ARMS = {
    OBJECTIVE: {"reward": "public", "zero_exploits": False},  # Problem 7's public arm
    DISTRIBUTION: {"reward": "hidden", "zero_exploits": True},  # the trainer's default
}
ROWS = {OBJECTIVE: "public reward", DISTRIBUTION: "hidden reward"}  # the figure's row names
SETS = ("train", "heldout", "eval")  # (a), (b), (c)
SET_LABELS = {
    "train": "(a) training tasks",
    "heldout": "(b) held-out, training families",
    "eval": "(c) evaluation's tasks (other families)",
}
SAMPLES = {"train": 8, "heldout": 16, "eval": 8}  # per task: 96 episodes per set
PANEL_SEED = 20_011  # added to the run's seed: the same episodes' seeds at every evaluation


def key(task_set: str, quantity: str) -> str:
    """The history key of one panel number, e.g. panel/heldout_reward."""
    return f"panel/{task_set}_{quantity}"


KEYS = tuple(key(s, q) for s in SETS for q in ("reward", "metric"))


def panel_tasks() -> dict[str, tuple[Task, ...]]:
    """The three task sets: (a) training split of the training families, (b) their held-out
    split, (c) every task of the evaluation's families."""
    tasks = all_tasks()
    return {
        "train": tuple(t for t in tasks if t.family in TRAIN_FAMILIES and t.split == "train"),
        "heldout": tuple(t for t in tasks if t.family in TRAIN_FAMILIES and t.split != "train"),
        "eval": tuple(t for t in tasks if t.family in EVAL_FAMILIES),
    }


def panel_cell(trajs: Sequence[Trajectory]) -> tuple[float, float]:
    """(reward, metric) of one task set's episodes: the mean training reward the environment
    gave them under the run's reward mode, and the share whose hidden tests all pass."""
    scored = graded(trajs)
    if not scored:
        return 0.0, 0.0
    reward = float(np.mean([t.reward for t in scored]))
    metric = float(np.mean([float(t.outcome.hidden_pass) for t in scored]))
    return reward, metric


def panel(
    model: TinyAgent | str,
    env_config,
    sets: dict[str, Sequence[Task]],
    samples: dict[str, int],
    seed: int,
) -> dict[str, float]:
    """Reward and metric on each task set, from one batch of episodes per set played under
    the run's environment config (its reward mode) with fixed seeds."""
    out = {}
    for name, tasks in sets.items():
        trajs = run_policy(model, tasks, samples[name], seed=seed, env_config=env_config)
        out[key(name, "reward")], out[key(name, "metric")] = panel_cell(trajs)
    return out


def panel_hook(env_config, samples: dict[str, int], seed: int) -> Callable[[int, TinyAgent], dict]:
    """train_pg's hook: the standing panel at every call, on the same tasks and seeds."""
    sets = panel_tasks()
    return lambda step, model: panel(model, env_config, sets, samples, seed)


def gains(summary: dict) -> dict[str, dict[str, float]]:
    """Each panel number's gain over the run: last-quarter minus first-quarter mean of its
    evaluations (first_last's summary of one arm -> {set: {quantity: gain}})."""
    return {
        s: {
            q: summary[key(s, q)]["last"] - summary[key(s, q)]["first"]
            for q in ("reward", "metric")
        }
        for s in SETS
    }


def readings(g: dict[str, dict[str, float]]) -> dict[str, float]:
    """What the panel reads in one arm's gains: `gamed`, the reward-metric gap opening on (b);
    `transfer`, the (b)-(c) metric gap opening; `symptom`, the scenario's: reward gain on (a)
    minus metric gain on (c)."""
    return {
        "gamed": g["heldout"]["reward"] - g["heldout"]["metric"],
        "transfer": g["heldout"]["metric"] - g["eval"]["metric"],
        "symptom": g["train"]["reward"] - g["eval"]["metric"],
    }


def discriminates(obj: dict[str, float], dist: dict[str, float]) -> float:
    """How far the panel tells the two causes apart: the smaller of (gap opening on (b),
    objective arm minus distribution arm) and ((b)-(c) metric gap, distribution arm minus
    objective arm); > 0 when each arm leans to its own cause on both axes."""
    return min(obj["gamed"] - dist["gamed"], dist["transfer"] - obj["transfer"])


def problem_25(ctx: Ctx):
    """Both arms on the training families' tasks, the panel every 10 steps."""
    sets = panel_tasks()
    samples = {s: ctx.pick(n, 2) for s, n in SAMPLES.items()}
    runs = {}
    for name, env in ARMS.items():
        config = rl_config(ctx, env=env, steps=ctx.pick(60, 4))
        hook = panel_hook(config.env, samples, ctx.seed + PANEL_SEED)
        runs[name] = train_pg(
            start(ctx, "weak"), config, sets["train"], hook=hook, hook_every=ctx.pick(10, 2)
        )
    res = first_last(runs, (*KEYS, "reward", "pass_rate", "hack_rate"))
    read = {n: readings(gains(res[n])) for n in ARMS}
    res["readings"] = read
    res["effect"] = read[OBJECTIVE]["gamed"]
    res["transfer"] = read[DISTRIBUTION]["transfer"]
    res["symptom"] = min(r["symptom"] for r in read.values())
    res["discriminates"] = discriminates(read[OBJECTIVE], read[DISTRIBUTION])
    res["tasks"] = {s: [t.name for t in ts] for s, ts in sets.items()}
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    def fl(arm: str, s: str, q: str) -> str:
        a = res[arm][key(s, q)]
        return f"{a['first']:.2f} -> {a['last']:.2f}"

    arms = "; ".join(
        f"{n}: reward / metric on (a) {fl(n, 'train', 'reward')} / {fl(n, 'train', 'metric')}, "
        f"(b) {fl(n, 'heldout', 'reward')} / {fl(n, 'heldout', 'metric')}, (c) "
        f"{fl(n, 'eval', 'reward')} / {fl(n, 'eval', 'metric')}, hardcoded episodes in training "
        f"{res[n]['hack_rate']['first']:.2f} -> {res[n]['hack_rate']['last']:.2f}"
        for n in ARMS
    )
    read = res["readings"]
    return (
        f"the panel, first -> last quarter of its evaluations: {arms}. Reward-metric gap "
        f"opening on (b): {read[OBJECTIVE]['gamed']:+.2f} (objective) against "
        f"{read[DISTRIBUTION]['gamed']:+.2f} (distribution); (b)-(c) metric gap opening: "
        f"{read[DISTRIBUTION]['transfer']:+.2f} (distribution) against "
        f"{read[OBJECTIVE]['transfer']:+.2f} (objective)."
    )


def draw_25(per_seed: list[dict], path: Path) -> None:
    """A grid: one row per arm, one column per task set; reward and metric, mean +- SE."""
    import matplotlib.pyplot as plt

    plt.close(new_figure(1)[0])  # the Agg backend, as every problem's figure
    fig, grid = plt.subplots(len(ARMS), len(SETS), figsize=(12.6, 6.4), sharey=True)
    for row, arm in zip(grid, ARMS, strict=True):
        for ax, s in zip(row, SETS, strict=True):
            for q, style, color in (("reward", "-", "C0"), ("metric", "--", "C3")):
                steps, m, se = _over_seeds([r["history"][arm] for r in per_seed], key(s, q))
                label = "reward (the run's)" if q == "reward" else "metric (hidden tests pass)"
                ax.plot(steps, m, style, color=color, lw=1.6, marker="o", ms=3, label=label)
                ax.fill_between(steps, m - se, m + se, color=color, alpha=0.18, lw=0)
            ax.set_title(f"{ROWS[arm]}: {SET_LABELS[s]}", fontsize=9)
            ax.set_ylim(-0.03, 1.03)
            ax.set_xticks(steps)  # the evaluations' steps
        row[0].set_ylabel("rate per episode")
    for ax in grid[-1]:
        ax.set_xlabel("RL step")
    n = len(per_seed)
    band = f"mean over {n} seeds, band +- 1 SE" if n > 1 else f"seed {per_seed[0]['seed']}"
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)
    title = (
        "Problem 25: the standing panel of two runs trained on the families "
        f"{', '.join(TRAIN_FAMILIES)}:\nobjective mismatch (public-test reward, top), "
        f"distribution mismatch (hidden-test reward, bottom) ({band})"
    )
    save_figure(path, fig, title, bottom=0.06)


def _over_seeds(histories: list[list[dict]], k: str):
    """Steps, mean and SE over seeds of one history key."""
    by_step: dict[int, list[float]] = {}
    for h in histories:
        for r in h:
            if r.get(k) is not None:
                by_step.setdefault(int(r["step"]), []).append(float(r[k]))
    steps = sorted(by_step)
    m = np.array([np.mean(by_step[t]) for t in steps])
    se = np.array([seed_se(by_step[t]) for t in steps])
    return steps, m, se


PROBLEM_25 = Problem(
    problem_25,
    Claim(
        text="a training reward that is not the metric (public tests) climbs without the "
        "metric, and the gap shows on held-out tasks of the training distribution",
        effect="objective arm, on (b) held-out training-family tasks: reward gain minus metric "
        "gain (last minus first quarter of the evaluations)",
        source="book",
        passage="If training uses public tests, partial credit, or a judge, the policy can "
        "improve the reward without improving hidden-test success ... if only the reward rises, "
        "the reward is being gamed.",
        cause="the hardcoding edit did not take over within 60 steps: the public reward also "
        "pays the real fix, so reward and metric climbed together on (b)",
    ),
    draw_25,
    more=(
        (
            "transfer",
            Claim(
                text="trained on other tasks than the evaluation's, reward and metric climb "
                "together on held-out tasks of the training distribution, not on the evaluation's",
                effect="distribution arm: metric gain on (b) minus metric gain on (c)",
                source="book",
                passage="Are the training tasks from the same distribution as the evaluation "
                "tasks? ... If both rise there, the issue is transfer or harness mismatch",
                cause="the hidden reward did not lift the held-out tasks of the training "
                "families (the fixes learned did not reach their other functions), or it lifted "
                "the other families as much",
            ),
        ),
        (
            "symptom",
            Claim(
                text="both runs show the scenario: training reward climbs, the evaluation's "
                "pass rate is flat",
                effect="smaller over the two arms of: reward gain on (a) minus metric gain on (c)",
                source="book",
                passage="Training reward rises from 0.18 to 0.55 over 400 steps. Held-out "
                "SWE-bench Verified pass@1, evaluated every 50 steps, stays within one point of "
                "its starting value.",
                cause="in one arm the training reward did not climb within 60 steps, or the "
                "evaluation's metric climbed with it",
            ),
        ),
        (
            "discriminates",
            Claim(
                text="the cheapest discriminating measurement: reward and metric on held-out "
                "training-distribution tasks tell gaming from transfer",
                effect="smaller of: (b) reward-metric gap opening, objective minus distribution "
                "arm; (b)-(c) metric gap opening, distribution minus objective arm",
                source="book",
                passage="The cheapest discriminating measurement is to evaluate the training "
                "reward and the evaluation metric on the same held-out training-distribution "
                "tasks.",
                cause="the public-reward policy mixes hacks with real fixes on the training "
                "families (seed 2: 0.75 of its training episodes hardcoded while its metric on "
                "(b) rose 0.08 -> 0.17), so its (b)-(c) metric gap opens too",
            ),
        ),
    ),
)

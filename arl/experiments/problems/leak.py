"""Problem 11: hidden information leaks through the environment (a fix in the history).

Two RL arms on one seed, from one RL cold start made by Chapter 15's recipe on the sealed
variant (it never saw a fix commit): oracle SFT from the weak base on demonstrations that look
at the repository with `read` or `log` (one of the two at random, as a pretrained model knows
both) and copy the fix's argument from what they saw, to train pass 0.75 (arl.train.bases,
arl.gym.leak_policies); on the hidden tests' reward:

- leaky: RL on "bugfix-leaky", whose `log` shows the fix commit (arl.gym.leak);
- sealed: RL on "bugfix-sealed", the same tool with the future history stripped.

Both variants hold BugFix's five families and the `const` family, the canary: its constants
(the key) are drawn per episode and written only in the fix commit, so a policy solves it by
reading the history or by a guess (1 in 80). Per step each arm logs the pass rate of every
family, the canary's (`canary_pass`), and the share of its successful episodes that called
`log` (`log_share_in_successes`). After RL each arm plays the two held-out canary tasks, which
it never trained on.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial

import numpy as np

from arl.eval.metrics import evaluate
from arl.eval.stats import seed_se
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    base_config,
    first_last,
    first_to_last,
    head_mean,
    new_figure,
    rl_config,
    save_figure,
    tail_mean,
)
from arl.gym.leak_tasks import CONST, GUESS, LEAK_FAMILIES, LEAKY, SEALED, tasks_of
from arl.train.bases import cold_start
from arl.train.pg import train_pg
from arl.train.pg_config import default_env

LEAKY_ARM, SEALED_ARM = "leaky history", "sealed history"
ARMS = {LEAKY_ARM: LEAKY, SEALED_ARM: SEALED}
FAMILY_KEYS = tuple(f"pass/{f}" for f in LEAK_FAMILIES)
KEYS = ("pass_rate", "canary_pass", "log_share", "log_share_in_successes", *FAMILY_KEYS)
STEPS = 60  # RL steps per arm (about 2 minutes each on one core)
SMOOTH = 5  # the figure's running mean, in steps (a family is 2-16 episodes of a step)


def gains(history: list[dict]) -> dict[str, float]:
    """Each family's pass-rate gain over the run: last minus first quarter of its steps."""
    return {
        f: tail_mean(history, f"pass/{f}") - head_mean(history, f"pass/{f}") for f in LEAK_FAMILIES
    }


def heldout_canary(ctx: Ctx, model, env: str) -> float:
    """Pass rate on the held-out canary tasks (never trained on) of variant `env`."""
    tasks = [t for t in tasks_of(env, "heldout") if t.family == CONST]
    m, _ = evaluate(model, tasks, samples=ctx.pick(32, 2), seed=ctx.seed + 11)
    return m["pass_rate"]


def quick_pool(env: str) -> list | None:
    """--quick's training tasks: every canary and one task of each other family, so that four
    steps of four tasks draw the canary (from all 24, a quick run may never meet it)."""
    train = tasks_of(env, "train")
    firsts = {t.family: t for t in reversed(train) if t.family != CONST}
    return [t for t in train if t.family == CONST] + list(firsts.values())


def problem_11(ctx: Ctx):
    """RL with a leaky history against a sealed one, from the same weak base and seed."""
    start = cold_start(base_config(ctx), SEALED)
    runs, held = {}, {}
    for arm, env in ARMS.items():
        config = replace(rl_config(ctx, steps=ctx.pick(STEPS, 4)), env=default_env(env))
        model = copy.deepcopy(start)
        runs[arm] = train_pg(model, config, quick_pool(env) if ctx.quick else None)
        held[arm] = heldout_canary(ctx, model, env)
    res = first_last(runs, KEYS)
    g = gains(runs[LEAKY_ARM])
    res["gains"] = g
    res["heldout_canary"] = held
    res["effect"] = tail_mean(runs[LEAKY_ARM], "canary_pass")  # the canary solved: leak open
    res["sealed_canary"] = float(np.mean(_values(runs[SEALED_ARM], "canary_pass") or [0.0]))
    others = [g[f] for f in LEAK_FAMILIES if f != CONST]  # a family a quick run never drew: nan
    res["fast_family"] = g[CONST] - float(np.nanmean(others))
    res["leak_share"] = (
        res[LEAKY_ARM]["log_share_in_successes"]["last"]
        - res[LEAKY_ARM]["log_share_in_successes"]["first"]
    )
    res["heldout_leak"] = held[LEAKY_ARM]
    return res, conclusion(res)


def _values(history: list[dict], key: str) -> list[float]:
    return [r[key] for r in history if r.get(key) is not None]


def conclusion(res: dict) -> str:
    fl = partial(first_to_last, res)  # fl(arm, key): "first -> last" quarter means
    fams = ", ".join(f"{f} {v:+.2f}" for f, v in res["gains"].items())
    return (
        f"first -> last quarter of the steps: canary pass leaky {fl(LEAKY_ARM, 'canary_pass')}, "
        f"sealed {fl(SEALED_ARM, 'canary_pass')} (a guess: {GUESS:.3f}); train pass leaky "
        f"{fl(LEAKY_ARM, 'pass_rate')}, sealed {fl(SEALED_ARM, 'pass_rate')}; share of "
        f"successes that called log: leaky {fl(LEAKY_ARM, 'log_share_in_successes')}, sealed "
        f"{fl(SEALED_ARM, 'log_share_in_successes')}. Per-family gains on the leaky arm: {fams}. "
        f"Held-out canary tasks after RL: leaky {res['heldout_canary'][LEAKY_ARM]:.2f}, sealed "
        f"{res['heldout_canary'][SEALED_ARM]:.2f}."
    )


# --- the figure ---------------------------------------------------------------------------


def smoothed(history: list[dict], key: str, window: int = SMOOTH) -> dict[int, float]:
    """step -> the mean of `key` over the steps (window) up to it that logged it."""
    pts = [(int(r["step"]), r[key]) for r in history if r.get(key) is not None]
    out = {}
    for i, (step, _) in enumerate(pts):
        near = [v for s, v in pts[: i + 1] if s > step - window]
        out[step] = float(np.mean(near))
    return out


def band(ax, histories: list[list[dict]], key: str, label: str, i: int) -> None:
    """Mean +- SE over seeds of a smoothed metric, one line with its band."""
    by_step: dict[int, list[float]] = {}
    for h in histories:
        for step, v in smoothed(h, key).items():
            by_step.setdefault(step, []).append(v)
    if not by_step:
        return
    steps = sorted(by_step)
    m = np.array([np.mean(by_step[t]) for t in steps])
    se = np.array([seed_se(by_step[t]) for t in steps])
    ax.plot(steps, m, ("-", "--", "-.", ":")[i % 4], color=f"C{i}", lw=1.5, label=label)
    ax.fill_between(steps, m - se, m + se, color=f"C{i}", alpha=0.15, lw=0)


def draw(per_seed: list[dict], path) -> None:
    """The canary's pass rate per arm, the leaky arm's per-family pass rates, and the share of
    successes that called log per arm."""
    hist = [r["history"] for r in per_seed]
    fig, axes = new_figure(3, width=4.4)
    for i, arm in enumerate(ARMS):
        band(axes[0], [h[arm] for h in hist], "canary_pass", arm, i)
        band(axes[2], [h[arm] for h in hist], "log_share_in_successes", arm, i)
    axes[0].axhline(GUESS, color="gray", lw=0.8, ls=":", label="a guess (1/80)")
    for i, fam in enumerate(LEAK_FAMILIES):
        band(axes[1], [h[LEAKY_ARM] for h in hist], f"pass/{fam}", fam, i + 2)
    labels = (
        "canary (const) pass rate",
        "pass rate by family, leaky arm",
        "share of successes that called log",
    )
    for ax, label in zip(axes, labels, strict=True):
        ax.set_xlabel("RL step")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, frameon=False)
    n = len(per_seed)
    band_note = f"mean over {n} seeds +- 1 SE" if n > 1 else "one seed"
    save_figure(
        path,
        fig,
        f"Problem 11: a fix in the history, leaky vs sealed ({band_note}, "
        f"running mean of {SMOOTH} steps)",
    )


PROBLEM_11 = Problem(
    problem_11,
    Claim(
        text="if the canary (a task whose only solution is in the leaked place) is ever solved, "
        "the leak is open",
        effect="canary pass rate, last quarter of RL on the leaky history (above a guess's 1/80)",
        threshold=GUESS,
        source="book",
        passage="Then add a canary: a task whose only solution is in the leaked location. If the "
        "canary is ever solved, the leak is open.",
        cause="TinyAgent's start copies no digits from what it reads: on seed 0 the cold start, "
        "and the oracle SFT after all its 100 steps, copied the key the log showed in 0 of 128 "
        "canary episodes (their const edits carry digits unrelated to those shown, some one "
        "digit short), so RL meets no leak success beyond a guess's 1 in 80 to reinforce",
    ),
    draw,
    more=(
        (
            "sealed_canary",
            Claim(
                text="the sealed environment closes the leak",
                effect="canary pass rate over RL on the sealed history (below twice a guess's "
                "1/80: a policy that always tries the const edit guesses 1 in 80)",
                threshold=2 * GUESS,
                below=True,
                source="book",
                passage="diff the container's file system and history against what the agent is "
                "supposed to see, strip future history, keep hidden tests outside the container "
                "and copy them in only at reward time, and disable network access.",
                premise="effect",
                cause="the sealed arm guessed the key more often than chance",
            ),
        ),
        (
            "fast_family",
            Claim(
                text="the family the leak serves learns suspiciously fast",
                effect="leaky arm: the canary family's pass-rate gain (last minus first quarter) "
                "minus the other families' mean gain",
                source="book",
                passage="A jump this fast on one family suggests the agent found information that "
                "makes the task easier than intended.",
                cause="the canary family cannot rise while the policy does not copy the key "
                "(the first claim's cause); the other families, which a read solves, move as "
                "RL moves them",
            ),
        ),
        (
            "leak_share",
            Claim(
                text="leak-inspecting calls grow among successful episodes",
                effect="leaky arm: share of successes that called log, last minus first quarter",
                source="book",
                passage="Trajectories show the agent running git log and grep before editing. ... "
                "Measure per-family learning speed and the frequency of history-inspection tool "
                "calls in successful trajectories.",
                cause="log pays nothing over read on the families a read solves, and the "
                "canary's rare successes are guesses, with or without a log call",
            ),
        ),
        (
            "heldout_leak",
            Claim(
                text="the leak, not memory, solves the canary: held-out canaries are solved too",
                effect="held-out canary pass rate after RL on the leaky history (above 1/80)",
                threshold=GUESS,
                source="lab",
                passage="the book's canary is one whose only solution is in the leaked location; "
                "the lab adds held-out canaries, never trained on, to tell a copied key from a "
                "memorized one",
                premise="effect",
                cause="the policy does not copy the key on any canary (the first claim's cause)",
            ),
        ),
    ),
)

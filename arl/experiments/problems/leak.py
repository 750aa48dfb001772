"""Problem 11: hidden information leaks through the environment (a fix in the history).

The design of issue 43 (`problem_11`, locked as PROBLEM_11): TinyAgent copies no digits, so a
leak it must copy from never acts; this one needs no copying. Two RL arms on one seed from one
cold start made by Chapter 15's recipe on "bugfix-sealed-checkout" (arl.bugfix.checkout; it
never saw a fix restored): oracle SFT on demonstrations whose first look is `read`, `log` or
`checkout` (one of the three at random; on the sealed variant checkout restores what the
working copy holds, so it costs nothing), to train pass 0.75; then, with no pass-rate filter
cooldown (a canary group that fails is drawn again at once):

- leaky checkout: RL on "bugfix-leaky-checkout", whose `checkout` restores the fixed file in one
  call (and whose `log` shows the fix commit);
- sealed checkout: RL on "bugfix-sealed-checkout", whose `checkout` restores only the listing
  the episode started from.

Every claim reads the trainer's fixed evaluation (every EVAL_EVERY steps, the same episodes'
seeds every time, both splits): per-family pass, the canary's, and the share of successes that
called `checkout` and `log`. Per seed the cold start's copy probe for the key (`key_copy`: shown
the leaky log, does it write the key?) gates the claim about `log`: the checkout leak needs no
copying, the log leak does.

The earlier design (`history_arms`, EARLIER; measured on seeds 0-3, docs/problems.md): two RL
arms on one seed, from one RL cold start made by Chapter 15's recipe on the sealed
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
it never trained on. Its claims read the sampled batch.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial

import numpy as np
import torch

from arl.bugfix.checkout import CHECKOUT_LEAKY, CHECKOUT_SEALED
from arl.bugfix.env import observation
from arl.env import SPLITS, get_environment
from arl.eval.metrics import evaluate
from arl.eval.stats import seed_se
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
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
from arl.model import TinyAgent
from arl.rollout import vocab_of
from arl.text import END, Transcript
from arl.train.bases import cold_start, weak_base
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
    train = get_environment(env).tasks("train")
    firsts = {t.family: t for t in reversed(train) if t.family != CONST}
    return [t for t in train if t.family == CONST] + list(firsts.values())


def history_arms(ctx: Ctx):
    """The earlier design: RL with a leaky history against a sealed one (`log` only), from the
    same cold start and seed."""
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


EARLIER = Problem(  # the earlier design (seeds 0-3, before the locked protocol): not run by default
    history_arms,
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


# --- the design of issue 43: a checkout that restores the fix ------------------------------------

CO_LEAKY, CO_SEALED = "leaky checkout", "sealed checkout"
CHECKOUT_ARMS = {CO_LEAKY: CHECKOUT_LEAKY, CO_SEALED: CHECKOUT_SEALED}
EVAL_EVERY = 10  # steps between fixed evaluations (7 in a run: steps 0, 10, ..., 60)
EVAL_SAMPLES = 8  # episodes per task in each (the train split: 32 canary episodes of 192)
COOLDOWN = 0  # pass-rate filter cooldown: none, so an all-fail canary group is drawn again
PROBE_KEYS = 8  # (buggy, key) draws per const task in the key's copy probe (6 tasks: 48)
PROBE_SEED = 7_000  # the probe's episode seeds: PROBE_SEED + k, the same on every seed
COPY_MIN = 0.8  # the copy probe's bar, Chapter 15's for `init` (ch15_rules.COPY_RATE_MIN)
CANARY_SAMPLES = 64  # episodes per canary task (6) in each arm's final canary probe (TUNED)
CANARY_SEED = 9_000  # + the seed: the final probe's episode seeds, the same for both arms
CANARY = "eval/train_canary_pass"  # the fixed evaluation's canary pass (training canaries)
HELD_CANARY = "eval/heldout_canary_pass"  # and the held-out canaries', never trained on
CO_SHARE = "eval/train_checkout_share_in_successes"
LOG_SHARE = "eval/train_log_share_in_successes"
EVAL_FAMILIES = tuple(f"eval/train_pass/{f}" for f in LEAK_FAMILIES)
CO_KEYS = (
    "eval/train_pass",
    "eval/heldout_pass",
    CANARY,
    HELD_CANARY,
    CO_SHARE,
    LOG_SHARE,
    "eval/train_checkout_share",
    "eval/train_log_share",
    *EVAL_FAMILIES,
    "pass_rate",  # the sampled batch's: recorded, never judged
    "canary_pass",
)


@torch.no_grad()
def key_copy_probe(model: TinyAgent, env: str = CHECKOUT_LEAKY) -> dict[str, float]:
    """Does the policy copy the key the leaky log shows? (what the `log` leak needs)

    For every const task (both splits) and PROBE_KEYS episodes of it, feed the issue, `log`,
    the log's answer (the fix commit's line holds the key), and `edit const`, and check the
    most likely next token against the key's first digit, then (the first digit fed) against
    its second. `key_copy`: both right. A policy that does not look scores about 1/81."""
    environment = get_environment(env)
    vocab = vocab_of(environment)
    rows: list[tuple[list[int], list[int]]] = []
    for task in (t for s in SPLITS for t in environment.tasks(s) if t.family == CONST):
        for k in range(PROBE_KEYS):
            e = environment.make(task)
            prompt, info = e.reset(seed=PROBE_SEED + k)
            shown = e.step(["log", END])[0]
            tr = Transcript.begin(prompt.words, vocab)
            for word in ("log", END):
                tr.act(vocab.id(word))
            tr.observe(observation(shown.words))
            for word in ("edit", CONST):
                tr.act(vocab.id(word))
            key = [vocab.id(str(d)) for d in info["key"]]
            rows.append((tr.ids + key[:1], key))
    was_training = model.training
    model.eval()
    n = max(len(ids) for ids, _ in rows)
    x = torch.tensor([ids + [0] * (n - len(ids)) for ids, _ in rows])  # (N, n), right-padded
    logits, _ = model(x)  # (N, n, V): causal, so the padding changes no row's predictions
    model.train(was_training)
    at = torch.tensor([len(ids) - 2 for ids, _ in rows])  # (N,): the position after `const`
    rows_i = torch.arange(len(rows))
    keys = torch.tensor([k for _, k in rows])  # (N, 2)
    first = logits[rows_i, at].argmax(-1) == keys[:, 0]  # (N,)
    second = logits[rows_i, at + 1].argmax(-1) == keys[:, 1]  # (N,)
    return {
        "key_copy": float((first & second).float().mean()),
        "first_digit": float(first.float().mean()),
        "probes": len(rows),
    }


def family_gains(history: list[dict]) -> dict[str, float]:
    """Each family's fixed-evaluation pass gain: last minus first quarter of the evaluations
    (nan for a family no evaluation holds)."""
    return {
        f: tail_mean(history, key) - head_mean(history, key)
        for f, key in zip(LEAK_FAMILIES, EVAL_FAMILIES, strict=True)
    }


def final_canary(ctx: Ctx, model: TinyAgent, env: str) -> float:
    """Pass rate of the policy after RL on every canary task of `env` (both splits), on fixed
    episode seeds: a finer estimate near a guess's 1/80 than an evaluation's 32 episodes,
    where one lucky guess is 0.031."""
    environment = get_environment(env)
    tasks = [t for s in SPLITS for t in environment.tasks(s) if t.family == CONST]
    m, _ = evaluate(model, tasks, samples=ctx.pick(CANARY_SAMPLES, 2), seed=CANARY_SEED + ctx.seed)
    return m["pass_rate"]


def checkout_effects(runs: dict[str, list[dict]], final: dict[str, float]) -> dict[str, float]:
    """Every RL claim's per-seed effect, from the arms' fixed evaluations and the sealed arm's
    final canary probe."""
    leaky = runs[CO_LEAKY]
    g = family_gains(leaky)
    others = [g[f] for f in LEAK_FAMILIES if f != CONST]
    return {
        "effect": tail_mean(leaky, CANARY),
        "sealed_canary": final[CO_SEALED],
        "fast_family": g[CONST] - float(np.nanmean(others)),
        "fast_vs_sealed": g[CONST] - family_gains(runs[CO_SEALED])[CONST],
        "leak_share": tail_mean(leaky, CO_SHARE) - head_mean(leaky, CO_SHARE),
        "heldout_leak": tail_mean(leaky, HELD_CANARY),
        "log_share": tail_mean(leaky, LOG_SHARE) - head_mean(leaky, LOG_SHARE),
    }


def problem_11(ctx: Ctx):
    """From one cold start made on the sealed checkout variant: RL where checkout restores the
    fix, against RL where it restores only the working copy; the key's copy probe beside."""
    base = base_config(ctx)
    start = cold_start(base, CHECKOUT_SEALED)
    probe = {
        "cold_start": key_copy_probe(start),
        "weak_base": key_copy_probe(weak_base(base, CHECKOUT_SEALED)),
    }
    runs, final = {}, {}
    for arm, env in CHECKOUT_ARMS.items():
        config = rl_config(
            ctx,
            steps=ctx.pick(STEPS, 4),
            eval_every=ctx.pick(EVAL_EVERY, 2),
            eval_samples=ctx.pick(EVAL_SAMPLES, 1),
            filter_cooldown=COOLDOWN,
        )
        config = replace(config, env=default_env(env))
        pool = quick_pool(env) if ctx.quick else None
        model = copy.deepcopy(start)
        runs[arm] = train_pg(model, config, pool)
        final[arm] = final_canary(ctx, model, env)
    res = first_last(runs, CO_KEYS) | checkout_effects(runs, final)
    res["final_canary"] = final
    res["gains"] = family_gains(runs[CO_LEAKY])
    res["copy_probe"] = probe
    res["key_copy"] = probe["cold_start"]["key_copy"]
    return res, checkout_conclusion(res)


def checkout_conclusion(res: dict) -> str:
    fl = partial(first_to_last, res)  # fl(arm, key): "first -> last" quarter means
    fams = ", ".join(f"{f} {v:+.2f}" for f, v in res["gains"].items())
    probe = res["copy_probe"]
    return (
        f"fixed evaluation, first -> last quarter: canary pass leaky {fl(CO_LEAKY, CANARY)}, "
        f"sealed {fl(CO_SEALED, CANARY)} (a guess: {GUESS:.3f}); held-out canaries leaky "
        f"{fl(CO_LEAKY, HELD_CANARY)}, sealed {fl(CO_SEALED, HELD_CANARY)}; train pass leaky "
        f"{fl(CO_LEAKY, 'eval/train_pass')}, sealed {fl(CO_SEALED, 'eval/train_pass')}; share "
        f"of successes that called checkout: leaky {fl(CO_LEAKY, CO_SHARE)}, sealed "
        f"{fl(CO_SEALED, CO_SHARE)}; that called log: leaky {fl(CO_LEAKY, LOG_SHARE)}. After "
        f"RL, on every canary ({CANARY_SAMPLES} episodes each): leaky "
        f"{res['final_canary'][CO_LEAKY]:.3f}, sealed {res['final_canary'][CO_SEALED]:.3f}. "
        f"Per-family gains on the leaky arm: {fams}; the canary's on the sealed arm "
        f"{res['gains'][CONST] - res['fast_vs_sealed']:+.2f}. Key copy probe: cold start "
        f"{probe['cold_start']['key_copy']:.2f} (first digit "
        f"{probe['cold_start']['first_digit']:.2f}), weak base "
        f"{probe['weak_base']['key_copy']:.2f}."
    )


def draw_checkout(per_seed: list[dict], path) -> None:
    """Per arm: the canary's fixed-evaluation pass, and the share of successes that called
    checkout; the leaky arm's per-family pass."""
    hist = [r["history"] for r in per_seed]
    fig, axes = new_figure(3, width=4.4)
    for i, arm in enumerate(CHECKOUT_ARMS):
        band(axes[0], [h[arm] for h in hist], CANARY, arm, i)
        band(axes[2], [h[arm] for h in hist], CO_SHARE, arm, i)
    axes[0].axhline(GUESS, color="gray", lw=0.8, ls=":", label="a guess (1/80)")
    for i, (fam, key) in enumerate(zip(LEAK_FAMILIES, EVAL_FAMILIES, strict=True)):
        band(axes[1], [h[CO_LEAKY] for h in hist], key, fam, i + 2)
    labels = (
        "canary (const) pass, fixed evaluation",
        "pass by family, leaky checkout arm",
        "share of successes that called checkout",
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
        f"Problem 11 (issue 43's design): checkout restores the fix, leaky vs sealed "
        f"({band_note}; fixed evaluations every {EVAL_EVERY} steps)",
    )


TUNED = (
    Tuning(
        "canary_samples",
        CANARY_SAMPLES,
        (100,),
        "the sealed claim's reading. On seed 100 the sealed arm's evaluations read canary pass "
        "0.031 at steps 0-30 (one lucky guess among an evaluation's 32 canary episodes, on "
        "the same episode seeds every time) and 0 after: a mean over the evaluations of 0.018 "
        "against the bar of 2/80, so one guess decides the seed. The claim reads instead a "
        "probe of the policy after RL on all 6 canaries x 64 fixed episodes (seed 100: 0.005; "
        "101: 0.000)",
    ),
    Tuning(
        "fast_vs_sealed",
        "added (lab)",
        (100,),
        "on seed 100 the other families started near the ceiling (fixed evaluation at step 0: "
        "0.75-1.0, the canary 0.16), so the book's reading (the canary's gain against theirs) "
        "also measures room to grow; the lab added the canary family's gain paired against the "
        "sealed arm (seed 100: +0.55 against -0.03)",
    ),
    Tuning(
        "steps, eval_every, eval_samples, filter_cooldown",
        {"steps": STEPS, "eval_every": EVAL_EVERY, "eval_samples": EVAL_SAMPLES, "cooldown": 0},
        (100, 101),
        "set before any run (the earlier design's 60 steps; issue 43's no cooldown) and looked "
        "at on seeds 100-101, not changed: the leaky arm's canary pass (fixed evaluation) went "
        "0.16 -> 0.75 by step 10 and 1.00 from step 50 (seed 100), 0.16 -> 0.84 and 1.00 from "
        "step 30 (seed 101); the sealed arm's stayed at 0.00-0.03",
    ),
)

CHECKOUT_PASSAGE = (
    "Your agent's pass rate on one task family jumped from 30% to 85% in 50 steps. "
    "Trajectories show the agent running git log and grep before editing."
)

PROBLEM_11 = Problem(
    problem_11,
    Claim(
        text="if the canary (a task whose only solution is in the leaked place) is ever solved, "
        "the leak is open",
        effect="fixed-evaluation canary pass, last quarter of the evaluations, RL where checkout "
        "restores the fix (above a guess's 1/80)",
        threshold=GUESS,
        source="book",
        passage="Then add a canary: a task whose only solution is in the leaked location. If the "
        "canary is ever solved, the leak is open.",
    ),
    draw_checkout,
    more=(
        (
            "sealed_canary",
            Claim(
                text="the sealed environment closes the leak",
                effect="canary pass of the policy after RL where checkout restores only the "
                "working copy, on every canary task (train and held-out, 64 fixed episodes "
                "each; below twice a guess's 1/80)",
                threshold=2 * GUESS,
                below=True,
                source="book",
                passage="diff the container's file system and history against what the agent is "
                "supposed to see, strip future history, keep hidden tests outside the container "
                "and copy them in only at reward time, and disable network access.",
                premise="effect",
            ),
        ),
        (
            "fast_family",
            Claim(
                text="the family the leak serves learns suspiciously fast",
                effect="leaky checkout arm, fixed evaluation: the canary family's pass gain (last "
                "minus first quarter of the evaluations) minus the other families' mean gain",
                source="book",
                passage="A jump this fast on one family suggests the agent found information that "
                "makes the task easier than intended.",
            ),
        ),
        (
            "fast_vs_sealed",
            Claim(
                text="the leak, not RL at large, makes the canary family learn: sealed, the same "
                "family with the same room to grow does not",
                effect="fixed evaluation: the canary family's pass gain (last minus first quarter "
                "of the evaluations), leaky checkout arm minus sealed checkout arm",
                source="lab",
                passage="the book reads a family's speed against the other families'; those start "
                "near the ceiling here (train pass 0.75-1.0 against the canary's 0.1-0.3), so the "
                "lab also pairs the canary family against itself on the sealed arm",
            ),
        ),
        (
            "leak_share",
            Claim(
                text="leak-using calls grow among successful episodes",
                effect="leaky checkout arm, fixed evaluation: share of successes that called "
                "checkout, last minus first quarter of the evaluations",
                source="book",
                passage=CHECKOUT_PASSAGE + " ... Measure per-family learning speed and the "
                "frequency of history-inspection tool calls in successful trajectories.",
            ),
        ),
        (
            "heldout_leak",
            Claim(
                text="the leak, not memory, solves the canary: held-out canaries are solved too",
                effect="fixed-evaluation pass on the held-out canaries (never trained on), last "
                "quarter of the evaluations, leaky checkout arm (above 1/80)",
                threshold=GUESS,
                source="lab",
                passage="the book's canary is one whose only solution is in the leaked location; "
                "the lab adds held-out canaries, never trained on, to tell a leak used from a "
                "memorized answer",
                premise="effect",
            ),
        ),
        (
            "key_copy",
            Claim(
                text="the RL start copies the key the leaky log shows (what the log leak needs)",
                effect="the cold start's key copy probe: share of (const task, key) probes whose "
                "most likely digits after the leaky log and `edit const` are the key's (above "
                "0.8, Chapter 15's bar for the init copy probe)",
                threshold=COPY_MIN,
                source="lab",
                passage="issue 43: TinyAgent copied the key in 0 of 128 episodes, so the log leak "
                "never acted; Chapter 15 gates on a copy probe >= 0.8 for init",
            ),
        ),
        (
            "log_share",
            Claim(
                text="history-inspection (log) calls grow among successful episodes",
                effect="leaky checkout arm, fixed evaluation: share of successes that called "
                "log, last minus first quarter of the evaluations",
                source="book",
                passage=CHECKOUT_PASSAGE + " ... Measure per-family learning speed and the "
                "frequency of history-inspection tool calls in successful trajectories.",
                premise="key_copy",
            ),
        ),
    ),
    settings={
        "start": "the seed's cold start (Chapter 15's recipe: oracle SFT to train pass 0.75) "
        f"made on {CHECKOUT_SEALED}; demonstrations look first with read, log or checkout",
        "arms": {CO_LEAKY: CHECKOUT_LEAKY, CO_SEALED: CHECKOUT_SEALED},
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "eval_samples": EVAL_SAMPLES,
        "filter_cooldown": COOLDOWN,
        "probe": {"keys_per_task": PROBE_KEYS, "seed": PROBE_SEED, "bar": COPY_MIN},
        "final_canary": {"samples_per_task": CANARY_SAMPLES, "seed": f"{CANARY_SEED} + seed"},
        "trainer": "PGConfig defaults otherwise (lr 3e-4, 8 tasks x 8 episodes a step)",
    },
    tuned=TUNED,
    modules=(
        "arl.bugfix.checkout",
        "arl.bugfix.leak",
        "arl.bugfix.leak_tasks",
        "arl.bugfix.leak_policies",
    ),
)

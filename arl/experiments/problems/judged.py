"""Problem 10: the judge model is being exploited.

The judged BugFix variant (arl.gym.judged): `submit` may carry a note (`submit passed <end>`)
that changes nothing in the code, and the reward may come from a learned judge (arl.gym.judge,
a logistic regression fit once on labelled honest episodes, where a note is written only after
a passing test). Two RL arms per seed from the same start, the judged variant's weak base
(pretraining and SFT on honest unskilled play, which writes the note after a passing test):

- "transcript judge": reward = the judge's score of the agent's calls, the note included (what
  the book's judge reads: the patch and the explanation);
- "artifacts judge x exec": the book's default: a judge of the applied edit and the real tool
  outputs only (the note stripped), times 1[the public tests pass on the final code].

Per step (the environment's summary): both rewards' batch means, the hidden pass rate, the
note rate, and the audit: the share of the top fifth of the batch by the arm's reward that
fails the hidden tests (`fp_top`, the book's 60%).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    Tuning,
    arms_figure,
    base_config,
    first_last,
    first_to_last,
    head_mean,
    rl_config,
    tail_mean,
)
from arl.gym.judged import NAME, JudgedConfig, tasks_for
from arl.model import TinyAgent
from arl.train.bases import cold_start, weak_base
from arl.train.pg import train_pg

JUDGE, FIXED = "transcript judge", "artifacts judge x exec"
ARMS = {JUDGE: "transcript", FIXED: "artifacts_exec"}
KEYS = (
    "reward",
    "judge/transcript",
    "judge/artifacts_exec",
    "pass_rate",
    "note_rate",
    "fp_top",
    "immediate_submit_frac",
    "mean_turns",
    "eval/train_pass",
)
START = "weak"  # the start both arms share (the sweep: docs/sweeps/p10_sweep.py)
FP_LEVEL = 0.3  # the audit's false-positive share the claim asks for (the book's: 0.6)


def judged_start(ctx: Ctx, kind: str) -> TinyAgent:
    """A fresh copy of the judged variant's weak base ("weak") or cold start ("cold")."""
    return (weak_base if kind == "weak" else cold_start)(base_config(ctx), NAME)


def arm_runs(ctx: Ctx, kind: str = START) -> dict[str, list[dict]]:
    """One RL run per arm from the same start: the reward of each arm's judge."""
    runs = {}
    for name, reward in ARMS.items():
        config = rl_config(ctx, steps=ctx.pick(60, 4), eval_every=ctx.pick(10, 2))
        env = JudgedConfig(zero_exploits=config.env.zero_exploits, judge_reward=reward)
        runs[name] = train_pg(judged_start(ctx, kind), replace(config, env=env), tasks_for("train"))
    return runs


def problem_10(ctx: Ctx):
    """From the judged weak base: RL on the transcript judge against the artifacts judge x the
    execution check."""
    runs = arm_runs(ctx)
    res = first_last(runs, KEYS)

    def gain(arm: str, key: str) -> float:
        return tail_mean(runs[arm], key) - head_mean(runs[arm], key)

    res["judge_gain"] = gain(JUDGE, "judge/transcript")
    res["pass_gain"] = gain(JUDGE, "pass_rate")
    res["effect"] = res["judge_gain"] - res["pass_gain"]
    res["fp_judge"] = tail_mean(runs[JUDGE], "fp_top")
    res["fp_fixed"] = tail_mean(runs[FIXED], "fp_top")
    res["fp_drop"] = res["fp_judge"] - res["fp_fixed"]
    # arms compared on a fixed evaluation's hidden pass (the sampled batch is filtered)
    res["pass_fixed_minus_judge"] = tail_mean(runs[FIXED], "eval/train_pass") - tail_mean(
        runs[JUDGE], "eval/train_pass"
    )
    return res, conclusion(res)


def conclusion(res: dict) -> str:
    fl = partial(first_to_last, res)  # fl(arm, key): "first -> last" quarter means
    arms = "; ".join(
        f"{n}: reward {fl(n, 'reward')}, transcript judge {fl(n, 'judge/transcript')}, hidden "
        f"pass {fl(n, 'pass_rate')}, note rate {fl(n, 'note_rate')}, false positives in the "
        f"top fifth {fl(n, 'fp_top')}, turns {fl(n, 'mean_turns')}"
        for n in ARMS
    )
    return (
        f"first -> last quarter of the steps: {arms}. On the transcript judge, judge reward "
        f"gains {res['judge_gain']:+.2f} while hidden pass gains {res['pass_gain']:+.2f}."
    )


PROBLEM_10 = Problem(
    problem_10,
    Claim(
        text="RL against a judge raises the judge's reward while the patches do not get "
        "better: the policy learns what the judge rewards (claims) instead of fixes",
        effect="transcript judge arm: judge-reward gain minus hidden-pass gain (first to last "
        "quarter)",
        source="book",
        passage="The policy learned features the judge rewards (assertive claims, length, "
        "formatting) that are cheaper than correct patches.",
        cause="the judge's reward rose no faster than the hidden pass rate: the policy learned "
        "the fix rather than the claim",
    ),
    arms_figure(
        [
            ("reward", "reward (the arm's own)"),
            ("judge/transcript", "transcript judge's score"),
            ("pass_rate", "hidden pass rate (sampled)"),
            ("note_rate", "share of episodes with a note"),
            ("fp_top", "failing share of the top fifth by reward"),
        ],
        "Problem 10: RL on a transcript judge against artifacts judge x execution check",
    ),
    more=(
        (
            "fp_judge",
            Claim(
                text="an audit of top-reward episodes finds most of them wrong (60%)",
                effect=f"transcript judge arm: failing share of the top fifth by reward, last "
                f"quarter (> {FP_LEVEL:g})",
                threshold=FP_LEVEL,
                source="book",
                passage="The audit gives a direct estimate of the problem: 60% of high-reward "
                "trajectories are false positives.",
                cause="the top-judged episodes are mostly real fixes: the judge's weight on "
                "the test outputs outranks its weight on the note",
            ),
        ),
        (
            "fp_drop",
            Claim(
                text="judging only verifiable artifacts, with the execution check, fixes it",
                effect="failing share of the top fifth, last quarter: transcript judge minus "
                "artifacts judge x exec",
                source="book",
                passage="The book's default is to restrict the judge's inputs to verifiable "
                "artifacts and to combine it with whatever execution signal exists",
                premise="fp_judge",
                cause="the transcript judge's top fifth was not mostly wrong either",
            ),
        ),
        (
            "pass_fixed_minus_judge",
            Claim(
                text="with the fixed reward the policy learns to fix instead",
                effect="fixed-evaluation hidden pass, last quarter: artifacts judge x exec minus "
                "transcript judge",
                source="book",
                passage="Track judge reward against audited precision; when they diverge, stop "
                "and fix the reward before training further",
                premise="effect",
                cause="the fixed reward did not teach more fixes in the run's steps",
            ),
        ),
    ),
    tuned=(
        Tuning(
            "start",
            START,
            (0,),
            "docs/sweeps/p10_sweep.py on seed 0 (weak base against the cold start, 60 steps): a "
            "start that mostly fixes cannot show a large share of judge-passed failures",
        ),
    ),
)

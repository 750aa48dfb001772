"""Problems 7, 8, 9, 12, 13: what the reward rewards (public tests, partial credit, flaky
tests, step penalties, truncation)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import torch

from arl.batch import collate
from arl.eval.metrics import run_policy
from arl.experiments.problems.common import (
    Claim,
    Ctx,
    Problem,
    arms_figure,
    first_last,
    first_to_last,
    new_figure,
    rl_runs,
    save_figure,
    seeds_label,
    sem,
    series,
    start,
    tail_mean,
)
from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.harness import run_tests
from arl.gym.tasks import tasks_for
from arl.losses import group_advantages, loss_weights, token_logprobs

# Each problem's arms: one short RL run per arm (name -> PGConfig overrides), same base and seed
ARMS_7 = {
    "public reward": {"env": {"reward": "public", "zero_exploits": False}},
    "hidden reward + detector": {"env": {"reward": "hidden", "zero_exploits": True}},
}
ARMS_8 = {
    "fraction": {"env": {"reward": "fraction"}},
    "binary": {"env": {"reward": "hidden"}},
    "mixed (alpha 0.1)": {"env": {"reward": "mixed", "mixed_alpha": 0.1}},
}
ARMS_12 = {
    "no penalty": {"env": {"step_penalty": 0.0}},
    "penalty 0.02 (book)": {"env": {"step_penalty": 0.02}},
    "penalty 0.1": {"env": {"step_penalty": 0.1}},
}
TURNS_13 = 3  # the cold start's habit is read, edit, test, submit: 4 calls
ARMS_13 = {
    "truncation zero": {"env": {"truncation": "zero", "max_turns": TURNS_13}},
    "truncation score": {"env": {"truncation": "score", "max_turns": TURNS_13}},
}


def _arms(ctx: Ctx, kind: str, arms: dict, steps: int, keys: tuple[str, ...]):
    """Every arm run from the `kind` base; (the runs, `keys` over their first and last quarter)."""
    runs = rl_runs(ctx, kind, arms, steps=steps)
    return runs, first_last(runs, keys)


def problem_7(ctx: Ctx):
    """Public-test reward opens the public-hidden gap; hidden reward + the detector does not."""
    keys = ("public_pass_rate", "pass_rate", "public_hidden_gap", "hack_rate", "hacks_caught")
    runs, res = _arms(ctx, "weak", ARMS_7, ctx.pick(40, 4), keys)
    pub, hid = ARMS_7
    fl = partial(first_to_last, res)
    res["effect"] = res[pub]["public_hidden_gap"]["last"] - res[hid]["public_hidden_gap"]["last"]
    conclusion = (
        f"from the weak base, public-test reward: gap {fl(pub, 'public_hidden_gap')}, "
        f"hardcoded episodes {fl(pub, 'hack_rate')}, hidden pass "
        f"{fl(pub, 'pass_rate')}; hidden reward with the detector: gap "
        f"{fl(hid, 'public_hidden_gap')}, hacks {fl(hid, 'hack_rate')} "
        f"({sum(r['hacks_caught'] for r in runs[hid])} caught and zeroed), hidden pass "
        f"{fl(hid, 'pass_rate')} (first quarter -> last quarter of the steps)."
    )
    return res, conclusion


def problem_8(ctx: Ctx):
    """Partial credit (fraction of hidden tests) against binary and mixed rewards."""
    keys = ("reward", "pass_rate", "hidden_fraction", "immediate_submit_frac", "eval/train_pass")
    evaluated = {n: {**v, "eval_every": ctx.pick(10, 2)} for n, v in ARMS_8.items()}
    runs, res = _arms(ctx, "weak", evaluated, ctx.pick(40, 4), keys)
    # the full-solve rates of a fixed evaluation (the sampled batch is filtered)
    frac_solve = tail_mean(runs["fraction"], "eval/train_pass")
    bin_solve = tail_mean(runs["binary"], "eval/train_pass")
    train = tasks_for("train")
    buggy = float(np.mean([np.mean(run_tests(t.buggy_source, t.hidden)) for t in train]))
    res["unfixed_function_credit"] = buggy
    res["effect"] = bin_solve - frac_solve
    fl = partial(first_to_last, res)
    conclusion = (
        f"from the weak base (first -> last quarter of the steps): fraction reward "
        f"{fl('fraction', 'reward')}, full-solve rate {fl('fraction', 'pass_rate')}"
        f", immediate submissions {fl('fraction', 'immediate_submit_frac')}; binary "
        f"reward: full-solve {fl('binary', 'pass_rate')}; mixed: full-solve "
        f"{fl('mixed (alpha 0.1)', 'pass_rate')}. The unfixed function already earns "
        f"{buggy:.2f} of the hidden tests."
    )
    return res, conclusion


def _episode_gram(model, trajs) -> torch.Tensor:
    """K = V V^T, V's rows the gradients of each episode's token-mean log-prob term (B, B)."""
    batch = collate(trajs)
    B, N = len(trajs), float(batch.action_mask.sum())
    rows = []
    for i in range(B):
        model.zero_grad(set_to_none=True)
        mb = type(batch)(*(getattr(batch, f)[i : i + 1] for f in batch.__dataclass_fields__))
        logp = token_logprobs(model, mb)
        (loss_weights(mb.action_mask, "token_mean", B, N, 1) * logp).sum().backward()
        rows.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    V = torch.stack(rows)  # (B, P)
    return V @ V.T


def problem_9(ctx: Ctx):
    """Flaky tests: the expected gradient shrinks by 1 - 2f; a majority vote restores most of it."""
    model = start(ctx, "cold")
    G, tasks = 8, list(tasks_for("train"))[: ctx.pick(8, 4)]
    trajs = run_policy(model, tasks, G, seed=ctx.seed)
    true = np.array([float(t.outcome.hidden_pass) for t in trajs])
    synthetic = bool((true.reshape(-1, G).min(1) == true.reshape(-1, G).max(1)).all())
    if synthetic:  # every group degenerate (a weak --quick model): seeded labels, p = 0.3
        true = (np.random.default_rng(ctx.seed).random(len(trajs)) < 0.3).astype(float)
    K = _episode_gram(model, trajs).double()  # (B, B)

    def adv(r):  # (D, B) rewards -> group-mean advantages
        return torch.stack([group_advantages(g, "mean") for g in r.view(-1, G)]).view(r.shape)

    a_true = adv(torch.tensor(true)[None])[0]
    g2 = float(a_true @ K @ a_true)
    draws = ctx.pick(300, 60)
    rows = []
    for votes in (1, 3):
        for f in (0.0, 0.04, 0.1, 0.2, 0.3):
            env = BugFixEnv(tasks[0], EnvConfig(flaky_prob=f, flaky_votes=votes))
            env.reset(seed=ctx.seed)
            obs = torch.tensor([[float(env._verdict(bool(x))) for x in true] for _ in range(draws)])
            a_obs = adv(obs.double())  # (D, B)
            per_draw = (a_obs @ K @ a_true) / g2  # (D,) each draw's gradient scale
            shrink = float(per_draw.mean())
            mc_se = float(per_draw.std() / draws**0.5)  # the Monte Carlo error of `shrink`
            cos = (a_obs @ K @ a_true) / torch.sqrt((a_obs @ K * a_obs).sum(1) * g2).clamp(1e-30)
            p1 = 1 - f if votes == 1 else (1 - f) * (1 - f * f)
            p0 = f if votes == 1 else f * (1 - (1 - f) ** 2)
            rows.append(
                {
                    "votes": votes,
                    "f": f,
                    "shrink": shrink,
                    "shrink_se": mc_se,
                    "predicted": p1 - p0,
                    "z": _z(shrink - (p1 - p0), mc_se),
                    "one_draw_cosine": float(cos.mean()),
                    "observed_reward": float(obs.mean()),
                    "predicted_reward": float(p0 + (p1 - p0) * true.mean()),
                }
            )
    res = {
        "episodes": len(trajs),
        "true_success_rate": float(true.mean()),
        "draws": draws,
        "synthetic_labels": synthetic,
        "rows": rows,
    }
    res["effect"] = max(abs(r["z"]) for r in rows)  # E[scale] = p1 - p0 exactly: noise only
    single = [r["shrink"] for r in rows if r["votes"] == 1]
    res["holds"] = single == sorted(single, reverse=True)  # more flips, less signal
    at = {(r["votes"], r["f"]): r for r in rows}
    conclusion = (
        f"on {len(trajs)} cold-start episodes (success {true.mean():.2f}"
        f"{', synthetic labels' if synthetic else ''}), flipping verdicts "
        f"with probability f scales the expected gradient by {at[1, 0.04]['shrink']:.3f} at f=0.04 "
        f"(1-2f = 0.92), {at[1, 0.1]['shrink']:.3f} at 0.1 and {at[1, 0.2]['shrink']:.3f} at 0.2 "
        f"(0.6), and a single step's cosine to the noise-free gradient falls to "
        f"{at[1, 0.2]['one_draw_cosine']:.2f} at f=0.2; a majority of 3 re-runs of candidate "
        f"successes restores the factor to {at[3, 0.2]['shrink']:.3f} (predicted "
        f"{at[3, 0.2]['predicted']:.3f}). Independent flips are the benign case; correlated ones "
        f"(not simulated here) bias the gradient."
    )
    return res, conclusion


def _z(diff: float, se: float) -> float:
    """diff in standard errors; at f = 0 there is no noise (se 0, diff at rounding level), so
    the SE is floored at 1e-9 to keep z finite."""
    return diff / max(se, 1e-9)


def problem_12(ctx: Ctx):
    """A per-turn step penalty teaches immediate submission; without it, it does not."""
    keys = ("immediate_submit_frac", "pass_rate", "mean_turns", "reward")
    runs, res = _arms(ctx, "weak", ARMS_12, ctx.pick(25, 4), keys)
    res["break_even_success_rate"] = {
        "0.02": "a 4-turn attempt beats submit-at-once only if it succeeds > 0.06",
        "0.1": "a 4-turn attempt beats submit-at-once only if it succeeds > 0.30",
    }
    names = list(runs)
    res["effect"] = res[names[0]]["mean_turns"]["last"] - res[names[-1]]["mean_turns"]["last"]
    fl = partial(first_to_last, res)
    conclusion = (
        "from the weak base (first -> last quarter of the steps), immediate submissions / turns "
        "/ pass rate: "
        + "; ".join(
            f"{n}: {fl(n, 'immediate_submit_frac')} / {fl(n, 'mean_turns')} / {fl(n, 'pass_rate')}"
            for n in names
        )
        + "."
    )
    return res, conclusion


def problem_13(ctx: Ctx):
    """Truncation scored 0 against the final state scored, with a budget below the habit."""
    keys = ("truncated_frac", "final_state_pass", "pass_rate", "reward", "degenerate_frac")
    runs, res = _arms(ctx, "cold", ARMS_13, ctx.pick(25, 4), keys)
    turns = res["max_turns"] = TURNS_13
    z, s = ARMS_13
    res["effect"] = res[z]["degenerate_frac"]["last"] - res[s]["degenerate_frac"]["last"]
    zero_silent = max(series(runs[z], "reward")) == 0
    fl = partial(first_to_last, res)
    conclusion = (
        f"with a {turns}-call budget (first -> last quarter of the steps), scoring truncation as "
        f"0: truncated {fl(z, 'truncated_frac')}, final state passes "
        f"{fl(z, 'final_state_pass')}, reward {fl(z, 'reward')}; scoring the "
        f"final state: truncated {fl(s, 'truncated_frac')}, final state passes "
        f"{fl(s, 'final_state_pass')}, reward {fl(s, 'reward')}; groups with "
        f"no signal (all rewards equal): zero {fl(z, 'degenerate_frac')}, final state "
        f"{fl(s, 'degenerate_frac')}"
        + ("; under zero no episode was ever rewarded (no gradient)." if zero_silent else ".")
    )
    return res, conclusion


def draw_9(per_seed: list[dict], path: Path) -> None:
    fig, (ax1, ax2) = new_figure(2)
    for votes in (1, 3):
        rows = [[r for r in res["rows"] if r["votes"] == votes] for res in per_seed]
        fs = [r["f"] for r in rows[0]]
        shrink = np.array([[r["shrink"] for r in seed] for seed in rows])  # (seeds, f)
        cos = np.array([[r["one_draw_cosine"] for r in seed] for seed in rows])
        c = "C0" if votes == 1 else "C1"
        ax1.errorbar(
            fs,
            shrink.mean(0),
            yerr=sem(shrink),
            fmt="o",
            color=c,
            capsize=3,
            label=f"measured, {votes} vote{'s' * (votes > 1)}",
        )
        ax1.plot(
            fs,
            [r["predicted"] for r in rows[0]],
            "--",
            color=c,
            label=f"predicted, {votes} vote{'s' * (votes > 1)}",
        )
        ax2.errorbar(fs, cos.mean(0), yerr=sem(cos), fmt="o-", color=c, capsize=3)
    ax1.set(xlabel="verdict flip probability f", ylabel="E[noisy gradient] / true gradient")
    ax2.set(xlabel="verdict flip probability f", ylabel="cosine of one noisy step to the true one")
    fig.legend(
        *ax1.get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False
    )
    save_figure(
        path,
        fig,
        f"Problem 9: flaky tests shrink the policy gradient ({seeds_label(per_seed)})",
        bottom=0.1,
    )


PROBLEM_7 = Problem(
    problem_7,
    Claim(
        text="rewarding the public tests teaches special-casing them (the public-hidden gap "
        "opens); hidden-test reward with an exploit detector keeps it closed",
        effect="public-hidden pass gap, last quarter, public reward minus hidden reward + detector",
        source="book",
        passage="the reward measures agreement with tests the agent can see, and the policy found "
        "a cheaper way to agree than repairing the function. ... The book's default is "
        "hidden-test reward plus exploit logging",
        cause="the weak base too rarely plays the hardcoding edit for RL to find and amplify it",
    ),
    arms_figure(
        [
            ("public_hidden_gap", "public - hidden pass rate"),
            ("hack_rate", "share of episodes hardcoded"),
            ("pass_rate", "hidden pass rate"),
        ],
        "Problem 7: public-test reward against hidden reward + detector",
    ),
)
PROBLEM_8 = Problem(
    problem_8,
    Claim(
        text="partial credit (the fraction of tests passed) lets the policy settle for partial "
        "passes: fewer full solves than the binary reward",
        effect="fixed-evaluation full-solve rate, last quarter, binary minus fraction reward",
        source="book",
        passage="Partial credit changes the optimal policy, not just the signal density. ... the "
        "fraction reward makes skipping it rational.",
        cause="the full fix is one edit that costs no more than a partial one, so the fraction "
        "reward's best episode is still the fix; a gym where a partial fix is cheaper than "
        "the full one (several edits, or a per-edit cost) would show it",
    ),
    arms_figure(
        [
            ("reward", "training reward per episode"),
            ("pass_rate", "full-solve rate (hidden tests)"),
            ("hidden_fraction", "share of hidden tests passed"),
        ],
        "Problem 8: partial credit against binary reward",
    ),
)
PROBLEM_9 = Problem(
    problem_9,
    Claim(
        text="flipping verdicts with probability f scales the expected gradient by 1 - 2f; a "
        "majority of 3 re-runs of successes restores most of it",
        effect="largest |measured - predicted gradient scale| over f and votes, in Monte Carlo "
        "standard errors of the measured scale",
        threshold=3.0,
        below=True,
        source="book",
        passage="the policy gradient of the expected observed reward is (1-2f) times the true "
        "gradient. ... a majority vote over a few re-runs for rewarded episodes is cheaper than "
        "it sounds",
        cause="the measured scale differs from p1 - p0 by more than its Monte Carlo error: the "
        "flips or the votes are not what the prediction assumes",
    ),
    draw_9,
)
PROBLEM_12 = Problem(
    problem_12,
    Claim(
        text="a per-turn step penalty teaches short episodes, down to submitting at once: in a "
        "group a short failure out-earns a long one",
        effect="turns per episode, last quarter, no penalty minus penalty 0.1 (turns)",
        source="book",
        passage="The step penalty created this incentive, and the group baseline enforces it: "
        "within a group, short failures have a higher return than long failures",
        cause="the weak base's success rate is above the penalty's break-even, so longer "
        "attempts still pay",
    ),
    arms_figure(
        [
            ("immediate_submit_frac", "share submitting at once"),
            ("mean_turns", "tool calls per episode"),
            ("pass_rate", "hidden pass rate"),
        ],
        "Problem 12: step penalty against none, from the weak base",
    ),
)
PROBLEM_13 = Problem(
    problem_13,
    Claim(
        text="scoring a truncated episode as 0 discards the correct work in it; scoring its final "
        "state with the hidden tests credits that work (the book's default for coding)",
        effect="share of groups with no learning signal (all rewards equal), last quarter, zero "
        "minus final-state scoring",
        source="book",
        passage="A third option is to run the hidden tests on the final state at truncation and "
        "reward that state as if it had been submitted, which credits correct work",
        cause="scoring truncation as 0 is learned around: on 7 of 8 seeds (10-17) that arm learns "
        "to submit within the 3-call budget (truncated 0.92-1.00 -> 0.00-0.56 of episodes), and "
        "its groups then carry signal again, while final-state scoring starts near its ceiling "
        "(final state passes 0.69-0.88 and rises), so its groups go all-pass: the per-seed "
        "difference in signal-free groups spreads over -0.32 to +0.48",
    ),
    arms_figure(
        [
            ("final_state_pass", "final state passes hidden tests"),
            ("reward", "training reward per episode"),
            ("degenerate_frac", "share of groups with no signal"),
        ],
        "Problem 13: truncation scored 0 or by the final state, 3-call budget",
    ),
)

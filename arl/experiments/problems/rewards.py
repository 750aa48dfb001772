"""Problems 7, 8, 9, 12, 13: what the reward rewards (public tests, partial credit, flaky
tests, step penalties, truncation)."""

from __future__ import annotations

import numpy as np
import torch

from arl.batch import collate
from arl.eval.metrics import run_policy
from arl.experiments.problems.common import (
    Ctx,
    first_last,
    head_mean,
    new_figure,
    plot_runs,
    rl_runs,
    save_figure,
    series,
    start,
    tail_mean,
)
from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.harness import run_tests
from arl.gym.tasks import tasks_for
from arl.losses import group_advantages, loss_weights, token_logprobs


def _fmt(runs, key, name):
    return f"{head_mean(runs[name], key):.2f} -> {tail_mean(runs[name], key):.2f}"


def problem_7(ctx: Ctx):
    """Public-test reward opens the public-hidden gap; hidden reward + the detector does not."""
    runs = rl_runs(
        ctx,
        "weak",
        {
            "public reward": {"env": {"reward": "public", "zero_exploits": False}},
            "hidden reward + detector": {"env": {"reward": "hidden", "zero_exploits": True}},
        },
        steps=ctx.pick(20, 4),
    )
    keys = ("public_pass_rate", "pass_rate", "public_hidden_gap", "hack_rate", "hacks_caught")
    res = first_last(runs, keys)
    plot_runs(
        ctx,
        runs,
        [
            ("public_hidden_gap", "public - hidden pass rate"),
            ("hack_rate", "hardcoded episodes"),
            ("pass_rate", "hidden pass rate"),
        ],
        "Problem 7: public-test reward against hidden reward + exploit detector",
    )
    pub, hid = "public reward", "hidden reward + detector"
    conclusion = (
        f"from the weak base, public-test reward: gap {_fmt(runs, 'public_hidden_gap', pub)}, "
        f"hardcoded episodes {_fmt(runs, 'hack_rate', pub)}, hidden pass "
        f"{_fmt(runs, 'pass_rate', pub)}; hidden reward with the detector: gap "
        f"{_fmt(runs, 'public_hidden_gap', hid)}, hacks {_fmt(runs, 'hack_rate', hid)} "
        f"({sum(r['hacks_caught'] for r in runs[hid])} caught and zeroed), hidden pass "
        f"{_fmt(runs, 'pass_rate', hid)} (first quarter -> last quarter of the steps)."
    )
    return res, conclusion


def problem_8(ctx: Ctx):
    """Partial credit (fraction of hidden tests) against binary and mixed rewards."""
    runs = rl_runs(
        ctx,
        "weak",
        {
            "fraction": {"env": {"reward": "fraction"}},
            "binary": {"env": {"reward": "hidden"}},
            "mixed (alpha 0.1)": {"env": {"reward": "mixed", "mixed_alpha": 0.1}},
        },
        steps=ctx.pick(25, 4),
    )
    keys = ("reward", "pass_rate", "hidden_fraction", "immediate_submit_frac")
    res = first_last(runs, keys)
    plot_runs(
        ctx,
        runs,
        [
            ("reward", "training reward"),
            ("pass_rate", "full-solve rate"),
            ("immediate_submit_frac", "submit at once"),
        ],
        "Problem 8: partial credit against binary reward",
    )
    frac_solve = tail_mean(runs["fraction"], "pass_rate")
    bin_solve = tail_mean(runs["binary"], "pass_rate")
    train = tasks_for("train")
    buggy = float(np.mean([np.mean(run_tests(t.buggy_source, t.hidden)) for t in train]))
    res["unfixed_function_credit"] = buggy
    shows = frac_solve < bin_solve - 0.05
    conclusion = (
        f"from the weak base: fraction reward {_fmt(runs, 'reward', 'fraction')} with full-solve "
        f"rate {_fmt(runs, 'pass_rate', 'fraction')} and immediate submissions "
        f"{_fmt(runs, 'immediate_submit_frac', 'fraction')}; binary reward: full-solve "
        f"{_fmt(runs, 'pass_rate', 'binary')}; mixed: full-solve "
        f"{_fmt(runs, 'pass_rate', 'mixed (alpha 0.1)')}. "
        + (
            "Partial credit cost full solves: the policy settles for partial passes."
            if shows
            else f"Partial credit did not cost full solves here: the unfixed function "
            f"already earns {buggy:.2f} of the hidden tests, but the full fix is one edit op that "
            f"costs no more than a partial one, so the fraction reward's optimum is still the fix."
        )
        + " Report the full-solve rate whatever the training reward."
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
            shrink = float(a_obs.mean(0) @ K @ a_true) / g2
            cos = (a_obs @ K @ a_true) / torch.sqrt((a_obs @ K * a_obs).sum(1) * g2).clamp(1e-30)
            p1 = 1 - f if votes == 1 else (1 - f) * (1 - f * f)
            p0 = f if votes == 1 else f * (1 - (1 - f) ** 2)
            rows.append(
                {
                    "votes": votes,
                    "f": f,
                    "shrink": shrink,
                    "predicted": p1 - p0,
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
    fig, (ax1, ax2) = new_figure(2)
    for votes in (1, 3):
        sel = [r for r in rows if r["votes"] == votes]
        fs = [r["f"] for r in sel]
        ax1.plot(fs, [r["shrink"] for r in sel], "o", label=f"measured, votes={votes}")
        ax1.plot(fs, [r["predicted"] for r in sel], "--", label=f"predicted, votes={votes}")
        ax2.plot(fs, [r["one_draw_cosine"] for r in sel], "o-", label=f"votes={votes}")
    ax1.set(xlabel="flip probability f", ylabel="E[noisy gradient] / true gradient")
    ax2.set(xlabel="flip probability f", ylabel="cosine of one noisy step to the true one")
    ax1.legend(fontsize=7)
    save_figure(ctx, fig, "Problem 9: flaky tests shrink and blur the policy gradient")
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


def problem_12(ctx: Ctx):
    """A per-turn step penalty teaches immediate submission; without it, it does not."""
    runs = rl_runs(
        ctx,
        "weak",
        {
            "no penalty": {"env": {"step_penalty": 0.0}},
            "penalty 0.02 (book)": {"env": {"step_penalty": 0.02}},
            "penalty 0.1": {"env": {"step_penalty": 0.1}},
        },
        steps=ctx.pick(25, 4),
    )
    keys = ("immediate_submit_frac", "pass_rate", "mean_turns", "reward")
    res = first_last(runs, keys)
    res["break_even_success_rate"] = {
        "0.02": "a 4-turn attempt beats submit-at-once only if it succeeds > 0.06",
        "0.1": "a 4-turn attempt beats submit-at-once only if it succeeds > 0.30",
    }
    plot_runs(
        ctx,
        runs,
        [
            ("immediate_submit_frac", "episodes that submit at once"),
            ("pass_rate", "hidden pass rate"),
            ("mean_turns", "turns"),
        ],
        "Problem 12: step penalty against none (from the weak base)",
    )
    names = list(runs)
    rise = {
        n: tail_mean(runs[n], "immediate_submit_frac") - head_mean(runs[n], "immediate_submit_frac")
        for n in names
    }
    res["immediate_submit_rise"] = rise
    shows = max(rise[n] for n in names[1:]) > rise[names[0]] + 0.05
    conclusion = (
        "from the weak base, immediate submissions / pass rate (first -> last quarter): "
        + "; ".join(
            f"{n}: {_fmt(runs, 'immediate_submit_frac', n)} / {_fmt(runs, 'pass_rate', n)}"
            for n in names
        )
        + (
            ". The penalty raised immediate submission beyond the no-penalty run: within a group "
            "a short failure out-earns a long one, so the baseline rewards quitting."
            if shows
            else ". In this many steps the penalty did not raise immediate submission more "
            "than 0.05 beyond the no-penalty run: the mechanism did not show at this scale."
        )
    )
    return res, conclusion


def problem_13(ctx: Ctx):
    """Truncation scored 0 against the final state scored, with a budget below the habit."""
    turns = 3  # the cold start's habit is read, edit, test, submit: 4 calls
    runs = rl_runs(
        ctx,
        "cold",
        {
            "truncation zero": {"env": {"truncation": "zero", "max_turns": turns}},
            "truncation score": {"env": {"truncation": "score", "max_turns": turns}},
        },
        steps=ctx.pick(25, 4),
    )
    keys = ("truncated_frac", "final_state_pass", "pass_rate", "reward")
    res = first_last(runs, keys)
    res["max_turns"] = turns
    plot_runs(
        ctx,
        runs,
        [
            ("truncated_frac", "episodes truncated"),
            ("final_state_pass", "final state passes hidden tests"),
            ("reward", "training reward"),
        ],
        f"Problem 13: truncation rule with a {turns}-call budget (cold start)",
    )
    z, s = "truncation zero", "truncation score"
    dz = tail_mean(runs[z], "truncated_frac") - head_mean(runs[z], "truncated_frac")
    ds = tail_mean(runs[s], "truncated_frac") - head_mean(runs[s], "truncated_frac")
    res["truncated_change"] = {"zero": dz, "score": ds}
    zero_silent = max(series(runs[z], "reward")) == 0
    conclusion = (
        f"with a {turns}-call budget, scoring truncation as 0: truncated "
        f"{_fmt(runs, 'truncated_frac', z)}, final state passes "
        f"{_fmt(runs, 'final_state_pass', z)}, reward {_fmt(runs, 'reward', z)}; scoring the "
        f"final state: truncated {_fmt(runs, 'truncated_frac', s)}, final state passes "
        f"{_fmt(runs, 'final_state_pass', s)}, reward {_fmt(runs, 'reward', s)}. "
        + (
            "Under zero no episode was ever rewarded, so there was no gradient at all: correct "
            "work left unsubmitted is invisible. "
            if zero_silent
            else f"Under zero the truncated fraction changed by {dz:+.2f}. "
        )
        + (
            f"Scoring the state credits that work, and the policy stops submitting "
            f"(truncation {ds:+.2f}): add a small submit bonus among successes to teach stopping."
            if ds > 0.05
            else f"Scoring the state changed truncation by {ds:+.2f}."
        )
    )
    return res, conclusion

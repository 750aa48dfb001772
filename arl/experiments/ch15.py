"""Chapter 15 reproduced: SFT, RFT and expert iteration, DPO, four recipes, design problems.

`run(config)` measures every number of the book's Chapter 15 table on the BugFix gym
and TinyAgent for one seed, the sections in order in one process; ch15_plan runs the same
sections as tasks across processes (each as soon as the models it needs are made);
ch15_seeds runs the seeds, resumes finished ones, and writes results.json, table.md
(ch15_table: each claim as a rule with 2-SE margins; ch15_summary: k of N seeds) and the
figures (ch15_figures). Each section is one small function of the models it starts from;
all of them start from the same weak base. Nothing here is tuned to the book's numbers: the
rules check the mechanism (an ordering, a plateau, a collapse), never a value.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from arl.batch import collate
from arl.eval.metrics import evaluate, run_policy, token_accounting
from arl.experiments.ch15_config import Ch15Config
from arl.experiments.ch15_probes import copy_probe, op_choice
from arl.gym import default_vocab
from arl.gym.families import FAMILIES
from arl.gym.fresh import fresh_tasks
from arl.gym.tasks import all_tasks, tasks_for
from arl.losses import masked_mean, sft_loss, token_logprobs
from arl.model import TinyAgent
from arl.progress import Progress, report, reporting
from arl.rollout import vocab_record
from arl.train.bases import (
    new_model,
    oracle_demos,
    oracle_sft_data,
    train_oracle_sft,
    weak_base,
)
from arl.train.checkpoint import save_checkpoint
from arl.train.dpo import build_pairs, dpo_train
from arl.train.pg import train_pg
from arl.train.rft import expert_iteration, gradient_identity
from arl.train.sft import sft_train

# --- evaluation shared by every section ----------------------------------------------------


def evaluator(cfg: Ch15Config, offset: int) -> Callable[[int, TinyAgent], dict]:
    """A hook that evaluates both splits at a step; seeds differ per section and step."""

    def hook(step: int, model: TinyAgent) -> dict:
        m = eval_both(model, cfg.eval_samples, cfg.base.seed * 101 + offset + step)
        report(f"step {step}: train {m['train']:.2f}, held-out {m['heldout']:.2f}")
        return m

    return hook


def eval_both(model: TinyAgent, samples: int, seed: int) -> dict:
    """Hidden pass rate (overall and per family), malformed calls, reads and action entropy
    on both splits."""
    out = {}
    for split in ("train", "heldout"):
        m, trajs = evaluate(model, tasks_for(split), samples, seed=seed)
        family = {t.name: t.family for t in tasks_for(split)}
        out[split] = m["pass_rate"]
        passed = {f: [t.passed for t in trajs if family[t.task] == f] for f in FAMILIES}
        out[f"{split}_family"] = {f: sum(v) / len(v) for f, v in passed.items()}
        out[f"{split}_public"] = m["public_pass_rate"]
        out[f"{split}_malformed"] = m["malformed_per_episode"]
        out[f"{split}_read"] = m["read_fraction"]
        out[f"{split}_entropy"] = m["action_entropy"]
        out[f"{split}_first_call_entropy"] = m["first_call_entropy"]
    return out


def eval_fresh(model: TinyAgent, samples: int, seed: int) -> dict:
    """Hidden pass rate (overall and per family) on the fresh split (arl.gym.fresh: 20 new
    functions of the five families, listing-disjoint from training and held-out): the transfer
    rows report it beside held-out."""
    tasks = fresh_tasks()
    m, trajs = evaluate(model, tasks, samples, seed=seed)
    family = {t.name: t.family for t in tasks}
    passed = {f: [t.passed for t in trajs if family[t.task] == f] for f in FAMILIES}
    return {
        "fresh": m["pass_rate"],
        "fresh_family": {f: sum(v) / len(v) for f, v in passed.items()},
    }


# --- 15.1 the action mask --------------------------------------------------------------------


def section_tokens(cfg: Ch15Config) -> dict:
    """Where an unmasked loss would spend its weight, and both losses at initialization."""
    demos = oracle_demos()
    acc = token_accounting(demos, len(default_vocab()))
    model = new_model(cfg.base)
    with torch.no_grad():
        batch = collate(demos)
        logp = token_logprobs(model, batch)
        all_positions = (batch.owners >= 0).float()
        acc["masked_loss_init"] = float(sft_loss(logp, batch.action_mask))
        acc["unmasked_loss_init"] = float(-masked_mean(logp, all_positions))
    acc["log_vocab"] = math.log(acc["vocab_size"])
    return acc


# --- 15.2 warm starts --------------------------------------------------------------------------


def eval_weak(cfg: Ch15Config, weak: TinyAgent) -> dict:
    """The weak base's evaluation on both splits (its own evaluation seed)."""
    return eval_both(weak, cfg.eval_samples, seed=cfg.base.seed * 7 + 1)


def section_sft(cfg: Ch15Config) -> tuple[dict, TinyAgent, TinyAgent, TinyAgent]:
    """Weak base metrics, then oracle SFT evaluated every few steps; returns the models too."""
    weak = weak_base(cfg.base)
    weak_part = sft_weak_part(cfg, weak)
    oracle_part, cold, final = sft_oracle_part(cfg)
    return sft_result(weak_part, oracle_part), weak, cold, final


def sft_weak_part(cfg: Ch15Config, weak: TinyAgent) -> dict:
    """What section_sft measures of the weak base alone: its evaluation and its copy rate."""
    return {
        "eval": eval_weak(cfg, weak),
        "copy_rate": copy_probe(weak, all_tasks())["copy_rate"],
        "fresh": eval_fresh(weak, cfg.eval_samples, cfg.base.seed * 7 + 3),
    }


def sft_oracle_part(cfg: Ch15Config) -> tuple[dict, TinyAgent, TinyAgent]:
    """Oracle SFT from the (cached) weak base, evaluated every few steps: its curve, its cold
    start and the final model's copy rate; and the cold-start and final models."""
    curve: list[dict] = []

    def hook(step: int, model: TinyAgent) -> dict:
        curve.append({"step": step, **evaluator(cfg, 0)(step, model)})
        return curve[-1]

    final, cold, history = train_oracle_sft(cfg.base, hook, cfg.sft_eval_every)
    cold_info = next(r["cold_start"] for r in history if "cold_start" in r)
    copy_rate = copy_probe(final, all_tasks())["copy_rate"]
    fresh = eval_fresh(final, cfg.eval_samples, cfg.base.seed * 101 + 5000)
    part = {"curve": curve, "cold_start": cold_info, "copy_rate": copy_rate, "fresh": fresh}
    return part, cold, final


def sft_result(weak_part: dict, oracle_part: dict) -> dict:
    """Section 15.2's results from its two parts, under their keys in results.json."""
    return {
        "weak_base": weak_part["eval"],
        "oracle_sft_curve": oracle_part["curve"],
        "cold_start": oracle_part["cold_start"],
        "copy_probe": {"weak_base": weak_part["copy_rate"], "oracle_sft": oracle_part["copy_rate"]},
        "fresh": {"weak_base": weak_part["fresh"], "oracle_sft": oracle_part["fresh"]},
    }


# --- 15.3 RFT and expert iteration -----------------------------------------------------------


def section_rft(cfg: Ch15Config, weak: TinyAgent) -> dict:
    """The gradient identity on a weak-base batch, then expert iteration from the weak base."""
    batch: list = []
    for attempt in range(8):  # a tiny (quick) model may need more than one draw to succeed once
        batch += run_policy(
            weak, tasks_for("train"), cfg.identity_samples, seed=cfg.base.seed + 31 + attempt
        )
        if 0 < sum(t.passed for t in batch) < len(batch):
            break
    identity = gradient_identity(weak, batch)
    model = copy.deepcopy(weak)
    config = replace(cfg.rft, seed=cfg.base.seed)
    rounds = expert_iteration(model, tasks_for("train"), config, evaluator(cfg, 100))
    return {"identity": identity, "rounds": rounds}


def section_public_rft(cfg: Ch15Config, weak: TinyAgent) -> dict:
    """RFT filtered on public tests: the hack share of the kept set and the two pass rates."""
    model = copy.deepcopy(weak)
    config = replace(cfg.rft, filter="public", rounds=cfg.public_rft_rounds, seed=cfg.base.seed)
    return {"rounds": expert_iteration(model, tasks_for("train"), config, evaluator(cfg, 200))}


# --- 15.4 DPO ------------------------------------------------------------------------------------


def section_dpo(cfg: Ch15Config, weak: TinyAgent) -> dict:
    """Offline DPO on weak-base pairs, without and with an NLL term on chosen episodes."""
    samples = run_policy(weak, tasks_for("train"), cfg.dpo_samples, seed=cfg.base.seed + 41)
    pairs = build_pairs(samples, random.Random(cfg.base.seed))
    out: dict = {"pairs": len(pairs), "sampled": len(samples)}
    for name, nll in (("dpo", 0.0), ("dpo_nll", 1.0)):
        model = copy.deepcopy(weak)
        config = replace(cfg.dpo, nll_weight=nll)
        history = dpo_train(model, weak, pairs, config, evaluator(cfg, 300), cfg.dpo_eval_every)
        out[name] = [r for r in history if "train" in r]
    return out


# --- 15.5 four recipes: the RL recipes -------------------------------------------------------


def reinforce(
    model: TinyAgent,
    cfg: Ch15Config,
    steps: int,
    seed: int,
    hook: Callable[[int, TinyAgent], dict],
) -> list[dict]:
    """Section 15.5's minimal REINFORCE (G episodes on each of n tasks, r - mean(group)),
    run by the full trainer with every other knob off; returns the hook's records."""
    config = replace(cfg.rl, seed=seed)
    history = train_pg(model, config, tasks_for("train"), steps, hook, cfg.rl_eval_every)
    records = [{"rl_step": r["step"], **r} for r in history if "train" in r]
    records[-1]["fresh"] = eval_fresh(model, cfg.eval_samples, cfg.base.seed * 101 + seed + 6000)
    return records


def rl_from_cold(cfg: Ch15Config, cold: TinyAgent) -> list[dict]:
    """The SFT-then-RL recipe's RL arm: REINFORCE from the cold-start checkpoint."""
    model = copy.deepcopy(cold)
    return reinforce(model, cfg, cfg.rl_steps_cold, cfg.base.seed + 1, evaluator(cfg, 1000))


def rl_from_weak(cfg: Ch15Config, weak: TinyAgent) -> list[dict]:
    """The RL-only recipe: REINFORCE from the weak base."""
    return reinforce(
        copy.deepcopy(weak), cfg, cfg.rl.steps, cfg.base.seed + 2, evaluator(cfg, 2000)
    )


def section_recipes(cfg: Ch15Config, weak: TinyAgent, cold: TinyAgent, sft: dict, rft: dict):
    """The four recipes on a shared x-axis of gradient steps, and what each one consumed."""
    return recipes_result(cfg, sft, rft, rl_from_cold(cfg, cold), rl_from_weak(cfg, weak))


def recipes_result(cfg: Ch15Config, sft: dict, rft: dict, sft_then_rl: list, rl_only: list):
    """Section 15.5's results from the SFT and RFT sections and the two RL arms' records."""
    start = sft["cold_start"]["step"]
    weak_row = sft["oracle_sft_curve"][0]

    def points(records: list[dict], key: str, offset: int = 0) -> list[dict]:
        return [
            {"step": r[key] + offset, "train": r["train"], "heldout": r["heldout"]} for r in records
        ]

    curves = {
        "oracle_sft": points(sft["oracle_sft_curve"], "step"),
        "rft": [{"step": 0, "train": weak_row["train"], "heldout": weak_row["heldout"]}]
        + points(rft["rounds"], "steps"),
        "sft_then_rl": points(sft_then_rl, "rl_step", start),
        "rl_only": points(rl_only, "rl_step"),
    }
    per_step = cfg.rl.episodes_per_step
    rft_sampled = cfg.rft.rounds * cfg.rft.samples_per_task * len(tasks_for("train"))

    def used(demos: int, episodes: int) -> dict:  # every sampled episode is verified once
        return {"demonstrations": demos, "sampled_episodes": episodes, "verifier_calls": episodes}

    cost = {
        "oracle_sft": used(20, 0),
        "rft": used(0, rft_sampled),
        "sft_then_rl": used(20, cfg.rl_steps_cold * per_step),
        "rl_only": used(0, cfg.rl.steps * per_step),
    }
    fresh = {  # the transfer rows' fresh split, beside held-out (runs before it: none)
        "oracle_sft": sft.get("fresh", {}).get("oracle_sft", {}).get("fresh"),
        "sft_then_rl": sft_then_rl[-1].get("fresh", {}).get("fresh"),
        "rl_only": rl_only[-1].get("fresh", {}).get("fresh"),
        "weak_base": sft.get("fresh", {}).get("weak_base", {}).get("fresh"),
    }
    return {
        "curves": curves,
        "cost": cost,
        "sft_then_rl": sft_then_rl,
        "rl_only": rl_only,
        "fresh": fresh,
    }


# --- 15.6 design problems ------------------------------------------------------------------


def mixed_groups(outcomes: dict[str, list[bool]], group: int) -> list[bool]:
    """Each task's outcomes cut into consecutive groups of `group`: True where a group mixes
    passes and failures, so that a group baseline gives it nonzero advantages."""
    return [
        0 < sum(v[i : i + group]) < group
        for v in outcomes.values()
        for i in range(0, len(v) - group + 1, group)
    ]


def mixed_group_fraction(model: TinyAgent, group: int, groups: int, seed: int) -> dict:
    """Share of groups of `group` episodes on a held-out task that mix passes and failures,
    over `groups` groups per task (10 tasks x 10 groups: a standard error under 0.05)."""
    trajs = run_policy(model, tasks_for("heldout"), group * groups, seed=seed)
    by_task: dict[str, list[bool]] = {}
    for t in trajs:
        by_task.setdefault(t.task, []).append(t.passed)
    mixed = mixed_groups(by_task, group)
    return {
        "mixed_fraction": sum(mixed) / len(mixed),
        "pass_rate": sum(t.passed for t in trajs) / len(trajs),
    }


def section_groups(cfg: Ch15Config, cold: TinyAgent, final: TinyAgent) -> dict:
    """Mixed-outcome groups on held-out tasks at the cold-start step and after oracle SFT."""
    probe = (cfg.group_probe, cfg.group_probe_groups, cfg.base.seed + 61)
    return {
        "tasks": len(tasks_for("heldout")),
        "groups": len(tasks_for("heldout")) * cfg.group_probe_groups,
        "step_cold": mixed_group_fraction(cold, *probe),
        "step_final": mixed_group_fraction(final, *probe),
    }


def section_template(cfg: Ch15Config, weak: TinyAgent, final_sft: TinyAgent) -> dict:
    """Demonstrations rendered without <obs> </obs>: train on them (from the weak base), act
    in the real format."""
    stripped = oracle_sft_data(wrap_obs=False)  # the oracle-SFT data, only the template differs
    model = copy.deepcopy(weak)
    steps = cfg.base.oracle_sft.steps
    say = lambda step, _: report(f"SFT on stripped demos, step {step}/{steps}")  # noqa: E731
    sft_train(model, stripped, cfg.base.oracle_sft, hook=say, hook_every=1)
    m, trajs = evaluate(model, tasks_for("train"), cfg.eval_samples, seed=cfg.base.seed + 51)
    batch = collate(oracle_demos())
    with torch.no_grad():
        nll_mismatch, nll_matched = (
            float(sft_loss(token_logprobs(m, batch), batch.action_mask)) for m in (model, final_sft)
        )
    return {
        "malformed_per_episode": m["malformed_per_episode"],
        "train_pass": m["pass_rate"],
        "read_fraction": m["read_fraction"],
        "nll_per_action_token": nll_mismatch,
        "nll_per_action_token_matched": nll_matched,
        "op_choice": op_choice(trajs),  # how it fails: a wrong op, or no edit at all
    }


# --- the whole chapter ---------------------------------------------------------------------

SECTIONS = ("tokens", "sft", "rft", "public_rft", "dpo", "recipes", "groups", "template")


def eval_n(cfg: Ch15Config) -> dict[str, int]:
    """Episodes per evaluation on each split."""
    return {s: len(tasks_for(s)) * cfg.eval_samples for s in ("train", "heldout")}


def run(cfg: Ch15Config, progress: Callable[[str], None] = lambda name: None) -> dict:
    """Every section once, in order, in this process, for one seed; returns the results
    (plain JSON-able data, plus the three models under `_models`). ch15_plan runs the same
    sections split into tasks across processes, with the same results."""
    R: dict = {"seed": cfg.base.seed, "timings_s": {}, "eval_n": eval_n(cfg)}

    def timed(name: str, fn):
        progress(name)
        t0 = time.perf_counter()
        with reporting(lambda text: progress(f"{name}: {text}")):  # lines from inside it
            out = fn()
        R["timings_s"][name] = round(time.perf_counter() - t0, 1)
        return out

    R["tokens"] = timed("tokens", lambda: section_tokens(cfg))
    sft, weak, cold, final = timed("sft", lambda: section_sft(cfg))
    R["sft"] = sft
    R["rft"] = timed("rft", lambda: section_rft(cfg, weak))
    R["public_rft"] = timed("public_rft", lambda: section_public_rft(cfg, weak))
    R["dpo"] = timed("dpo", lambda: section_dpo(cfg, weak))
    R["recipes"] = timed("recipes", lambda: section_recipes(cfg, weak, cold, sft, R["rft"]))
    R["groups"] = timed("groups", lambda: section_groups(cfg, cold, final))
    R["template"] = timed("template", lambda: section_template(cfg, weak, final))
    R["_models"] = {"weak_base": weak, "sft_cold": cold, "sft_final": final}
    return R


def save_models(models: dict[str, TinyAgent], checkpoints: str, seed: int) -> None:
    """The weak base and the two SFT models as checkpoints under `checkpoints`, each recording
    the environment it speaks (BugFix: `arl export hf`'s default)."""
    for name, model in models.items():
        extra = {"seed": seed, **vocab_record("bugfix")}
        save_checkpoint(model, Path(checkpoints) / name, extra=extra)


def run_seed(cfg: Ch15Config, seed: int, checkpoints: str = "") -> dict:
    """One seed in this process, one torch thread, the sections in order; a progress line per
    section goes to stderr (`[seed 0] dpo (at 12 s)`). Saves the three models under
    `checkpoints` if given. Returns JSON-able results."""
    torch.set_num_threads(1)
    scfg = replace(cfg, base=replace(cfg.base, seed=seed))
    R = run(scfg, Progress(f"[seed {seed}]").event)
    if checkpoints:
        save_models(R["_models"], checkpoints, seed)
    return {k: v for k, v in R.items() if not k.startswith("_")}

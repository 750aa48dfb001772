"""Chapter 15 reproduced: SFT, RFT and expert iteration, DPO, four recipes, design problems.

`run(config)` measures every number of the book's Chapter 15 table on the BugFix gym
and TinyAgent; `main(args)` (the `arl reproduce ch15` command) writes results.json,
table.md (book beside measured, and whether the mechanism reproduced) and figures
15.1 to 15.4. Each section is one small function; all of them start from the same
weak base. Nothing here is tuned to the book's numbers: the verdicts check the
mechanism (an ordering, a plateau, a collapse), never a value.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from arl.batch import collate
from arl.errors import ArlError
from arl.eval.metrics import evaluate, run_policy, token_accounting
from arl.experiments.bases import BaseConfig, new_model, oracle_demos, train_oracle_sft, weak_base
from arl.gym.tasks import tasks_for
from arl.losses import masked_mean, sft_loss, token_logprobs
from arl.model import TinyAgent, save_checkpoint
from arl.rollout import scripted_rollout
from arl.train.dpo import DPOConfig, build_pairs, dpo_train
from arl.train.pg import minimal_reinforce, train_pg
from arl.train.rft import RFTConfig, expert_iteration, gradient_identity
from arl.train.sft import sft_train


@dataclass(frozen=True)
class Ch15Config:
    """Everything the chapter's experiments use. Defaults are the book's settings."""

    base: BaseConfig = field(default_factory=BaseConfig)  # weak base and oracle SFT
    eval_samples: int = 4  # episodes per task per evaluation (80 train, 40 held-out)
    sft_eval_every: int = 10  # oracle-SFT evaluation interval, in steps
    identity_samples: int = 4  # episodes per training task for the gradient identity (80)
    rft: RFTConfig = field(default_factory=RFTConfig)  # expert iteration, hidden-test filter
    public_rft_rounds: int = 3  # rounds of RFT with the public-test filter
    dpo_samples: int = 16  # weak-base episodes per training task to build DPO pairs from
    dpo: DPOConfig = field(default_factory=DPOConfig)
    dpo_eval_every: int = 25
    rl_group: int = 8  # G episodes per task
    rl_tasks_per_step: int = 8  # tasks per RL step
    rl_lr: float = 2e-4
    rl_steps_cold: int = 40  # RL steps after the step-20 SFT checkpoint
    rl_steps_only: int = 60  # RL steps from the weak base
    rl_eval_every: int = 10
    group_probe: int = 8  # samples per held-out task when counting mixed-outcome groups

    def quick(self) -> Ch15Config:
        """A reduced run for tests: same sections, far fewer steps and samples."""
        return replace(
            self,
            base=self.base.quick(),
            eval_samples=1,
            sft_eval_every=10,
            identity_samples=2,
            rft=replace(self.rft, rounds=2, samples_per_task=4, steps_per_round=5),
            public_rft_rounds=2,
            dpo_samples=4,
            dpo=replace(self.dpo, steps=10),
            dpo_eval_every=5,
            rl_tasks_per_step=4,
            rl_group=4,
            rl_steps_cold=4,
            rl_steps_only=4,
            rl_eval_every=2,
            group_probe=4,
        )


# --- evaluation shared by every section ----------------------------------------------------


def evaluator(cfg: Ch15Config, offset: int) -> Callable[[int, TinyAgent], dict]:
    """A hook that evaluates both splits at a step; seeds differ per section and step."""
    return lambda step, model: eval_both(
        model, cfg.eval_samples, cfg.base.seed * 101 + offset + step
    )


def eval_both(model: TinyAgent, samples: int, seed: int) -> dict:
    """Hidden pass rate, malformed calls, reads and action entropy on both splits."""
    out = {}
    for split in ("train", "heldout"):
        m, _ = evaluate(model, tasks_for(split), samples, seed=seed)
        out[split] = m["pass_rate"]
        out[f"{split}_public"] = m["public_pass_rate"]
        out[f"{split}_malformed"] = m["malformed_per_episode"]
        out[f"{split}_read"] = m["read_fraction"]
        out[f"{split}_entropy"] = m["action_entropy"]
        out[f"{split}_first_call_entropy"] = m["first_call_entropy"]
    return out


# --- 15.1 the action mask --------------------------------------------------------------------


def section_tokens(cfg: Ch15Config) -> dict:
    """Where an unmasked loss would spend its weight, and both losses at initialization."""
    demos = oracle_demos()
    acc = token_accounting(demos)
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


def section_sft(cfg: Ch15Config) -> tuple[dict, TinyAgent, TinyAgent, TinyAgent]:
    """Weak base metrics, then oracle SFT evaluated every few steps; returns the models too."""
    weak = weak_base(cfg.base)
    weak_eval = eval_both(weak, cfg.eval_samples, seed=cfg.base.seed * 7 + 1)
    curve: list[dict] = []

    def hook(step: int, model: TinyAgent) -> dict:
        curve.append({"step": step, **evaluator(cfg, 0)(step, model)})
        return curve[-1]

    final, cold, _ = train_oracle_sft(cfg.base, hook, cfg.sft_eval_every)
    return {"weak_base": weak_eval, "oracle_sft_curve": curve}, weak, cold, final


# --- 15.3 RFT and expert iteration -----------------------------------------------------------


def section_rft(cfg: Ch15Config, weak: TinyAgent) -> dict:
    """The gradient identity on a weak-base batch, then expert iteration from the weak base."""
    batch: list = []
    for attempt in range(8):  # a tiny (quick) model may need more than one draw to succeed once
        batch += run_policy(weak, tasks_for("train"), cfg.identity_samples,
                            seed=cfg.base.seed + 31 + attempt)  # fmt: skip
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
    config = minimal_reinforce(
        lr=cfg.rl_lr, group_size=cfg.rl_group, tasks_per_step=cfg.rl_tasks_per_step, seed=seed
    )
    history = train_pg(model, config, tasks_for("train"), steps, hook, cfg.rl_eval_every)
    return [{"rl_step": r["step"], **r} for r in history if "train" in r]


def section_recipes(cfg: Ch15Config, weak: TinyAgent, cold: TinyAgent, sft: dict, rft: dict):
    """The four recipes on a shared x-axis of gradient steps, and what each one consumed."""
    start = cfg.base.cold_start_step

    sft_then_rl = reinforce(copy.deepcopy(cold), cfg, cfg.rl_steps_cold, cfg.base.seed + 1,
                            evaluator(cfg, 1000))  # fmt: skip
    rl_only = reinforce(copy.deepcopy(weak), cfg, cfg.rl_steps_only, cfg.base.seed + 2,
                        evaluator(cfg, 2000))  # fmt: skip
    weak_row = sft["oracle_sft_curve"][0]

    def points(records: list[dict], key: str, offset: int = 0) -> list[dict]:
        return [{"step": r[key] + offset, "train": r["train"], "heldout": r["heldout"]}
                for r in records]  # fmt: skip

    curves = {
        "oracle_sft": points(sft["oracle_sft_curve"], "step"),
        "rft": [{"step": 0, "train": weak_row["train"], "heldout": weak_row["heldout"]}]
        + points(rft["rounds"], "steps"),
        "sft_then_rl": points(sft_then_rl, "rl_step", start),
        "rl_only": points(rl_only, "rl_step"),
    }
    per_step = cfg.rl_group * cfg.rl_tasks_per_step
    rft_sampled = cfg.rft.rounds * cfg.rft.samples_per_task * len(tasks_for("train"))
    cost = {
        "oracle_sft": {"demonstrations": 20, "sampled_episodes": 0, "verifier_calls": 0},
        "rft": {"demonstrations": 0, "sampled_episodes": rft_sampled,
                "verifier_calls": rft_sampled},
        "sft_then_rl": {"demonstrations": 20, "sampled_episodes": cfg.rl_steps_cold * per_step,
                        "verifier_calls": cfg.rl_steps_cold * per_step},
        "rl_only": {"demonstrations": 0, "sampled_episodes": cfg.rl_steps_only * per_step,
                    "verifier_calls": cfg.rl_steps_only * per_step},
    }  # fmt: skip
    return {"curves": curves, "cost": cost, "sft_then_rl": sft_then_rl, "rl_only": rl_only}


# --- 15.6 design problems ------------------------------------------------------------------


def mixed_group_fraction(model: TinyAgent, samples: int, seed: int) -> dict:
    """Share of held-out tasks whose G samples mix passes and failures (nonzero advantages)."""
    trajs = run_policy(model, tasks_for("heldout"), samples, seed=seed)
    by_task: dict[str, list[bool]] = {}
    for t in trajs:
        by_task.setdefault(t.task, []).append(t.passed)
    mixed = [0 < sum(v) < len(v) for v in by_task.values()]
    return {
        "mixed_fraction": sum(mixed) / len(mixed),
        "pass_rate": sum(t.passed for t in trajs) / len(trajs),
    }


def section_template(cfg: Ch15Config, final_sft: TinyAgent) -> dict:
    """Demonstrations rendered without <obs> </obs>: train on them, act in the real format."""
    stripped = [scripted_rollout("oracle", t, seed=0, wrap_obs=False) for t in tasks_for("train")]
    model = weak_base(cfg.base)
    sft_train(model, stripped, cfg.base.oracle_sft, hook_every=0)
    m, _ = evaluate(model, tasks_for("train"), cfg.eval_samples, seed=cfg.base.seed + 51)
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
    }


# --- the whole chapter ---------------------------------------------------------------------

SECTIONS = ("tokens", "sft", "rft", "public_rft", "dpo", "recipes", "groups", "template")


def run(cfg: Ch15Config, progress: Callable[[str], None] = lambda name: None) -> dict:
    """Every section once, for one seed; returns the results (plain JSON-able data)."""
    R: dict = {"seed": cfg.base.seed, "timings_s": {}}

    def timed(name: str, fn):
        progress(name)
        t0 = time.perf_counter()
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
    R["groups"] = timed("groups", lambda: {
        "step_cold": mixed_group_fraction(cold, cfg.group_probe, cfg.base.seed + 61),
        "step_final": mixed_group_fraction(final, cfg.group_probe, cfg.base.seed + 61),
    })  # fmt: skip
    R["template"] = timed("template", lambda: section_template(cfg, final))
    R["_models"] = {"weak_base": weak, "sft_cold": cold, "sft_final": final}
    return R


@dataclass
class Row:
    """One line of the book-versus-measured table."""

    key: str
    quantity: str
    book: str
    measured: dict[str, float]  # named measured numbers
    fmt: str  # how to print `measured`, a format string over its keys
    reproduced: bool  # whether the mechanism (the rule) holds
    rule: str  # what "reproduced" checks


def rows(R: dict) -> list[Row]:
    """The chapter's table, measured, with a rule per row that checks the mechanism."""
    tok, sft, rft, pub, dpo = R["tokens"], R["sft"], R["rft"], R["public_rft"], R["dpo"]
    weak, last = sft["weak_base"], sft["oracle_sft_curve"][-1]
    rounds, ident = rft["rounds"], rft["identity"]
    d_plain, d_nll = dpo["dpo"][-1], dpo["dpo_nll"][-1]
    curves, groups, tpl = R["recipes"]["curves"], R["groups"], R["template"]
    final = {k: v[-1] for k, v in curves.items()}
    never_init = all(r["family_share"]["init"] == 0 for r in rounds)
    held_max = max(r["heldout"] for r in rounds)
    out = [
        Row("action_share", "action share of predicted positions, 20 oracle demos",
            "19% (tool output 63%)",
            {"action": tok["action_share"], "tool": tok["observation_share"]},
            "{action:.0%} (tool output {tool:.0%})",
            tok["action_share"] < 0.3 and tok["observation_share"] > 0.5,
            "actions < 30% and tool output > 50% of predicted positions"),
        Row("init_losses", "masked / unmasked loss at initialization vs log V",
            "both near log 316 = 5.76",
            {"masked": tok["masked_loss_init"], "unmasked": tok["unmasked_loss_init"],
             "logv": tok["log_vocab"]},
            "{masked:.2f} / {unmasked:.2f} (log V = {logv:.2f})",
            abs(tok["masked_loss_init"] - tok["log_vocab"]) < 0.5
            and abs(tok["unmasked_loss_init"] - tok["log_vocab"]) < 0.5,
            "both within 0.5 nats of log V: the value does not reveal the mask"),
        Row("weak_base", "weak base: malformed / pass train, held-out / reads / entropy",
            "0.06 / 0.14, 0.14 / 29% / 0.25 nats",
            {"mal": weak["train_malformed"], "tr": weak["train"], "ho": weak["heldout"],
             "read": weak["train_read"], "ent": weak["train_entropy"],
             "ent1": weak["train_first_call_entropy"]},
            "{mal:.2f} / {tr:.2f}, {ho:.2f} / {read:.0%} / {ent:.2f} nats (first call {ent1:.2f})",
            weak["train_malformed"] < 0.5 and max(weak["train"], weak["heldout"]) <= 0.3,
            "format (malformed < 0.5) without skill (pass <= 0.3, guessing level)"),
        Row("oracle_sft", "oracle SFT from the weak base: train / held-out / entropy",
            "0.99 / ~0.9, entropy 0.25 -> 0.02 nats (~40 steps)",
            {"tr": last["train"], "ho": last["heldout"], "e0": weak["train_entropy"],
             "e1": last["train_entropy"], "steps": last["step"]},
            "{tr:.2f} / {ho:.2f}, entropy {e0:.2f} -> {e1:.3f} nats ({steps:.0f} steps)",
            last["train"] >= 0.9 and last["heldout"] >= 0.7
            and last["train_entropy"] <= weak["train_entropy"] / 10,
            "train >= 0.9, held-out >= 0.7, entropy falls >= 10x"),
        Row("rft_identity", "0/1 PG gradient = SFT-on-kept gradient x kept/all action tokens",
            "exact to rounding; mean baseline cosine 0.985",
            {"err": ident["relative_error"], "ratio": ident["kept_token_ratio"],
             "cos": ident["cosine_mean_baseline_sft"], "p": ident["success_rate"]},
            "relative error {err:.1e} at ratio {ratio:.4f}; mean baseline cosine {cos:.3f} "
            "(success rate {p:.2f})",
            ident["relative_error"] < 1e-4 and ident["cosine_mean_baseline_sft"] < 1 - 1e-4,
            "relative error < 1e-4; the mean baseline changes the direction"),
        Row("expert_iteration", "expert iteration, 4 rounds: train pass after each round",
            "0.15 -> 0.33 -> 0.68 -> ~0.75 (ceiling 0.80, init never solved); held-out 0.10-0.23",
            {"r0": weak["train"], **{f"r{i + 1}": r["train"] for i, r in enumerate(rounds)},
             "ho": held_max},
            " -> ".join(f"{{r{i}:.2f}}" for i in range(len(rounds) + 1))
            + "; held-out <= {ho:.2f}",
            rounds[-1]["train"] > weak["train"] + 0.2 and never_init
            and rounds[-1]["train"] <= 0.85 and held_max <= 0.4,
            "rises > 0.2, init never kept, stays under the 0.8 ceiling, held-out <= 0.4"),
        Row("dpo", "offline DPO: rejected / chosen change; train; malformed; held-out",
            "rejected -45 nats, chosen +0.74; train 0.41; malformed 2.0-2.4; held-out 0",
            {"rej": d_plain["rejected_delta"], "ch": d_plain["chosen_delta"],
             "tr": d_plain["train"], "mal": d_plain["train_malformed"],
             "ho": d_plain["heldout"]},
            "rejected {rej:+.0f} nats, chosen {ch:+.2f}; train {tr:.2f}; malformed {mal:.2f}; "
            "held-out {ho:.2f}",
            d_plain["rejected_delta"] < -20
            and d_plain["train_malformed"] >= max(5 * weak["train_malformed"], 0.5)
            and d_plain["heldout"] < weak["heldout"],
            "rejected < -20 nats, malformed x5 or more, held-out falls"),
        Row("dpo_nll", "DPO + NLL (weight 1): chosen change; malformed; train; held-out",
            "chosen +1.89; malformed / 3; train 0.69; held-out 0.17",
            {"ch": d_nll["chosen_delta"], "mal": d_nll["train_malformed"],
             "mal0": d_plain["train_malformed"], "tr": d_nll["train"], "ho": d_nll["heldout"]},
            "chosen {ch:+.2f}; malformed {mal:.2f} (plain {mal0:.2f}); train {tr:.2f}; "
            "held-out {ho:.2f}",
            d_nll["chosen_delta"] > d_plain["chosen_delta"]
            and d_nll["train_malformed"] < d_plain["train_malformed"] / 2
            and d_nll["train"] > d_plain["train"],
            "chosen higher, malformed halved or better, train higher than plain DPO"),
        Row("four_recipes", "four recipes at the last step: train / held-out",
            "oracle SFT 0.99/0.93; SFT(20)+RL 0.96/0.95; RFT 0.74/0.15; RL only 0.36/0.30",
            {f"{k}_{s}": final[k][s] for k in final for s in ("train", "heldout")},
            "oracle SFT {oracle_sft_train:.2f}/{oracle_sft_heldout:.2f}; SFT+RL "
            "{sft_then_rl_train:.2f}/{sft_then_rl_heldout:.2f}; RFT {rft_train:.2f}/"
            "{rft_heldout:.2f}; RL only {rl_only_train:.2f}/{rl_only_heldout:.2f}",
            final["sft_then_rl"]["train"] > final["rl_only"]["train"]
            and final["sft_then_rl"]["heldout"] > final["rl_only"]["heldout"]
            and final["rft"]["heldout"] < final["oracle_sft"]["heldout"],
            "SFT-then-RL beats RL only on both splits; RFT held-out below oracle SFT's"),
        Row("mixed_groups", "held-out groups with mixed outcomes: SFT step 20 / final step",
            "70% / 10%",
            {"a": groups["step_cold"]["mixed_fraction"],
             "b": groups["step_final"]["mixed_fraction"]},
            "{a:.0%} / {b:.0%}",
            groups["step_cold"]["mixed_fraction"] > groups["step_final"]["mixed_fraction"],
            "the early checkpoint has more informative groups"),
        Row("template", "demos without <obs> </obs>: malformed / train pass / NLL per action",
            "0.62 / 7.5% / 0.82 nats (vs 0.98 pass when rendered correctly)",
            {"mal": tpl["malformed_per_episode"], "tr": tpl["train_pass"],
             "nll": tpl["nll_per_action_token"], "nll0": tpl["nll_per_action_token_matched"],
             "ok": last["train"], "mal0": last["train_malformed"]},
            "{mal:.2f} / {tr:.0%} / {nll:.2f} nats (matched: {mal0:.2f} / {ok:.0%} / {nll0:.3f})",
            tpl["malformed_per_episode"] >= 2 * last["train_malformed"]
            and tpl["train_pass"] < last["train"] - 0.5
            and tpl["nll_per_action_token"] > tpl["nll_per_action_token_matched"] + 0.3,
            "vs matched SFT: malformed x2 or more, pass lower by > 0.5, NLL higher by > 0.3"),
        Row("kept_set", "round-1 kept set: episodes / distinct action sequences",
            "84 episodes, 21 distinct",
            {"kept": rounds[min(1, len(rounds) - 1)]["kept"],
             "distinct": rounds[min(1, len(rounds) - 1)]["distinct_action_sequences"]},
            "{kept:.0f} episodes, {distinct:.0f} distinct",
            rounds[min(1, len(rounds) - 1)]["kept"]
            >= 2 * rounds[min(1, len(rounds) - 1)]["distinct_action_sequences"],
            "each distinct sequence appears twice or more on average"),
        Row("public_rft", "RFT on public tests: hack share round 1 -> last; filter vs hidden",
            "hacks 42% -> 64% of kept; filter pass 0.97; hidden ~0.35",
            {"h0": pub["rounds"][0]["hack_share"], "h1": pub["rounds"][-1]["hack_share"],
             "pub": pub["rounds"][-1]["train_public"], "hid": pub["rounds"][-1]["train"]},
            "hacks {h0:.0%} -> {h1:.0%}; filter pass {pub:.2f}; hidden {hid:.2f}",
            pub["rounds"][-1]["hack_share"] > pub["rounds"][0]["hack_share"]
            and pub["rounds"][-1]["train_public"] > pub["rounds"][-1]["train"] + 0.2,
            "the hack share grows and the filter's pass rate separates from hidden"),
    ]  # fmt: skip
    return out


# --- output: table, figures, results.json ----------------------------------------------------


def aggregate_rows(per_seed: list[list[Row]]) -> list[dict]:
    """One table row per key: measured numbers as mean (and spread over seeds), verdict count."""
    table = []
    for same in zip(*per_seed, strict=True):
        first = same[0]
        mean = {k: float(np.mean([r.measured[k] for r in same])) for k in first.measured}
        spread = {k: float(np.std([r.measured[k] for r in same])) for k in first.measured}
        ok = sum(r.reproduced for r in same)
        table.append({
            "key": first.key,
            "quantity": first.quantity,
            "book": first.book,
            "measured": first.fmt.format(**mean),
            "values": mean,
            "spread": spread if len(same) > 1 else None,
            "reproduced": ok == len(same),
            "reproduced_seeds": f"{ok}/{len(same)}",
            "rule": first.rule,
        })  # fmt: skip
    return table


def cost_table(cost: dict) -> str:
    """What each recipe consumed (Section 15.5), as Markdown; evaluation episodes not counted."""
    lines = ["| recipe | demonstrations | sampled episodes | verifier calls |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for recipe, c in cost.items():
        lines.append(f"| {recipe} | {c['demonstrations']} | {c['sampled_episodes']} | "
                     f"{c['verifier_calls']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def markdown_table(table: list[dict], seeds: int) -> str:
    lines = [
        "| quantity | book | measured | reproduced | rule |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in table:
        measured = row["measured"]
        if row["spread"]:
            big = max(row["spread"].items(), key=lambda kv: kv[1])
            measured += f" (largest spread over seeds: {big[0]} +/- {big[1]:.2f})"
        verdict = ("yes" if row["reproduced"] else "no") + (
            f" ({row['reproduced_seeds']} seeds)" if seeds > 1 else ""
        )
        lines.append(f"| {row['quantity']} | {row['book']} | {measured} | {verdict} | "
                     f"{row['rule']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _mean_curve(results: list[dict], get) -> tuple[list[float], dict[str, list[float]]]:
    curves = [get(R) for R in results]
    steps = [r["step"] for r in curves[0]]
    keys = [k for k in curves[0][0] if k != "step"]
    return steps, {k: [float(np.mean([c[i][k] for c in curves])) for i in range(len(steps))]
                   for k in keys}  # fmt: skip


def draw_figures(results: list[dict], out: Path) -> list[str]:
    """Figures 15.1 to 15.4 (seed means), plus the oracle-SFT curve; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    # 15.1: every recipe is sum_i w_i grad log pi(tau_i) over masked action tokens
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.axis("off")
    cells = [
        ["SFT", "expert demonstrations", "1"],
        ["RFT / expert iteration", "current policy, filtered", "R_i / p_hat"],
        ["policy gradient", "current policy", "R_i - mean(R)"],
        ["DPO", "fixed dataset of pairs", "+/- beta * sigmoid(-beta * margin)"],
    ]
    t = ax.table(cellText=cells, colLabels=["method", "where tau_i comes from", "weight w_i"],
                 loc="center", cellLoc="left")  # fmt: skip
    t.scale(1, 1.6)
    ax.set_title("Figure 15.1: sum_i w_i grad log pi(tau_i) over masked action tokens")
    names.append(_save(fig, out / "fig15_1_recipes.png"))

    # 15.2: DPO, what the dashboard shows vs what the policy does
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, style in (("dpo", "-"), ("dpo_nll", "--")):
        steps, m = _mean_curve(results, lambda R, n=name: [
            {"step": r["step"], **{k: r[k] for k in ("chosen_delta", "rejected_delta", "train",
                                                      "heldout", "train_malformed")}}
            for r in R["dpo"][n]])  # fmt: skip
        a.plot(steps, m["chosen_delta"], "g" + style, label=f"{name}: chosen")
        a.plot(steps, m["rejected_delta"], "r" + style, label=f"{name}: rejected")
        b.plot(steps, m["train"], "b" + style, label=f"{name}: train pass")
        b.plot(steps, m["heldout"], "c" + style, label=f"{name}: held-out pass")
        b.plot(steps, m["train_malformed"], "m" + style, label=f"{name}: malformed / episode")
    a.set(xlabel="DPO step", ylabel="log-prob change vs reference (nats)")
    b.set(xlabel="DPO step", ylabel="rate / count")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.suptitle("Figure 15.2: offline DPO on weak-base pairs")
    names.append(_save(fig, out / "fig15_2_dpo.png"))

    # 15.3: four recipes on a shared x-axis of gradient steps
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for recipe, color in (("oracle_sft", "k"), ("rft", "tab:orange"),
                          ("sft_then_rl", "tab:green"), ("rl_only", "tab:blue")):  # fmt: skip
        steps, m = _mean_curve(results, lambda R, k=recipe: R["recipes"]["curves"][k])
        for ax, split in zip(axes, ("train", "heldout"), strict=True):
            ax.plot(steps, m[split], "o-", color=color, label=recipe, ms=3)
    for ax, split in zip(axes, ("training tasks", "held-out variants"), strict=True):
        ax.set(xlabel="gradient steps", title=split, ylim=(0, 1.05))
    axes[0].set_ylabel("hidden-test pass rate")
    axes[0].legend()
    fig.suptitle("Figure 15.3: four recipes from one weak base")
    names.append(_save(fig, out / "fig15_3_four_recipes.png"))

    # 15.4: RFT with a public-test filter
    fig, ax = plt.subplots(figsize=(7, 4))
    rounds = results[0]["public_rft"]["rounds"]
    x = np.arange(1, len(rounds) + 1)
    hacks = np.mean([[r["hacks"] for r in R["public_rft"]["rounds"]] for R in results], 0)
    kept = np.mean([[r["kept"] for r in R["public_rft"]["rounds"]] for R in results], 0)
    ax.bar(x, kept - hacks, color="tab:green", label="kept: genuine fixes")
    ax.bar(x, hacks, bottom=kept - hacks, color="tab:red", label="kept: hacks")
    ax.set(xlabel="round", ylabel="kept episodes")
    ax2 = ax.twinx()
    for key, color, label in (("train_public", "k", "public-test pass (the filter)"),
                              ("train", "tab:blue", "hidden-test pass")):  # fmt: skip
        ys = np.mean([[r[key] for r in R["public_rft"]["rounds"]] for R in results], 0)
        ax2.plot(x, ys, "o-", color=color, label=f"policy: {label}")
    ax.set_xticks(x)
    ax2.set(ylim=(0, 1.05), ylabel="pass rate after the round")
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="center left", fontsize=8)
    fig.suptitle("Figure 15.4: RFT with a public-test filter")
    names.append(_save(fig, out / "fig15_4_public_filter.png"))

    # oracle SFT: pass rates and action entropy every few steps
    fig, ax = plt.subplots(figsize=(7, 4))
    steps, m = _mean_curve(results, lambda R: [
        {k: r[k] for k in ("step", "train", "heldout", "train_entropy")}
        for r in R["sft"]["oracle_sft_curve"]])  # fmt: skip
    ax.plot(steps, m["train"], "o-", label="train pass")
    ax.plot(steps, m["heldout"], "o-", label="held-out pass")
    ax2 = ax.twinx()
    ax2.semilogy(steps, m["train_entropy"], "k--", label="action entropy (nats)")
    ax.set(xlabel="SFT step", ylabel="hidden-test pass rate", ylim=(0, 1.05))
    ax.legend(loc="center right", fontsize=8)
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle("Oracle SFT from the weak base (Section 15.2)")
    names.append(_save(fig, out / "fig_oracle_sft.png"))
    return names


def _save(fig, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _write_json(path: Path, payload: dict) -> None:
    """Write via a temporary file and a rename, so a crash never leaves half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=float))
    tmp.replace(path)


def _jsonable(R: dict) -> dict:
    return {k: v for k, v in R.items() if not k.startswith("_")}


def main(args) -> int:
    """`arl reproduce ch15`: run every seed, write results.json, table.md and the figures."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    cfg = Ch15Config()
    cfg = cfg.quick() if args.quick else cfg
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArlError(f"cannot create output directory {out}: {e.strerror}") from None
    console = Console(stderr=True)
    results = []
    seeds = [args.seed + i for i in range(args.seeds)]
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
               "{task.total}"), TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("ch15", total=len(seeds) * len(SECTIONS))
        for seed in seeds:
            scfg = replace(cfg, base=replace(cfg.base, seed=seed))

            def progress(name: str, seed=seed) -> None:
                if bar.tasks[task].description != "ch15":
                    bar.advance(task)
                bar.update(task, description=f"seed {seed}: {name}")

            R = run(scfg, progress)
            bar.advance(task)
            bar.update(task, description="ch15")
            if seed == seeds[0]:
                for name, model in R["_models"].items():
                    save_checkpoint(model, out / "checkpoints" / name, extra={"seed": seed})
            results.append(_jsonable(R))
            _write_json(out / "results.partial.json", {"seeds_done": seeds[: len(results)],
                                                       "runs": results})  # fmt: skip
    table = aggregate_rows([rows(R) for R in results])
    figures = draw_figures(results, out)
    cost = results[0]["recipes"]["cost"]
    (out / "table.md").write_text(markdown_table(table, len(seeds)) + "\n" + cost_table(cost))
    payload = {
        "config": asdict(cfg),
        "quick": bool(args.quick),
        "seeds": seeds,
        "table": table,
        "figures": figures,
        "runs": results,
    }
    _write_json(out / "results.json", payload)
    (out / "results.partial.json").unlink(missing_ok=True)

    view = Table(title=f"Chapter 15 reproduced ({'quick, ' if args.quick else ''}"
                 f"seeds {seeds[0]}..{seeds[-1]})", show_lines=True)  # fmt: skip
    for col in ("quantity", "book", "measured", "reproduced"):
        view.add_column(col, overflow="fold")
    for row in table:
        ok = "[green]yes[/]" if row["reproduced"] else "[red]no[/]"
        view.add_row(row["quantity"], row["book"], row["measured"],
                     ok + (f" ({row['reproduced_seeds']})" if len(seeds) > 1 else ""))  # fmt: skip
    Console().print(view)
    costs = Table(title="What each recipe consumed (evaluation episodes not counted)")
    for col in ("recipe", "demonstrations", "sampled episodes", "verifier calls"):
        costs.add_column(col, justify="left" if col == "recipe" else "right")
    for recipe, c in cost.items():
        costs.add_row(recipe, *(str(c[k]) for k in ("demonstrations", "sampled_episodes",
                                                     "verifier_calls")))  # fmt: skip
    Console().print(costs)
    times = {k: sum(R["timings_s"][k] for R in results) for k in results[0]["timings_s"]}
    Console().print("time per section (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    Console().print(f"wrote {out / 'results.json'}, {out / 'table.md'}, "
                    f"{', '.join(figures)} and checkpoints/")  # fmt: skip
    return 0

"""Chapter 15's table: each claim of the book as a rule over one seed's results, and the
aggregate over seeds (mean +- standard error, k of N seeds).

A rule compares arms with a margin of two standard errors of the evaluations behind it
(`se`, `se_diff`), so a noisy ordering such as 0.41 against 0.38 is not a "yes". Every
rule is printed in its row; `tests/test_ch15.py` breaks each one on a hand-made result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z = 2.0  # margins are Z standard errors
REPRODUCED_SHARE = 0.8  # a row reproduces when its rule holds on at least this share of seeds
GUESSING = 0.3  # the top of the guessing level (blind play passes about 0.15-0.2)
BOOK_WEAK_ENTROPY = 0.25  # nats, Section 15.2


def se(p: float, n: int) -> float:
    """Standard error of a pass rate over n episodes (Agresti-Coull p, so 0 and 1 have one)."""
    q = (p * n + 1) / (n + 2)
    return math.sqrt(q * (1 - q) / max(n, 1))


def se_diff(p1: float, n1: int, p2: float, n2: int) -> float:
    """Standard error of the difference of two independent pass rates."""
    return math.hypot(se(p1, n1), se(p2, n2))


def above(a: float, na: int, b: float, nb: int, by: float = 0.0) -> bool:
    """a exceeds b by at least `by`, and by more than Z standard errors of the difference."""
    return a - b >= by and a - b > Z * se_diff(a, na, b, nb)


@dataclass
class Row:
    """One claim of the book, measured on one seed."""

    key: str
    quantity: str
    book: str
    measured: dict[str, float]  # named measured numbers
    fmt: str  # how to print `measured`: a format string over its keys
    reproduced: bool  # whether the rule holds
    rule: str  # what "reproduced" checks


def rows(R: dict) -> list[Row]:
    """The chapter's claims as rules over one seed's results `R` (see `ch15.run`)."""
    n_tr, n_ho = R["eval_n"]["train"], R["eval_n"]["heldout"]
    tok, sft, rft, pub, dpo = R["tokens"], R["sft"], R["rft"], R["public_rft"], R["dpo"]
    weak, curve = sft["weak_base"], sft["oracle_sft_curve"]
    last = curve[-1]
    rounds, ident = rft["rounds"], rft["identity"]
    d_plain, d_nll = dpo["dpo"][-1], dpo["dpo_nll"][-1]
    curves, groups, tpl = R["recipes"]["curves"], R["groups"], R["template"]
    final = {k: v[-1] for k, v in curves.items()}
    o, c, rl, rf = final["oracle_sft"], final["sft_then_rl"], final["rl_only"], final["rft"]
    rl_mal = R["recipes"]["rl_only"][-1]["train_malformed"]

    # expert iteration: gains per round, from the weak base
    ei = [weak["train"]] + [r["train"] for r in rounds]
    gains = [b - a for a, b in zip(ei, ei[1:], strict=False)]
    never_init = all(r["family_share"]["init"] == 0 for r in rounds)
    held_max = max(r["heldout"] for r in rounds)
    # oracle SFT: the first evaluated step from which train stays within 0.05 of its final value
    conv = next(r["step"] for i, r in enumerate(curve)
                if all(abs(q["train"] - last["train"]) <= 0.05 for q in curve[i:]))  # fmt: skip
    g_n = groups["tasks"]
    g_cold, g_final = groups["step_cold"]["mixed_fraction"], groups["step_final"]["mixed_fraction"]
    # Poisson standard error of the difference of two mean counts (a zero count counts as one)
    counts = (tpl["malformed_per_episode"], last["train_malformed"])
    mal_se = math.hypot(*(math.sqrt(max(m, 1 / n_tr) / n_tr) for m in counts))
    return [
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
        Row("weak_base", "weak base: malformed / pass train, held-out / reads",
            "0.06 / 0.14, 0.14 / 29%",
            {"mal": weak["train_malformed"], "tr": weak["train"], "ho": weak["heldout"],
             "read": weak["train_read"]},
            "{mal:.2f} / {tr:.2f}, {ho:.2f} / {read:.0%}",
            weak["train_malformed"] < 0.5 and max(weak["train"], weak["heldout"]) <= GUESSING,
            f"format (malformed < 0.5) without skill (pass <= {GUESSING} on both splits)"),
        Row("weak_entropy", "weak base: action entropy (all action tokens; first call)",
            "0.25 nats",
            {"ent": weak["train_entropy"], "ent1": weak["train_first_call_entropy"]},
            "{ent:.2f} nats (first call {ent1:.2f})",
            BOOK_WEAK_ENTROPY / 2 <= weak["train_entropy"] <= 2 * BOOK_WEAK_ENTROPY,
            "within a factor 2 of the book's 0.25 nats"),
        Row("oracle_sft", "oracle SFT from the weak base: train / held-out / entropy",
            "0.99 / ~0.9, entropy 0.25 -> 0.02 nats",
            {"tr": last["train"], "ho": last["heldout"], "e0": weak["train_entropy"],
             "e1": last["train_entropy"], "steps": last["step"],
             "ho4": _without_init(last["heldout_family"])},
            "{tr:.2f} / {ho:.2f} (held-out without init {ho4:.2f}), entropy {e0:.2f} -> "
            "{e1:.3f} nats ({steps:.0f} steps)",
            last["heldout"] >= 0.8 and last["train_entropy"] <= weak["train_entropy"] / 10,
            "held-out >= 0.8 (the rule transfers); entropy falls >= 10x"),
        Row("oracle_sft_speed", "oracle SFT: step from which train stays within 0.05 of final",
            "~40 steps",
            {"conv": conv},
            "step {conv:.0f}",
            conv <= 40,
            "converged by step 40"),
        Row("copy_probe", "init: the accumulator copied from the listing, after oracle SFT",
            "init solved on train and held-out (0.99 / ~0.9 overall)",
            {"copy": sft["copy_probe"]["oracle_sft"], "copy0": sft["copy_probe"]["weak_base"]},
            "copy rate {copy:.2f} (weak base {copy0:.2f}; a memorized name: 0.17)",
            sft["copy_probe"]["oracle_sft"] >= 0.8,
            "the shown name is the argmax after `edit init` in >= 80% of renamed listings"),
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
            {**{f"r{i}": v for i, v in enumerate(ei)}, "ho": held_max},
            " -> ".join(f"{{r{i}:.2f}}" for i in range(len(ei))) + "; held-out <= {ho:.2f}",
            above(ei[-1], n_tr, ei[0], n_tr, by=0.2) and gains[-1] < max(gains) / 2
            and ei[-1] <= 0.8 + Z * se(ei[-1], n_tr) and never_init and held_max <= 0.4,
            "rises > 0.2 (2 SE); plateaus (last gain < half the largest) under the init "
            "ceiling 0.8; init never kept; held-out <= 0.4"),
        Row("dpo", "offline DPO: rejected / chosen change; train; malformed; held-out",
            "rejected -45 nats, chosen +0.74; train 0.41; malformed 2.0-2.4; held-out 0",
            {"rej": d_plain["rejected_delta"], "ch": d_plain["chosen_delta"],
             "tr": d_plain["train"], "mal": d_plain["train_malformed"],
             "ho": d_plain["heldout"]},
            "rejected {rej:+.0f} nats, chosen {ch:+.2f}; train {tr:.2f}; malformed {mal:.2f}; "
            "held-out {ho:.2f}",
            d_plain["rejected_delta"] < -20
            and d_plain["train_malformed"] >= max(5 * weak["train_malformed"], 0.5)
            and above(weak["heldout"], n_ho, d_plain["heldout"], n_ho),
            "rejected < -20 nats; malformed x5 or more; held-out falls (2 SE)"),
        Row("dpo_nll", "DPO + NLL (weight 1): chosen change; malformed; train; held-out",
            "chosen +1.89; malformed / 3; train 0.69; held-out 0.17",
            {"ch": d_nll["chosen_delta"], "mal": d_nll["train_malformed"],
             "mal0": d_plain["train_malformed"], "tr": d_nll["train"], "tr0": d_plain["train"],
             "ho": d_nll["heldout"]},
            "chosen {ch:+.2f}; malformed {mal:.2f} (plain {mal0:.2f}); train {tr:.2f} "
            "(plain {tr0:.2f}); held-out {ho:.2f}",
            d_nll["chosen_delta"] > d_plain["chosen_delta"]
            and d_nll["train_malformed"] < d_plain["train_malformed"] / 2
            and above(d_nll["train"], n_tr, d_plain["train"], n_tr)
            and above(last["heldout"], n_ho, d_nll["heldout"], n_ho),
            "vs plain DPO: chosen higher, malformed halved, train higher (2 SE); held-out "
            "below oracle SFT's (2 SE): no regularizer repairs the data"),
        Row("four_recipes", "four recipes at the last step: train / held-out",
            "oracle SFT 0.99/0.93; SFT+RL 0.96/0.95; RFT 0.74/0.15; RL only 0.36/0.30",
            {f"{k}_{s}": final[k][s] for k in final for s in ("train", "heldout")},
            "oracle SFT {oracle_sft_train:.2f}/{oracle_sft_heldout:.2f}; SFT+RL "
            "{sft_then_rl_train:.2f}/{sft_then_rl_heldout:.2f}; RFT {rft_train:.2f}/"
            "{rft_heldout:.2f}; RL only {rl_only_train:.2f}/{rl_only_heldout:.2f}",
            abs(c["train"] - o["train"]) <= 0.1,
            "SFT-then-RL ends within 0.1 of oracle SFT on train"),
        Row("cold_start", "a cold start makes RL work: SFT+RL minus RL only (train, held-out)",
            "+0.60, +0.65",
            {"dtr": c["train"] - rl["train"], "dho": c["heldout"] - rl["heldout"],
             "step": sft["cold_start"]["step"], "p0": sft["cold_start"]["train_pass"]},
            "{dtr:+.2f}, {dho:+.2f} (cold start: step {step:.0f}, train pass {p0:.2f})",
            above(c["train"], n_tr, rl["train"], n_tr, by=0.15)
            and above(c["heldout"], n_ho, rl["heldout"], n_ho, by=0.15),
            "SFT-then-RL >= 0.15 above RL only on both splits (and by 2 SE)"),
        Row("rl_only", "RL only is well below both demonstration recipes (held-out)",
            "0.30 against 0.93 and 0.95",
            {"rl": rl["heldout"], "o": o["heldout"], "c": c["heldout"]},
            "{rl:.2f} against {o:.2f} and {c:.2f}",
            above(o["heldout"], n_ho, rl["heldout"], n_ho, by=0.15),
            "RL only's held-out >= 0.15 below oracle SFT's (2 SE); against SFT-then-RL: "
            "the cold-start row"),
        Row("rl_only_moving", "RL only is still moving: it ends above the weak base (train)",
            "0.36 against 0.14, rising at the end",
            {"rl": rl["train"], "w": weak["train"], "mal": rl_mal},
            "{rl:.2f} against {w:.2f} (malformed {mal:.2f} per episode)",
            above(rl["train"], n_tr, weak["train"], n_tr),
            "RL only's train pass above the weak base's (2 SE)"),
        Row("rft_transfer", "RFT's shortcut does not transfer: held-out RFT vs oracle SFT",
            "0.15 against 0.93",
            {"rft": rf["heldout"], "o": o["heldout"]},
            "{rft:.2f} against {o:.2f}",
            above(o["heldout"], n_ho, rf["heldout"], n_ho, by=0.15),
            "RFT's held-out >= 0.15 below oracle SFT's (2 SE)"),
        Row("mixed_groups", "held-out groups with mixed outcomes: cold start / final SFT",
            "70% / 10%",
            {"a": g_cold, "b": g_final},
            "{a:.0%} / {b:.0%}",
            above(g_cold, g_n, g_final, g_n),
            "the cold start has more informative groups (2 SE over tasks)"),
        Row("template_pass", "demos without <obs> </obs>: train pass and NLL per action token",
            "7.5% (0.98 rendered correctly); NLL 0.82 nats",
            {"tr": tpl["train_pass"], "ok": last["train"], "nll": tpl["nll_per_action_token"],
             "nll0": tpl["nll_per_action_token_matched"]},
            "{tr:.0%} (matched {ok:.0%}); NLL {nll:.2f} nats (matched {nll0:.3f})",
            above(last["train"], n_tr, tpl["train_pass"], n_tr, by=0.5)
            and tpl["nll_per_action_token"] > tpl["nll_per_action_token_matched"] + 0.3,
            "pass lower by > 0.5 (2 SE) and NLL higher by > 0.3 nats than matched SFT"),
        Row("template_malformed", "demos without <obs> </obs>: malformed calls per episode",
            "0.62 (matched: ~0.01)",
            {"mal": tpl["malformed_per_episode"], "mal0": last["train_malformed"]},
            "{mal:.2f} (matched {mal0:.2f})",
            tpl["malformed_per_episode"] >= 2 * last["train_malformed"]
            and tpl["malformed_per_episode"] - last["train_malformed"] > Z * mal_se,
            "at least double the matched rate, by 2 SE (Poisson)"),
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
            and above(pub["rounds"][-1]["train_public"], n_tr, pub["rounds"][-1]["train"], n_tr,
                      by=0.2),
            "the hack share grows; the filter's pass rate exceeds hidden by > 0.2 (2 SE)"),
    ]  # fmt: skip


def _without_init(family: dict[str, float]) -> float:
    """Mean pass rate over the families that need no copying (all but init)."""
    return float(np.mean([v for f, v in family.items() if f != "init"]))


def aggregate(per_seed: list[list[Row]]) -> list[dict]:
    """One row per claim: each number's mean and standard error over seeds, and k of N."""
    table = []
    for same in zip(*per_seed, strict=True):
        first, n = same[0], len(same)
        vals = {k: np.array([r.measured[k] for r in same], dtype=float) for k in first.measured}
        mean = {k: float(v.mean()) for k, v in vals.items()}
        sem = {k: float(v.std(ddof=1) / math.sqrt(n)) if n > 1 else None for k, v in vals.items()}
        k = sum(r.reproduced for r in same)
        table.append({
            "key": first.key,
            "quantity": first.quantity,
            "book": first.book,
            "measured": first.fmt.format(**mean),
            "mean": mean,
            "se": sem,
            "per_seed": {key: v.tolist() for key, v in vals.items()},
            "seeds_holding": k,
            "seeds": n,
            "reproduced": k >= math.ceil(REPRODUCED_SHARE * n),
            "rule": first.rule,
        })  # fmt: skip
    return table


def with_se(row: dict) -> str:
    """The measured cell: means, then every number's mean +- SE when there are several seeds."""
    if row["seeds"] < 2:
        return row["measured"]
    spread = ", ".join(f"{k} {row['mean'][k]:.2f} +- {row['se'][k]:.2f}" for k in row["mean"])
    return f"{row['measured']} [{spread}]"


def markdown(table: list[dict], quick: bool = False) -> str:
    """The table as Markdown; quick runs say that their verdicts mean nothing."""
    lines = []
    if quick:
        lines += ["**Quick settings: far too few steps and samples to reproduce anything; the "
                  "verdicts below only show that every section runs.**", ""]  # fmt: skip
    lines += ["| quantity | book | measured (mean [mean +- SE over seeds]) | reproduced "
              "(seeds) | rule |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in table:
        k, n = row["seeds_holding"], row["seeds"]
        verdict = ("yes" if row["reproduced"] else "no") + f" ({k}/{n})"
        lines.append(f"| {row['quantity']} | {row['book']} | {with_se(row)} | {verdict} | "
                     f"{row['rule']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def cost_table(cost: dict) -> str:
    """What each recipe consumed (Section 15.5), as Markdown; evaluation episodes not counted."""
    lines = ["| recipe | demonstrations | sampled episodes | verifier calls |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for recipe, c in cost.items():
        lines.append(f"| {recipe} | {c['demonstrations']} | {c['sampled_episodes']} | "
                     f"{c['verifier_calls']} |")  # fmt: skip
    return "\n".join(lines) + "\n"

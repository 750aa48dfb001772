"""Chapter 15's rules for sections 15.4-15.6: DPO, the four recipes, and the design problems
(mixed-outcome groups, the stripped template). Sections 15.1-15.3 are ch15_table's.
"""

from __future__ import annotations

import math

from arl.experiments.ch15_rules import (
    DPO_MALFORMED_FACTOR,
    DPO_MALFORMED_MIN,
    DPO_REJECTED_MAX,
    RECIPE_GAP,
    RECIPE_TOL,
    SE,
    TEMPLATE_NLL_GAP,
    TEMPLATE_PASS_DROP,
    Ends,
    Row,
    _row,
    above,
    margin,
)


def _dpo_rows(R: dict, e: Ends) -> list[Row]:
    """15.4: plain DPO (the dashboard rises, the policy breaks) and DPO + NLL."""
    plain, nll = R["dpo"]["dpo"][-1], R["dpo"]["dpo_nll"][-1]
    mal_floor = max(DPO_MALFORMED_FACTOR * e.weak["train_malformed"], DPO_MALFORMED_MIN)
    return [
        _row(
            "dpo",
            {
                "rej": plain["rejected_delta"],
                "ch": plain["chosen_delta"],
                "tr": plain["train"],
                "mal": plain["train_malformed"],
                "ho": plain["heldout"],
            },
            "rejected {rej:+.0f} nats, chosen {ch:+.2f}; train {tr:.2f}; malformed {mal:.2f}; "
            "held-out {ho:.2f}",
            plain["rejected_delta"] < DPO_REJECTED_MAX
            and plain["train_malformed"] >= mal_floor
            and above(e.weak["heldout"], e.n_ho, plain["heldout"], e.n_ho),
            f"rejected < {DPO_REJECTED_MAX} nats; malformed x{DPO_MALFORMED_FACTOR} or more; "
            f"held-out falls ({SE})",
        ),
        _row(
            "dpo_nll",
            {
                "ch": nll["chosen_delta"],
                "mal": nll["train_malformed"],
                "mal0": plain["train_malformed"],
                "tr": nll["train"],
                "tr0": plain["train"],
                "ho": nll["heldout"],
            },
            "chosen {ch:+.2f}; malformed {mal:.2f} (plain {mal0:.2f}); train {tr:.2f} "
            "(plain {tr0:.2f}); held-out {ho:.2f}",
            nll["chosen_delta"] > plain["chosen_delta"]
            and nll["train_malformed"] < plain["train_malformed"] / 2
            and above(nll["train"], e.n_tr, plain["train"], e.n_tr)
            and above(e.last["heldout"], e.n_ho, nll["heldout"], e.n_ho),
            f"vs plain DPO: chosen higher, malformed halved, train higher ({SE}); held-out "
            f"below oracle SFT's ({SE}): no regularizer repairs the data",
        ),
    ]


def _fresh(R: dict) -> dict[str, float]:
    """The transfer rows' fresh-split pass rates (final oracle SFT, SFT-then-RL, RL only, the
    weak base), reported beside held-out; empty for a run saved before they were measured."""
    fresh = R["recipes"].get("fresh", {})
    return {k: v for k, v in fresh.items() if v is not None}


def _recipe_rows(R: dict, e: Ends) -> list[Row]:
    """15.5: the four recipes at their last step, and the orderings between them; the
    transfer numbers on the fresh split beside held-out."""
    final, n_tr, n_ho = e.final, e.n_tr, e.n_ho
    o, c, rl, rf = final["oracle_sft"], final["sft_then_rl"], final["rl_only"], final["rft"]
    cold = R["sft"]["cold_start"]
    fr = _fresh(R)
    has = len(fr) == 4
    fresh_four = (
        "; fresh: oracle SFT {f_oracle_sft:.2f}, SFT+RL {f_sft_then_rl:.2f}, RL only "
        "{f_rl_only:.2f}"
        if has
        else ""
    )
    return [
        _row(
            "four_recipes",
            {f"{k}_{s}": final[k][s] for k in final for s in ("train", "heldout")}
            | {f"f_{k}": v for k, v in fr.items() if k != "weak_base"},
            "oracle SFT {oracle_sft_train:.2f}/{oracle_sft_heldout:.2f}; SFT+RL "
            "{sft_then_rl_train:.2f}/{sft_then_rl_heldout:.2f}; RFT {rft_train:.2f}/"
            "{rft_heldout:.2f}; RL only {rl_only_train:.2f}/{rl_only_heldout:.2f}" + fresh_four,
            abs(c["train"] - o["train"]) <= RECIPE_TOL,
            f"SFT-then-RL ends within {RECIPE_TOL} of oracle SFT on train",
        ),
        _row(
            "cold_start",
            {
                "dtr": c["train"] - rl["train"],
                "dho": c["heldout"] - rl["heldout"],
                "step": cold["step"],
                "p0": cold["train_pass"],
            }
            | ({"dfr": fr["sft_then_rl"] - fr["rl_only"]} if has else {}),
            "{dtr:+.2f}, {dho:+.2f}"
            + (" (fresh {dfr:+.2f})" if has else "")
            + " (cold start: step {step:.0f}, train pass {p0:.2f})",
            above(c["train"], n_tr, rl["train"], n_tr, by=RECIPE_GAP)
            and above(c["heldout"], n_ho, rl["heldout"], n_ho, by=RECIPE_GAP),
            f"SFT-then-RL >= {RECIPE_GAP} above RL only on both splits (and by {SE})",
        ),
        _row(
            "rl_only",
            {"rl": rl["heldout"], "o": o["heldout"], "c": c["heldout"]}
            | (
                {"rlf": fr["rl_only"], "of": fr["oracle_sft"], "cf": fr["sft_then_rl"]}
                if has
                else {}
            ),
            "{rl:.2f} against {o:.2f} and {c:.2f}"
            + (" (fresh: {rlf:.2f} against {of:.2f} and {cf:.2f})" if has else ""),
            above(o["heldout"], n_ho, rl["heldout"], n_ho, by=RECIPE_GAP),
            f"RL only's held-out >= {RECIPE_GAP} below oracle SFT's ({SE}); against "
            "SFT-then-RL: the cold-start row",
        ),
        _row(
            "rl_only_moving",
            {
                "rl": rl["train"],
                "w": e.weak["train"],
                "mal": R["recipes"]["rl_only"][-1]["train_malformed"],
            },
            "{rl:.2f} against {w:.2f} (malformed {mal:.2f} per episode)",
            above(rl["train"], n_tr, e.weak["train"], n_tr),
            f"RL only's train pass above the weak base's ({SE})",
        ),
        _row(
            "rft_transfer",
            {"rft": rf["heldout"], "o": o["heldout"]},
            "{rft:.2f} against {o:.2f}",
            above(o["heldout"], n_ho, rf["heldout"], n_ho, by=RECIPE_GAP),
            f"RFT's held-out >= {RECIPE_GAP} below oracle SFT's ({SE})",
        ),
    ]


def _problem_rows(R: dict, e: Ends) -> list[Row]:
    """15.6: mixed-outcome groups, and demonstrations rendered without the template."""
    groups, tpl, last, n_tr = R["groups"], R["template"], e.last, e.n_tr
    # where the stripped model fails instead: its first edit picks another family's op
    # (runs saved before this was recorded are retabled without it)
    wrong = {"wrong": tpl["op_choice"]["wrong_op"]} if "op_choice" in tpl else {}
    wrong_text = "; first edit another family's op in {wrong:.0%}" if wrong else ""
    g_n = groups.get("groups", groups["tasks"])  # runs saved before 10 groups a task: 1
    g_cold, g_final = groups["step_cold"]["mixed_fraction"], groups["step_final"]["mixed_fraction"]
    # Poisson standard error of the difference of two mean counts (a zero count counts as one)
    counts = (tpl["malformed_per_episode"], last["train_malformed"])
    mal_se = math.hypot(*(math.sqrt(max(m, 1 / n_tr) / n_tr) for m in counts))
    return [
        _row(
            "mixed_groups",
            {"a": g_cold, "b": g_final},
            "{a:.0%} / {b:.0%}",
            above(g_cold, g_n, g_final, g_n),
            f"the cold start has more informative groups ({SE} over {g_n} held-out groups)",
        ),
        _row(
            "template_pass",
            {
                "tr": tpl["train_pass"],
                "ok": last["train"],
                "nll": tpl["nll_per_action_token"],
                "nll0": tpl["nll_per_action_token_matched"],
            },
            "{tr:.0%} (matched {ok:.0%}); NLL {nll:.2f} nats (matched {nll0:.3f})",
            above(last["train"], n_tr, tpl["train_pass"], n_tr, by=TEMPLATE_PASS_DROP)
            and tpl["nll_per_action_token"]
            > tpl["nll_per_action_token_matched"] + TEMPLATE_NLL_GAP,
            f"pass lower by > {TEMPLATE_PASS_DROP} ({SE}) and NLL higher by > "
            f"{TEMPLATE_NLL_GAP} nats than matched SFT",
        ),
        _row(
            "template_malformed",
            {"mal": tpl["malformed_per_episode"], "mal0": last["train_malformed"], **wrong},
            "{mal:.2f} (matched {mal0:.2f})" + wrong_text,
            tpl["malformed_per_episode"] >= 2 * last["train_malformed"]
            and tpl["malformed_per_episode"] - last["train_malformed"] > margin(n_tr) * mal_se,
            f"at least double the matched rate, by {SE} (Poisson)",
        ),
    ]

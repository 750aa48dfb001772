"""Chapter 15's table: each claim of the book as a rule over one seed's results (`rows`);
ch15_summary aggregates the rows over seeds (mean +- standard error, k of N seeds) and
renders table.md.

A rule compares arms with a margin of two standard errors of the evaluations behind it
(`se`, `se_diff`), so a noisy ordering such as 0.41 against 0.38 is not a "yes". Every
threshold is a named constant below, and every rule is printed in its row from them; the
book's own numbers are in ch15_book. `tests/test_ch15_table.py` breaks each rule on a
hand-made result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arl.experiments.ch15_book import BOOK_WEAK_ENTROPY, CLAIMS

Z = 2.0  # margins are Z standard errors
SE = f"{Z:g} SE"  # how a rule's text names that margin
GUESSING = 0.3  # the top of the guessing level (blind play passes about 0.15-0.2)

# the rules' thresholds, in the order of the table
ACTION_SHARE_MAX = 0.3  # actions are a minority of the predicted positions ...
TOOL_SHARE_MIN = 0.5  # ... and tool output the majority
INIT_LOSS_TOL = 0.5  # nats from log V: at initialization neither loss reveals the mask
FORMAT_MALFORMED_MAX = 0.5  # weak base: malformed calls per episode (it has the format)
ENTROPY_FACTOR = 2  # weak base's action entropy within this factor of the book's
SFT_HELDOUT_MIN = 0.8  # oracle SFT's held-out pass: the rule transfers
SFT_ENTROPY_DROP = 10  # oracle SFT divides the action entropy by at least this
CONVERGED_TOL = 0.05  # oracle SFT has converged once train stays this close to its final value
CONVERGED_BY = 40  # ... by this step
COPY_RATE_MIN = 0.8  # copy probe after oracle SFT
IDENTITY_TOL = 1e-4  # relative error of the RFT gradient identity (and 1 - cosine)
EI_RISE = 0.2  # expert iteration's rise over the weak base
EI_CEILING = 0.8  # expert iteration's ceiling: init (a fifth of the tasks) is never learned
INIT_SHARE = 0.2  # init's share of the tasks (4 of 20), so of a train evaluation's episodes
EI_HELDOUT_MAX = 0.4  # expert iteration's held-out pass stays low
DPO_REJECTED_MAX = -20  # nats: DPO pushes the rejected episodes down
DPO_MALFORMED_FACTOR = 5  # DPO multiplies malformed calls by at least this ...
DPO_MALFORMED_MIN = 0.5  # ... and to at least this many per episode
RECIPE_TOL = 0.1  # SFT-then-RL ends this close to oracle SFT on train
RECIPE_GAP = 0.15  # a recipe "well below" another is this much below
TEMPLATE_PASS_DROP = 0.5  # stripped-template SFT passes this much less than matched SFT ...
TEMPLATE_NLL_GAP = 0.3  # ... and its NLL per action token is this many nats higher
PUBLIC_GAP = 0.2  # public-filter RFT: the filter's pass rate exceeds the hidden one by this


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


def _row(key: str, measured: dict, fmt: str, reproduced: bool, rule: str) -> Row:
    """A row of claim `key`, labelled with the book's quantity and number."""
    claim = CLAIMS[key]
    return Row(key, claim.quantity, claim.book, measured, fmt, bool(reproduced), rule)


@dataclass(frozen=True)
class Ends:
    """What several rules compare against: evaluation sizes and the arms' final numbers."""

    n_tr: int  # episodes behind a train-split pass rate
    n_ho: int  # episodes behind a held-out pass rate
    weak: dict  # the weak base's evaluation
    last: dict  # oracle SFT's last evaluation
    final: dict[str, dict]  # each recipe's last point: {"train", "heldout"}

    @classmethod
    def of(cls, R: dict) -> Ends:
        final = {k: v[-1] for k, v in R["recipes"]["curves"].items()}
        sft = R["sft"]
        return cls(R["eval_n"]["train"], R["eval_n"]["heldout"], sft["weak_base"],
                   sft["oracle_sft_curve"][-1], final)  # fmt: skip


def rows(R: dict) -> list[Row]:
    """The chapter's claims as rules over one seed's results `R` (see `ch15.run`), in the
    book's order."""
    e = Ends.of(R)
    found = [*_token_rows(R), *_sft_rows(R, e), *_rft_rows(R, e), *_dpo_rows(R, e),
             *_recipe_rows(R, e), *_problem_rows(R, e)]  # fmt: skip
    order = list(CLAIMS)
    return sorted(found, key=lambda r: order.index(r.key))


def _token_rows(R: dict) -> list[Row]:
    """15.1: where an unmasked loss spends its weight; both losses at initialization."""
    tok = R["tokens"]
    near_logv = [abs(tok[k] - tok["log_vocab"]) < INIT_LOSS_TOL
                 for k in ("masked_loss_init", "unmasked_loss_init")]  # fmt: skip
    return [
        _row("action_share",
             {"action": tok["action_share"], "tool": tok["observation_share"]},
             "{action:.0%} (tool output {tool:.0%})",
             tok["action_share"] < ACTION_SHARE_MAX and tok["observation_share"] > TOOL_SHARE_MIN,
             f"actions < {ACTION_SHARE_MAX:.0%} and tool output > {TOOL_SHARE_MIN:.0%} of "
             "predicted positions"),
        _row("init_losses",
             {"masked": tok["masked_loss_init"], "unmasked": tok["unmasked_loss_init"],
              "logv": tok["log_vocab"]},
             "{masked:.2f} / {unmasked:.2f} (log V = {logv:.2f})",
             all(near_logv),
             f"both within {INIT_LOSS_TOL} nats of log V: the value does not reveal the mask"),
    ]  # fmt: skip


def converged_step(curve: list[dict]) -> int:
    """The first evaluated step from which train stays within CONVERGED_TOL of its final value."""
    settled = [abs(q["train"] - curve[-1]["train"]) <= CONVERGED_TOL for q in curve]
    return next(q["step"] for i, q in enumerate(curve) if all(settled[i:]))


def _sft_rows(R: dict, e: Ends) -> list[Row]:
    """15.2: the weak base, oracle SFT (level, speed, entropy) and the copy probe."""
    sft, weak, last = R["sft"], e.weak, e.last
    curve = sft["oracle_sft_curve"]
    conv = converged_step(curve)
    # the state at the book's step: what lags there is most often init (its op and its copied
    # name), on some seeds another family, so the row prints init and the lowest family
    due = [q for q in curve if q["step"] <= CONVERGED_BY][-1]
    ent = weak["train_entropy"]
    return [
        _row("weak_base",
             {"mal": weak["train_malformed"], "tr": weak["train"], "ho": weak["heldout"],
              "read": weak["train_read"]},
             "{mal:.2f} / {tr:.2f}, {ho:.2f} / {read:.0%}",
             weak["train_malformed"] < FORMAT_MALFORMED_MAX
             and max(weak["train"], weak["heldout"]) <= GUESSING,
             f"format (malformed < {FORMAT_MALFORMED_MAX}) without skill (pass <= {GUESSING} "
             "on both splits)"),
        _row("weak_entropy",
             {"ent": ent, "ent1": weak["train_first_call_entropy"]},
             "{ent:.2f} nats (first call {ent1:.2f})",
             BOOK_WEAK_ENTROPY / ENTROPY_FACTOR <= ent <= ENTROPY_FACTOR * BOOK_WEAK_ENTROPY,
             f"within a factor {ENTROPY_FACTOR} of the book's {BOOK_WEAK_ENTROPY} nats"),
        _row("oracle_sft",
             {"tr": last["train"], "ho": last["heldout"], "e0": ent,
              "e1": last["train_entropy"], "steps": last["step"],
              "ho4": _without_init(last["heldout_family"])},
             "{tr:.2f} / {ho:.2f} (held-out without init {ho4:.2f}), entropy {e0:.2f} -> "
             "{e1:.3f} nats ({steps:.0f} steps)",
             last["heldout"] >= SFT_HELDOUT_MIN
             and last["train_entropy"] <= ent / SFT_ENTROPY_DROP,
             f"held-out >= {SFT_HELDOUT_MIN} (the rule transfers); entropy falls >= "
             f"{SFT_ENTROPY_DROP}x"),
        _row("oracle_sft_speed",
             {"conv": conv, "at": due["step"], "tr": due["train"],
              "init": due["train_family"]["init"], "low": min(due["train_family"].values())},
             "step {conv:.0f} (train at step {at:.0f}: {tr:.2f}; init {init:.2f}, lowest family "
             "{low:.2f})",
             conv <= CONVERGED_BY, f"converged by step {CONVERGED_BY}"),
        _row("copy_probe",
             {"copy": sft["copy_probe"]["oracle_sft"], "copy0": sft["copy_probe"]["weak_base"]},
             "copy rate {copy:.2f} (weak base {copy0:.2f}; a memorized name: 0.17)",
             sft["copy_probe"]["oracle_sft"] >= COPY_RATE_MIN,
             "the shown name is the argmax after `edit init` in >= "
             f"{COPY_RATE_MIN:.0%} of renamed listings"),
    ]  # fmt: skip


def expert_iteration_holds(weak_train: float, rounds: list[dict], n_tr: int) -> bool:
    """The expert-iteration rule on the weak base's train pass and each round's evaluation
    (`train`, `heldout`, `train_family`), `n_tr` episodes behind a train pass rate."""
    ei = [weak_train] + [r["train"] for r in rounds]  # from the weak base, round by round
    gains = [b - a for a, b in zip(ei, ei[1:], strict=False)]
    # the ceiling's cause: the final policy does not solve init (pass within Z SE of zero);
    # the weak base's rare copies may be kept early, but filtered cloning does not amplify them
    init_end = rounds[-1]["train_family"]["init"]
    return (above(ei[-1], n_tr, ei[0], n_tr, by=EI_RISE) and gains[-1] < max(gains) / 2
            and ei[-1] <= EI_CEILING + Z * se(ei[-1], n_tr)
            and init_end <= Z * se(0.0, round(n_tr * INIT_SHARE))
            and max(r["heldout"] for r in rounds) <= EI_HELDOUT_MAX)  # fmt: skip


def _rft_rows(R: dict, e: Ends) -> list[Row]:
    """15.3 and 15.6: the gradient identity, expert iteration, its kept set, public filter."""
    rounds, ident, pub = R["rft"]["rounds"], R["rft"]["identity"], R["public_rft"]["rounds"]
    ei = [e.weak["train"]] + [r["train"] for r in rounds]
    init_end = rounds[-1]["train_family"]["init"]
    init_kept = rounds[0]["family_share"]["init"]
    held_max = max(r["heldout"] for r in rounds)
    kept = rounds[min(1, len(rounds) - 1)]
    tol = f"{IDENTITY_TOL:.0e}".replace("e-0", "e-")
    return [
        _row("rft_identity",
             {"err": ident["relative_error"], "ratio": ident["kept_token_ratio"],
              "cos": ident["cosine_mean_baseline_sft"], "p": ident["success_rate"]},
             "relative error {err:.1e} at ratio {ratio:.4f}; mean baseline cosine {cos:.3f} "
             "(success rate {p:.2f})",
             ident["relative_error"] < IDENTITY_TOL
             and ident["cosine_mean_baseline_sft"] < 1 - IDENTITY_TOL,
             f"relative error < {tol}; the mean baseline changes the direction"),
        _row("expert_iteration",
             {**{f"r{i}": v for i, v in enumerate(ei)}, "ho": held_max, "init": init_end,
              "kept0": init_kept},
             " -> ".join(f"{{r{i}:.2f}}" for i in range(len(ei)))
             + "; held-out <= {ho:.2f}; init pass {init:.2f} (round-1 kept share {kept0:.0%})",
             expert_iteration_holds(e.weak["train"], rounds, e.n_tr),
             f"rises > {EI_RISE} ({SE}); plateaus (last gain < half the largest) under the init "
             f"ceiling {EI_CEILING}; init not learned (last round's init pass within {SE} of 0); "
             f"held-out <= {EI_HELDOUT_MAX}"),
        _row("kept_set",
             {"kept": kept["kept"], "distinct": kept["distinct_action_sequences"]},
             "{kept:.0f} episodes, {distinct:.0f} distinct",
             kept["kept"] >= 2 * kept["distinct_action_sequences"],
             "each distinct sequence appears twice or more on average"),
        _row("public_rft",
             {"h0": pub[0]["hack_share"], "h1": pub[-1]["hack_share"],
              "pub": pub[-1]["train_public"], "hid": pub[-1]["train"]},
             "hacks {h0:.0%} -> {h1:.0%}; filter pass {pub:.2f}; hidden {hid:.2f}",
             pub[-1]["hack_share"] > pub[0]["hack_share"]
             and above(pub[-1]["train_public"], e.n_tr, pub[-1]["train"], e.n_tr, by=PUBLIC_GAP),
             f"the hack share grows; the filter's pass rate exceeds hidden by > {PUBLIC_GAP} "
             f"({SE})"),
    ]  # fmt: skip


def _dpo_rows(R: dict, e: Ends) -> list[Row]:
    """15.4: plain DPO (the dashboard rises, the policy breaks) and DPO + NLL."""
    plain, nll = R["dpo"]["dpo"][-1], R["dpo"]["dpo_nll"][-1]
    mal_floor = max(DPO_MALFORMED_FACTOR * e.weak["train_malformed"], DPO_MALFORMED_MIN)
    return [
        _row("dpo",
             {"rej": plain["rejected_delta"], "ch": plain["chosen_delta"],
              "tr": plain["train"], "mal": plain["train_malformed"], "ho": plain["heldout"]},
             "rejected {rej:+.0f} nats, chosen {ch:+.2f}; train {tr:.2f}; malformed {mal:.2f}; "
             "held-out {ho:.2f}",
             plain["rejected_delta"] < DPO_REJECTED_MAX
             and plain["train_malformed"] >= mal_floor
             and above(e.weak["heldout"], e.n_ho, plain["heldout"], e.n_ho),
             f"rejected < {DPO_REJECTED_MAX} nats; malformed x{DPO_MALFORMED_FACTOR} or more; "
             f"held-out falls ({SE})"),
        _row("dpo_nll",
             {"ch": nll["chosen_delta"], "mal": nll["train_malformed"],
              "mal0": plain["train_malformed"], "tr": nll["train"], "tr0": plain["train"],
              "ho": nll["heldout"]},
             "chosen {ch:+.2f}; malformed {mal:.2f} (plain {mal0:.2f}); train {tr:.2f} "
             "(plain {tr0:.2f}); held-out {ho:.2f}",
             nll["chosen_delta"] > plain["chosen_delta"]
             and nll["train_malformed"] < plain["train_malformed"] / 2
             and above(nll["train"], e.n_tr, plain["train"], e.n_tr)
             and above(e.last["heldout"], e.n_ho, nll["heldout"], e.n_ho),
             f"vs plain DPO: chosen higher, malformed halved, train higher ({SE}); held-out "
             f"below oracle SFT's ({SE}): no regularizer repairs the data"),
    ]  # fmt: skip


def _recipe_rows(R: dict, e: Ends) -> list[Row]:
    """15.5: the four recipes at their last step, and the orderings between them."""
    final, n_tr, n_ho = e.final, e.n_tr, e.n_ho
    o, c, rl, rf = final["oracle_sft"], final["sft_then_rl"], final["rl_only"], final["rft"]
    cold = R["sft"]["cold_start"]
    return [
        _row("four_recipes",
             {f"{k}_{s}": final[k][s] for k in final for s in ("train", "heldout")},
             "oracle SFT {oracle_sft_train:.2f}/{oracle_sft_heldout:.2f}; SFT+RL "
             "{sft_then_rl_train:.2f}/{sft_then_rl_heldout:.2f}; RFT {rft_train:.2f}/"
             "{rft_heldout:.2f}; RL only {rl_only_train:.2f}/{rl_only_heldout:.2f}",
             abs(c["train"] - o["train"]) <= RECIPE_TOL,
             f"SFT-then-RL ends within {RECIPE_TOL} of oracle SFT on train"),
        _row("cold_start",
             {"dtr": c["train"] - rl["train"], "dho": c["heldout"] - rl["heldout"],
              "step": cold["step"], "p0": cold["train_pass"]},
             "{dtr:+.2f}, {dho:+.2f} (cold start: step {step:.0f}, train pass {p0:.2f})",
             above(c["train"], n_tr, rl["train"], n_tr, by=RECIPE_GAP)
             and above(c["heldout"], n_ho, rl["heldout"], n_ho, by=RECIPE_GAP),
             f"SFT-then-RL >= {RECIPE_GAP} above RL only on both splits (and by {SE})"),
        _row("rl_only",
             {"rl": rl["heldout"], "o": o["heldout"], "c": c["heldout"]},
             "{rl:.2f} against {o:.2f} and {c:.2f}",
             above(o["heldout"], n_ho, rl["heldout"], n_ho, by=RECIPE_GAP),
             f"RL only's held-out >= {RECIPE_GAP} below oracle SFT's ({SE}); against "
             "SFT-then-RL: the cold-start row"),
        _row("rl_only_moving",
             {"rl": rl["train"], "w": e.weak["train"],
              "mal": R["recipes"]["rl_only"][-1]["train_malformed"]},
             "{rl:.2f} against {w:.2f} (malformed {mal:.2f} per episode)",
             above(rl["train"], n_tr, e.weak["train"], n_tr),
             f"RL only's train pass above the weak base's ({SE})"),
        _row("rft_transfer",
             {"rft": rf["heldout"], "o": o["heldout"]},
             "{rft:.2f} against {o:.2f}",
             above(o["heldout"], n_ho, rf["heldout"], n_ho, by=RECIPE_GAP),
             f"RFT's held-out >= {RECIPE_GAP} below oracle SFT's ({SE})"),
    ]  # fmt: skip


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
        _row("mixed_groups", {"a": g_cold, "b": g_final}, "{a:.0%} / {b:.0%}",
             above(g_cold, g_n, g_final, g_n),
             f"the cold start has more informative groups ({SE} over {g_n} held-out groups)"),
        _row("template_pass",
             {"tr": tpl["train_pass"], "ok": last["train"], "nll": tpl["nll_per_action_token"],
              "nll0": tpl["nll_per_action_token_matched"]},
             "{tr:.0%} (matched {ok:.0%}); NLL {nll:.2f} nats (matched {nll0:.3f})",
             above(last["train"], n_tr, tpl["train_pass"], n_tr, by=TEMPLATE_PASS_DROP)
             and tpl["nll_per_action_token"]
             > tpl["nll_per_action_token_matched"] + TEMPLATE_NLL_GAP,
             f"pass lower by > {TEMPLATE_PASS_DROP} ({SE}) and NLL higher by > "
             f"{TEMPLATE_NLL_GAP} nats than matched SFT"),
        _row("template_malformed",
             {"mal": tpl["malformed_per_episode"], "mal0": last["train_malformed"], **wrong},
             "{mal:.2f} (matched {mal0:.2f})" + wrong_text,
             tpl["malformed_per_episode"] >= 2 * last["train_malformed"]
             and tpl["malformed_per_episode"] - last["train_malformed"] > Z * mal_se,
             f"at least double the matched rate, by {SE} (Poisson)"),
    ]  # fmt: skip


def _without_init(family: dict[str, float]) -> float:
    """Mean pass rate over the families that need no copying (all but init)."""
    return float(np.mean([v for f, v in family.items() if f != "init"]))

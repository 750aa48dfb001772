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

from arl.experiments.ch15_book import BOOK_WEAK_ENTROPY
from arl.experiments.ch15_rules import (
    ACTION_SHARE_MAX,
    CLAIMS,
    CONVERGED_BY,
    CONVERGED_TOL,
    COPY_RATE_MIN,
    EI_CEILING,
    EI_HELDOUT_MAX,
    EI_RISE,
    ENTROPY_FACTOR,
    FORMAT_MALFORMED_MAX,
    GUESSING,
    IDENTITY_TOL,
    INIT_LOSS_TOL,
    INIT_SHARE,
    PUBLIC_GAP,
    SE,
    SFT_ENTROPY_DROP,
    SFT_HELDOUT_MIN,
    TOOL_SHARE_MIN,
    Ends,
    Row,
    _row,
    above,
    margin,
    se,
    without_init,
)
from arl.experiments.ch15_table_design import _dpo_rows, _problem_rows, _recipe_rows


def rows(R: dict) -> list[Row]:
    """The chapter's claims as rules over one seed's results `R` (see `ch15.run`), in the
    book's order."""
    e = Ends.of(R)
    found = [
        *_token_rows(R),
        *_sft_rows(R, e),
        *_rft_rows(R, e),
        *_dpo_rows(R, e),
        *_recipe_rows(R, e),
        *_problem_rows(R, e),
    ]
    order = list(CLAIMS)
    return sorted(found, key=lambda r: order.index(r.key))


def _token_rows(R: dict) -> list[Row]:
    """15.1: where an unmasked loss spends its weight; both losses at initialization."""
    tok = R["tokens"]
    near_logv = [
        abs(tok[k] - tok["log_vocab"]) < INIT_LOSS_TOL
        for k in ("masked_loss_init", "unmasked_loss_init")
    ]
    return [
        _row(
            "action_share",
            {"action": tok["action_share"], "tool": tok["observation_share"]},
            "{action:.0%} (tool output {tool:.0%})",
            tok["action_share"] < ACTION_SHARE_MAX and tok["observation_share"] > TOOL_SHARE_MIN,
            f"actions < {ACTION_SHARE_MAX:.0%} and tool output > {TOOL_SHARE_MIN:.0%} of "
            "predicted positions",
        ),
        _row(
            "init_losses",
            {
                "masked": tok["masked_loss_init"],
                "unmasked": tok["unmasked_loss_init"],
                "logv": tok["log_vocab"],
            },
            "{masked:.2f} / {unmasked:.2f} (log V = {logv:.2f})",
            all(near_logv),
            f"both within {INIT_LOSS_TOL} nats of log V: the value does not reveal the mask",
        ),
    ]


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
    oracle_fresh = sft.get("fresh", {}).get("oracle_sft")  # runs saved before it: none
    fresh = {"fr": oracle_fresh["fresh"]} if oracle_fresh else {}
    return [
        _row(
            "weak_base",
            {
                "mal": weak["train_malformed"],
                "tr": weak["train"],
                "ho": weak["heldout"],
                "read": weak["train_read"],
            },
            "{mal:.2f} / {tr:.2f}, {ho:.2f} / {read:.0%}",
            weak["train_malformed"] < FORMAT_MALFORMED_MAX
            and max(weak["train"], weak["heldout"]) <= GUESSING,
            f"format (malformed < {FORMAT_MALFORMED_MAX}) without skill (pass <= {GUESSING} "
            "on both splits)",
        ),
        _row(
            "weak_entropy",
            {"ent": ent, "ent1": weak["train_first_call_entropy"]},
            "{ent:.2f} nats (first call {ent1:.2f})",
            BOOK_WEAK_ENTROPY / ENTROPY_FACTOR <= ent <= ENTROPY_FACTOR * BOOK_WEAK_ENTROPY,
            f"within a factor {ENTROPY_FACTOR} of the book's {BOOK_WEAK_ENTROPY} nats",
        ),
        _row(
            "oracle_sft",
            {
                "tr": last["train"],
                "ho": last["heldout"],
                "e0": ent,
                "e1": last["train_entropy"],
                "steps": last["step"],
                "ho4": without_init(last["heldout_family"]),
            }
            | fresh,
            "{tr:.2f} / {ho:.2f} (held-out without init {ho4:.2f}"
            + ("; fresh {fr:.2f}" if fresh else "")
            + "), entropy {e0:.2f} -> {e1:.3f} nats ({steps:.0f} steps)",
            last["heldout"] >= SFT_HELDOUT_MIN and last["train_entropy"] <= ent / SFT_ENTROPY_DROP,
            f"held-out >= {SFT_HELDOUT_MIN} (the rule transfers); entropy falls >= "
            f"{SFT_ENTROPY_DROP}x",
        ),
        _row(
            "oracle_sft_speed",
            {
                "conv": conv,
                "at": due["step"],
                "tr": due["train"],
                "init": due["train_family"]["init"],
                "low": min(due["train_family"].values()),
            },
            "step {conv:.0f} (train at step {at:.0f}: {tr:.2f}; init {init:.2f}, lowest family "
            "{low:.2f})",
            conv <= CONVERGED_BY,
            f"converged by step {CONVERGED_BY}",
        ),
        _row(
            "copy_probe",
            {"copy": sft["copy_probe"]["oracle_sft"], "copy0": sft["copy_probe"]["weak_base"]},
            "copy rate {copy:.2f} (weak base {copy0:.2f}; a memorized name: 0.17)",
            sft["copy_probe"]["oracle_sft"] >= COPY_RATE_MIN,
            "the shown name is the argmax after `edit init` in >= "
            f"{COPY_RATE_MIN:.0%} of renamed listings",
        ),
    ]


def expert_iteration_holds(weak_train: float, rounds: list[dict], n_tr: int) -> bool:
    """The expert-iteration rule on the weak base's train pass and each round's evaluation
    (`train`, `heldout`, `train_family`), `n_tr` episodes behind a train pass rate."""
    ei = [weak_train] + [r["train"] for r in rounds]  # from the weak base, round by round
    gains = [b - a for a, b in zip(ei, ei[1:], strict=False)]
    # the ceiling's cause: the final policy does not solve init (pass within t SE of zero);
    # the weak base's rare copies may be kept early, but filtered cloning does not amplify them
    init_end = rounds[-1]["train_family"]["init"]
    n_init = round(n_tr * INIT_SHARE)  # init's episodes in a train evaluation
    return (
        above(ei[-1], n_tr, ei[0], n_tr, by=EI_RISE)
        and gains[-1] < max(gains) / 2
        and ei[-1] <= EI_CEILING + margin(n_tr) * se(ei[-1], n_tr)
        and init_end <= margin(n_init) * se(0.0, n_init)
        and max(r["heldout"] for r in rounds) <= EI_HELDOUT_MAX
    )


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
        _row(
            "rft_identity",
            {
                "err": ident["relative_error"],
                "ratio": ident["kept_token_ratio"],
                "cos": ident["cosine_mean_baseline_sft"],
                "p": ident["success_rate"],
            },
            "relative error {err:.1e} at ratio {ratio:.4f}; mean baseline cosine {cos:.3f} "
            "(success rate {p:.2f})",
            ident["relative_error"] < IDENTITY_TOL
            and ident["cosine_mean_baseline_sft"] < 1 - IDENTITY_TOL,
            f"relative error < {tol}; the mean baseline changes the direction",
        ),
        _row(
            "expert_iteration",
            {
                **{f"r{i}": v for i, v in enumerate(ei)},
                "ho": held_max,
                "init": init_end,
                "kept0": init_kept,
            },
            " -> ".join(f"{{r{i}:.2f}}" for i in range(len(ei)))
            + "; held-out <= {ho:.2f}; init pass {init:.2f} (round-1 kept share {kept0:.0%})",
            expert_iteration_holds(e.weak["train"], rounds, e.n_tr),
            f"rises > {EI_RISE} ({SE}); plateaus (last gain < half the largest) under the init "
            f"ceiling {EI_CEILING}; init not learned (last round's init pass within {SE} of 0); "
            f"held-out <= {EI_HELDOUT_MAX}",
        ),
        _row(
            "kept_set",
            {"kept": kept["kept"], "distinct": kept["distinct_action_sequences"]},
            "{kept:.0f} episodes, {distinct:.0f} distinct",
            kept["kept"] >= 2 * kept["distinct_action_sequences"],
            "each distinct sequence appears twice or more on average",
        ),
        _row(
            "public_rft",
            {
                "h0": pub[0]["hack_share"],
                "h1": pub[-1]["hack_share"],
                "pub": pub[-1]["train_public"],
                "hid": pub[-1]["train"],
            },
            "hacks {h0:.0%} -> {h1:.0%}; filter pass {pub:.2f}; hidden {hid:.2f}",
            pub[-1]["hack_share"] > pub[0]["hack_share"]
            and above(pub[-1]["train_public"], e.n_tr, pub[-1]["train"], e.n_tr, by=PUBLIC_GAP),
            f"the hack share grows; the filter's pass rate exceeds hidden by > {PUBLIC_GAP} ({SE})",
        ),
    ]

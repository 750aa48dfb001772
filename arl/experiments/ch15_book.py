"""What the book reports in Chapter 15: each row's quantity and the book's number, as text.

References only: nothing here is measured, and no rule compares against these strings
(ch15_table's rules check the mechanism). The order is the order of the table.
"""

from __future__ import annotations

from typing import NamedTuple


class Claim(NamedTuple):
    """One row's label and the book's value for it."""

    quantity: str
    book: str


BOOK_WEAK_ENTROPY = 0.25  # nats, Section 15.2: the weak base's action entropy

# Section 15.1's accounting of the 20 oracle demonstrations (`arl tokens` prints it beside ours)
BOOK_TOKENS = {
    "predicted_positions": 1338,
    "action_positions": 260,
    "observation_positions": 838,
    "action_share": 0.19,
    "observation_share": 0.63,
    "vocab_size": 316,
}

CLAIMS: dict[str, Claim] = {
    "action_share": Claim(
        "action share of predicted positions, 20 oracle demos", "19% (tool output 63%)"
    ),
    "init_losses": Claim(
        "masked / unmasked loss at initialization vs log V", "both near log 316 = 5.76"
    ),
    "weak_base": Claim(
        "weak base: malformed / pass train, held-out / reads", "0.06 / 0.14, 0.14 / 29%"
    ),
    "weak_entropy": Claim("weak base: action entropy (all action tokens; first call)", "0.25 nats"),
    "oracle_sft": Claim(
        "oracle SFT from the weak base: train / held-out / entropy",
        "0.99 / ~0.9, entropy 0.25 -> 0.02 nats",
    ),
    "oracle_sft_speed": Claim(
        "oracle SFT: step from which train stays within 0.05 of final", "~40 steps"
    ),
    "copy_probe": Claim(
        "init: the accumulator copied from the listing, after oracle SFT",
        "init solved on train and held-out (0.99 / ~0.9 overall)",
    ),
    "rft_identity": Claim(
        "0/1 PG gradient = SFT-on-kept gradient x kept/all action tokens",
        "exact to rounding; mean baseline cosine 0.985",
    ),
    "expert_iteration": Claim(
        "expert iteration, 4 rounds: train pass after each round",
        "0.15 -> 0.33 -> 0.68 -> ~0.75 (ceiling 0.80, init never solved); held-out 0.10-0.23",
    ),
    "dpo": Claim(
        "offline DPO: rejected / chosen change; train; malformed; held-out",
        "rejected -45 nats, chosen +0.74; train 0.41; malformed 2.0-2.4; held-out 0",
    ),
    "dpo_nll": Claim(
        "DPO + NLL (weight 1): chosen change; malformed; train; held-out",
        "chosen +1.89; malformed / 3; train 0.69; held-out 0.17",
    ),
    "four_recipes": Claim(
        "four recipes at the last step: train / held-out",
        "oracle SFT 0.99/0.93; SFT+RL 0.96/0.95; RFT 0.74/0.15; RL only 0.36/0.30",
    ),
    "cold_start": Claim(
        "a cold start makes RL work: SFT+RL minus RL only (train, held-out)", "+0.60, +0.65"
    ),
    "rl_only": Claim(
        "RL only is well below both demonstration recipes (held-out)", "0.30 against 0.93 and 0.95"
    ),
    "rl_only_moving": Claim(
        "RL only is still moving: it ends above the weak base (train)",
        "0.36 against 0.14, rising at the end",
    ),
    "rft_transfer": Claim(
        "RFT's shortcut does not transfer: held-out RFT vs oracle SFT", "0.15 against 0.93"
    ),
    "mixed_groups": Claim(
        "held-out groups with mixed outcomes: cold start / final SFT", "70% / 10%"
    ),
    "template_pass": Claim(
        "demos without <obs> </obs>: train pass and NLL per action token",
        "7.5% (0.98 rendered correctly); NLL 0.82 nats",
    ),
    "template_malformed": Claim(
        "demos without <obs> </obs>: malformed calls per episode", "0.62 (matched: ~0.01)"
    ),
    "kept_set": Claim(
        "round-1 kept set: episodes / distinct action sequences", "84 episodes, 21 distinct"
    ),
    "public_rft": Claim(
        "RFT on public tests: hack share round 1 -> last; filter vs hidden",
        "hacks 42% -> 64% of kept; filter pass 0.97; hidden ~0.35",
    ),
}

"""Chapter 15's rules, the parts every row shares: the named thresholds, the standard errors a
margin is made of (`se`, `se_diff`, `above`), and a row (`Row`, `Ends`: what rules compare
against). The rows themselves are ch15_table's (15.1-15.3) and ch15_table_design's (15.4-15.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arl.eval.stats import t_critical
from arl.experiments.ch15_book import CLAIMS

SE = "t SE"  # how a rule's text names its margin: margin(n) standard errors
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


def margin(n: int) -> float:
    """How many standard errors a per-seed rule's margin is: Student's t at one-sided 97.5%
    with n - 1 degrees of freedom, n the episodes (or groups) behind the smaller evaluation
    (1.97-1.98 at this chapter's 120-240 episodes)."""
    return t_critical(max(int(n), 1) - 1)


def above(a: float, na: int, b: float, nb: int, by: float = 0.0) -> bool:
    """a exceeds b by at least `by`, and by more than margin(min(na, nb)) standard errors of
    the difference."""
    return a - b >= by and a - b > margin(min(na, nb)) * se_diff(a, na, b, nb)


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
        return cls(
            R["eval_n"]["train"],
            R["eval_n"]["heldout"],
            sft["weak_base"],
            sft["oracle_sft_curve"][-1],
            final,
        )


def without_init(family: dict[str, float]) -> float:
    """Mean pass rate over the families that need no copying (all but init)."""
    return float(np.mean([v for f, v in family.items() if f != "init"]))

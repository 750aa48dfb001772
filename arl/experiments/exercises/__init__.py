"""Chapter 15's exercises run on the gym: `arl reproduce exercise N|all [--seeds K]`.

Each exercise has the Appendix B problems' form (arl.experiments.problems): a per-seed
measurement, its claims judged over seeds, results.json with `shown`, a figure with +-1 SE
bands; `arl.experiments.problems.run(N, ..., kind="exercise")` runs them with the same
machinery, writing exercise-N.png under runs/exercise-N. Exercise 7 (a design review) is worked
in docs/ch15.md with `arl reproduce problem 29`.
"""

from __future__ import annotations

from arl.experiments.exercises import (
    dpo_start,
    gradients,
    random_base,
    rft_baseline,
    sft_then_rl,
    star,
)
from arl.experiments.problems.common import Problem

EXERCISES: dict[int, Problem] = {
    1: gradients.EXERCISE_1,
    2: random_base.EXERCISE_2,
    3: star.EXERCISE_3,
    4: rft_baseline.EXERCISE_4,
    5: dpo_start.EXERCISE_5,
    6: sft_then_rl.EXERCISE_6,
}

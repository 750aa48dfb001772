"""Evaluation statistics (Chapter 17; Appendix B, Problems 21 and 22).

pass@k (unbiased, beside the plug-in estimate), bootstrap intervals over tasks, the
paired comparison of two runs on the same tasks, and the standard error over seeds (seed_se,
the one every seed mean in the project uses). Per-episode result files are JSONL with one
object per line holding at least `task` (str), `sample` (int) and `passed` (bool).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from arl.errors import ArlError

# ----------------------------------------------------------------------------- pass@k


def _check_nck(n: int, c: int, k: int) -> None:
    """Raise ArlError unless 0 <= c <= n and 1 <= k <= n (all integers)."""
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ArlError(f"pass@k: {name} must be an integer, got {v!r}")
    if n < 1:
        raise ArlError(f"pass@k: n must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ArlError(f"pass@k: c must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ArlError(f"pass@k: k must be in [1, n={n}], got {k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k)/C(n, k) from n samples with c passes (Problem 21).

    Computed as -expm1(sum log1p(-k/i), i = n-c+1..n): no huge binomials, so it stays finite
    and accurate for n in the thousands.
    """
    _check_nck(n, c, k)
    if n - c < k:  # every k-subset contains a pass
        return 1.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(-np.expm1(np.sum(np.log1p(-k / i))))


def pass_at_k_plugin(n: int, c: int, k: int) -> float:
    """Plug-in estimate 1 - (1 - c/n)^k: biased low for k > 1 by Jensen (Problem 21)."""
    _check_nck(n, c, k)
    return 1.0 - (1.0 - c / n) ** k


def pass_at_k_exact(n: int, c: int, k: int) -> Fraction:
    """The definition itself, 1 - C(n-c, k)/C(n, k), as an exact fraction (a reference)."""
    _check_nck(n, c, k)
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def pass_at_k_curve(n: int, c: int) -> np.ndarray:
    """Unbiased pass@k for k = 1..n of one task (entry k-1 is pass@k)."""
    return np.array([pass_at_k(n, c, k) for k in range(1, n + 1)])


def mean_pass_at_k(n: Sequence[int], c: Sequence[int], k: int) -> float:
    """Average over tasks of the per-task unbiased pass@k (tasks may differ in n)."""
    return float(np.mean(per_task_pass_at_k(n, c, k)))


def per_task_pass_at_k(n: Sequence[int], c: Sequence[int], k: int) -> np.ndarray:
    """Unbiased pass@k of each task; every task needs n >= k samples."""
    if len(n) != len(c) or len(n) == 0:
        raise ArlError("pass@k: need the same non-zero number of n and c values")
    short = [i for i, ni in enumerate(n) if ni < k]
    if short:
        raise ArlError(
            f"pass@k: k={k} exceeds the samples of {len(short)} task(s) (fewest samples: {min(n)})"
        )
    return np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in zip(n, c, strict=True)])


def per_task_pass_at_k_plugin(n: Sequence[int], c: Sequence[int], k: int) -> np.ndarray:
    """Plug-in pass@k of each task, for contrast with the unbiased one."""
    return np.array([pass_at_k_plugin(int(ni), int(ci), k) for ni, ci in zip(n, c, strict=True)])


# -------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval."""

    estimate: float  # the statistic on the full sample
    lo: float  # lower end of the interval
    hi: float  # upper end of the interval
    level: float  # coverage the interval aims for, e.g. 0.95


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> Interval:
    """Percentile bootstrap interval of the mean of per-task values, resampling tasks.

    Resample tasks, not samples: tasks are the independent units (Problem 21).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ArlError("bootstrap: need a non-empty list of per-task values")
    if n_boot < 1:
        raise ArlError(f"bootstrap: n_boot must be >= 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ArlError(f"bootstrap: level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    chunk = max(1, 1_000_000 // v.size)  # bound memory at about 8 MB of indices
    means = np.concatenate(
        [
            v[rng.integers(0, v.size, size=(min(chunk, n_boot - s), v.size))].mean(axis=1)
            for s in range(0, n_boot, chunk)
        ]
    )
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(float(v.mean()), float(lo), float(hi), level)


# ------------------------------------------------------------------- paired comparison


def normal_two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def mcnemar_exact_p(b: int, c: int) -> float:
    """McNemar's exact test: two-sided binomial p-value of b vs c discordant pairs at 1/2.

    p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2), summed with exact integers.
    """
    if b < 0 or c < 0:
        raise ArlError(f"McNemar: discordant counts must be >= 0, got {b} and {c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def mcnemar_chi2(b: int, c: int, correction: bool = False) -> tuple[float, float]:
    """McNemar's chi-square (b-c)^2/(b+c), 1 dof, optionally with the -1 continuity correction.

    Returns (statistic, p-value); without correction the statistic is z^2 of the paired test.
    """
    if b + c == 0:
        return 0.0, 1.0
    diff = abs(b - c) - (1.0 if correction else 0.0)
    stat = max(diff, 0.0) ** 2 / (b + c)
    return stat, math.erfc(math.sqrt(stat / 2.0))


def unpaired_se(p_a: float, p_b: float, n_a: int, n_b: int) -> float:
    """SE of a difference of two independent rates, sqrt(pa(1-pa)/na + pb(1-pb)/nb) (Problem 22)."""
    return math.sqrt(p_a * (1 - p_a) / n_a + p_b * (1 - p_b) / n_b)


@dataclass(frozen=True)
class PairedComparison:
    """Run B against run A on the same tasks (B - A), per-task pass rates as the unit."""

    n_tasks: int  # tasks compared
    mean_a: float  # mean per-task pass rate of A
    mean_b: float  # mean per-task pass rate of B
    diff: float  # mean_b - mean_a
    b_better: int  # tasks where B's pass rate beats A's (the discordant B-only count, b)
    a_better: int  # tasks where A's pass rate beats B's (the discordant A-only count, c)
    ties: int  # tasks with equal rates: they carry no information about the difference
    se_paired: float  # sqrt(sum_i d_i^2)/N; sqrt(b + c)/N with one sample per task
    z: float  # diff / se_paired (equals McNemar's signed z with one sample per task)
    p_z: float  # two-sided normal p-value of z
    se_unpaired: float  # sqrt(var(a)/N + var(b)/N): what ignoring the pairing would claim
    z_unpaired: float  # diff / se_unpaired
    mcnemar_exact_p: float  # exact sign test on b vs c (McNemar's exact test)
    chi2: float  # McNemar chi-square without continuity correction
    chi2_p: float  # its p-value (1 dof)
    chi2_cc: float  # McNemar chi-square with the continuity correction (|b-c|-1)^2/(b+c)
    chi2_cc_p: float  # its p-value
    ci_diff: Interval  # paired bootstrap interval of diff, resampling tasks

    def to_dict(self) -> dict:
        """Plain dict for JSON output."""
        return asdict(self)


def paired_comparison(
    rates_a: Sequence[float] | np.ndarray,
    rates_b: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedComparison:
    """Paired comparison of per-task pass rates of two runs on the same tasks (Problem 22).

    With several samples per task the per-task differences d_i carry the pairing; b and c count
    tasks where one run's rate beats the other's, and the sign test on them is McNemar's exact
    test when there is one sample per task.
    """
    a = np.asarray(rates_a, dtype=np.float64)
    b_ = np.asarray(rates_b, dtype=np.float64)
    if a.shape != b_.shape or a.ndim != 1 or a.size == 0:
        raise ArlError("paired comparison: need two equal, non-empty lists of per-task rates")
    n = a.size
    d = b_ - a
    diff = float(d.mean())
    b_better, a_better = int(np.sum(d > 0)), int(np.sum(d < 0))
    se_p = math.sqrt(float(np.sum(d**2))) / n
    se_u = math.sqrt(float(a.var() + b_.var()) / n)
    z = diff / se_p if se_p > 0 else 0.0
    z_u = diff / se_u if se_u > 0 else 0.0
    chi2, chi2_p = mcnemar_chi2(b_better, a_better, correction=False)
    chi2_cc, chi2_cc_p = mcnemar_chi2(b_better, a_better, correction=True)
    return PairedComparison(
        n_tasks=n,
        mean_a=float(a.mean()),
        mean_b=float(b_.mean()),
        diff=diff,
        b_better=b_better,
        a_better=a_better,
        ties=n - b_better - a_better,
        se_paired=se_p,
        z=z,
        p_z=normal_two_sided_p(z),
        se_unpaired=se_u,
        z_unpaired=z_u,
        mcnemar_exact_p=mcnemar_exact_p(b_better, a_better),
        chi2=chi2,
        chi2_p=chi2_p,
        chi2_cc=chi2_cc,
        chi2_cc_p=chi2_cc_p,
        ci_diff=bootstrap_mean_ci(d, n_boot=n_boot, level=level, seed=seed),
    )


# --------------------------------------------------------------------------- over seeds


def seed_se(values: Sequence[float] | np.ndarray) -> float | np.ndarray:
    """Standard error over seeds of a mean, std(ddof=1) / sqrt(n), with seeds along axis 0.

    A list of per-seed numbers gives a float; a (seeds, ...) array gives an array of the
    trailing shape (each curve point's SE, say). One seed measures no spread: the SE is 0
    (a band or interval of zero width); a caller that must say "one seed" checks n itself.
    """
    v = np.asarray(values)
    n = len(v)
    se = v.std(0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(v.shape[1:])
    return float(se) if v.ndim == 1 else se


LEVEL = 0.975  # every verdict's interval: one-sided 97.5% (a two-sided 95% interval's end)


def t_critical(df: int, level: float = LEVEL) -> float:
    """Student's t quantile at `level` with `df` degrees of freedom (3.182 at df 3, 1.960 as
    df grows): the half-width, in standard errors, of every verdict's interval over seeds.

    A mean of n seeds has n - 1 degrees of freedom; with four seeds a 2-SE rule would clear
    about 7% of null effects on one side, not 2.5%. df < 1 (one seed) has no interval: inf.
    """
    from scipy.stats import t

    if isinstance(df, bool) or not isinstance(df, (int, np.integer)):
        raise ArlError(f"t_critical: df must be an integer, got {df!r}")
    if not 0.5 < level < 1.0:
        raise ArlError(f"t_critical: level must be in (0.5, 1), got {level}")
    return float("inf") if df < 1 else float(t.ppf(level, int(df)))


@dataclass(frozen=True)
class SeedEffect:
    """An effect measured once per seed (arms paired by seed), summarized over seeds: the mean
    and its one-sided 97.5% Student-t bounds with n - 1 degrees of freedom."""

    n: int  # seeds
    mean: float  # mean of the per-seed effects
    se: float  # standard error of that mean (seed_se: 0 with one seed)
    lo: float  # mean - t * se (-inf with one seed: no interval)
    hi: float  # mean + t * se (+inf with one seed)
    df: int  # degrees of freedom, n - 1
    t: float  # the critical value t_critical(df): the bounds' half-width in SEs
    k_above: int  # seeds whose effect lies above the threshold it was judged against
    threshold: float

    def to_dict(self) -> dict:
        return asdict(self)


def seed_effect(effects: Sequence[float], threshold: float = 0.0) -> SeedEffect:
    """Mean +- t standard errors of per-seed effects (t_critical(n - 1)), with how many seeds
    lie above threshold.

    Each seed's effect is a paired difference (both arms share the seed, the starting policy
    and the evaluation tasks), so the seed-to-seed spread of the difference is its error.
    """
    d = np.asarray(effects, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or not np.isfinite(d).all():
        raise ArlError("seed effect: need a non-empty list of finite per-seed effects")
    n, mean = d.size, float(d.mean())
    se, t = seed_se(d), t_critical(d.size - 1)
    half = t * se if n > 1 else float("inf")
    k = int(np.sum(d > threshold))
    return SeedEffect(n, mean, se, mean - half, mean + half, n - 1, t, k, threshold)


def runs_from_counts(n_tasks: int, acc_a: float, b: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """One-sample-per-task outcomes of runs A and B with A's accuracy and b (B only), c (A only).

    Rebuilds Problem 22's pair of runs from its summary numbers so the general code can run on it.
    """
    a_pass = round(acc_a * n_tasks)
    both = a_pass - c
    neither = n_tasks - both - b - c
    if min(both, neither, b, c) < 0:
        raise ArlError(f"counts: N={n_tasks}, acc_a={acc_a}, b={b}, c={c} are inconsistent")
    a = np.array([1] * both + [1] * c + [0] * b + [0] * neither, dtype=np.float64)
    bb = np.array([1] * both + [0] * c + [1] * b + [0] * neither, dtype=np.float64)
    return a, bb


# ------------------------------------------------------------------------ result files


def load_results(path: str | Path) -> dict[str, dict[int, bool]]:
    """Read a per-episode JSONL file into {task: {sample: passed}}; extra keys are ignored.

    Raises ArlError with one clear line for a missing file, invalid JSON (with its line
    number), a missing or mistyped key, a duplicate (task, sample), or no episodes at all.
    """
    from arl.runio import input_lines

    p = Path(path)
    out: dict[str, dict[int, bool]] = {}
    for lineno, line in input_lines(p, named=True):  # line by line; a device is refused
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ArlError(f"{p}:{lineno}: invalid JSON ({e.msg})") from None
        except RecursionError:
            raise ArlError(f"{p}:{lineno}: JSON nested too deeply") from None
        if not isinstance(row, dict):
            raise ArlError(f"{p}:{lineno}: expected a JSON object, got {type(row).__name__}")
        for key, typ in (("task", str), ("sample", int), ("passed", bool)):
            if key not in row:
                raise ArlError(f"{p}:{lineno}: missing key '{key}'")
            v = row[key]
            if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
                raise ArlError(f"{p}:{lineno}: '{key}' must be {typ.__name__}, got {v!r}")
        if row["sample"] < 0:
            raise ArlError(f"{p}:{lineno}: 'sample' must be 0 or more, got {row['sample']}")
        samples = out.setdefault(row["task"], {})
        if row["sample"] in samples:
            raise ArlError(
                f"{p}:{lineno}: duplicate episode task={row['task']!r} sample={row['sample']}"
            )
        samples[row["sample"]] = row["passed"]
    if not out:
        raise ArlError(f"{p}: no episodes")
    return out


def task_counts(results: dict[str, dict[int, bool]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Sorted task names, samples per task n, and passes per task c."""
    names = sorted(results)
    n = np.array([len(results[t]) for t in names], dtype=np.int64)
    c = np.array([sum(results[t].values()) for t in names], dtype=np.int64)
    return names, n, c


def align_tasks(
    a: dict[str, dict[int, bool]], b: dict[str, dict[int, bool]], intersect: bool = False
) -> tuple[list[str], int, int]:
    """Tasks to compare; returns (common, dropped from A, dropped from B).

    A paired comparison needs the same tasks in both runs: tasks in only one run are an error
    unless `intersect`, in which case they are dropped and counted.
    """
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if (only_a or only_b) and not intersect:
        parts = []
        for label, names in (("A", only_a), ("B", only_b)):
            if names:
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                parts.append(f"{len(names)} only in {label} ({shown})")
        raise ArlError(
            "runs cover different tasks: "
            + "; ".join(parts)
            + "; pass --intersect to compare the common tasks only"
        )
    common = sorted(set(a) & set(b))
    if not common:
        raise ArlError("runs share no tasks")
    return common, len(only_a), len(only_b)


def pass_rates(results: dict[str, dict[int, bool]], tasks: Sequence[str]) -> np.ndarray:
    """Per-task pass rate (fraction of samples passed) for the given tasks, in order."""
    return np.array([sum(results[t].values()) / len(results[t]) for t in tasks])

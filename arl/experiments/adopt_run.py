"""`arl adopt`'s files: the rule pre-registered in OUT/rule.json before any seed runs, the
seeds' matched pairs (resumable), results.json with the decision, and the figure adopt.png.

A folder's rule is fixed once written: a rerun with another rule is refused (a rule may not
change after its results are seen); the same rule resumes the seeds not yet finished.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from arl.errors import ArlError
from arl.experiments.adopt import (
    METRICS,
    AdoptRule,
    arm_configs,
    decide,
    measure_pair,
    summary_line,
)
from arl.parallel import Where, run_many
from arl.runio import atomic_write_json, claim_output_dir, plain

OWNED = ("rule.json", "results.json", "results.partial.json", "adopt.png")


def preregister(out: Path, rule: AdoptRule) -> None:
    """Write the rule to out/rule.json, or check that the one there is the same rule; a
    different one is refused, naming what changed."""
    path = out / "rule.json"
    mine = rule.to_dict()
    if not path.exists():
        atomic_write_json(path, mine)
        return
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ArlError(f"{path}: unreadable; choose another --out") from None
    if saved != mine:
        keys = sorted(set(mine) | set(saved if isinstance(saved, dict) else {}))
        changed = [k for k in keys if not isinstance(saved, dict) or saved.get(k) != mine.get(k)]
        raise ArlError(
            f"{path}: this folder's rule was written before its run and may not change after "
            f"seeing results ({', '.join(changed)} differ); choose another --out"
        )


def finished(out: Path, rule: AdoptRule) -> dict[int, dict]:
    """The seeds an earlier run of the same rule finished in out (results or partial file)."""
    done: dict[int, dict] = {}
    for name in ("results.json", "results.partial.json"):
        path = out / name
        if not path.exists():
            continue
        try:
            saved = json.loads(path.read_text())
            rule_of, pairs = saved["rule"], {int(r["seed"]): r for r in saved["pairs"]}
        except (OSError, ValueError, KeyError, TypeError):
            raise ArlError(f"{path}: not an adopt run's results; choose another --out") from None
        if rule_of != rule.to_dict():
            raise ArlError(f"{path}: results of another rule; choose another --out")
        done |= pairs
    return done


def run_adopt(
    rule: AdoptRule,
    out: str | Path,
    overwrite: bool = False,
    where: Where | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> dict:
    """Pre-register the rule, run the seeds' matched pairs (each saved as it finishes), decide,
    and write results.json and adopt.png."""
    out = Path(out)
    arm_configs(rule, rule.seeds[0])  # a bad setting, or no change, is refused before the folder
    with claim_output_dir(out, "adopt", OWNED, overwrite=overwrite, reuse=not overwrite):
        preregister(out, rule)
        log(header(rule, out))
        done = finished(out, rule)
        todo = [s for s in rule.seeds if s not in done]
        if len(todo) < len(rule.seeds):
            log(f"adopt: seeds {sorted(set(rule.seeds) - set(todo))} already done in {out}")
        for (_, s), pair in run_many(measure_pair, [(rule, s) for s in todo], where or Where()):
            done[s] = plain(pair, ndigits=6)
            partial = {"rule": rule.to_dict(), "pairs": [done[k] for k in sorted(done)]}
            atomic_write_json(out / "results.partial.json", partial)
            log(
                f"adopt: seed {s} done in {pair['seconds']:.0f} s: gain {pair['effect']:+.4f} "
                f"({len(done)}/{len(rule.seeds)})"
            )
        pairs = [done[s] for s in rule.seeds]
        results = results_of(rule, pairs)
        draw(rule, pairs, results, out / "adopt.png")
        atomic_write_json(out / "results.json", results)
        (out / "results.partial.json").unlink(missing_ok=True)
    return results


def header(rule: AdoptRule, out: Path) -> str:
    """What runs, once its rule is written down."""
    change = ", ".join(f"{k}={v}" for k, v in rule.change)
    base = ", ".join(f"{k}={v}" for k, v in rule.base) or "defaults"
    quick = " (quick)" if rule.quick else ""
    return (
        f"arl adopt: {change} over {base}; {len(rule.seeds)} seeds x 2 arms of {rule.steps} "
        f"steps from {rule.start}{quick}; rule in {out / 'rule.json'}"
    )


def results_of(rule: AdoptRule, pairs: list[dict]) -> dict:
    """The decision over the seeds' pairs, with the rule and every pair."""
    d = decide(
        rule,
        [p["effect"] for p in pairs],
        {n: [p["worse"][n] for p in pairs] for n, _ in rule.guardrails},
    )
    return plain(
        {
            "rule": rule.to_dict(),
            **d,
            "summary": summary_line(rule, d),
            "pairs": pairs,
            "seconds": round(sum(p["seconds"] for p in pairs), 1),
        },
        ndigits=6,
    )


def draw(rule: AdoptRule, pairs: list[dict], results: dict, path: Path, title: str = "") -> None:
    """Three panels: each seed's paired gain with the margin and the 2-SE interval; each
    guardrail's per-seed worsening as a share of its bound; both arms' train pass over steps."""
    from arl.experiments.problems.common import new_figure, save_figure

    fig, (ax, bx, cx) = new_figure(3)
    effects = [p["effect"] for p in pairs]
    e = results["effect"]
    ax.plot(range(len(effects)), effects, "o", color="C0", label="seed's paired gain")
    ax.axhline(rule.margin, color="C3", ls="--", lw=1.2, label=f"margin {rule.margin:g}")
    ax.axhline(0, color="0.6", lw=0.8)
    x = len(effects) + 0.5
    bounded = all(isinstance(e[k], float) and math.isfinite(e[k]) for k in ("lo", "hi"))
    bar = [[e["mean"] - e["lo"]], [e["hi"] - e["mean"]]] if bounded else None  # 1 seed: none
    ax.errorbar([x], [e["mean"]], bar, fmt="s", color="k", capsize=4, label="mean, t bounds")
    ax.set_xticks([*range(len(effects)), x], [*(str(p["seed"]) for p in pairs), "all"])
    ax.set_xlabel("seed")
    ax.set_ylabel(f"gain in {METRICS[rule.metric].label}\n(change - base)")
    color = "C2" if results["adopt"] else "C3"
    span = f"interval [{e['lo']:+.3f}, {e['hi']:+.3f}]" if bounded else "one seed: no interval"
    verdict = f"{results['decision']}: gain {e['mean']:+.3f}, {span}"
    ax.set_title(verdict, fontsize=10, fontweight="bold", color=color)
    ax.legend(fontsize=7)
    for i, (name, bound) in enumerate(rule.guardrails):
        share = np.array([p["worse"][name] for p in pairs]) / max(bound, 1e-12)
        bx.plot(np.full(len(share), i), share, "o", color=f"C{i}", alpha=0.7)
        bx.plot([i - 0.25, i + 0.25], [share.mean()] * 2, color=f"C{i}", lw=2)
    bx.axhline(1, color="C3", ls="--", lw=1.2, label="bound (mean above: breached)")
    bx.axhline(0, color="0.6", lw=0.8)
    bx.set_xticks(range(len(rule.guardrails)), [f"{n}\n<= {b:g}" for n, b in rule.guardrails])
    bx.set_ylabel("worsening / its bound")
    bx.set_title("guardrails (dots: seeds, bar: mean)", fontsize=9)
    bx.legend(fontsize=7)
    curves(cx, [p["history"] for p in pairs], "pass_rate", "train pass rate (sampled)")
    change = ", ".join(f"{k}={v}" for k, v in rule.change)
    base = ", ".join(f"{k}={v}" for k, v in rule.base) or "defaults"
    title = title or f"adopt {change}?"
    save_figure(path, fig, f"{title} (base: {base}; {len(pairs)} seeds, paired)")


def curves(ax, histories: list[dict[str, list[dict]]], key: str, label: str) -> None:
    """Each arm's metric per step, mean over seeds with a band of +- 1 SE."""
    from matplotlib.ticker import MaxNLocator

    from arl.eval.stats import seed_se

    for i, arm in enumerate(("base", "change")):
        by_step: dict[int, list[float]] = {}
        for h in histories:
            for r in h[arm]:
                if r.get(key) is not None:
                    by_step.setdefault(int(r["step"]), []).append(float(r[key]))
        steps = sorted(by_step)
        m = np.array([np.mean(by_step[t]) for t in steps])
        se = np.array([seed_se(by_step[t]) for t in steps])
        ax.plot(steps, m, ("-", "--")[i], color=f"C{i}", lw=1.6, label=arm)
        ax.fill_between(steps, m - se, m + se, color=f"C{i}", alpha=0.18, lw=0)
    ax.set_xlabel("RL step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(label)
    ax.set_title("both arms, mean +- 1 SE over seeds", fontsize=9)
    ax.legend(fontsize=7)

"""Locked rules: every claim's rule, written and fingerprinted before its judged seeds run.

An experiment's rule record (Chapter 15's rows, or a problem's or exercise's claims) holds what
decides its verdicts: each claim's text, source (the book's passage, or a lab hypothesis),
effect, threshold, direction and premise; the settings and start its arms run from; the
settings the lab tuned, with the seeds it looked at; the judged seeds; and the interval. The
lock file (`locks.json` beside this module, or $ARL_LOCKS) keeps each record with its
fingerprint, the date it was locked and why, and every earlier lock.

Judging refuses a rule that differs from its lock, in one line naming what changed, until the
user relocks (`arl lock NAME --reason TEXT`), which keeps the old fingerprint in the history
with the reason: a rule revised after seeing data says so, machine-readably.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

from arl.errors import ArlError
from arl.runio import atomic_write_text, plain

# the interval every verdict over seeds uses (arl.eval.stats.seed_effect)
INTERVAL = {
    "statistic": "mean of the per-seed effects (arms paired by seed)",
    "bound": "one-sided Student t, df = seeds - 1",
    "level": 0.975,
}
CH15_RULES = ("ch15_rules", "ch15_table", "ch15_table_design")  # the modules its rules are


def lock_path() -> Path:
    """The lock file: $ARL_LOCKS, else locks.json in the package (the repository's)."""
    return Path(os.environ.get("ARL_LOCKS") or Path(__file__).with_name("locks.json"))


def names() -> list[str]:
    """Every experiment with a rule: ch15, then the problems and the exercises."""
    from arl.experiments.problems import registry

    return ["ch15"] + [
        f"{kind} {n}" for kind in ("problem", "exercise") for n in registry(kind).entries
    ]


def _strip(tree: ast.AST) -> ast.AST:
    """The tree without docstrings and without `cause=` arguments (a cause is written after the
    runs, so it is not part of the rule)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            node.keywords = [k for k in node.keywords if k.arg != "cause"]
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
            and not isinstance(node, (ast.For, ast.While, ast.If, ast.With, ast.Try))
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def code_sha256(modules: list[str]) -> str:
    """SHA-256 of the modules' code as parsed: comments, layout, docstrings and causes aside,
    so any change to what the code does (an arm, a learning rate, a rule) changes it."""
    from importlib import import_module

    parts = [ast.dump(_strip(ast.parse(inspect.getsource(import_module(m))))) for m in modules]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def record(name: str) -> dict:
    """The rule record of one experiment ("ch15", "problem N", "exercise N"), as JSON data."""
    if name == "ch15":
        return ch15_record()
    kind, _, number = name.partition(" ")
    from arl.experiments.problems import KINDS, get

    if kind not in KINDS or not number.isdigit():
        raise ArlError(f"unknown experiment {name!r} (ch15, problem N or exercise N)")
    p = get(int(number), kind)
    return plain(
        {
            "experiment": name,
            "claims": [{"key": key, **c.rule()} for key, c in p.claims],
            "settings": p.settings,
            "code_sha256": code_sha256([p.measure.__module__]),
            "tuned": [
                {"setting": t.setting, "value": t.value, "seeds": t.seeds, "how": t.how}
                for t in p.tuned
            ],
            "seeds": p.seeds,
            "interval": INTERVAL,
        }
    )


def ch15_record() -> dict:
    """Chapter 15's rule: every row's claim and source, the thresholds, the rules' code (its
    rows are rules written as code, so the code is fingerprinted), the settings and seeds."""
    from dataclasses import asdict

    from arl.experiments import ch15_book, ch15_rules
    from arl.experiments.ch15_config import Ch15Config
    from arl.experiments.ch15_summary import REPRODUCED_SHARE
    from arl.train.bases import base_settings

    config = Ch15Config()

    thresholds = {
        k: v
        for k, v in vars(ch15_rules).items()
        if k.isupper() and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return plain(
        {
            "experiment": "ch15",
            "rows": {
                key: {
                    "quantity": c.quantity,
                    "book": c.book,
                    "source": ch15_book.SOURCES[key][0],
                    "passage": ch15_book.SOURCES[key][1],
                }
                for key, c in ch15_book.CLAIMS.items()
            },
            "thresholds": thresholds,
            "rules_code_sha256": code_sha256([f"arl.experiments.{m}" for m in CH15_RULES]),
            "settings": {**asdict(config), "base": base_settings(config.base)},
            "tuned": ch15_book.TUNED,
            "seeds": ch15_book.JUDGED_SEEDS,
            "reproduced": f"a row's rule holds on at least {REPRODUCED_SHARE:.0%} of the seeds",
            "interval": "per seed: differences of pass rates by t(0.975, min(n1, n2) - 1) "
            "standard errors of the evaluations behind them",
        }
    )


def fingerprint(rec: dict) -> str:
    """16 hex digits of the SHA-256 of the record's canonical JSON."""
    text = json.dumps(rec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load() -> dict[str, dict]:
    """The lock file's entries (an absent file: none); a corrupt one is one line."""
    path = lock_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ArlError(f"{path}: unreadable lock file ({type(e).__name__})") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and "fingerprint" in v and "record" in v for v in data.values()
    ):
        raise ArlError(f"{path}: not a lock file")
    return data


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """The leaves where two records differ, as "path: old -> new" (claims by their key)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += differences(old.get(k, "(none)"), new.get(k, "(none)"), f"{where}.{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        keyed = all(isinstance(x, dict) and "key" in x for x in old + new)
        if keyed:
            return differences({x["key"]: x for x in old}, {x["key"]: x for x in new}, where)
        if len(old) == len(new):
            return [
                d
                for i, (a, b) in enumerate(zip(old, new, strict=True))
                for d in differences(a, b, f"{where}[{i}]")
            ]
    if old == new:
        return []
    short = lambda x: s if len(s := json.dumps(x)) <= 40 else s[:37] + "..."  # noqa: E731
    return [f"{where.lstrip('.')}: {short(old)} -> {short(new)}"]


def status(name: str, locks: dict | None = None) -> tuple[str, list[str]]:
    """("locked", []), ("changed", differences) or ("unlocked", []) for one experiment."""
    locks = load() if locks is None else locks
    if name not in locks:
        return "unlocked", []
    rec = record(name)
    if fingerprint(rec) == locks[name]["fingerprint"]:
        return "locked", []
    return "changed", differences(locks[name]["record"], rec)


def require(name: str) -> dict:
    """The lock of an experiment whose rule is as locked: {fingerprint, locked, reason,
    relocks}; otherwise one ArlError line saying what changed and how to relock."""
    locks = load()
    state, diffs = status(name, locks)
    how = f"`arl lock {name} --reason TEXT`"
    if state == "unlocked":
        raise ArlError(f"{name}: its rule is not locked; lock it before judging with {how}")
    if state == "changed":
        shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        raise ArlError(
            f"{name}: its rule differs from the one locked on {locks[name]['locked']} "
            f"({shown}); a rule changed after seeing data is relocked with {how}"
        )
    entry = locks[name]
    return {
        "fingerprint": entry["fingerprint"],
        "locked": entry["locked"],
        "reason": entry["reason"],
        "relocks": len(entry.get("history", [])),
    }


def relock(names_: list[str], reason: str, today: str | None = None) -> list[tuple[str, str]]:
    """Lock (or relock) experiments with `reason`; an earlier lock goes to the history. Returns
    (name, what happened) per experiment; an unchanged rule is left as it is."""
    if not reason.strip():
        raise ArlError("--reason: say why the rule is locked or changed (not empty)")
    today = today or datetime.date.today().isoformat()
    locks, done = load(), []
    for name in names_:
        rec = record(name)
        fp = fingerprint(rec)
        old = locks.get(name)
        if old is not None and old["fingerprint"] == fp:
            done.append((name, f"unchanged ({fp})"))
            continue
        history = (
            []
            if old is None
            else old.get("history", []) + [{k: old[k] for k in ("fingerprint", "locked", "reason")}]
        )
        locks[name] = {
            "fingerprint": fp,
            "locked": today,
            "reason": reason.strip(),
            "record": rec,
            "history": history,
        }
        done.append(
            (name, f"locked {fp}" if old is None else f"relocked {old['fingerprint']} -> {fp}")
        )
    atomic_write_text(lock_path(), json.dumps(locks, indent=1, sort_keys=True) + "\n")
    return done

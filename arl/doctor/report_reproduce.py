"""Reports of `arl reproduce` outputs: the Chapter 15 table and figures, one problem's (or
exercise's) claims and figure, and the summary of `reproduce problem|exercise all`.

These read the files the reproductions write (results.json, summary.json, PNG figures);
nothing here runs or imports an experiment. The figures are the reproduction's own PNGs,
embedded as data: URIs, so the page stays one self-contained file.
"""

from __future__ import annotations

import json
from pathlib import Path

from arl.doctor.report_html import config_html, esc, page, png_html, table_html
from arl.errors import ArlError
from arl.runio import read_input, read_input_text

QUICK_NOTE = (
    "Quick settings: far too few steps and samples to reproduce anything; the verdicts "
    "only show that every part runs."
)
KINDS = ("problem", "exercise")


def _json(path: Path) -> dict:
    """A JSON object from a file, or a one-line ArlError."""
    text = read_input_text(path)  # a FIFO, a device, a huge file: refused in one line
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ArlError(f"{path}: not valid JSON (corrupt or cut short)") from None
    if not isinstance(data, dict):
        raise ArlError(f"{path}: expected a JSON object")
    return data


def folder_of(path: Path) -> Path:
    """A reproduction's folder, given it or its results.json / summary.json."""
    return path.parent if path.is_file() and path.name in ("results.json", "summary.json") else path


def kind_of(path: Path) -> str | None:
    """'ch15', 'problem', 'exercise' or 'summary' for a reproduction's output; None for a
    training run (or anything else: the doctor's reader says what is wrong with it)."""
    folder = folder_of(path)
    if not folder.is_dir():
        return None
    if (folder / "summary.json").is_file():
        return "summary"
    if not (folder / "results.json").is_file():
        return None
    data = _json(folder / "results.json")
    if "table" in data and "figures" in data:
        return "ch15"
    return next((k for k in KINDS if k in data and "claims" in data), None)


def _png(folder: Path, name: str) -> str:
    """One of the reproduction's figures, embedded; a missing one is said, not fatal."""
    path = folder / name
    try:
        data = read_input(path)
    except ArlError:
        return f'<p class="warn">Figure {esc(name)} is missing from {esc(folder)}.</p>'
    if not data.startswith(b"\x89PNG"):
        return f'<p class="warn">Figure {esc(name)} is not a PNG file.</p>'
    return png_html(data, name)


def _quick(data: dict) -> str:
    return f'<p class="warn">{esc(QUICK_NOTE)}</p>' if data.get("quick") else ""


def ch15(folder: Path) -> str:
    """Chapter 15: the table (book, measured, reproduced on k of N seeds, rule), the figures
    and the config."""
    data = _json(folder / "results.json")
    rows, classes = [], []
    for r in data.get("table", []):
        yes = bool(r.get("reproduced"))
        holding = f"{r.get('seeds_holding', '?')}/{r.get('seeds', '?')}"
        rows.append(
            (
                r.get("quantity", ""),
                r.get("book", ""),
                r.get("measured", ""),
                f"{'yes' if yes else 'no'} ({holding})",
                r.get("rule", ""),
            )
        )
        classes.append("yes" if yes else "no")
    shown = sum(c == "yes" for c in classes)
    seconds = [sum(r.get("timings_s", {}).values()) for r in data.get("runs", [])]
    meta = [f"seeds: {data.get('seeds')}", f"{shown} of {len(rows)} rows reproduced"]
    if seconds:
        meta.append(f"compute per seed: {', '.join(f'{s:.0f} s' for s in seconds)}")
    body = [
        _quick(data),
        '<section id="table"><h2>The Chapter 15 table</h2>',
        table_html(("quantity", "book", "measured", "reproduced (seeds)", "rule"), rows, classes),
        '</section><section id="figures"><h2>Figures</h2>',
        *(_png(folder, name) for name in data.get("figures", [])),
        "</section>",
        config_html(data.get("config", {})),
    ]
    return page("arl report: Chapter 15", [*meta, f"path: {folder}"], body)


def num(x: float, sign: bool = True) -> str:
    """A number to 3 decimals, or 3 significant digits when 3 decimals would show 0.000."""
    small = x != 0 and abs(x) < 5e-4
    return f"{x:{'+' if sign else ''}.{'2e' if small else '3f'}}"


def _effect(e: dict) -> str:
    """mean +- SE [t bounds] of a claim's per-seed effect (no bounds from one seed)."""
    try:
        bounds = f" [{num(e['lo'])}, {num(e['hi'])}]" if e.get("n", 0) > 1 else ""
        return f"{num(e['mean'])} ± {num(e['se'], False)}{bounds}"
    except (KeyError, TypeError, ValueError):
        return "?"


def _klass(status: str) -> str:
    return {"shown": "yes", "not judged": "skip"}.get(status, "no")


def claims_rows(data: dict) -> tuple[list[tuple], list[str]]:
    """Every claim of one problem, main first: source, claim, effect, mean +- SE [t bounds],
    df, k/N, verdict and the cause of one not shown."""
    rows, classes = [], []
    for c in data.get("claims", []):
        claim, e = c.get("claim", {}), c.get("effect", {})
        status = c.get("status", "?")
        rows.append(
            (
                claim.get("source", ""),
                claim.get("text", ""),
                claim.get("effect", ""),
                _effect(e),
                e.get("df", "?"),
                f"{e.get('k', '?')}/{e.get('n', '?')}",
                status,
                c.get("cause", "") if status != "shown" else "",
            )
        )
        classes.append(_klass(status))
    return rows, classes


CLAIM_HEADERS = (
    "source",
    "claim",
    "effect (per seed)",
    "mean ± SE [t bounds]",
    "df",
    "seeds",
    "verdict",
    "cause if not shown",
)


def _rule(data: dict) -> str:
    """The locked rule's fingerprint and date, and whether the judged seeds were its own."""
    rule = data.get("rule", {})
    own = "its locked seeds" if data.get("on_locked_seeds") else "NOT its locked seeds"
    iv = rule.get("interval")
    interval = f"{iv.get('bound', '?')} at {iv.get('level', '?')}" if isinstance(iv, dict) else "?"
    relocks = rule.get("relocks", 0)
    again = f", relocked {relocks}x ({rule.get('reason', '')})" if relocks else ""
    return (
        f"rule {rule.get('fingerprint', '?')} locked {rule.get('locked', '?')}{again}; "
        f"{interval}; judged on {own} {rule.get('seeds', '?')}"
    )


def problem(folder: Path, kind: str) -> str:
    """One problem or exercise: its claims over seeds, its rule and its figure."""
    data = _json(folder / "results.json")
    n = data.get(kind)
    rows, classes = claims_rows(data)
    meta = [f"seeds: {data.get('seeds')}", _rule(data), f"seconds: {data.get('seconds', '?')}"]
    body = [
        _quick(data),
        f"<h2>Claims</h2>{table_html(CLAIM_HEADERS, rows, classes)}",
        _png(folder, f"{kind}-{n}.png"),
    ]
    return page(f"arl report: {kind} {n}", [*meta, f"path: {folder}"], body)


def summary(folder: Path) -> str:
    """`reproduce problem|exercise all`: one row per claim, then each one's rule and figure."""
    data = _json(folder / "summary.json")
    kind = next((k for k in KINDS if f"{k}s" in data), "problem")
    rows, classes, body = [], [], [_quick(data)]
    for r in data.get("rows", []):
        status = r.get("status", "?")
        rows.append(
            (
                r.get(kind, "?"),
                r.get("source", ""),
                r.get("claim", ""),
                r.get("effect", ""),
                r.get("measured", ""),
                r.get("df", ""),
                r.get("seeds", ""),
                status,
                r.get("cause", "") if status != "shown" else "",
            )
        )
        classes.append(_klass(status))
    body.append(
        f'<section id="summary"><h2>Summary</h2>'
        f"{table_html((kind, *CLAIM_HEADERS), rows, classes)}</section>"
    )
    for n in dict.fromkeys(r.get(kind) for r in data.get("rows", [])):
        sub = folder / f"{kind}-{n}"
        body.append(
            f'<section class="item" id="{kind}-{esc(n)}"><h2>{esc(kind.title())} {esc(n)}</h2>'
        )
        if (sub / "results.json").is_file():
            one = _json(sub / "results.json")
            body += [f"<p>{esc(_rule(one))}</p>", _png(sub, f"{kind}-{n}.png")]
        else:
            body.append(f'<p class="warn">{esc(sub)}/results.json is missing.</p>')
        body.append("</section>")
    c = data.get("counts", {})
    line = "; ".join(
        f"{src} {c[src].get('shown', '?')} of {c[src].get('claims', '?')} shown"
        for src in ("book", "lab")
        if isinstance(c.get(src), dict)
    )
    meta = [f"seeds: {data.get('seeds')}", line or f"{data.get('shown', '?')} shown"]
    return page(f"arl report: {kind}s, summary", [*meta, f"path: {folder}"], body)


def render(path: Path, kind: str) -> str:
    """The report of a reproduction's folder of the given kind (kind_of's answer)."""
    folder = folder_of(path)
    if kind == "ch15":
        return ch15(folder)
    if kind == "summary":
        return summary(folder)
    return problem(folder, kind)

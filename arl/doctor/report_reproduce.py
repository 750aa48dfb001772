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
    return next((k for k in KINDS if k in data and "claim" in data), None)


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
    """mean +- SE [2-SE interval] of a claim's per-seed effect."""
    try:
        return f"{num(e['mean'])} ± {num(e['se'], False)} [{num(e['lo'])}, {num(e['hi'])}]"
    except (KeyError, TypeError, ValueError):
        return "?"


def claims_rows(data: dict) -> tuple[list[tuple], list[str]]:
    """The main claim and the more claims of one problem: effect, mean +- SE, k/N, shown."""
    entries = [{"claim": data.get("claim", {}), **data}, *data.get("claims", [])]
    rows, classes = [], []
    for c in entries:
        claim, e = c.get("claim", {}), c.get("effect", {})
        rows.append(
            (
                claim.get("book", ""),
                claim.get("effect", ""),
                _effect(e),
                f"{e.get('k', '?')}/{e.get('n', '?')}",
                "yes" if c.get("shown") else "no",
                c.get("cause", "") if not c.get("shown") else "",
            )
        )
        classes.append("yes" if c.get("shown") else "no")
    return rows, classes


CLAIM_HEADERS = ("book's claim", "effect (per seed)", "mean ± SE [2-SE]", "seeds", "shown", "cause")


def problem(folder: Path, kind: str) -> str:
    """One problem or exercise: its claims over seeds, its conclusion and its figure."""
    data = _json(folder / "results.json")
    n = data.get(kind)
    rows, classes = claims_rows(data)
    meta = [f"seeds: {data.get('seeds')}", f"seconds: {data.get('seconds', '?')}"]
    body = [
        _quick(data),
        f"<h2>Claims</h2>{table_html(CLAIM_HEADERS, rows, classes)}",
        f"<p>{esc(data.get('conclusion', ''))}</p>",
        _png(folder, f"{kind}-{n}.png"),
    ]
    return page(f"arl report: {kind} {n}", [*meta, f"path: {folder}"], body)


def summary(folder: Path) -> str:
    """`reproduce problem|exercise all`: the summary table, then each one's claims and figure."""
    data = _json(folder / "summary.json")
    kind = next((k for k in KINDS if f"{k}s" in data), "problem")
    rows, classes, body = [], [], [_quick(data)]
    for r in data.get("rows", []):
        rows.append(
            (
                r.get(kind, "?"),
                r.get("claim", ""),
                r.get("effect", ""),
                r.get("measured", ""),
                r.get("seeds", ""),
                "yes" if r.get("shown") else "no",
                r.get("cause", ""),
            )
        )
        classes.append("yes" if r.get("shown") else "no")
    headers = (
        kind,
        "book's claim",
        "effect (per seed)",
        "mean ± SE [2-SE]",
        "seeds",
        "shown",
        "cause if not",
    )
    body.append(
        f'<section id="summary"><h2>Summary</h2>{table_html(headers, rows, classes)}</section>'
    )
    for r in data.get("rows", []):
        n, sub = r.get(kind), folder / f"{kind}-{r.get(kind)}"
        body.append(
            f'<section class="item" id="{kind}-{esc(n)}"><h2>{esc(kind.title())} {esc(n)}</h2>'
        )
        if (sub / "results.json").is_file():
            one = _json(sub / "results.json")
            more_rows, more_classes = claims_rows(one)  # the first is the summary's row
            if len(more_rows) > 1:
                more = table_html(CLAIM_HEADERS, more_rows[1:], more_classes[1:])
                body.append(f"<h3>More claims</h3>{more}")
            body += [f"<p>{esc(one.get('conclusion', ''))}</p>", _png(sub, f"{kind}-{n}.png")]
        else:
            body.append(f'<p class="warn">{esc(sub)}/results.json is missing.</p>')
        body.append("</section>")
    meta = [f"seeds: {data.get('seeds')}", f"{data.get('shown', '?')} of {len(rows)} {kind}s shown"]
    return page(f"arl report: {kind}s, summary", [*meta, f"path: {folder}"], body)


def render(path: Path, kind: str) -> str:
    """The report of a reproduction's folder of the given kind (kind_of's answer)."""
    folder = folder_of(path)
    if kind == "ch15":
        return ch15(folder)
    if kind == "summary":
        return summary(folder)
    return problem(folder, kind)

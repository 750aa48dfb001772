"""The report's HTML: one page, its style inline, no script, no address outside the file.

Every string from a run (metric names, config values, findings) is escaped here; figures
arrive as inline SVG (report_panels) or as PNG bytes that become data: URIs.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Sequence

from arl.doctor.types import Finding

CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 24px auto; max-width: 1480px;
  padding: 0 20px; color: #1d232a; background: #fff; line-height: 1.4; font-size: 15px; }
h1 { font-size: 22px; margin: 0 0 4px 0; } h2 { font-size: 18px; margin: 28px 0 8px 0; }
h3 { font-size: 16px; margin: 0 0 6px 0; }
.meta { color: #4a5560; margin: 0 0 14px 0; } .meta span { margin-right: 18px; }
.warn { background: #fff4d6; border-left: 4px solid #d99a00; padding: 8px 12px; }
.panel { border-top: 1px solid #d5dbe1; padding: 14px 0; display: grid; gap: 22px;
  grid-template-columns: minmax(0, 2.3fr) minmax(300px, 1fr); align-items: start; }
.panel .plot svg { width: 100%; height: auto; display: block; }
.panel .reads { color: #4a5560; font-size: 13px; margin: 2px 0 6px 0; }
.panel .note { color: #7a4a00; font-size: 13px; margin: 4px 0 0 0; }
.findings { font-size: 14px; } .findings .none { color: #6b7680; font-style: italic; }
.finding { border-left: 4px solid #c0392b; background: #fbf1f0; padding: 8px 12px;
  margin: 0 0 10px 0; } .finding.healthy { border-color: #2e8b57; background: #eef8f2; }
.finding.ref { border-color: #d5a6a0; background: #fbf6f5; font-size: 13px; }
.finding .rule { font-weight: bold; } .finding .problem { float: right; color: #4a5560; }
.finding ol { margin: 4px 0 4px 20px; padding: 0; } .finding .check { margin: 4px 0 0 0; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px 0; }
th, td { border: 1px solid #d5dbe1; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.no td { background: #fdf6f5; } tr.yes td { background: #f4faf6; }
tr.skip td { background: #f5f5f5; color: #666; }
figure.png { margin: 12px 0 22px 0; } figure.png img { max-width: 100%; height: auto;
  border: 1px solid #e3e7eb; } figcaption { font-size: 13px; color: #4a5560; }
details summary { cursor: pointer; font-weight: bold; margin: 6px 0; }
ul.diagnosis li { margin: 0 0 4px 0; }
.kv { column-width: 330px; column-gap: 28px; font-size: 13px; }
.kv div { break-inside: avoid; padding: 2px 0; border-bottom: 1px solid #eef0f2; }
.kv .k { color: #4a5560; } .kv .v { font-family: "DejaVu Sans Mono", monospace; }
.samples { display: grid; gap: 12px; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); }
.sample { border: 1px solid #d5dbe1; border-left: 4px solid #c0392b; padding: 6px 10px; }
.sample.pass { border-left-color: #2e8b57; } .sample h4 { margin: 0 0 4px 0; font-size: 14px; }
.sample pre { white-space: pre-wrap; word-break: break-word; font-size: 12px; margin: 4px 0;
  max-height: 320px; overflow: auto; background: #f7f8f9; padding: 6px; }
.sample .prompt { color: #4a5560; }
"""


def esc(text: object) -> str:
    """Text safe inside HTML (elements and quoted attributes)."""
    return html.escape(str(text), quote=True)


def page(title: str, meta: Sequence[str], body: Iterable[str]) -> str:
    """The whole document: head with the inline style, a title, meta items, then `body`."""
    items = "".join(f"<span>{esc(m)}</span>" for m in meta)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n"
        f'<h1>{esc(title)}</h1><p class="meta">{items}</p>\n'
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def finding_html(f: Finding) -> str:
    """One finding: its rule and problem, the symptom, the causes in order, the check."""
    healthy = " healthy" if f.rule == "healthy" else ""
    problem = f"Problem {f.problem}" if f.problem else "no problem"
    causes = "".join(f"<li>{esc(c)}</li>" for c in f.causes)
    return (
        f'<div class="finding{healthy}" data-rule="{esc(f.rule)}" data-problem="{f.problem}">'
        f'<span class="problem">{esc(problem)}</span><span class="rule">{esc(f.rule)}</span>'
        f'<p class="symptom">{esc(f.symptom)}</p>'
        + (
            f'<div>Likely causes, most likely first:<ol class="causes">{causes}</ol></div>'
            if causes
            else ""
        )
        + (f'<p class="check">Check: {esc(f.check)}</p>' if f.check else "")
        + "</div>"
    )


def reference_html(f: Finding, home: str, title: str) -> str:
    """A finding that also reads this panel, as a link to the panel it sits beside in full."""
    problem = f"Problem {f.problem}" if f.problem else "no problem"
    return (
        f'<div class="finding ref" data-rule="{esc(f.rule)}" data-home="{esc(home)}">'
        f'<span class="problem">{esc(problem)}</span><span class="rule">{esc(f.rule)}</span> '
        f'also reads this panel: see <a href="#panel-{esc(home)}">{esc(title)}</a></div>'
    )


def panel_html(
    key: str, title: str, reads: str, svg: str, notes: Sequence[str], aside: Sequence[str]
) -> str:
    """A panel: its title, the figure (inline SVG) and, beside it, the doctor's findings
    (`aside`: each finding's HTML)."""
    aside = "".join(aside) or '<p class="none">No finding reads this panel.</p>'

    note = "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    return (
        f'<section class="panel" id="panel-{esc(key)}" data-panel="{esc(key)}">'
        f'<div class="plot"><h3>{esc(title)}</h3><p class="reads">{esc(reads)}</p>{svg}{note}</div>'
        f'<aside class="findings"><h3>Doctor</h3>{aside}</aside></section>'
    )


def table_html(headers: Sequence[str], rows: Iterable[Sequence[object]], classes=None) -> str:
    """A plain table; numbers right-aligned; `classes` gives each row a class (or None)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{esc(classes[i])}"' if classes and classes[i] else ""
        cells = "".join(
            f'<td class="num">{cell(v)}</td>'
            if isinstance(v, int | float)
            else f"<td>{cell(v)}</td>"
            for v in row
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def cell(value: object) -> str:
    """A number as a table shows it: integers whole, others to 4 significant digits."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if not isinstance(value, int | float):
        return esc(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):d}"
    return f"{value:.4g}"


def flatten(config: object, prefix: str = "") -> list[tuple[str, object]]:
    """Nested dicts as (dotted key, value) rows; lists of scalars kept as JSON text."""
    if isinstance(config, dict):
        rows = []
        for k, v in config.items():
            rows += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(config, list | tuple):
        text = json.dumps(config)
        return [(prefix, text if len(text) <= 300 else text[:300] + " ...")]
    return [(prefix, config)]


def config_html(config: dict, heading: str = "Config") -> str:
    """The run's config as key = value pairs in columns (nested keys dotted)."""
    rows = flatten(config)
    if not rows:
        return (
            f'<section id="config"><h2>{esc(heading)}</h2><p>The log has no config.</p></section>'
        )
    pairs = "".join(
        f'<div><span class="k">{esc(k)}</span> = <span class="v">{cell(v)}</span></div>'
        for k, v in rows
    )
    return f'<section id="config"><h2>{esc(heading)}</h2><div class="kv">{pairs}</div></section>'


def png_html(data: bytes, caption: str) -> str:
    """A PNG figure embedded as a data: URI, with its caption."""
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return (
        f'<figure class="png"><img src="{uri}" alt="{esc(caption)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def sample_html(row: dict) -> str:
    """One episode's text (a samples.jsonl row): how it ended, the prompt's tail, the rest."""
    ok = row.get("pass")
    verdict = "passed" if ok else "failed" if ok is not None else "not scored"
    facts = [f"step {row.get('step')}", f"task {row.get('task')}", verdict]
    facts += [f"{k} {row[k]}" for k in ("reward", "turns", "malformed") if row.get(k) is not None]
    facts += [k for k in ("truncated", "hacked") if row.get(k)]
    return (
        f'<div class="sample{" pass" if ok else ""}" data-step="{esc(row.get("step"))}">'
        f"<h4>{esc(' · '.join(map(str, facts)))}</h4>"
        f'<pre class="prompt">{esc(row.get("prompt", ""))}</pre>'
        f'<pre class="completion">{esc(row.get("completion", ""))}</pre></div>'
    )

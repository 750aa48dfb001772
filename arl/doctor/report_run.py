"""The report of one training run: the doctor's diagnosis, the standing panels with each
panel's findings beside it, the series no standing panel draws, what the log cannot show,
and the run's config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from arl.doctor.report_html import (
    config_html,
    esc,
    finding_html,
    page,
    panel_html,
    reference_html,
    sample_html,
    table_html,
)
from arl.doctor.report_panels import draw, finite, other_panels, present, x_label, x_unit
from arl.doctor.report_spec import PANELS, Panel, resolve
from arl.doctor.types import Finding, Gap, Run

SCHEDULE_KEYS = ("warmup_steps", "decay", "sft_warmup", "sft_decay")  # lr may not be constant
SAMPLE_STEPS = 3  # the sampled steps a report shows: first, middle, last
Beside = dict[str, list[tuple[Finding, str]]]  # panel key -> [(finding, its home panel's key)]


def placed(findings: Sequence[Finding], drawn: dict[str, set[str]]) -> Beside:
    """Each panel's findings. A finding sits beside every panel that draws one of its metrics
    (`drawn`: panel key -> the metrics it draws): in full beside its home, the first panel
    drawing its first drawn metric, and as a link to it beside the others. Key "" holds the
    findings no panel draws (home "")."""
    out: Beside = {key: [] for key in drawn}
    out[""] = []
    for f in findings:
        keys = [key for key, metrics in drawn.items() if set(f.metrics) & metrics]
        home = next((k for m in f.metrics for k in keys if m in drawn[k]), "")
        for key in keys or [""]:
            out[key].append((f, home))
    return out


def _lr_value(config: dict) -> float | None:
    """A constant learning rate from the config: its `lr` (top level or one level down),
    None when the config has none or a schedule that may change it."""
    nested = {k: v for d in config.values() if isinstance(d, dict) for k, v in d.items()}
    flat = {**nested, **config}
    if any(flat.get(k) not in (None, 0, "constant") for k in SCHEDULE_KEYS):
        return None
    lr = flat.get("lr")
    return float(lr) if isinstance(lr, int | float) and not isinstance(lr, bool) else None


def with_config_lr(run: Run) -> tuple[dict, str]:
    """The run's series, plus a constant `lr` from its config when the log has none."""
    series = dict(run.series)
    lr = _lr_value(run.config) if not finite(series.get("lr", ())) else None
    steps = sorted({s for pts in series.values() for s, _ in pts})
    if lr is None or not steps:
        return series, ""
    series["lr"] = ((steps[0], lr), (steps[-1], lr))
    return series, "lr not logged: drawn constant at the config's value (no schedule in it)"


def problems(numbers: tuple[int, ...]) -> str:
    """'Problem 7' or 'Problems 3, 13'."""
    return ("Problem " if len(numbers) == 1 else "Problems ") + ", ".join(map(str, numbers))


def panels_html(run: Run, panels: list[Panel], beside: Beside, titles: dict, lr_note: str):
    """Each panel with data: its SVG, its notes, and its findings beside it."""
    out = []
    for panel in panels:
        svg, notes = draw(panel.axes, run.series, x_label(run), prefix=f"{panel.key}-")
        if panel.key == "lr" and lr_note:
            notes = [lr_note, *notes]
        reads = panel.reads + (f" ({problems(panel.problems)})" if panel.problems else "")
        aside = [
            finding_html(f) if home == panel.key else reference_html(f, home, titles[home])
            for f, home in beside[panel.key]
        ]
        out.append(panel_html(panel.key, panel.title, reads, svg, notes, aside))
    return out


def diagnosis_html(findings: Sequence[Finding], beside: Beside, titles: dict) -> str:
    """The findings as a list, each linked to its home panel; those no panel draws in full."""
    if not findings:
        return '<section id="diagnosis"><h2>Diagnosis</h2><p>No finding.</p></section>'
    items = []
    for f in findings:
        home = next((h for fs in beside.values() for g, h in fs if g is f), "")
        link = f' [beside <a href="#panel-{esc(home)}">{esc(titles[home])}</a>]' if home else ""
        label = problems((f.problem,)) if f.problem else f.rule
        items.append(f"<li><b>{esc(f.rule)}</b> ({esc(label)}): {esc(f.symptom)}{link}</li>")
    loose = "".join(finding_html(f) for f, _ in beside[""])
    return (
        f'<section id="diagnosis"><h2>Diagnosis</h2><ul class="diagnosis">{"".join(items)}</ul>'
        + (f"<h3>Findings not tied to a panel</h3>{loose}" if loose else "")
        + "</section>"
    )


def missing_html(run: Run, missing: list[Panel], gaps: Sequence[Gap]) -> str:
    """The standing panels this log cannot draw, and the rules the doctor could not run with
    what to log for each."""
    out = []
    if missing:
        names = {p.key: ((f"{p.prefix}FAMILY",) if p.prefix else ()) + p.metrics for p in missing}
        rows = [
            (p.title, ", ".join(names[p.key]), ", ".join(map(str, p.problems))) for p in missing
        ]
        heads = ("panel", "metrics it draws (none logged)", "Appendix B problems")
        out.append(
            f'<section id="missing"><h2>Panels this {esc(run.source)} log cannot draw</h2>'
            + table_html(heads, rows)
            + "</section>"
        )
    if gaps:
        rows = [
            (
                g.rule,
                g.problem,
                ", ".join(g.missing),
                ("partly run; " if g.partial else "") + g.hint,
            )
            for g in gaps
        ]
        out.append(
            '<section id="unchecked"><h2>What the doctor could not check</h2>'
            + table_html(("rule", "problem", "missing", "what to log"), rows)
            + "</section>"
        )
    return "".join(out)


def shown_steps(steps: Sequence[int], k: int = SAMPLE_STEPS) -> list[int]:
    """Up to `k` of the sampled steps, spread from the first to the last."""
    steps = sorted(set(steps))
    if len(steps) <= k:
        return steps
    return sorted({steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)})


def samples_html(rows: Sequence[dict] | None, source: str = "arl") -> str:
    """A few episodes as the policy played them (samples.jsonl), early to late; for a log
    without them, what writes them."""
    head = '<section id="samples"><h2>Episode samples</h2>'
    if not rows:
        return (
            head + f"<p>This {esc(source)} log has no episode samples. arl's PG and distillation "
            "runs (`arl train pg --set out=DIR`) write a passing and a failing episode of the "
            "first, every evaluation and the last step to DIR/samples.jsonl.</p></section>"
        )
    steps = shown_steps([r["step"] for r in rows])
    shown = [r for r in rows if r["step"] in steps]
    lead = (
        f"<p>{len(shown)} of {len(rows)} sampled episodes, steps {', '.join(map(str, steps))}: "
        "the step's first passing and first failing episode, as the trainer saw them.</p>"
    )
    return (
        head
        + lead
        + '<div class="samples">'
        + "".join(map(sample_html, shown))
        + "</div></section>"
    )


def tables_html(run: Run, fixed: dict[str, float], results: dict | None) -> list[str]:
    """The series that never changed, the final evaluation, names arl has none for."""
    out = []
    if fixed:
        out.append('<section id="constant"><h2>Series that never changed</h2>')
        out.append(table_html(("metric", "value at every step"), sorted(fixed.items())))
        out.append("</section>")
    if results:
        out.append('<section id="results"><h2>Final evaluation (results.json)</h2>')
        out.append(table_html(("quantity", "value"), sorted(results.items())) + "</section>")
    if run.unmapped:
        out.append(
            f'<section id="unmapped"><h2>{esc(run.source)} metrics arl has no name for</h2>'
            f"<p>{esc(', '.join(run.unmapped))}</p></section>"
        )
    return out


def render_run(
    run: Run,
    findings: Sequence[Finding],
    gaps: Sequence[Gap] = (),
    results: dict | None = None,
    samples: Sequence[dict] | None = None,
) -> str:
    """The whole page of one training run (`samples`: samples.jsonl's rows, if any)."""
    series, lr_note = with_config_lr(run)
    run = Run(run.path, run.source, run.recipe, series, run.config, run.unmapped)
    panels = [resolve(p, run) for p in PANELS]
    standing = [p for p in panels if present(p, run)]
    others, fixed = other_panels(run)
    drawn = {p.key: set(present(p, run)) for p in standing + others}
    titles = {p.key: p.title for p in standing + others}
    beside = placed(findings, drawn)
    steps = sorted({s for pts in run.series.values() for s, _ in pts})
    meta = [
        f"source: {run.source}",
        f"recipe: {run.recipe}",
        f"{x_unit(run)}s {steps[0]}-{steps[-1]}" if steps else "nothing logged",
        f"{len(run.series)} series",
        f"path: {run.path}",
    ]
    body = [diagnosis_html(findings, beside, titles), "<h2>Standing panels</h2>"]
    body += panels_html(run, standing, beside, titles, lr_note)
    body.append(samples_html(samples, run.source))
    if others:
        body.append("<h2>Other logged series</h2>")
        body += panels_html(run, others, beside, titles, "")
    body.append(missing_html(run, [p for p in panels if p not in standing], gaps))
    body += tables_html(run, fixed, results)
    body.append(config_html(run.config))
    return page(f"arl report: {Path(run.path).name or run.path}", meta, body)

"""`arl report RUN`: one self-contained HTML file of a run's standing panels and diagnoses.

A training run (arl, TRL or verl, read by the doctor) gets the book's standing panels
(report_spec.PANELS), drawn by matplotlib as inline SVG, with the doctor's findings beside
each panel (report_run). Reproductions (`arl reproduce ch15`, one problem, the problems'
summary) get their tables and their own figures (report_reproduce). Either way the page is
one plain file that opens anywhere, offline: no script, no server, nothing fetched.
"""

from __future__ import annotations

from pathlib import Path

from arl.doctor.report_run import render_run
from arl.errors import ArlError
from arl.runio import atomic_write_text, read_json, read_jsonl


def final_results(path: Path) -> dict | None:
    """The scalar results an arl recipe run (sft, rft, dpo) wrote beside its metrics."""
    if not (path / "results.json").is_file():
        return None
    try:
        data = read_json(path / "results.json")
    except ArlError:
        return None
    if not isinstance(data, dict) or "recipe" not in data:
        return None
    return {k: v for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def episode_samples(path: Path) -> list[dict] | None:
    """The episodes an arl PG run wrote as text (samples.jsonl), each with an integer step;
    None when the run has none."""
    if not (path / "samples.jsonl").is_file():
        return None
    rows = read_jsonl(path / "samples.jsonl")
    return [r for r in rows if isinstance(r.get("step"), int) and not isinstance(r["step"], bool)]


def run_report(path: Path) -> str:
    """Load a training run through the doctor (arl, TRL or verl) and render it."""
    from arl.doctor import diagnose, load_run, unchecked

    run = load_run(path)
    results = final_results(path) if path.is_dir() else None
    samples = episode_samples(path) if path.is_dir() else None
    return render_run(run, diagnose(run), unchecked(run), results, samples)


def render(path: str | Path) -> str:
    """The report of whatever RUN holds: a reproduction's outputs or a training run."""
    from arl.doctor import report_reproduce

    path = Path(path)
    if not path.exists():
        raise ArlError(f"{path}: no such file or folder")
    kind = report_reproduce.kind_of(path)
    if kind:
        return report_reproduce.render(path, kind)
    return run_report(path)


def default_out(path: str | Path) -> Path:
    """RUN.report.html beside the run (not in it: a run's folder holds only its own files)."""
    path = Path(path).resolve()
    return path.with_name(path.name + ".report.html")


def write_report(path: str | Path, out: str | Path | None = None, overwrite: bool = False):
    """Render RUN's report and write it to `out` (default: beside RUN); an existing file is
    kept unless `overwrite`. Returns the path written."""
    target = Path(out) if out else default_out(path)
    if target.is_dir():
        raise ArlError(f"--out {target}: is a folder; name the .html file to write")
    if target.exists() and not overwrite:
        raise ArlError(f"{target}: exists; pass --overwrite to replace it, or choose --out")
    text = render(path)
    atomic_write_text(target, text)
    return target

"""How the report draws a panel: matplotlib, written as SVG text the page holds inline.

A panel (report_spec) is one or more axes side by side. Inline SVG keeps the report one file
with no network, no server and no JavaScript (see arl/doctor/report.py); its text stays text,
so labels are searchable and the tests can read them. Series no standing panel draws get
panels of their own, one per unit.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import replace

from arl.doctor.report_spec import Axis, Panel, standing
from arl.doctor.types import Run

Points = tuple[tuple[int, float], ...]  # ((step, value), ...) in step order


XLABEL = {"rft": ("round", "round (sample → filter → fine-tune)")}  # recipe -> x axis
DEFAULT_XLABEL = ("step", "optimizer step")
MARKERS_UP_TO = 60  # points per series drawn with markers (sparse evaluations stay visible)
LOG_DECADES = 6  # a log axis shows at most this many decades below its largest value
# a linear axis is at least this tall relative to its series' level (largest |value|): a
# change smaller than that (entropy moving by 6e-6) is drawn as the flat line it is, inside a
# band, not stretched over the whole axis as a steep fall
FLAT_BAND = 0.1
# series on one linear axis whose levels differ by more than this factor get axes of their
# own: one 30 times smaller than another spans under 3% of the axis's height, a flat line
SCALE_RATIO = 30.0


def x_label(run: Run) -> str:
    """What a step of this run's log is, as the x axis says it."""
    return XLABEL.get(run.recipe, DEFAULT_XLABEL)[1]


def x_unit(run: Run) -> str:
    """One step of this run's log in a word: "step" or "round"."""
    return XLABEL.get(run.recipe, DEFAULT_XLABEL)[0]


def finite(points: Points) -> Points:
    """The points whose value is a finite number."""
    return tuple((s, v) for s, v in points if isinstance(v, int | float) and math.isfinite(v))


def present(panel: Panel, run: Run) -> tuple[str, ...]:
    """The panel's metrics this run logged (a NaN counts: a loss that is NaN from its first
    step is what the panel must show)."""
    return tuple(m for m in panel.metrics if run.series.get(m))


STYLES = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ("-", "v"))  # (line, marker)


def lines(axis: Axis, series: dict[str, Points]) -> list[tuple[Points, str]]:
    """The axis's series to draw, (points, legend label): a series equal to an earlier one at
    every step is drawn once, its label joined ("reward = train pass"), so none hides another."""
    out: list[tuple[Points, str]] = []
    for metric, label in axis.series:
        pts = finite(series.get(metric, ()))
        if not pts:
            continue
        same = next((i for i, (other, _) in enumerate(out) if other == pts), None)
        if same is None:
            out.append((pts, label))
        else:
            out[same] = (pts, f"{out[same][1]} = {label}")
    return out


def tick(value: float, digits: int = 4) -> str:
    """A linear axis's tick label: short, never an offset or a long fraction."""
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits - 3}e}" if 0 < abs(value) < 1e-3 else f"{value:.{digits}g}"


def tick_formatter():
    """Tick labels as `tick` writes them, with as many digits as it takes to tell every tick
    of the axis apart (4.578 and 4.578 are not two labels; 4.5781 and 4.5783 are)."""
    from matplotlib.ticker import Formatter

    class Ticks(Formatter):
        def __call__(self, x, pos=None) -> str:
            return tick(x)

        def format_ticks(self, values) -> list[str]:
            labels = [tick(v) for v in values]
            for digits in range(5, 12):
                if len(set(labels)) == len(labels):
                    break
                labels = [tick(v, digits) for v in values]
            return labels

    return Ticks()


def legend_columns(drawn: list[tuple[Points, str]]) -> int:
    """One row when the labels fit across the axis (about 80 characters), else two columns."""
    return len(drawn) if sum(len(label) + 6 for _, label in drawn) <= 80 else 2


def _scale(ax, axis: Axis, values: list[float]) -> str:
    """Set the y scale and limits; a note when some values cannot be shown."""
    if not values:  # nothing finite: the axis shows only where the NaNs were
        return ""
    if axis.log and any(v > 0 for v in values):
        from matplotlib.ticker import NullFormatter

        top = max(values)
        low = max(min(v for v in values if v > 0), top * 10.0**-LOG_DECADES)
        # whole decades: at least two labelled ticks, and no crowd of minor labels
        bottom, ceiling = (
            10.0 ** math.floor(math.log10(low)),
            10.0 ** math.ceil(math.log10(top * 1.05)),
        )
        ax.set_yscale("log")
        ax.set_ylim(bottom, ceiling)
        ax.yaxis.set_minor_formatter(NullFormatter())
        under = sum(v < bottom for v in values)
        return (
            f"{axis.ylabel}: {under} value(s) below {bottom:.0e} fall under the plot (log scale)"
            if under
            else ""
        )
    ax.yaxis.set_major_formatter(tick_formatter())
    limits = y_range(axis, values)
    if limits is not None:
        ax.set_ylim(*limits)
    return ""


def y_range(axis: Axis, values: list[float]) -> tuple[float, float] | None:
    """A linear axis's y limits (None: matplotlib's own, the values' range with margins).

    A fraction spans at least 0-1; a constant is drawn from 0; a series that changes by less
    than FLAT_BAND of its level is drawn inside a band FLAT_BAND of its level tall, centred
    on it, so that it looks as flat as it is."""
    if not values:
        return None
    lo, hi = min(values), max(values)
    if axis.unit_range:
        return min(0.0, lo) - 0.03, max(1.0, hi) + 0.03
    if lo == hi:  # a constant: from 0, so the value reads against a scale
        return tuple(sorted((0.0, 1.25 * lo))) if lo else (-0.05, 1.0)
    band = FLAT_BAND * max(abs(lo), abs(hi))
    if hi - lo >= band:
        return None
    mid = (lo + hi) / 2
    return mid - band / 2, mid + band / 2


def level(points: Points) -> float:
    """A series' scale: its largest |value| (0 for none, or all zero)."""
    return max((abs(v) for _, v in finite(points)), default=0.0)


def split_scales(axis: Axis, series: dict[str, Points]) -> tuple[Axis, ...]:
    """The axis, or one axis per scale when its series' levels differ by more than
    SCALE_RATIO (a 2-6 series beside a 3,400 one): each keeps the unit, and the axes and
    their series keep the order the axis lists them in. Log and fraction axes are never
    split (decades and 0-1 fit all)."""
    if axis.log or axis.unit_range:
        return (axis,)
    drawn = [(m, label) for m, label in axis.series if series.get(m)]
    levels = {m: level(series[m]) for m, _ in drawn}
    groups: list[list[str]] = []  # metrics, by rising level
    for m in sorted((m for m, _ in drawn), key=lambda m: levels[m]):
        floor = next((levels[g] for g in groups[-1] if levels[g] > 0), 0.0) if groups else 0.0
        if groups and (floor == 0.0 or levels[m] <= SCALE_RATIO * floor):
            groups[-1].append(m)
        else:
            groups.append([m])
    if len(groups) <= 1:
        return (axis,)
    order = [m for m, _ in drawn]
    groups.sort(key=lambda group: min(order.index(m) for m in group))  # as the axis lists them
    return tuple(
        replace(axis, series=tuple((m, label) for m, label in drawn if m in group))
        for group in groups
    )


def non_finite_steps(axis: Axis, series: dict[str, Points]) -> list[int]:
    """The steps at which one of the axis's series logged NaN or an infinity."""
    return sorted(
        {s for m, _ in axis.series for s, v in series.get(m, ()) if not finite(((s, v),))}
    )


def _plot_axis(ax, axis: Axis, series: dict[str, Points]) -> list[str]:
    """Draw one axis; returns its caption notes (none when nothing needs saying)."""
    drawn = lines(axis, series)
    bad = non_finite_steps(axis, series)
    for s in bad:  # a NaN cannot be drawn as a point: mark where it was logged
        ax.axvline(s, color="#c0392b", linestyle=":", linewidth=1.4)
    for i, (pts, label) in enumerate(drawn):
        steps, values = zip(*pts, strict=True)
        style, marker = STYLES[i % len(STYLES)]
        marker = marker if len(pts) <= MARKERS_UP_TO else None
        ax.plot(
            steps, values, linestyle=style, marker=marker, markersize=4, linewidth=1.6, label=label
        )
    notes = [_scale(ax, axis, [v for pts, _ in drawn for _, v in pts])]
    if bad:
        at = ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10 else "")
        notes.append(f"{axis.ylabel}: NaN or infinite at step(s) {at} (dotted red lines)")
    ax.set_ylabel(axis.ylabel)
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if drawn:
        ax.legend(
            loc="lower left", bbox_to_anchor=(0, 1.01), ncol=legend_columns(drawn), frameon=False
        )
    return [n for n in notes if n]


WIDTH, HEIGHT = 9.0, 2.9  # inches per axis: every panel as wide, so text is one size in all


def draw(axes: tuple[Axis, ...], series: dict[str, Points], xlabel: str, prefix: str):
    """One panel's axes, stacked over one step axis, as inline SVG text, and caption notes."""
    import matplotlib
    from matplotlib.figure import Figure

    shown = [
        b for a in axes if any(series.get(m) for m, _ in a.series) for b in split_scales(a, series)
    ]
    with matplotlib.rc_context(RC):  # fonts are fixed when the artists are made
        fig = Figure(figsize=(WIDTH, HEIGHT * len(shown)), layout="constrained")
        plots = fig.subplots(len(shown), 1, squeeze=False, sharex=True)[:, 0]
        notes = [n for ax, a in zip(plots, shown, strict=True) for n in _plot_axis(ax, a, series)]
        plots[-1].set_xlabel(xlabel)
        return svg_text(fig, prefix), notes


RC = {
    "svg.fonttype": "none",  # text stays text: searchable, and checked by the tests
    "svg.hashsalt": "arl-report",  # ids do not change between runs (then made unique per panel)
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # matplotlib's own font: present wherever it is
    "font.size": 11,
    "legend.fontsize": 10.5,
}


def svg_text(fig, prefix: str) -> str:
    """The figure as an <svg> element to inline: no XML prologue, no metadata, ids prefixed
    with `prefix` so that several figures' ids cannot collide in one page. Call it inside
    rc_context(RC), as `draw` does."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m[1]}"', text)
    text = re.sub(
        r"(href=\"#|url\(#)([^\")]+)",
        lambda m: f"{m[1]}{prefix}{m[2]}" if m[2] in ids else m[0],
        text,
    )
    return text.strip()


FRACTION_ENDINGS = ("_rate", "_share", "_frac", "_accuracy", "_pass", "_fraction")
PER_AXIS = 5  # series per axis of the other-series panels; more are split over panels


def unit_of(metric: str, points: Points) -> str:
    """The y unit of a series no standing panel draws, read from its name (or its values)."""
    parts = metric.split("/")
    if parts[0] == "time":
        return "seconds"
    if any(p.endswith(FRACTION_ENDINGS) for p in parts):
        return "fraction"
    if parts[-1].endswith("_delta"):
        return "log-prob change vs ref. (nats)"
    if parts[-1].endswith("_per_episode"):
        return "per episode"
    if all(float(v).is_integer() for _, v in points):
        return "count"
    return "value as logged"


def constant(points: Points) -> bool:
    """Every value the same (shown in a table, not a plot)."""
    return len({v for _, v in points}) <= 1


def other_panels(run: Run) -> tuple[list[Panel], dict[str, float]]:
    """Panels for the series no standing panel draws, one per family (the name before its
    first "/") and unit, split past PER_AXIS series; and the series that never changed."""
    groups: dict[tuple[str, str], list[str]] = {}
    fixed: dict[str, float] = {}
    for metric in sorted(run.series):
        pts = finite(run.series[metric])
        if standing(metric) or not pts:
            continue
        if constant(pts):
            fixed[metric] = pts[0][1]
            continue
        family = metric.split("/")[0] + "/*" if "/" in metric else ""
        groups.setdefault((family, unit_of(metric, pts)), []).append(metric)
    panels = []
    for (family, unit), metrics in groups.items():
        for i in range(0, len(metrics), PER_AXIS):
            chunk = metrics[i : i + PER_AXIS]
            cut = len(family) - 1  # a family's series are labelled by what follows its "/"
            axis = Axis(
                unit,
                tuple((m, m[cut:] if family else m) for m in chunk),
                unit_range=unit == "fraction",
            )
            title = f"Other logged series: {family + ', ' if family else ''}{unit}"
            key = f"other-{len(panels) + 1}"
            panels.append(Panel(key, title, (), (axis,), "as logged; no standing panel reads it"))
    return panels, fixed

"""The report's y axes (issue 45): a series that barely moves is drawn flat, inside a band
of at least FLAT_BAND of its level, not stretched into a steep fall; series of very different
scales on one axis (2-6 beside 3,400) get axes of their own. Read off the limits matplotlib
was given and off the drawn SVG."""

import pytest
from matplotlib.figure import Figure

from arl.doctor.report_panels import _plot_axis, draw, other_panels
from arl.doctor.report_spec import PANELS, Axis
from arl.doctor.types import Run

ENTROPY = next(a for p in PANELS if p.key == "entropy" for a in p.axes)


def ylim(axis: Axis, series: dict) -> tuple[float, float]:
    """The y limits of `axis` drawn as the report draws it."""
    ax = Figure().subplots()
    _plot_axis(ax, axis, series)
    return ax.get_ylim()


def steps(*values: float) -> tuple[tuple[int, float], ...]:
    return tuple(enumerate(values, start=1))


def test_a_change_of_6e_6_is_drawn_flat():
    series = {"entropy": steps(0.412, 0.412, 0.411997, 0.411994)}
    lo, hi = ylim(ENTROPY, series)
    assert hi - lo >= 0.1 * 0.412 * 0.999  # a band 10% of the level: the line is flat in it
    assert lo < 0.411994 and 0.412 < hi  # and it holds every value


def test_the_band_s_threshold_both_ways():
    # a change just under 10% of the level sits in the band; just over, the axis is its own
    under = {"entropy": steps(1.0, 0.95, 0.901)}  # 0.099 of 1.0
    lo, hi = ylim(ENTROPY, under)
    assert hi - lo == pytest.approx(0.1) and lo < 0.901 and hi > 1.0
    over = {"entropy": steps(1.0, 0.95, 0.899)}  # 0.101: matplotlib's range, its 5% margins
    lo, hi = ylim(ENTROPY, over)
    assert hi - lo == pytest.approx(0.101 * 1.1)


def test_a_real_fall_is_still_a_fall():
    lo, hi = ylim(ENTROPY, {"entropy": steps(0.9, 0.5, 0.05)})
    assert hi - lo < 1.0 and lo < 0.05 < 0.9 < hi  # the values' own range, not a band


def count_axes(svg: str, ylabel: str) -> int:
    """How many y axes of the SVG carry `ylabel` (text stays text: svg.fonttype none)."""
    return svg.count(f">{ylabel}<")


def other_count_panel(**series) -> tuple:
    run = Run("r", "arl", "pg", {k: steps(*v) for k, v in series.items()})
    (panel,), _ = other_panels(run)
    return panel, run


def test_series_of_different_scales_get_their_own_axes():
    # arl's pg log: groups with signal (2-6 of 8) beside tokens trained on (about 3,400)
    panel, run = other_count_panel(
        tasks_with_grad=(2, 6, 4, 5), train_tokens=(3380, 3412, 3395, 3440)
    )
    svg, _ = draw(panel.axes, run.series, "step", "p-")
    assert count_axes(svg, "count") == 2


def test_the_scale_threshold_both_ways():
    apart, run = other_count_panel(a_count=(1, 0, 1, 1), b_count=(3000, 3010, 3030, 3031))
    assert count_axes(draw(apart.axes, run.series, "step", "p-")[0], "count") == 2  # x3031
    near, run = other_count_panel(a_count=(100, 0, 1, 1), b_count=(2900, 2980, 2990, 2999))
    assert count_axes(draw(near.axes, run.series, "step", "p-")[0], "count") == 1  # x29.99
    # no malformed call at all beside 2-6 turns: one axis (zero has no scale of its own)
    malformed = next(p for p in PANELS if p.key == "malformed")
    series = {"malformed_per_episode": steps(0, 0, 0, 0), "mean_turns": steps(2, 3, 4, 6)}
    assert count_axes(draw(malformed.axes[:1], series, "step", "p-")[0], "per episode") == 1

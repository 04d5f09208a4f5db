"""What the benchmark plots show: every text inside the figure (titles wrapped, not clipped),
plain numbers on log axes, speed-up labels below 1, speed-up and efficiency on panels of
their own, and legends that list only what is drawn."""

import copy

import matplotlib
import numpy as np
import pytest

from h5mdtool import bench_report, bench_rmsd
from h5mdtool.bench.plots import plot_layouts, plot_ranks, plot_scaling, rmsd_title
from test_bench_report import synthetic

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def template(adk):
    return bench_rmsd(adk[1], adk[0])["report"]


def _long_named(report, n_ranks, **kwargs):
    """A synthetic report whose input has a long path, as on a cluster's scratch file system."""
    report = synthetic(report, n_ranks, **kwargs)
    report["input"] = dict(report["input"], path="/scratch/project/someone/" + "long_directory_name/" * 4
                           + "adenylate_kinase_production_run_0001.h5md")
    return report


def _texts(figure):
    """Every text the figure draws (tick labels of ticks outside the axes' view are not drawn)."""
    figure.canvas.draw()
    hidden = set()
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            drawn = set(map(id, axis._update_ticks()))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if id(tick) not in drawn:
                    hidden.update((id(tick.label1), id(tick.label2)))
    return [text for text in figure.findobj(matplotlib.text.Text)
            if text.get_visible() and text.get_text().strip() and id(text) not in hidden]


def _assert_inside(figure):
    """No text runs past the figure's edges (1 pixel of tolerance)."""
    renderer = figure.canvas.get_renderer()
    width, height = figure.bbox.width, figure.bbox.height
    for text in _texts(figure):
        box = text.get_window_extent(renderer)
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1, \
            f"clipped: {text.get_text()!r} at {box}"


def _tick_labels(axes):
    """The y tick labels drawn."""
    axes.figure.canvas.draw()
    return [tick.label1.get_text() for tick in axes.yaxis._update_ticks() if tick.label1.get_text()]


def _assert_plain_numbers(figure):
    for axes in figure.axes:
        for label in _tick_labels(axes):
            assert "10^" not in label and "times" not in label and "$" not in label, label
            float(label)


def _legend_labels(figure):
    labels = []
    for legend in [axes.get_legend() for axes in figure.axes] + figure.legends:
        if legend is not None:
            labels += [text.get_text() for text in legend.get_texts()]
    return labels


@pytest.mark.parametrize("n_ranks,slow", [(1, ()), (3, ()), (3, (1,)), (96, (1, 40))])
def test_rank_plot(template, n_ranks, slow):
    report = _long_named(template, n_ranks, slow=slow)
    figure = plot_ranks(report["runs"][0], None, rmsd_title(report))
    _assert_inside(figure)
    axes = figure.axes[0]
    labels = _legend_labels(figure)
    assert ("straggler (work)" in labels) == bool(report["stragglers"]["ranks"])
    low, high = axes.get_ylim()
    for line in axes.get_lines():  # the straggler limits listed are drawn inside the axes
        if line.get_label() in labels:
            assert low <= line.get_ydata()[0] <= high


@pytest.mark.parametrize("counts,slow_from", [((1, 2, 4, 8, 16, 24, 48, 96), 48), ((2, 8), None), ((1, 2, 3), None)])
def test_scaling_plot(template, counts, slow_from):
    reports = [_long_named(template, n, slow=(5,) if slow_from and n >= slow_from else ()) for n in counts]
    if counts == (1, 2, 3):  # slower on more ranks: speed-ups below 1
        for report, factor in zip(reports, (1.0, 1.3, 2.0)):
            for run in report["runs"]:
                run["t_total"] *= factor
            report["t_total"] *= factor
    result = bench_report(reports)
    figure = plot_scaling(result, None)
    _assert_inside(figure)
    _assert_plain_numbers(figure)
    speed, efficiency, phases = figure.axes  # three panels, none sharing another's y axis
    assert speed.get_ylabel().startswith("speed-up") and efficiency.get_ylabel().startswith("efficiency")
    assert all("efficiency" not in line.get_label() for line in speed.get_lines())
    assert all("speed-up" not in line.get_label() for line in efficiency.get_lines())
    lowest = min(row["speedup"] for row in result["rows"])
    assert min(float(label) for label in _tick_labels(speed)) <= lowest
    labels = _legend_labels(figure)
    assert ("run with stragglers" in labels) == any(row.get("stragglers") for row in result["rows"])


def test_layouts_plot_mentions_dashed_lines_only_when_drawn(template):
    other = copy.deepcopy(template)
    other["input"] = dict(other["input"], path="/data/other.h5md", size=1, sha256="x" * 64)
    reports = [synthetic(template, n) for n in (1, 2)] + [synthetic(other, n) for n in (1, 2)]
    result = bench_report(reports, layouts_mode=True)
    figure = plot_layouts(result, None)
    _assert_inside(figure)
    _assert_plain_numbers(figure)
    assert "dashed" not in figure._suptitle.get_text()
    assert all(line.get_linestyle() == "-" for axes in figure.axes for line in axes.get_lines())
    result = bench_report([reports[1]] + reports[2:], layouts_mode=True)
    figure = plot_layouts(result, None)
    assert "dashed: no 1-rank run" in figure._suptitle.get_text()
    assert any(line.get_linestyle() == "--" for line in figure.axes[0].get_lines())
    np.testing.assert_array_equal(figure.get_size_inches(), (13, 5.2))

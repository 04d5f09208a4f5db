"""Plots for the benchmarks; matplotlib is an optional extra, imported only here.

Drawn to stay readable from 1 to a few hundred ranks: legends outside the data, rank counts
on log2 axes, per-rank bars that show each rank's own work apart from its waiting, and
titles naming the input, engine, selection and baseline.
"""

import math
import os
import textwrap

from ..parallel.errors import StackError, UsageError
from .timing import PHASES, work

#: One colour per phase; waiting and communication in greys, so the work stands out.
COLOURS = {"t_init_top": "#8da0cb", "t_init_traj": "#66c2a5", "t_io": "#fc8d62", "t_compute": "#e78ac3",
           "t_wait": "#e0e0e0", "t_comm": "#737373"}
LABELS = {"t_init_top": "init topology", "t_init_traj": "init trajectory", "t_io": "I/O", "t_compute": "compute",
          "t_wait": "wait (for other ranks)", "t_comm": "communication"}


def image_format(path):
    """The image format matplotlib writes for *path* (its extension), or a UsageError."""
    extension = os.path.splitext(str(path))[1].lower().lstrip(".")
    if extension not in ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps"):
        raise UsageError(f"{path}: --plot needs a .png, .pdf, .svg, .jpg or .eps file name")
    return extension


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise StackError("--plot needs matplotlib: pip install matplotlib (make install adds it)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _input_name(source):
    name = os.path.basename(source["path"])
    if source.get("kind") == "split" or source.get("layout") == "split":
        name = f"{os.path.basename(os.path.dirname(source['path']))}/ ({source.get('parts')} parts)"
    detail = source.get("format", "")
    if source.get("chunks"):
        detail += " chunks " + "x".join(map(str, source["chunks"]))
    if source.get("compression"):
        detail += f" {source['compression']}"
    return f"{name} [{detail.strip()}]"


def rmsd_title(report):
    """Title of a ``bench rmsd`` per-rank plot: input, engine, selection, ranks."""
    analysis = report["analysis"]
    fit = analysis["atoms"]["fit"]
    return (f"bench rmsd: {_input_name(report['input'])}, engine {report['engine']}, {report['n_ranks']} rank(s)\n"
            f"fit {fit['label']!r} ({fit['n']} atoms), weights {analysis['weights']}, "
            f"{report['n_analysed']} frames, compute load {report['compute_load']}; fastest of "
            f"{len(report['runs'])} run(s)")


#: Characters of a "medium" (10 pt) title per inch of figure width, with a margin.
TITLE_CHARS_PER_INCH = 14


def _title(figure, text):
    """Put *text* above the plots, left-aligned and wrapped to the figure's width, so that no
    line runs past its edges (tight_layout leaves room for it)."""
    width = max(40, int(figure.get_figwidth() * TITLE_CHARS_PER_INCH))
    lines = [wrapped for line in text.split("\n") for wrapped in textwrap.wrap(line, width) or [""]]
    figure.suptitle("\n".join(lines), x=0.01, ha="left", fontsize="medium")


def _plain_log_axis(axes):
    """Label a log y axis with plain numbers (0.5, 1, 2...), never 6x10^-1: every 1-9 step
    within one decade, 1-2-5 steps over up to three decades, powers of ten beyond."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    low, high = axes.get_ylim()
    decades = math.log10(high / low) if low > 0 and high > low else 1.0
    subs = tuple(range(1, 10)) if decades < 1 else (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _rank_ticks(axes, ranks):
    every = max(1, math.ceil(len(ranks) / 24))
    ticks = ranks[::every]
    axes.set_xticks(ticks)
    axes.set_xticklabels([str(r) for r in ticks], fontsize="small")
    axes.set_xlim(min(ranks) - 0.6, max(ranks) + 0.6)


def plot_ranks(run, path, title, fmt=None):
    """Per-rank stacked bars of one run's phases (Khoshlessan et al. 2020, figure 2d).

    Each rank's own phases (topology, trajectory opening, I/O, compute) are stacked in
    colour; its waiting for other ranks and its communication sit on top in greys. Dashed
    lines mark the straggler limits on work (the rank's own I/O + compute: 1.5x the median,
    2x the fastest); stragglers' work is outlined in red and named below the plot. With *path* None the figure is
    returned instead of written.
    """
    plt = _pyplot()
    ranks_records = run["ranks"]
    ranks = [r["rank"] for r in ranks_records]
    width = min(18.0, max(7.5, 0.11 * len(ranks) + 6.0))
    figure, axes = plt.subplots(figsize=(width, 5.2))
    bottom = [0.0] * len(ranks)
    bar_width = 0.8 if len(ranks) < 48 else 0.95
    for phase in PHASES:
        values = [r[phase] for r in ranks_records]
        axes.bar(ranks, values, bottom=bottom, width=bar_width, color=COLOURS[phase], label=LABELS[phase],
                 hatch="//" if phase == "t_wait" else None, edgecolor="#bdbdbd" if phase == "t_wait" else "none",
                 linewidth=0)
        bottom = [b + v for b, v in zip(bottom, values)]
    stragglers = run["stragglers"]
    median, fastest = stragglers["median_work"], stragglers["fastest_work"]
    for rule, value, style, what in (("rule_median", median, "--", "median"), ("rule_fastest", fastest, ":", "fastest")):
        factor = stragglers.get(rule, 1.5 if what == "median" else 2.0)
        if value and value > 0:  # a limit is drawn (and listed) only where there is one
            axes.axhline(factor * value, color="black", linestyle=style, linewidth=1, label=f"{factor} x {what} work")
    slow = {entry["rank"]: entry for entry in stragglers["ranks"]}
    for record in ranks_records:
        if record["rank"] in slow:
            axes.bar([record["rank"]], [work(record)], width=bar_width, fill=False, edgecolor="red", linewidth=1.5,
                     label="straggler (work)" if record["rank"] == min(slow) else None)
    _rank_ticks(axes, ranks)
    axes.set_xlabel("MPI rank")
    axes.set_ylabel("time (s)")
    _title(figure, title)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    if slow:
        text = "; ".join(f"rank {e['rank']}: {e['times_median']:.1f}x median, +{e['phase_excess']:.2f} s "
                         f"{LABELS[e['phase']]}" for e in list(slow.values())[:6])
        if len(slow) > 6:
            text += f"; ... {len(slow) - 6} more"
        figure.text(0.01, 0.01, "stragglers: " + text, fontsize="small", color="red")
    else:
        figure.text(0.01, 0.01, "no stragglers", fontsize="small")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    return _save(plt, figure, path, fmt)


def _save(plt, figure, path, fmt):
    """Write *figure* to *path* (or hand it back when *path* is None, for inspection)."""
    if path is None:
        return figure
    figure.savefig(path, dpi=120, format=fmt)
    plt.close(figure)
    return None


def _log2_ranks(axes, ranks):
    axes.set_xscale("log", base=2)
    axes.set_xticks(ranks)
    axes.set_xticklabels([str(n) for n in ranks], fontsize="small")
    axes.minorticks_off()
    axes.set_xlabel("MPI ranks N")
    if len(ranks) > 1:
        axes.set_xlim(min(ranks) / 1.3, max(ranks) * 1.3)


def _scaling_title(result, what):
    context = result["context"]
    input_name = os.path.basename(context["input"]) if context.get("input") else "?"
    return (f"{what}: {input_name} [{context['format']}, {context['layout']}], engine {context['engine']}, "
            f"fit {context['select']!r} ({context['n_selected']} atoms), weights {context['weights']}, "
            f"{context['n_frames']} frames, load {context['compute_load']}")


def _baseline_text(baseline):
    if baseline["measured"]:
        return f"baseline: measured 1-rank run ({baseline['t_total']:.3g} s)"
    return f"baseline ASSUMED: no 1-rank run, {baseline['n_ranks']} ranks taken as perfectly scaled"


def _speedup_ticks(axes, ranks, speedups):
    """Powers of two on the speed-up axis from below the smallest S(N) to the largest N, labelled
    plainly (0.25, 0.5, 1, 2...), so that speed-ups below 1 are read as easily as the others."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    values = [value for value in list(speedups) + list(ranks) if value and value > 0]
    low, high = math.floor(math.log2(min(values))), math.ceil(math.log2(max(values)))
    step = max(1, math.ceil((high - low + 1) / 10))
    ticks = [2.0 ** k for k in range(low, high + 1, step)]
    axes.set_yscale("log", base=2)
    axes.yaxis.set_major_locator(FixedLocator(ticks))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_locator(NullLocator())
    axes.set_ylim(2.0 ** low / 1.2, 2.0 ** high * 1.2)


def plot_scaling(result, path, fmt=None):
    """Speed-up, efficiency, and each phase's mean time, against ranks (log2 axes), in three
    panels (each with one scale).

    *result* is :func:`h5mdtool.bench.report.bench_report`'s scaling result. With *path*
    None the figure is returned instead of written.
    """
    plt = _pyplot()
    rows, baseline = result["rows"], result["baseline"]
    ranks = [row["n_ranks"] for row in rows]
    figure, (speed, efficiency, right) = plt.subplots(1, 3, figsize=(17, 5.6))
    style = "-" if baseline["measured"] else "--"
    assumed = "" if baseline["measured"] else " (assumed baseline)"
    speedups = [row["speedup"] for row in rows]
    speed.plot(ranks, speedups, "o" + style, color="tab:blue", label="speed-up S(N)" + assumed)
    speed.plot(ranks, ranks, "k:", linewidth=1, label="ideal S(N) = N")
    _log2_ranks(speed, ranks)
    _speedup_ticks(speed, ranks, speedups)
    speed.set_ylabel("speed-up S(N) = t(1) / t(N)")
    speed.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize="small", frameon=False)
    speed.set_title(_baseline_text(baseline), fontsize="small", color="black" if baseline["measured"] else "tab:red")
    efficiency.plot(ranks, [row["efficiency"] for row in rows], "s" + style, color="tab:red",
                    label="efficiency E(N)" + assumed)
    efficiency.axhline(1.0, color="black", linestyle=":", linewidth=1, label="ideal E(N) = 1")
    _log2_ranks(efficiency, ranks)
    efficiency.set_ylim(0, max(1.15, max(row["efficiency"] for row in rows) * 1.1))
    efficiency.set_ylabel("efficiency E(N) = S(N) / N")
    efficiency.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize="small", frameon=False)
    efficiency.set_title("parallel efficiency", fontsize="small")
    for phase in PHASES:  # a phase that took no time has no place on a log axis: left out there
        right.plot(ranks, [row[phase] if row[phase] > 0 else float("nan") for row in rows], "o-",
                   color=COLOURS[phase] if phase != "t_wait" else "#969696", label=LABELS[phase])
    right.plot(ranks, [row["t_total"] for row in rows], "k-", linewidth=2, label="total (slowest rank)")
    slow = [row for row in rows if row.get("stragglers")]
    if slow:
        right.plot([row["n_ranks"] for row in slow], [row["t_total"] for row in slow], "o", markersize=11,
                   markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.5, label="run with stragglers")
    _log2_ranks(right, ranks)
    right.set_yscale("log")
    _plain_log_axis(right)
    right.set_ylabel("time (s), mean over ranks")
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize="small", frameon=False)
    right.set_title("phases (log scale)", fontsize="small")
    _title(figure, _scaling_title(result, "bench rmsd scaling"))
    figure.tight_layout(rect=(0, 0, 1, 1))
    return _save(plt, figure, path, fmt)


def plot_layouts(result, path, fmt=None):
    """Each input's total and I/O time against ranks (log2 axes), side by side (with *path*
    None the figure is returned instead of written)."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    all_ranks = [row["n_ranks"] for row in result["rows"]]
    for column in result["inputs"]:
        ranks = sorted(column["rows"])
        style = "-" if column["baseline"]["measured"] else "--"
        left.plot(ranks, [column["rows"][n]["t_total"] for n in ranks], "o" + style, label=column["label"])
        right.plot(ranks, [column["rows"][n]["t_io"] if column["rows"][n]["t_io"] > 0 else float("nan") for n in ranks],
                   "o" + style, label=column["label"])
    for axes, what in ((left, "total time (s), slowest rank"), (right, "I/O time (s), mean over ranks")):
        _log2_ranks(axes, all_ranks)
        axes.set_yscale("log")
        _plain_log_axis(axes)
        axes.set_ylabel(what)
    handles, labels = left.get_legend_handles_labels()
    rows = math.ceil(len(labels) / 3)
    figure.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize="small", frameon=False)
    context = result["context"]
    dashed = any(not column["baseline"]["measured"] for column in result["inputs"])
    _title(figure, f"bench rmsd layouts: {len(result['inputs'])} inputs, engine {context['engine']}, fit "
                         f"{context['select']!r} ({context['n_selected']} atoms), weights {context['weights']}, "
                         f"{context['n_frames']} frames, load {context['compute_load']}"
                         + (" (dashed: no 1-rank run)" if dashed else ""))
    figure.tight_layout(rect=(0, 0.04 + 0.04 * rows, 1, 1))
    return _save(plt, figure, path, fmt)

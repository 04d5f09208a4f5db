"""Plots for the benchmarks; matplotlib is an optional extra, imported only here."""

from .errors import UsageError

PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm")


def image_format(path):
    """The image format matplotlib writes for *path* (its extension), or a UsageError."""
    import os

    extension = os.path.splitext(str(path))[1].lower().lstrip(".")
    if extension not in ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps"):
        raise UsageError(f"{path}: --plot needs a .png, .pdf, .svg, .jpg or .eps file name")
    return extension


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'h5mdtool[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ranks(run, path, title, fmt=None):
    """Stacked bars of each rank's phases for one run (like paper 000, figure 2d).

    *fmt* is the image format (``png``, ``pdf``, ``svg``...), by default from *path*'s
    extension.
    """
    plt = _pyplot()
    ranks = run["ranks"]
    figure, axes = plt.subplots(figsize=(max(6, 0.35 * len(ranks) + 3), 4))
    bottom = [0.0] * len(ranks)
    for phase in PHASES:
        values = [r[phase] for r in ranks]
        axes.bar([r["rank"] for r in ranks], values, bottom=bottom, label=phase[2:])
        bottom = [b + v for b, v in zip(bottom, values)]
    median = run["stragglers"]["median_total"]
    axes.axhline(1.5 * median, color="black", linestyle="--", linewidth=1, label="1.5 x median (stragglers)")
    axes.set_xticks([r["rank"] for r in ranks])
    axes.set_xlabel("MPI rank")
    axes.set_ylabel("time (s)")
    axes.set_title(title)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120, format=fmt)
    plt.close(figure)


def plot_scaling(rows, path, title, fmt=None):
    """Speed-up and efficiency, and each phase's time, against the number of ranks."""
    plt = _pyplot()
    ranks = [row["n_ranks"] for row in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(ranks, [row["speedup"] for row in rows], "o-", label="speed-up S(N)")
    left.plot(ranks, ranks, "k--", linewidth=1, label="ideal")
    left.set_xticks(ranks)
    left.set_xlabel("MPI ranks N")
    left.set_ylabel("speed-up")
    twin = left.twinx()
    twin.plot(ranks, [row["efficiency"] for row in rows], "s:", color="tab:red", label="efficiency S/N")
    twin.set_ylabel("efficiency")
    twin.set_ylim(0, 1.1)
    lines = left.get_lines() + twin.get_lines()
    left.legend(lines, [line.get_label() for line in lines], loc="upper left", fontsize="small")
    for phase in PHASES:
        right.plot(ranks, [max(row[phase], 1e-6) for row in rows], "o-", label=phase[2:])
    right.plot(ranks, [row["t_total"] for row in rows], "k-", linewidth=2, label="total")
    right.set_xscale("log", base=2)
    right.set_xticks(ranks, [str(n) for n in ranks])
    right.minorticks_off()
    right.set_yscale("log")
    right.set_xlabel("MPI ranks N")
    right.set_ylabel("time (s), mean over ranks")
    right.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120, format=fmt)
    plt.close(figure)

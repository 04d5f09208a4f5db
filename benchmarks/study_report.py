"""Tables and plots of the compression study from its JSON (``study_layouts.py``).

``python benchmarks/study_report.py [--json benchmarks/results/study_layouts.json]
[--plot docs/layouts-frontier.png] [--timeline docs/layouts-parallel-timeline.png]``

Prints the Markdown tables of docs/performance.md's compression-study section and draws
the size/read-speed frontier and the per-round timeline of the parallel writes.
"""

import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JSON = os.path.join(HERE, "results", "study_layouts.json")
#: allowance for float32 rounding of coordinates below 16 nm (a few ulp) on top of Q/2
FLOAT32_ROUNDING_NM = 1e-6
COLOURS = {"float lossless": "tab:blue", "float lossy": "tab:red", "integer grid": "tab:green"}
MARKERS = {"HDF5 built-in": "o", "hdf5plugin": "^", "h5py (lzf)": "s"}


def median(stat):
    return None if not stat else stat["median"]


def fmt(value, digits=2, suffix=""):
    return "" if value is None else f"{value:.{digits}f}{suffix}"


def spread_text(stat, digits=2):
    """``median (min-max)``."""
    if not stat:
        return ""
    if len(stat["runs"]) == 1:
        return f"{stat['median']:.{digits}f}"
    return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"


def frontier(rows, x="size_vs_xtc", y="read_all"):
    """Rows not beaten on both axes by another row (smaller and faster)."""
    points = [(r[x], median(r[y]), r) for r in rows if not r.get("error") and median(r[y]) is not None]
    out = []
    for size, seconds, row in points:
        if not any(s <= size and t <= seconds and (s, t) != (size, seconds) for s, t, _ in points):
            out.append(row)
    return sorted(out, key=lambda r: r[x])


def sweep_table(document):
    runs = document["runs"]
    names = [n for n in runs if n.startswith("sweep-")]
    if not names:
        return ""
    results = [runs[n]["result"] for n in names]
    by_key = [{r["key"]: r for r in result["rows"]} for result in results]
    head = ["layout", "reader needs"]
    for result in results:
        d = result["dataset"]
        head += [f"{d}: x XTC", f"{d}: max error (nm)", f"{d}: write (s)", f"{d}: read all / CA (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    first = results[0]
    order = sorted(first["rows"], key=lambda r: (list(COLOURS).index(r["family"]), r.get("size_vs_xtc", 99)))
    for row in order:
        cells = [row["label"], row["needs"]]
        for table in by_key:
            r = table.get(row["key"])
            if r is None or r.get("error"):
                cells += ["failed" if r else "", "", "", ""]
                continue
            cells += [f"{r['size_vs_xtc']:.3f}", f"{r['max_error_nm']:.2g}", spread_text(r["write"]),
                      f"{median(r['read_all']):.3f} / {median(r['read_ca']):.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    refs = "; ".join(f"{r['dataset']}: {r['n_frames']} frames x {r['n_atoms']} atoms, XTC {r['xtc_bytes'] / 1e6:.1f} MB, "
                     f"MDAnalysis's XTC decoder reads every frame in {spread_text(r['xtc_decoder'], 3)} s, "
                     f"load average {r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f}"
                     for r in results)
    return "\n".join(lines) + "\n\nReferences in the same runs: " + refs + "\n"


def frontier_table(document):
    out = []
    for name, run in document["runs"].items():
        if not name.startswith("sweep-"):
            continue
        result = run["result"]
        decoder = median(result["xtc_decoder"])
        out.append(f"\n{result['dataset']} (XTC decoder {decoder:.3f} s):\n")
        out.append("| layout | reader needs | x XTC | read all (s) | XTC decoder / read | write (s) |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for row in frontier(result["rows"]):
            out.append(f"| {row['label']} | {row['needs']} | {row['size_vs_xtc']:.3f} | {spread_text(row['read_all'], 3)} | "
                       f"{decoder / median(row['read_all']):.1f}x | {spread_text(row['write'])} |")
    return "\n".join(out) + "\n"


def chunk_table(document):
    out = []
    for name, run in document["runs"].items():
        if not name.startswith("chunks-"):
            continue
        result = run["result"]
        chunks = sorted({r["chunk_frames"] for r in result["rows"]})
        keys = list(dict.fromkeys(r["key"] for r in result["rows"]))
        table = {(r["key"], r["chunk_frames"]): r for r in result["rows"]}
        out.append(f"\n{result['dataset']}: size x XTC / block read of all atoms (s), by frames per chunk\n")
        out.append("| layout | " + " | ".join(str(c) for c in chunks) + " |")
        out.append("|" + " --- |" * (len(chunks) + 1))
        for key in keys:
            cells = []
            for c in chunks:
                r = table.get((key, c))
                cells.append("" if r is None or r.get("error") else f"{r['size_vs_xtc']:.3f} / {median(r['read_all']):.3f}")
            out.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def precision_table(document):
    out = []
    for name, run in document["runs"].items():
        if not name.startswith("precision-"):
            continue
        result = run["result"]
        q = result["q_nm"]
        out.append(f"\nQ = {q:g} nm (bound {q / 2:g} nm), {result['dataset']}, against an XTC written at precision "
                   f"{1 / q:g} ({result['xtc_bytes'] / 1e6:.1f} MB):\n")
        out.append("| layout | reader needs | x XTC | max error (nm) | within Q/2 (+1e-6 nm float32 rounding) | write (s) | read all (s) |")
        out.append("| --- | --- | --- | --- | --- | --- | --- |")
        for r in sorted(result["rows"], key=lambda r: r.get("size_vs_xtc", 99)):
            if r.get("error"):
                out.append(f"| {r['label']} | {r['needs']} | failed | | | | |")
                continue
            bound = r["bound_nm"] if r["bound_nm"] is not None else 0.0
            within = r["max_error_nm"] <= bound + FLOAT32_ROUNDING_NM
            out.append(f"| {r['label']} | {r['needs']} | {r['size_vs_xtc']:.3f} | {r['max_error_nm']:.7g} | "
                       f"{'yes' if within else '**no**'} | {spread_text(r['write'])} | "
                       f"{spread_text(r['read_all'], 3)} |")
    return "\n".join(out) + "\n"


def finalists_table(document):
    run = document["runs"].get("finalists")
    if not run:
        return ""
    serial, rmsd = run["result"]["serial"], run["result"]["bench_rmsd"]
    by_key = {r["key"]: r for r in rmsd["rows"]}
    out = [f"\n{serial['dataset']}: {serial['n_frames']} frames, XTC {serial['xtc_bytes'] / 1e6:.0f} MB; MDAnalysis's "
           f"XTC decoder {spread_text(serial['xtc_decoder'], 2)} s; MDAnalysis `rms.RMSD` (CA) on the XTC, whole "
           f"command: {spread_text({'median': rmsd['mda_xtc']['seconds'], 'min': min(rmsd['mda_xtc']['runs']), 'max': max(rmsd['mda_xtc']['runs']), 'runs': rmsd['mda_xtc']['runs']})} s\n",
           "| layout | x XTC | max error (nm) | write, 1 process (s) | read all / CA (s) | `bench rmsd` (s) | "
           "MDAnalysis on XTC / `bench rmsd` | RMSD vs MDAnalysis (A) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in serial["rows"]:
        b = by_key.get(r["key"], {})
        stat = {"median": b.get("seconds"), "min": min(b.get("runs", [0])), "max": max(b.get("runs", [0])),
                "runs": b.get("runs", [])} if b else None
        out.append(f"| {r['label']} | {r['size_vs_xtc']:.3f} | {r['max_error_nm']:.2g} | {spread_text(r['write'])} | "
                   f"{median(r['read_all']):.2f} / {median(r['read_ca']):.2f} | {spread_text(stat)} | "
                   f"{fmt(b.get('vs_mda_xtc'), 2, 'x')} | {b.get('max_rmsd_difference_A', 0):.1g} |")
    return "\n".join(out) + "\n"


def mdanalysis_table(document):
    run = document["runs"].get("mdanalysis")
    if not run:
        return ""
    out = []
    for dataset, rows in run["result"].items():
        out.append(f"\n{dataset}: MDAnalysis `for ts in u.trajectory: pass`\n")
        out.append("| layout | frames per chunk | H5MD (s) | XTC, same process (s) | max difference to the XTC (A) | "
                   "plain MDAnalysis (no HDF5_PLUGIN_PATH) |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            out.append(f"| {r['key']} | {r['chunk_frames']} | {spread_text(r['seconds'])} | {spread_text(r['xtc_seconds'])} | "
                       f"{r.get('max_difference_A', float('nan')):.2g} | "
                       f"{'reads' if r['reads_without_plugin_path'] else 'cannot read'} |")
    return "\n".join(out) + "\n"


def parallel_table(document):
    run = document["runs"].get("parallel")
    if not run:
        return ""
    rows = run["result"]
    configs = list(dict.fromkeys((r["method"], r["ranks"], r["threads"]) for r in rows))
    table = {(r["key"], r["method"], r["ranks"], r["threads"]): r for r in rows}
    head = [f"{m} {n} rank{'s' if n > 1 else ''} x {t} thread{'s' if t > 1 else ''}" for m, n, t in configs]
    out = ["| layout | " + " | ".join(head) + " | HDF5 1 rank / 2 ranks | HDF5 1 rank / pwrite 2 ranks |",
           "|" + " --- |" * (len(head) + 3)]
    for key in dict.fromkeys(r["key"] for r in rows):
        cells = []
        for m, n, t in configs:
            r = table.get((key, m, n, t))
            bad = r and r.get("check") is False
            cells.append("failed" if r is None or not r["seconds"] else spread_text(r["seconds"]) + (" **bad data**" if bad else ""))
        h1, h2, p2 = (table.get((key, "hdf5", 1, 1)), table.get((key, "hdf5", 2, 1)), table.get((key, "pwrite", 2, 1)))
        ratio = lambda a, b: f"{median(a['seconds']) / median(b['seconds']):.2f}x" if a and b and a["seconds"] and b["seconds"] else ""  # noqa: E731
        out.append(f"| {key} | " + " | ".join(cells) + f" | {ratio(h1, h2)} | {ratio(h1, p2)} |")
    return "\n".join(out) + "\n"


def plot_frontier(document, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = [document["runs"][n]["result"] for n in document["runs"] if n.startswith("sweep-")]
    if not sweeps:
        return
    fig, grid = plt.subplots(2, 2, figsize=(13, 11))
    axes = list(grid.ravel())
    for ax, result in zip(axes, sweeps):
        decoder = median(result["xtc_decoder"])
        rows = [r for r in result["rows"] if not r.get("error")]
        best = {r["key"] for r in frontier(rows)}
        for r in rows:
            ax.scatter(r["size_vs_xtc"], median(r["read_all"]) / decoder, c=COLOURS[r["family"]],
                       marker=MARKERS[r["needs"]], s=60 if r["key"] in best else 30,
                       edgecolors="black" if r["key"] in best else "none", alpha=0.85)
            if r["key"] in best or r["key"] in ("f32-shuffle-gzip4", "f32-so3-gzip4", "i32-shuffle-gzip4"):
                ax.annotate(r["key"], (r["size_vs_xtc"], median(r["read_all"]) / decoder), fontsize=7,
                            xytext=(4, 3), textcoords="offset points")
        ax.axvline(1.0, color="grey", lw=0.8, ls="--")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel("file size / XTC size (same frames)")
        ax.set_ylabel("read every frame (blocks) / MDAnalysis XTC decoder time")
        chunk = result["rows"][0]["chunk_frames"]
        ax.set_title(f"{result['dataset']}: {result['n_frames']} frames x {result['n_atoms']} atoms, "
                     f"{chunk}-frame chunks\n"
                     f"(XTC decoder {decoder:.2f} s; dashed: the XTC)", fontsize=10)
        ax.grid(True, which="both", lw=0.3)
    ax = axes[2]
    result = sweeps[0]
    for r in result["rows"]:
        if r.get("error"):
            continue
        ax.scatter(r["size_vs_xtc"], median(r["write"]), c=COLOURS[r["family"]], marker=MARKERS[r["needs"]], s=30)
        if r["key"] in ("f32-none", "f32-shuffle-gzip4", "f32-so3-gzip4", "i32-shuffle-gzip4", "i32-shuffle-zstd3",
                        "i32-bshuf-lz4", "f32-sz-abs", "i32-blosc2-bitshuffle-zstd5", "i32-blosc2-shuffle-zstd5"):
            ax.annotate(r["key"], (r["size_vs_xtc"], median(r["write"])), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("file size / XTC size")
    ax.set_ylabel("write time, 1 process, positions in memory (s)")
    ax.set_title(f"{result['dataset']}: write time", fontsize=10)
    ax.grid(True, which="both", lw=0.3)
    plot_chunks(document, axes[3])
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=f) for f, c in COLOURS.items()]
    handles += [plt.Line2D([], [], color="grey", marker=m, ls="", label=f"reader needs {n}") for n, m in MARKERS.items()]
    handles.append(plt.Line2D([], [], color="white", marker="o", markeredgecolor="black", ls="",
                              label="on the size/read frontier"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def plot_chunks(document, ax):
    """Size against frames per chunk for the short list (first chunks phase)."""
    names = [n for n in document["runs"] if n.startswith("chunks-")]
    if not names:
        ax.set_visible(False)
        return
    result = document["runs"][names[0]]["result"]
    keys = list(dict.fromkeys(r["key"] for r in result["rows"]))
    for key in keys:
        rows = sorted((r for r in result["rows"] if r["key"] == key and not r.get("error")),
                      key=lambda r: r["chunk_frames"])
        ax.plot([r["chunk_frames"] for r in rows], [r["size_vs_xtc"] for r in rows], marker="o", label=key)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("frames per chunk")
    ax.set_ylabel("file size / XTC size")
    ax.set_title(f"{result['dataset']}: size by frames per chunk", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", lw=0.3)


def plot_timeline(document, path, key="i32-shuffle-gzip4"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = document["runs"].get("parallel")
    if not run:
        return
    rows = {(r["key"], r["method"], r["ranks"], r["threads"]): r for r in run["result"]}
    panels = [(m, n, t) for m, n, t in [("hdf5", 1, 1), ("hdf5", 2, 1), ("pwrite", 2, 1), ("pwrite", 1, 2)]
              if rows.get((key, m, n, t), {}).get("timelines")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.6 + 1.2 * sum(p[1] for p in panels)), sharex=True)
    colours = {"encode": "tab:grey", "compress": "tab:orange", "write": "tab:blue", "exchange": "tab:red"}
    for ax, (method, ranks, threads) in zip(axes, panels):
        row = rows[(key, method, ranks, threads)]
        for rank, timeline in enumerate(row["timelines"]):
            for entry in timeline:
                start = entry["start"]
                for part in ("encode", "compress", "exchange", "write"):
                    if part in entry:
                        ax.barh(rank, entry[part], left=start, color=colours[part], edgecolor="white", lw=0.3)
                        start += entry[part]
        ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
        label = {"hdf5": "HDF5 collective filtered write (filters run inside 'write')",
                 "pwrite": "own compression threads + direct chunk write (rank 0 allocates, ranks pwrite)"}[method]
        ax.set_title(f"{label}: {ranks} rank(s) x {threads} thread(s), {median(row['seconds']):.2f} s", fontsize=9)
    frames = sum(e["frames"] for t in rows[(key,) + panels[0]]["timelines"] for e in t)
    axes[-1].set_xlabel(f"seconds from file creation ({key}, {frames} AdK frames, 32-frame chunks)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, label=p) for p, c in colours.items()]
    fig.legend(handles=handles, loc="upper right", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    print(f"timeline: {path}")


def timeline_summary(document):
    """Per-rank totals of the phases of each parallel write (s), from the last run's timelines."""
    run = document["runs"].get("parallel")
    if not run:
        return ""
    out = ["| layout | method | ranks x threads | per rank: encode or compress / exchange / write (s) |",
           "| --- | --- | --- | --- |"]
    for r in run["result"]:
        if not r.get("timelines"):
            continue
        parts = []
        for timeline in r["timelines"]:
            first = "encode" if r["method"] == "hdf5" else "compress"
            totals = [sum(e.get(p, 0.0) for e in timeline) for p in (first, "exchange", "write")]
            parts.append(" / ".join(f"{t:.2f}" for t in totals))
        out.append(f"| {r['key']} | {r['method']} | {r['ranks']} x {r['threads']} | " + "; ".join(parts) + " |")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=DEFAULT_JSON)
    parser.add_argument("--plot", default=None, help="PNG of the size/read frontier")
    parser.add_argument("--timeline", default=None, help="PNG of the parallel writes' rounds")
    args = parser.parse_args()
    document = json.load(open(args.json))
    for title, text in [("Sweep", sweep_table(document)), ("Frontier", frontier_table(document)),
                        ("Finalists", finalists_table(document)), ("Parallel writes", parallel_table(document)),
                        ("Parallel write phases", timeline_summary(document)),
                        ("MDAnalysis frame by frame", mdanalysis_table(document)),
                        ("Chunk frames", chunk_table(document)), ("Precisions", precision_table(document))]:
        if text.strip():
            print(f"\n### {title}\n\n{text}")
    if args.plot:
        plot_frontier(document, args.plot)
    if args.timeline:
        plot_timeline(document, args.timeline)


if __name__ == "__main__":
    main()

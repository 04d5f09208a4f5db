"""``h5mdtool bench report``: combine ``bench rmsd`` reports, comparing like with like.

Two modes:

- **scaling** (default): one input at several rank counts. Per rank count, the fastest run
  (over repeats and over reports made at that count), the mean of every phase over ranks,
  and the speed-up S(N) = t(1) / t(N) and efficiency E(N) = S(N) / N (Jakupovic & Beckstein 2021) relative
  to a *measured* 1-rank run. Without one, the smallest rank count N0 is assumed to scale
  perfectly, S(N) = N0 t(N0) / t(N), and the report says so ("assumed").
- **layouts**: several inputs (the same trajectory in different layouts or formats) at the
  same rank counts, side by side, as Jakupovic & Beckstein 2021's table of files, so a user can pick a layout
  from their own cluster's numbers.

Reports are compared on resolved values, not the strings typed: input content (file sizes,
frame and atom counts, layout), topology, the atoms picked (digests of their indices), the
weights, the reference (frame index or file), the frames analysed, the engine, the block size
and the compute load. Differences that change the work refuse the combination; differences
that do not (paths, modification times, software versions) are listed as warnings.
"""

import json
import os
import statistics

from ..parallel.errors import InputError, UsageError
from .timing import PHASES, work

#: The report layout this module reads (``bench rmsd`` writes it as ``report_version``).
REPORT_VERSION = 2

_RECORD_FIELDS = ("rank", "t_total", *PHASES)


def _missing(name, where, what):
    return InputError(f"{name}: {where} has no {what!r} (not a complete 'bench rmsd --out' report)")


def check_report(report, name):
    """Check that *report* is a complete ``bench rmsd`` report; *name* names it in errors.

    Raises
    ------
    InputError
        One line naming the file and what is missing or wrong.
    """
    if not isinstance(report, dict) or report.get("benchmark") != "rmsd":
        raise InputError(f"{name}: not a 'bench rmsd' report (no \"benchmark\": \"rmsd\")")
    if report.get("report_version") != REPORT_VERSION:
        raise InputError(f"{name}: report_version {report.get('report_version')!r}, this h5mdtool reads "
                         f"{REPORT_VERSION}: run 'h5mdtool bench rmsd --out' again")
    for key in ("n_ranks", "engine", "compute_load", "block_frames", "n_frames", "input", "topology", "analysis",
                "runs"):
        if key not in report:
            raise _missing(name, "the report", key)
    for key in ("path", "kind", "format", "n_atoms", "files", "layout"):
        if key not in report["input"]:
            raise _missing(name, "input", key)
    for key in ("atoms", "weights", "reference", "frames"):
        if key not in report["analysis"]:
            raise _missing(name, "analysis", key)
    if not isinstance(report["runs"], list) or not report["runs"]:
        raise InputError(f"{name}: 'runs' holds no run")
    for number, run in enumerate(report["runs"]):
        if "t_total" not in run:
            raise _missing(name, f"runs[{number}]", "t_total")
        ranks = run.get("ranks")
        if not isinstance(ranks, list) or len(ranks) != report["n_ranks"]:
            raise InputError(f"{name}: runs[{number}] has {len(ranks) if isinstance(ranks, list) else 'no'} "
                             f"rank records for n_ranks {report['n_ranks']}")
        for position, record in enumerate(ranks):
            for key in _RECORD_FIELDS:
                if not isinstance(record.get(key), (int, float)):
                    raise _missing(name, f"runs[{number}].ranks[{position}]", key)
    return report


def load_reports(runs):
    """Read ``bench rmsd`` reports: paths of JSON files or report dicts.

    Returns
    -------
    list of (name, report)

    Raises
    ------
    InputError
        A file that cannot be read as JSON or is not a complete report (one line naming it).
    UsageError
        No report given.
    """
    if not runs:
        raise UsageError("give at least one report (RUN.json)")
    loaded = []
    for number, run in enumerate(runs):
        if isinstance(run, dict):
            name = f"report {number + 1}"
            report = run
        else:
            name = os.fspath(run)
            try:
                with open(name) as handle:
                    report = json.load(handle)
            except (OSError, ValueError) as error:
                raise InputError(f"{name}: not a readable JSON report ({error})") from None
        loaded.append((name, check_report(report, name)))
    return loaded


def _layout_key(report):
    source = report["input"]
    return (source["format"], source["layout"], str(source.get("chunks")), str(source.get("compression")),
            str(source.get("compression_opts")), str(source.get("shuffle")), str(source.get("scaleoffset")),
            str(source.get("dtype")), str(source.get("particles_group")), str(source.get("parts")),
            tuple(f["size"] for f in source["files"]))


def _atoms_key(report):
    atoms = report["analysis"]["atoms"]
    return ((atoms["fit"]["n"], atoms["fit"]["sha256"]),
            tuple((group["n"], group["sha256"]) for group in atoms["groups"]))


def _reference_key(report):
    reference = report["analysis"]["reference"]
    if reference.get("kind") == "file":
        return ("file", reference.get("size"))
    return ("frame", reference.get("frame"))


def _frames_key(report):
    frames = report["analysis"]["frames"]
    return (frames.get("n"), frames.get("sha256"))


#: What must be equal: (what, key function). Layout comparisons let the input differ.
_WORK = (
    ("engine", lambda r: r["engine"]),
    ("compute load", lambda r: r["compute_load"]),
    ("block size (--block-frames)", lambda r: r["block_frames"]),
    ("topology (atoms, file size)", lambda r: (r["topology"].get("n_atoms"), r["topology"].get("size"))),
    ("atoms (fit and RMSD groups)", _atoms_key),
    ("weights", lambda r: r["analysis"]["weights"]),
    ("reference", _reference_key),
    ("frames analysed", _frames_key),
    ("trajectory frames and atoms", lambda r: (r["n_frames"], r["input"]["n_atoms"])),
)
_INPUT = (("input file content (sizes, format, layout)", _layout_key),)

#: What may differ, with a warning.
_FLAGGED = (
    ("input path", lambda r: r["input"]["path"]),
    ("input modification time", lambda r: tuple(f.get("mtime") for f in r["input"]["files"])),
    ("topology path or modification time", lambda r: (r["topology"].get("path"), r["topology"].get("mtime"))),
)


def _readable(value):
    """A compared value as people read it (no JSON quoting or escapes)."""
    if isinstance(value, (list, tuple)):
        return ", ".join(_readable(item) for item in value)
    return "none" if value is None else str(value)


def _compare(loaded, rules, refuse):
    """Refuse (InputError) or list (warnings) the rules on which the reports differ."""
    warnings = []
    for what, key in rules:
        values = {}
        for name, report in loaded:
            value = key(report)
            values.setdefault(json.dumps(value, default=str, sort_keys=True), (value, []))[1].append(name)
        if len(values) > 1:
            groups = "; ".join(f"{', '.join(names)}: {_readable(value)}" for value, names in values.values())
            if refuse:
                raise InputError(f"the reports differ in {what} ({groups}); compare like with like")
            warnings.append(f"the reports differ in {what} ({groups})")
    return warnings


def _version_differences(loaded):
    """A warning naming each piece of software whose version differs between the reports.

    Only reports that record a piece are compared on it: a serial run records no MPI
    library and no mpi4py (it never starts MPI), which is no difference from MPI runs.
    """
    recorded = [(name, report.get("provenance", {}).get("versions") or {}) for name, report in loaded]
    differing = []
    for package in sorted({package for _, versions in recorded for package in versions}):
        seen = {}
        for name, versions in recorded:
            if package in versions:
                seen.setdefault(str(versions[package]), []).append(name)
        if len(seen) > 1:
            differing.append(f"{package} " + " / ".join(f"{value} ({', '.join(names)})" for value, names in seen.items()))
    return [f"the reports differ in software versions: {'; '.join(differing)}"] if differing else []


def _best_runs(reports):
    """Per rank count, the fastest run over all repeats of all *reports*."""
    by_ranks = {}
    for report in reports:
        by_ranks.setdefault(report["n_ranks"], []).extend(report["runs"])
    return {n: min(runs, key=lambda run: run["t_total"]) for n, runs in sorted(by_ranks.items())}


def _row(n_ranks, run):
    ranks = run["ranks"]
    row = {"n_ranks": n_ranks, "t_total": run["t_total"], "max_work": max(work(r) for r in ranks)}
    for phase in PHASES:
        row[phase] = statistics.fmean(r[phase] for r in ranks)
    stragglers = run.get("stragglers") or {}
    row["stragglers"] = sorted(set(stragglers.get("over_1.5x_median", [])) | set(stragglers.get("over_2x_fastest", [])))
    bytes_read = [r.get("bytes_read") for r in ranks]
    row["bytes_read"] = sum(bytes_read) if all(isinstance(b, (int, float)) for b in bytes_read) else None
    return row


def _scale(rows):
    """Add S(N) and E(N) to *rows*; return the baseline (measured: a 1-rank run)."""
    base = rows[0]
    measured = base["n_ranks"] == 1
    for row in rows:
        row["speedup"] = base["t_total"] * base["n_ranks"] / row["t_total"]
        row["efficiency"] = row["speedup"] / row["n_ranks"]
        row["baseline_measured"] = measured
    return {"n_ranks": base["n_ranks"], "t_total": base["t_total"], "measured": measured}


def _context(report):
    analysis, source = report["analysis"], report["input"]
    return {
        "input": source["path"], "format": source["format"], "layout": source["layout"],
        "engine": report["engine"], "select": analysis.get("select"),
        "n_selected": analysis["atoms"]["fit"]["n"], "groups": [g["label"] for g in analysis["atoms"]["groups"]],
        "weights": analysis["weights"], "n_frames": analysis["frames"]["n"], "compute_load": report["compute_load"],
    }


def scaling(loaded):
    """Scaling table of one input at several rank counts (see the module docstring)."""
    _compare(loaded, _WORK + _INPUT, refuse=True)
    warnings = _compare(loaded, _FLAGGED, refuse=False) + _version_differences(loaded)
    rows = [_row(n, run) for n, run in _best_runs([r for _, r in loaded]).items()]
    baseline = _scale(rows)
    return {"mode": "scaling", "context": _context(loaded[0][1]), "baseline": baseline, "rows": rows,
            "warnings": warnings, "reports": [name for name, _ in loaded]}


def _label(report, clashes):
    source = report["input"]
    name = source["path"] if clashes else os.path.basename(source["path"])
    if source.get("kind") == "H5MD":
        detail = source["layout"] if not source.get("chunks") else "chunks " + "x".join(map(str, source["chunks"]))
        if source.get("compression"):
            detail += f", {source['compression']}"
    elif source.get("kind") == "split":
        detail = f"{source.get('parts')} {source['format']} parts"
    else:
        detail = source["format"]
    return f"{name} ({detail})"


def layouts(loaded):
    """Several inputs side by side at each rank count (see the module docstring)."""
    _compare(loaded, _WORK, refuse=True)
    warnings = _compare(loaded, _FLAGGED[2:], refuse=False) + _version_differences(loaded)
    inputs = {}
    for name, report in loaded:
        inputs.setdefault((report["input"]["path"], _layout_key(report)), []).append(report)
    if len(inputs) < 2:
        raise InputError("--layouts compares several inputs; these reports all measure one "
                         "(leave out --layouts for its scaling table)")
    basenames = [os.path.basename(path) for path, _ in inputs]
    columns = []
    for (path, _), reports in inputs.items():
        rows = [_row(n, run) for n, run in _best_runs(reports).items()]
        baseline = _scale(rows)
        label = _label(reports[0], basenames.count(os.path.basename(path)) > 1)
        columns.append({"label": label, "input": path, "kind": reports[0]["input"]["kind"],
                        "layout": {k: v for k, v in reports[0]["input"].items() if k not in ("files", "paths")},
                        "baseline": baseline, "rows": {row["n_ranks"]: row for row in rows}})
    rank_counts = sorted({n for column in columns for n in column["rows"]})
    rows = []
    for n in rank_counts:
        present = [c for c in columns if n in c["rows"]]
        fastest = min(present, key=lambda c: c["rows"][n]["t_total"])
        rows.append({"n_ranks": n, "fastest": fastest["label"],
                     "by_input": {c["label"]: c["rows"][n] for c in present}})
    return {"mode": "layouts", "context": _context(loaded[0][1]), "inputs": columns, "rows": rows,
            "warnings": warnings, "reports": [name for name, _ in loaded]}


def bench_report(runs, layouts_mode=False):
    """Combine ``bench rmsd`` reports: a scaling table, or inputs side by side.

    Parameters
    ----------
    runs : sequence of str or dict
        Paths of reports written by ``h5mdtool bench rmsd --out``, or report dicts
        (``bench_rmsd(...)["report"]``).
    layouts_mode : bool
        Compare several inputs at the same rank counts (Jakupovic & Beckstein 2021's table) instead of one
        input's scaling.

    Returns
    -------
    dict
        ``mode``, ``context`` (input, engine, selection, weights, frames), ``warnings`` and,
        for scaling, ``baseline`` and ``rows`` (per rank count: ``t_total``, mean phases,
        ``max_work``, ``stragglers``, ``speedup``, ``efficiency``, ``baseline_measured``);
        for layouts, ``inputs`` (each with its own baseline and rows) and ``rows`` (per rank
        count, every input's row and the ``fastest``).

    Raises
    ------
    InputError
        A report that cannot be read or is incomplete (one line naming the file).
    UsageError
        Reports that cannot be compared, naming what differs.
    """
    loaded = load_reports(runs)
    return layouts(loaded) if layouts_mode else scaling(loaded)

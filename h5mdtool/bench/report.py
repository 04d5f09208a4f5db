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

The data must be the same too (:mod:`h5mdtool.bench.digest`): reports of one input must
record the same digest of sampled frames (and of a split's part checksums) and the same
RMSDs at those frames (within :data:`RESULTS_TOLERANCE`); inputs compared side by side
(``--layouts``) must give the same RMSDs there within :data:`LAYOUTS_TOLERANCE`, the
differences lossy layouts make. Reports written before the digests (version 2) are
compared without them, with a warning.

Runs are compared like with like: the first run of each report includes start-up (imports)
the later ones do not, so with reports of different ``--repeat`` every report contributes
the best of its first R runs, R the smallest ``--repeat`` among them (``runs_compared``).
"""

import json
import os
import statistics

import numpy as np

from ..parallel.errors import InputError, UsageError
from .timing import PHASES, work

#: The report layouts this module reads (``bench rmsd`` writes the last as ``report_version``).
REPORT_VERSIONS = (2, 3)

#: RMSDs (Angstrom) of reports of one input must agree to this at the sampled frames.
RESULTS_TOLERANCE = 1e-4
#: ... and of inputs compared side by side (``--layouts``): a layout rounding positions to
#: 0.01 nm (``--precision 0.01``) moves an RMSD by up to about 0.09 A.
LAYOUTS_TOLERANCE = 0.1

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
    if report.get("report_version") not in REPORT_VERSIONS:
        raise InputError(f"{name}: report_version {report.get('report_version')!r}, this h5mdtool reads "
                         f"{' and '.join(map(str, REPORT_VERSIONS))}: run 'h5mdtool bench rmsd --out' again")
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
    if report["report_version"] >= 3:
        for key, fields in (("data", ("bytes", "part_checksums", "sample_frames", "sample_positions")),
                            ("results", ("sample_frames", "sample"))):
            if not isinstance(report.get(key), dict):
                raise _missing(name, "the report", key)
            for field in fields:
                if field not in report[key]:
                    raise _missing(name, key, field)
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


def _runs_by_ranks(reports, count=None):
    """Per rank count, the first *count* runs (repeats; all by default) of every one of *reports*."""
    by_ranks = {}
    for report in reports:
        by_ranks.setdefault(report["n_ranks"], []).extend(report["runs"][:count])
    return by_ranks


def _data_key(report):
    data = report["data"]
    return (data["bytes"], data["part_checksums"], data["sample_frames"], data["sample_positions"])


def _digested(loaded):
    """The reports that record digests, and a warning naming those that do not."""
    digested = [(name, report) for name, report in loaded if "data" in report]
    older = [name for name, report in loaded if "data" not in report]
    warnings = []
    if older:
        warnings.append(f"{', '.join(older)} record{'s' if len(older) == 1 else ''} no digest of the data read "
                        "(report_version 2): their data could not be compared with the others'")
    return digested, warnings


def _check_results(loaded, tolerance, what):
    """Refuse reports whose RMSDs at the sampled frames differ by more than *tolerance* (A)."""
    name, first = loaded[0]
    for other_name, other in loaded[1:]:
        a, b = first["results"], other["results"]
        if a["sample_frames"] != b["sample_frames"] or np.shape(a["sample"]) != np.shape(b["sample"]):
            raise UsageError(f"the reports differ in the frames their results were sampled at ({name}, {other_name})")
        difference = np.abs(np.asarray(a["sample"], float) - np.asarray(b["sample"], float))
        if not np.all(difference <= tolerance):
            row = int(np.argmax(np.where(np.isnan(difference), np.inf, difference).max(axis=1)))
            raise UsageError(
                f"the reports measured different data: at frame {a['sample_frames'][row]} {name} gives an RMSD of "
                f"{a['sample'][row][0]:.4f} A, {other_name} {b['sample'][row][0]:.4f} A (more than {tolerance:g} A "
                f"apart{what}); compare like with like")


def _check_data(loaded):
    """Reports of one input: the same data (digests) and the same results; returns warnings."""
    digested, warnings = _digested(loaded)
    if len(digested) > 1:
        values = {}
        for name, report in digested:
            values.setdefault(json.dumps(_data_key(report)), []).append(name)
        if len(values) > 1:
            groups = "; ".join(", ".join(names) for names in values.values())
            raise UsageError(f"the reports read different data (digests of sampled frames or part checksums "
                             f"differ: {groups}); compare like with like")
        _check_results(digested, RESULTS_TOLERANCE, "")
    return warnings


def runs_compared(reports):
    """How many runs of each report are compared: the smallest ``--repeat`` among them."""
    return min(len(report["runs"]) for report in reports)


def _best_runs(reports, count):
    """Per rank count, the fastest of the first *count* runs of every one of *reports*."""
    return {n: min(runs, key=lambda run: run["t_total"]) for n, runs in sorted(_runs_by_ranks(reports, count).items())}


def _repeat_warnings(reports, count):
    repeats = sorted({len(report["runs"]) for report in reports})
    if len(repeats) == 1:
        return []
    return [f"the reports ran --repeat {' and '.join(map(str, repeats))}: each is compared on the best of its first "
            f"{count} run{'s' if count > 1 else ''} (the first run includes start-up the later ones do not)"]


def _row(n_ranks, run):
    ranks = run["ranks"]
    row = {"n_ranks": n_ranks, "t_total": run["t_total"], "max_work": max(work(r) for r in ranks),
           "t_serial": run.get("t_serial")}
    for phase in PHASES:
        row[phase] = statistics.fmean(r[phase] for r in ranks)
    stragglers = run.get("stragglers") or {}
    row["stragglers"] = sorted(set(stragglers.get("over_1.5x_median", [])) | set(stragglers.get("over_2x_fastest", [])))
    bytes_read = [r.get("bytes_read") for r in ranks]
    row["bytes_read"] = sum(bytes_read) if all(isinstance(b, (int, float)) for b in bytes_read) else None
    return row


def _scale(rows):
    """Add S(N), E(N) and the parallel part's efficiency to *rows*; return the baseline
    (measured: a 1-rank run) with its serial fraction.

    Amdahl's split of a run: its serial part ``t_serial`` (rank 0 alone, measured in every
    run) and the rest, the parallel part. The parallel part's efficiency at N ranks is
    ``(t(1) - t_serial(1)) / (N (t(N) - t_serial(N)))`` against the baseline; None where a
    report records no serial part (report_version 2).
    """
    base = rows[0]
    measured = base["n_ranks"] == 1
    for row in rows:
        row["speedup"] = base["t_total"] * base["n_ranks"] / row["t_total"]
        row["efficiency"] = row["speedup"] / row["n_ranks"]
        row["baseline_measured"] = measured
        row["parallel_efficiency"] = None
        if base["t_serial"] is not None and row["t_serial"] is not None and row["t_total"] > row["t_serial"]:
            row["parallel_efficiency"] = ((base["t_total"] - base["t_serial"]) * base["n_ranks"]
                                          / (row["n_ranks"] * (row["t_total"] - row["t_serial"])))
    fraction = base["t_serial"] / base["t_total"] if base["t_serial"] is not None and base["t_total"] > 0 else None
    return {"n_ranks": base["n_ranks"], "t_total": base["t_total"], "measured": measured, "serial_fraction": fraction}


def _context(report):
    analysis, source = report["analysis"], report["input"]
    return {
        "input": source["path"], "format": source["format"], "layout": source["layout"],
        "engine": report["engine"], "select": analysis.get("select"),
        "n_selected": analysis["atoms"]["fit"]["n"], "groups": [g["label"] for g in analysis["atoms"]["groups"]],
        "weights": analysis["weights"], "n_frames": analysis["frames"]["n"], "compute_load": report["compute_load"],
    }


def scaling(loaded, model_ranks=None):
    """Scaling table of one input at several rank counts (see the module docstring), and
    with *model_ranks* the scaling model's prediction for that many ranks (:mod:`.model`)."""
    _compare(loaded, _WORK + _INPUT, refuse=True)
    warnings = _check_data(loaded) + _compare(loaded, _FLAGGED, refuse=False) + _version_differences(loaded)
    reports = [r for _, r in loaded]
    count = runs_compared(reports)
    warnings += _repeat_warnings(reports, count)
    rows = [_row(n, run) for n, run in _best_runs(reports, count).items()]
    baseline = _scale(rows)
    result = {"mode": "scaling", "context": _context(loaded[0][1]), "baseline": baseline, "rows": rows,
              "runs_compared": count, "warnings": warnings, "reports": [name for name, _ in loaded]}
    if model_ranks is not None:
        from .model import model

        result["model"] = model(_runs_by_ranks(reports, count), model_ranks)
    return result


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
    inputs, named = {}, {}
    for name, report in loaded:
        key = (report["input"]["path"], _layout_key(report))
        inputs.setdefault(key, []).append(report)
        named.setdefault(key, []).append((name, report))
    if len(inputs) < 2:
        raise InputError("--layouts compares several inputs; these reports all measure one "
                         "(leave out --layouts for its scaling table)")
    for group in named.values():  # the reports of each input: the same data
        warnings += _check_data(group)
    _check_results(_digested([group[0] for group in named.values()])[0], LAYOUTS_TOLERANCE,
                   ", more than a lossy layout moves it")
    count = runs_compared([r for _, r in loaded])
    warnings += _repeat_warnings([r for _, r in loaded], count)
    basenames = [os.path.basename(path) for path, _ in inputs]
    columns = []
    for (path, _), reports in inputs.items():
        rows = [_row(n, run) for n, run in _best_runs(reports, count).items()]
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
            "runs_compared": count, "warnings": warnings, "reports": [name for name, _ in loaded]}


def bench_report(runs, layouts_mode=False, model_ranks=None):
    """Combine ``bench rmsd`` reports: a scaling table, or inputs side by side.

    Parameters
    ----------
    runs : sequence of str or dict
        Paths of reports written by ``h5mdtool bench rmsd --out``, or report dicts
        (``bench_rmsd(...)["report"]``).
    layouts_mode : bool
        Compare several inputs at the same rank counts (Jakupovic & Beckstein 2021's table) instead of one
        input's scaling.
    model_ranks : int, optional
        Scaling mode: also predict t(N), S(N) and E(N) at this rank count from the 1-rank
        run and the next rank count's (:mod:`h5mdtool.bench.model`), as ``model``.

    Returns
    -------
    dict
        ``mode``, ``context`` (input, engine, selection, weights, frames), ``warnings``,
        ``runs_compared`` (the first R runs of each report, R the smallest ``--repeat``) and,
        for scaling, ``baseline`` and ``rows`` (per rank count: ``t_total``, mean phases,
        ``max_work``, ``stragglers``, ``speedup``, ``efficiency``, ``baseline_measured``);
        for layouts, ``inputs`` (each with its own baseline and rows) and ``rows`` (per rank
        count, every input's row and the ``fastest``).

    Raises
    ------
    InputError
        A report that cannot be read or is incomplete (one line naming the file).
    UsageError
        Reports that cannot be compared, naming what differs: the work, or the data (digests
        of sampled frames, part checksums, RMSDs at the sampled frames).
    """
    loaded = load_reports(runs)
    if layouts_mode and model_ranks is not None:
        raise UsageError("--model predicts one input's scaling: leave out --layouts")
    return layouts(loaded) if layouts_mode else scaling(loaded, model_ranks)

"""``h5mdtool bench rmsd``: the papers' parallel RMSD benchmark, timed per rank.

Split-apply-combine as in paper 000 (sections 3 and 5) and paper 004: rank 0 loads the
topology and broadcasts the selected atoms, every rank opens the trajectory, computes the
C-alpha RMSD of a balanced contiguous block of frames to a reference frame after optimal
superposition, waits at a barrier (the straggler signal), and the results are gathered on
rank 0 with ``Gatherv`` (balanced blocks, no padding). With the default engine, blocks of
frames are read at once (:mod:`h5mdtool.frames`) and superposed with the batched kernel of
:mod:`h5mdtool.rmsd`; memory is bounded by ``block_frames``. ``bench report`` combines
reports made at several rank counts (:func:`bench_report`).

Inputs: an H5MD file (MPI-IO with several ranks), an XTC/TRR/DCD file (rank 0 computes the
offsets and broadcasts them; nothing is written beside the input), or a split
``manifest.json`` (each rank opens only the parts holding its frames).
"""

import json
import os
import socket
import statistics
import time

import numpy as np

from .errors import InputError, UsageError, mark_collective
from .frames import atom_count_error, open_frames, open_mdanalysis
from .mpi import abort_unless_collective, balanced_slices, entry_point, root_call
from .rmsd import rmsd_to_reference

#: Compute-to-I/O ratio from which paper 000's Heuristic 1 applies (its text lost the symbol
#: of the threshold, "much larger than 1"; its compute-bound workloads had ratios of 11, 19
#: and 27, the plain RMSD task about 0.3).
COMPUTE_BOUND_RATIO = 10.0


def gather_rows(comm, rows, counts):
    """Gather each rank's ``(k, m)`` float64 rows on rank 0 with ``Gatherv`` (no padding)."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    if comm.size == 1:
        return rows.copy()
    from mpi4py import MPI

    width = rows.shape[1]
    sizes = np.asarray(counts) * width
    displacements = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    result = np.empty((int(sum(counts)), width), np.float64) if comm.rank == 0 else None
    comm.Gatherv(rows, [result, sizes, displacements, MPI.DOUBLE] if comm.rank == 0 else None, root=0)
    return result


def stragglers(totals):
    """Ranks slower than 1.5x the median total (paper 000) and over 2x the fastest."""
    totals = list(totals)
    median = statistics.median(totals)
    fastest = min(totals)
    return {
        "median_total": median,
        "over_1.5x_median": [r for r, t in enumerate(totals) if t > 1.5 * median],
        "over_2x_fastest": [r for r, t in enumerate(totals) if t > 2 * fastest],
    }


def input_kind(description):
    """``"H5MD"``, ``"split"`` or ``"shared"`` (one XTC/TRR/DCD file) from a source's description."""
    if description.get("layout") == "split":
        return "split"
    return "H5MD" if description.get("format") == "H5MD" else "shared"


def advice(ratio, kind=None):
    """Paper 000's guidance (section 8) for a compute-to-I/O ratio, for this kind of input.

    Parameters
    ----------
    ratio : float or None
        Sum of compute time over sum of I/O time.
    kind : {"H5MD", "split", "shared", None}
        What was read (see :func:`input_kind`); None gives the general advice.
    """
    if ratio is None:
        return "no I/O time measured"
    if ratio >= COMPUTE_BOUND_RATIO:
        return (
            f"compute-bound (compute/I-O = {ratio:.1f}): one shared trajectory file can be used, "
            "with reasonable scaling to about 50 cores (paper 000, Heuristic 1); beyond that "
            "read H5MD with MPI-IO or split the trajectory (Heuristic 2)"
        )
    bound = f"I/O-bound (compute/I-O = {ratio:.2f}): "
    if kind == "H5MD":
        return bound + (
            "this input is already H5MD, the paper's best option: read with MPI-IO through "
            "parallel HDF5 it scaled to hundreds of cores (paper 000, Heuristic 2.1). If t_io "
            "stops falling as ranks are added, check the layout ('h5mdtool info', 'h5mdtool "
            "validate': one-frame chunks, stripe count; gzip costs decompression on every rank)"
        )
    if kind == "split":
        return bound + (
            "this input is already split into parts (paper 000, Heuristic 2.2: reasonable "
            "scaling to under 200 cores); to go further, convert it to H5MD ('h5mdtool "
            "convert') and read it with MPI-IO (Heuristic 2.1: hundreds of cores)"
        )
    return bound + (
        "avoid one shared trajectory file: convert it to H5MD ('h5mdtool convert') and read "
        "it with MPI-IO through parallel HDF5 (paper 000, Heuristic 2.1: scales to hundreds "
        "of cores), or split it into one file per rank ('h5mdtool split', Heuristic 2.2: "
        "to under 200 cores)"
    )


def block_edges(start, stop, block_frames, chunk_frames=1):
    """Blocks ``[(a, b), ...]`` tiling frames ``[start, stop)``.

    With chunks of several frames, blocks are whole multiples of the chunk (at least one
    chunk, even when that is more than *block_frames*) and end on chunk boundaries, so no
    chunk is read, or decompressed, twice.
    """
    if chunk_frames > 1:
        step = max(1, block_frames // chunk_frames) * chunk_frames
        edges = list(range((start // step + 1) * step, stop, step))
        bounds = [start, *edges, stop]
    else:
        bounds = [*range(start, stop, block_frames), stop]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _select(topology, selection):
    from .convert import load_topology, pick_atoms

    universe = load_topology(topology)
    return len(universe.atoms), pick_atoms(universe, selection, topology)


def _run_once(path, topology, selection, ref_frame, block_frames, comm, engine="blocks"):
    """One timed run on every rank.

    Returns (rmsd rows on rank 0, this rank's record, the closed source, selected atoms).
    """
    started = time.perf_counter()
    n_top_atoms, atom_indices = root_call(comm, _select, topology, selection)
    t_init_top = time.perf_counter() - started
    mark = time.perf_counter()
    if engine == "frames":
        frames = open_mdanalysis(path, topology, selection, comm, n_top_atoms)
    else:
        frames = open_frames(path, atom_indices, block_frames, comm)
    t_init_traj = time.perf_counter() - mark
    try:
        if frames.n_atoms != n_top_atoms:
            raise mark_collective(atom_count_error(topology, n_top_atoms, path, frames.n_atoms))
        if not -frames.n_frames <= ref_frame < frames.n_frames:
            raise mark_collective(UsageError(f"--ref-frame {ref_frame} is outside the {frames.n_frames} frames"))
        ref = ref_frame % frames.n_frames
        reference = None
        if comm.rank == 0:  # a copy: sources return views of buffers they reuse
            reference = np.array(frames.read(ref, ref + 1)[0][0], dtype=np.float64)
        reference = comm.bcast(reference, root=0)
        slices = balanced_slices(frames.n_frames, comm.size)
        start, stop = slices[comm.rank]
        results = np.empty((stop - start, 3), np.float64)
        results[:, 0] = np.arange(start, stop)
        t_io = t_compute = 0.0
        if engine == "frames":
            from MDAnalysis.analysis.rms import rmsd as mda_rmsd

            for number in range(start, stop):
                mark = time.perf_counter()
                positions, frame_time = frames.frame(number)
                t_io += time.perf_counter() - mark
                mark = time.perf_counter()
                results[number - start, 1:] = frame_time, mda_rmsd(positions, reference, center=True, superposition=True)
                t_compute += time.perf_counter() - mark
        else:
            for first, last in block_edges(start, stop, block_frames, frames.chunk_frames):
                mark = time.perf_counter()
                positions, times = frames.read(first, last)
                t_io += time.perf_counter() - mark
                mark = time.perf_counter()
                rows = slice(first - start, last - start)
                results[rows, 1] = times
                results[rows, 2] = rmsd_to_reference(positions, reference)
                t_compute += time.perf_counter() - mark
            results[:, 2] *= frames.scale
        mark = time.perf_counter()
        comm.Barrier()
        t_wait = time.perf_counter() - mark
    except BaseException as error:
        # closing an MPI-IO file is collective: a rank that failed alone must not try it
        abort_unless_collective(comm, error)
        frames.close()
        raise
    frames.close()
    mark = time.perf_counter()
    gathered = gather_rows(comm, results, [b - a for a, b in slices])
    t_comm = time.perf_counter() - mark
    record = {
        "rank": comm.rank, "host": socket.gethostname(), "start": start, "stop": stop,
        "n_frames": stop - start, "t_init_top": t_init_top, "t_init_traj": t_init_traj,
        "t_io": t_io, "t_compute": t_compute, "t_wait": t_wait, "t_comm": t_comm,
        "t_total": time.perf_counter() - started, "opened": frames.opened,
    }
    return gathered, record, frames, len(atom_indices)


def summarise(records, kind=None):
    """One run's summary from its per-rank records (rank order): totals, stragglers, ratios.

    Returns
    -------
    dict
        ``t_total`` (the slowest rank), ``ranks``, ``stragglers``, ``ratio_compute_io`` (sum
        of compute over sum of I/O, paper 000's Eq. 7, None without I/O time),
        ``ratio_compute_comm`` (sum of compute over sum of communication, its Eq. 8) and
        ``advice`` for that ratio and *kind* of input.
    """
    totals = [r["t_total"] for r in records]
    io, compute = sum(r["t_io"] for r in records), sum(r["t_compute"] for r in records)
    comm_time = sum(r["t_comm"] for r in records)
    ratio = compute / io if io > 0 else None
    return {
        "t_total": max(totals), "ranks": records, "stragglers": stragglers(totals),
        "ratio_compute_io": ratio, "ratio_compute_comm": compute / comm_time if comm_time > 0 else None,
        "advice": advice(ratio, kind),
    }


@entry_point
def bench_rmsd(path, topology, *, comm=None, select="name CA", ref_frame=0, block_frames=1024,
               repeat=1, engine="blocks"):
    """Run the parallel RMSD benchmark on *path* and return the report (rank 0; None elsewhere).

    Parameters
    ----------
    path : str
        H5MD, XTC, TRR or DCD file, or a split ``manifest.json``.
    topology : str
        Topology read by MDAnalysis (its atom count must match the trajectory).
    comm : mpi4py communicator, optional
    select : str
        MDAnalysis selection of the atoms to superpose (default ``name CA``).
    ref_frame : int
        Reference frame (default 0; negative counts from the end).
    block_frames : int
        Frames read and superposed at once per rank (memory bound); for H5MD files chunked
        by several frames, rounded down to whole chunks (at least one).
    repeat : int
        Number of runs; each gets its own per-rank records.
    engine : {"blocks", "frames"}
        ``blocks``: blocks of frames and the batched kernel; ``frames``: MDAnalysis Universes
        iterated frame by frame, each load timed as I/O and each ``rms.rmsd`` call as compute.

    Returns
    -------
    dict or None
        On rank 0: ``rmsd`` (array (n_frames, 3): frame, time in ps, RMSD in Angstrom, as
        MDAnalysis's ``rms.RMSD``) and ``report`` (JSON-ready: the best run's per-rank
        records, ``t_total``, stragglers, compute/I-O ratio and advice at the top level, and
        every repeat under ``runs``).

    Raises
    ------
    UsageError
        Bad options.
    InputError
        Missing or unreadable input, parts or topology; a selection matching nothing;
        atom counts that differ. Every rank raises it together.
    """
    if block_frames < 1 or repeat < 1:
        raise mark_collective(UsageError("--block-frames and --repeat must be at least 1"))
    if engine not in ("blocks", "frames"):
        raise mark_collective(UsageError(f"--engine must be blocks or frames, got {engine!r}"))
    runs, rmsd = [], None
    for number in range(repeat):
        rmsd, record, frames, n_selected = _run_once(path, topology, select, ref_frame, block_frames, comm, engine)
        records = comm.gather(record, root=0)
        if comm.rank == 0:
            description = frames.describe()
            runs.append({"repeat": number, **summarise(records, input_kind(description))})
    if comm.rank != 0:
        return None
    best = min(runs, key=lambda run: run["t_total"])
    report = {
        "benchmark": "rmsd", "engine": engine, "n_ranks": comm.size, "n_frames": frames.n_frames,
        "input": {"path": os.path.abspath(path), **description},
        "topology": os.path.abspath(topology), "select": select, "n_selected": n_selected,
        "ref_frame": ref_frame, "block_frames": block_frames, "best_repeat": best["repeat"],
        **{key: best[key] for key in ("t_total", "ranks", "stragglers", "ratio_compute_io", "ratio_compute_comm", "advice")},
        "runs": runs,
    }
    return {"rmsd": rmsd, "report": report}


def combine_reports(reports):
    """Scaling table from ``bench rmsd`` reports of one input at several rank counts.

    Each row: ``n_ranks``, ``t_total`` (the fastest run at that rank count, over repeats and
    reports), the mean of every phase over ranks,
    ``speedup`` = t(baseline) * N_baseline / t(N) with the smallest rank count as baseline
    (the usual S(N) = t1/tN when a 1-rank run is included), and ``efficiency`` = S / N.

    Raises
    ------
    UsageError
        If no report is given, they are not ``bench rmsd`` reports, or they differ in input,
        engine, selection, frame count or reference frame.
    """
    from .plots import PHASES

    if not reports:
        raise UsageError("give at least one report (RUN.json)")
    inputs = {report.get("input", {}).get("path") for report in reports}
    if any(report.get("benchmark") != "rmsd" for report in reports):
        raise UsageError("only reports written by 'h5mdtool bench rmsd --out' can be combined")
    if len(inputs) != 1:
        raise UsageError(f"the reports measure different inputs: {', '.join(sorted(map(str, inputs)))}")
    for key in ("engine", "select", "n_frames", "ref_frame"):
        values = {str(report.get(key)) for report in reports}
        if len(values) != 1:
            raise UsageError(f"the reports differ in {key} ({', '.join(sorted(values))}); compare like with like")
    by_ranks = {}
    for report in reports:  # several reports at one rank count: their runs are pooled
        by_ranks.setdefault(report["n_ranks"], []).extend(report["runs"])
    rows = []
    for n_ranks in sorted(by_ranks):
        best = min(by_ranks[n_ranks], key=lambda run: run["t_total"])
        row = {"n_ranks": n_ranks, "t_total": best["t_total"], "n_frames": reports[0]["n_frames"]}
        for phase in PHASES:
            row[phase] = statistics.fmean(r[phase] for r in best["ranks"])
        rows.append(row)
    base = rows[0]
    for row in rows:
        row["speedup"] = base["t_total"] * base["n_ranks"] / row["t_total"]
        row["efficiency"] = row["speedup"] / row["n_ranks"]
    return rows


def bench_report(runs):
    """Scaling table (speed-up, efficiency, per-phase times) from ``bench rmsd`` reports.

    Parameters
    ----------
    runs : sequence of str or dict
        Paths of reports written by ``h5mdtool bench rmsd --out``, or the report dicts
        (``bench_rmsd(...)["report"]``), of one input at several rank counts.

    Returns
    -------
    list of dict
        One row per rank count, see :func:`combine_reports`.

    Raises
    ------
    InputError
        If a report file cannot be read as JSON.
    UsageError
        If the reports cannot be compared (see :func:`combine_reports`).
    """
    reports = []
    for run in runs:
        if isinstance(run, dict):
            reports.append(run)
            continue
        try:
            with open(run) as handle:
                reports.append(json.load(handle))
        except (OSError, ValueError) as error:
            raise InputError(f"{run}: not a readable JSON report ({error})") from None
    return combine_reports(reports)

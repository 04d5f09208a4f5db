"""``h5mdtool bench rmsd``: the papers' parallel RMSD benchmark, timed per rank.

Split-apply-combine as in Khoshlessan et al. 2020 (sections 3 and 5) and Jakupovic & Beckstein 2021. Each run:

1. rank 0 inspects the input (format, frame count, XTC/TRR offsets, parts) and broadcasts
   it (:mod:`h5mdtool.bench.inputs`);
2. rank 0 resolves the analysis (topology, selections, weights, reference, frames) and
   broadcasts it (:mod:`h5mdtool.bench.analysis`);
3. the frames are divided following the input's layout (:mod:`h5mdtool.bench.partition`); every
   rank opens the trajectory and computes the RMSDs of its frames
   (:mod:`h5mdtool.bench.engines`);
4. a barrier (the straggler signal), then ``Gatherv`` of the results to rank 0.

Every second of each rank's run is charged to one phase (:mod:`h5mdtool.bench.timing`), so the
per-rank table adds up and stragglers are judged on the work each rank did before waiting.
``bench report`` (:mod:`h5mdtool.bench.report`) combines reports of several runs.
"""

import datetime
import os
import socket

import numpy as np

from ..parallel.errors import UsageError, mark_collective
from ..parallel.mpi import abort_unless_collective, agree, capture_errors, entry_point, root_call
from ..parallel.progress import BAR, JobShare, progress_bar, progress_mode
from .analysis import AnalysisOptions, plan_analysis
from .engines import BlocksEngine, FramesEngine
from .inputs import inspect_input, open_source
from .partition import partition_frames
from .timing import PhaseClock, find_stragglers

#: Compute-to-I/O ratio from which Khoshlessan et al. 2020's Heuristic 1 applies (its text lost the symbol
#: of the threshold, "much larger than 1"; its compute-bound workloads had ratios of 11, 19
#: and 27, the plain RMSD task about 0.3).
COMPUTE_BOUND_RATIO = 10.0

#: Version of the report's layout; ``bench report`` reads this one.
REPORT_VERSION = 2

ENGINES = {"blocks": BlocksEngine, "frames": FramesEngine}


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


def advice(ratio, kind=None):
    """Khoshlessan et al. 2020's guidance (section 8) for a compute-to-I/O ratio, for this kind
    of input, citing the paper briefly (in full: ``bench rmsd --help``, docs/references.md).

    Parameters
    ----------
    ratio : float or None
        Sum of compute time over sum of I/O time.
    kind : {"H5MD", "split", "shared", None}
        What was read (:attr:`h5mdtool.bench.inputs.InputInfo.kind`); None gives the
        general advice.
    """
    if ratio is None:
        return "no I/O time measured"
    return _guidance(ratio, kind)


def _guidance(ratio, kind):
    if ratio >= COMPUTE_BOUND_RATIO:
        return (
            f"compute-bound (compute/I-O = {ratio:.1f}): one shared trajectory file can be used, "
            "with reasonable scaling to about 50 cores (Khoshlessan et al. 2020, Heuristic 1); beyond that "
            "read H5MD with MPI-IO or split the trajectory (Heuristic 2)"
        )
    bound = f"I/O-bound (compute/I-O = {ratio:.2f}): "
    if kind == "H5MD":
        return bound + (
            "this input is already H5MD, the paper's best option: read with MPI-IO through "
            "parallel HDF5 it scaled to hundreds of cores (Khoshlessan et al. 2020, Heuristic 2.1). If t_io "
            "stops falling as ranks are added, check the layout ('h5mdtool info', 'h5mdtool "
            "validate': one-frame chunks, stripe count; gzip costs decompression on every rank)"
        )
    if kind == "split":
        return bound + (
            "this input is already split into parts (Khoshlessan et al. 2020, Heuristic 2.2: reasonable "
            "scaling to under 200 cores); to go further, convert it to H5MD ('h5mdtool "
            "convert') and read it with MPI-IO (Heuristic 2.1: hundreds of cores)"
        )
    return bound + (
        "avoid one shared trajectory file: convert it to H5MD ('h5mdtool convert') and read "
        "it with MPI-IO through parallel HDF5 (Khoshlessan et al. 2020, Heuristic 2.1: scales to hundreds "
        "of cores), or split it into one file per rank ('h5mdtool split', Heuristic 2.2: "
        "to under 200 cores)"
    )


def _files_opened(info, source, local, plan, rank, engine):
    """The files this rank opened (paths relative to a manifest's directory)."""
    if info.kind == "shared" and engine == "blocks":  # segments open lazily; the source lists all
        opened = [p.path for p in info.pieces() if np.any((local >= p.start) & (local < p.stop))]
    else:
        opened = list(source.opened)
    if rank == 0:  # the reference (or selection) frame rank 0 read with MDAnalysis
        frame = 0 if plan.description["reference"]["kind"] == "file" else plan.description["reference"]["frame"]
        piece = next(p for p in info.pieces() if p.start <= frame < p.stop)
        path = piece.path if info.manifest is None else os.path.relpath(piece.path, os.path.dirname(info.manifest.path))
        if path not in opened:
            opened.append(path)
    return opened


def _run_once(paths, topology, options, group, block_frames, compute_load, engine, comm, input_format=None,
              progress=None, label="rmsd"):
    """One timed run on every rank: (RMSD rows on rank 0, this rank's record, info, plan, partition)."""
    from ..formats import load_decoders

    clock = PhaseClock()
    if comm.rank == 0:
        import MDAnalysis  # noqa: F401 - its import (0.4 s, the first run only) belongs to the topology
        clock.charge("t_init_top")
    else:
        load_decoders(paths, input_format)  # while rank 0 scans: their first read need not import them
    info = root_call(comm, inspect_input, paths, group, input_format)
    clock.charge("t_init_traj")
    plan, root_phases = root_call(comm, plan_analysis, info, topology, options)
    if comm.rank == 0:
        clock.split(root_phases, rest="t_comm")
    else:  # waiting for rank 0's topology, selections and reference frame
        clock.charge("t_init_top")
    chunk_frames = info.chunk_frames if engine == "blocks" else 1
    partition = partition_frames(plan.frames, comm.size, chunk_frames, info.part_edges())
    first, last = partition.bounds[comm.rank]
    local = plan.frames[first:last]
    block = max(1, min(block_frames, len(local)))  # never a buffer larger than the rank's frames
    source = open_source(info, plan.read_indices, block, comm, engine, topology)
    results = np.empty((len(local), 3 + len(plan.group_columns)), np.float64)
    results[:, 0] = local
    try:
        with capture_errors() as failure:
            if hasattr(source, "open_for"):  # parts, and the frames engine's files: opening is not reading
                source.open_for(local)
        clock.charge("t_init_traj")
        agree(comm, failure[0])  # files no rank can open are reported once, not by every rank
        clock.charge("t_wait")
        with progress_bar(len(plan.frames), label, comm, enabled=progress) as bar:
            ENGINES[engine](source, plan, compute_load).run(local, results, clock, comm.rank, block,
                                                            JobShare(bar, len(plan.frames), len(local)))
        comm.Barrier()
        clock.charge("t_wait")
    except BaseException as error:
        # closing an MPI-IO file is collective: a rank that failed alone must not try it
        abort_unless_collective(comm, error)
        source.close()
        raise
    gathered = gather_rows(comm, results, partition.counts())
    source.close()
    clock.charge("t_comm")
    record = {"rank": comm.rank, "host": socket.gethostname(), "n_frames": len(local),
              "first_frame": int(local[0]) if len(local) else None,
              "last_frame": int(local[-1]) if len(local) else None, **clock.record()}
    span = (int(plan.read_indices[0]), int(plan.read_indices[-1]) + 1)
    read = info.bytes_read(local, *span, whole_frames=engine == "frames")
    if comm.rank == 0:
        reference = plan.description["reference"]
        read += info.bytes_read([0 if reference["kind"] == "file" else reference["frame"]], *span, whole_frames=True)
    opened = _files_opened(info, source, local, plan, comm.rank, engine)
    record.update(bytes_read=read, mb_per_s=read / 1e6 / record["t_io"] if record["t_io"] > 0 else None,
                  files_opened=len(opened), opened=opened)
    return gathered, record, info, plan, partition


def summarise(records, kind=None):
    """One run's summary from its per-rank records (rank order): totals, stragglers, ratios.

    Returns
    -------
    dict
        ``t_total`` (the slowest rank), ``ranks``, ``stragglers`` (judged on each rank's
        work before waiting, :func:`h5mdtool.bench.timing.find_stragglers`), ``ratio_compute_io``
        (sum of compute over sum of I/O, Khoshlessan et al. 2020's Eq. 7, None without I/O time),
        ``ratio_compute_comm`` (its Eq. 8) and ``advice`` for that ratio and *kind* of input.
    """
    io, compute = sum(r["t_io"] for r in records), sum(r["t_compute"] for r in records)
    comm_time = sum(r["t_comm"] for r in records)
    ratio = compute / io if io > 0 else None
    return {
        "t_total": max(r["t_total"] for r in records), "ranks": records, "stragglers": find_stragglers(records),
        "ratio_compute_io": ratio, "ratio_compute_comm": compute / comm_time if comm_time > 0 else None,
        "advice": advice(ratio, kind),
    }


def _provenance(records):
    from ..h5md.provenance import command_line, software_versions

    return {"command": command_line(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "hosts": sorted({r["host"] for r in records}), "versions": software_versions()}


def _topology_record(topology, n_atoms):
    stat = os.stat(topology)
    return {"path": os.path.abspath(topology), "size": stat.st_size, "mtime": stat.st_mtime, "n_atoms": n_atoms}


@entry_point
def bench_rmsd(inputs, topology, *, comm=None, select="name CA", calc_select=(), index=None, weights=None,
               reference=None, ref_frame=None, start=None, stop=None, step=None, begin=None, end=None, dt=None,
               group=None, block_frames=1024, compute_load=1, repeat=1, engine="blocks", format=None, progress=None):
    """Run the parallel RMSD benchmark and return the RMSDs and the report (rank 0; None elsewhere).

    The RMSDs equal MDAnalysis's ``rms.RMSD(u, select=select, groupselections=calc_select,
    weights=weights, reference=..., ref_frame=ref_frame).run(start, stop, step)``.

    Parameters
    ----------
    inputs : str or sequence of str
        An H5MD file, a split manifest (or its directory), or XTC/TRR/DCD segments of one
        trajectory, in order.
    topology : str
        Topology read by MDAnalysis (its atom count must match the trajectory's).
    comm : mpi4py communicator, optional
    select : str
        The fit group: an MDAnalysis selection, or with *index* a group name or number.
    calc_select : sequence of str
        Further RMSD groups, measured after the fit without refitting (MDAnalysis's
        ``groupselections``, the calc group of ``gmx rms``).
    index : str, optional
        GROMACS index file (``.ndx``) whose groups *select* and *calc_select* may name.
    weights : {None, "mass"}
        Mass-weighted fit and RMSD (``gmx rms``'s default, ``-mw``).
    reference : str, optional
        Structure file (PDB, GRO...) holding the reference; default: frame *ref_frame*.
    ref_frame : int, optional
        Reference frame of the trajectory (default 0; negative counts from the end).
    start, stop, step : int, optional
        Frames analysed, as MDAnalysis's ``run(start, stop, step)``.
    begin, end, dt : float, optional
        Frames analysed by time in ps, as ``gmx -b -e -dt`` (not with start/stop/step).
    group : str, optional
        H5MD particle group (default: the first listed, the one MDAnalysis reads).
    format : str, optional
        Read the input segments as this format whatever their extension (``LAMMPS`` for a
        LAMMPS DCD, whose time step is in fs), as ``convert(format=...)``.
    block_frames : int
        Frames read and superposed at once per rank (memory bound; capped at the rank's
        frames); for H5MD files chunked by several frames, whole chunks (at least one).
    compute_load : int
        Repeat each kernel call this many times (Khoshlessan et al. 2020's 40x/70x/100x RMSD loads).
    repeat : int
        Number of runs; each gets its own per-rank records.
    engine : {"blocks", "frames"}
        ``blocks``: blocks of frames and the batched kernel; ``frames``: MDAnalysis
        Universes iterated frame by frame, as the papers did.
    progress : bool, optional
        Progress of each run on rank 0 (frames of the whole job, updated per block); by
        default as :mod:`h5mdtool.parallel.progress` decides (a terminal: a live bar).

    Returns
    -------
    dict or None
        On rank 0: ``rmsd`` (array (n, 3 + groups): frame, time in ps, RMSD of the fit group
        and of each RMSD group in Angstrom, as MDAnalysis's ``results.rmsd``), ``labels`` and
        ``report`` (JSON-ready; see docs/benchmark.md).

    Raises
    ------
    UsageError
        Bad options.
    InputError
        Missing or unreadable input, parts, topology, reference or index; selections that
        match nothing or differ; atom counts that differ. Every rank raises it together.
    """
    if block_frames < 1 or repeat < 1 or compute_load < 1:
        raise mark_collective(UsageError("--block-frames, --compute-load and --repeat must be at least 1"))
    if engine not in ENGINES:
        raise mark_collective(UsageError(f"--engine must be blocks or frames, got {engine!r}"))
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    options = AnalysisOptions(select=select, calc_select=tuple(calc_select), index=index, weights=weights,
                              reference=reference, ref_frame=ref_frame, start=start, stop=stop, step=step,
                              begin=begin, end=end, dt=dt)
    if comm.rank == 0 and progress_mode(progress) == BAR:
        import tqdm  # noqa: F401 - imported before the timed phases, not within one
    runs, rmsd = [], None
    for number in range(repeat):
        label = "rmsd" if repeat == 1 else f"rmsd, run {number + 1} of {repeat}"
        rmsd, record, info, plan, partition = _run_once(paths, topology, options, group, block_frames, compute_load,
                                                        engine, comm, input_format=format, progress=progress,
                                                        label=label)
        records = comm.gather(record, root=0)
        if comm.rank == 0:
            runs.append({"repeat": number, **summarise(records, info.kind)})
    if comm.rank != 0:
        return None
    best = min(runs, key=lambda run: run["t_total"])
    description = plan.description
    report = {
        "benchmark": "rmsd", "report_version": REPORT_VERSION, "engine": engine, "n_ranks": comm.size,
        "n_frames": info.n_frames, "n_analysed": len(plan.frames), "compute_load": compute_load,
        "block_frames": block_frames,
        "input": {"path": info.path, "paths": [f["path"] for f in info.files] if info.kind != "split" else [info.path],
                  "kind": info.kind, "format": info.format, "n_atoms": info.n_atoms, "files": info.files,
                  **info.layout},
        "topology": _topology_record(topology, info.n_atoms),
        "select": select, "n_selected": description["atoms"]["fit"]["n"], "labels": plan.labels,
        "ref_frame": description["reference"].get("frame"), "analysis": description,
        "partition": partition.describe(), "provenance": _provenance(records),
        "best_repeat": best["repeat"],
        **{key: best[key] for key in ("t_total", "ranks", "stragglers", "ratio_compute_io", "ratio_compute_comm",
                                      "advice")},
        "runs": runs,
    }
    return {"rmsd": rmsd, "labels": plan.labels, "report": report}

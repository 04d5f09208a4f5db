"""``h5mdtool bench rmsd``: the papers' parallel RMSD benchmark, timed per rank.

Split-apply-combine as in Khoshlessan et al. 2020 (sections 3 and 5) and Jakupovic & Beckstein 2021. Each run:

1. the ranks inspect the input (format, frame count, XTC/TRR offsets found by all ranks
   together, H5MD metadata read by rank 0 and broadcast, parts) (:mod:`h5mdtool.bench.inputs`);
2. rank 0 resolves the analysis (topology, selections, weights, reference, frames) and
   broadcasts it (:mod:`h5mdtool.bench.analysis`), while the other ranks read whole frames
   of their shares ahead (:mod:`h5mdtool.bench.read_ahead`);
3. the frames are divided following the input's layout (:mod:`h5mdtool.parallel.partition`),
   rank 0 handing the end of its share to the ranks that read ahead; every rank opens the
   trajectory and computes the RMSDs of its frames (:mod:`h5mdtool.bench.engines`);
4. a barrier (the straggler signal), then ``Gatherv`` of the results to rank 0.

Every second of each rank's run is charged to one phase (:mod:`h5mdtool.bench.timing`), so the
per-rank table adds up; waiting for another rank is ``t_wait`` wherever it happens, what
nobody else worked during step 2 is the run's serial part (``t_serial``, reported apart),
and stragglers are judged on each rank's own work outside it.
``bench report`` (:mod:`h5mdtool.bench.report`) combines reports of several runs.
"""

import datetime
import os
import socket
import statistics
import time

import numpy as np

from ..parallel.errors import UsageError, mark_collective
from ..parallel.mpi import (
    abort_unless_collective, agree, capture_errors, entry_point, is_parallel, root_call, timed_root_waits,
)
from ..parallel.partition import partition_frames
from ..parallel.progress import BAR, JobShare, progress_bar, progress_mode
from ..parallel.testhooks import delay
from .analysis import AnalysisOptions, plan_analysis
from .digest import data_digest, results_digest
from .engines import BlocksEngine, FramesEngine
from .frames import checked_part_scans
from .inputs import inspect_input, open_source, resolve_input_topology
from .read_ahead import BLOCK_FRAMES, PART_PIECE_FRAMES, ReadAhead, planned_share, read_ahead, read_ahead_budget
from .timing import WORK_PHASES, PhaseClock, find_stragglers, own, serial_seconds, share_setup

#: Compute-to-I/O ratio from which Khoshlessan et al. 2020's Heuristic 1 applies (its text lost the symbol
#: of the threshold, "much larger than 1"; its compute-bound workloads had ratios of 11, 19
#: and 27, the plain RMSD task about 0.3).
COMPUTE_BOUND_RATIO = 10.0

#: Version of the report's layout (3: ``data`` and ``results`` digests); ``bench report`` reads 2 and 3.
REPORT_VERSION = 3

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
        Compute time over I/O time of the typical rank (:func:`typical_ratio`).
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
        frame = plan.root_frame
        piece = next(p for p in info.pieces() if p.start <= frame < p.stop)
        path = piece.path if info.manifest is None else os.path.relpath(piece.path, os.path.dirname(info.manifest.path))
        if path not in opened:
            opened.append(path)
    return opened


#: Bytes of the atoms read from one block of frames when ``--block-frames`` is not given.
#: Each block is copied from the file (or the page cache) into a buffer and then gathered;
#: a block of a few MiB is still in the CPU's cache when it is gathered, and the buffer,
#: allocated once per run, costs fewer first-touch page faults. On the development machine
#: (600x AdK, 40 KB a frame) 256-frame blocks ran bench rmsd in 0.70 s on 2 ranks and
#: 1.16-1.26 s on 1, against 0.83-0.87 s and 1.33-1.59 s with 1024-frame blocks.
AUTO_BLOCK_BYTES = 8 << 20


def auto_block_frames(plan, info):
    """Frames per block for *plan* on *info* when ``--block-frames`` is not given: as many
    as :data:`AUTO_BLOCK_BYTES` of the atoms read (the span from the first atom read to the
    last) hold, at least one."""
    span = int(plan.read_indices[-1]) - int(plan.read_indices[0]) + 1
    itemsize = info.h5md["itemsize"] if info.h5md else 4
    return max(1, AUTO_BLOCK_BYTES // (span * 3 * itemsize))


def _run_once(paths, topology, options, group, block_frames, compute_load, engine, comm, input_format=None,
              planner=plan_analysis, engines=ENGINES, progress=None, label="rmsd", read_ahead_bytes=0):
    """One timed run on every rank: (result rows on rank 0, this rank's record, info, plan, partition).

    *planner* resolves the analysis on rank 0 (``planner(info, topology, options)`` returns a
    plan with ``read_indices``, ``frames``, ``n_values`` and ``root_frame``, and rank 0's phase
    times); *engines* maps engine names to the classes that compute it. Meanwhile the other
    ranks read ahead up to *read_ahead_bytes* each (:mod:`h5mdtool.bench.read_ahead`; blocks
    engine only) and rank 0 gives them the end of its share.
    """
    from ..formats import load_decoders

    clock = PhaseClock()
    if comm.rank != 0:  # while rank 0 resolves the analysis: their first read need not import them
        load_decoders(paths, input_format)
        clock.charge("t_init_traj")
    # every rank inspects the input together (XTC/TRR offsets scanned in parallel); what
    # rank 0 alone reads (an H5MD file's metadata, a manifest, a DCD), the others wait for
    with timed_root_waits(lambda: clock.charge("t_init_traj"), lambda: clock.charge("t_wait")):
        info = inspect_input(paths, group, input_format, comm=comm)
    clock.charge("t_init_traj")
    chunk_frames = info.chunk_frames if engine == "blocks" else 1
    reads_ahead = engine == "blocks" and is_parallel(comm)  # the same on every rank
    share = None
    if reads_ahead and comm.rank != 0 and read_ahead_bytes > 0:
        share = planned_share(info, options, comm.size, comm.rank, chunk_frames)

    def meanwhile(ready):
        return read_ahead(info, share, block_frames or BLOCK_FRAMES, chunk_frames, read_ahead_bytes, ready, clock,
                          comm.rank)

    # rank 0 alone resolves the topology, selections and reference; the others read ahead
    before = dict(clock.phases) if comm.rank == 0 else None
    (plan, root_phases), done, ahead = _root_step(comm, planner, info, topology, options, site="bench-setup",
                                                  meanwhile=meanwhile if share is not None else None)
    waited = _charge_root_step(clock, comm, done, lambda until: clock.split(root_phases, rest="t_init_top", until=until))
    serial = ({phase: clock.phases[phase] - before.get(phase, 0.0) for phase in WORK_PHASES}
              if comm.rank == 0 else None)
    partition = partition_frames(plan.frames, comm.size, chunk_frames, info.part_edges())
    first, last = partition.bounds[comm.rank]
    if ahead is not None and not np.array_equal(ahead.frames, plan.frames[first:first + len(ahead)]):
        ahead = None  # the plan chose other frames than foreseen: read them again
    ahead = ahead or ReadAhead()
    # the first blocks read ahead, computed now: the compute their frames still need (the
    # second block's, when there is one: the first call pays the kernel's warm-up)
    sampled = ahead.blocks[:2]
    sample = np.empty((sum(len(positions) for positions, _ in sampled), 2 + plan.n_values))
    saved = 0.0
    if len(sample):
        try:
            seconds = engines[engine](ahead, plan, compute_load).run_read(sampled, plan.read_indices, sample, clock)
            saved = ahead.saved_frames(len(sample), seconds[-1] / len(sampled[-1][0]))
        except Exception:  # noqa: BLE001 - never alone out of the allreduce: read them again, reported there
            ahead, sampled, sample = ReadAhead(), [], sample[:0]
            clock.charge("t_compute")
    if reads_ahead:  # rank 0 gives the end of its share to the ranks that read ahead
        comm.Ibarrier().Wait()  # for the ranks still reading their block ahead or computing their sample
        clock.charge("t_wait")
        partition = partition.shed(comm.allreduce(saved), plan.frames, chunk_frames,
                                   PART_PIECE_FRAMES if info.kind == "split" else 1)
        clock.charge("t_comm")
    ranges = partition.rank_ranges(comm.rank)
    local = np.concatenate([plan.frames[a:b] for a, b in ranges]) if ranges else plan.frames[:0]
    block_frames = block_frames or auto_block_frames(plan, info)
    block = max(1, min(block_frames, len(local)))  # never a buffer larger than the rank's frames
    if info.kind == "H5MD" and comm.size > 1:  # the MPI-IO open is collective: wait for all first
        comm.Barrier()
        clock.charge("t_wait")
    scans = {}
    if info.kind == "split":  # swapped or copied parts refused before any frame but those read ahead
        with capture_errors() as failure:
            info.part_scans.update(ahead.scans)
            scans = checked_part_scans(info.manifest, local, info.h5md_group, info.part_scans)
            info.part_scans.update(scans)  # the digest of the data, after the runs, reads some again
        clock.charge("t_init_traj")
        agree(comm, failure[0])
        clock.charge("t_wait")
    source = open_source(info, plan.read_indices, block, comm, engine, topology, scans)
    results = np.empty((len(local), 2 + plan.n_values), np.float64)
    results[:, 0] = local
    try:
        with capture_errors() as failure:
            if hasattr(source, "open_for"):  # parts, and the frames engine's files: opening is not reading
                source.open_for(local[len(ahead):])
        clock.charge("t_init_traj")
        agree(comm, failure[0])  # files no rank can open are reported once, not by every rank
        clock.charge("t_wait")
        with capture_errors() as failure:
            with progress_bar(len(plan.frames), label, comm, enabled=progress) as bar:
                share_done = JobShare(bar, len(plan.frames), len(local))
                calculator = engines[engine](source, plan, compute_load)
                if len(ahead):
                    results[:len(sample), 1:] = sample[:, 1:]
                    share_done.update(len(sample))
                    calculator.run_read(ahead.blocks[len(sampled):], plan.read_indices, results[len(sample):], clock,
                                        share_done)
                    ahead.blocks = []  # the memory is free once they are computed
                row = len(ahead)  # the frames read ahead begin the rank's first range
                for number, (a, b) in enumerate(ranges):
                    a += len(ahead) if number == 0 else 0
                    calculator.run(plan.frames[a:b], results[row:row + b - a], clock, comm.rank, block, share_done)
                    row += b - a
        # a frame one rank cannot read (a damaged XTC payload, an H5MD chunk) is refused by
        # every rank together, in one line, instead of aborting the job
        agree(comm, failure[0])
        clock.charge("t_wait")
    except BaseException as error:
        # closing an MPI-IO file is collective: a rank that failed alone must not try it
        abort_unless_collective(comm, error)
        source.close()
        raise
    gathered = gather_rows(comm, results, partition.counts())
    if comm.rank == 0 and partition.ranges is not None:  # rank 0's moved frames: back in frame order
        gathered = gathered[np.argsort(gathered[:, 0], kind="stable")]
    source.close()
    clock.charge("t_comm")
    record = {"rank": comm.rank, "host": socket.gethostname(), "n_frames": len(local), "block_frames": block_frames,
              "first_frame": int(local.min()) if len(local) else None,
              "last_frame": int(local.max()) if len(local) else None, "n_read_ahead": len(ahead),
              "t_read_ahead": ahead.io_seconds, "read_ahead_saved": saved,
              **clock.record()}
    if serial is not None:
        record.update(serial=serial, t_serial=sum(serial.values()))
    elif is_parallel(comm):
        record["t_plan_wait"] = waited  # how long this rank waited, idle, for rank 0's plan
    span = (int(plan.read_indices[0]), int(plan.read_indices[-1]) + 1)
    read = info.bytes_read(local[len(ahead):], *span, whole_frames=engine == "frames")
    read += info.bytes_read(ahead.frames, 0, info.n_atoms)
    if comm.rank == 0:
        read += info.bytes_read([plan.root_frame], *span, whole_frames=True)
    opened = _files_opened(info, source, local, plan, comm.rank, engine)
    opened += [path for path in ahead.opened if path not in opened]
    record.update(bytes_read=read, mb_per_s=read / 1e6 / record["t_io"] if record["t_io"] > 0 else None,
                  files_opened=len(opened), opened=opened)
    return gathered, record, info, plan, partition


def _root_step(comm, function, *args, site=None, meanwhile=None):
    """:func:`~h5mdtool.parallel.mpi.root_call` with the waiting told apart from the work and the
    broadcast: rank 0 runs *function* alone while the other ranks run ``meanwhile(ready)``
    (if given; ``ready()`` tells whether rank 0 is done: the others entered a non-blocking
    barrier before, rank 0 enters it once done), then every rank meets at a second barrier
    (rank 0 waits there for the others to finish the block they were reading), then the
    result is broadcast: rank 0's waits are not charged to the broadcast.

    Returns
    -------
    (object, list of float, object)
        The result; the ``time.perf_counter()`` values at which rank 0's work ended and at
        which it left the barrier (on the other ranks: at which they left the barrier); and
        what *meanwhile* returned (None on rank 0 and without *meanwhile*).
        The test hook *site* delays rank 0 before the work.
    """
    done = []
    meanwhile_result = None

    def run(*arguments):
        try:
            if site is not None:
                delay(site, 0)
            return function(*arguments)
        finally:  # failed or not, rank 0 meets the others, then broadcasts the outcome
            done.append(time.perf_counter())
            if is_parallel(comm):
                comm.Ibarrier().Wait()  # tells the others it is done
                comm.Ibarrier().Wait()  # waits for them to leave what they do meanwhile
            done.append(time.perf_counter())

    if comm.rank != 0 and is_parallel(comm):
        request = comm.Ibarrier()
        if meanwhile is not None:
            meanwhile_result = meanwhile(request.Test)
        request.Wait()
        comm.Ibarrier().Wait()
        done.append(time.perf_counter())
    return root_call(comm, run, *args), done, meanwhile_result


def _charge_root_step(clock, comm, done, charge_work):
    """Charge a :func:`_root_step`: rank 0's work (by *charge_work*, given the moment it
    ended), the barrier to ``t_wait``, the broadcast to ``t_comm``. Returns the seconds
    charged to ``t_wait``."""
    waited = 0.0
    if comm.rank == 0:
        charge_work(done[0])
        waited = clock.charge("t_wait", until=done[1])
    elif done:
        waited = clock.charge("t_wait", until=done[0])  # the barrier: waiting for rank 0
    clock.charge("t_comm")
    return waited


def typical_ratio(records):
    """The compute-to-I/O ratio of the typical rank: the median over ranks of each rank's own
    ``t_compute / t_io`` (the serial part left out; ranks without I/O time skipped), or None.

    Judged on the median rank, one rank stopped in its reading or computing does not turn
    the verdict, as a ratio of sums over all ranks would."""
    ratios = [own(r, "t_compute") / own(r, "t_io") for r in records if own(r, "t_io") > 0]
    return statistics.median(ratios) if ratios else None


def checked_options(inputs, block_frames, repeat, compute_load, engine, engines=ENGINES, read_ahead_mb=None):
    """The input paths of a benchmark, once its numeric options and *engine* (a key of the
    benchmark's *engines*) are checked.

    Raises
    ------
    UsageError
        On every rank alike: a count below 1, a negative read-ahead budget, an unknown engine.
    """
    if (block_frames is not None and block_frames < 1) or repeat < 1 or compute_load < 1:
        raise mark_collective(UsageError("--block-frames, --compute-load and --repeat must be at least 1"))
    if read_ahead_mb is not None and read_ahead_mb < 0:
        raise mark_collective(UsageError(f"--read-ahead-mb must be 0 (off) or more, got {read_ahead_mb}"))
    if engine not in engines:
        raise mark_collective(UsageError(f"--engine must be {' or '.join(engines)}, got {engine!r}"))
    return [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)


def repeated(run, repeat, comm):
    """Call ``run(number)`` (which returns output, this rank's record, info, plan and
    partition, as :func:`_run_once`) *repeat* times.

    Returns the last run's output, info, plan, partition and gathered records (None but on
    rank 0), and on rank 0 each run's :func:`summarise` with its ``repeat`` number (None
    elsewhere).
    """
    runs = []
    for number in range(repeat):
        output, record, info, plan, partition = run(number)
        records = comm.gather(record, root=0)
        if comm.rank == 0:
            runs.append({"repeat": number, **summarise(records, info.kind)})
    return output, info, plan, partition, records, runs if comm.rank == 0 else None


#: Figures of a report taken from its fastest run.
BEST_RUN_KEYS = ("t_total", "ranks", "t_serial", "serial_fraction", "stragglers", "ratio_compute_io",
                 "ratio_compute_comm", "advice")


def timing(runs):
    """A report's timing entries: the fastest of *runs* (its number and figures), and every run."""
    best = min(runs, key=lambda run: run["t_total"])
    return {"best_repeat": best["repeat"], **{key: best[key] for key in BEST_RUN_KEYS}, "runs": runs}


def report_fields(benchmark, engine, comm, info, plan, compute_load, block_frames, topology, topology_source,
                  partition, records, runs):
    """The entries every benchmark's report shares (``bench rmsd`` and ``bench dihedrals``):
    what was run on what, the frames, the block size used (the one given, else the default
    each rank recorded), the topology, the partition, provenance and timing."""
    return {
        "benchmark": benchmark, "report_version": REPORT_VERSION, "engine": engine, "n_ranks": comm.size,
        "n_frames": info.n_frames, "n_analysed": len(plan.frames), "compute_load": compute_load,
        "block_frames": block_frames or runs[0]["ranks"][0]["block_frames"], "input": _input_record(info),
        "topology": _topology_record(topology, info.n_atoms, topology_source),
        "partition": partition.describe(), "provenance": _provenance(records), **timing(runs),
    }


def summarise(records, kind=None):
    """One run's summary from its per-rank records (rank order): totals, stragglers, ratios.

    Returns
    -------
    dict
        ``t_total`` (the slowest rank), ``ranks``, ``t_serial`` (the serial part: rank 0
        alone resolving the analysis while every other rank waited idle) and
        ``serial_fraction`` (of ``t_total``), ``stragglers`` (judged on each rank's own work
        outside the serial part, :func:`h5mdtool.bench.timing.find_stragglers`),
        ``ratio_compute_io`` (Khoshlessan et al. 2020's Eq. 7 on the typical rank: the median
        of the ranks' own compute/I-O ratios, :func:`typical_ratio`; None without I/O time),
        ``ratio_compute_comm`` (its Eq. 8, sums over ranks) and ``advice`` for that ratio and
        *kind* of input.
    """
    share_setup(records)
    compute = sum(r["t_compute"] for r in records)
    comm_time = sum(r["t_comm"] for r in records)
    ratio = typical_ratio(records)
    total = max(r["t_total"] for r in records)
    serial = serial_seconds(records)
    return {
        "t_total": total, "ranks": records, "t_serial": serial, "serial_fraction": serial / total if total > 0 else None,
        "stragglers": find_stragglers(records),
        "ratio_compute_io": ratio, "ratio_compute_comm": compute / comm_time if comm_time > 0 else None,
        "advice": advice(ratio, kind),
    }


def _provenance(records):
    from ..h5md.provenance import command_line, software_versions

    return {"command": command_line(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "hosts": sorted({r["host"] for r in records}), "versions": software_versions()}


def _input_record(info):
    """The report's description of the input: paths, kind, format, atoms, files and layout."""
    return {"path": info.path, "paths": [f["path"] for f in info.files] if info.kind != "split" else [info.path],
            "kind": info.kind, "format": info.format, "n_atoms": info.n_atoms, "files": info.files, **info.layout}


def _topology_record(topology, n_atoms, source):
    stat = os.stat(topology)
    return {"path": os.path.abspath(topology), "size": stat.st_size, "mtime": stat.st_mtime, "n_atoms": n_atoms,
            "source": source}


@entry_point
def bench_rmsd(inputs, topology=None, *, comm=None, select="name CA", calc_select=(), index=None, weights=None,
               reference=None, ref_frame=None, start=None, stop=None, step=None, begin=None, end=None, dt=None,
               group=None, block_frames=None, compute_load=1, repeat=1, engine="blocks", format=None, progress=None,
               read_ahead_mb=None):
    """Run the parallel RMSD benchmark and return the RMSDs and the report (rank 0; None elsewhere).

    The RMSDs equal MDAnalysis's ``rms.RMSD(u, select=select, groupselections=calc_select,
    weights=weights, reference=..., ref_frame=ref_frame).run(start, stop, step)``.

    Parameters
    ----------
    inputs : str or sequence of str
        An H5MD file, a split manifest (or its directory), or XTC/TRR/DCD segments of one
        trajectory, in order.
    topology : str, optional
        Topology read by MDAnalysis (its atom count must match the trajectory's). Default:
        the topology an H5MD input carries (``convert --topology`` stores one).
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
    block_frames : int, optional
        Frames read and superposed at once per rank (memory bound; capped at the rank's
        frames); for H5MD files chunked by several frames, whole chunks (at least one).
        Default: as many as 8 MiB of the atoms read hold (:func:`auto_block_frames`).
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
    read_ahead_mb : int, optional
        MiB of whole frames each other rank may read while rank 0 resolves the analysis
        (blocks engine, frames chosen by number; :mod:`h5mdtool.bench.read_ahead`); 0 turns
        it off. Default: a quarter of the node's available memory shared by its ranks, at
        most 2 GiB per rank.

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
    paths = checked_options(inputs, block_frames, repeat, compute_load, engine, read_ahead_mb=read_ahead_mb)
    topology, topology_source = root_call(comm, resolve_input_topology, paths, topology)
    budget = read_ahead_budget(comm, read_ahead_mb)
    options = AnalysisOptions(select=select, calc_select=tuple(calc_select), index=index, weights=weights,
                              reference=reference, ref_frame=ref_frame, start=start, stop=stop, step=step,
                              begin=begin, end=end, dt=dt)
    if comm.rank == 0 and progress_mode(progress) == BAR:
        import tqdm  # noqa: F401 - imported before the timed phases, not within one

    def run(number):
        label = "rmsd" if repeat == 1 else f"rmsd, run {number + 1} of {repeat}"
        return _run_once(paths, topology, options, group, block_frames, compute_load, engine, comm,
                         input_format=format, progress=progress, label=label, read_ahead_bytes=budget)

    rmsd, info, plan, partition, records, runs = repeated(run, repeat, comm)
    if comm.rank != 0:
        return None
    description = plan.description
    data = data_digest(info, plan)  # after the timed runs: the sample read is not timed
    report = {
        **report_fields("rmsd", engine, comm, info, plan, compute_load, block_frames, topology, topology_source,
                        partition, records, runs),
        "select": select, "n_selected": description["atoms"]["fit"]["n"], "labels": plan.labels,
        "ref_frame": description["reference"].get("frame"), "analysis": description,
        "data": data, "results": results_digest(rmsd),
    }
    return {"rmsd": rmsd, "labels": plan.labels, "report": report}

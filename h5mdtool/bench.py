"""``h5mdtool bench rmsd``: the papers' parallel RMSD benchmark, timed per rank.

Split-apply-combine as in paper 000 (sections 3 and 5) and paper 004: every rank loads the
topology, opens the trajectory, computes the C-alpha RMSD of a balanced contiguous block of
frames to a reference frame after optimal superposition, waits at a barrier (the straggler
signal), and the results are gathered on rank 0 with ``Gatherv`` (balanced blocks, no
padding). Blocks of frames are read at once and superposed with the batched kernel of
:mod:`h5mdtool.rmsd`; memory is bounded by ``block_frames``.

Inputs: an H5MD file (MPI-IO with several ranks), an XTC/TRR/DCD file (rank 0 computes the
offsets and broadcasts them; nothing is written beside the input), or a split
``manifest.json`` (each rank opens only the parts holding its frames).
"""

import os
import socket
import statistics
import time
import warnings

import numpy as np

from .errors import InputError, UsageError, mark_collective
from .manifest import is_manifest, read_manifest
from .mpi import SerialComm, abort_unless_collective, balanced_slices, entry_point, open_h5, root_call
from .rmsd import rmsd_to_reference
from .sources import TrajectoryIndex, TrajectoryReader, detect_format, scan, scan_segment

ANGSTROM_PER = {"nm": 10.0, "Angstrom": 1.0, "angstrom": 1.0, "A": 1.0, "pm": 0.01}
TIME_PS_PER = {"ps": 1.0, "fs": 1e-3, "ns": 1e3}

#: Compute-to-I/O ratio above which paper 000's Heuristic 1 applies ("much larger than 1";
#: their compute-bound workloads had ratios of 11, 19 and 27).
COMPUTE_BOUND_RATIO = 10.0


class H5MDFrames:
    """Selected atoms' positions (Angstrom) and times (ps) from an H5MD file."""

    def __init__(self, path, atom_indices, comm):
        self.comm = comm
        self.handle = open_h5(path, "r", comm)
        group = self.handle["particles/trajectory"] if "trajectory" in self.handle.get("particles", {}) else None
        if group is None or "position" not in group:
            self.handle.close()
            raise InputError(f"{path}: no /particles/trajectory/position in this H5MD file")
        self.value = group["position/value"]
        self.n_frames, self.n_atoms = int(self.value.shape[0]), int(self.value.shape[1])
        unit = _text(self.value.attrs.get("unit", "nm"))
        self.scale = ANGSTROM_PER.get(unit, 10.0)
        time_ds = group["position"].get("time")
        self.time = None if time_ds is None else time_ds
        self.time_scale = TIME_PS_PER.get(_text(time_ds.attrs.get("unit", "ps")), 1.0) if time_ds is not None else 1.0
        self.atom_indices = atom_indices
        self.layout = {"chunks": self.value.chunks, "compression": self.value.compression}

    def read(self, start, stop):
        # Whole frames are read and the atoms picked in memory: with frame-shaped chunks the
        # whole chunk is read anyway, and h5py's point selection is far slower.
        block = self.value[start:stop]
        positions = np.take(block, self.atom_indices, axis=1).astype(np.float64) * self.scale
        times = (np.asarray(self.time[start:stop], np.float64) * self.time_scale
                 if self.time is not None else np.arange(start, stop, dtype=np.float64))
        return positions, times

    def close(self):
        self.handle.close()


class TrajectoryFrames:
    """Selected atoms' positions (Angstrom) and times from XTC/TRR/DCD through h5mdtool's readers."""

    def __init__(self, index, atom_indices, block_frames):
        self.n_frames, self.n_atoms = index.n_frames, index.n_atoms
        self.reader = TrajectoryReader(index, atom_indices, ("positions",))
        self.block = self.reader.new_block(block_frames)
        self.layout = {"format": ",".join(index.formats)}

    def read(self, start, stop):
        self.reader.read(np.arange(start, stop), self.block)
        n = self.block.n
        return self.block.positions[:n].astype(np.float64) * 10.0, self.block.time[:n].copy()

    def close(self):
        self.reader.close()


class ManifestFrames:
    """Frames of a split trajectory; parts are opened only when one of their frames is read."""

    def __init__(self, manifest, atom_indices, block_frames):
        self.manifest = manifest
        self.n_frames, self.n_atoms = manifest.n_frames, manifest.n_atoms
        self.atom_indices, self.block_frames = atom_indices, block_frames
        self.open = {}
        self.layout = {"format": manifest.format, "parts": len(manifest.parts)}

    def _part(self, part):
        if part.path not in self.open:
            if not os.path.exists(part.path):
                raise InputError(f"{part.path}: part listed in {self.manifest.path} is missing")
            if detect_format(part.path) == "H5MD":
                self.open[part.path] = H5MDFrames(part.path, self.atom_indices, SerialComm())
            else:
                index = TrajectoryIndex([scan_segment(part.path)], self.n_atoms, False, False, False)
                self.open[part.path] = TrajectoryFrames(index, self.atom_indices, self.block_frames)
        return self.open[part.path]

    def read(self, start, stop):
        positions, times = [], []
        for part in self.manifest.parts_for(start, stop):
            a, b = max(start, part.start), min(stop, part.stop)
            p, t = self._part(part).read(a - part.start, b - part.start)
            positions.append(p)
            times.append(t)
        return np.concatenate(positions), np.concatenate(times)

    def close(self):
        for frames in self.open.values():
            frames.close()


class MDAnalysisFrames:
    """Frames through MDAnalysis Universes, one frame at a time (the papers' way).

    XTC/TRR readers get the offsets rank 0 computed instead of building (and writing) their
    own offset and lock files beside the trajectory.
    """

    def __init__(self, path, topology, selection, comm, index=None, manifest=None):
        self.topology, self.selection, self.comm = topology, selection, comm
        self.manifest = manifest
        self.universes = {}
        if manifest is not None:
            self.n_frames, self.n_atoms = manifest.n_frames, manifest.n_atoms
            self.layout = {"format": manifest.format, "parts": len(manifest.parts)}
        else:
            universe = self._universe(path, index, comm)
            self.universes[path] = universe
            self.n_frames, self.n_atoms = universe.trajectory.n_frames, universe.atoms.n_atoms
            self.layout = {"format": index.formats[0] if index is not None else "H5MD"}
        self.path = path

    def _universe(self, path, index, comm):
        import MDAnalysis

        kwargs = {}
        if index is not None and index.segments[0].format in ("XTC", "TRR"):
            kwargs["format"] = _reader_with_offsets(index.segments[0].format, index.segments[0].offsets)
        elif detect_format(path) == "H5MD" and comm.size > 1:
            kwargs.update(driver="mpio", comm=comm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            universe = MDAnalysis.Universe(self.topology, path, **kwargs)
        universe.h5mdtool_group = universe.select_atoms(self.selection)
        return universe

    def _locate(self, frame):
        if self.manifest is None:
            return self.universes[self.path], frame
        part = self.manifest.parts_for(frame, frame + 1)[0]
        if part.path not in self.universes:
            index = None
            if detect_format(part.path) in ("XTC", "TRR"):
                index = TrajectoryIndex([scan_segment(part.path)], self.n_atoms, False, False, False)
            self.universes[part.path] = self._universe(part.path, index, SerialComm())
        return self.universes[part.path], frame - part.start

    def frame(self, number):
        """Load frame *number*; returns (selected positions in Angstrom, time in ps)."""
        universe, local = self._locate(number)
        ts = universe.trajectory[local]
        return universe.h5mdtool_group.positions, ts.time

    def read(self, start, stop):
        positions, times = zip(*(self.frame(i) for i in range(start, stop)))
        return np.array(positions, dtype=np.float64), np.array(times)

    def close(self):
        for universe in self.universes.values():
            universe.trajectory.close()


def _reader_with_offsets(fmt, offsets):
    """An MDAnalysis XTC/TRR reader class that takes the given offsets (no offset files)."""
    from MDAnalysis.coordinates.TRR import TRRReader
    from MDAnalysis.coordinates.XTC import XTCReader

    base = XTCReader if fmt == "XTC" else TRRReader

    def _load_offsets(self):
        self._xdr.set_offsets(offsets)

    # a format name of its own keeps MDAnalysis's registry of readers unchanged
    return type(f"H5mdTool{fmt}Reader", (base,), {"format": f"H5MDTOOL-{fmt}", "_load_offsets": _load_offsets})


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _select(topology, selection):
    from .convert import load_topology, pick_atoms

    universe = load_topology(topology)
    return len(universe.atoms), pick_atoms(universe, selection, topology)


def _open_frames(path, atom_indices, block_frames, comm):
    """Open *path* for this rank; rank 0 scans shared trajectories once and broadcasts."""
    if is_manifest(path):
        manifest = root_call(comm, read_manifest, path)
        return ManifestFrames(manifest, atom_indices, block_frames)
    fmt = root_call(comm, detect_format, path)
    if fmt == "H5MD":
        if not os.path.exists(path):
            raise mark_collective(InputError(f"{path}: no such file"))
        return H5MDFrames(path, atom_indices, comm)
    index = root_call(comm, scan, [path])
    return TrajectoryFrames(index, atom_indices, block_frames)


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


def advice(ratio):
    """Paper 000's guidance (section 8) for a compute-to-I/O ratio."""
    if ratio is None:
        return "no I/O time measured"
    if ratio >= COMPUTE_BOUND_RATIO:
        return (
            f"compute-bound (compute/I-O = {ratio:.1f}): one shared trajectory file can be used, "
            "with reasonable scaling to about 50 cores (paper 000, Heuristic 1); beyond that "
            "read H5MD with MPI-IO or split the trajectory"
        )
    return (
        f"I/O-bound (compute/I-O = {ratio:.2f}): avoid one shared trajectory file; read H5MD "
        "with MPI-IO through parallel HDF5 (paper 000, Heuristic 2.1: scales to hundreds of "
        "cores), or split it into one file per rank (Heuristic 2.2, 'h5mdtool split')"
    )


def _open_mdanalysis(path, topology, selection, comm):
    """Frames engine: MDAnalysis Universes; rank 0 scans shared XTC/TRR offsets once."""
    if is_manifest(path):
        return MDAnalysisFrames(path, topology, selection, comm, manifest=root_call(comm, read_manifest, path))
    fmt = root_call(comm, detect_format, path)
    if not os.path.exists(path):
        raise mark_collective(InputError(f"{path}: no such file"))
    index = root_call(comm, scan, [path]) if fmt != "H5MD" else None
    return MDAnalysisFrames(path, topology, selection, comm, index=index)


def _run_once(path, topology, selection, ref_frame, block_frames, comm, engine="blocks"):
    """One timed run on every rank; returns (rmsd rows on rank 0, this rank's record, layout)."""
    started = time.perf_counter()
    n_top_atoms, atom_indices = root_call(comm, _select, topology, selection)
    t_init_top = time.perf_counter() - started
    mark = time.perf_counter()
    if engine == "frames":
        frames = _open_mdanalysis(path, topology, selection, comm)
    else:
        frames = _open_frames(path, atom_indices, block_frames, comm)
    t_init_traj = time.perf_counter() - mark
    try:
        if frames.n_atoms != n_top_atoms:
            raise mark_collective(InputError(
                f"{topology} has {n_top_atoms} atoms but {path} has {frames.n_atoms}"))
        if not -frames.n_frames <= ref_frame < frames.n_frames:
            raise mark_collective(UsageError(f"--ref-frame {ref_frame} is outside the {frames.n_frames} frames"))
        ref = ref_frame % frames.n_frames
        reference = comm.bcast(frames.read(ref, ref + 1)[0][0] if comm.rank == 0 else None, root=0)
        slices = balanced_slices(frames.n_frames, comm.size)
        start, stop = slices[comm.rank]
        results = np.empty((stop - start, 3), np.float64)
        t_io = t_compute = 0.0
        if engine == "frames":
            from MDAnalysis.analysis.rms import rmsd as mda_rmsd

            for number in range(start, stop):
                mark = time.perf_counter()
                positions, frame_time = frames.frame(number)
                t_io += time.perf_counter() - mark
                mark = time.perf_counter()
                results[number - start] = (number, frame_time, mda_rmsd(positions, reference, center=True, superposition=True))
                t_compute += time.perf_counter() - mark
        else:
            for first in range(start, stop, block_frames):
                last = min(stop, first + block_frames)
                mark = time.perf_counter()
                positions, times = frames.read(first, last)
                t_io += time.perf_counter() - mark
                mark = time.perf_counter()
                rows = slice(first - start, last - start)
                results[rows, 0] = np.arange(first, last)
                results[rows, 1] = times
                results[rows, 2] = rmsd_to_reference(positions, reference)
                t_compute += time.perf_counter() - mark
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
        "t_total": time.perf_counter() - started,
    }
    return gathered, record, frames.layout, frames.n_frames


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
        Reference frame (default 0).
    block_frames : int
        Frames read and superposed at once per rank (memory bound).
    repeat : int
        Number of runs; each gets its own per-rank records.
    engine : {"blocks", "frames"}
        ``blocks``: blocks of frames and the batched kernel; ``frames``: MDAnalysis Universes
        iterated frame by frame, each load timed as I/O and each ``rms.rmsd`` call as compute.

    Returns
    -------
    dict or None
        On rank 0: ``rmsd`` (array (n_frames, 3): frame, time in ps, RMSD in Angstrom, as
        MDAnalysis's ``rms.RMSD``) and ``report`` (JSON-ready: ranks, timings, stragglers,
        compute/I-O ratio and advice, for every repeat).

    Raises
    ------
    UsageError
        Bad options.
    InputError
        Missing or unreadable input, parts or topology; a selection matching nothing;
        atom counts that differ.
    """
    if block_frames < 1 or repeat < 1:
        raise mark_collective(UsageError("--block-frames and --repeat must be at least 1"))
    if engine not in ("blocks", "frames"):
        raise mark_collective(UsageError(f"--engine must be blocks or frames, got {engine!r}"))
    runs, rmsd = [], None
    for number in range(repeat):
        rmsd, record, layout, n_frames = _run_once(path, topology, select, ref_frame, block_frames, comm, engine)
        records = comm.gather(record, root=0)
        if comm.rank == 0:
            totals = [r["t_total"] for r in records]
            io, compute = sum(r["t_io"] for r in records), sum(r["t_compute"] for r in records)
            ratio = compute / io if io > 0 else None
            runs.append({
                "repeat": number, "t_total": max(totals), "ranks": records,
                "stragglers": stragglers(totals), "ratio_compute_io": ratio, "advice": advice(ratio),
            })
    if comm.rank != 0:
        return None
    report = {
        "benchmark": "rmsd", "engine": engine, "n_ranks": comm.size, "n_frames": n_frames,
        "input": {"path": os.path.abspath(path), **layout}, "topology": os.path.abspath(topology),
        "select": select, "ref_frame": ref_frame, "block_frames": block_frames,
        "t_total": min(run["t_total"] for run in runs), "runs": runs,
    }
    return {"rmsd": rmsd, "report": report}


def combine_reports(reports):
    """Scaling table from ``bench rmsd`` reports of one input at several rank counts.

    Each row: ``n_ranks``, ``t_total`` (best repeat), the mean of every phase over ranks,
    ``speedup`` = t(baseline) * N_baseline / t(N) with the smallest rank count as baseline
    (the usual S(N) = t1/tN when a 1-rank run is included), and ``efficiency`` = S / N.

    Raises
    ------
    UsageError
        If no report is given, they are not ``bench rmsd`` reports, or their inputs differ.
    """
    from .plots import PHASES

    if not reports:
        raise UsageError("give at least one report (RUN.json)")
    inputs = {report.get("input", {}).get("path") for report in reports}
    if any(report.get("benchmark") != "rmsd" for report in reports):
        raise UsageError("only reports written by 'h5mdtool bench rmsd --out' can be combined")
    if len(inputs) != 1:
        raise UsageError(f"the reports measure different inputs: {', '.join(sorted(map(str, inputs)))}")
    rows = []
    for report in sorted(reports, key=lambda r: r["n_ranks"]):
        best = min(report["runs"], key=lambda run: run["t_total"])
        row = {"n_ranks": report["n_ranks"], "t_total": best["t_total"], "n_frames": report["n_frames"]}
        for phase in PHASES:
            row[phase] = statistics.fmean(r[phase] for r in best["ranks"])
        rows.append(row)
    base = rows[0]
    for row in rows:
        row["speedup"] = base["t_total"] * base["n_ranks"] / row["t_total"]
        row["efficiency"] = row["speedup"] / row["n_ranks"]
    return rows

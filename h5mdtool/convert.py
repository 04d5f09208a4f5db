"""``h5mdtool convert``: XTC/TRR/DCD/H5MD segments into one H5MD file, written in parallel.

Rank 0 scans the inputs and plans the job; the plan is broadcast. Each rank then owns a
balanced contiguous block of whole chunks of output frames, reads them a block at a time
from the segments that hold them and writes them with collective HDF5 calls into a file
under a temporary name, which rank 0 renames to the output path once every rank is done.
"""

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import layout as h5md
from .errors import InputError, UsageError, mark_collective
from .mpi import (
    RowWriter,
    abort_unless_collective,
    agree,
    capture_errors,
    chunk_aligned_slices,
    cleanup_on_abort,
    entry_point,
    open_h5,
    require_parallel_h5py,
    root_call,
)
from .outputs import check_output_file, lfs_setstripe, preallocate, publish, remove_quietly, temporary_name
from .progress import progress_bar
from .provenance import base_record
from .testhooks import delay
from .sources import load_decoders, scan, select_frames

#: Default memory for one block of frames, in bytes; each rank holds two blocks (one being
#: decoded while the other is written).
DEFAULT_BLOCK_BYTES = 32 * 1024**2


@dataclass
class ConvertPlan:
    """Everything rank 0 decided, broadcast to all ranks."""

    index: object
    layout: object
    frames: range
    atom_indices: np.ndarray
    fields: tuple
    temporary: str
    output: str
    provenance: dict = field(default_factory=dict)

    @property
    def n_frames(self):
        return len(self.frames)

    @property
    def n_atoms(self):
        return self.index.n_atoms if self.atom_indices is None else len(self.atom_indices)


def load_topology(topology):
    """An MDAnalysis Universe of *topology* alone.

    Raises
    ------
    InputError
        If the file is missing or MDAnalysis cannot read it.
    """
    import warnings

    import MDAnalysis

    if not os.path.isfile(topology):
        raise InputError(f"{topology}: no such topology file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return MDAnalysis.Universe(topology)
    except Exception as error:  # noqa: BLE001 - MDAnalysis raises many types here
        raise InputError(f"{topology}: cannot read topology ({error})") from None


def pick_atoms(universe, selection, topology):
    """Indices of the atoms of *universe* matched by *selection*.

    Raises
    ------
    InputError
        If the selection is invalid or matches nothing.
    """
    try:
        group = universe.select_atoms(selection)
    except Exception as error:  # noqa: BLE001
        raise InputError(f"invalid selection {selection!r}: {error}") from None
    if len(group) == 0:
        raise InputError(f"selection {selection!r} matches no atom of {topology}")
    return np.asarray(group.indices, dtype=np.int64)


def select_atoms(topology, selection, n_atoms):
    """Atom indices picked by an MDAnalysis *selection* on *topology* (None for all atoms).

    Raises
    ------
    UsageError
        If a selection is given without a topology.
    InputError
        If the topology cannot be read, does not match the trajectory's atom count, or the
        selection is invalid or matches nothing.
    """
    if selection is None and topology is None:
        return None
    if topology is None:
        raise UsageError("--select needs --topology FILE to know the atoms' names")
    universe = load_topology(topology)
    if len(universe.atoms) != n_atoms:
        raise InputError(
            f"{topology} has {len(universe.atoms)} atoms but the trajectory has {n_atoms}"
        )
    return None if selection is None else pick_atoms(universe, selection, topology)


def _plan(comm, inputs, output, *, topology, select, start, stop, step, velocities, forces,
          on_overlap, force, layout, command):
    """Rank 0: check the output, scan inputs, select atoms and frames."""
    check_output_file(output, inputs, force)
    index = scan(inputs, on_overlap=on_overlap)
    frames = select_frames(index.n_frames, start, stop, step)
    if not index.segments[0].has_positions:
        raise InputError(f"{inputs[0]}: the first frame has no positions; h5mdtool needs them")
    atom_indices = select_atoms(topology, select, index.n_atoms)
    fields = ["positions"]
    if velocities and index.has_velocities:
        fields.append("velocities")
    if forces and index.has_forces:
        fields.append("forces")
    record = base_record(comm, command)
    record.update(
        inputs=[segment.describe() for segment in index.segments],
        selection={"topology": topology, "select": select, "n_atoms": None if atom_indices is None else len(atom_indices)},
        frames={"start": frames.start, "stop": frames.stop, "step": frames.step, "n_frames": len(frames)},
        fields=fields,
        hdf5_libver=list(h5md.LIBVER),
        on_overlap=on_overlap,
    )
    n_atoms = index.n_atoms if atom_indices is None else len(atom_indices)
    layout.plan_chunks(len(frames), n_atoms)
    record["layout"] = layout.describe()
    return ConvertPlan(
        index=index,
        layout=layout,
        frames=frames,
        atom_indices=atom_indices,
        fields=tuple(fields),
        temporary=temporary_name(output),
        output=os.path.abspath(output),
        provenance=record,
    )


def block_capacity(chunk_frames, frame_bytes, block_bytes):
    """Frames per block: a whole number of chunks within *block_bytes* (at least one chunk)."""
    chunks = max(1, int(block_bytes) // max(1, chunk_frames * frame_bytes))
    return chunks * chunk_frames


def _check_steps(block, previous_step, first_frame):
    """Raise unless the steps of *block* increase strictly and follow *previous_step*."""
    steps = block.step[: block.n]
    if previous_step is not None:
        steps = np.concatenate([[previous_step], steps])
        first_frame -= 1
    backwards = np.flatnonzero(steps[1:] <= steps[:-1])
    if len(backwards):
        at = int(backwards[0])
        raise InputError(
            f"steps must increase through the trajectory, but output frame {first_frame + at + 1} "
            f"has step {int(steps[at + 1])} after step {int(steps[at])}"
        )


def _frames_in_round(slices, capacity, number):
    """Frames all ranks together write in round *number*."""
    return sum(
        max(0, min(stop, begin + (number + 1) * capacity) - (begin + number * capacity))
        for begin, stop in slices
    )


def _write_frames(h5file, plan, layout, comm, bar, block_bytes):
    """Collective: create the datasets and let every rank write its frames."""
    from .sources import TrajectoryReader

    datasets = h5md.create_trajectory(
        h5file, plan.n_frames, plan.n_atoms, plan.fields, plan.index.periodic, layout
    )
    chunk = 1 if layout.contiguous else layout.chunk_shape(plan.n_frames, plan.n_atoms)[0]
    slices = chunk_aligned_slices(plan.n_frames, chunk, comm.size)
    frame_bytes = plan.n_atoms * 3 * 4 * len(plan.fields)
    capacity = block_capacity(chunk, frame_bytes, block_bytes)
    rounds = max(-(-(stop - begin) // capacity) for begin, stop in slices)
    begin, stop = slices[comm.rank]
    writer = RowWriter(comm)
    first_step = last_step = None

    def bounds(number):
        first = begin + number * capacity
        return first, min(stop, first + capacity)

    def load(number, block):
        """Decode the frames of one round (in the prefetch thread; no MPI calls here)."""
        first, last = bounds(number)
        block.n = 0
        if first < last:
            reader.read(np.asarray(plan.frames[first:last], dtype=np.int64), block)
            if layout.precision is not None:
                layout.quantize(block.positions[: block.n])
        return block

    # Decoding the next block overlaps writing the current one: HDF5 writes release the
    # GIL, so the two take about as long as the slower of them instead of their sum.
    with TrajectoryReader(plan.index, plan.atom_indices, plan.fields) as reader, \
            ThreadPoolExecutor(max_workers=1) as prefetch:
        size = min(capacity, max(1, stop - begin))
        blocks = [reader.new_block(size), reader.new_block(size)]
        pending = prefetch.submit(load, 0, blocks[0])
        for number in range(rounds):
            first, _ = bounds(number)
            with capture_errors() as failure:
                block = pending.result()
                if block.n:
                    _check_steps(block, last_step, first)
                    first_step = int(block.step[0]) if first_step is None else first_step
                    last_step = int(block.step[block.n - 1])
            agree(comm, failure[0])
            if number + 1 < rounds:
                pending = prefetch.submit(load, number + 1, blocks[(number + 1) % 2])
            for name, dataset in datasets.items():
                writer.write(dataset, first, block.view(name))
            delay("convert-round", comm.rank)
            bar.update(_frames_in_round(slices, capacity, number))
    _check_rank_boundaries(comm, (first_step, last_step), slices)


def _check_rank_boundaries(comm, edges, slices):
    """Steps must also increase from the last frame of one rank to the first of the next."""
    last_step = None
    for rank, (first, last) in enumerate(comm.allgather(edges)):
        if first is None:
            continue
        if last_step is not None and first <= last_step:
            raise mark_collective(InputError(
                f"steps must increase through the trajectory, but output frame "
                f"{slices[rank][0]} has step {first} after step {last_step}"
            ))
        last_step = last


def _carry_over(plan):
    """Rank 0, H5MD input only: copy what convert did not rewrite (see :mod:`.relayout`)."""
    sources = [s for s in plan.index.segments if s.format == "H5MD"]
    if len(sources) != 1 or len(plan.index.segments) != 1:
        return None
    from .relayout import carry_over

    source = sources[0]
    frames = plan.frames
    selected = plan.atom_indices is not None or (frames.start, frames.stop, frames.step) != (0, source.n_frames, 1)
    return carry_over(source.path, plan.temporary, source.h5md["group"], selected)


def write_h5md_file(path, plan, layout, *, comm, bar, block_bytes=DEFAULT_BLOCK_BYTES, author=None):
    """Write the frames of *plan* into a new H5MD file at *path* (collective).

    Every rank of *comm* writes its balanced share; pass a :class:`~h5mdtool.mpi.SerialComm`
    to write a whole file from one process (as split does for its parts). On failure the
    file is closed and removed, and the error re-raised (or the job aborted when only this
    rank failed).
    """
    # Every write covers whole chunks (blocks are chunk-aligned), so HDF5's chunk cache would
    # only copy each chunk once more before writing it: without it, chunks go straight from
    # the block to the file (0.3 s less CPU for the 600x trajectory, serial).
    h5file = open_h5(path, "w", comm, hints=layout.mpi_hints(), libver=h5md.LIBVER, rdcc_nbytes=0,
                     **layout.file_options())
    try:
        h5md.write_h5md_metadata(h5file, plan.provenance["h5mdtool_version"], author)
        h5md.write_provenance(h5file, plan.provenance)
        if not layout.filtered:
            # the per-atom data alone is a lower bound of the finished file's size
            if comm.rank == 0:
                preallocate(path, plan.n_frames * plan.n_atoms * 3 * 4 * len(plan.fields))
            comm.Barrier()
        _write_frames(h5file, plan, layout, comm, bar, block_bytes)
    except BaseException as error:
        abort_unless_collective(comm, error)
        h5file.close()
        if comm.rank == 0:
            remove_quietly(path)
        raise
    h5file.close()


@entry_point
def convert(inputs, output, *, comm=None, topology=None, select=None, start=None, stop=None,
            step=None, velocities=True, forces=True, on_overlap="error", chunk_frames=1,
            contiguous=False, compression="none", compression_level=None, shuffle=None,
            precision=None, stripe_count=None, stripe_size=None, force=False, progress=None,
            block_bytes=DEFAULT_BLOCK_BYTES, author=None, command=None):
    """Convert XTC, TRR, DCD or H5MD trajectory segments into one H5MD 1.1 file.

    Parameters
    ----------
    inputs : str or sequence of str
        Trajectory files; several files are consecutive segments of one trajectory.
    output : str
        Path of the H5MD file to write.
    comm : mpi4py communicator, optional
        Resolved by :func:`h5mdtool.mpi.resolve`; runs serially without MPI.
    topology, select : str, optional
        Write only the atoms matched by the MDAnalysis selection *select* in *topology*.
    start, stop, step : int, optional
        Frame selection with Python slice semantics over the whole trajectory.
    velocities, forces : bool
        Write TRR velocities and forces when present (default True).
    on_overlap : {"error", "drop"}
        Segments whose steps overlap are refused, or the repeated frames are dropped.
    chunk_frames, contiguous, compression, compression_level, shuffle, precision : see :class:`~h5mdtool.layout.Layout`
        ``chunk_frames="auto"`` plans the chunk size; ``precision`` (nm) stores positions
        lossily with HDF5's scale-offset filter, error at most ``precision / 2``.
    stripe_count, stripe_size : int or str, optional
        Lustre striping: MPI-IO hints at creation and ``lfs setstripe`` when available.
    force : bool
        Replace an existing output.
    progress : bool, optional
        Show a progress bar on rank 0 (default: when standard error is a terminal).
    block_bytes : int
        Memory for one block of frames (default 32 MiB); each rank holds two blocks.
    author : str, optional
        Author name for ``/h5md/author`` (default: the user name).
    command : str, optional
        Command line recorded in the provenance (default: ``sys.argv``).

    Returns
    -------
    dict
        Summary: output, frames, atoms, fields, layout, ranks, seconds, throughput, bytes.

    Raises
    ------
    UsageError
        Invalid options (exit code 2 on the command line).
    InputError
        Missing, empty, truncated or corrupt inputs; atom counts that differ; overlapping
        segments; steps that do not increase.
    OutputError
        Existing output without *force*, output among the inputs, unwritable directory.
    """
    started = time.perf_counter()
    inputs = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    output = os.fspath(output)
    layout = root_call(
        comm, h5md.Layout, chunk_frames=chunk_frames, contiguous=contiguous,
        compression=compression, compression_level=compression_level, shuffle=shuffle,
        precision=precision, stripe_count=stripe_count, stripe_size=stripe_size,
    )
    root_call(comm, layout.check_parallel, comm.size)
    require_parallel_h5py(comm)
    if comm.rank != 0:
        load_decoders(inputs)
    plan = root_call(
        comm, _plan, comm, inputs, output, topology=topology, select=select, start=start,
        stop=stop, step=step, velocities=velocities, forces=forces, on_overlap=on_overlap,
        force=force, layout=layout, command=command,
    )
    layout = plan.layout
    plan.provenance["stripe_applied"] = root_call(
        comm, lfs_setstripe, plan.temporary, layout.stripe_count, layout.stripe_size
    )
    plan.provenance["mpi_io_hints"] = layout.mpi_hints() if comm.size > 1 else {}
    comm.Barrier()
    with cleanup_on_abort(lambda: remove_quietly(plan.temporary)):
        with progress_bar(plan.n_frames, "convert", comm, enabled=progress) as bar:
            write_h5md_file(plan.temporary, plan, layout, comm=comm, bar=bar,
                            block_bytes=block_bytes, author=author)
        relayout = None
        if comm.rank == 0:
            relayout = _carry_over(plan)
            publish(plan.temporary, plan.output)
        comm.Barrier()
    seconds = time.perf_counter() - started
    size = os.path.getsize(plan.output) if comm.rank == 0 else None
    return {
        "output": plan.output,
        "inputs": [segment.path for segment in plan.index.segments],
        "n_frames": plan.n_frames,
        "n_atoms": plan.n_atoms,
        "fields": list(plan.fields),
        "periodic": plan.index.periodic,
        "layout": layout.describe(),
        "stripe_applied": plan.provenance["stripe_applied"],
        "relayout": relayout,
        "n_ranks": comm.size,
        "seconds": seconds,
        "frames_per_second": plan.n_frames / seconds if seconds > 0 else None,
        "bytes": size,
        "megabytes_per_second": (size / seconds / 1e6) if size and seconds > 0 else None,
    }

"""``h5mdtool convert``: XTC/TRR/DCD/H5MD segments into one H5MD file, written in parallel.

The ranks scan the inputs together (:func:`h5mdtool.formats.scan`: XTC/TRR frame offsets
found by all ranks, other formats read by rank 0 and broadcast); rank 0 plans the job and
broadcasts the plan. Each rank then owns a
balanced contiguous block of whole chunks of output frames, reads them a block at a time
from the segments that hold them and writes them with collective HDF5 calls into a file
under a temporary name, which rank 0 renames to the output path once every rank is done.
"""

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..formats import check_trajectory, load_decoders, scan
from ..formats.frametimes import check_one_selection, describe_frames, select_trajectory_frames
from ..formats.registry import NAMED_FORMATS
from ..h5md.chunkcodec import UnsupportedPipeline
from ..h5md.chunkwriter import DirectChunkWriter, GatheredChunkWriter, encoded_datasets, encoding_threads
from ..h5md.codecs import LZF_HINT, PLUGIN_HINT, codec
from ..h5md.layout import Layout
from ..h5md.provenance import base_record
from ..h5md.topology import carries_topology, load_topology, write_topology
from ..h5md.writer import LIBVER, TrajectoryWriter, write_h5md_metadata, write_provenance
from ..parallel.errors import InputError, OutputError, UsageError
from ..parallel.mpi import (
    SerialComm, abort_unless_collective, agree, call_giving_way_to_workers, capture_errors, chunk_aligned_slices,
    cleanup_on_abort, close_h5, discard_h5, entry_point, is_parallel, open_h5, require_parallel_h5py, root_call
)
from ..parallel.outputs import (
    check_output_extension, check_output_file, clear_stale_lock, is_write_failure, lfs_setstripe, preallocate, publish,
    remove_quietly, system_reason, temporary_name, write_failure, write_failures_reported
)
from ..parallel.progress import JobShare, progress_bar
from ..parallel.testhooks import delay
from .atomselect import first_selected_frame, resolve_atoms

#: Default memory for one block of frames on one rank, in bytes; each rank holds two blocks
#: (one being decoded while the other is written).
DEFAULT_BLOCK_BYTES = 32 * 1024**2
#: The default per rank when several ranks write. Each block is one collective write, and
#: with rounds of a few chunks the ranks' copies into the page cache cost a seventh of the
#: time they took with 32 MiB (2 ranks, 600x AdK, zstd: 6.5-7.3 s against 8.1-9.0 s;
#: docs/performance.md).
PARALLEL_BLOCK_BYTES = 2 * 1024**2


def default_block_bytes(n_ranks):
    """Bytes of one block of frames when none is given: 32 MiB on one rank, 2 MiB per rank on several."""
    return DEFAULT_BLOCK_BYTES if n_ranks == 1 else PARALLEL_BLOCK_BYTES


@dataclass
class ConvertPlan:
    """Everything rank 0 decided, broadcast to all ranks."""

    index: object
    layout: object
    #: Trajectory frame numbers written (increasing), chosen by number or by time.
    frames: np.ndarray
    atom_indices: np.ndarray
    groups: list
    temporary: str
    output: str
    provenance: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    topology: str = None
    #: Per group, stored rows written before the frames (``--append``), or None.
    lead: list = None

    @property
    def n_frames(self):
        """Frames of the positions written."""
        return len(self.groups[0][1])

    @property
    def fields(self):
        """Every field written, positions first."""
        return tuple(name for fields, _ in self.groups for name in fields)

    @property
    def n_atoms(self):
        return self.index.n_atoms if self.atom_indices is None else len(self.atom_indices)


def missing_box_note(count):
    """The note on *count* frames stored with zero box edges among frames with a box."""
    return (f"{count} frame(s) without a box are stored with zero edges "
            "(the XTC/TRR convention, read by MDAnalysis as no box)")


def _notes(index, frames, groups, fields_asked):
    """What the user must know about how the data were kept: drops, own sampling, boxes."""
    notes = []
    for segment in index.segments:
        stored = segment.details.get("stored_step")
        if stored is not None:
            changed = np.flatnonzero(stored != segment.step)
            notes.append(f"{segment.path}: {len(changed)} frame(s) store their step modulo 2^32 (the {segment.format} "
                         f"header holds 32 bits): written as steps {int(segment.step[changed[0]])} to "
                         f"{int(segment.step[changed[-1]])}")
        if segment.skip:
            whole = " (the whole segment)" if segment.skip == segment.n_frames else ""
            notes.append(f"{segment.path}: dropped its first {segment.skip} frame(s){whole}: their "
                         "steps are already in the previous segment (--on-overlap first)")
        if segment.cut:
            cut = segment.step[segment.n_frames - segment.cut:]
            steps = f"step {int(cut[0])}" if len(cut) == 1 else f"steps {int(cut[0])} to {int(cut[-1])}"
            whole = ", the whole segment" if segment.cut == segment.n_frames else ""
            notes.append(f"{segment.path}: dropped its last {segment.cut} frame(s) ({steps}{whole}): a later "
                         "segment restarts at or before them (--on-overlap later)")
        if segment.dropped:
            d = segment.dropped
            notes.append(f"{segment.path}: left out the incomplete frame {d['frame']} ({d['bytes']} byte(s) "
                         f"from byte {d['first_byte']}; --on-truncated drop)")
    n_records = len(frames)
    for name in ("velocities", "forces"):
        if name in index.fields and name not in fields_asked and index.fields[name][frames].any():
            notes.append(f"{name} not written (--no-{name})")
    position_frames = groups[0][1]
    for group_fields, group_frames in groups[1:]:
        notes.append(
            f"{' and '.join(group_fields)} saved at {len(group_frames)} of {n_records} frame(s), not at the "
            "positions' frames: written with their own step and time (valid H5MD, read by h5py and h5mdtool; "
            "MDAnalysis's H5MDReader reads every element at the positions' frame index, so convert with "
            f"--no-{group_fields[0]} for MDAnalysis)"
        )
    if len(position_frames) < n_records:
        notes.append(f"positions saved at {len(position_frames)} of {n_records} frame(s): the others are "
                     "kept only in the elements that hold them (the box is stored at the positions' frames)")
    box = index.fields.get("box")
    if box is not None and "box" in groups[0][0]:
        missing = int((~box[position_frames]).sum())
        if missing:
            notes.append(missing_box_note(missing))
    for segment in index.segments:
        if segment.details.get("time_recorded") is False:
            notes.append(f"{segment.path} records no time: its times are MDAnalysis's default for the format "
                         "(1 ps per frame), as MDAnalysis reads it")
    if index.time is None:
        notes.append("the input records no time, so none is written (MDAnalysis 2.11's H5MDReader cannot "
                     "open H5MD files without time, the input included)")
    if index.dtype == "float64":
        notes.append("per-atom values kept in double precision, as the input stores them")
    return notes


def layout_notes(layout):
    """What readers of a file in *layout* must know: plugin filters, multi-frame compressed chunks."""
    notes = []
    if codec(layout.compression).plugin:
        notes.append(f"compressed with {layout.compression}, a filter from hdf5plugin that every reader needs: "
                     f"{PLUGIN_HINT}; --compression gzip needs no plugin")
    elif layout.compression == "lzf":
        notes.append(f"compressed with lzf: {LZF_HINT}")
    if layout.filtered and not layout.contiguous and layout.chunk_frames > 1:
        notes.append(f"{layout.chunk_frames} frames per compressed chunk: block readers (bench rmsd, h5py slices, "
                     "h5mdtool.mdanalysis.Universe for MDAnalysis) decompress each chunk once, but MDAnalysis "
                     "2.11's own H5MD reader decompresses a whole chunk for every frame it reads (convert with "
                     "--chunk-frames 1 for it), and random access decodes a chunk per frame with any reader")
    return notes


def choose_split_xyz(layout, index, frames, atom_indices):
    """Rank 0: settle a ``split_xyz`` left to h5mdtool on the first of the position *frames*
    (:meth:`~h5mdtool.h5md.layout.Layout.choose_split_xyz`); the reading stack decodes them."""
    if layout.split_xyz is not None:
        return
    from ..formats import TrajectoryReader

    n_atoms = index.n_atoms if atom_indices is None else len(atom_indices)
    first = np.asarray(frames)[:layout.sample_frames(len(frames), n_atoms)]
    with TrajectoryReader(index, atom_indices) as reader:
        block = reader.new_block(len(first), ("positions",))
        reader.read(first, block, ("positions",))
        layout.choose_split_xyz(block.view("positions"), index.dtype)


def _check_request(inputs, output, start, stop, step, begin, end, dt, force):
    """Rank 0, before the inputs are scanned: one frame selection, an output that may be written."""
    check_one_selection(start, stop, step, begin, end, dt)
    check_output_extension(output, "H5MD", NAMED_FORMATS, ".h5md")
    check_output_file(output, inputs, force)


def _plan_to_share(*args, **kwargs):
    """Rank 0: :func:`_plan` without its index, which every rank holds already (the scan is collective)."""
    plan = _plan(*args, **kwargs)
    plan.index = None
    return plan


def _plan(comm, inputs, output, index, *, topology, select, index_file, atom_indices_file, start, stop, step, begin,
          end, dt, velocities, forces, layout, command, on_overlap, on_truncated):
    """Rank 0: select atoms and frames of the scanned *index*, group the elements, settle the layout."""
    stale = clear_stale_lock(output)
    layout.resolve_precision(index)
    frames = select_trajectory_frames(index, start, stop, step, begin, end, dt)
    check_trajectory(index, frames)
    if not index.has("positions") or not index.fields["positions"][frames].any():
        raise InputError("no selected frame holds positions; h5mdtool writes trajectories of positions")
    if (select is not None or atom_indices_file is not None) and topology is None and len(inputs) == 1 \
            and index.formats == ["H5MD"] and carries_topology(inputs[0]):
        topology = inputs[0]  # the input carries its own topology: rewrite it for the atoms kept
    _, atom_indices = resolve_atoms(index.n_atoms, topology=topology, select=select, index_file=index_file,
                                    atom_indices_file=atom_indices_file, frame=first_selected_frame(index, frames))
    fields = ["positions"]
    if velocities and index.has("velocities") and index.fields["velocities"][frames].any():
        fields.append("velocities")
    if forces and index.has("forces") and index.fields["forces"][frames].any():
        fields.append("forces")
    if index.has("box") and index.fields["box"][frames].any():
        fields.append("box")
    groups = index.element_groups(frames, fields)
    notes = ([stale] if stale else []) + _notes(index, frames, groups, fields)
    record = base_record(comm, command)
    record.update(
        inputs=index.describe(),
        selection={"topology": topology, "select": select, "index_file": index_file,
                   "atom_indices_file": atom_indices_file,
                   "n_atoms": None if atom_indices is None else len(atom_indices)},
        frames=describe_frames(index, frames, start, stop, step, begin, end, dt),
        fields=fields,
        elements=[{"fields": list(f), "n_frames": len(fr)} for f, fr in groups],
        boundary=index.boundary_for(frames),
        hdf5_libver=list(LIBVER),
        on_overlap=on_overlap,
        on_truncated=on_truncated,
        notes=notes,
    )
    n_atoms = index.n_atoms if atom_indices is None else len(atom_indices)
    layout.plan_chunks(len(groups[0][1]), n_atoms)
    choose_split_xyz(layout, index, groups[0][1], atom_indices)
    record["layout"] = layout.describe()
    notes += layout_notes(layout)
    return ConvertPlan(
        index=index, layout=layout, frames=frames, atom_indices=atom_indices, groups=groups,
        temporary=temporary_name(output), output=os.path.abspath(output), provenance=record, notes=notes,
        topology=topology,
    )


def block_capacity(chunk_frames, frame_bytes, block_bytes):
    """Frames per block: a whole number of chunks within *block_bytes* (at least one chunk)."""
    chunks = max(1, int(block_bytes) // max(1, chunk_frames * frame_bytes))
    return chunks * chunk_frames


#: A round's frames are decoded in this many reads, each moving the progress bar; not for
#: H5MD inputs, whose reads of multi-frame compressed chunks would decompress a chunk per read.
PROGRESS_PIECES = 8


def _write_group(writer, number, plan, reader, comm, bar, block_bytes, row_offset=0):
    """Collective: every rank writes its balanced share of whole chunks of one element group.

    The group's first rows may be *lead* rows, stored values given by the plan (``--append``
    rewrites the last, partial chunk of the file it extends); the frames follow them. Rows
    are written from dataset row *row_offset* on (a multiple of the chunk rows).
    """
    fields, frames = plan.groups[number]
    block_bytes = block_bytes or default_block_bytes(comm.size)
    lead = plan.lead[number] if plan.lead else None
    n_lead = 0 if lead is None else len(lead["step"])
    atom_fields = [name for name in fields if name != "box"]
    encodings = {name: plan.layout.encoding(name, plan.index.dtype) for name in atom_fields}
    box_encoding = plan.layout.box_encoding(plan.index.dtype)
    chunk = writer.chunk_frames(number)
    slices = chunk_aligned_slices(n_lead + len(frames), chunk, comm.size, writer.rank_weights(comm.size))
    frame_bytes = plan.n_atoms * 3 * sum(np.dtype(e.dtype).itemsize for e in encodings.values())
    capacity = block_capacity(chunk, frame_bytes, block_bytes)
    rounds = max(-(-(stop - begin) // capacity) for begin, stop in slices)
    begin, stop = slices[comm.rank]
    share = JobShare(bar, len(frames), stop - begin)
    pieces = 1 if "H5MD" in plan.index.formats else PROGRESS_PIECES

    def load(round_number, block):
        """Decode and encode the frames of one round (in the prefetch thread; no MPI calls)."""
        first = begin + round_number * capacity
        last = min(stop, first + capacity)
        block.n = 0
        share.update(max(0, min(last, n_lead) - first))  # stored rows
        if max(first, n_lead) < last:
            wanted = frames[max(first, n_lead) - n_lead:last - n_lead]
            for piece in np.array_split(wanted, min(pieces, len(wanted))):
                reader.read(piece, block, fields, row=block.n)
                share.update(len(piece))
        arrays = {name: encodings[name].encode(block.view(name)) for name in atom_fields}
        if "box" in fields:
            arrays["edges"] = box_encoding.encode(block.edges[: block.n])
        if first < min(last, n_lead):  # stored rows: already encoded
            rows = slice(first, min(last, n_lead))
            arrays = {name: np.concatenate([lead[name][rows], values]) for name, values in arrays.items()}
        return writer.prepare(number, row_offset + first, arrays)

    # Decoding the next block overlaps writing (and encoding) the current one: HDF5 writes
    # and the encoding threads release the GIL.
    with ThreadPoolExecutor(max_workers=1) as prefetch:
        size = min(capacity, max(1, stop - begin))
        blocks = [reader.new_block(size, fields), reader.new_block(size, fields)]
        pending = prefetch.submit(load, 0, blocks[0])  # starts the decoding thread

        def write_rounds():
            nonlocal pending
            for round_number in range(rounds):
                with capture_errors() as failure:
                    arrays = pending.result()
                agree(comm, failure[0])
                if round_number + 1 < rounds:
                    pending = prefetch.submit(load, round_number + 1, blocks[(round_number + 1) % 2])
                writer.write(number, row_offset + begin + round_number * capacity, arrays)
                delay("convert-round", comm.rank)

        # A rank waiting for the others inside a compressed collective write polls; its
        # decoding thread should have the core. Uncompressed rounds are mostly copies under
        # the output file's lock, which a preempted writer holds longer, so they keep their
        # priority (measured both ways: docs/performance.md, convert).
        if plan.layout.filtered:
            call_giving_way_to_workers(write_rounds, comm)
        else:
            write_rounds()
    share.finish()
    steps = plan.index.step[frames]
    time_values = None if plan.index.time is None else plan.index.time[frames]
    if lead is not None:
        steps = np.concatenate([lead["step"], steps])
        time_values = None if time_values is None else np.concatenate([lead["time"], time_values])
    writer.write_series(number, steps, time_values, row_offset)


def _carry_over(plan, author):
    """Rank 0, H5MD input only: copy what convert did not rewrite (see :mod:`.relayout`)."""
    segments = plan.index.segments
    if len(segments) != 1 or segments[0].format != "H5MD":
        return None
    from .relayout import carry_over

    source = segments[0]
    frames = np.asarray(plan.frames, np.int64)
    every_frame = len(frames) == plan.index.n_frames and not source.skip and not source.cut
    steps = None if every_frame else plan.index.step[frames]
    return carry_over(source.path, plan.temporary, source.details["group"], steps=steps,
                      atoms=plan.atom_indices, n_atoms=plan.index.n_atoms, keep_author=author is not None,
                      layout=plan.layout)


def write_h5md_file(path, plan, *, comm, bar, block_bytes=None, author=None, label=None, threads=None,
                    gathered=False):
    """Write the frames of *plan* into a new H5MD file at *path* (collective).

    Every rank of *comm* writes its balanced share with collective HDF5 calls; pass a
    :class:`~h5mdtool.parallel.mpi.SerialComm` to write a whole file from one process (as split does
    for its parts). One process compresses the chunks of a filtered layout in *threads*
    threads (None: HDF5's filters; :mod:`.chunkwriter`). With *gathered* (several ranks, a
    layout for which :func:`gathered_writes` is true) every rank compresses its own chunks in
    *threads* threads and rank 0 alone stores them (:class:`~h5mdtool.h5md.chunkwriter.GatheredChunkWriter`).
    On failure the file is closed and removed, and the error re-raised (or the job aborted
    when only this rank failed). Messages name *label* (the final output) instead of the
    temporary *path*.
    """
    from ..formats import TrajectoryReader

    label = label or path
    h5file = writer = None
    file_comm = SerialComm() if gathered else comm  # the ranks that opened the file
    try:
        if gathered:
            h5file, writer = _create_on_rank_0(path, plan, comm, label, author, threads or 1)
        else:
            h5file, writer = _create(path, plan, comm, label, author)
            if threads and direct_chunk_writes(plan.layout, comm):
                try:
                    writer = DirectChunkWriter(writer, threads)
                except UnsupportedPipeline:  # HDF5 runs the filters
                    pass
        with TrajectoryReader(plan.index, plan.atom_indices) as reader:
            for number in range(len(plan.groups)):
                _write_group(writer, number, plan, reader, comm, bar, block_bytes)
        writer.close()
        writer = None
        # closing writes HDF5's metadata, which a full disk can refuse too
        opened, h5file = h5file, None
        if gathered:
            with capture_errors() as failure:
                if opened is not None:
                    with write_failures_reported(path, label):
                        close_h5(opened)
            agree(comm, failure[0])
        else:
            close_h5(opened)
    except BaseException as error:
        if not is_write_failure(error):
            _discard(comm, error, h5file, writer, path, file_comm)
            raise
        failure = OutputError(write_failure(error, path, label))  # of the output, not the temporary
        _discard(comm, failure, h5file, writer, path, file_comm)
        raise failure from None


def direct_chunk_writes(layout, comm):
    """True when the chunks of *layout* are compressed in h5mdtool's threads (:mod:`.chunkwriter`):
    a filtered layout all of whose filters run outside HDF5, written by one process."""
    return not is_parallel(comm) and encoded_outside_hdf5(layout)


def encoded_outside_hdf5(layout):
    """True for a chunked, filtered *layout* whose filters h5mdtool can run itself (:mod:`.chunkcodec`)."""
    return layout.filtered and not layout.contiguous and codec(layout.compression).outside


#: ``parallel_compression`` values: who compresses the chunks of a filtered file written by
#: several ranks (see :func:`gathered_writes`).
PARALLEL_COMPRESSION = ("hdf5", "ranks")


def gathered_writes(layout, comm, mode="hdf5"):
    """Whether several ranks compress their chunks themselves and rank 0 stores them all.

    ``ranks``: each rank encodes its chunks with the datasets' filters and rank 0, which
    alone opens the file, writes the compressed bytes
    (:class:`~h5mdtool.h5md.chunkwriter.GatheredChunkWriter`). ``hdf5`` (the default):
    parallel HDF5's collective filtered writes, the filters running inside them; on 2 ranks
    of the 2-core machine measured neither was clearly faster (docs/performance.md). Layouts whose
    filters run only inside HDF5, uncompressed and contiguous ones, and one rank keep
    HDF5's writes.
    """
    return is_parallel(comm) and mode == "ranks" and encoded_outside_hdf5(layout)


def check_parallel_compression(mode):
    """Raise :class:`UsageError` unless *mode* is one of :data:`PARALLEL_COMPRESSION`."""
    if mode not in PARALLEL_COMPRESSION:
        raise UsageError(f"parallel compression {mode!r}: use one of {', '.join(PARALLEL_COMPRESSION)}")


def _create_on_rank_0(path, plan, comm, label, author, threads):
    """Gathered writes: rank 0 creates the file alone (serial HDF5). Returns rank 0's file
    (None elsewhere) and every rank's writer, which compresses its chunks in *threads*
    threads and sends them to rank 0."""
    created = []

    def create():
        h5file, writer = _create(path, plan, SerialComm(), label, author)
        created.append((h5file, writer))
        return encoded_datasets(writer)

    specs = root_call(comm, create)
    h5file, writer = created[0] if created else (None, None)
    return h5file, GatheredChunkWriter(comm, specs, writer, threads, path, label)


def _create(path, plan, comm, label, author):
    """Create the file, its metadata and the writer of its datasets (collective over *comm*)."""
    layout = plan.layout
    # Every write covers whole chunks (blocks are chunk-aligned), so HDF5's chunk cache would
    # only copy each chunk once more before writing it: without it, chunks go straight from
    # the block to the file (0.3 s less CPU for the 600x trajectory, serial).
    try:
        h5file = open_h5(path, "w", comm, hints=layout.mpi_hints(), libver=LIBVER, rdcc_nbytes=0,
                         **layout.file_options())
    except OSError as error:
        raise OutputError(f"{label}: cannot be created ({system_reason(error).replace(path, label)})") from None
    try:
        write_h5md_metadata(h5file, plan.provenance["h5mdtool_version"], author)
        write_provenance(h5file, plan.provenance)
        element_sizes = [(fields, len(frames) + (0 if not plan.lead or plan.lead[number] is None
                                                  else len(plan.lead[number]["step"])))
                         for number, (fields, frames) in enumerate(plan.groups)]
        writer = TrajectoryWriter(h5file, element_sizes, plan.n_atoms, plan.index.boundary_for(plan.frames), layout,
                                  plan.index.dtype, plan.index.time is not None, comm)
        if not layout.filtered:
            # the per-atom data alone is a lower bound of the finished file's size
            itemsize = np.dtype(plan.index.dtype).itemsize
            data = sum(n * plan.n_atoms * 3 * itemsize * len([f for f in fields if f != "box"])
                       for fields, n in element_sizes)
            root_call(comm, preallocate, path, data, label)
    except BaseException as error:
        abort_unless_collective(comm, error)
        discard_h5(h5file, path, comm)
        raise
    return h5file, writer


def _discard(comm, error, h5file, writer, path, file_comm):
    """After *error*: stop the writer, close and remove the file (aborting the job unless every
    rank failed); *file_comm* holds the ranks that opened it (rank 0 alone, or all of *comm*)."""
    abort_unless_collective(comm, error)
    if writer is not None:
        writer.close()
    if file_comm is comm or comm.rank == 0:
        discard_h5(h5file, path, file_comm)


@entry_point
def convert(inputs, output, *, comm=None, topology=None, select=None, index_file=None, atom_indices_file=None,
            start=None, stop=None, step=None, begin=None, end=None, dt=None, velocities=True, forces=True, on_overlap="error", on_truncated="error",
            format=None, group=None, chunk_frames=None, contiguous=False, compression="auto",
            compression_level=None, shuffle=None, split_xyz=None, precision=None, velocity_precision=None,
            force_precision=None, stripe_count=None, stripe_size=None, force=False, progress=None,
            block_bytes=None, threads=None, parallel_compression="hdf5",
            author=None, command=None):
    """Convert trajectory segments (any format of :mod:`h5mdtool.formats`, H5MD included) into one H5MD 1.1 file.

    What is guaranteed: XTC and TRR positions, velocities and forces are stored bit for bit
    as decoded (float32 nm, or float64 for double-precision TRR); DCD positions within half a
    unit in the last place of the nm value (float32 Angstrom converted); with ``precision=Q``
    positions within Q/2 (plus the float32 rounding of the value read); steps and times as
    the inputs record them. Velocities, forces and boxes are written wherever a frame holds
    them, each element with its own step and time when sampled at other frames than the
    positions. Anything else is an error, or a note in the summary saying what was left out.

    Parameters
    ----------
    inputs : str or sequence of str
        Trajectory files; several files are consecutive segments of one trajectory.
    output : str
        Path of the H5MD file to write.
    comm : mpi4py communicator, optional
        Resolved by :func:`h5mdtool.parallel.mpi.resolve`; runs serially without MPI.
    topology, select : str, optional
        Write only the atoms matched by the MDAnalysis selection *select* in *topology*; the
        topology of the atoms written is stored in the file (``h5mdtool topology`` reads it).
    index_file : str, optional
        GROMACS index file (``-n``): *select* names one of its groups, by name or number
        (from 0, as gmx lists them); see :func:`h5mdtool.conversion.atomselect.resolve_atoms`.
    atom_indices_file : str, optional
        Write only the atoms listed (0-based, increasing) in this text file, as mdconvert's ``-a``.
    start, stop, step : int, optional
        Frame selection with Python slice semantics over the whole trajectory.
    begin, end, dt : float, optional
        Frame selection by time in ps, as ``gmx trjconv -b -e -dt``: frames with
        ``begin <= t <= end`` whose time after the first of them is a whole multiple of *dt*
        (see :mod:`h5mdtool.formats.frametimes`); not with *start*, *stop*, *step*. Times are those
        of the joined trajectory (after *on_overlap*); steps and times are written as the
        inputs record them.
    velocities, forces : bool
        Write velocities and forces where frames hold them (default True).
    on_overlap : {"error", "later", "first"}
        Segments whose steps overlap (restarts) are refused, or the earlier segment's frames
        from the restart on are dropped (``later``), or the later segment's repeated frames
        (``first``; ``drop`` is its older name); see :func:`h5mdtool.formats.scan`.
    on_truncated : {"error", "drop"}
        An incomplete last frame (a crashed run) is refused, or left out.
    format : str, optional
        Input format for every file (XTC, TRR, DCD, H5MD), overriding the extensions.
    group : str, optional
        H5MD input: the particle group to read (default: the first, as MDAnalysis reads).
    chunk_frames, contiguous, compression, compression_level, shuffle, split_xyz, precision : see :class:`~h5mdtool.h5md.layout.Layout`
        ``chunk_frames="auto"`` plans the chunk size; ``precision`` (nm) stores positions
        as integers on a decimal grid, error at most ``precision / 2``; ``"xtc"`` keeps the
        XTC inputs' own grid exactly.
    velocity_precision, force_precision : float, optional
        Lossy velocities (nm/ps) and forces (kJ/(mol nm)), error at most half of it; lossless
        by default.
    stripe_count, stripe_size : int or str, optional
        Lustre striping: MPI-IO hints at creation and ``lfs setstripe`` when available.
    force : bool
        Replace an existing output.
    progress : bool, optional
        Show a progress bar on rank 0 (default: when standard error is a terminal).
    block_bytes : int, optional
        Memory for one block of frames; each rank holds two blocks. Default: 32 MiB on one
        rank, 2 MiB per rank on several (:func:`default_block_bytes`).
    threads : int, optional
        Threads of each process that compress chunks outside HDF5
        (:mod:`~h5mdtool.h5md.chunkwriter`); 0 leaves them to HDF5's filters. One process:
        default one per core for gzip, HDF5's own filters for the other codecs
        (:func:`~h5mdtool.h5md.chunkwriter.encoding_threads`). Several ranks compressing their
        own chunks (*parallel_compression*): default 1 per rank.
    parallel_compression : {"hdf5", "ranks"}
        Compressed layouts written by several ranks: parallel HDF5 compresses inside its
        collective writes (``hdf5``, the default), or each rank compresses its own chunks and
        rank 0 stores them (``ranks``); see :func:`gathered_writes`.
    author : str, optional
        Author name for ``/h5md/author`` (default: the user name).
    command : str, optional
        Command line recorded in the provenance (default: ``sys.argv``).

    Returns
    -------
    dict
        Summary: output, frames, atoms, fields, elements, notes, layout, ranks, seconds,
        throughput, bytes.

    Raises
    ------
    UsageError
        Invalid options (exit code 2 on the command line).
    InputError
        Missing, empty, truncated or corrupt inputs; atom counts that differ; overlapping
        segments; steps that do not increase; non-finite values.
    OutputError
        Existing output without *force*, output among the inputs, unwritable directory.
    """
    started = time.perf_counter()
    inputs = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    output = os.fspath(output)
    layout = root_call(
        comm, Layout, chunk_frames=chunk_frames, contiguous=contiguous,
        compression=compression, compression_level=compression_level, shuffle=shuffle, split_xyz=split_xyz,
        precision=precision, velocity_precision=velocity_precision, force_precision=force_precision,
        stripe_count=stripe_count, stripe_size=stripe_size,
    )
    root_call(comm, layout.check_parallel, comm.size)
    root_call(comm, check_parallel_compression, parallel_compression)
    require_parallel_h5py(comm)
    root_call(comm, _check_request, inputs, output, start, stop, step, begin, end, dt, force)
    index = scan(inputs, on_overlap=on_overlap, format=format, on_truncated=on_truncated, group=group, comm=comm)
    if comm.rank != 0:  # while rank 0 plans: their first read need not import them
        load_decoders(inputs, format)
    plan = root_call(
        comm, _plan_to_share, comm, inputs, output, index, topology=topology, select=select, index_file=index_file,
        atom_indices_file=atom_indices_file, start=start, stop=stop, step=step, begin=begin, end=end, dt=dt,
        velocities=velocities, forces=forces, on_overlap=on_overlap, on_truncated=on_truncated, layout=layout,
        command=command,
    )
    plan.index = index
    layout = plan.layout
    plan.provenance["stripe_applied"] = root_call(
        comm, lfs_setstripe, plan.temporary, layout.stripe_count, layout.stripe_size
    )
    gathered = gathered_writes(layout, comm, parallel_compression)
    if gathered:
        threads = encoding_threads(threads or 1)
    elif not direct_chunk_writes(layout, comm):
        threads = None
    else:
        threads = encoding_threads(threads, codec(layout.compression), comm)
    block_bytes = block_bytes or default_block_bytes(comm.size)
    plan.provenance["mpi_io_hints"] = layout.mpi_hints() if comm.size > 1 and not gathered else {}
    plan.provenance["compression_threads"] = threads
    compressed_by = _compressed_by(layout, gathered, threads)
    plan.provenance["compressed_by"] = compressed_by
    comm.Barrier()
    total = sum(len(frames) for _, frames in plan.groups)
    with cleanup_on_abort(lambda: remove_quietly(plan.temporary)):
        with progress_bar(total, "convert", comm, enabled=progress) as bar:
            write_h5md_file(plan.temporary, plan, comm=comm, bar=bar, block_bytes=block_bytes, author=author,
                            label=plan.output, threads=threads, gathered=gathered)
        relayout, topology_written = root_call(comm, _finish, plan, author)
    seconds = time.perf_counter() - started
    size = os.path.getsize(plan.output) if comm.rank == 0 else None
    return {
        "output": plan.output,
        "inputs": [segment.path for segment in plan.index.segments],
        "n_frames": plan.n_frames,
        "frames": plan.provenance["frames"],
        "n_atoms": plan.n_atoms,
        "fields": [name for name in plan.fields if name != "box"],
        "box": "box" in plan.fields,
        "elements": [{"fields": list(fields), "n_frames": len(frames)} for fields, frames in plan.groups],
        "notes": list(plan.notes),
        "boundary": plan.index.boundary_for(plan.frames),
        "periodic": plan.index.periodic,
        "layout": layout.describe(),
        "stripe_applied": plan.provenance["stripe_applied"],
        "relayout": relayout,
        "topology": topology_written,
        "n_ranks": comm.size,
        "threads": threads,
        "compressed_by": compressed_by,
        "block_bytes": block_bytes,
        "seconds": seconds,
        "frames_per_second": plan.n_frames / seconds if seconds > 0 else None,
        "bytes": size,
        "megabytes_per_second": (size / seconds / 1e6) if size and seconds > 0 else None,
    }


def _compressed_by(layout, gathered, threads):
    """Who compresses the chunks: None (uncompressed), ``hdf5`` (its filters, in its writes),
    ``threads`` (one process's encoding threads) or ``ranks`` (each rank, rank 0 storing)."""
    if not layout.filtered:
        return None
    if gathered:
        return "ranks"
    return "threads" if threads else "hdf5"


def _finish(plan, author):
    """Rank 0, once every rank has closed the file: carry over H5MD content, the topology, publish."""
    with write_failures_reported(plan.temporary, plan.output):
        relayout = _carry_over(plan, author)
        topology = None
        if plan.topology is not None:
            topology = write_topology(plan.temporary, load_topology(plan.topology), plan.atom_indices, plan.topology)
    publish(plan.temporary, plan.output)
    return relayout, topology

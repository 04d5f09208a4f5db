"""``h5mdtool split``: one trajectory into N balanced part files plus a manifest.

Rank 0 checks the output directory and the options; the ranks scan the inputs together
(frame counts; XTC/TRR byte offsets found by all ranks, :func:`h5mdtool.formats.scan`); rank
0 plans the parts (DCD headers too) and broadcasts the plan. Parts are balanced contiguous
frame ranges; each rank writes a balanced contiguous run of parts (a rank may write several
parts or none, and still takes part in every collective call). With ``--output-format same``
frames are never decoded: XTC and TRR parts are the source's bytes for their frames, DCD
parts the header of the segment they come from, with the frame count and first step
patched, followed by the source's frame records. With ``--output-format h5md`` each part is an
H5MD file written by its rank alone.

Parts are built in a hidden directory inside the output directory (created when missing),
so they get the directory's group, permissions and file-system striping, and are moved
into place by rank 0 once every rank succeeded, the manifest last. On failure or on a signal
the hidden directory is removed, and the output directory too if this run created it.
"""

import contextlib
import functools
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..conversion.atomselect import first_selected_frame, resolve_atoms
from ..conversion.convert import ConvertPlan, choose_split_xyz, encoded_outside_hdf5, write_h5md_file
from ..formats import check_trajectory, detect_format, scan
from ..formats.frametimes import check_one_selection, describe_frames, select_trajectory_frames
from ..formats.registry import NAMED_FORMATS
from ..h5md.chunkwriter import encoding_threads
from ..h5md.codecs import codec
from ..h5md.layout import Layout
from ..h5md.provenance import base_record
from ..h5md.topology import carries_topology, load_topology, write_topology
from ..parallel.errors import InputError, OutputError, UsageError
from ..parallel.interrupts import exclusive
from ..parallel.mpi import SerialComm, agree, balanced_slices, capture_errors, cleanup_on_abort, entry_point, root_call
from ..parallel.outputs import (
    check_output_directory, hidden_directory_inside, preallocate, publish_into, remove_quietly, write_failures_reported
)
from ..parallel.progress import progress_bar
from ..parallel.testhooks import delay
from .manifest import MANIFEST_KIND, MANIFEST_NAME, checksum_text, file_checksum, new_checksum, write_manifest

#: Version of the manifest this module writes (2: parts carry their first and last step and
#: time, and the manifest lists what was dropped; 3: parts carry a checksum of their bytes).
MANIFEST_VERSION = 3
FORMATS = ("same", "h5md")
#: Input formats whose frames ``format="same"`` copies byte for byte.
COPIED_FORMATS = frozenset({"XTC", "TRR", "DCD"})
EXTENSIONS = {"XTC": ".xtc", "TRR": ".trr", "DCD": ".dcd", "H5MD": ".h5md"}
COPY_BUFFER = 16 * 1024**2

#: Options that shape H5MD parts only (keywords of :func:`split`): layout, fields, atoms.
H5MD_PART_OPTIONS = ("chunk_frames", "contiguous", "compression", "compression_level", "shuffle", "split_xyz",
                     "precision", "velocity_precision", "force_precision", "velocities", "forces",
                     "topology", "select", "index_file", "atom_indices_file")
FLAGS = ("shuffle", "split_xyz", "velocities", "forces")  # --NAME/--no-NAME
SPELLINGS = {"index_file": "-n/--index", "atom_indices_file": "--atom-indices"}
LAYOUT_KEYWORDS = ("chunk_frames", "contiguous", "compression", "compression_level", "shuffle", "split_xyz",
                   "precision", "velocity_precision", "force_precision")


@dataclass
class DCDHeader:
    """The header of one DCD segment, as raw bytes, and what copying its frames needs."""

    path: str
    order: str  # struct byte order: "<" or ">"
    raw: bytes
    frame_size: int
    n_atoms: int

    #: Control words (ICNTRL, 20 int32 after "CORD") that name a property of the frames.
    WORDS = {2: "frame interval (NSAVC)", 8: "fixed atoms", 9: "timestep (DELTA)",
             10: "unit-cell flag", 11: "4th dimension flag", 19: "CHARMM version"}
    #: Control words that count frames or steps of one file: NSET, ISTART, NSTEP.
    PER_FILE = (0, 1, 3)

    @property
    def header_size(self):
        return len(self.raw)

    def word(self, number):
        """Raw bytes of control word *number* (0-based)."""
        return self.raw[8 + 4 * number: 12 + 4 * number]

    def differences(self, other):
        """What the frames of *other* do not share with this header (empty when compatible)."""
        if self.order != other.order:
            return ["byte order"]
        found = [] if self.n_atoms == other.n_atoms else ["atom count"]
        for number in range(20):
            if number not in self.PER_FILE and self.word(number) != other.word(number):
                found.append(self.WORDS.get(number, f"control word {number + 1}"))
        if not found and self.frame_size != other.frame_size:
            found.append("frame size")
        return found


def read_dcd_header(path):
    """Read the header of a DCD that can be split by copying frame records.

    Raises
    ------
    InputError
        For DCDs with fixed atoms (their first frame is stored differently from the others)
        or 4 dimensions, and for files that are not CHARMM/NAMD DCDs.
    """
    from MDAnalysis.lib.formats.libdcd import DCDFile

    with open(path, "rb") as handle:
        head = handle.read(92)
    if len(head) < 92:
        raise InputError(f"{path}: too short for a DCD header")
    order = "<" if struct.unpack("<i", head[:4])[0] == 84 else ">"
    if struct.unpack(order + "i", head[:4])[0] != 84 or head[4:8] != b"CORD":
        raise InputError(f"{path}: not a CHARMM/NAMD DCD header")
    fixed_atoms = struct.unpack(order + "i", head[40:44])[0]
    if fixed_atoms:
        raise InputError(
            f"{path}: DCD with {fixed_atoms} fixed atoms: its first frame is stored differently "
            "from the others, so it cannot be split by copying frames; use --output-format h5md"
        )
    with DCDFile(path) as dcd:
        header_size, frame_size = int(dcd._header_size), int(dcd._framesize)
        n_atoms = int(dcd.header["natoms"])
        if dcd.ndims != 3 or dcd._firstframesize != dcd._framesize:
            raise InputError(f"{path}: DCD variant that cannot be split by copying frames; use --output-format h5md")
    with open(path, "rb") as handle:
        raw = handle.read(header_size)
    return DCDHeader(path=path, order=order, raw=raw, frame_size=frame_size, n_atoms=n_atoms)


@dataclass
class SplitPlan:
    """What rank 0 decided, broadcast to every rank."""

    index: object
    parts: list  # (start, stop) ranges of positions in ``frames``: frame numbers of the split trajectory
    names: list
    part_format: str
    output: str
    output_existed: bool
    temporary: str
    force: bool = False
    layout: object = None
    fields: tuple = ("positions",)
    dcd_headers: dict = field(default_factory=dict)  # segment number -> DCDHeader
    record: dict = field(default_factory=dict)
    #: Source trajectory frames split (increasing), chosen by number or by time; all by default.
    frames: np.ndarray = None
    #: H5MD parts: atoms kept (None: all) and the topology stored in each part.
    atom_indices: np.ndarray = None
    topology: str = None

    def part_frames(self, number):
        """Source trajectory frame numbers of part *number*."""
        start, stop = self.parts[number]
        return self.frames[start:stop]


def _part_names(n_parts, extension):
    width = max(4, len(str(n_parts)))
    return [f"part-{number:0{width}d}{extension}" for number in range(1, n_parts + 1)]


def _option_name(name, value):
    """The command-line spelling of keyword *name* given as *value*."""
    if name in SPELLINGS:
        return SPELLINGS[name]
    flag = name.replace("_", "-")
    return f"--no-{flag}" if name in FLAGS and value is False else f"--{flag}"


def _checked_layout(part_format, nparts, options):
    """Refuse options that cannot be honoured (before any work); the layout of H5MD parts.

    Returns
    -------
    Layout or None
        None for ``format="same"``.
    """
    if part_format not in FORMATS:
        raise UsageError(f"--output-format must be one of {', '.join(FORMATS)}, got {part_format!r}")
    if isinstance(nparts, bool) or not isinstance(nparts, (int, np.integer)) or nparts < 1:
        raise UsageError(f"--nparts must be a whole number >= 1, got {nparts!r}")
    given = [_option_name(name, options[name]) for name in H5MD_PART_OPTIONS if options[name] is not None]
    if part_format == "same" and given:
        raise UsageError(
            f"{', '.join(given)} {'shapes' if len(given) == 1 else 'shape'} H5MD parts only: use "
            f"{'it' if len(given) == 1 else 'them'} with --output-format h5md (--output-format same copies the "
            "input's frames unchanged)"
        )
    if part_format == "h5md":
        return Layout(**{name: options[name] for name in LAYOUT_KEYWORDS if options[name] is not None})
    return None


def _check_parts_hold_positions(index, frames, parts, names):
    """H5MD parts need a frame with positions each (a TRR may save velocities or forces alone).

    A part of such frames only would be an H5MD file no reader of positions (MDAnalysis,
    bench rmsd) can open; XTC/TRR/DCD parts (``--output-format same``) copy frames as they are.
    """
    present = index.fields.get("positions")
    if present is None:  # no frame of the source has positions
        raise InputError("no frame of the trajectory has positions (the source saves velocities or forces without "
                         "them): H5MD parts need positions; use --output-format same")
    for name, (start, stop) in zip(names, parts):
        if not present[frames[start:stop]].any():
            raise InputError(
                f"H5MD part {name} would hold frames {frames[start]}-{frames[stop - 1]} of the trajectory, none of "
                f"which has positions (the source saves velocities or forces without them): use fewer parts, "
                f"or --output-format same")


def _check_directory_name(outdir):
    """Refuse a new output directory named like a file of a format (``-o parts.xtc``, a gmx habit)."""
    name = os.path.normpath(outdir)
    extension = os.path.splitext(name)[1].lower()
    if extension in NAMED_FORMATS and not os.path.isdir(name):
        stem = os.path.splitext(os.path.basename(name))[0]
        raise UsageError(f"{outdir}: split writes a directory of parts and {MANIFEST_NAME}, but {extension} names "
                         f"{NAMED_FORMATS[extension]}; give a directory name, e.g. {stem}-parts/")


def _check_request(inputs, outdir, nparts, *, part_format, input_format, force, options, selection):
    """Rank 0, before the inputs are scanned: the options and the output directory.

    Returns
    -------
    (Layout or None, bool, str)
        The parts' layout (None for ``format="same"``), whether the output existed, and the
        parts' format (*part_format*, or for None the default: ``same`` where the inputs'
        frames can be copied, ``h5md`` otherwise).
    """
    check_one_selection(**selection)
    formats = None
    if part_format is None:
        formats = {detect_format(path, input_format) for path in inputs}
        part_format = "same" if len(formats) == 1 and formats <= COPIED_FORMATS else "h5md"
    layout = _checked_layout(part_format, nparts, options)
    _check_directory_name(outdir)
    output_existed = check_output_directory(outdir, inputs, force)
    if part_format == "same":
        formats = formats or {detect_format(path, input_format) for path in inputs}
        if len(formats) > 1:
            raise InputError("--output-format same needs inputs of one format; use --output-format h5md to mix them")
        if not formats <= COPIED_FORMATS:
            raise InputError(f"--output-format same copies XTC, TRR or DCD frames; for {', '.join(sorted(formats))} "
                             "input use --output-format h5md")
    return layout, output_existed, part_format


def _plan_to_share(*args, **kwargs):
    """Rank 0: :func:`_plan` without its index, which every rank holds already (the scan is collective)."""
    plan = _plan(*args, **kwargs)
    plan.index = None
    return plan


def _plan(comm, inputs, outdir, nparts, index, layout, output_existed, *, part_format, on_overlap, on_truncated,
          force, options, selection, command):
    """Rank 0: choose the frames of the scanned *index* and the parts."""
    frames = select_trajectory_frames(index, **selection)
    if nparts > len(frames):
        chosen = "" if len(frames) == index.n_frames else f"{len(frames)} selected of the "
        raise InputError(f"--nparts {nparts} is more than the {chosen}{index.n_frames} frames of the trajectory")
    fmt = index.formats[0] if part_format == "same" else "H5MD"
    parts = balanced_slices(len(frames), nparts)
    names = _part_names(nparts, EXTENSIONS[fmt])
    dcd_headers = {}
    if fmt == "DCD":
        dcd_headers = {number: read_dcd_header(segment.path) for number, segment in enumerate(index.segments)
                       if segment.kept}
        for name, (start, stop) in zip(names, parts):
            _check_dcd_part(index, dcd_headers, name, frames[start:stop])
    fields = ["positions"]
    topology, atom_indices = options["topology"], None
    if layout is not None:
        check_trajectory(index, frames)
        _check_parts_hold_positions(index, frames, parts, names)
        if (options["select"] is not None or options["atom_indices_file"] is not None) and topology is None \
                and len(inputs) == 1 and index.formats == ["H5MD"] and carries_topology(inputs[0]):
            topology = inputs[0]  # the input carries its own topology: rewrite it for the atoms kept
        _, atom_indices = resolve_atoms(index.n_atoms, topology=topology, select=options["select"],
                                        index_file=options["index_file"],
                                        atom_indices_file=options["atom_indices_file"],
                                        frame=first_selected_frame(index, frames))
        layout.resolve_precision(index)
        layout.plan_chunks(min(stop - start for start, stop in parts),
                           index.n_atoms if atom_indices is None else len(atom_indices))
        choose_split_xyz(layout, index, frames[index.fields["positions"][frames]], atom_indices)
        if options["velocities"] is not False and index.has("velocities") and index.fields["velocities"][frames].any():
            fields.append("velocities")
        if options["forces"] is not False and index.has("forces") and index.fields["forces"][frames].any():
            fields.append("forces")
        if index.has("box") and index.fields["box"][frames].any():
            fields.append("box")
    output = os.path.abspath(outdir)
    record = base_record(comm, command)
    record.update(
        source=[segment.describe() for segment in index.segments],
        n_frames=len(frames),
        n_atoms=index.n_atoms if atom_indices is None else len(atom_indices),
        frames=describe_frames(index, frames, **selection),
        format=fmt,
        on_overlap=on_overlap,
        on_truncated=on_truncated,
    )
    if layout is not None:
        record["fields"] = fields
        record["selection"] = {"topology": topology, "select": options["select"], "index_file": options["index_file"],
                               "atom_indices_file": options["atom_indices_file"],
                               "n_atoms": None if atom_indices is None else len(atom_indices)}
    return SplitPlan(
        index=index,
        parts=parts,
        names=names,
        part_format=fmt,
        output=output,
        output_existed=output_existed,
        temporary=hidden_directory_inside(output),
        force=force,
        layout=layout,
        fields=tuple(fields),
        dcd_headers=dcd_headers,
        record=record,
        frames=frames,
        atom_indices=atom_indices,
        topology=topology,
    )


def _runs(index, frames):
    """Increasing trajectory *frames* as runs ``(segment number, first local frame, last local frame)``
    of consecutive frames of one segment, in order."""
    segments, local = index.locate(frames)
    breaks = np.flatnonzero((np.diff(segments) != 0) | (np.diff(local) != 1)) + 1
    return [(int(segments[first]), int(local[first]), int(local[last - 1]))
            for first, last in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(frames)]]))]


def _dcd_step(segment, frame):
    return int(segment.step[frame])


def _dcd_interval(index, frames):
    """Steps between the frames of a DCD part (the NSAVC of its header)."""
    if len(frames) > 1:
        return int(index.step[frames[1]] - index.step[frames[0]])
    segment, _ = index.locate(frames[:1])
    return int(index.segments[int(segment[0])].details["nsavc"])


def _check_dcd_part(index, headers, name, frames):
    """Refuse a DCD part whose frames one DCD header cannot describe.

    A DCD file has one header: its frames share byte order, atom count, unit-cell flag and
    timestep, and their steps follow ``ISTART + k * NSAVC``. A part spanning segments needs
    headers that agree and steps that go on at the same interval; a part of frames picked by
    time (``--dt``) needs evenly spaced steps too (its header gets their interval as NSAVC).

    Raises
    ------
    InputError
        Naming the part, the segments and what differs, and suggesting ``--output-format h5md``.
    """
    runs = _runs(index, frames)
    for (before, _, _), (after, _, _) in zip(runs, runs[1:]):
        a, b = index.segments[before], index.segments[after]
        differences = [] if before == after else headers[before].differences(headers[after])
        if differences:
            raise InputError(
                f"{name} would span {a.path} and {b.path}, whose DCD headers disagree on "
                f"{', '.join(differences)}; a DCD part has one header: use --output-format h5md "
                "(or a part count whose boundaries fall between the segments)"
            )
    steps = index.step[frames]
    intervals = np.diff(steps)
    if len(intervals) and np.any(intervals != intervals[0]):
        at = int(np.flatnonzero(intervals != intervals[0])[0])
        a, b = (index.segments[int(s)] for s in index.locate(frames[at:at + 2])[0])
        where = f" ({a.path} to {b.path})" if a is not b else ""
        raise InputError(
            f"{name} would go from step {int(steps[at])} to {int(steps[at + 1])}{where}, where one DCD header "
            f"(steps ISTART + k * NSAVC) implies {int(steps[at] + intervals[0])}: use --output-format h5md "
            "(or a part count whose boundaries fall between the segments)"
        )


def _copy_range(source, target, begin, end, hasher):
    """Append bytes ``[begin, end)`` of the open file *source* to the open file *target*,
    feeding them to *hasher* on the way (the part's checksum costs no second read).

    Each block is hashed in a thread while it is written (BLAKE2b and the write both release
    the GIL), so the checksum, about 1 s of a core per GB, overlaps the copy: blocks alternate
    between two buffers, and a buffer is read into again only once its hash is done.
    """
    remaining = end - begin
    source.seek(begin)
    buffers = [bytearray(min(remaining, COPY_BUFFER)) for _ in range(2)]
    hashing = None
    with ThreadPoolExecutor(1, thread_name_prefix="h5mdtool-checksum") as pool:
        turn = 0
        while remaining > 0:
            block = memoryview(buffers[turn % 2])[:min(remaining, COPY_BUFFER)]
            got = source.readinto(block)
            if not got:
                raise InputError(f"{source.name}: ends before byte {end} (file changed or truncated?)")
            block = block[:got]
            if hashing is not None:
                hashing.result()  # hashed in order; the other buffer is free for the next turn
            hashing = pool.submit(hasher.update, block)
            target.write(block)
            remaining -= got
            turn += 1
        if hashing is not None:
            hashing.result()


def _xdr_byte_range(segment, first, last):
    return int(segment.offsets[first]), int(segment.offsets[last + 1])


def _write_dcd_part(path, plan, frames, label, hasher):
    """A DCD part: its first segment's header with NSET, ISTART, NSAVC and NSTEP patched, then frames.

    :func:`_check_dcd_part` made sure every segment of the part shares that header and the
    steps are evenly spaced. Times are steps times DELTA, so they stay the source's.
    """
    runs = _runs(plan.index, frames)
    number, first, _ = runs[0]
    header = plan.dcd_headers[number]
    nsavc = _dcd_interval(plan.index, frames)
    n_frames = len(frames)
    head = bytearray(header.raw)
    struct.pack_into(header.order + "iii", head, 8, n_frames, _dcd_step(plan.index.segments[number], first), nsavc)
    struct.pack_into(header.order + "i", head, 20, n_frames * nsavc)
    with open(path, "wb") as target:
        preallocate(path, header.header_size + n_frames * header.frame_size, label)
        target.write(head)
        hasher.update(head)
        for number, first, last in runs:
            own = plan.dcd_headers[number]
            with open(plan.index.segments[number].path, "rb") as source:
                _copy_range(source, target, own.header_size + first * own.frame_size,
                            own.header_size + (last + 1) * own.frame_size, hasher)


def _write_xdr_part(path, plan, frames, label, hasher):
    runs = _runs(plan.index, frames)
    ranges = [_xdr_byte_range(plan.index.segments[number], first, last) for number, first, last in runs]
    with open(path, "wb") as target:
        preallocate(path, sum(end - begin for begin, end in ranges), label)
        for (number, _, _), (begin, end) in zip(runs, ranges):
            with open(plan.index.segments[number].path, "rb") as source:
                _copy_range(source, target, begin, end, hasher)


def _write_h5md_part(path, plan, number, label, threads=None):
    start, stop = plan.parts[number]
    frames = plan.part_frames(number)
    groups = plan.index.element_groups(frames, plan.fields)
    record = dict(plan.record, part={"start": start, "stop": stop}, layout=plan.layout.describe())
    part_plan = ConvertPlan(
        index=plan.index, layout=plan.layout, frames=frames, atom_indices=plan.atom_indices,
        groups=groups, temporary=path, output=path, provenance=record,
    )
    write_h5md_file(path, part_plan, comm=SerialComm(), bar=_Silent(), label=label, threads=threads)
    segments = plan.index.segments
    if len(segments) == 1 and segments[0].format == "H5MD":
        from ..conversion.relayout import carry_over

        # what convert carries over, reduced to the part's frames (observables, species...)
        carry_over(segments[0].path, path, segments[0].details["group"], steps=plan.index.step[frames],
                   atoms=plan.atom_indices, n_atoms=plan.index.n_atoms)
    if plan.topology is not None:
        write_topology(path, load_topology(plan.topology), plan.atom_indices, plan.topology)


class _Silent:
    def update(self, n=1):
        pass


def _part_clock(index, frames):
    """First and last step (int) and time (float, ps; None without time) of trajectory *frames*."""
    times = index.time
    return {
        "first_step": int(index.step[frames[0]]),
        "last_step": int(index.step[frames[-1]]),
        "first_time": None if times is None else float(times[frames[0]]),
        "last_time": None if times is None else float(times[frames[-1]]),
    }


def _write_part(plan, number, threads=None):
    """Write part *number* into the temporary directory (an H5MD part's chunks compressed in
    *threads* threads of h5mdtool's, None: by HDF5's filters); return its size, clock and
    checksum."""
    frames = plan.part_frames(number)
    path = os.path.join(plan.temporary, plan.names[number])
    label = os.path.join(plan.output, plan.names[number])
    with write_failures_reported(path, label):
        if plan.part_format == "H5MD":
            _write_h5md_part(path, plan, number, label, threads)
            checksum = file_checksum(path)  # HDF5 writes the file: hashed once complete
        else:
            hasher = new_checksum()
            write = _write_dcd_part if plan.part_format == "DCD" else _write_xdr_part
            write(path, plan, frames, label, hasher)
            checksum = checksum_text(hasher)
        size = os.path.getsize(path)
    return dict(bytes=size, checksum=checksum, **_part_clock(plan.index, frames))


def _create_directories(plan):
    """Rank 0: the output directory when missing, and the hidden temporary inside it."""
    try:
        with exclusive():
            if not plan.output_existed:
                os.mkdir(plan.output)
            os.mkdir(plan.temporary)
    except OSError as error:
        raise OutputError(f"{plan.output}: cannot create the output directory ({error.strerror})") from None


def _discard(plan):
    """Clean-up on failure or signal, on any rank, any number of times: remove the temporary,
    and the output directory when this run created it and it is still empty. True when this
    call claimed the temporary (see :func:`h5mdtool.parallel.outputs.remove_quietly`)."""
    claimed = remove_quietly(plan.temporary)
    if not plan.output_existed:
        with contextlib.suppress(OSError):
            os.rmdir(plan.output)
    return claimed


def _dropped(plan):
    """What of the source the parts leave out: frames dropped as overlaps (--on-overlap later/first)
    and incomplete last frames (--on-truncated drop)."""
    dropped = []
    for segment in plan.index.segments:
        if segment.skip:
            dropped.append({"path": os.path.abspath(segment.path), "frames": [0, segment.skip],
                            "n_frames": segment.skip,
                            "reason": "steps overlap the previous segment (--on-overlap first kept the first copy)"})
        if segment.cut:
            dropped.append({"path": os.path.abspath(segment.path),
                            "frames": [segment.n_frames - segment.cut, segment.n_frames], "n_frames": segment.cut,
                            "reason": "a later segment restarts at or before these steps (--on-overlap later kept "
                                      "the restart's frames)"})
        if segment.dropped:
            lost = segment.dropped
            dropped.append({"path": os.path.abspath(segment.path), "frames": [lost["frame"], lost["frame"] + 1],
                            "n_frames": 1, "first_byte": lost["first_byte"], "bytes": lost["bytes"],
                            "reason": "incomplete last frame (--on-truncated drop)"})
    return dropped


def _manifest(plan, results):
    document = dict(plan.record, manifest_version=MANIFEST_VERSION, kind=MANIFEST_KIND)
    document["parts"] = [
        dict({"path": name, "start": start, "stop": stop, "n_frames": stop - start}, **results[number])
        for number, (name, (start, stop)) in enumerate(zip(plan.names, plan.parts))
    ]
    document["dropped"] = _dropped(plan)
    if plan.layout is not None:
        document["layout"] = plan.layout.describe()
    return document


def _publish(plan, gathered, started, n_ranks):
    """Rank 0: write the manifest, move everything into the output directory, summarise."""
    results = {}
    for rank_results in gathered:
        results.update(rank_results)
    document = _manifest(plan, results)
    write_manifest(plan.temporary, document)
    publish_into(plan.temporary, plan.output, plan.names + [MANIFEST_NAME], replace=plan.force)
    seconds = time.perf_counter() - started
    total = sum(part["bytes"] for part in document["parts"])
    return {
        "output": plan.output,
        "manifest": os.path.join(plan.output, MANIFEST_NAME),
        "format": plan.part_format,
        "n_frames": len(plan.frames),
        "frames": document["frames"],
        "n_atoms": document["n_atoms"],
        "n_parts": len(plan.parts),
        "parts": document["parts"],
        "dropped": document["dropped"],
        "bytes": total,
        "n_ranks": n_ranks,
        "seconds": seconds,
        "megabytes_per_second": total / seconds / 1e6 if seconds > 0 else None,
    }


@entry_point
def split(inputs, outdir, nparts, *, comm=None, format=None, start=None, stop=None, step=None, begin=None,
          end=None, dt=None, topology=None, select=None, index_file=None, atom_indices_file=None,
          on_overlap="error", on_truncated="error", input_format=None, force=False,
          progress=None, chunk_frames=None, contiguous=None, compression=None,
          compression_level=None, shuffle=None, split_xyz=None, precision=None, velocity_precision=None,
          force_precision=None, velocities=None, forces=None, command=None):
    """Split a trajectory into *nparts* balanced part files plus ``manifest.json``.

    Parameters
    ----------
    inputs : str or sequence of str
        Trajectory files (segments of one trajectory, in order), of any format convert reads.
    outdir : str
        Output directory: created when missing, written into when empty (it keeps its
        permissions, group and striping), refused when not empty unless *force*.
    nparts : int
        Number of parts, independent of the number of ranks; at most the frame count.
    comm : mpi4py communicator, optional
    format : {"same", "h5md"}, optional
        ``same``: parts in the input's format, frames copied byte for byte (XTC, TRR, DCD);
        ``h5md``: H5MD parts with the layout options below. Default: ``same`` for XTC, TRR
        or DCD inputs of one format, ``h5md`` for any other input (H5MD, the other formats,
        mixed formats).
    start, stop, step : int, optional
        Split only these frames, with Python slice semantics over the whole trajectory.
    begin, end, dt : float, optional
        Split only the frames picked by time in ps, as ``gmx trjconv -b -e -dt`` (see
        :mod:`h5mdtool.formats.frametimes`); not with *start*, *stop*, *step*. The parts keep the
        source's steps and times; the manifest numbers the frames split from 0.
    topology, select, index_file, atom_indices_file : str, optional
        H5MD parts only: the atoms to keep, as for :func:`h5mdtool.conversion.convert.convert`
        (*select* an MDAnalysis selection, or a group of the GROMACS index file
        *index_file*; or *atom_indices_file*); with *topology* each part stores it.
    on_overlap : {"error", "later", "first"}
        See :func:`h5mdtool.formats.scan`.
    on_truncated : {"error", "drop"}
        As for convert; dropped frames are listed in the manifest.
    input_format : str, optional
        Read every input as this format (convert's ``--format``), whatever its extension.
    force : bool
        Replace the contents of a non-empty *outdir* (once the new parts are complete).
    progress : bool, optional
        Progress bar on rank 0 (default: when standard error is a terminal).
    chunk_frames, contiguous, compression, compression_level, shuffle, split_xyz, precision, velocity_precision, force_precision
        Layout of H5MD parts (see :class:`h5mdtool.h5md.layout.Layout`); None for the default.
    velocities, forces : bool, optional
        H5MD parts: write TRR/H5MD velocities and forces when present (default True).
    command : str, optional
        Command line recorded in the manifest.

    Returns
    -------
    dict or None
        On rank 0 the summary: output, manifest, format, n_frames, n_atoms, n_parts, parts
        (with bytes and first/last step and time), dropped, bytes, n_ranks, seconds; None on
        the other ranks.

    Raises
    ------
    UsageError
        Bad options, H5MD part options with ``format="same"``, *nparts* larger than the frame
        count, mixed formats with ``same``.
    InputError
        Unreadable inputs, DCD variants that cannot be copied frame by frame, a DCD part that
        would span segments whose headers disagree.
    OutputError
        An output that is not a directory, a non-empty directory without *force*, one that
        holds an input, or one that cannot be created or written.
    """
    started = time.perf_counter()
    inputs = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    outdir = os.fspath(outdir)
    options = dict(chunk_frames=chunk_frames, contiguous=contiguous, compression=compression,
                   compression_level=compression_level, shuffle=shuffle, split_xyz=split_xyz, precision=precision,
                   velocity_precision=velocity_precision, force_precision=force_precision,
                   velocities=velocities, forces=forces, topology=topology, select=select, index_file=index_file,
                   atom_indices_file=atom_indices_file)
    selection = dict(start=start, stop=stop, step=step, begin=begin, end=end, dt=dt)
    layout, output_existed, format = root_call(comm, _check_request, inputs, outdir, nparts, part_format=format,
                                       input_format=input_format, force=force, options=options, selection=selection)
    index = scan(inputs, on_overlap=on_overlap, on_truncated=on_truncated, format=input_format, comm=comm)
    plan = root_call(
        comm, _plan_to_share, comm, inputs, outdir, nparts, index, layout, output_existed, part_format=format,
        on_overlap=on_overlap, on_truncated=on_truncated, force=force, options=options, selection=selection,
        command=command,
    )
    plan.index = index
    mine = balanced_slices(len(plan.parts), comm.size)[comm.rank]
    threads = None
    if plan.part_format == "H5MD" and plan.layout is not None and encoded_outside_hdf5(plan.layout):  # each rank writes its parts alone
        threads = encoding_threads(None, codec(plan.layout.compression), comm)
    results = {}
    with cleanup_on_abort(functools.partial(_discard, plan)):
        root_call(comm, _create_directories, plan)
        my_frames = sum(plan.parts[n][1] - plan.parts[n][0] for n in range(*mine))
        with progress_bar(my_frames, f"split (rank 0 of {comm.size})", comm, enabled=progress) as bar:
            with capture_errors() as failure:
                for number in range(*mine):
                    results[number] = _write_part(plan, number, threads)
                    delay("split-part", comm.rank)
                    bar.update(plan.parts[number][1] - plan.parts[number][0])
            agree(comm, failure[0])
        gathered = comm.gather(results, root=0)
        summary = root_call(comm, _publish, plan, gathered, started, comm.size)
    return summary if comm.rank == 0 else None

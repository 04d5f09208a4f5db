"""``h5mdtool split``: one trajectory into N balanced part files plus a manifest.

Rank 0 scans the inputs (frame counts, XTC/TRR byte offsets) and broadcasts the plan.
Parts are balanced contiguous frame ranges; each rank writes a balanced contiguous run of
parts (a rank may write several parts or none). With ``--format same`` frames are never
decoded: XTC and TRR parts are the source's bytes for their frames, DCD parts a patched
copy of the source header followed by the source's frame records. With ``--format h5md``
each part is an H5MD file written by its rank alone. Parts go into a temporary directory
beside the output, which rank 0 renames into place once every rank succeeded.
"""

import os
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from .convert import ConvertPlan, write_h5md_file
from .errors import InputError, UsageError
from .layout import Layout
from .manifest import MANIFEST_KIND, MANIFEST_VERSION, write_manifest
from .mpi import (
    SerialComm,
    agree,
    balanced_slices,
    capture_errors,
    cleanup_on_abort,
    entry_point,
    root_call,
)
from .outputs import check_output_directory, preallocate, publish, remove_quietly, temporary_name
from .progress import progress_bar
from .provenance import base_record
from .formats import detect_format, scan

FORMATS = ("same", "h5md")
EXTENSIONS = {"XTC": ".xtc", "TRR": ".trr", "DCD": ".dcd", "H5MD": ".h5md"}
COPY_BUFFER = 16 * 1024**2


@dataclass
class SplitPlan:
    """What rank 0 decided, broadcast to every rank."""

    index: object
    parts: list  # (start, stop) frame ranges
    names: list
    part_format: str
    temporary: str
    output: str
    layout: object = None
    record: dict = field(default_factory=dict)


def _part_names(n_parts, extension):
    width = max(4, len(str(n_parts)))
    return [f"part-{number:0{width}d}{extension}" for number in range(1, n_parts + 1)]


def _plan(comm, inputs, outdir, nparts, *, part_format, on_overlap, force, layout, command):
    """Rank 0: check the output directory and the inputs; choose the parts."""
    if part_format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {part_format!r}")
    if not isinstance(nparts, (int, np.integer)) or nparts < 1:
        raise UsageError(f"--nparts must be a whole number >= 1, got {nparts!r}")
    check_output_directory(outdir, force)
    for source in inputs:
        if os.path.abspath(source).startswith(os.path.abspath(outdir) + os.sep):
            raise UsageError(f"{source} lies inside the output directory {outdir}")
    if part_format == "same" and len({detect_format(path) for path in inputs}) > 1:
        raise UsageError("--format same needs inputs of one format; use --format h5md to mix them")
    index = scan(inputs, on_overlap=on_overlap)
    if nparts > index.n_frames:
        raise UsageError(
            f"--nparts {nparts} is more than the {index.n_frames} frames of the trajectory"
        )
    formats = index.formats
    if part_format == "same":
        fmt = formats[0]
        if fmt == "H5MD":
            raise UsageError("--format same copies XTC, TRR or DCD frames; for H5MD input use --format h5md")
        if fmt == "DCD":
            for segment in index.segments:
                _dcd_header_fields(segment.path)  # refuses variants that cannot be copied
            if len({segment.details["nsavc"] for segment in index.segments}) > 1:
                raise UsageError("DCD segments with different frame intervals (NSAVC) cannot be split as DCD")
    else:
        fmt = "H5MD"
    parts = balanced_slices(index.n_frames, nparts)
    if fmt == "H5MD":
        layout.plan_chunks(min(stop - start for start, stop in parts), index.n_atoms)
    record = base_record(comm, command)
    record.update(
        source=[segment.describe() for segment in index.segments],
        n_frames=index.n_frames,
        n_atoms=index.n_atoms,
        format=fmt,
    )
    return SplitPlan(
        index=index,
        parts=parts,
        names=_part_names(nparts, EXTENSIONS[fmt]),
        part_format=fmt,
        temporary=temporary_name(outdir),
        output=os.path.abspath(outdir),
        layout=layout if fmt == "H5MD" else None,
        record=record,
    )


def _runs(index, start, stop):
    """Frames ``[start, stop)`` as runs ``(segment, first local frame, last local frame)``."""
    segments, local = index.locate(np.arange(start, stop))
    runs = []
    for number in np.unique(segments):
        mine = local[segments == number]
        runs.append((index.segments[int(number)], int(mine[0]), int(mine[-1])))
    return runs


def _copy_range(source, target, begin, end):
    """Append bytes ``[begin, end)`` of the open file *source* to the open file *target*."""
    remaining = end - begin
    position = begin
    while remaining > 0:
        try:
            sent = os.copy_file_range(source.fileno(), target.fileno(), remaining, position)
        except (AttributeError, OSError):
            source.seek(position)
            sent = target.write(source.read(min(remaining, COPY_BUFFER)))
        if sent == 0:
            raise InputError(f"{source.name}: ends before byte {end} (file changed or truncated?)")
        position += sent
        remaining -= sent


def _xdr_byte_range(segment, first, last):
    return int(segment.offsets[first]), int(segment.offsets[last + 1])


def _dcd_header_fields(path):
    """Endianness and frame layout of a DCD that can be split by copying frame records.

    Raises
    ------
    InputError
        For DCDs with fixed atoms (their first frame differs from the others) or 4 dimensions.
    """
    from MDAnalysis.lib.formats.libdcd import DCDFile

    with open(path, "rb") as handle:
        head = handle.read(88)
    order = "<" if struct.unpack("<i", head[:4])[0] == 84 else ">"
    if struct.unpack(order + "i", head[:4])[0] != 84 or head[4:8] != b"CORD":
        raise InputError(f"{path}: not a CHARMM/NAMD DCD header")
    fixed_atoms = struct.unpack(order + "i", head[40:44])[0]
    if fixed_atoms:
        raise InputError(
            f"{path}: DCD with {fixed_atoms} fixed atoms: its first frame is stored differently "
            "from the others, so it cannot be split by copying frames; use --format h5md"
        )
    with DCDFile(path) as dcd:
        header_size, frame_size = int(dcd._header_size), int(dcd._framesize)
        if dcd.ndims != 3 or dcd._firstframesize != dcd._framesize:
            raise InputError(f"{path}: DCD variant that cannot be split by copying frames; use --format h5md")
    return order, header_size, frame_size


def _write_dcd_part(path, runs):
    """A DCD part: the first segment's header with NSET, ISTART and NSTEP patched, then frames."""
    first_segment = runs[0][0]
    order, header_size, _ = _dcd_header_fields(first_segment.path)
    n_frames = sum(last - first + 1 for _, first, last in runs)
    header = first_segment.details
    istart = header["istart"] + runs[0][1] * header["nsavc"]
    with open(first_segment.path, "rb") as source:
        head = bytearray(source.read(header_size))
    struct.pack_into(order + "ii", head, 8, n_frames, istart)
    struct.pack_into(order + "i", head, 20, n_frames * header["nsavc"])
    with open(path, "wb") as target:
        preallocate(path, header_size + sum(
            (last - first + 1) * _dcd_header_fields(segment.path)[2] for segment, first, last in runs
        ))
        target.write(head)
        for segment, first, last in runs:
            _, segment_header, frame_size = _dcd_header_fields(segment.path)
            with open(segment.path, "rb") as source:
                target.flush()
                _copy_range(source, target, segment_header + first * frame_size,
                            segment_header + (last + 1) * frame_size)


def _write_xdr_part(path, runs):
    with open(path, "wb") as target:
        preallocate(path, sum(end - begin for begin, end in (_xdr_byte_range(*run) for run in runs)))
        for segment, first, last in runs:
            begin, end = _xdr_byte_range(segment, first, last)
            with open(segment.path, "rb") as source:
                target.flush()
                _copy_range(source, target, begin, end)


def _write_h5md_part(path, plan, start, stop):
    fields = [name for name in ("positions", "velocities", "forces", "box") if plan.index.has(name)]
    frames = np.arange(start, stop, dtype=np.int64)
    groups = plan.index.element_groups(frames, fields)
    record = dict(plan.record, part={"start": start, "stop": stop}, layout=plan.layout.describe(), fields=fields)
    part_plan = ConvertPlan(
        index=plan.index, layout=plan.layout, frames=range(start, stop), atom_indices=None,
        groups=groups, temporary=path, output=path, provenance=record,
    )
    write_h5md_file(path, part_plan, comm=SerialComm(), bar=_Silent())


class _Silent:
    def update(self, n=1):
        pass


def _write_part(plan, number):
    start, stop = plan.parts[number]
    path = os.path.join(plan.temporary, plan.names[number])
    if plan.part_format == "H5MD":
        _write_h5md_part(path, plan, start, stop)
    elif plan.part_format == "DCD":
        _write_dcd_part(path, _runs(plan.index, start, stop))
    else:
        _write_xdr_part(path, _runs(plan.index, start, stop))
    return os.path.getsize(path)


@entry_point
def split(inputs, outdir, nparts, *, comm=None, format="same", on_overlap="error", force=False,
          progress=None, chunk_frames=1, contiguous=False, compression="none",
          compression_level=None, shuffle=None, precision=None, command=None):
    """Split a trajectory into *nparts* balanced part files plus ``manifest.json``.

    Parameters
    ----------
    inputs : str or sequence of str
        XTC, TRR or DCD files (segments of one trajectory, in order); H5MD with ``format="h5md"``.
    outdir : str
        Directory to create (refused when not empty, unless *force*).
    nparts : int
        Number of parts, independent of the number of ranks; at most the frame count.
    comm : mpi4py communicator, optional
    format : {"same", "h5md"}
        ``same``: parts in the input's format, frames copied byte for byte; ``h5md``: H5MD
        parts with the layout options below.
    on_overlap : {"error", "drop"}
        As for convert.
    force : bool
        Replace the contents of a non-empty *outdir*.
    progress : bool, optional
        Progress bar on rank 0 (default: when standard error is a terminal).
    chunk_frames, contiguous, compression, compression_level, shuffle, precision
        Layout of H5MD parts (see :class:`h5mdtool.layout.Layout`).
    command : str, optional
        Command line recorded in the manifest.

    Returns
    -------
    dict
        Summary: output, manifest, format, n_frames, n_atoms, parts, bytes, seconds, ranks.

    Raises
    ------
    UsageError
        Bad options, *nparts* larger than the frame count, mixed formats with ``same``.
    InputError
        Unreadable inputs, DCD variants that cannot be copied frame by frame.
    OutputError
        A non-empty output directory without *force*, or one that cannot be created.
    """
    started = time.perf_counter()
    inputs = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    outdir = os.fspath(outdir)
    layout = root_call(
        comm, Layout, chunk_frames=chunk_frames, contiguous=contiguous, compression=compression,
        compression_level=compression_level, shuffle=shuffle, precision=precision,
    )
    plan = root_call(
        comm, _plan, comm, inputs, outdir, nparts, part_format=format, on_overlap=on_overlap,
        force=force, layout=layout, command=command,
    )
    if comm.rank == 0:
        os.makedirs(plan.temporary)
    comm.Barrier()
    mine = balanced_slices(len(plan.parts), comm.size)[comm.rank]
    sizes = {}
    with cleanup_on_abort(lambda: remove_quietly(plan.temporary)):
        my_frames = sum(plan.parts[n][1] - plan.parts[n][0] for n in range(*mine))
        with progress_bar(my_frames, f"split (rank 0 of {comm.size})", comm, enabled=progress) as bar:
            with capture_errors() as failure:
                for number in range(*mine):
                    sizes[number] = _write_part(plan, number)
                    bar.update(plan.parts[number][1] - plan.parts[number][0])
            try:
                agree(comm, failure[0])
            except BaseException:
                if comm.rank == 0:
                    remove_quietly(plan.temporary)
                raise
        gathered = comm.gather(sizes, root=0)
        summary = None
        if comm.rank == 0:
            for part_sizes in gathered:
                sizes.update(part_sizes)
            document = dict(plan.record, manifest_version=MANIFEST_VERSION, kind=MANIFEST_KIND)
            document["parts"] = [
                {"path": name, "start": start, "stop": stop, "n_frames": stop - start, "bytes": sizes[number]}
                for number, (name, (start, stop)) in enumerate(zip(plan.names, plan.parts))
            ]
            if plan.layout is not None:
                document["layout"] = plan.layout.describe()
            write_manifest(plan.temporary, document)
            publish(plan.temporary, plan.output)
            seconds = time.perf_counter() - started
            total = sum(sizes.values())
            summary = {
                "output": plan.output,
                "manifest": os.path.join(plan.output, "manifest.json"),
                "format": plan.part_format,
                "n_frames": plan.index.n_frames,
                "n_atoms": plan.index.n_atoms,
                "n_parts": len(plan.parts),
                "parts": document["parts"],
                "bytes": total,
                "n_ranks": comm.size,
                "seconds": seconds,
                "megabytes_per_second": total / seconds / 1e6 if seconds > 0 else None,
            }
        comm.Barrier()
    return summary

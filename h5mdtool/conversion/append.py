"""``h5mdtool convert NEW... --append FILE``: extend an H5MD file written by h5mdtool.

The new frames must follow the file's last step (overlapping frames are refused; with
``--on-overlap later`` the file's frames from the first new step on are removed, a restart
superseding them; with ``--on-overlap first`` the new frames the file holds are dropped) and
hold what the file holds: the same atoms (the file's ``id``
selects them from a full system), the same elements sampled alike, time when the file has
it, a box only where the file has one (frames without one get zero edges and a note, as in a
convert of all segments at once). They are stored exactly as the file stores its frames: same
chunks, codec and encodings.

How an interrupted append leaves the file: all the new frames, or none. HDF5 has no
transactions (a write cut short can leave a file whose datasets disagree), so the append
works on a copy and publishes it with one rename:

1. Rank 0 copies FILE to a hidden temporary beside it: a reflink where the file system
   shares blocks (XFS, Btrfs: instant), otherwise a copy made by the kernel (about the time
   of reading FILE once).
2. All ranks extend the copy's datasets and write the new frames into it, in parallel, with
   FILE's chunks, codec and encodings; the last, partial chunk of FILE is rewritten whole
   (its stored rows, then the first new frames), so no chunk is shared by two ranks.
3. Rank 0 records the append in the provenance and renames the copy over FILE.

A run stopped before step 3 (an error, Ctrl-C, SIGTERM, a killed rank) leaves FILE as it
was; the temporary is removed on errors and signals. A ``kill -9`` can leave it, hidden, with
the lock, which names every process of the append and the temporary: once none of those
processes runs, the next append (or convert to FILE) removes both and says so.
"""

import json
import os
import socket
import time

import numpy as np

from ..formats import check_trajectory, load_decoders, scan
from ..h5md.codecs import codec, register_plugins
from ..h5md.layout import Layout
from ..h5md.provenance import base_record
from ..h5md.units import text, unit_of
from ..h5md.writer import ELEMENT_NAMES, PARTICLES, PROVENANCE, TrajectoryWriter, read_provenance
from ..parallel.errors import InputError, OutputError, OverlapError, UsageError
from ..parallel.mpi import (
    abort_unless_collective, cleanup_on_abort, close_h5, closing_h5, discard_h5, entry_point, open_h5,
    require_parallel_h5py, root_call
)
from ..parallel.outputs import (
    claim_for_update, clone_file, is_write_failure, publish, remove_quietly, temporary_name, write_failure,
    write_failures_reported
)
from ..parallel.progress import progress_bar
from ..parallel.testhooks import delay
from .convert import ConvertPlan, missing_box_note

#: How a failure to write the working copy is reported: FILE itself was not touched.
UNCHANGED = "left unchanged: the new frames cannot be written"

#: Layout fields a file's provenance records, passed back to :class:`Layout`.
LAYOUT_FIELDS = ("chunk_frames", "compression", "compression_level", "shuffle", "precision",
                 "velocity_precision", "force_precision")


def _structure(path, handle):
    """The element groups of an h5mdtool file: [(fields, value paths by field, step path, n_rows)].

    Raises
    ------
    InputError
        If the file was not written by h5mdtool, or cannot grow.
    """
    record = read_provenance(handle)
    if record is None or PARTICLES not in handle:
        raise InputError(f"{path}: not written by h5mdtool (no {PROVENANCE} record): --append extends "
                         "h5mdtool's own files; convert it once (relayout) to get one")
    group = handle[PARTICLES]
    groups = []
    for name, element in ELEMENT_NAMES.items():
        if element not in group:
            continue
        value = group[f"{element}/value"]
        if value.chunks is None or value.maxshape[0] is not None:
            raise InputError(f"{path}: its {element} data cannot grow (contiguous, or written before h5mdtool "
                             "made datasets growable): convert it again to append to it")
        step = group[f"{element}/step"]
        for fields, paths, owner, _ in groups:
            if owner == step:  # hard-linked step: sampled with that group
                fields.append(name)
                paths[name] = value.name
                break
        else:
            groups.append(([name], {name: value.name}, step, value.shape[0]))
    if "box" in group and "edges" in group["box"] and hasattr(group["box/edges"], "keys"):
        for fields, paths, owner, _ in groups:
            if "positions" in fields:
                fields.append("box")
                paths["edges"] = group["box/edges/value"].name
    return record, [(tuple(fields), paths, owner.name, n) for fields, paths, owner, n in groups]


def _lead(handle, paths, step_path, n_rows, chunk):
    """The stored rows of the file's last, partial chunk (what the temporary file starts with)."""
    n_lead = n_rows % chunk
    rows = slice(n_rows - n_lead, n_rows)
    lead = {name: handle[path][rows] for name, path in paths.items()}
    lead["step"] = handle[step_path][rows]
    time_path = step_path.rsplit("/", 1)[0] + "/time"
    lead["time"] = handle[time_path][rows] if time_path in handle else None
    return lead


def _observables_per_frame(handle, n_rows):
    """The first time-dependent ``/observables`` element of *handle* with a value for each of
    its *n_rows* frames (a relayout carried it over), or None."""
    import h5py

    observables = handle.get("observables")
    if not isinstance(observables, h5py.Group):
        return None
    for name, element in observables.items():
        if isinstance(element, h5py.Group) and "step" in element and isinstance(element.get("value"), h5py.Dataset) \
                and element["value"].shape[:1] == (n_rows,):
            return element.name
    return None


def _allocated_late(group):
    """The first growable uncompressed dataset under *group* whose chunks HDF5 allocates when
    first written (see :func:`h5mdtool.h5md.layout.allocated_early`), or None."""
    import h5py

    found = []

    def visit(name, obj):
        if found or not isinstance(obj, h5py.Dataset) or not obj.chunks or obj.maxshape[0] is not None:
            return
        dcpl = obj.id.get_create_plist()
        if dcpl.get_nfilters() == 0 and dcpl.get_alloc_time() != h5py.h5d.ALLOC_TIME_EARLY:
            found.append(obj.name)

    group.visititems(visit)
    return found[0] if found else None


def _lock(target, holders):
    """Rank 0: the lock that keeps a second append to FILE from losing this one's frames,
    naming every process of this append (*holders*) and the working copy; (lock, working
    copy, note on a stale lock cleared first)."""
    if not os.path.isfile(target):
        raise InputError(f"{target}: no such file to append to")
    temporary = temporary_name(os.path.realpath(target))
    lock, note = claim_for_update(target, holders=holders, copy=temporary)
    return lock, temporary, note


def _plan(comm, inputs, target, temporary, *, on_overlap, on_truncated, format, velocities, forces, command):
    """Rank 0: check FILE and the new frames; the plan of the temporary file."""
    import h5py

    if not os.path.isfile(target):
        raise InputError(f"{target}: no such file to append to")
    try:
        with h5py.File(target, "r") as handle:
            record, groups = _structure(target, handle)
            layout = Layout(**{key: record["layout"].get(key) for key in LAYOUT_FIELDS if key in record["layout"]})
            chunks = handle[groups[0][1]["positions"]].chunks
            chunk = layout.chunk_frames = chunks[0]
            layout.split_xyz = chunks[2] < 3  # as the file was written, whatever the record says
            dtypes = {name: str(handle[path].dtype) for _, paths, _, _ in groups for name, path in paths.items()}
            n_atoms = handle[groups[0][1]["positions"]].shape[1]
            ids = handle[f"{PARTICLES}/id"][()] if f"{PARTICLES}/id" in handle else None
            last_steps = [int(handle[step][-1]) for _, _, step, n_rows in groups if n_rows]
            last_step = max(last_steps) if last_steps else None
            has_time = f"{PARTICLES}/position/time" in handle
            edges_unit = next((unit_of(handle[paths["edges"]]) for _, paths, _, _ in groups if "edges" in paths), None)
            box_group = handle.get(f"{PARTICLES}/box")
            boundary = None
            if box_group is not None:  # one value stands for every dimension, as the H5MD reader takes it
                boundary = [text(b) for b in np.atleast_1d(box_group.attrs.get("boundary", ["periodic"] * 3))]
                boundary = boundary * 3 if len(boundary) == 1 else boundary
            late = _allocated_late(handle[PARTICLES]) if comm.size > 1 else None
            observed = _observables_per_frame(handle, groups[0][3])
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise InputError(f"{target}: cannot be appended to ({error})") from None
    if observed:
        raise InputError(f"{target}: {observed} holds a value for each of its frames, which the new frames cannot "
                         "extend (MDAnalysis reads it at every frame, so it would no longer open the file): convert "
                         "the file and the new segments at once (only a single H5MD input carries /observables over)")
    if comm.size > 1 and not codec(layout.compression).parallel:
        raise InputError(f"{target} is compressed with {layout.compression}, which parallel HDF5 cannot write (it "
                         f"corrupts the chunks {layout.compression} leaves uncompressed): append without mpirun, or "
                         "convert the file again with --compression gzip or zstd")
    if late is not None:
        raise InputError(f"{target}: {late} is uncompressed and was made by one process with its chunks allocated "
                         "when first written (as h5mdtool made them before it asked HDF5 to allocate early), which "
                         "parallel HDF5 1.10.8 cannot grow (its collective write fails): append without mpirun, or "
                         "convert the file again once (files converted now grow on any number of ranks)")
    index = scan(inputs, on_overlap=on_overlap, format=format, on_truncated=on_truncated, continues=last_step)
    frames = np.arange(index.n_frames)
    notes = []
    if last_step is not None and index.step[0] <= last_step:
        restart = int(index.step[0])
        if on_overlap == "error":
            raise OverlapError(f"{inputs[0]} starts at step {restart} but {target} already reached step {last_step} "
                               "(a restart: --on-overlap later replaces the file's frames from that step on, as gmx "
                               "trjcat keeps the later copy; first keeps the file's frames)")
        if on_overlap == "later":
            kept = _rows_before(target, groups, restart)
            notes.append(f"removed {target}'s last {groups[0][3] - kept[0]} frame(s) (from step {restart} on): the "
                         "new frames restart there (--on-overlap later)")
            groups = [(fields, paths, step, n_rows) for (fields, paths, step, _), n_rows in zip(groups, kept)]
        else:
            frames = frames[index.step > last_step]
            if not len(frames):
                raise InputError(f"every new frame has a step the file already holds (up to step {last_step})")
            notes.append(f"dropped the first {index.n_frames - len(frames)} new frame(s): {target} holds their steps "
                         "(--on-overlap first)")
    check_trajectory(index, frames)
    atom_indices = None
    if index.n_atoms != n_atoms:
        if ids is None or len(ids) != n_atoms or ids.max() >= index.n_atoms:
            raise InputError(f"the new frames hold {index.n_atoms} atoms but {target} holds {n_atoms}"
                             + ("" if ids is None else " (its 'id' does not select them from the new frames)"))
        atom_indices = ids  # the file says which atoms of the full system it keeps
    if (index.time is not None) != has_time:
        raise InputError(f"{target} {'records' if has_time else 'records no'} time but the new frames "
                         f"{'do not' if has_time else 'do'}: an append cannot change that")
    wanted = [name for name in ("positions", "velocities", "forces")
              if index.has(name) and index.fields[name][frames].any()
              and not (name == "velocities" and not velocities) and not (name == "forces" and not forces)]
    held = [name for fields, _, _, _ in groups for name in fields if name != "box"]
    if set(wanted) != set(held):
        missing, extra = sorted(set(held) - set(wanted)), sorted(set(wanted) - set(held))
        raise InputError(f"{target} holds {', '.join(held)} but the new frames hold {', '.join(wanted)}"
                         + (f": pass --no-{extra[0]} to leave {extra[0]} out" if extra and not missing else ""))
    has_box = any("box" in fields for fields, _, _, _ in groups)
    new_box = index.has("box") and index.fields["box"][frames].any()
    if new_box and not has_box:
        raise InputError(f"the new frames hold a box but {target} has none: an append cannot add one")
    added = [axis for axis, old, new in zip("xyz", boundary or [], index.boundary) if new == "periodic" != old]
    if new_box and has_box and added:  # the file's boxes are not periodic there: the new ones would lose it
        raise InputError(f"the new frames' box is periodic in {', '.join(added)} but {target}'s is not (H5MD "
                         f"boundary {' '.join(boundary)}): an append cannot make it periodic")
    for name in wanted:
        stored = layout.encoding(name, index.dtype).dtype
        if stored != dtypes[name]:
            raise InputError(f"{target} stores {name} as {dtypes[name]} but the new frames would be {stored} "
                             "(double precision, or another --precision): an append cannot change it")
    box_encoding = layout.box_encoding(index.dtype)
    if has_box and (dtypes["edges"], edges_unit) != (box_encoding.dtype, box_encoding.unit):
        raise InputError(f"{target} stores its box as {dtypes['edges']} in {edges_unit} but h5mdtool now stores it "
                         f"as {box_encoding.dtype} in {box_encoding.unit} next to these positions: convert it "
                         "again to append to it")
    new_groups = index.element_groups(frames, wanted + (["box"] if has_box else []))
    if sorted(tuple(sorted(f)) for f, _ in new_groups) != sorted(tuple(sorted(f)) for f, _, _, _ in groups):
        raise InputError(f"the new frames sample their fields differently from {target} "
                         f"({[list(f) for f, _ in new_groups]} against {[list(f) for f, _, _, _ in groups]})")
    order = {tuple(sorted(f)): number for number, (f, _) in enumerate(new_groups)}
    plan_groups = [new_groups[order[tuple(sorted(fields))]] for fields, _, _, _ in groups]
    plan_groups = [(fields, group_frames) for (fields, _, _, _), (_, group_frames) in zip(groups, plan_groups)]
    if has_box:
        box = index.fields.get("box")
        position_frames = next(group_frames for fields, group_frames in plan_groups if "box" in fields)
        missing = len(position_frames) if box is None else int((~box[position_frames]).sum())
        if missing:
            notes.append(missing_box_note(missing))
    provenance = base_record(comm, command)
    provenance.update(inputs=index.describe(), layout=layout.describe(), fields=wanted)
    try:
        with h5py.File(target, "r") as handle:
            leads = [_lead(handle, paths, step, n_rows, chunk) for _, paths, step, n_rows in groups]
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise InputError(f"{target}: cannot be appended to ({error})") from None
    plan = ConvertPlan(index=index, layout=layout, frames=range(0), atom_indices=atom_indices, groups=plan_groups,
                       temporary=temporary, output=os.path.abspath(target), provenance=provenance,
                       lead=leads)
    return plan, groups, notes


def _rows_before(target, groups, restart):
    """How many stored rows of each element group of FILE come before step *restart*."""
    import h5py

    kept = []
    with h5py.File(target, "r") as handle:
        for _, _, step_path, _ in groups:
            steps = handle[step_path][()]
            if np.any(np.diff(steps) <= 0):
                raise InputError(f"{target}: its steps do not increase, so its frames cannot be replaced from "
                                 f"step {restart} on")
            kept.append(int(np.searchsorted(steps, restart)))
    return kept


def _clone(target, copy):
    """Rank 0: the working copy of FILE; how it was made."""
    try:
        return clone_file(target, copy)
    except OSError as error:
        raise OutputError(f"{target}: cannot make the working copy beside it ({error.strerror})") from None


def _publish(copy, target, summary):
    """Rank 0: record the append in the copy's provenance, then rename the copy over FILE."""
    import h5py

    with write_failures_reported(copy, target, UNCHANGED), closing_h5(h5py.File(copy, "r+")) as handle:
        record = read_provenance(handle)
        record.setdefault("appends", []).append(summary)
        handle[PROVENANCE].attrs["json"] = json.dumps(record, sort_keys=True, default=str)
    delay("append-commit", 0)
    publish(copy, os.path.realpath(target))  # through a symbolic link: the file it names grows


def _sizes(plan, groups):
    """The row count of each element group once the new frames are in."""
    return [n_rows + len(frames) for (_, _, _, n_rows), (_, frames) in zip(groups, plan.groups)]


def _allocate_new_chunks(copy, target, groups, sizes):
    """Rank 0, before a parallel append: grow the copy's datasets and store every chunk of
    the new rows that HDF5 would allocate only when first written; how many were stored.

    Parallel HDF5 1.10.8 allocates a dataset's chunks early and writes compressed chunks
    assuming they are: into the unallocated chunks of a compressed dataset a serial HDF5
    created (its default, chunks allocated when first written), the collective write failed
    (``addr overflow, addr = 18446744073709551615``, HDF5's undefined address) or hung.
    Storing each such chunk once, as the dataset's own encoding of zeros (a few hundred
    bytes: encoded once by HDF5, then copied with direct chunk writes), makes the file what
    parallel HDF5 expects; the collective write then replaces those chunks. The datasets
    allocated early are left to the collective resize.
    """
    import h5py

    from ..h5md.chunkcodec import chunk_stored, row_offsets

    stored = 0
    with write_failures_reported(copy, target, UNCHANGED), closing_h5(h5py.File(copy, "r+")) as handle:
        for (fields, paths, step_path, n_rows), size in zip(groups, sizes):
            element = handle[step_path].parent
            datasets = [handle[path] for path in paths.values()] + [element["step"]]
            datasets += [element["time"]] if "time" in element else []
            for dataset in datasets:
                if not _allocated_when_written(dataset):
                    continue
                if dataset.shape[0] != size:
                    dataset.resize((size,) + dataset.shape[1:])
                zeros = None
                rows = dataset.chunks[0]
                for first in range(n_rows - n_rows % rows, size, rows):
                    for offset in row_offsets(dataset):
                        corner = (first,) + offset
                        if chunk_stored(dataset, corner):  # a lookup, not a walk of the chunk index
                            continue
                        if zeros is None:  # HDF5 encodes it once, with the dataset's own filters
                            dataset[tuple(slice(c, min(c + n, s)) for c, n, s
                                          in zip(corner, dataset.chunks, dataset.shape))] = 0
                            zeros = dataset.id.read_direct_chunk(corner)
                        else:
                            dataset.id.write_direct_chunk(corner, zeros[1], filter_mask=zeros[0])
                        stored += 1
    return stored


def _allocated_when_written(dataset):
    """Whether HDF5 allocates the chunks of growable *dataset* only when they are first written."""
    import h5py

    if dataset.chunks is None or dataset.maxshape[0] is not None:
        return False
    return dataset.id.get_create_plist().get_alloc_time() != h5py.h5d.ALLOC_TIME_EARLY


def _extend(plan, groups, comm, bar, block_bytes, target):
    """Collective: grow the copy's datasets and write the new frames (after FILE's last full chunk)."""
    from ..formats import TrajectoryReader
    from .convert import _write_group

    sizes = _sizes(plan, groups)
    h5file = open_h5(plan.temporary, "r+", comm, rdcc_nbytes=0)
    try:
        writer = TrajectoryWriter.extend(h5file, [(fields, paths) for fields, paths, _, _ in groups], sizes, comm)
        with TrajectoryReader(plan.index, plan.atom_indices) as reader:
            for number, (_, _, _, n_rows) in enumerate(groups):
                n_lead = len(plan.lead[number]["step"])
                _write_group(writer, number, plan, reader, comm, bar, block_bytes, row_offset=n_rows - n_lead)
        opened, h5file = h5file, None
        close_h5(opened)  # writes HDF5's metadata, which a full disk can refuse too
    except BaseException as error:
        failure = (OutputError(write_failure(error, plan.temporary, target, UNCHANGED)) if is_write_failure(error)
                   else error)
        abort_unless_collective(comm, failure)
        if h5file is not None:
            discard_h5(h5file, plan.temporary, comm)
        if failure is error:
            raise
        raise failure from None


@entry_point
def append(inputs, target, *, comm=None, on_overlap="error", on_truncated="error", format=None, velocities=True,
           forces=True, progress=None, block_bytes=None, command=None):
    """Append the frames of trajectory *inputs* to the h5mdtool H5MD file *target*.

    Parameters
    ----------
    inputs : str or sequence of str
        New segments, in order; their frames must follow the file's last step.
    target : str
        An H5MD file written by h5mdtool (with growable datasets).
    comm : mpi4py communicator, optional
    on_overlap : {"error", "later", "first"}
        New frames at steps the file (or an earlier new segment) holds: refuse; remove the
        file's frames from the first new step on (a restart supersedes them); or drop the new
        frames the file holds. ``"drop"`` is the older name of ``"first"``.
    on_truncated, format : see :func:`h5mdtool.convert`
    velocities, forces : bool
        False leaves out new velocities (forces) the file has no element for.
    progress : bool, optional
    block_bytes : int, optional
        Memory for one block of frames (default: :func:`h5mdtool.conversion.convert.default_block_bytes`).
    command : str, optional

    Returns
    -------
    dict
        Summary: target, frames before and added, per element, seconds (the same on every rank).

    Raises
    ------
    InputError
        A file not written by h5mdtool or that cannot grow; new frames that overlap it, hold
        other atoms or other elements, or record time or a box where the file does not.
    """
    started = time.perf_counter()
    inputs = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    target = os.fspath(target)
    require_parallel_h5py(comm)
    register_plugins()  # the file's chunks may use hdf5plugin's filters, on every rank
    if comm.rank != 0:
        load_decoders(inputs, format)
    holders = comm.allgather((socket.gethostname(), os.getpid()))
    lock, temporary, stale = root_call(comm, _lock, target, holders)
    with cleanup_on_abort(lambda: remove_quietly(lock)):
        plan, groups, notes = root_call(comm, _plan, comm, inputs, target, temporary, on_overlap=on_overlap,
                                        on_truncated=on_truncated, format=format, velocities=velocities,
                                        forces=forces, command=command)
        notes = ([stale] if stale else []) + notes
        added = [len(frames) for _, frames in plan.groups]
        summary = {"created": plan.provenance["created"], "command": plan.provenance["command"],
                   "inputs": plan.provenance["inputs"], "frames_added": added, "n_ranks": comm.size,
                   "notes": notes}
        with cleanup_on_abort(lambda: remove_quietly(plan.temporary)):
            summary["copy"] = root_call(comm, _clone, target, plan.temporary)
            if comm.size > 1:
                root_call(comm, _allocate_new_chunks, plan.temporary, target, groups, _sizes(plan, groups))
            with progress_bar(sum(added), "append", comm, enabled=progress) as bar:
                _extend(plan, groups, comm, bar, block_bytes, target)
            root_call(comm, _publish, plan.temporary, target, summary)
        root_call(comm, remove_quietly, lock)
    return {
        "target": plan.output,
        "n_frames_before": [n for _, _, _, n in groups],
        "notes": notes,
        "n_frames_added": added,
        "elements": [list(fields) for fields, _, _, _ in groups],
        "copy": summary["copy"],
        "n_ranks": comm.size,
        "seconds": time.perf_counter() - started,
    }


def check_append_options(output, append, **layout_options):
    """Refuse option combinations that make no sense with ``--append``.

    Raises
    ------
    UsageError
    """
    if output is not None:
        raise UsageError("give --output or --append, not both")
    exact = ("begin", "end", "dt", "index_file")  # any value, 0 and 1 included, is a choice
    given = sorted(name for name, value in layout_options.items()
                   if (value is not None if name in exact else value not in (None, False, "auto", 1, "hdf5")))
    if given:
        spelled = {"begin": "-b", "end": "-e", "index_file": "-n/--index", "atom_indices_file": "--atom-indices"}
        names = ", ".join(spelled.get(g, "--" + g.replace("_", "-")) for g in given)
        raise UsageError(f"--append keeps the file's own layout; drop {names}")

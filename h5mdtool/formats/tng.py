"""GROMACS TNG trajectories, decoded by pytng (the TNG library), checked by h5mdtool first.

A TNG file is a sequence of blocks, each a header -- header size, contents size, block id,
an MD5 hash of the contents (all zeros when not computed), a name and a version, as int64
in the file's byte order -- followed by its contents. After the general-information,
molecule and other header blocks come frame sets: a frame-set block (its first frame and
frame count) followed by the data blocks of those frames (positions, velocities, forces,
box shape and others, often compressed).

The TNG library trusts what it reads: a damaged block can crash it (measured with pytng
0.3.4: two flipped bytes in a forces block ended the process with a segmentation fault while
the file was being opened). So the scan (rank 0) first walks every block header itself,
checks each against the file size, and checks the MD5 hash of every block that has one,
reading the whole file once; only then does pytng open it. A file that ends inside a block
is refused (the TNG library cannot open it, so ``on_truncated="drop"`` cannot apply).

Data blocks are written at their own strides (in integrator steps; pytng gives one per
block). The frames of the trajectory are the steps at which positions, velocities or forces
are stored (every multiple of the block's stride below the file's step count, as pytng and
MDAnalysis read them); each field is present at the multiples of its own stride, like the
per-frame fields of a TRR. The box is read at the scan (it is small) at its own stride.
Values are in nm, nm/ps and kJ/(mol nm), GROMACS's units and the TNG default (distance unit
10^-9 m, which the scan checks); time is converted from s to ps with MDAnalysis's units.
"""

import hashlib
import os
import struct
import warnings

import numpy as np

from ..parallel.errors import InputError
from .base import Format, LibraryName, Segment, file_stat, reason

GENERAL_INFO, FRAME_SET = 0, 2
#: h5mdtool field -> TNG block name (as pytng names them).
BLOCKS = {"positions": "TNG_TRAJ_POSITIONS", "velocities": "TNG_TRAJ_VELOCITIES", "forces": "TNG_TRAJ_FORCES"}
BOX_BLOCK = "TNG_TRAJ_BOX_SHAPE"
#: Fixed part of a block header: header size, contents size, id, MD5 hash.
FIXED = 8 * 3 + 16
#: Largest credible block header (a name of at most a few hundred characters).
MAX_HEADER = 4096
#: The distance unit h5mdtool reads: 10^-9 m (nm), the TNG default.
NM_EXPONENT = -9
HASH_CHUNK = 1 << 24


def _byte_order(first):
    """``<`` or ``>``: TNG files start with the header size of the first block in their byte order."""
    return "<" if first[0] != 0 and first[7] == 0 else ">"


def _strings(data, position, count):
    """Skip *count* NUL-terminated strings of *data* from *position*; returns the new position."""
    for _ in range(count):
        end = data.find(b"\0", position)
        if end < 0:
            raise ValueError("a text field without its terminating NUL")
        position = end + 1
    return position


def parse_general_info(contents, order, version):
    """``(variable atom count flag, distance unit exponent)`` of a general-information block."""
    position = _strings(contents, 0, 9)  # program, user, computer names, signatures, force field
    position += 8  # creation time
    variable = contents[position]
    position += 1 + 8 * 5  # frame set size, first/last frame set positions, medium/long strides
    exponent = NM_EXPONENT
    if version >= 3:
        exponent = struct.unpack_from(order + "q", contents, position)[0]
    return variable, exponent


def walk(path, fd, size):
    """Check every block of a TNG file; return what the scan needs.

    Returns
    -------
    dict
        ``order`` (byte order), ``variable_atoms`` (flag), ``exponent`` (distance unit),
        ``frame_sets`` (list of (first frame, frame count, byte offset)), ``blocks`` (count).

    Raises
    ------
    InputError
        Not a TNG file, a block header or size that does not fit the file (truncated or
        corrupt), or a block whose contents fail their MD5 hash.
    """
    first = os.pread(fd, 8, 0)
    if len(first) < 8:
        raise InputError(f"{path}: not a TNG file ({size} bytes)")
    order = _byte_order(first)
    header_format = struct.Struct(order + "qqq16s")
    position, blocks, frame_sets = 0, 0, []
    info = None
    frame_set = None  # (first frame, count) of the frame set being walked
    while position < size:
        head = os.pread(fd, MAX_HEADER, position)
        where = f"{path}: TNG block {blocks} at byte {position}"
        if len(head) < FIXED:
            _truncated(path, position, len(head), FIXED, frame_set)
        header_size, contents_size, block_id, digest = header_format.unpack_from(head)
        if blocks == 0 and (block_id != GENERAL_INFO or not FIXED < header_size <= MAX_HEADER):
            raise InputError(f"{path}: not a TNG file (its first block is not a TNG general-information block)")
        if not FIXED < header_size <= MAX_HEADER or contents_size < 0:
            raise InputError(f"{where} declares a {header_size}-byte header and {contents_size} bytes of "
                             "contents: corrupt")
        name_end = head.find(b"\0", FIXED, header_size)
        if len(head) < header_size or name_end < 0 or header_size < name_end + 1 + 8:
            if position + header_size > size:
                _truncated(path, position, size - position, header_size + contents_size, frame_set)
            raise InputError(f"{where}: a block header without a name and version: corrupt")
        name = head[FIXED:name_end].decode("ascii", "replace")
        version = struct.unpack_from(order + "q", head, name_end + 1)[0]
        start, end = position + header_size, position + header_size + contents_size
        if end > size:
            _truncated(path, position, size - position, header_size + contents_size, frame_set)
        needs_contents = block_id in (GENERAL_INFO, FRAME_SET)
        contents = _check_hash(path, fd, start, contents_size, digest, where, name, frame_set,
                               keep=needs_contents)
        try:
            if block_id == GENERAL_INFO:
                info = parse_general_info(contents, order, version)
            elif block_id == FRAME_SET:
                first_frame, count = struct.unpack_from(order + "qq", contents)
                if first_frame < 0 or count < 0:
                    raise ValueError(f"frame set of {count} frames from frame {first_frame}")
                frame_set = (first_frame, count)
                frame_sets.append((first_frame, count, position))
        except (struct.error, ValueError, IndexError) as error:
            raise InputError(f"{where} ({name}) cannot be parsed ({reason(error)}): corrupt") from None
        position = end
        blocks += 1
    if info is None:
        raise InputError(f"{path}: not a TNG file (no general-information block)")
    return {"order": order, "variable_atoms": info[0], "exponent": info[1], "frame_sets": frame_sets,
            "blocks": blocks}


def _frames_text(frame_set):
    if frame_set is None:
        return ""
    first, count = frame_set
    return f" (in the frame set of TNG frames {first} to {first + count - 1})"


def _truncated(path, position, have, need, frame_set):
    raise InputError(
        f"{path}: ends inside the TNG block at byte {position}{_frames_text(frame_set)}: {have} byte(s) of the "
        f"{need} it needs (an incomplete file, as a crashed run leaves); the TNG library cannot open such a "
        "file, so it cannot be read in part either"
    )


def _check_hash(path, fd, start, size, digest, where, name, frame_set, keep):
    """Check a block's contents against its MD5 hash (when it has one); return them if *keep*."""
    check = digest != bytes(16)
    if not (check or keep):
        return None
    md5 = hashlib.md5() if check else None
    parts, offset = [], start
    while offset < start + size:
        chunk = os.pread(fd, min(HASH_CHUNK, start + size - offset), offset)
        if not chunk:
            raise InputError(f"{where}: file ends at byte {offset} (changed while it was scanned?)")
        if md5 is not None:
            md5.update(chunk)
        if keep:
            parts.append(chunk)
        offset += len(chunk)
    if md5 is not None and md5.digest() != digest:
        raise InputError(f"{where} ({name}){_frames_text(frame_set)} fails its MD5 check: the file is corrupt")
    return b"".join(parts) if keep else None


def _open(path):
    """A pytng iterator over *path*, its warnings silenced (strides it corrects, for example)."""
    import pytng

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytng.TNGFileIterator(path, "r")


def _seconds_to_ps():
    from MDAnalysis import units

    return float(units.get_conversion_factor("time", "second", "ps"))


class TNGFormat(Format):
    """GROMACS TNG trajectories: positions, velocities, forces and box, each at its own stride."""

    name = "TNG"
    extensions = (".tng",)
    decoders = ("pytng",)

    @classmethod
    def scan(cls, path, on_truncated="error"):
        stat = file_stat(path)
        try:
            with open(path, "rb", buffering=0) as handle:
                layout = walk(path, handle.fileno(), stat.st_size)
        except OSError as error:
            raise InputError(f"{path}: cannot be read ({reason(error)})") from None
        if layout["variable_atoms"]:
            raise InputError(f"{path}: a TNG file whose atom count varies; h5mdtool needs the same atoms in every frame")
        if layout["exponent"] != NM_EXPONENT:
            raise InputError(
                f"{path}: TNG distance unit 10^{layout['exponent']} m; h5mdtool, like MDAnalysis, reads TNG "
                f"files in nm (10^{NM_EXPONENT} m), as GROMACS writes them"
            )
        try:
            import pytng  # noqa: F401
        except ImportError:
            raise InputError(f"{path}: reading TNG needs pytng ('pip install --no-deps pytng')") from None
        with LibraryName(path) as name:
            try:
                iterator = _open(name)
            except (OSError, ValueError) as error:
                raise InputError(f"{path}: the TNG library cannot open it ({reason(error)})") from None
            try:
                return cls._scan_open(path, stat, iterator)
            finally:
                iterator._close()

    @classmethod
    def _scan_open(cls, path, stat, iterator):
        n_steps, n_atoms = int(iterator.n_steps), int(iterator.n_atoms)
        strides = {name: int(stride) for name, stride in iterator.block_strides.items()}
        present_blocks = {field: block for field, block in BLOCKS.items() if block in strides}
        if "positions" not in present_blocks:
            raise InputError(f"{path}: a TNG file without positions")
        if n_atoms < 1 or n_steps < 1:
            raise InputError(f"{path}: a TNG file of {n_atoms} atoms and {n_steps} steps")
        for block in list(present_blocks.values()) + ([BOX_BLOCK] if BOX_BLOCK in strides else []):
            if strides[block] < 1:
                raise InputError(f"{path}: TNG block {block} has stride {strides[block]}: corrupt")
        step_sets = {field: np.arange(0, n_steps, strides[block], dtype=np.int64)
                     for field, block in present_blocks.items()}
        steps = np.unique(np.concatenate(list(step_sets.values())))
        fields = {field: np.isin(steps, own) for field, own in step_sets.items()}
        dtypes = {field: iterator.make_ndarray_for_block_from_name(block).dtype.str
                  for field, block in present_blocks.items()}
        to_ps = _seconds_to_ps()
        time = np.empty(len(steps), np.float64)
        box = None
        if BOX_BLOCK in strides:
            fields["box"] = steps % strides[BOX_BLOCK] == 0
            box = np.zeros((len(steps), 3, 3), np.float64)
            shape = iterator.make_ndarray_for_block_from_name(BOX_BLOCK)
        for frame, step in enumerate(steps):
            current = iterator.read_step(int(step))
            seconds = current.get_time()
            if seconds is None or not np.isfinite(seconds):
                raise InputError(f"{path}: frame {frame} (TNG step {step}) has {'no' if seconds is None else 'a non-finite'} time")
            time[frame] = seconds * to_ps
            if box is not None and fields["box"][frame]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    current.get_box(shape)
                if not current.read_success:
                    raise InputError(f"{path}: cannot read the box of frame {frame} (TNG step {step})")
                if not np.isfinite(shape).all():
                    raise InputError(f"{path}: frame {frame} (TNG step {step}) has a non-finite box")
                box[frame] = shape.reshape(3, 3)
        if box is not None:
            fields["box"] &= box.reshape(len(steps), -1).any(axis=1)
        return Segment(
            path=path, format=cls.name, n_atoms=n_atoms, n_frames=len(steps), size=stat.st_size,
            mtime=stat.st_mtime, step=steps, time=time, fields=fields,
            dtype="float64" if any(np.dtype(d).itemsize == 8 for d in dtypes.values()) else "float32",
            details={"strides": strides, "dtypes": dtypes, "box": box, "n_steps": n_steps},
        )

    def __init__(self, segment, atom_indices=None):
        super().__init__(segment, atom_indices)
        self.iterator = None
        self.library_name = LibraryName(segment.path)
        try:
            self.iterator = _open(self.library_name.name)
        except (OSError, ValueError, ImportError) as error:
            self.library_name.close()
            raise self.error(0, error) from None
        self.buffers = {field: self.iterator.make_ndarray_for_block_from_name(block)
                        for field, block in BLOCKS.items() if field in segment.fields}

    def read_frames(self, frames, block, row, fields):
        segment = self.segment
        box = segment.details["box"]
        for frame in frames:
            frame = int(frame)
            step = int(segment.step[frame])
            try:
                current = self.iterator.read_step(step)
                for name in fields:
                    buffer = self.buffers[name]
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        current.get_blockid(self.iterator.block_ids[BLOCKS[name]], buffer)
                    if not current.read_success:
                        raise OSError(f"the TNG library cannot read its {name} (TNG step {step})")
                    getattr(block, name)[row] = buffer if self.atom_indices is None else buffer[self.atom_indices]
            except (OSError, ValueError, IndexError, TypeError) as error:
                raise self.error(frame, error) from None
            block.edges[row] = box[frame] if box is not None and segment.fields["box"][frame] else 0.0
            row += 1
        return row

    def close(self):
        if self.iterator is not None:
            self.iterator._close()
            self.iterator = None
        self.library_name.close()

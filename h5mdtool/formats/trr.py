"""GROMACS TRR: headers and data read by h5mdtool itself with numpy.

A TRR frame (big-endian XDR) is a header -- magic 1993, the version string
``GMX_trn_file``, thirteen sizes and counts (input record, energies, box, virial,
pressure, topology, symmetry, positions, velocities, forces, atoms, step, energy terms),
then time and lambda as floats or doubles -- followed by the box, virial, pressure,
positions, velocities and forces it declares, uncompressed, in single or double precision.
Each frame says which of positions, velocities and forces it holds, so a field may be
saved at other steps than the positions (``nstvout != nstxout``).

The scan walks every header (one ``pread`` each) and checks its sizes against the atom
count and the file before anything is read; MDAnalysis's ``libmdaxdr`` can crash on a
damaged TRR header (it trusts the sizes the header declares), so it is not used at all: frames are uncompressed
and numpy reads them directly.
"""

import os
import struct

import numpy as np

from ..parallel.errors import InputError
from .base import STEP_MODULUS, Format, FrameWalk, Segment, truncated, unwrap_steps, with_stored_steps

MAGIC = 1993
VERSION = b"GMX_trn_file"
#: Bytes of the header before time and lambda.
FIXED = 76
_PREFIX = struct.Struct(">iii12s")
_SIZES = struct.Struct(">13i")
SIZE_NAMES = ("ir", "e", "box", "vir", "pres", "top", "sym", "x", "v", "f", "natoms", "step", "nre")
#: Frame sections in file order, after the header.
SECTIONS = ("box", "vir", "pres", "x", "v", "f")
FIELD_SECTION = {"positions": "x", "velocities": "v", "forces": "f"}


def _float_size(sizes, n_atoms):
    """Bytes per real number of a frame (4 or 8), from the first non-empty section."""
    if sizes["box"]:
        return sizes["box"] // 9
    for name in ("x", "v", "f"):
        if sizes[name]:
            return sizes[name] // (3 * n_atoms) if n_atoms else 0
    return 4


def parse_header(path, frame, position, head, n_atoms):
    """Sizes of one TRR frame from its header bytes, checked.

    Returns
    -------
    dict
        ``natoms``, ``step``, ``real`` (4 or 8), ``header`` (bytes), ``time``, and the byte
        size of each section.
    """
    where = f"{path}: frame {frame} at byte {position}"
    magic, slen, strlen, version = _PREFIX.unpack_from(head)
    if magic != MAGIC:
        if frame == 0:
            raise InputError(f"{path}: not a TRR file (magic number {magic}, expected {MAGIC})")
        raise InputError(f"{where} does not start with a TRR header (magic number {magic}): the file is corrupt")
    if slen != len(VERSION) + 1 or strlen != len(VERSION) or version != VERSION:
        raise InputError(f"{where}: TRR header without the GMX_trn_file version string: corrupt")
    sizes = dict(zip(SIZE_NAMES, _SIZES.unpack_from(head, 24)))
    natoms = sizes["natoms"]
    if natoms < 1 or (n_atoms is not None and natoms != n_atoms):
        expected = "" if n_atoms is None else f" but frame 0 has {n_atoms}: h5mdtool needs the same atoms in every frame"
        raise InputError(f"{where} declares {natoms} atoms{expected}")
    for name in ("ir", "e", "top", "sym"):
        if sizes[name]:
            raise InputError(f"{where} holds a {name} record ({sizes[name]} bytes), which trajectories do not: corrupt")
    real = _float_size(sizes, natoms)
    if real not in (4, 8):
        raise InputError(f"{where}: section sizes do not match {natoms} atoms in single or double precision: corrupt")
    expected = {"box": 9 * real, "vir": 9 * real, "pres": 9 * real, "x": 3 * natoms * real,
                "v": 3 * natoms * real, "f": 3 * natoms * real}
    for name, full in expected.items():
        if sizes[name] not in (0, full):
            raise InputError(f"{where}: its {name} section has {sizes[name]} bytes, not 0 or {full}: corrupt")
    time, _ = struct.unpack_from(">ff" if real == 4 else ">dd", head, FIXED)  # checked when read
    return dict(sizes, real=real, header=FIXED + 2 * real, time=time)


#: One frame of a walked TRR file, as :meth:`Walk.rows` packs it: the bytes of the header and
#: of each section, the atom count, the step as stored, bytes per real, whether the box is set, and the time.
ROW = np.dtype([("header", np.int64)] + [(name, np.int64) for name in SECTIONS]
               + [("natoms", np.int64), ("step", np.int64), ("real", np.int64), ("box_set", bool), ("time", np.float64)])
#: Bytes read at a frame start: the header and the box.
HEAD_BYTES = FIXED + 16 + 9 * 8


class Walk(FrameWalk):
    """The walk through a TRR file's frames, one header at a time, each checked
    (:class:`~h5mdtool.formats.base.FrameWalk`); ``records`` holds each frame's
    :func:`parse_header` record."""

    kind = "TRR"
    head_bytes = HEAD_BYTES
    #: Frame 0's atom count is the 11th size after the version string.
    count_bytes = 24 + 4 * 11

    def run(self, stop=None):
        path, size, fd = self.path, self.size, self.fd
        position, frame, n_atoms = self.position, self.frame, self.n_atoms
        offsets, records = self.offsets, self.records
        try:
            while position < size and (stop is None or position < stop):
                head = os.pread(fd, HEAD_BYTES, position)  # the header and the box
                if frame == 0 and len(head) >= 4 and struct.unpack_from(">i", head)[0] != MAGIC:
                    raise InputError(f"{path}: not a TRR file (magic number {struct.unpack_from('>i', head)[0]}, "
                                     f"expected {MAGIC})")
                if len(head) < FIXED + 8 or (len(head) < FIXED + 16 and _needs_double(head)):
                    if frame == 0:
                        raise InputError(f"{path}: not a TRR file ({size} bytes, shorter than a frame header)")
                    self.dropped = truncated(path, frame, position, len(head), None, self.on_truncated)
                    return False
                record = parse_header(path, frame, position, head, n_atoms)
                n_atoms = self.n_atoms = record["natoms"]
                length = record["header"] + sum(record[name] for name in SECTIONS)
                if position + length > size:
                    self.dropped = truncated(path, frame, position, size - position, length, self.on_truncated)
                    return False
                # a box of zeros is GROMACS's "no box" (MDAnalysis reads None)
                record["box_set"] = bool(record["box"]) and np.frombuffer(
                    head, ">f4" if record["real"] == 4 else ">f8", 9, record["header"]).any()
                offsets.append(position)
                records.append(record)
                position += length
                frame += 1
        finally:
            self.position, self.frame = position, frame
        return True

    def rows(self):
        return np.array([(r["header"], *(r[name] for name in SECTIONS), r["natoms"], r["step"], r["real"], r["box_set"], r["time"])
                         for r in self.records], ROW)

    @staticmethod
    def candidates(words, n_atoms):
        # magic, the version string's two lengths, then (word 16) the atom count
        hits = np.flatnonzero(words[:-16] == MAGIC)
        version = (words[hits + 1] == len(VERSION) + 1) & (words[hits + 2] == len(VERSION))
        return hits[version & (words[hits + 16] == n_atoms)]

    @staticmethod
    def first_atom_count(head):
        if len(head) < Walk.count_bytes or struct.unpack_from(">i", head)[0] != MAGIC:
            return None
        natoms = struct.unpack_from(">i", head, Walk.count_bytes - 4)[0]
        return natoms if natoms >= 1 else None


class TRRFormat(Format):
    """GROMACS TRR trajectories: positions, velocities and forces, each present per frame."""

    name = "TRR"
    extensions = (".trr",)
    step_modulus = STEP_MODULUS
    walker = Walk

    @classmethod
    def segment(cls, path, stat, offsets, rows, dropped):
        """The :class:`Segment` of a walked file: frame starts and the end of the last frame
        (*offsets*) and what each frame's header says (*rows*, :data:`ROW`), checked together.

        Raises
        ------
        InputError
            Single- and double-precision frames mixed; no frame with positions, velocities
            or forces.
        """
        reals = np.unique(rows["real"])
        if len(reals) > 1:
            raise InputError(f"{path}: mixes single- and double-precision frames")
        real = int(reals[0])
        fields = {name: rows[section] > 0 for name, section in (("positions", "x"), ("velocities", "v"),
                                                                 ("forces", "f"))}
        fields["box"] = rows["box_set"].copy()
        fields = {name: present for name, present in fields.items() if present.any()}
        if not any(name in fields for name in FIELD_SECTION):
            raise InputError(f"{path}: no frame holds positions, velocities or forces")
        layout = np.stack([rows["header"]] + [rows[name] for name in SECTIONS], axis=1).astype(np.int64)
        stored = rows["step"].astype(np.int64)
        step = unwrap_steps(stored)
        return Segment(
            path=path, format=cls.name, n_atoms=int(rows["natoms"][0]), n_frames=len(rows),
            size=stat.st_size, mtime=stat.st_mtime,
            step=step,
            time=rows["time"].astype(np.float64),
            fields=fields, dtype="float32" if real == 4 else "float64",
            offsets=np.asarray(offsets, np.int64), details=with_stored_steps({"real": real, "sections": layout}, stored, step),
            dropped=dropped,
        )

    def __init__(self, segment, atom_indices=None):
        super().__init__(segment, atom_indices)
        try:
            self.fd = os.open(segment.path, os.O_RDONLY)
        except OSError as error:
            raise self.error(0, error) from None
        real = segment.details["real"]
        self.real = np.dtype(">f4" if real == 4 else ">f8")
        # byte offset of each section within a frame: header, box, vir, pres, x, v, f
        self.starts = np.cumsum(segment.details["sections"], axis=1)

    def _section(self, frame, index, count):
        """The *count* reals of section *index* (0 box ... 5 f) of *frame*."""
        start = int(self.segment.offsets[frame] + self.starts[frame, index])
        data = os.pread(self.fd, count * self.real.itemsize, start)
        if len(data) != count * self.real.itemsize:
            raise EOFError(f"file ends at byte {start + len(data)} (changed since it was scanned?)")
        return np.frombuffer(data, self.real)

    def read_frames(self, frames, block, row, fields):
        n = self.segment.n_atoms
        box = self.segment.fields.get("box")
        for frame in frames:
            frame = int(frame)
            try:
                for name in fields:
                    index = SECTIONS.index(FIELD_SECTION[name])
                    values = self._section(frame, index, 3 * n).reshape(n, 3)
                    if self.atom_indices is not None:
                        values = values[self.atom_indices]
                    getattr(block, name)[row] = values
                if box is not None and box[frame]:
                    block.edges[row] = self._section(frame, 0, 9).reshape(3, 3)
                else:
                    block.edges[row] = 0.0
            except (OSError, EOFError, ValueError) as error:
                raise self.error(frame, error) from None
            row += 1
        return row

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _needs_double(head):
    """True when a (short) header's sizes say its time and lambda are doubles."""
    if len(head) < FIXED:
        return True
    sizes = dict(zip(SIZE_NAMES, _SIZES.unpack_from(head, 24)))
    return _float_size(sizes, max(sizes["natoms"], 1)) == 8

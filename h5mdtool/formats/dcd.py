"""CHARMM/NAMD DCD, read with MDAnalysis's ``libdcd``.

DCD frames have a fixed size, so the header (read by libdcd: atom count, ISTART, NSAVC,
DELTA, unit cell flag) and the file size say where every frame is; the scan refuses a file
whose size is not the header plus whole frames. Positions are float32 Angstrom, converted to
nm correctly rounded (within half a unit in the last place of the nm value). Steps are
``ISTART + frame * NSAVC`` and times ``(frame + ISTART / NSAVC) * DELTA * NSAVC`` (DELTA in
AKMA units, converted to ps), as MDAnalysis's DCDReader computes them.
"""

import numpy as np

from ..parallel.errors import InputError
from .base import ANGSTROM_PER_NM, Format, LibraryName, Segment, file_stat, reason, truncated


def angstrom_to_nm(values):
    """Angstrom to nm, correctly rounded to float32 (within half a unit in the last place).

    DCD stores float32 Angstroms, so nm values cannot all be exact: reading them back as
    Angstroms (times 10 in float32) agrees with the source to about 1.2e-7 relative.
    """
    return (np.asarray(values, dtype=np.float64) / ANGSTROM_PER_NM).astype(np.float32)


def unitcell_to_edges(unitcells):
    """Box vectors (rows, Angstrom) from DCD unit-cell records, as MDAnalysis interprets them.

    The record is ``[A, gamma, B, beta, alpha, C]`` with angle cosines (CHARMM, NAMD > 2.5)
    or degrees (NAMD 2.5), or the six box-matrix entries (new CHARMM).
    """
    from MDAnalysis.lib.mdamath import triclinic_box, triclinic_vectors

    edges = np.zeros((len(unitcells), 3, 3), np.float64)
    for i, cell in enumerate(np.asarray(unitcells, dtype=np.float64)):
        if not np.any(cell):
            continue
        dims = cell[[0, 2, 5, 4, 3, 1]]
        if np.all(np.abs(dims[3:]) <= 1.0):
            dims[3:] = 90.0 - np.degrees(np.arcsin(dims[3:]))
        elif np.any(dims < 0.0) or np.any(dims[3:] > 180.0):
            dims = triclinic_box(cell[[0, 1, 3]], cell[[1, 2, 4]], cell[[3, 4, 5]])
        edges[i] = triclinic_vectors(dims)
    return edges


def frame_interval_ps(header):
    """Time between two frames of a DCD, in ps (DELTA is in AKMA units)."""
    from MDAnalysis import units

    return float(units.convert(header["delta"], "AKMA", "ps")) * (int(header["nsavc"]) or 1)


class DCDFormat(Format):
    """CHARMM/NAMD DCD trajectories (positions, optional unit cell)."""

    name = "DCD"
    extensions = (".dcd",)
    decoders = ("MDAnalysis.lib.formats.libdcd",)

    @classmethod
    def scan(cls, path, on_truncated="error"):
        from MDAnalysis.lib.formats.libdcd import DCDFile

        stat = file_stat(path)
        try:
            with LibraryName(path) as name, DCDFile(name) as handle:
                header = dict(handle.header)
                n_frames, periodic, ndims = int(handle.n_frames), bool(handle.is_periodic), handle.ndims
                sizes = (handle._header_size, handle._firstframesize, handle._framesize)
        except (OSError, EOFError, RuntimeError, ValueError, TypeError) as error:
            raise InputError(f"{path}: not a readable DCD file ({reason(error)})") from None
        if ndims != 3:
            raise InputError(f"{path}: DCD files with {ndims} dimensions are not supported")
        head, first, rest = sizes
        whole = (stat.st_size - head - first) // rest + 1 if stat.st_size >= head + first else 0
        expected = head + first + (whole - 1) * rest if whole else head
        dropped = None
        if stat.st_size != expected or whole == 0:
            if whole == 0:
                raise InputError(f"{path}: {stat.st_size} bytes hold the DCD header but no complete frame")
            dropped = truncated(path, whole, expected, stat.st_size - expected, rest, on_truncated)
        n_frames = whole
        boxed = np.full(n_frames, periodic)
        if periodic:
            boxed = cls._frames_with_box(path, n_frames)
        nsavc = int(header["nsavc"]) or 1
        istart = int(header["istart"])
        frames = np.arange(n_frames, dtype=np.int64)
        interval = frame_interval_ps(header)
        return Segment(
            path=path, format=cls.name, n_atoms=int(header["natoms"]), n_frames=n_frames,
            size=stat.st_size, mtime=stat.st_mtime,
            step=istart + frames * nsavc, time=(frames + istart / nsavc) * interval,
            fields={"positions": np.ones(n_frames, bool), **({"box": boxed} if boxed.any() else {})},
            details={"istart": istart, "nsavc": nsavc, "dt_ps": interval, "delta": float(header["delta"])},
            dropped=dropped,
        )

    @staticmethod
    def _frames_with_box(path, n_frames):
        """Which frames of a periodic DCD hold a box: a unit cell of zero lengths holds none, as
        MDAnalysis reads it (MDAnalysis's DCDWriter writes one for a universe without a box)."""
        from MDAnalysis.lib.formats.libdcd import DCDFile

        try:
            with LibraryName(path) as name, DCDFile(name) as handle:
                cells = handle.readframes(0, n_frames, order="fac", indices=[0]).unitcell
        except (OSError, EOFError, RuntimeError, ValueError, TypeError) as error:
            raise InputError(f"{path}: cannot read the DCD unit cells ({reason(error)})") from None
        return np.any(unitcell_to_edges(cells) != 0, axis=(1, 2))

    def __init__(self, segment, atom_indices=None):
        super().__init__(segment, atom_indices)
        from MDAnalysis.lib.formats.libdcd import DCDFile

        self.library_name = LibraryName(segment.path)
        try:
            self.handle = DCDFile(self.library_name.name)
        except (OSError, RuntimeError, ValueError) as error:
            self.library_name.close()
            raise self.error(0, error) from None

    def read_frames(self, frames, block, row, fields):
        first, last = int(frames[0]), int(frames[-1])
        stride = int(frames[1] - frames[0]) if len(frames) > 1 else 1
        if stride < 1 or not np.array_equal(frames, np.arange(first, last + 1, stride)):
            for frame in frames:
                row = self.read_frames(np.array([frame]), block, row, fields)
            return row
        try:
            self.handle.seek(0)
            record = self.handle.readframes(first, last + 1, stride, order="fac", indices=self.atom_indices)
        except (OSError, EOFError, RuntimeError, ValueError) as error:
            raise self.error(first, error) from None
        rows = slice(row, row + len(frames))
        if "positions" in fields:
            block.positions[rows] = angstrom_to_nm(record.xyz)
        if "box" in self.segment.fields:  # edges of zero-length cells are zeros: no box
            block.edges[rows] = unitcell_to_edges(record.unitcell) / ANGSTROM_PER_NM
        else:
            block.edges[rows] = 0.0
        return row + len(frames)

    def close(self):
        self.handle.close()
        self.library_name.close()

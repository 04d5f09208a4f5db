"""AMBER NetCDF trajectories (``.nc``, ``.ncdf``), read by h5mdtool with numpy.

An AMBER NetCDF trajectory (https://ambermd.org/netcdf/nctraj.xhtml) is a NetCDF-3 file
(:mod:`h5mdtool.formats.netcdf3` parses its header) whose global attribute ``Conventions``
holds the token ``AMBER``. Its record dimension ``frame`` numbers the frames; per frame it
holds ``coordinates`` (atom, spatial) in Angstrom and optionally ``time`` in ps,
``velocities`` in Angstrom/ps, ``forces`` in kcal/(mol Angstrom), and the unit cell as
``cell_lengths`` (Angstrom) and ``cell_angles`` (degrees). Any of these may carry a
``scale_factor`` attribute that multiplies the stored values: AMBER stores velocities in
Angstrom per AKMA time unit with ``scale_factor`` 20.455, which makes them Angstrom/ps.

Conversions follow MDAnalysis's ``NCDFReader``: values are multiplied by their scale factor
(skipped when it is 1 within ``math.isclose``), positions and velocities divided by 10
(Angstrom to nm), forces multiplied by 41.84 (kcal/(mol A) to kJ/(mol nm)), rounded once to
the file's precision (:func:`convert_to`). The box vectors are
``MDAnalysis.lib.mdamath.triclinic_vectors`` of the frame's lengths and angles, in nm; a
frame whose cell lengths are all zero has no box. The format has no step numbers: a
``step`` variable of whole numbers is used when a file has one, else the frame numbers
(as MDAnalysis's H5MD writer numbers such frames). A file without ``time`` gets
MDAnalysis's default, one ps per frame.

The scan checks the header, each variable's dimensions, type and unit, the file size
against the record count (an incomplete last frame is refused or, with
``on_truncated="drop"``, left out), and that every frame's time and cell are finite.
Nothing is written beside the input.
"""

import math
import os

import numpy as np

from ..parallel.errors import InputError
from .base import ANGSTROM_PER_NM, Format, Segment, file_stat, reason, truncated
from .netcdf3 import read_header, record_view

KCAL_PER_KJ = 4.184
#: Per-atom variable -> (h5mdtool field, unit AMBER writes, (multiplier, divisor) to h5mdtool's unit).
ATOM_VARIABLES = {
    "coordinates": ("positions", "angstrom", (1.0, ANGSTROM_PER_NM)),
    "velocities": ("velocities", "angstrom/picosecond", (1.0, ANGSTROM_PER_NM)),
    "forces": ("forces", "kilocalorie/mole/angstrom", (KCAL_PER_KJ * ANGSTROM_PER_NM, 1.0)),
}
#: Per-frame variables other than per-atom values -> (unit, trailing dimension or None).
FRAME_VARIABLES = {
    "time": ("picosecond", None),
    "cell_lengths": ("angstrom", "cell_spatial"),
    "cell_angles": ("degree", "cell_angular"),
}


def scale_factor(path, variable):
    """The ``scale_factor`` of *variable*, or None when absent or 1 (as MDAnalysis skips it).

    Raises
    ------
    InputError
        If the attribute is not one finite number.
    """
    value = variable.attributes.get("scale_factor")
    if value is None:
        return None
    values = np.atleast_1d(value)
    if isinstance(value, str) or values.size != 1 or values.dtype.kind != "f" or not np.isfinite(values[0]):
        raise InputError(f"{path}: variable {variable.name!r} has scale_factor {value!r}, not one finite float")
    factor = float(values[0])
    return None if math.isclose(factor, 1.0) else factor


def _check_unit(path, variable, expected):
    unit = variable.attributes.get("units")
    if unit is None:
        return  # MDAnalysis requires it; AMBER always writes it; the value is unambiguous
    if not isinstance(unit, str) or unit.strip() != expected:
        raise InputError(
            f"{path}: variable {variable.name!r} has units {unit!r}; AMBER NetCDF stores {expected!r}, "
            "and h5mdtool (like MDAnalysis) reads no other"
        )


def _check_conventions(path, header):
    conventions = header.attributes.get("Conventions")
    if not isinstance(conventions, str):
        raise InputError(f"{path}: a NetCDF file without the Conventions attribute: not an AMBER trajectory")
    tokens = conventions.replace(",", " ").split()
    if "AMBERRESTART" in tokens and "AMBER" not in tokens:
        raise InputError(f"{path}: an AMBER NetCDF restart file (one frame, Conventions AMBERRESTART), not a trajectory")
    if "AMBER" not in tokens:
        raise InputError(f"{path}: NetCDF Conventions {conventions!r} do not include AMBER: not an AMBER trajectory")


def _frame_variable(path, header, name, trailing):
    """A record variable of (frame,) or (frame, *trailing*), checked; None when absent."""
    variable = header.variables.get(name)
    if variable is None:
        return None
    expected = ("frame",) if trailing is None else ("frame", trailing)
    if variable.dimensions != expected or not variable.record:
        raise InputError(f"{path}: variable {name!r} has dimensions {variable.dimensions}, not {expected}")
    if variable.dtype.kind not in "fi":
        raise InputError(f"{path}: variable {name!r} holds {variable.dtype}, not numbers")
    if trailing is not None and header.dimensions.get(trailing) != 3:
        raise InputError(f"{path}: dimension {trailing!r} has length {header.dimensions.get(trailing)}, not 3")
    return variable


def _atom_variable(path, header, name):
    variable = header.variables.get(name)
    if variable is None:
        return None
    if variable.dimensions != ("frame", "atom", "spatial") or not variable.record:
        raise InputError(f"{path}: variable {name!r} has dimensions {variable.dimensions}, "
                         "not ('frame', 'atom', 'spatial')")
    if variable.dtype.kind != "f":
        raise InputError(f"{path}: variable {name!r} holds {variable.dtype}, not floating-point numbers")
    _check_unit(path, variable, ATOM_VARIABLES[name][1])
    return variable


def _scaled(values, factor):
    values = np.asarray(values, np.float64)
    return values if factor is None else values * factor


def convert_to(out, values, scale, multiplier, divisor):
    """``values * scale * multiplier / divisor`` into *out*, rounded once to its type.

    Unscaled single-precision Angstroms become nm with one float32 division, which IEEE
    arithmetic rounds correctly (10 is exact); anything else is computed in float64.
    """
    if scale is None and multiplier == 1.0 and out.dtype == np.float32 and values.dtype.itemsize == 4:
        np.divide(values, np.float32(divisor), out=out)
    else:
        out[...] = _scaled(values, scale) * multiplier / divisor


def cell_edges(lengths, angles):
    """Box vectors (rows, nm) of frames with cell *lengths* (Angstrom) and *angles* (degrees).

    ``MDAnalysis.lib.mdamath.triclinic_vectors`` of the float32 dimensions (as MDAnalysis's
    reader holds them), computed here at once for rectangular cells, which it turns into a
    diagonal exactly; frames whose lengths are all zero get zero edges (no box).
    """
    from MDAnalysis.lib.mdamath import triclinic_vectors

    dimensions = np.concatenate([lengths, angles], axis=1).astype(np.float32)
    edges = np.zeros((len(dimensions), 3, 3), np.float64)
    rectangular = (dimensions > 0).all(axis=1) & (dimensions[:, 3:] == 90).all(axis=1)
    edges[rectangular] = dimensions[rectangular, :3, None] * np.eye(3)
    for row in np.flatnonzero(~rectangular & dimensions[:, :3].any(axis=1)):
        edges[row] = triclinic_vectors(dimensions[row])
    return edges / ANGSTROM_PER_NM


class NCDFFormat(Format):
    """AMBER NetCDF trajectories: positions, optional velocities, forces, time and unit cell."""

    name = "NCDF"
    extensions = (".nc", ".ncdf")
    decoders = ("MDAnalysis.lib.mdamath",)

    @classmethod
    def scan(cls, path, on_truncated="error"):
        stat = file_stat(path)
        try:
            with open(path, "rb") as handle:
                header = read_header(path, handle)
        except OSError as error:
            raise InputError(f"{path}: cannot be read ({reason(error)})") from None
        _check_conventions(path, header)
        if header.dimensions.get("spatial") != 3:
            raise InputError(f"{path}: dimension 'spatial' has length {header.dimensions.get('spatial')}, not 3")
        if header.record_dimension != "frame":
            raise InputError(f"{path}: the record (unlimited) dimension is {header.record_dimension!r}, not 'frame'")
        atoms = {name: _atom_variable(path, header, name) for name in ATOM_VARIABLES}
        if atoms["coordinates"] is None:
            raise InputError(f"{path}: an AMBER NetCDF file without coordinates")
        frame_vars = {name: _frame_variable(path, header, name, trailing)
                      for name, (_, trailing) in FRAME_VARIABLES.items()}
        for name, (unit, _) in FRAME_VARIABLES.items():
            if frame_vars[name] is not None:
                _check_unit(path, frame_vars[name], unit)
        if (frame_vars["cell_lengths"] is None) != (frame_vars["cell_angles"] is None):
            raise InputError(f"{path}: has one of cell_lengths and cell_angles without the other")
        step_var = header.variables.get("step")
        if step_var is not None:
            step_var = _frame_variable(path, header, "step", None)
            if step_var.dtype.kind != "i":
                raise InputError(f"{path}: variable 'step' holds {step_var.dtype}, not whole numbers")

        complete = header.records_in(stat.st_size)
        declared = complete if header.streaming else header.numrecs
        if header.streaming and header.record_size and stat.st_size > header.record_start(complete):
            declared = complete + 1  # a streamed file ending inside a record
        dropped = None
        n_frames = declared
        if complete < declared:
            start = header.record_start(complete)
            have = max(stat.st_size - start, 0)
            dropped = truncated(path, complete, start, have, header.record_size, on_truncated)
            n_frames = complete
        if n_frames == 0:
            raise InputError(f"{path}: holds no complete frame" + (" (the header declares none)" if declared == 0 else ""))

        mapped = np.memmap(path, dtype=np.uint8, mode="r")
        try:
            time = None
            if frame_vars["time"] is not None:
                time = _scaled(record_view(mapped, header, frame_vars["time"], n_frames),
                               scale_factor(path, frame_vars["time"]))
                _first_non_finite(path, time, "time")
            else:  # MDAnalysis's default time step
                time = np.arange(n_frames, dtype=np.float64)
            if step_var is not None:
                step = np.array(record_view(mapped, header, step_var, n_frames), np.int64)
            else:
                step = np.arange(n_frames, dtype=np.int64)
            fields = {ATOM_VARIABLES[name][0]: np.ones(n_frames, bool) for name, var in atoms.items() if var is not None}
            box = None
            if frame_vars["cell_lengths"] is not None:
                lengths = _scaled(record_view(mapped, header, frame_vars["cell_lengths"], n_frames),
                                  scale_factor(path, frame_vars["cell_lengths"]))
                angles = _scaled(record_view(mapped, header, frame_vars["cell_angles"], n_frames),
                                 scale_factor(path, frame_vars["cell_angles"]))
                _first_non_finite(path, lengths, "cell_lengths")
                _first_non_finite(path, angles, "cell_angles")
                fields["box"] = lengths.any(axis=1)
                box = {name: _layout(path, frame_vars[name]) for name in ("cell_lengths", "cell_angles")}
        finally:
            del mapped
        per_atom = {ATOM_VARIABLES[name][0]: dict(_layout(path, var), factor=ATOM_VARIABLES[name][2])
                    for name, var in atoms.items() if var is not None}
        double = any(np.dtype(layout["dtype"]).itemsize == 8 for layout in per_atom.values())
        return Segment(
            path=path, format=cls.name, n_atoms=int(header.dimensions["atom"]), n_frames=int(n_frames),
            size=stat.st_size, mtime=stat.st_mtime, step=step, time=time, fields=fields,
            dtype="float64" if double else "float32", boundary=None,
            details={"record_size": header.record_size, "atoms": per_atom, "box": box,
                     "version": header.version, "time_recorded": frame_vars["time"] is not None},
            dropped=dropped,
        )

    def __init__(self, segment, atom_indices=None):
        super().__init__(segment, atom_indices)
        try:
            self.fd = os.open(segment.path, os.O_RDONLY)
        except OSError as error:
            raise self.error(0, error) from None
        indices = self.atom_indices
        self.span = (0, segment.n_atoms) if indices is None else (int(indices.min()), int(indices.max()) + 1)
        pick = None if indices is None else indices - self.span[0]
        if pick is not None and np.array_equal(pick, np.arange(self.span[1] - self.span[0])):
            pick = None
        self.pick = pick

    def _read(self, layout, frame, first, count):
        """*count* values of variable *layout* from value *first* of record *frame*, in the file's type."""
        dtype = np.dtype(layout["dtype"])
        start = layout["begin"] + frame * self.segment.details["record_size"] + first * dtype.itemsize
        data = os.pread(self.fd, count * dtype.itemsize, start)
        if len(data) != count * dtype.itemsize:
            raise EOFError(f"file ends at byte {start + len(data)} (changed since it was scanned?)")
        return np.frombuffer(data, dtype)

    def read_frames(self, frames, block, row, fields):
        details = self.segment.details
        first, last = self.span
        for frame in frames:
            frame = int(frame)
            try:
                for name in fields:
                    layout = details["atoms"][name]
                    values = self._read(layout, frame, 3 * first, 3 * (last - first)).reshape(-1, 3)
                    if self.pick is not None:
                        values = values[self.pick]
                    convert_to(getattr(block, name)[row], values, layout["scale"], *layout["factor"])
            except (OSError, EOFError, ValueError) as error:
                raise self.error(frame, error) from None
            row += 1
        self._read_edges(frames, block.edges[row - len(frames):row])
        return row

    def _read_edges(self, frames, edges):
        box = self.segment.details["box"]
        present = self.segment.fields.get("box")
        edges[...] = 0.0
        if box is None or not present[frames].any():
            return
        wanted = frames[present[frames]]
        cells = {}
        for name in ("cell_lengths", "cell_angles"):
            try:
                values = [self._read(box[name], int(frame), 0, 3) for frame in wanted]
            except (OSError, EOFError, ValueError) as error:
                raise self.error(wanted[0], error) from None
            cells[name] = _scaled(np.array(values), box[name]["scale"])
        edges[present[frames]] = cell_edges(cells["cell_lengths"], cells["cell_angles"])

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _layout(path, variable):
    """What a reader needs of *variable* (picklable)."""
    return {"begin": int(variable.begin), "dtype": variable.dtype.str, "scale": scale_factor(path, variable)}


def _first_non_finite(path, values, name):
    finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if not finite.all():
        frame = int(np.flatnonzero(~finite)[0])
        raise InputError(f"{path}: frame {frame} has a non-finite {name}")

"""The oracle: MDAnalysis reading the source, frame by frame, with its own unit conversions.

:func:`read_segment` gives the frames of one input file in h5mdtool's units (nm, ps, nm/ps,
kJ/(mol nm)) as float64, with per-frame presence masks and how exactly an output must match:

* XTC, TRR, and H5MD stored in nm: MDAnalysis reads them with ``convert_units=False``; the
  float32 values it returns are what h5mdtool must store, bit for bit.
* DCD (Angstrom), H5MD in Angstrom or pm: the float32 value times MDAnalysis's conversion
  factor, computed in float64; an output may differ by 1 ulp of float32.

What MDAnalysis does not read, the oracle takes from the writer's ground truth
(:class:`~.spec.SegmentSpec`), and says so in the segment's ``source`` notes: DCD steps
(MDAnalysis's ``step`` is the frame index), XTC/TRR box matrices (MDAnalysis only keeps
lengths and angles; ``libmdaxdr``, MDAnalysis's decoder, gives the matrix), every H5MD box
(MDAnalysis ignores ``boundary`` and cannot read a fixed box) and H5MD files MDAnalysis's
reader cannot open correctly (fixed step or time, no time, a velocity at its own steps).

:func:`join` applies the segment rules (overlaps refused, or dropped keeping the first copy)
and :func:`select` the frame and atom selection, giving the :class:`Frames` a command must write.
"""

import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from .spec import FORMAT_OVERRIDE, LENGTH_PER_NM, TIME_PER_PS, intact_path


@dataclass
class Field:
    """A per-atom quantity: values where ``mask`` is true (other rows are undefined)."""

    values: np.ndarray  # (n, N, 3) float64, h5mdtool units
    mask: np.ndarray  # (n,) bool
    exact: bool  # the output must hold float32(values) bit for bit

    def take(self, frames, atoms=None):
        values = self.values[frames]
        if atoms is not None:
            values = values[:, atoms]
        return Field(values, self.mask[frames], self.exact)


@dataclass
class Frames:
    """Frames of a trajectory as the oracle sees them."""

    steps: np.ndarray
    times: np.ndarray  # ps, or None when the source has no time
    positions: Field
    velocities: Field = None
    forces: Field = None
    edges: np.ndarray = None  # (n, 3, 3) nm; zeros where box_mask is false
    box_mask: np.ndarray = None
    box_exact: bool = True
    boundary: tuple = (True, True, True)
    time_exact: bool = True
    #: False when the times are MDAnalysis's default (1 ps per frame), the format storing none (GSD)
    time_recorded: bool = True
    notes: list = field(default_factory=list)

    @property
    def n_frames(self):
        return len(self.steps)

    @property
    def n_atoms(self):
        return self.positions.values.shape[1]

    @property
    def has_box(self):
        return self.edges is not None and bool(self.box_mask.any()) and any(self.boundary)

    def take(self, frames, atoms=None):
        frames = np.asarray(frames, dtype=np.int64)
        return replace(
            self,
            steps=self.steps[frames],
            times=None if self.times is None else self.times[frames],
            positions=self.positions.take(frames, atoms),
            velocities=None if self.velocities is None else self.velocities.take(frames, atoms),
            forces=None if self.forces is None else self.forces.take(frames, atoms),
            edges=None if self.edges is None else self.edges[frames],
            box_mask=None if self.box_mask is None else self.box_mask[frames],
            notes=list(self.notes),
        )


class Refusal(Exception):
    """The command must refuse this input (the message says why)."""


def _universe(topology, path, convert_units, spec=None):
    """MDAnalysis's universe of *path*, read as the format *spec* names (``format="LAMMPS"``)."""
    import MDAnalysis

    kwargs = {}
    if spec is not None and spec.format in FORMAT_OVERRIDE:
        kwargs["format"] = FORMAT_OVERRIDE[spec.format]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MDAnalysis.Universe(topology, path, convert_units=convert_units, **kwargs)


def _factor(kind, unit, target):
    from MDAnalysis import units

    return float(units.get_conversion_factor(kind, unit, target))


def mda_readable(spec):
    """True when MDAnalysis's H5MDReader reads this H5MD file frame by frame correctly."""
    if spec.format != "h5md":
        return True
    return (spec.step_store == "explicit" and spec.time_store == "explicit" and spec.velocity_rate == 1
            and spec.box_store in ("none", "n33", "n3"))


def read_segment(spec, path, topology):
    """The frames of one input file (see the module docstring). An XTC with a damaged frame
    is read from its intact copy: what h5mdtool must give when it does not decode that frame."""
    if spec.format == "h5md" and not mda_readable(spec):
        return _truth_h5md(spec)
    if spec.corrupt_frame is not None:
        path = intact_path(path)
    universe = _universe(topology, path, convert_units=False, spec=spec)
    reader = universe.trajectory
    # GSD has no units: MDAnalysis hands its values over as its own base units, Angstrom and ps
    length = reader.units.get("length") or ("Angstrom" if spec.format == "gsd" else "nm")
    to_nm = _factor("length", length, "nm")
    velocity_unit = reader.units.get("velocity")
    force_unit = reader.units.get("force")
    n, n_atoms = reader.n_frames, universe.atoms.n_atoms
    positions = np.zeros((n, n_atoms, 3))
    masks = {name: np.zeros(n, bool) for name in ("positions", "velocities", "forces")}
    velocities = np.zeros((n, n_atoms, 3))
    forces = np.zeros((n, n_atoms, 3))
    steps = np.zeros(n, np.int64)
    times = np.zeros(n)
    for ts in reader:
        i = ts.frame
        if ts.has_positions:
            positions[i] = ts.positions.astype(np.float64) * to_nm
            masks["positions"][i] = True
        if ts.has_velocities:
            velocities[i] = ts.velocities.astype(np.float64) * _factor("speed", velocity_unit, "nm/ps")
            masks["velocities"][i] = True
        if ts.has_forces:
            forces[i] = ts.forces.astype(np.float64) * _factor("force", force_unit, "kJ/(mol*nm)")
            masks["forces"][i] = True
        # TRZ: the step is the frame's ntrj, which MDAnalysis calls "frame" (its TRZWriter writes
        # the step there); NCDF has no step: MDAnalysis's frame number
        steps[i] = ts.data["frame"] if spec.format == "trz" else ts.data.get("step", i)
        times[i] = ts.time
    time_unit = reader.units.get("time") or "ps"
    frames = Frames(
        steps=steps,
        times=times * _factor("time", time_unit, "ps"),
        positions=Field(positions, masks["positions"], exact=to_nm == 1.0),
        notes=[f"{spec.format}: MDAnalysis {type(reader).__name__}"],
    )
    if masks["velocities"].any():
        frames.velocities = Field(velocities, masks["velocities"],
                                  exact=_factor("speed", velocity_unit, "nm/ps") == 1.0)
    if masks["forces"].any():
        frames.forces = Field(forces, masks["forces"], exact=_factor("force", force_unit, "kJ/(mol*nm)") == 1.0)
    if spec.format in ("dcd", "lammps"):
        _dcd_details(spec, path, topology, frames)
    elif spec.format in ("ncdf", "trz", "gsd"):
        _mda_boxes(spec, path, topology, frames)
        if spec.extra.get("ncdf_scales"):
            _ncdf_scaled(path, frames)
    elif spec.format in ("xtc", "trr"):
        _xdr_boxes(spec, path, frames)
    else:
        _h5md_box(spec, frames)
        frames.time_exact = spec.time_unit == "ps"
    return frames


def _dcd_details(spec, path, topology, frames):
    """DCD: steps from the header (ISTART + i NSAVC), time and box as MDAnalysis converts them."""
    from MDAnalysis.lib.formats.libdcd import DCDFile
    from MDAnalysis.lib.mdamath import triclinic_vectors

    with DCDFile(path) as handle:
        header = handle.header
    frames.steps = int(header["istart"]) + int(header["nsavc"]) * np.arange(frames.n_frames, dtype=np.int64)
    # LAMMPS: MDAnalysis's LAMMPS DCDReader takes DELTA in fs (units real), CHARMM's in AKMA
    converted = _universe(topology, path, convert_units=True, spec=spec)
    times, edges, mask = [], [], []
    for ts in converted.trajectory:
        times.append(ts.time)
        if ts.dimensions is not None and np.all(ts.dimensions[:3] > 0):
            edges.append(triclinic_vectors(ts.dimensions.astype(np.float64)) / 10.0)
            mask.append(True)
        else:
            edges.append(np.zeros((3, 3)))
            mask.append(False)
    frames.times = np.asarray(times, np.float64)
    frames.time_exact = False
    frames.edges, frames.box_mask, frames.box_exact = np.asarray(edges), np.asarray(mask), False
    frames.notes.append("dcd: steps ISTART + i NSAVC from the header (MDAnalysis's step is the frame index)")


def _mda_boxes(spec, path, topology, frames):
    """NCDF, TRZ, GSD: each frame's box as MDAnalysis gives it (lengths and angles, Angstrom,
    degrees) turned into edge vectors in nm; a box of zero lengths is none. NCDF stores
    lengths and angles (float64); TRZ the vectors, which MDAnalysis turns into lengths and
    angles; GSD HOOMD's ``[Lx, Ly, Lz, xy, xz, yz]`` (only zero tilts are drawn: see
    strategies). GSD records no time: MDAnalysis's 1 ps per frame, which time selections
    must not use."""
    from MDAnalysis.lib.mdamath import triclinic_vectors

    converted = _universe(topology, path, convert_units=True, spec=spec)
    edges, mask = [], []
    for ts in converted.trajectory:
        dimensions = ts.dimensions
        if dimensions is not None and np.all(dimensions[:3] > 0):
            edges.append(triclinic_vectors(dimensions.astype(np.float64)) / 10.0)
            mask.append(True)
        else:
            edges.append(np.zeros((3, 3)))
            mask.append(False)
    frames.edges, frames.box_mask, frames.box_exact = np.asarray(edges).reshape(-1, 3, 3), np.asarray(mask, bool), False
    frames.notes.append(f"{spec.format}: box from MDAnalysis's dimensions (lengths and angles) as vectors")
    if spec.format == "ncdf":
        frames.notes.append("ncdf: no step in the format: the frame number (MDAnalysis's ts.frame)")
    if spec.format == "gsd":
        frames.time_recorded = False
        frames.notes.append("gsd: no time in the format: MDAnalysis's default, 1 ps per frame")


def _ncdf_scaled(path, frames):
    """NCDF with scale factors: each value is the stored float32 times its variable's
    ``scale_factor`` (the AMBER convention), computed here in float64. MDAnalysis's
    NCDFReader multiplies in float32, one rounding more, which moved times by 4e-8 relative
    and forces by more than one float32 step after the unit conversion."""
    import math

    from scipy.io import netcdf_file

    def scaled(handle, name):
        variable = handle.variables[name]
        values = np.array(variable.data, np.float64)
        factor = getattr(variable, "scale_factor", None)
        return values if factor is None or math.isclose(float(factor), 1.0) else values * float(factor)

    with netcdf_file(path, "r", mmap=False, maskandscale=False) as handle:
        frames.times = scaled(handle, "time")
        frames.time_exact = False
        frames.positions.values = scaled(handle, "coordinates") / 10.0
        if frames.velocities is not None:
            frames.velocities.values = scaled(handle, "velocities") / 10.0
        if frames.forces is not None:
            frames.forces.values = scaled(handle, "forces") * 41.84
    frames.notes.append("ncdf: values are the stored ones times their scale_factor, in float64 (AMBER convention)")


def _xdr_boxes(spec, path, frames):
    """XTC/TRR box matrices as MDAnalysis's libmdaxdr decodes them (a zero box: none)."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    with (XTCFile if spec.format == "xtc" else TRRFile)(path) as handle:
        boxes = np.array([frame.box for frame in handle], np.float64)
    frames.edges = boxes
    frames.box_mask = np.any(boxes != 0, axis=(1, 2))
    frames.box_exact = True


def _h5md_box(spec, frames):
    """H5MD box from the ground truth, in nm, one (3, 3) matrix per position frame."""
    frames.boundary = tuple(bool(b) for b in spec.boundary)
    if spec.box is None or spec.box_store == "none":
        frames.edges, frames.box_mask = None, None
        return
    to_nm = 1.0 / LENGTH_PER_NM[spec.length_unit]
    frames.edges = np.asarray(spec.box, np.float32).astype(np.float64) * to_nm
    frames.box_mask = np.any(frames.edges != 0, axis=(1, 2))  # a box of zeros is none, as MDAnalysis reads it
    frames.box_exact = to_nm == 1.0
    frames.notes.append(f"h5md box from the writer's truth ({spec.box_store}, boundary {list(spec.boundary)})")


def _truth_h5md(spec):
    """An H5MD file MDAnalysis cannot read frame by frame: the values its writer stored."""
    to_nm = 1.0 / LENGTH_PER_NM[spec.length_unit]
    exact = to_nm == 1.0
    frames = Frames(
        steps=np.asarray(spec.steps, np.int64),
        times=None if spec.time_store == "missing" else np.asarray(spec.times, np.float64) / TIME_PER_PS[spec.time_unit],
        positions=Field(np.asarray(spec.positions, np.float32).astype(np.float64) * to_nm,
                        np.ones(spec.n_frames, bool), exact),
        time_exact=spec.time_unit == "ps" and spec.time_store == "explicit",
        notes=["h5md: ground truth (MDAnalysis's reader cannot read this file frame by frame)"],
    )
    if spec.velocities is not None:
        frames.velocities = Field(np.asarray(spec.velocities, np.float32).astype(np.float64) * to_nm,
                                  np.asarray(spec.has_velocities, bool), exact)
    if spec.forces is not None:
        force_to = 10.0 if spec.length_unit == "Angstrom" else 1.0
        frames.forces = Field(np.asarray(spec.forces, np.float32).astype(np.float64) * force_to,
                              np.ones(spec.n_frames, bool), force_to == 1.0)
    _h5md_box(spec, frames)
    return frames


def xtc_index_may_pass_table(path, spec):
    """True when a frame of the XTC *path* (its intact copy) starts at a size index within 8
    of the end of the format's table (73 entries): the writer (libmdaxdr's, as GROMACS's)
    may then move the index one past the table and encode runs with whatever follows the
    table in its memory, which libmdaxdr decodes to values far outside the frame's box
    (measured: -49,614 nm in a frame of +-500 nm coordinates at precision 10000)."""
    import struct

    if spec.n_atoms <= 9:
        return False
    with open(intact_path(path) if spec.corrupt_frame is not None else path, "rb") as handle:
        data = handle.read()
    position = 0
    while position + 92 <= len(data):
        if struct.unpack_from(">i", data, position + 84)[0] > 64:
            return True
        position += 92 + (struct.unpack_from(">i", data, position + 88)[0] + 3) // 4 * 4
    return False


def damage(spec):
    """Why this input must be refused, or None."""
    if spec.truncate_at is not None:
        return f"{spec.format} truncated inside its last frame ({spec.extra['truncate'][0]})"
    if spec.natoms_change_frame is not None:
        return f"xtc whose atom count changes at frame {spec.natoms_change_frame}"
    if spec.extra.get("zero_box"):
        # MDAnalysis's GSDReader fails on it (TypeError: a zero box becomes dimensions None)
        return "gsd with an all-zero box, which MDAnalysis cannot read (HOOMD boxes have positive lengths)"
    return None


def join(pieces, on_overlap):
    """Join per-segment :class:`Frames` as a trajectory; raise :class:`Refusal` when it must be refused.

    A segment that starts at or before the last step kept so far overlaps: refused with
    ``on_overlap="error"``. With ``"first"`` (``"drop"``) its frames up to that step are
    dropped; with ``"later"`` (gmx trjcat's rule) every earlier segment's frames at or after
    the first step of any later segment are dropped (a restart supersedes them).
    """
    if on_overlap == "later":
        pieces = list(pieces)
        for number, frames in enumerate(pieces[:-1]):
            restart = min(int(later.steps[0]) for later in pieces[number + 1:])
            end = frames.n_frames
            while end and frames.steps[end - 1] >= restart:
                end -= 1
            pieces[number] = frames.take(np.arange(end))
    kept = []
    last = None
    for number, frames in enumerate(pieces):
        if not frames.n_frames:
            continue
        if last is not None and frames.steps[0] <= last:
            if on_overlap not in ("drop", "first"):
                raise Refusal(f"segment {number} starts at step {frames.steps[0]}, not after step {last}")
            frames = frames.take(np.flatnonzero(frames.steps > last))
        if frames.n_frames:
            kept.append(frames)
            last = int(frames.steps[-1])
    if any(np.any(np.diff(f.steps) <= 0) for f in kept):
        raise Refusal("steps do not increase")
    return concatenate(kept)


def concatenate(pieces):
    """One :class:`Frames` of several (fields missing in a piece are absent in its frames)."""
    if len(pieces) == 1:
        return pieces[0]
    first = pieces[0]
    n_atoms = first.n_atoms

    def field_of(name):
        present = [getattr(p, name) for p in pieces]
        if all(f is None for f in present):
            return None
        values = np.concatenate([f.values if f is not None else np.zeros((p.n_frames, n_atoms, 3))
                                 for f, p in zip(present, pieces)])
        mask = np.concatenate([f.mask if f is not None else np.zeros(p.n_frames, bool) for f, p in zip(present, pieces)])
        return Field(values, mask, all(f.exact for f in present if f is not None))

    boxed = [p.edges is not None for p in pieces]
    edges = box_mask = None
    if any(boxed):
        edges = np.concatenate([p.edges if p.edges is not None else np.zeros((p.n_frames, 3, 3)) for p in pieces])
        box_mask = np.concatenate([p.box_mask if p.edges is not None else np.zeros(p.n_frames, bool) for p in pieces])
    times = None
    if all(p.times is not None for p in pieces):
        times = np.concatenate([p.times for p in pieces])
    boundary = tuple(any(p.boundary[d] for p in pieces if p.edges is not None) for d in range(3)) if any(boxed) else first.boundary
    return Frames(
        steps=np.concatenate([p.steps for p in pieces]), times=times, positions=field_of("positions"),
        velocities=field_of("velocities"), forces=field_of("forces"), edges=edges, box_mask=box_mask,
        box_exact=all(p.box_exact for p in pieces), boundary=boundary,
        time_exact=all(p.time_exact for p in pieces), time_recorded=all(p.time_recorded for p in pieces),
        notes=sum((p.notes for p in pieces), []),
    )


def select_frames(n_frames, start=None, stop=None, step=None):
    """Frame numbers of ``[start:stop:step]``; :class:`Refusal` when none or a bad step."""
    if step is not None and step < 1:
        raise Refusal(f"step {step}")
    frames = np.arange(n_frames)[slice(start, stop, step)]
    if len(frames) == 0:
        raise Refusal("the frame selection is empty")
    return frames


def select_times(times, begin=None, end=None, dt=None):
    """Frame numbers ``gmx trjconv -b -e -dt`` writes, from GROMACS's definition.

    gmx reads the frames in order and compares times as float32 ("real"): a frame before -b
    is skipped, one after -e ends the selection; the first frame kept sets t0, and with -dt
    a frame is written when ``t MOD dt = first time``, tested as GROMACS's ``bRmod``:
    ``iq = (int)((t - t0 + tol t) / dt)``, kept when ``|t - t0 - dt iq| <= tol |t|`` with
    ``tol = 2 FLT_EPSILON``, evaluated in double. :class:`Refusal` when the source has no time,
    -e is before -b, or nothing is kept.
    """
    if times is None:
        raise Refusal("the source records no time: -b/-e/--dt refused")
    real = np.float32
    if begin is not None and end is not None and real(end) < real(begin):
        raise Refusal("-e before -b")
    tolerance = 2 * float(np.finfo(np.float32).eps)
    kept, first = [], None
    for number, value in enumerate(times):
        t = float(real(value))
        if begin is not None and t < float(real(begin)):
            continue
        if first is None:
            first = t
        if dt is not None:
            step = float(real(dt))
            quotient = int((t - first + tolerance * t) / step)
            if abs(t - first - step * quotient) > tolerance * abs(t):
                continue
        if end is not None and t > float(real(end)):
            continue
        kept.append(number)
    if not kept:
        raise Refusal("the time selection -b/-e/--dt selects no frame")
    return np.asarray(kept, np.int64)


def select_atoms(topology, selection):
    """Atom indices of an MDAnalysis *selection* on *topology*; :class:`Refusal` when it matches none."""
    import MDAnalysis

    if selection is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = MDAnalysis.Universe(topology)
        try:
            group = universe.select_atoms(selection)
        except Exception as error:  # noqa: BLE001
            raise Refusal(f"invalid selection {selection!r}: {error}") from None
    if len(group) == 0:
        raise Refusal(f"selection {selection!r} matches no atom")
    return np.asarray(group.indices, np.int64)

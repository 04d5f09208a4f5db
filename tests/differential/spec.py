"""What a generated input file holds: the ground truth the writers put on disk.

A :class:`SegmentSpec` is one trajectory file before it is written: its format, the writer
that makes it and every value in it, in the file's own units. The strategies
(:mod:`.strategies`) draw small parameters and a seed; :func:`make_segment` turns them into
arrays with numpy, so hypothesis only shrinks a handful of numbers.

The truth is used in two places: by the writers (:mod:`.writers`), and by the oracle for
what MDAnalysis cannot read from a file (an H5MD velocity at its own steps, fixed step and
time, a box that is periodic in some dimensions only); everything MDAnalysis reads, the
oracle takes from MDAnalysis (:mod:`.oracle`).
"""

import os
from dataclasses import dataclass, field

import numpy as np

FORMATS = ("xtc", "trr", "dcd", "h5md", "ncdf", "trz", "gsd", "lammps")
#: Formats of issue 14 read through h5mdtool's NetCDF, MDAnalysis-backed and LAMMPS modules.
#: "lammps" is a CHARMM DCD file read with ``--format LAMMPS`` (time step in fs).
ISSUE14_FORMATS = ("ncdf", "trz", "gsd", "lammps")
#: The ``--format`` name h5mdtool and MDAnalysis need for a format the extension does not tell.
FORMAT_OVERRIDE = {"lammps": "LAMMPS"}
H5MD_WRITERS = ("h5mdtool", "mdanalysis", "pyh5md", "h5py")
LENGTH_UNITS = ("nm", "Angstrom", "pm")
TIME_UNITS = ("ps", "fs")
#: nm -> unit, ps -> unit (exact decimal factors)
LENGTH_PER_NM = {"nm": 1.0, "Angstrom": 10.0, "pm": 1000.0}
TIME_PER_PS = {"ps": 1.0, "fs": 1000.0}
#: How coordinates are drawn (see :func:`coordinates`).
REGIMES = ("normal", "near_power", "zeros", "negative", "large", "mixed")
#: H5MD box storage: none, time-dependent (n,3,3) or (n,3), fixed (3,) or (3,3).
BOX_STORES = ("none", "n33", "n3", "fixed3", "fixed33")


@dataclass
class SegmentSpec:
    """One input file, fully described (values in the file's units).

    ``positions``, ``velocities``, ``forces``: float arrays (n, N, 3) or None; the
    ``has_*`` masks say which frames hold them (TRR frames may lack any of them; an H5MD
    velocity sampled at its own steps holds the frames where its mask is true).
    ``box``: (n, 3, 3) edge vectors as rows, or None; ``has_box`` marks frames with a box
    (an XTC/TRR frame without one stores zeros). ``boundary``: periodic flags per dimension.
    """

    format: str
    n_atoms: int
    steps: np.ndarray
    times: np.ndarray
    positions: np.ndarray
    has_positions: np.ndarray = None
    velocities: np.ndarray = None
    has_velocities: np.ndarray = None
    forces: np.ndarray = None
    has_forces: np.ndarray = None
    box: np.ndarray = None
    has_box: np.ndarray = None
    boundary: tuple = (True, True, True)
    writer: str = None
    # XTC
    xtc_precision: float = 1000.0
    # DCD (and LAMMPS DCD, whose delta is in fs)
    dcd_istart: int = 0
    dcd_nsavc: int = 1
    dcd_delta_akma: float = 1.0
    dcd_angles: str = "cosine"  # or "degrees" (old CHARMM unit cells)
    # H5MD
    length_unit: str = "nm"
    time_unit: str = "ps"
    step_store: str = "explicit"  # or "fixed"
    time_store: str = "explicit"  # or "fixed", "missing"
    box_store: str = "n33"
    velocity_rate: int = 1  # >1: velocity sampled every k-th position frame, own step/time
    group_name: str = "trajectory"
    extras: tuple = ()  # observables, connectivity, parameters, other_group
    bonds: np.ndarray = None
    # damage
    truncate_at: int = None  # keep this many bytes
    natoms_change_frame: int = None  # XTC: frames from here hold one atom more
    # XTC: this frame's compressed coordinates start with 16 bytes of 0xff (the first atom
    # then lies beyond the frame's integer box); the intact file is kept beside it
    corrupt_frame: int = None
    extra: dict = field(default_factory=dict)

    @property
    def n_frames(self):
        return len(self.steps)

    @property
    def damaged(self):
        return self.truncate_at is not None or self.natoms_change_frame is not None or self.corrupt_frame is not None

    def describe(self):
        """A short JSON-friendly summary (for failure reports)."""
        summary = {"format": self.format, "frames": self.n_frames, "atoms": self.n_atoms,
                   "steps": [int(self.steps[0]), int(self.steps[-1])]}
        if self.writer:
            summary["writer"] = self.writer
        if self.has_positions is not None and not self.has_positions.all():
            summary["frames_without_positions"] = int((~self.has_positions).sum())
        for name in ("velocities", "forces"):
            mask = getattr(self, f"has_{name}")
            if mask is not None:
                summary[name] = "all" if mask.all() else f"{int(mask.sum())} of {len(mask)}"
        if self.box is not None:
            summary["box"] = "all" if self.has_box.all() else f"{int(self.has_box.sum())} of {len(self.has_box)}"
            if not all(self.boundary):
                summary["boundary"] = ["periodic" if b else "none" for b in self.boundary]
        if self.format == "h5md":
            summary.update(length_unit=self.length_unit, time_unit=self.time_unit, step=self.step_store,
                           time=self.time_store, box_store=self.box_store, group=self.group_name)
            if self.velocity_rate > 1:
                summary["velocity_rate"] = self.velocity_rate
            if self.extras:
                summary["extras"] = list(self.extras)
        if self.format in ("dcd", "lammps"):
            summary.update(istart=self.dcd_istart, nsavc=self.dcd_nsavc, angles=self.dcd_angles)
        if self.format == "lammps":
            summary["delta_fs"] = self.dcd_delta_akma
        if self.format in ("ncdf", "trz", "gsd") and "dimensions" in self.extra:
            summary["dimensions"] = "triclinic" if np.any(self.extra["dimensions"][:, 3:] != 90.0) else "orthorhombic"
        if self.format == "xtc":
            summary["precision"] = self.xtc_precision
        if self.truncate_at is not None:
            summary["truncated_to_bytes"] = self.truncate_at
        if self.natoms_change_frame is not None:
            summary["atom_count_changes_at_frame"] = self.natoms_change_frame
        if self.corrupt_frame is not None:
            summary["corrupt_coordinates_in_frame"] = self.corrupt_frame
        if self.extra.get("ncdf_scales"):
            summary["scale_factors"] = self.extra["ncdf_scales"]
        if self.extra.get("zero_box") or self.extra.get("zero_cells"):
            summary["box"] = "all zeros"
        return summary


def attribute_text(value):
    """An HDF5 string attribute's value as text (h5py gives bytes or str, as it was stored)."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def intact_path(path):
    """Where the writers keep an input's bytes before its coordinates were damaged."""
    root, extension = os.path.splitext(path)
    return f"{root}.intact{extension}"


def coordinates(rng, shape, regime, scale=5.0):
    """Coordinates (float64, nm) drawn for one *regime*.

    ``near_power`` puts many values within a few float32 steps of +-10^-d (d = 1..6), of
    0 and of +-(10^-d)/2 (where rounding to a 10^-d grid flips), the values HDF5's
    scale-offset filter mishandles next to its fill value.
    """
    if regime == "zeros":
        values = np.zeros(shape)
        mask = rng.random(shape) < 0.2
        values[mask] = rng.uniform(-scale, scale, mask.sum())
        return values
    if regime == "negative":
        return -rng.uniform(0.0, 2 * scale, shape)
    if regime == "large":
        return rng.uniform(-100 * scale, 100 * scale, shape)
    values = rng.uniform(-scale / 2, 2 * scale, shape)
    if regime in ("near_power", "mixed"):
        fraction = 0.7 if regime == "near_power" else 0.2
        mask = rng.random(shape) < fraction
        count = int(mask.sum())
        powers = 10.0 ** -rng.integers(1, 7, count)
        base = powers * rng.choice([1.0, 0.5, 1.5, 0.999, 1.001, 0.0], count)
        wiggle = rng.choice([0.0, 1.0, -1.0, 2.0, -2.0], count) * np.spacing(np.float32(base)).astype(np.float64)
        values[mask] = rng.choice([1.0, -1.0], count) * (base + wiggle)
    return values


def lower_triangular_box(rng, triclinic):
    """A GROMACS-style box (rows are edge vectors, nm): a along x, b in the xy plane."""
    lengths = rng.uniform(2.0, 12.0, 3)
    box = np.diag(lengths)
    if triclinic:
        box[1, 0] = rng.uniform(-0.5, 0.5) * lengths[0]
        box[2, 0] = rng.uniform(-0.5, 0.5) * lengths[0]
        box[2, 1] = rng.uniform(-0.5, 0.5) * lengths[1]
    return box


def boxes(rng, n_frames, kind, changing):
    """(n, 3, 3) boxes of *kind* ("ortho" or "triclinic"), constant or changing per frame."""
    first = lower_triangular_box(rng, kind == "triclinic")
    if not changing:
        return np.repeat(first[None], n_frames, axis=0)
    scale = 1.0 + rng.uniform(-0.02, 0.02, (n_frames, 1, 1))
    return first[None] * scale


def make_steps(rng, n_frames, first_step, stride, irregular):
    """Strictly increasing steps."""
    if irregular:
        increments = rng.integers(1, 3 * stride + 1, max(0, n_frames - 1))
    else:
        increments = np.full(max(0, n_frames - 1), stride)
    return first_step + np.concatenate([[0], np.cumsum(increments)]).astype(np.int64)

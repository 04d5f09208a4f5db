"""Write a :class:`~.spec.SegmentSpec` to disk, in its format, with the writer it names.

XTC and TRR go through MDAnalysis's ``libmdaxdr`` writers, DCD through ``libdcd``; H5MD
through h5mdtool itself (``h5mdtool.convert`` of an XTC or TRR written first), MDAnalysis's
``H5MDWriter``, pyh5md, or plain h5py. Damage (a truncated file, an XTC whose atom count
changes, an XTC frame whose compressed coordinates are damaged) is applied after writing.
The topology of a generated system is a PDB written by MDAnalysis, with atom names drawn so
that selections such as ``name CA`` match some atoms.
"""

import os
import warnings

import numpy as np

from .spec import LENGTH_PER_NM, TIME_PER_PS, attribute_text, intact_path

#: Atom names of generated systems (several per residue so backbone selections match).
ATOM_NAMES = ("N", "CA", "C", "O", "CB", "OW", "HW1", "HW2", "NA", "CL")


class SourceUnavailable(Exception):
    """The input could not be made (h5mdtool refused to write an H5MD source)."""


def write_segment(spec, path):
    """Write *spec* at *path*; return the path."""
    writer = {"xtc": _write_xtc, "trr": _write_trr, "dcd": _write_dcd, "lammps": _write_dcd, "h5md": _write_h5md,
              "ncdf": _write_ncdf, "trz": _write_trz, "gsd": _write_gsd}[spec.format]
    writer(spec, path)
    if spec.extra.get("truncate"):
        _truncate(spec, path)
    if spec.corrupt_frame is not None:
        _corrupt_coordinates(spec, path)
    return path


def _corrupt_coordinates(spec, path):
    """Set the first 16 bytes of frame ``spec.corrupt_frame``'s compressed coordinates to
    0xff, keeping the intact file at :func:`~.spec.intact_path` (the oracle reads that)."""
    import shutil
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from xtc_samples import damaged_copy

    shutil.copyfile(path, intact_path(path))
    damaged_copy(intact_path(path), path, spec.corrupt_frame)


def _boxes_or_zeros(spec, dtype=np.float32):
    if spec.box is None:
        return np.zeros((spec.n_frames, 3, 3), dtype)
    boxes = np.asarray(spec.box, dtype).copy()
    boxes[~spec.has_box] = 0
    return boxes


def _write_xtc(spec, path):
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    boxes = _boxes_or_zeros(spec)
    change = spec.natoms_change_frame
    pieces = [(0, spec.n_frames, spec.n_atoms)]
    if change is not None:
        pieces = [(0, change, spec.n_atoms), (change, spec.n_frames, spec.n_atoms + 1)]
    with open(path, "wb") as joined:
        for number, (first, stop, n_atoms) in enumerate(pieces):
            piece = f"{path}.piece{number}"
            with XTCFile(piece, "w") as handle:
                for frame in range(first, stop):
                    xyz = np.zeros((n_atoms, 3), np.float32)
                    xyz[: spec.n_atoms] = spec.positions[frame]
                    handle.write(xyz, boxes[frame], int(spec.steps[frame]), float(spec.times[frame]),
                                 float(spec.xtc_precision))
            with open(piece, "rb") as part:
                joined.write(part.read())
            os.remove(piece)


def _write_trr(spec, path):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    boxes = _boxes_or_zeros(spec)
    with TRRFile(path, "w") as handle:
        for frame in range(spec.n_frames):
            def pick(name):
                values, mask = getattr(spec, name), getattr(spec, f"has_{name}")
                if values is None or not mask[frame]:
                    return None
                return np.asarray(values[frame], np.float32)

            handle.write(pick("positions"), pick("velocities"), pick("forces"), boxes[frame],
                         int(spec.steps[frame]), float(spec.times[frame]), float(spec.extra.get("lambda", 0.0)),
                         spec.n_atoms)


def _write_dcd(spec, path):
    """DCD in Angstrom; the unit cell is ``[A, gamma, B, beta, alpha, C]`` with the angles as
    cosines (NAMD, CHARMM >= 22) or in degrees (old CHARMM). A LAMMPS DCD has the same
    bytes; its DELTA (``spec.dcd_delta_akma``) is then in fs."""
    from MDAnalysis.lib.formats.libdcd import DCDFile

    cells = spec.extra.get("dcd_cells")  # (n, 6): A, B, C (Angstrom), alpha, beta, gamma (degrees)
    # "periodic" with zero lengths: the record MDAnalysis's DCDWriter writes for a universe without a box
    zero_cells = bool(spec.extra.get("zero_cells"))
    with DCDFile(path, "w") as handle:
        handle.write_header(remarks=b"h5mdtool differential harness", natoms=spec.n_atoms,
                            istart=int(spec.dcd_istart), nsavc=int(spec.dcd_nsavc),
                            delta=float(spec.dcd_delta_akma), is_periodic=int(cells is not None or zero_cells))
        for frame in range(spec.n_frames):
            box = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0]) if zero_cells else None
            if cells is not None:
                a, b, c, alpha, beta, gamma = np.asarray(cells[frame], np.float64)
                angles = np.array([gamma, beta, alpha])
                if spec.dcd_angles == "cosine":
                    angles = np.sin(np.deg2rad(90.0 - angles))
                box = np.array([a, angles[0], b, angles[1], angles[2], c], np.float64)
            handle.write(xyz=np.asarray(spec.positions[frame], np.float32), box=box)


def _truncate(spec, path):
    """Cut the file inside its last frame: in its header or in its data (XTC/TRR/DCD)."""
    where, fraction = spec.extra["truncate"]
    size = os.path.getsize(path)
    if spec.format in ("xtc", "trr"):
        from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

        with (XTCFile if spec.format == "xtc" else TRRFile)(path) as handle:
            last = int(handle.offsets[-1])
    else:
        from MDAnalysis.lib.formats.libdcd import DCDFile

        with DCDFile(path) as handle:
            last = size - int(handle._framesize)
    frame_bytes = size - last
    header = min(frame_bytes - 1, 24 if spec.format in ("xtc", "trr") else 4)
    if where == "header":
        keep = last + 1 + int(fraction * max(1, header - 1))
    else:
        keep = last + header + int(fraction * max(1, frame_bytes - header - 1))
    keep = int(min(max(keep, last + 1), size - 1))
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    spec.truncate_at = keep


# -- formats written through MDAnalysis's writers or gsd (issue 14) ------------------------

def _memory_universe(spec):
    """A universe holding *spec*'s frames (Angstrom, ps) in MDAnalysis's MemoryReader."""
    import MDAnalysis
    from MDAnalysis.coordinates.memory import MemoryReader

    universe = MDAnalysis.Universe.empty(spec.n_atoms, trajectory=True)
    kwargs = {}
    if spec.velocities is not None:
        kwargs["velocities"] = np.asarray(spec.velocities, np.float32)
    if spec.forces is not None:
        kwargs["forces"] = np.asarray(spec.forces, np.float32)
    dimensions = spec.extra.get("dimensions")
    universe.load_new(np.asarray(spec.positions, np.float32), format=MemoryReader,
                      dimensions=None if dimensions is None else np.asarray(dimensions, np.float32), **kwargs)
    return universe


def _write_ncdf(spec, path):
    """AMBER NetCDF by MDAnalysis's NCDFWriter (scipy's NetCDF-3 path): Angstrom, ps,
    kcal/(mol Angstrom); velocities with AMBER's scale factor 20.455 (the writer's default)."""
    from MDAnalysis.coordinates.TRJ import NCDFWriter

    universe = _memory_universe(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's slower NetCDF-3 writer is announced
        with NCDFWriter(path, spec.n_atoms, velocities=spec.velocities is not None,
                        forces=spec.forces is not None, **spec.extra.get("ncdf_scales", {})) as writer:
            for frame, ts in enumerate(universe.trajectory):
                ts.time = float(spec.times[frame])
                writer.write(universe)


def _write_trz(spec, path):
    """TRZ by MDAnalysis's TRZWriter (stores nm, nm/ps; the step in ``ntrj``, the time in ``treal``)."""
    from MDAnalysis.coordinates.TRZ import TRZWriter

    universe = _memory_universe(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # energies and pressures the universe lacks are written as zeros
        with TRZWriter(path, spec.n_atoms) as writer:
            for frame, ts in enumerate(universe.trajectory):
                ts.data["frame"] = int(spec.steps[frame])
                ts.time = float(spec.times[frame])
                if spec.extra.get("dimensions") is None:
                    ts.dimensions = None
                writer.write(universe)


def _write_gsd(spec, path):
    """GSD (HOOMD schema) by the gsd package: step, particle positions and the box
    ``[Lx, Ly, Lz, xy, xz, yz]`` (zero tilts; gsd's default ``[1, 1, 1, 0, 0, 0]`` when
    *spec* has none, or zeros with ``extra["zero_box"]``)."""
    import gsd.hoomd

    dimensions = spec.extra.get("dimensions")
    with gsd.hoomd.open(path, "w") as handle:
        for index in range(spec.n_frames):
            frame = gsd.hoomd.Frame()
            frame.configuration.step = int(spec.steps[index])
            if dimensions is not None:
                frame.configuration.box = np.concatenate([dimensions[index][:3], np.zeros(3)]).astype(np.float32)
            elif spec.extra.get("zero_box"):
                frame.configuration.box = np.zeros(6, np.float32)
            frame.particles.N = spec.n_atoms
            frame.particles.position = np.asarray(spec.positions[index], np.float32)
            frame.particles.types = ["A"]
            frame.particles.typeid = np.zeros(spec.n_atoms, np.uint32)
            handle.append(frame)


# -- H5MD -------------------------------------------------------------------------------

def _write_h5md(spec, path):
    {"h5mdtool": _h5md_by_h5mdtool, "mdanalysis": _h5md_by_mdanalysis,
     "pyh5md": _h5md_by_library, "h5py": _h5md_by_library}[spec.writer](spec, path)


def _h5md_by_h5mdtool(spec, path):
    """h5mdtool's own H5MD: convert an XTC (positions, box) or a TRR (all fields) written first."""
    import h5mdtool

    fmt = "trr" if spec.velocities is not None or spec.forces is not None else "xtc"
    source = f"{path}.source.{fmt}"
    (_write_trr if fmt == "trr" else _write_xtc)(spec, source)
    try:
        h5mdtool.convert([source], path, force=True, progress=False)
    except Exception as error:  # noqa: BLE001 - any failure: this input cannot be made
        raise SourceUnavailable(f"h5mdtool convert could not write the H5MD source: {error}") from None
    finally:
        os.remove(source)
    if spec.box is not None:
        _boundary_as_stored(spec, path)


def _h5md_by_mdanalysis(spec, path):
    """MDAnalysis's H5MDWriter: values handed over in MDAnalysis units (Angstrom, ps)."""
    import MDAnalysis
    from MDAnalysis.coordinates.H5MD import H5MDWriter
    from MDAnalysis.coordinates.memory import MemoryReader
    from MDAnalysis.lib.mdamath import triclinic_box

    universe = MDAnalysis.Universe.empty(spec.n_atoms, trajectory=True)
    factor = 10.0 / LENGTH_PER_NM[spec.length_unit]  # file unit -> Angstrom
    dimensions = None
    if spec.box is not None:
        dimensions = np.array([triclinic_box(*(b * factor)) for b in spec.box], np.float32)
    kwargs = {}
    if spec.velocities is not None:
        kwargs["velocities"] = np.asarray(spec.velocities * factor, np.float32)
    if spec.forces is not None:
        kwargs["forces"] = np.asarray(spec.forces / factor, np.float32)
    universe.load_new(np.asarray(spec.positions * factor, np.float32), format=MemoryReader,
                      dimensions=dimensions, **kwargs)
    units = {"timeunit": spec.time_unit, "lengthunit": spec.length_unit}
    if spec.velocities is not None:  # MDAnalysis's notation here, not H5MD's
        units["velocityunit"] = f"{spec.length_unit}/ps"
    if spec.forces is not None:
        units["forceunit"] = "kJ/(mol*Angstrom)" if spec.length_unit == "Angstrom" else "kJ/(mol*nm)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with H5MDWriter(path, spec.n_atoms, n_frames=spec.n_frames, velocities=spec.velocities is not None,
                        forces=spec.forces is not None, **units) as writer:
            for frame, ts in enumerate(universe.trajectory):
                ts.data["step"] = int(spec.steps[frame])
                ts.time = float(spec.times[frame]) / TIME_PER_PS[spec.time_unit]
                writer.write(universe)
    if spec.box is not None:  # the truth is what was stored: lengths and angles back to vectors move an ulp
        import h5py

        with h5py.File(path, "r") as handle:
            spec.box = handle["particles/trajectory/box/edges/value"][()].astype(np.float64)
        _boundary_as_stored(spec, path)


def _boundary_as_stored(spec, path):
    """Set *spec.boundary* to what the writer stored: MDAnalysis's H5MDWriter and h5mdtool
    write a box as periodic in every dimension whatever the spec drew (make fuzz cases
    1038-1041, seed 3202204358: an append's segments given the first one's boundary "none")."""
    import h5py

    with h5py.File(path, "r") as handle:
        stored = handle["particles/trajectory/box"].attrs.get("boundary")
    if stored is not None:
        spec.boundary = tuple(attribute_text(b) == "periodic" for b in stored)


def _string_attr(values):
    import h5py

    return np.array(values, dtype=h5py.string_dtype("ascii", None))


def _series(group, name, values, store, unit=None):
    """Write an explicit (1-D) or fixed (scalar increment, ``offset`` = first value) step or time."""
    values = np.asarray(values)
    if store == "fixed":
        increment = values[1] - values[0] if len(values) > 1 else values.dtype.type(1)
        dataset = group.create_dataset(name, data=increment)
        dataset.attrs["offset"] = values[0]
    else:
        dataset = group.create_dataset(name, data=values)
    if unit is not None:
        dataset.attrs["unit"] = unit
    return dataset


def _h5md_by_library(spec, path):
    """pyh5md (its File, particle group, box and elements) or plain h5py, per ``spec.writer``."""
    import h5py

    use_pyh5md = spec.writer == "pyh5md"
    if use_pyh5md:
        import pyh5md

        handle = pyh5md.File(path, "w", author="harness", creator="pyh5md", creator_version=pyh5md.__version__)
    else:
        handle = h5py.File(path, "w")
        meta = handle.create_group("h5md")
        meta.attrs["version"] = np.array([1, 1], np.int32)
        meta.create_group("author").attrs["name"] = "harness"
        creator = meta.create_group("creator")
        creator.attrs["name"] = "h5py"
        creator.attrs["version"] = h5py.__version__
    with handle:
        units = handle.require_group("h5md/modules/units")
        units.attrs["version"] = np.array([1, 0], np.int32)
        units.attrs["system"] = "SI"
        particles = handle.create_group("particles", track_order=True)
        _write_particle_group(spec, particles, spec.group_name, use_pyh5md)
        if "other_group" in spec.extras:
            _write_other_group(spec, particles)
        if "observables" in spec.extras:
            energy = handle.create_group("observables").create_group("potential_energy")
            energy.create_dataset("value", data=np.linspace(-100.0, -90.0, spec.n_frames))
            energy["step"] = handle[f"particles/{spec.group_name}/position/step"]
            if "time" in handle[f"particles/{spec.group_name}/position"]:
                energy["time"] = handle[f"particles/{spec.group_name}/position/time"]
        if "connectivity" in spec.extras:
            bonds = handle.create_group("connectivity").create_dataset("bonds", data=spec.bonds.astype(np.int32))
            bonds.attrs["particles_group"] = f"/particles/{spec.group_name}"
        if "parameters" in spec.extras:
            parameters = handle.create_group("parameters")
            parameters.attrs["program"] = "harness"
            parameters.attrs["seed"] = np.int64(12345)
            parameters.create_dataset("temperature", data=300.0)
            parameters.create_group("thermostat").attrs["kind"] = "v-rescale"


def _edges_layout(spec):
    """Box edges in the stored shape: (n, 3, 3), (n, 3), (3,) or (3, 3) (file units)."""
    box = np.asarray(spec.box, np.float32)
    return {"n33": box, "n3": np.diagonal(box, axis1=1, axis2=2).copy(),
            "fixed3": np.diagonal(box[0]).copy(), "fixed33": box[0]}[spec.box_store]


def _write_particle_group(spec, particles, name, use_pyh5md):
    group = particles.create_group(name)
    box = group.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = _string_attr(["periodic" if p else "none" for p in spec.boundary])
    length, time_unit = spec.length_unit, spec.time_unit
    position = group.create_group("position")
    value = position.create_dataset("value", data=np.asarray(spec.positions, np.float32),
                                    chunks=(1, spec.n_atoms, 3) if use_pyh5md else None,
                                    maxshape=(None, spec.n_atoms, 3) if use_pyh5md else None)
    value.attrs["unit"] = length
    _series(position, "step", spec.steps, spec.step_store)
    if spec.time_store != "missing":
        _series(position, "time", spec.times, spec.time_store, unit=time_unit)
    if spec.box is not None and spec.box_store != "none":
        edges = _edges_layout(spec)
        if spec.box_store.startswith("fixed"):
            box.create_dataset("edges", data=edges).attrs["unit"] = length
        else:
            element = box.create_group("edges")
            element.create_dataset("value", data=edges).attrs["unit"] = length
            element["step"] = position["step"]
            if "time" in position:
                element["time"] = position["time"]
    for field, unit in (("velocity", f"{length} ps-1"),
                        ("force", "kJ mol-1 Angstrom-1" if length == "Angstrom" else "kJ mol-1 nm-1")):
        values = getattr(spec, "velocities" if field == "velocity" else "forces")
        if values is None:
            continue
        mask = getattr(spec, "has_velocities" if field == "velocity" else "has_forces")
        element = group.create_group(field)
        element.create_dataset("value", data=np.asarray(values[mask], np.float32)).attrs["unit"] = unit
        if mask.all():
            element["step"] = position["step"]
            if "time" in position:
                element["time"] = position["time"]
        else:
            element.create_dataset("step", data=spec.steps[mask])
            if spec.time_store != "missing":
                element.create_dataset("time", data=spec.times[mask]).attrs["unit"] = time_unit


def _write_other_group(spec, particles):
    """A second particle group (listed after ``trajectory``): its own atoms and steps; with
    ``extra["other_box"] == "edges"`` a periodic box with time-dependent edges and attributes
    of its own on the group, the box and the edges (a relayout must keep them all)."""
    other = particles.create_group("water")
    box = other.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    n = max(1, spec.n_frames // 2)
    steps = np.arange(n, dtype=np.int64) * 7
    if spec.extra.get("other_box") == "edges":
        other.attrs["description"] = "water"
        box.attrs["boundary"] = _string_attr(["periodic", "periodic", "none"])
        box.attrs["comment"] = np.bytes_("slab")
        edges = box.create_group("edges")
        edges.attrs["origin"] = np.int16(4)
        edges.create_dataset("value", data=np.tile(np.diag([3.0, 4.0, 5.0]).astype(np.float32), (n, 1, 1)))
        edges["value"].attrs["unit"] = "nm"
    else:
        box.attrs["boundary"] = _string_attr(["none"] * 3)
    position = other.create_group("position")
    position.create_dataset("value", data=np.full((n, 2, 3), 0.5, np.float32)).attrs["unit"] = "nm"
    position.create_dataset("step", data=steps)
    position.create_dataset("time", data=np.arange(n, dtype=np.float64)).attrs["unit"] = "ps"
    if "edges" in box:  # H5MD: the box shares its position's step and time (hard links)
        box["edges/step"], box["edges/time"] = position["step"], position["time"]


# -- topology ---------------------------------------------------------------------------

def write_topology(n_atoms, names, path):
    """A PDB topology for *n_atoms* atoms named *names* (residues of four atoms)."""
    import MDAnalysis

    universe = MDAnalysis.Universe.empty(n_atoms, n_residues=(n_atoms + 3) // 4,
                                         atom_resindex=np.arange(n_atoms) // 4, trajectory=True)
    universe.add_TopologyAttr("name", list(names))
    universe.add_TopologyAttr("resname", ["ALA"] * universe.atoms.n_residues)
    universe.add_TopologyAttr("resid", np.arange(1, universe.atoms.n_residues + 1))
    universe.add_TopologyAttr("type", [name[0] for name in names])
    universe.add_TopologyAttr("segid", ["SYS"])
    universe.add_TopologyAttr("chainID", ["A"] * n_atoms)
    universe.add_TopologyAttr("elements", [("C", "N", "O", "H", "S", "Na")[i % 6] for i in range(n_atoms)])
    universe.atoms.positions = np.zeros((n_atoms, 3), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe.atoms.write(path)
    return path


# -- reference copies for validate --against -------------------------------------------------

def write_reference_copy(frames, path, mutation=None):
    """An H5MD file in h5mdtool's layout holding the oracle's *frames* (see :mod:`.oracle`).

    Positions, velocities and forces are float32 nm (rounded from the oracle's float64),
    step int64, time float64 ps, box (n, 3, 3) with step and time hard-linked. With
    *mutation* one value is changed: ``{"field", "frame", "atom", "axis", "value"}`` where
    value is ``shift`` (a change far beyond any tolerance), ``nan``, ``inf`` or ``-inf``.
    Returns a description of the change actually made (the field may fall back to
    positions when the copy has no such field), or None.
    """
    import h5py

    n, n_atoms = frames.n_frames, frames.n_atoms
    arrays = {"position": frames.positions.values.astype(np.float32)}
    if frames.velocities is not None and frames.velocities.mask.all():
        arrays["velocity"] = frames.velocities.values.astype(np.float32)
    if frames.forces is not None and frames.forces.mask.all():
        arrays["force"] = frames.forces.values.astype(np.float32)
    steps = frames.steps.astype(np.int64).copy()
    times = frames.times.astype(np.float64).copy()
    # edges whenever the source has them, periodic or not (MDAnalysis reads them either way)
    has_edges = frames.edges is not None and frames.box_mask is not None and bool(frames.box_mask.any())
    edges = frames.edges.astype(np.float32).copy() if has_edges else None
    change = None
    if mutation is not None:
        change = _mutate(mutation, arrays, steps, times, edges, n, n_atoms)
    with h5py.File(path, "w") as handle:
        meta = handle.create_group("h5md")
        meta.attrs["version"] = np.array([1, 1], np.int32)
        meta.create_group("author").attrs["name"] = "harness"
        creator = meta.create_group("creator")
        creator.attrs["name"] = "differential harness"
        creator.attrs["version"] = "1"
        units = meta.create_group("modules/units")
        units.attrs["version"] = np.array([1, 0], np.int32)
        units.attrs["system"] = "SI"
        group = handle.create_group("particles", track_order=True).create_group("trajectory")
        box = group.create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = _string_attr(["periodic" if (b and edges is not None) else "none" for b in frames.boundary])
        unit_of = {"position": "nm", "velocity": "nm ps-1", "force": "kJ mol-1 nm-1"}
        owner = None
        for name, values in arrays.items():
            element = group.create_group(name)
            element.create_dataset("value", data=values, chunks=(1, n_atoms, 3)).attrs["unit"] = unit_of[name]
            if owner is None:
                element.create_dataset("step", data=steps)
                element.create_dataset("time", data=times).attrs["unit"] = "ps"
                owner = element
            else:
                element["step"], element["time"] = owner["step"], owner["time"]
        if edges is not None:
            element = box.create_group("edges")
            element.create_dataset("value", data=edges).attrs["unit"] = "nm"
            element["step"], element["time"] = owner["step"], owner["time"]
    return change


def _mutate(mutation, arrays, steps, times, edges, n, n_atoms):
    field, frame = mutation["field"], int(mutation["frame"]) % n
    kind = mutation["value"]
    names = {"positions": "position", "velocities": "velocity", "forces": "force"}
    if field in names and names[field] not in arrays:
        field = "positions"
    if field == "box" and edges is None:
        field = "positions"
    if field == "time" and kind != "shift":
        kind = "shift" if kind == "-inf" else kind

    def changed(value):
        if kind == "nan":
            return np.nan
        if kind == "inf":
            return np.inf
        if kind == "-inf":
            return -np.inf
        return value + max(1e-3, 1e-3 * abs(value)) * 7.0

    if field in names:
        atom, axis = int(mutation["atom"]) % n_atoms, int(mutation["axis"])
        array = arrays[names[field]]
        array[frame, atom, axis] = np.float32(changed(float(array[frame, atom, axis])))
        where = f"atom {atom} axis {axis}"
    elif field == "box":
        axis = int(mutation["axis"])
        edges[frame, axis, axis] = np.float32(changed(float(edges[frame, axis, axis])))
        where = f"edge {axis}"
    elif field == "step":
        steps[frame] += 1 if frame + 1 == n or steps[frame + 1] > steps[frame] + 1 else -1 if frame == 0 or steps[frame - 1] < steps[frame] - 1 else 1
        where = "step"
    else:
        times[frame] = changed(float(times[frame]))
        where = "time"
    return {"field": field, "frame": frame, "value": kind if field != "step" else "shift", "where": where}

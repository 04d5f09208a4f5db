"""Topologies: reading them (files, or an H5MD file that carries its own), picking atoms, and
writing one into an H5MD file so that the file is self-contained.

What h5mdtool writes with ``--topology`` (H5MD 1.1 particle elements, and the structure
parameters of VMD's H5MD plugin, VMD-h5mdplugin, as its "Documentation VMD parameters" and
reader lay them out; docs/convert.md, "The stored topology", lists what was checked):

``/particles/trajectory``
    ``species`` (int32 per atom: index of the atom's (name, type, element) kind), ``mass`` and
    ``charge`` (per atom, when the topology has them; the plugin reads them here), ``id``
    (int64 per atom: the atom's index in the source system, so a ``--select``ed file says
    which atoms it kept).
``/connectivity/bonds``
    (n, 2) int64 bonds between atoms of the file (0-based), renumbered for a selection.
``/parameters/vmd_structure``
    ``indexOfSpecies``, ``name`` and ``type`` per species, and ``atomicnumber`` when the
    topology has elements (without it the plugin takes each species number for an atomic
    number); ``resid`` per atom (the residue's index: the plugin looks ``resname`` and
    ``chain`` up by it), ``resname`` and ``chain`` per residue, ``segid`` per atom,
    ``bond_from``/``bond_to`` (1-based, as VMD's molfile API counts); for h5mdtool to read
    back, also ``num_segid`` (each atom's segment index),
    ``resnum`` (the topology's own residue numbers) and ``element`` per species (the
    topology's element symbols, which atomic numbers do not keep: ``""``, dummies).

:func:`load_topology` reads such a file back into an MDAnalysis Universe (names, types,
residues, segments, chain IDs, elements, masses, charges, bonds), so ``bench rmsd`` and
``validate`` need no separate topology and ``h5mdtool topology`` can write one for other
programs.
"""

import contextlib
import os
import warnings

import numpy as np

from ..parallel.errors import InputError, OutputError, UsageError
from ..parallel.mpi import closing_h5
from .provenance import printable

VMD = "parameters/vmd_structure"
PARTICLES = "particles/trajectory"


def _reason(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def carries_topology(path):
    """True when *path* is an HDF5 file with h5mdtool's (or VMD's) structure module."""
    try:
        import h5py

        with h5py.File(path, "r") as handle:
            return f"{VMD}/name" in handle and f"{PARTICLES}/species" in handle
    except Exception:  # noqa: BLE001 - not an HDF5 file, or unreadable: no topology
        return False


def load_topology(path):
    """An MDAnalysis Universe of the topology in *path* (a topology file or an H5MD file).

    Raises
    ------
    InputError
        If the file is missing or holds no topology MDAnalysis or h5mdtool can read.
    """
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such topology file")
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)
    if key not in _LOADED:
        _LOADED.clear()  # one topology at a time: convert reads it when planning and when finishing
        _LOADED[key] = _load(path)
    return _LOADED[key]


_LOADED = {}


def _load(path):
    if carries_topology(path):
        return universe_from_h5md(path)
    return read_universe(path)


def resolve_topology(inputs, topology=None):
    """The topology to read for trajectory *inputs*, and where it comes from.

    Parameters
    ----------
    inputs : list of str
    topology : str, optional
        A topology file (an H5MD file carrying one counts too).

    Returns
    -------
    (str, str)
        The topology's path, and ``"file"`` or ``"stored in PATH"``.

    Raises
    ------
    UsageError
        No *topology* and the input is not one H5MD file carrying its topology.
    InputError
        No *topology* and an input is missing (a mistyped name is not a missing topology).
    """
    if topology is not None:
        return topology, (f"stored in {topology}" if carries_topology(topology) else "file")
    if len(inputs) == 1 and os.path.isfile(inputs[0]) and carries_topology(inputs[0]):
        return inputs[0], f"stored in {inputs[0]}"
    for path in inputs:
        if not os.path.lexists(path):
            raise InputError(f"{path}: no such file")
    raise UsageError("--topology FILE is needed: the input carries no topology "
                     "(h5mdtool convert --topology stores one in an H5MD file)")


def read_universe(path, what="topology"):
    """``MDAnalysis.Universe(path)`` with its warnings silenced; for an H5MD file carrying its
    topology, that topology (:func:`universe_from_h5md`).

    Raises
    ------
    InputError
        When MDAnalysis cannot read it, naming the file as a *what*.
    """
    import MDAnalysis

    if carries_topology(path):
        return universe_from_h5md(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return MDAnalysis.Universe(path)
    except Exception as error:  # noqa: BLE001 - MDAnalysis raises many types here
        raise InputError(f"{path}: cannot read {what} ({_reason(error)})") from None


def pick_atoms(universe, selection, topology, frame=None):
    """Indices of the atoms of *universe* matched by *selection*.

    Parameters
    ----------
    frame : callable, optional
        Returns the positions (Angstrom) and MDAnalysis ``dimensions`` (or None) of the
        trajectory frame that geometric selections (``around``, ``sphzone``, ``prop z``...)
        are evaluated on, as in ``Universe(topology, trajectory)`` at that frame; they become
        *universe*'s coordinates. Without it, the topology's own coordinates are used.

    Raises
    ------
    InputError
        If the selection is invalid or matches nothing.
    """
    if frame is not None:
        from MDAnalysis.coordinates.memory import MemoryReader

        positions, dimensions = frame()
        universe.load_new(positions[np.newaxis], format=MemoryReader, dimensions=dimensions)
    try:
        group = universe.select_atoms(selection)
    except Exception as error:  # noqa: BLE001
        raise InputError(f"invalid selection {selection!r}: {_reason(error)}") from None
    if len(group) == 0:
        raise InputError(f"selection {selection!r} matches no atom of {topology}")
    return np.asarray(group.indices, dtype=np.int64)


def select_atoms(topology, selection, n_atoms, frame=None):
    """The topology's Universe and the atom indices picked by *selection* (None for all atoms),
    evaluated on the coordinates *frame* gives (see :func:`pick_atoms`).

    Returns
    -------
    (Universe or None, numpy.ndarray or None)

    Raises
    ------
    InputError
        If a selection is given without a topology, if the topology cannot be read, does not match the trajectory's atom count, or the
        selection is invalid or matches nothing.
    """
    if selection is None and topology is None:
        return None, None
    if topology is None:
        raise InputError("--select needs --topology FILE to know the atoms' names")
    universe = load_topology(topology)
    if len(universe.atoms) != n_atoms:
        raise InputError(f"{topology} has {len(universe.atoms)} atoms but the trajectory has {n_atoms}")
    return universe, (None if selection is None else pick_atoms(universe, selection, topology, frame))


def read_atom_indices(path, n_atoms):
    """0-based atom indices from a plain text file (whitespace or comma separated), as mdconvert's ``-a``.

    Raises
    ------
    InputError
        If the file is missing, holds something else than whole numbers, or indices that are
        out of range, repeated or not increasing.
    """
    try:
        with open(path) as handle:
            words = handle.read().replace(",", " ").split()
    except OSError as error:
        raise InputError(f"{path}: cannot read the atom indices ({_reason(error)})") from None
    try:
        indices = np.array([int(word) for word in words], dtype=np.int64)
    except ValueError:
        bad = next(word for word in words if not word.lstrip("-").isdigit())
        raise InputError(f"{path}: {bad!r} is not a whole number; the file lists 0-based atom indices") from None
    if len(indices) == 0:
        raise InputError(f"{path}: lists no atom index")
    if indices.min() < 0 or indices.max() >= n_atoms:
        raise InputError(f"{path}: atom indices run from {indices.min()} to {indices.max()}, but the trajectory "
                         f"has atoms 0 to {n_atoms - 1}")
    if np.any(np.diff(indices) <= 0):
        raise InputError(f"{path}: atom indices must increase and be unique (sort them: h5mdtool keeps the atoms "
                         "in the trajectory's order)")
    return indices


def _strings(values):
    """A fixed-length ASCII array, as wide as the longest value (the VMD plugin reads any width
    and keeps what fits its own fields)."""
    encoded = [str(v).encode("ascii", "replace") for v in values]
    return np.array(encoded, dtype=f"S{max([1] + [len(v) for v in encoded])}")


def _element_tables():
    """MDAnalysis's (symbol -> atomic number, atomic number -> symbol) tables."""
    try:
        from MDAnalysis.guesser.tables import SYMB2Z, Z2SYMB
    except ImportError:  # MDAnalysis before 2.8
        from MDAnalysis.topology.tables import SYMB2Z, Z2SYMB
    return SYMB2Z, Z2SYMB


def atomic_numbers(symbols):
    """The atomic number of each element symbol (``"C"``, ``"CL"``, ``"Cl"``), 0 where it
    names no element (``""``, a dummy atom): VMD's ``atomicnumber``, 0 being its "X"."""
    by_symbol = _element_tables()[0]
    return np.array([by_symbol.get(str(symbol).strip().capitalize(), 0) for symbol in symbols], np.int32)


def stored_elements(record):
    """Each atom's element of a :func:`read_stored_topology` *record* (an object array), or
    None when the file stores none: the symbols h5mdtool stored, else the symbols of the
    atomic numbers another writer stored (``""`` for 0 and numbers of no element)."""
    if "elements" in record:
        return np.asarray(record["elements"]).astype(object)
    if "atomic_numbers" in record:
        by_number = _element_tables()[1]
        return np.array([by_number.get(int(number), "") for number in record["atomic_numbers"]], dtype=object)
    return None


def _attribute(atoms, name):
    try:
        return getattr(atoms, name)
    except Exception:  # noqa: BLE001 - MDAnalysis raises NoDataError for missing attributes
        return None


def topology_record(universe, atom_indices=None):
    """The arrays h5mdtool writes for the atoms *atom_indices* (all when None) of *universe*."""
    atoms = universe.atoms if atom_indices is None else universe.atoms[np.asarray(atom_indices)]
    n = len(atoms)
    names = _attribute(atoms, "names")
    names = np.array(["X"] * n) if names is None else np.asarray(names).astype(str)
    types = _attribute(atoms, "types")
    types = names if types is None else np.asarray(types).astype(str)
    elements = _attribute(atoms, "elements")
    columns = [names, types] + ([] if elements is None else [np.asarray(elements).astype(str)])
    kinds, species = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    residues = atoms.residues
    resindex = np.searchsorted(residues.resindices, atoms.resindices)
    segments = atoms.segments
    segindex = np.searchsorted(segments.segindices, atoms.segindices)
    source_ids = getattr(universe, "h5mdtool_source_ids", None)
    record = {
        # the atoms' indices in the original system, also through a file made from a subset
        "id": (atoms.indices if source_ids is None else source_ids[atoms.indices]).astype(np.int64),
        "species": species.reshape(-1).astype(np.int32),
        "kind_names": kinds[:, 0], "kind_types": kinds[:, 1],
        "resindex": resindex.astype(np.int32),
        "resnames": np.asarray(_attribute(residues, "resnames") if _attribute(residues, "resnames") is not None
                               else ["UNK"] * len(residues)).astype(str),
        "resnums": np.asarray(_attribute(residues, "resids") if _attribute(residues, "resids") is not None
                              else np.arange(1, len(residues) + 1), np.int64),
        "segids": np.asarray(_attribute(segments, "segids") if _attribute(segments, "segids") is not None
                             else ["SYSTEM"] * len(segments)).astype(str),
        "segindex": segindex.astype(np.int32),
    }
    if elements is not None:
        record["kind_elements"] = kinds[:, 2]
    chains = _attribute(atoms, "chainIDs")
    if chains is not None:
        first = np.unique(resindex, return_index=True)[1]
        record["chains"] = np.asarray(chains).astype(str)[first]
    for name in ("masses", "charges"):
        values = _attribute(atoms, name)
        if values is not None:
            record[name] = np.asarray(values, np.float64)
    bonds = _attribute(universe.atoms, "bonds")
    if bonds is not None and len(bonds):
        pairs = np.asarray(bonds.indices, np.int64)
        renumber = np.full(len(universe.atoms), -1, np.int64)
        renumber[atoms.indices] = np.arange(n)
        pairs = renumber[pairs]
        record["bonds"] = pairs[(pairs >= 0).all(axis=1)]
    return record


def write_topology(path, universe, atom_indices=None, topology_path=None):
    """Write the topology of the written atoms into the finished H5MD file *path* (rank 0).

    Replaces any ``species``/``mass``/``charge``/``id``, ``/connectivity/bonds`` and
    ``/parameters/vmd_structure`` carried over from an H5MD input.

    Returns
    -------
    dict
        What was written (for the summary and provenance).
    """
    import h5py

    record = topology_record(universe, atom_indices)
    with closing_h5(h5py.File(path, "r+")) as handle:
        group = handle[PARTICLES]
        for name in ("species", "mass", "charge", "id"):
            if name in group:
                del group[name]
        group["species"] = record["species"]
        group["id"] = record["id"]
        if "masses" in record:
            group["mass"] = record["masses"]
        if "charges" in record:
            group["charge"] = record["charges"]
        if VMD in handle:
            del handle[VMD]
        vmd = handle.create_group(VMD)
        vmd["indexOfSpecies"] = np.arange(len(record["kind_names"]), dtype=np.int32)
        vmd["name"] = _strings(record["kind_names"])
        vmd["type"] = _strings(record["kind_types"])
        vmd["resid"] = record["resindex"]
        vmd["resnum"] = record["resnums"]
        vmd["resname"] = _strings(record["resnames"])
        vmd["segid"] = _strings(record["segids"][record["segindex"]])  # per atom, as the plugin reads it
        vmd["num_segid"] = record["segindex"]
        if "chains" in record:
            vmd["chain"] = _strings(record["chains"])
        if "kind_elements" in record:
            vmd["atomicnumber"] = atomic_numbers(record["kind_elements"])
            vmd["element"] = _strings(record["kind_elements"])
        vmd.attrs["source"] = printable(str(topology_path or ""))
        bonds = record.get("bonds")
        if bonds is not None:
            vmd["bond_from"] = (bonds[:, 0] + 1).astype(np.int32)
            vmd["bond_to"] = (bonds[:, 1] + 1).astype(np.int32)
            connectivity = handle.require_group("connectivity")
            if "bonds" in connectivity:
                del connectivity["bonds"]
            connectivity["bonds"] = bonds
            connectivity["bonds"].attrs["particles_group"] = handle[PARTICLES].ref
    return {"atoms": len(record["id"]), "species": len(record["kind_names"]),
            "residues": len(record["resnames"]), "bonds": 0 if bonds is None else len(bonds),
            "source": (f"the topology stored in {topology_path}" if topology_path and carries_topology(topology_path)
                       else topology_path)}


def read_stored_topology(path, handle=None):
    """The topology arrays an H5MD file carries (what :func:`write_topology` writes).

    Parameters
    ----------
    path : str
        The file (named in messages; opened unless *handle* is given).
    handle : h5py.File, optional
        The file, already open.

    Returns
    -------
    dict
        ``names``, ``types`` (per atom), ``resindex`` (per atom), ``resnames``, ``resnums``
        (per residue), ``segids`` (per segment), ``segindex`` (per atom), and where stored
        ``masses``, ``charges`` (per atom), ``bonds`` ((n, 2) 0-based), ``source_ids``
        (per atom: index in the source system), ``source`` (the topology file's name),
        ``chains`` (per residue), ``elements`` (per atom: the symbols h5mdtool stores) or
        else ``atomic_numbers`` (per atom: VMD's ``atomicnumber``, as other writers store
        it; :func:`stored_elements` gives symbols either way).

    Raises
    ------
    InputError
        If the structure module cannot be read.
    """
    import h5py

    try:
        with (h5py.File(path, "r") if handle is None else contextlib.nullcontext(handle)) as opened:
            group, vmd = opened[PARTICLES], opened[VMD]
            species = group["species"][()]
            resnames = vmd["resname"][()].astype(str)
            record = {
                "names": vmd["name"][()].astype(str)[species],
                "types": vmd["type"][()].astype(str)[species],
                "resindex": vmd["resid"][()],
                "resnames": resnames,
                "resnums": vmd["resnum"][()] if "resnum" in vmd else np.arange(1, len(resnames) + 1),
                "source": printable(str(vmd.attrs.get("source", ""))) or None,
            }
            record["segids"], record["segindex"] = _segments(vmd, len(species))
            if "chain" in vmd and len(vmd["chain"]) == len(resnames):
                record["chains"] = vmd["chain"][()].astype(str)
            kinds = len(vmd["name"])
            if "element" in vmd and len(vmd["element"]) == kinds:
                record["elements"] = vmd["element"][()].astype(str)[species]
            elif "atomicnumber" in vmd and vmd["atomicnumber"].shape in ((kinds,), (kinds, 1)):
                record["atomic_numbers"] = np.asarray(vmd["atomicnumber"][()], np.int64).reshape(-1)[species]
            for key, name in (("masses", "mass"), ("charges", "charge"), ("source_ids", "id")):
                if name in group:
                    record[key] = group[name][()]
            if "connectivity/bonds" in opened:
                record["bonds"] = np.asarray(opened["connectivity/bonds"][()], np.int64).reshape(-1, 2)
            elif "bond_from" in vmd and "bond_to" in vmd:
                record["bonds"] = np.stack([vmd["bond_from"][()], vmd["bond_to"][()]], axis=1).astype(np.int64) - 1
    except (KeyError, OSError, ValueError, IndexError, TypeError) as error:
        raise InputError(f"{path}: its topology (/parameters/vmd_structure) cannot be read ({_reason(error)})") from None
    n_atoms = len(record["names"])
    if len(record["resindex"]) != n_atoms or len(record["segindex"]) != n_atoms:
        raise InputError(f"{path}: its topology gives {n_atoms} atoms' species but {len(record['resindex'])} "
                         "atoms' residues")
    return record


def _segments(vmd, n_atoms):
    """(segid per segment, segment index per atom) of a structure module.

    ``segid`` is per atom, as VMD's plugin reads it (h5mdtool wrote it per segment, indexed
    by ``num_segid``, before); without ``num_segid`` (a file of another writer) each run of
    equal segids is a segment.
    """
    segid = vmd["segid"][()].astype(str) if "segid" in vmd else np.array(["SYSTEM"] * n_atoms)
    if "num_segid" in vmd:
        segindex = np.asarray(vmd["num_segid"][()], np.int64)
        if len(segid) != n_atoms or len(segindex) != n_atoms:
            return segid, segindex  # per segment (older files); checked by the caller
        first = np.unique(segindex, return_index=True)[1]
        return segid[first], segindex
    new_segment = np.r_[True, segid[1:] != segid[:-1]][:len(segid)]
    return segid[new_segment], np.cumsum(new_segment) - 1


def residue_segments(record):
    """Segment index of each residue of a :func:`read_stored_topology` record (its first atom's)."""
    n_residues = len(record["resnames"])
    first = np.unique(record["resindex"], return_index=True)[1]
    if len(first) == n_residues:
        return np.asarray(record["segindex"])[first]
    return np.zeros(n_residues, np.int64)


def universe_from_h5md(path, trajectory_format="H5MD"):
    """An MDAnalysis Universe from the topology an H5MD file carries, with its trajectory.

    The trajectory is read by the MDAnalysis reader of *trajectory_format* (``"H5MDTOOL"``,
    h5mdtool's, once :mod:`h5mdtool.mdanalysis` registered it); a trajectory it cannot
    read leaves the Universe without one, the reason in ``h5mdtool_trajectory_error``.
    """
    from .codecs import register_plugins

    universe = universe_from_record(read_stored_topology(path))
    register_plugins()  # a compressed file's filters, for MDAnalysis's own reader too
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            universe.load_new(path, format=trajectory_format)
    except Exception as error:  # noqa: BLE001 - the topology alone is still useful
        universe.h5mdtool_trajectory_error = _reason(error)
    return universe


def universe_from_record(record):
    """An MDAnalysis Universe, without coordinates, of a :func:`read_stored_topology` *record*."""
    import MDAnalysis

    names, resnames, segids = record["names"], record["resnames"], record["segids"]
    n_atoms, n_residues, n_segments = len(names), len(resnames), len(segids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = MDAnalysis.Universe.empty(n_atoms, n_residues=n_residues, n_segments=n_segments,
                                             atom_resindex=record["resindex"],
                                             residue_segindex=residue_segments(record), trajectory=False)
        universe.add_TopologyAttr("names", names)
        universe.add_TopologyAttr("types", record["types"])
        universe.add_TopologyAttr("resnames", resnames)
        universe.add_TopologyAttr("resids", record["resnums"])
        universe.add_TopologyAttr("resnums", record["resnums"])
        universe.add_TopologyAttr("segids", segids)
        if "masses" in record:
            universe.add_TopologyAttr("masses", record["masses"])
        if "charges" in record:
            universe.add_TopologyAttr("charges", record["charges"])
        if "chains" in record:
            universe.add_TopologyAttr("chainIDs", np.asarray(record["chains"])[record["resindex"]])
        elements = stored_elements(record)
        if elements is not None:
            universe.add_TopologyAttr("elements", elements)
        bonds = record.get("bonds")
        if bonds is not None and len(bonds):
            universe.add_TopologyAttr("bonds", [tuple(pair) for pair in bonds])
    universe.h5mdtool_source_ids = record.get("source_ids")
    return universe


TOPOLOGY_FORMATS = ("pdb", "gro", "psf")
#: Extensions of structure and topology files (read by MDAnalysis; PDB, GRO and PSF also written).
STRUCTURE_EXTENSIONS = {".pdb": "PDB", ".gro": "GRO", ".psf": "PSF", ".tpr": "TPR", ".top": "TOP",
                        ".prmtop": "PRMTOP", ".parm7": "PRMTOP", ".crd": "CRD", ".mol2": "MOL2", ".xyz": "XYZ",
                        ".cif": "mmCIF"}


def write_topology_file(h5md_path, output, format=None, frame=0, force=False, trajectory_format="H5MD"):
    """Write the topology an H5MD file carries as PDB, GRO or PSF (with frame *frame*'s positions).

    The positions are read by the MDAnalysis reader of *trajectory_format* (see
    :func:`universe_from_h5md`); a file without frames gives zeros.

    Raises
    ------
    InputError
        If the file carries no topology, *frame* is not one of its frames, or its frames
        cannot be read.
    UsageError
        For an unknown output format, or an output name whose extension names another format.
    """
    from ..parallel.outputs import (
        check_output_extension, check_output_file, is_write_failure, publish, remove_quietly, temporary_name,
        write_failure
    )

    fmt = (format or os.path.splitext(output)[1].lstrip(".")).lower()
    if fmt not in TOPOLOGY_FORMATS:
        raise UsageError(f"{output}: cannot tell the topology format; use --output-format {'|'.join(TOPOLOGY_FORMATS)}")
    check_output_extension(output, fmt.upper(), {**STRUCTURE_EXTENSIONS, ".h5md": "H5MD", ".h5": "H5MD"}, f".{fmt}")
    if not carries_topology(h5md_path):
        raise InputError(f"{h5md_path}: carries no topology (convert it with --topology to store one)")
    check_output_file(output, [h5md_path], force)
    universe = universe_from_h5md(h5md_path, trajectory_format)
    problem = getattr(universe, "h5mdtool_trajectory_error", None)
    if problem is not None:
        raise InputError(f"{h5md_path}: its frames cannot be read ({problem})")
    n_frames = universe.trajectory.n_frames
    if n_frames:
        if not -n_frames <= frame < n_frames:
            raise InputError(f"{h5md_path}: --frame {frame} is not one of its {n_frames} frames")
        universe.trajectory[frame]
    else:
        universe.atoms.positions = np.zeros((len(universe.atoms), 3))
    temporary = temporary_name(output)
    try:
        if fmt == "psf":  # MDAnalysis has no PSF writer
            write_psf(universe, temporary, f"written by h5mdtool from {os.path.basename(h5md_path)}")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                universe.atoms.write(temporary, file_format=fmt.upper())
        publish(temporary, output)
    except Exception as error:  # noqa: BLE001 - MDAnalysis writers raise many types
        remove_quietly(temporary)
        if is_write_failure(error):
            raise OutputError(write_failure(error, temporary, output)) from None
        raise InputError(f"{output}: MDAnalysis cannot write this topology as {fmt.upper()} ({_reason(error)})") from None
    return {"output": os.path.abspath(output), "format": fmt, "atoms": len(universe.atoms),
            "residues": len(universe.residues)}


def write_psf(universe, path, remark):
    """Write *universe*'s atoms and bonds as a space-delimited PSF (``PSF EXT NAMD``, as VMD writes).

    Angles, dihedrals and the other sections are written empty: the file describes atoms,
    residues, segments, masses, charges and bonds.
    """
    atoms = universe.atoms

    def values(name, default):
        found = _attribute(atoms, name)
        return [default] * len(atoms) if found is None else found

    segids, resids, resnames = values("segids", "SYSTEM"), values("resids", 1), values("resnames", "UNK")
    names, types = values("names", "X"), values("types", "X")
    charges, masses = values("charges", 0.0), values("masses", 0.0)
    bonds = _attribute(atoms, "bonds")
    pairs = np.zeros((0, 2), np.int64) if bonds is None else np.asarray(bonds.indices, np.int64)
    with open(path, "w") as handle:
        handle.write(f"PSF EXT NAMD\n\n{1:10d} !NTITLE\n REMARKS {remark}\n\n{len(atoms):10d} !NATOM\n")
        for number, row in enumerate(zip(segids, resids, resnames, names, types, charges, masses), start=1):
            segid, resid, resname, name, kind, charge, mass = row
            handle.write(f"{number:10d} {segid or 'SYSTEM'} {int(resid)} {resname or 'UNK'} {name or 'X'} "
                         f"{kind or 'X'} {float(charge):14.6f} {float(mass):14.4f} {0:11d}\n")
        handle.write(f"\n{len(pairs):10d} !NBOND: bonds\n")
        for start in range(0, len(pairs), 4):
            handle.write("".join(f"{a + 1:10d}{b + 1:10d}" for a, b in pairs[start:start + 4]) + "\n")
        for section in ("NTHETA: angles", "NPHI: dihedrals", "NIMPHI: impropers", "NDON: donors",
                        "NACC: acceptors", "NNB"):
            handle.write(f"\n{0:10d} !{section}\n")
        handle.write("\n")

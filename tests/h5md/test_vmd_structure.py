"""The structure VMD's H5MD plugin (VMD-h5mdplugin) reads from a converted file.

VMD cannot be installed here, so :func:`plugin_view` applies the plugin reader's rules
(``read_h5md_structure_vmd_structure`` in its ``h5mdplugin.c`` and the per-group reads of
``libh5md.c``, as its "Documentation VMD parameters" describes them) to the file, and the
result is compared with MDAnalysis reading the source topology:

- ``/particles/<group>/species`` (time-independent) gives each atom's row in
  ``indexOfSpecies``, whose rows index ``name`` and ``type`` (16 characters kept); the
  number of distinct species must equal the rows, or the plugin skips names and types;
- ``resid`` per atom is VMD's resid and the row of ``resname`` (8 characters) and ``chain``
  (1 character);
- ``segid`` per atom (the plugin copies 4 characters);
- ``mass`` and ``charge`` per atom from ``/particles/<group>``;
- ``bond_from``/``bond_to``: 1-based atom numbers, VMD's molfile convention;
- ``atomicnumber`` per species, where the topology has elements (without it, the plugin
  takes the species number for the atomic number).
"""

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.h5md.topology import atomic_numbers, load_topology

VMD = "parameters/vmd_structure"
PARTICLES = "particles/trajectory"


def plugin_view(path):
    """Per-atom name, type, resid, resname, chain, segid, mass, charge and the 1-based bonds,
    as the plugin assigns them."""
    with h5py.File(path, "r") as f:
        vmd, group = f[VMD], f[PARTICLES]
        for name in ("name", "type", "resname", "chain", "segid"):
            if name in vmd:  # fixed-length strings, which the plugin reads by their size
                assert vmd[name].dtype.kind == "S", name
        species = group["species"][()]
        assert species.ndim == 1  # time-independent: the plugin opens <group>/species
        index = vmd["indexOfSpecies"][()]
        assert len(np.unique(species)) == len(index)
        row = np.array([np.flatnonzero(index == value)[0] for value in species])
        resid = vmd["resid"][()]
        n_atoms = len(species)
        assert len(resid) == n_atoms and len(vmd["segid"]) == n_atoms
        view = {
            "name": vmd["name"][()][row].astype(str), "type": vmd["type"][()][row].astype(str),
            "resid": resid, "resname": vmd["resname"][()][resid].astype(str),
            "segid": np.char.ljust(vmd["segid"][()].astype(str), 0).astype("U4"),
            # absent: the plugin's defaults, mass 1 and charge 0
            "mass": group["mass"][()].astype(np.float32) if "mass" in group else np.ones(n_atoms, np.float32),
            "charge": group["charge"][()].astype(np.float32) if "charge" in group else np.zeros(n_atoms, np.float32),
            "bonds": {tuple(pair) for pair in zip(vmd["bond_from"][()], vmd["bond_to"][()])},
        }
        if "chain" in vmd:
            view["chain"] = vmd["chain"][()][resid].astype("U1")
        # absent: the plugin takes each atom's species number for its atomic number
        view["atomicnumber"] = vmd["atomicnumber"][()][row] if "atomicnumber" in vmd else species % 112
        return view


@pytest.fixture(scope="module")
def two_segment_pdb(tmp_path_factory, adk):
    """AdK as a PDB with two segments and two chains (residues 1-100: A, the rest: B)."""
    universe = mda.Universe(*adk)
    second = universe.add_Segment(segid="ADKB")
    universe.residues[100:].segments = second
    universe.add_TopologyAttr("chainIDs", np.where(universe.atoms.resindices < 100, "A", "B"))
    path = str(tmp_path_factory.mktemp("vmd") / "adk_two_segments.pdb")
    with mda.Writer(path, n_atoms=len(universe.atoms)) as writer:
        writer.write(universe.atoms)
    return path


@pytest.mark.parametrize("source", ["psf", "pdb"])
def test_what_the_plugin_reads_is_the_topology(tmp_path, adk, two_segment_pdb, source):
    topology = adk[0] if source == "psf" else two_segment_pdb
    output = str(tmp_path / "adk.h5md")
    convert(adk[1], output, topology=topology, progress=False)
    atoms = mda.Universe(topology, adk[1]).atoms
    view = plugin_view(output)
    np.testing.assert_array_equal(view["name"], atoms.names)
    np.testing.assert_array_equal(view["type"], atoms.types)
    np.testing.assert_array_equal(view["resid"], atoms.resindices)  # VMD shows residue indices from 0
    np.testing.assert_array_equal(view["resname"], atoms.resnames)
    np.testing.assert_array_equal(view["segid"], atoms.segids.astype("U4"))
    np.testing.assert_array_equal(view["mass"], atoms.masses.astype(np.float32))
    if source == "psf":
        np.testing.assert_array_equal(view["charge"], atoms.charges.astype(np.float32))
    else:
        np.testing.assert_array_equal(view["charge"], 0)  # a PDB has no charges: none stored
    if source == "pdb":
        np.testing.assert_array_equal(view["chain"], atoms.chainIDs)
        assert set(view["segid"]) == {"ADKB", atoms.segids[0][:4]}
    assert view["bonds"] == {(a + 1, b + 1) for a, b in atoms.bonds.indices} if len(atoms.bonds) else True
    with h5py.File(output, "r") as f:  # no per-atom arrays where a reader expects per-species ones
        assert "mass" not in f[VMD] and "charge" not in f[VMD]


def test_the_plugin_reads_the_elements_of_a_tpr(tmp_path):
    """Elements as atomic numbers per species; "" (virtual sites) as 0, VMD's "X"."""
    from MDAnalysisTests.datafiles import TPR_xvf, TRR_xvf

    output = str(tmp_path / "xvf.h5md")
    convert(TRR_xvf, output, topology=TPR_xvf, progress=False)
    atoms = mda.Universe(TPR_xvf).atoms
    view = plugin_view(output)
    by_symbol = {"": 0, "H": 1, "C": 6, "N": 7, "O": 8, "Na": 11, "S": 16, "Cl": 17}
    assert set(atoms.elements) <= set(by_symbol)
    np.testing.assert_array_equal(view["atomicnumber"], [by_symbol[element] for element in atoms.elements])
    np.testing.assert_array_equal(view["name"], atoms.names)


def test_without_elements_no_atomic_numbers_are_stored(tmp_path, adk):
    output = str(tmp_path / "adk.h5md")
    convert(adk[1], output, topology=adk[0], progress=False)  # a PSF: no elements
    with h5py.File(output, "r") as f:
        assert "atomicnumber" not in f[VMD] and "element" not in f[VMD]
    assert not hasattr(load_topology(output).atoms, "elements")


def test_elements_of_another_writers_atomic_numbers(tmp_path):
    """A file with VMD's ``atomicnumber`` per species and no ``element`` symbols (what other
    writers store): each number's symbol, "" for 0."""
    from MDAnalysisTests.datafiles import TPR_xvf, TRR_xvf

    output = str(tmp_path / "xvf.h5md")
    convert(TRR_xvf, output, topology=TPR_xvf, progress=False)
    with h5py.File(output, "r+") as f:
        del f[VMD]["element"]
    universe = load_topology(output)
    np.testing.assert_array_equal(universe.atoms.elements, mda.Universe(TPR_xvf).atoms.elements)
    universe.trajectory.close()
    assert atomic_numbers(["C", "CL", "cl", "Cl", "", "X", "DUMMY"]).tolist() == [6, 17, 17, 17, 0, 0, 0]


def test_h5mdtool_reads_segments_of_every_layout(tmp_path, adk, two_segment_pdb):
    """Per-atom segid with num_segid (now), per-segment segid (h5mdtool before), per-atom
    segid alone (other writers): the same segments."""
    output = str(tmp_path / "adk.h5md")
    convert(adk[1], output, topology=two_segment_pdb, progress=False)
    expected = mda.Universe(two_segment_pdb).atoms
    assert _segments(output) == (list(expected.segids), 2)
    with h5py.File(output, "r+") as f:
        per_atom, segindex = f[VMD]["segid"][()], f[VMD]["num_segid"][()]
        del f[VMD]["segid"]
        f[VMD]["segid"] = per_atom[np.unique(segindex, return_index=True)[1]]
    assert _segments(output) == (list(expected.segids), 2)
    with h5py.File(output, "r+") as f:
        del f[VMD]["segid"], f[VMD]["num_segid"]
        f[VMD]["segid"] = per_atom
    assert _segments(output) == (list(expected.segids), 2)


def _segments(path):
    """Each atom's segid and the number of segments of h5mdtool's reading of *path*."""
    universe = load_topology(path)
    try:
        return list(universe.atoms.segids), len(universe.segments)
    finally:
        universe.trajectory.close()

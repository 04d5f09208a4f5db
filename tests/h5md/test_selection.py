"""Simple selections on a stored topology (h5mdtool.h5md.selection) against MDAnalysis's
select_atoms on the Universe built from the same record: generated topologies and
selections, and the selections it must leave to MDAnalysis."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5mdtool.h5md.selection import parse_simple, select_stored
from h5mdtool.h5md.topology import read_stored_topology, universe_from_record

NAMES = ["CA", "N", "C", "O", "CB", "HA", "O5'", "NA+", "C1_2", "1H"]
RESNAMES = ["ALA", "GLY", "LYS", "SOL", "NA+"]
SEGIDS = ["A", "B", "SYSTEM"]


@st.composite
def records(draw):
    """A stored-topology record: atoms in residues in segments, names drawn from a few."""
    n_residues = draw(st.integers(1, 8))
    residue_sizes = draw(st.lists(st.integers(1, 6), min_size=n_residues, max_size=n_residues))
    resindex = np.repeat(np.arange(n_residues), residue_sizes)
    n_atoms = len(resindex)
    segments_of_residues = np.sort(draw(st.lists(st.integers(0, 2), min_size=n_residues, max_size=n_residues)))
    _, segments_of_residues = np.unique(segments_of_residues, return_inverse=True)
    n_segments = int(segments_of_residues.max()) + 1
    segid_choice = draw(st.lists(st.sampled_from(SEGIDS), min_size=n_segments, max_size=n_segments))
    return {
        "names": np.array(draw(st.lists(st.sampled_from(NAMES), min_size=n_atoms, max_size=n_atoms))),
        "types": np.array(draw(st.lists(st.sampled_from(["C", "N", "O", "H"]), min_size=n_atoms, max_size=n_atoms))),
        "resindex": resindex,
        "resnames": np.array(draw(st.lists(st.sampled_from(RESNAMES), min_size=n_residues, max_size=n_residues))),
        "resnums": np.array(draw(st.lists(st.integers(1, 12), min_size=n_residues, max_size=n_residues))),
        "segids": np.array(segid_choice),
        "segindex": segments_of_residues[resindex],
        "masses": np.full(n_atoms, 12.0),
    }


@st.composite
def clauses(draw):
    keyword = draw(st.sampled_from(["name", "type", "resname", "segid", "resid", "resnum", "index", "all"]))
    if keyword == "all":
        return "all"
    pool = {"name": NAMES + ["XX"], "type": ["C", "N", "O", "H", "S"], "resname": RESNAMES + ["TRP"],
            "segid": SEGIDS + ["Z"]}.get(keyword)
    values = draw(st.lists(st.sampled_from(pool) if pool else st.integers(0, 40).map(str), min_size=1, max_size=3))
    return " ".join([keyword, *values])


def mdanalysis_indices(record, selection):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return universe_from_record(record).select_atoms(selection).indices


@settings(max_examples=150, deadline=None)
@given(records(), st.lists(clauses(), min_size=1, max_size=3), st.sampled_from([" ", "  "]))
def test_simple_selections_equal_mdanalysis(record, parts, space):
    selection = f"{space}and{space}".join(parts)
    picked = select_stored(record, selection)
    assert picked is not None, selection
    assert picked.dtype == np.int64
    np.testing.assert_array_equal(picked, mdanalysis_indices(record, selection))


@pytest.mark.parametrize("selection", [
    "", "name", "name CA and", "and name CA", "name CA or name N", "not name CA", "name C*", "name C?",
    "name [CN]", "resid 1-5", "resid 1:5", "resid -3", "protein", "backbone", "name CA and protein",
    "(name CA)", "name ca", "name Cl", "name chainID", "name CA around 5 name N", "resname ALA and byres name CA",
    "bynum 1", "name CA and not resname ALA", "index 1.5", "all CA",
])
def test_what_mdanalysis_must_evaluate_is_left_to_it(selection):
    assert parse_simple(selection) is None
    assert select_stored({"names": np.array(["CA"])}, selection) is None


def test_nothing_matched_is_an_empty_selection():
    record = {"names": np.array(["CA", "N"]), "resindex": np.array([0, 0]), "resnames": np.array(["ALA"])}
    assert select_stored(record, "name CB").tolist() == []
    assert select_stored(record, "name CA and resname GLY").tolist() == []
    assert select_stored(record, "name N CA").tolist() == [0, 1]


def test_the_stored_adk_topology_as_mdanalysis_reads_its_psf(tmp_path, adk):
    import MDAnalysis as mda

    import h5mdtool

    path = str(tmp_path / "adk.h5md")
    h5mdtool.convert([adk[1]], path, topology=adk[0], progress=False)
    record = read_stored_topology(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        psf = mda.Universe(adk[0])
    for selection in ["name CA", "name N CA C O", "resname LYS ARG and name CA", "segid 4AKE and resid 10 20 30",
                      "type HB and resnum 5", "index 0 17 3340", "all"]:
        np.testing.assert_array_equal(select_stored(record, selection), psf.select_atoms(selection).indices,
                                      err_msg=selection)

"""Files that carry their own topology (issue 14): convert --topology, load_topology, h5mdtool topology."""

import os

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.h5md.topology import carries_topology, load_topology, write_topology_file

from conftest import run_h5mdtool

CASES = {
    "psf-protein": ("PSF", "DCD", "protein and resid 1:40"),
    "tpr-protein": ("TPR_xvf", "TRR_xvf", "protein"),
    "psf-all": ("PSF", "DCD", None),
}


def _files(case):
    import MDAnalysisTests.datafiles as data

    top, traj, select = CASES[case]
    return getattr(data, top), getattr(data, traj), select


@pytest.mark.mpi
@pytest.mark.parametrize("case", list(CASES))
def test_convert_stores_the_topology_of_the_written_atoms(comm, shared_tmp, case):
    top, traj, select = _files(case)
    output = os.path.join(shared_tmp, "self_contained.h5md")
    summary = convert(traj, output, comm=comm, topology=top, select=select, progress=False)
    comm.Barrier()
    reference = mda.Universe(top, traj)
    atoms = reference.atoms if select is None else reference.select_atoms(select)
    assert summary["topology"]["atoms"] == len(atoms)
    assert carries_topology(output)
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/id"][()], atoms.indices)
        np.testing.assert_allclose(f["particles/trajectory/mass"][()], atoms.masses)
        np.testing.assert_allclose(f["particles/trajectory/charge"][()], atoms.charges)
        assert f["parameters/vmd_structure/bond_from"][()].min() >= 1  # VMD counts atoms from 1
    universe = load_topology(output)
    for name in ("names", "types", "resnames", "resids", "segids"):
        np.testing.assert_array_equal(getattr(universe.atoms, name), getattr(atoms, name))
    inside = atoms.bonds.atomgroup_intersection(atoms, strict=True)
    assert len(universe.bonds) == len(inside)
    for ts_copy, ts_source in zip(universe.trajectory[:3], reference.trajectory[:3]):
        np.testing.assert_allclose(universe.atoms.positions, atoms.positions, rtol=3e-7, atol=1e-4)


@pytest.mark.parametrize("fmt", ["pdb", "gro", "psf"])
def test_topology_command_writes_a_topology_matching_the_file(tmp_path, fmt):
    top, traj, select = _files("psf-protein")
    h5md = str(tmp_path / "sub.h5md")
    convert(traj, h5md, topology=top, select=select, progress=False)
    out = str(tmp_path / f"sub.{fmt}")
    done = run_h5mdtool(["topology", h5md, "-o", out])
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    reference = mda.Universe(top, traj).select_atoms(select)
    universe = mda.Universe(out, h5md)
    assert len(universe.atoms) == len(reference)
    np.testing.assert_array_equal(universe.atoms.names, reference.names)
    for _ in zip(universe.trajectory[:5], reference.universe.trajectory[:5]):
        np.testing.assert_allclose(universe.atoms.positions, reference.positions, rtol=3e-7, atol=1e-4)
    if fmt == "psf":
        np.testing.assert_allclose(universe.atoms.masses, reference.masses, atol=1e-4)
        assert len(universe.bonds) == len(reference.bonds.atomgroup_intersection(reference, strict=True))


def test_topology_command_writes_the_elements_and_chains_into_a_pdb(tmp_path):
    top, traj, select = _files("tpr-protein")
    h5md = str(tmp_path / "protein.h5md")
    convert(traj, h5md, topology=top, select=select, progress=False)
    out = str(tmp_path / "protein.pdb")
    done = run_h5mdtool(["topology", h5md, "-o", out])
    assert done.returncode == 0, done.stderr
    reference = mda.Universe(top).select_atoms(select)
    universe = mda.Universe(out)
    np.testing.assert_array_equal(universe.atoms.elements, reference.elements)
    np.testing.assert_array_equal(universe.atoms.chainIDs, reference.chainIDs)


def test_select_on_a_self_contained_file_needs_no_topology_and_keeps_source_ids(tmp_path):
    top, traj, _ = _files("psf-all")
    whole = str(tmp_path / "whole.h5md")
    convert(traj, whole, topology=top, stop=3, progress=False)
    ca = str(tmp_path / "ca.h5md")
    convert(whole, ca, select="name CA", progress=False)
    first = str(tmp_path / "first10.h5md")
    convert(ca, first, select="resid 1:10", progress=False)
    reference = mda.Universe(top).select_atoms("name CA and resid 1:10")
    with h5py.File(first, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/id"][()], reference.indices)
    np.testing.assert_array_equal(load_topology(first).atoms.resids, np.arange(1, 11))


def test_topology_command_on_a_compressed_file_writes_the_frame_asked_for(tmp_path):
    """Regression: on a zstd file the frames were read by MDAnalysis's H5MD reader without
    hdf5plugin's filters, and the command failed ("No trajectory loaded into Universe")."""
    top, traj, select = _files("tpr-protein")
    h5md = str(tmp_path / "zstd.h5md")
    convert(traj, h5md, topology=top, select=select, compression="zstd", chunk_frames=2, progress=False)
    environment = {key: value for key, value in os.environ.items() if key != "HDF5_PLUGIN_PATH"}
    reference = mda.Universe(top, traj).select_atoms(select)
    for frame in (0, -1):
        out = str(tmp_path / f"frame{frame}.pdb")
        done = run_h5mdtool(["topology", h5md, "-o", out, "--frame", str(frame)], env=environment)
        assert done.returncode == 0, done.stderr
        reference.universe.trajectory[frame]
        np.testing.assert_allclose(mda.Universe(out).atoms.positions, reference.positions, atol=1e-3)
    done = run_h5mdtool(["topology", h5md, "-o", str(tmp_path / "none.pdb"), "--frame", "99"], env=environment)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "--frame 99 is not one of its" in done.stderr and not os.path.exists(tmp_path / "none.pdb")


def test_topology_errors(tmp_path, adk):
    plain = str(tmp_path / "plain.h5md")
    convert(adk[1], plain, stop=2, progress=False)
    with pytest.raises(InputError, match="carries no topology"):
        write_topology_file(plain, str(tmp_path / "t.pdb"))
    with pytest.raises(UsageError, match="topology format"):
        write_topology_file(plain, str(tmp_path / "t.xyz1"))
    done = run_h5mdtool(["topology", plain, "-o", str(tmp_path / "t.pdb")])
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    with pytest.raises(InputError, match="--select needs --topology"):
        convert(adk[1], str(tmp_path / "o.h5md"), select="name CA", progress=False)


GEOMETRIC_CASES = {
    # GRO coordinates differ from the XTC's first frame: 2449 atoms on the GRO, 2452 on the XTC
    "gro-first-frame": ("GRO", "XTC", "around 3 protein", {}),
    "gro-from-5": ("GRO", "XTC", "around 3 protein", {"start": 5}),
    "gro-by-time": ("GRO", "XTC", "prop z > 50", {"begin": 300}),
    "psf-from-40": ("PSF", "DCD", "around 5 resid 10", {"start": 40, "step": 3}),
    "psf-sphzone": ("PSF", "DCD", "sphzone 12 resid 100", {}),
}


def _oracle_atoms(top, traj, select, frames):
    """MDAnalysis: Universe(topology, trajectory) at the first selected frame, then select_atoms."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(top, traj)
    times = np.array([ts.time for ts in universe.trajectory])
    if "begin" in frames:
        first = int(np.flatnonzero(times.astype(np.float32) >= np.float32(frames["begin"]))[0])
    else:
        first = frames.get("start", 0)
    universe.trajectory[first]
    return universe.select_atoms(select).indices


@pytest.mark.parametrize("case", list(GEOMETRIC_CASES))
def test_geometric_selection_uses_the_first_selected_frame(tmp_path, case):
    """Regression: a geometric --select with -t md.gro was evaluated on the GRO's coordinates,
    and with a PSF (no coordinates) refused as invalid."""
    import MDAnalysisTests.datafiles as data

    top, traj, select, frames = GEOMETRIC_CASES[case]
    top, traj = getattr(data, top), getattr(data, traj)
    expected = _oracle_atoms(top, traj, select, frames)
    output = str(tmp_path / "sel.h5md")
    convert(traj, output, topology=top, select=select, progress=False, **frames)
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/id"][()], expected)
    if case == "gro-first-frame":
        assert len(mda.Universe(top).select_atoms(select)) != len(expected)  # the case tells the two apart
        from h5mdtool import split

        split(traj, str(tmp_path / "parts"), 2, format="h5md", topology=top, select=select, progress=False)
        for part in sorted((tmp_path / "parts").glob("*.h5md")):
            with h5py.File(part, "r") as f:
                np.testing.assert_array_equal(f["particles/trajectory/id"][()], expected)

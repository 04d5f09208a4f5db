"""bench dihedrals: the features equal MDAnalysis's Ramachandran angles as (cos, sin) on every
input kind, engine and rank count; the per-rank accounting adds up; stragglers are found."""

import json
import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner
from MDAnalysis.analysis.dihedrals import Ramachandran
from MDAnalysis.lib.distances import calc_dihedrals

from benchcheck import check_report, every_report_adds_up  # noqa: F401 - autouse fixture
from h5mdtool import convert, split
from h5mdtool.bench.dihedrals import backbone_quads, bench_dihedrals
from h5mdtool.cli.main import cli
from h5mdtool.bench.dihedral_kernel import dihedral_angles, sincos_features
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.parallel.mpi import SerialComm
from test_bench import check_straggler_report


def mdanalysis_features(topology, trajectory, select="protein", **frames):
    """The oracle: MDAnalysis's Ramachandran angles (degrees), as rows frame, time, (cos, sin)
    of phi and psi of each residue."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(topology, trajectory)
        analysis = Ramachandran(universe.select_atoms(select)).run(**frames)
    angles = np.deg2rad(analysis.results.angles.reshape(analysis.n_frames, -1))
    return np.column_stack([analysis.frames, analysis.times, sincos_features(angles)])


@pytest.fixture(scope="module")
def adk_features(adk):
    return mdanalysis_features(*adk)


def check_features(comm, result, reference, tolerance=1e-5):
    if comm.rank != 0:
        assert result is None
        return
    features = result["features"]
    assert features.shape == reference.shape
    np.testing.assert_array_equal(features[:, 0], reference[:, 0])
    np.testing.assert_allclose(features[:, 1], reference[:, 1], rtol=1e-6)
    assert np.abs(features[:, 2:] - reference[:, 2:]).max() < tolerance
    check_report(result["report"])
    assert sum(r["n_frames"] for r in result["report"]["ranks"]) == len(reference)


def test_kernel_equals_mdanalysis_calc_dihedrals():
    """Random quadruples, all four quadrants of the angle included."""
    generator = np.random.default_rng(7)
    positions = generator.normal(scale=3.0, size=(5, 40, 3))
    quads = np.array([generator.choice(40, 4, replace=False) for _ in range(60)])
    angles = dihedral_angles(positions, quads)
    expected = np.array([calc_dihedrals(*(frame[quads[:, column]] for column in range(4))) for frame in positions])
    np.testing.assert_allclose(angles, expected, atol=1e-6)
    assert angles.min() < -2.5 and angles.max() > 2.5  # near -pi and pi too
    features = sincos_features(angles)
    np.testing.assert_array_equal(features[:, 0::2], np.cos(angles))
    np.testing.assert_array_equal(features[:, 1::2], np.sin(angles))


def test_backbone_quads_are_ramachandran_atoms(adk, solvated):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(*adk)
        quads, residues = backbone_quads(universe.select_atoms("protein"))
    assert len(residues) == 212 and quads.shape == (424, 4)  # the papers' 212 residues, 848 features
    first = residues[0]
    assert list(universe.atoms[quads[0]].names) == ["C", "N", "CA", "C"]  # phi
    assert list(universe.atoms[quads[1]].names) == ["N", "CA", "C", "N"]  # psi
    assert universe.atoms[quads[0]].resids.tolist() == [first.resid - 1] + [first.resid] * 3
    with pytest.raises(InputError, match="atoms outside the protein"):
        backbone_quads(mda.Universe(solvated["topology"]).atoms)


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
@pytest.mark.parametrize("kind", ["DCD", "H5MD-chunked", "manifest-H5MD"])
def test_features_equal_mdanalysis_adk(comm, shared_tmp, adk, adk_features, kind, engine):
    path = adk[1]
    if kind == "H5MD-chunked":
        path = os.path.join(shared_tmp, "adk.h5md")
        convert(adk[1], path, comm=comm, progress=False, compression="gzip", chunk_frames=10)
    elif kind == "manifest-H5MD":
        outdir = os.path.join(shared_tmp, "parts")
        split(adk[1], outdir, 5, comm=comm, format="h5md", progress=False)
        path = os.path.join(outdir, "manifest.json")
    comm.Barrier()
    result = bench_dihedrals(path, adk[0], comm=comm, block_frames=7, repeat=2, engine=engine)
    check_features(comm, result, adk_features)
    if comm.rank == 0:
        report = result["report"]
        assert report["benchmark"] == "dihedrals" and report["engine"] == engine
        assert report["n_residues"] == 212 and report["analysis"]["n_features"] == 848
        if kind == "H5MD-chunked" and comm.size > 1 and engine == "blocks":  # frames: MDAnalysis per frame
            assert report["partition"]["scheme"] == "chunks"


@pytest.mark.mpi
def test_segments_frames_and_selection(comm, adk_segments, adk):
    """XTC segments as one trajectory, a frame range, and a selection of some residues."""
    select = "resid 10:40"
    reference = mdanalysis_features(adk[0], adk_segments["whole"], select=select, start=5, stop=90, step=3)
    result = bench_dihedrals(adk_segments["parts"], adk[0], comm=comm, select=select, start=5, stop=90, step=3,
                             block_frames=4)
    check_features(comm, result, reference)
    if comm.rank == 0:
        assert result["labels"][0] == "GLY10" and len(result["labels"]) == 31


@pytest.mark.mpi
def test_real_slow_rank_is_a_straggler(comm, adk, monkeypatch):
    if comm.size == 1:
        pytest.skip("needs a second rank to slow down (runs under mpirun -n 2 and -n 3)")
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", "rmsd-block:1:1.0")
    result = bench_dihedrals(adk[1], adk[0], comm=comm, block_frames=10)
    if comm.rank != 0:
        return
    blocks = -(-result["report"]["ranks"][1]["n_frames"] // 10)
    check_straggler_report(result["report"], comm.size, 1.0 * blocks)


def test_errors(tmp_path, adk):
    with pytest.raises(InputError, match="no residue of the selection has both"):
        bench_dihedrals(adk[1], adk[0], select="resid 1")
    with pytest.raises(InputError, match="matches no atom"):
        bench_dihedrals(adk[1], adk[0], select="resname XYZ")
    with pytest.raises(InputError, match="is an empty range"):
        bench_dihedrals(adk[1], adk[0], start=50, stop=10)
    with pytest.raises(UsageError, match="--engine"):
        bench_dihedrals(adk[1], adk[0], engine="turbo")


def test_cli_outputs(tmp_path, adk, adk_features):
    out, features = tmp_path / "report.json", tmp_path / "features.csv"
    result = CliRunner().invoke(cli, ["bench", "dihedrals", adk[1], "-t", adk[0], "--stop", "20", "--out", str(out),
                                      "--features-out", str(features)])
    assert result.exit_code == 0, result.output
    assert "212 residues of 'protein' (ARG2 to LEU213; 848 features per frame" in result.output
    assert "advice:" in result.output and "dihedrals: 20 frames x 848 features" in result.output
    report = json.loads(out.read_text())
    assert report["benchmark"] == "dihedrals" and report["n_analysed"] == 20
    table = np.loadtxt(features, delimiter=",", skiprows=1)
    np.testing.assert_allclose(table, adk_features[:20], atol=1e-5)
    header = features.read_text().splitlines()[0].split(",")
    assert header[:4] == ["frame", "time_ps", "cos_phi_ARG2", "sin_phi_ARG2"] and len(header) == 850
    again = CliRunner().invoke(cli, ["bench", "dihedrals", adk[1], "-t", adk[0], "--features-out", str(features)])
    assert again.exit_code == 1 and "exists" in again.output
    wrong = CliRunner().invoke(cli, ["bench", "dihedrals", adk[1], "-t", adk[0], "--features-out", "x.txt"])
    assert wrong.exit_code == 2 and "--features-out must end in .npy or .csv" in wrong.output


def test_precision_file_equals_mdanalysis_reading_it(tmp_path, adk):
    """An int32 grid (--precision): the kernel works in the file's units; angles do not depend on them."""
    path = str(tmp_path / "adk-q.h5md")
    convert(adk[1], path, topology=adk[0], precision=0.001, progress=False)
    result = bench_dihedrals(path, adk[0])
    assert result["report"]["input"]["dtype"] == "int32"
    check_features(SerialComm(), result, mdanalysis_features(adk[0], path))

"""split and bench rmsd on the new formats give the answers they give on the DCD/TRR paths.

The AdK trajectory (98 frames) is written as AMBER NetCDF, TRZ and GSD; the TNG example is
compared with a TRR holding the same frames. bench rmsd reads the new formats through the
reading stack (``TrajectoryFrames``); split --output-format h5md writes H5MD parts from them.
"""

import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as data

from h5mdtool import bench_rmsd, convert, split

ADK_FORMATS = ("NCDF", "TRZ", "GSD")


def mdanalysis_rmsd(topology, trajectory, select):
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(mda.Universe(topology, trajectory), select=select).run().results.rmsd


def _write_adk(directory):
    """The AdK DCD's frames as .ncdf, .trz and .gsd files (and as a TRR of the TNG example)."""
    from MDAnalysis.coordinates.TRJ import NCDFWriter
    from MDAnalysis.coordinates.TRR import TRRWriter
    from MDAnalysis.coordinates.TRZ import TRZWriter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(data.PSF, data.DCD)
        n_atoms = universe.atoms.n_atoms
        with NCDFWriter(os.path.join(directory, "adk.ncdf"), n_atoms, dt=universe.trajectory.dt) as ncdf, \
                TRZWriter(os.path.join(directory, "adk.trz"), n_atoms) as trz:
            for _ in universe.trajectory:
                ncdf.write(universe.atoms)
                trz.write(universe.atoms)
        import gsd.hoomd

        with gsd.hoomd.open(os.path.join(directory, "adk.gsd"), "w") as handle:
            for ts in universe.trajectory:
                frame = gsd.hoomd.Frame()
                frame.configuration.step = 10 * ts.frame
                frame.configuration.box = [80.0, 80.0, 80.0, 0.0, 0.0, 0.0]
                frame.particles.N = n_atoms
                frame.particles.position = universe.atoms.positions
                frame.particles.types = ["A"]
                handle.append(frame)
        argon = mda.Universe(data.TNG_traj_gro, data.TNG_traj)
        with TRRWriter(os.path.join(directory, "argon.trr"), argon.atoms.n_atoms) as trr:
            for _ in argon.trajectory:
                trr.write(argon.atoms)


@pytest.fixture(scope="module")
def adk_files(comm, session_dir):
    directory = os.path.join(session_dir, "adk-formats")
    if comm.rank == 0:
        os.makedirs(directory)
        _write_adk(directory)
    comm.Barrier()
    return {"directory": directory, **{fmt: os.path.join(directory, f"adk.{fmt.lower()}") for fmt in ADK_FORMATS},
            "argon.trr": os.path.join(directory, "argon.trr")}


@pytest.fixture(scope="module")
def dcd_rmsd(comm):
    """bench rmsd on the AdK DCD: the XTC/DCD path the new formats must agree with."""
    return bench_rmsd(data.DCD, data.PSF, comm=comm, block_frames=9)


def check_same_rmsd(comm, result, reference, oracle):
    """RMSD column equal to the DCD path's; frame and time columns equal to MDAnalysis on the source."""
    if comm.rank != 0:
        assert result is None
        return
    rmsd = result["rmsd"]
    np.testing.assert_array_equal(rmsd[:, 0], oracle[:, 0])
    np.testing.assert_allclose(rmsd[:, 1], oracle[:, 1], rtol=1e-6)
    assert np.abs(rmsd[:, 2] - oracle[:, 2]).max() < 1e-4
    assert np.abs(rmsd[:, 2] - reference["rmsd"][:, 2]).max() < 1e-4


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ADK_FORMATS)
def test_bench_rmsd_equals_the_dcd_path(comm, adk_files, dcd_rmsd, fmt):
    path = adk_files[fmt]
    before = sorted(os.listdir(adk_files["directory"]))
    result = bench_rmsd(path, data.PSF, comm=comm, block_frames=9, repeat=1)
    oracle = mdanalysis_rmsd(data.PSF, path, "name CA") if comm.rank == 0 else None
    check_same_rmsd(comm, result, dcd_rmsd, oracle)
    if comm.rank == 0:
        assert result["report"]["input"]["format"] == fmt
        assert result["report"]["n_frames"] == 98
    comm.Barrier()
    assert sorted(os.listdir(adk_files["directory"])) == before


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ADK_FORMATS)
def test_split_h5md_parts_then_bench_equal_the_source(comm, shared_tmp, adk_files, dcd_rmsd, fmt):
    outdir = os.path.join(shared_tmp, "parts")
    summary = split(adk_files[fmt], outdir, 4, comm=comm, format="h5md", progress=False)
    comm.Barrier()
    if comm.rank == 0:
        assert summary["format"] == "H5MD" and [p["n_frames"] for p in summary["parts"]] == [25, 25, 24, 24]
    result = bench_rmsd(os.path.join(outdir, "manifest.json"), data.PSF, comm=comm, block_frames=9)
    direct = bench_rmsd(adk_files[fmt], data.PSF, comm=comm, block_frames=9)
    if comm.rank == 0:
        np.testing.assert_allclose(result["rmsd"], direct["rmsd"], rtol=1e-6, atol=1e-6)
        assert np.abs(result["rmsd"][:, 2] - dcd_rmsd["rmsd"][:, 2]).max() < 1e-4
    comm.Barrier()


@pytest.mark.mpi
def test_tng_bench_and_split_equal_the_trr_path(comm, shared_tmp, adk_files):
    """The TNG example and a TRR of the same frames (written by MDAnalysis) give the same RMSD."""
    select = "index 0:199"
    trr = bench_rmsd(adk_files["argon.trr"], data.TNG_traj_gro, comm=comm, select=select, block_frames=8)
    tng = bench_rmsd(data.TNG_traj, data.TNG_traj_gro, comm=comm, select=select, block_frames=8)
    outdir = os.path.join(shared_tmp, "tng-parts")
    split(data.TNG_traj, outdir, 3, comm=comm, format="h5md", progress=False)
    comm.Barrier()
    parts = bench_rmsd(os.path.join(outdir, "manifest.json"), data.TNG_traj_gro, comm=comm, select=select,
                       block_frames=8)
    if comm.rank == 0:
        oracle = mdanalysis_rmsd(data.TNG_traj_gro, data.TNG_traj, select)
        for result in (tng, parts):
            np.testing.assert_array_equal(result["rmsd"][:, 0], oracle[:, 0])
            np.testing.assert_allclose(result["rmsd"][:, 1], oracle[:, 1], rtol=1e-9)
            assert np.abs(result["rmsd"][:, 2] - trr["rmsd"][:, 2]).max() < 1e-5
            assert np.abs(result["rmsd"][:, 2] - oracle[:, 2]).max() < 1e-4
    comm.Barrier()


@pytest.mark.mpi
def test_bench_frames_engine_on_ncdf(comm, adk_files, dcd_rmsd):
    """The frames engine (MDAnalysis Universes) reads the new formats too."""
    result = bench_rmsd(adk_files["NCDF"], data.PSF, comm=comm, engine="frames", block_frames=9)
    oracle = mdanalysis_rmsd(data.PSF, adk_files["NCDF"], "name CA") if comm.rank == 0 else None
    check_same_rmsd(comm, result, dcd_rmsd, oracle)


@pytest.mark.mpi
@pytest.mark.parametrize("source", [data.TRJ_NCBOX, data.TNG_traj_vels_forces, data.TRZ, data.GSD,
                                    data.LAMMPSDUMP_image_vf], ids=["NCDF", "TNG", "TRZ", "GSD", "LAMMPSDUMP"])
def test_validate_against_the_source(comm, shared_tmp, source):
    """validate --against re-reads the new formats through the same stack: every frame equal."""
    from h5mdtool import validate

    output = os.path.join(shared_tmp, "out.h5md")
    convert(source, output, comm=comm, progress=False)
    comm.Barrier()
    report = validate(output, comm=comm, against=[source])
    assert report.exit_code == 0
    comm.Barrier()
    if comm.rank == 0:  # and it would see a difference
        import h5py

        with h5py.File(output, "r+") as handle:
            handle["particles/trajectory/position/value"][1, 0, 0] += 0.5
    comm.Barrier()
    assert validate(output, comm=comm, against=[source]).exit_code != 0

"""bench rmsd's analysis options against MDAnalysis's rms.RMSD: weights, RMSD groups, a
reference file, index groups, geometric selections, frame and time ranges, H5MD particle
groups, the compute load and the output files."""

import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import ROOT
from benchcheck import check_report, every_report_adds_up, mdanalysis_rmsd  # noqa: F401 - autouse fixture
from conftest import run_h5mdtool
from h5mdtool import bench_rmsd, convert, split
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.formats.ndx import read_index, write_index


def close(result, reference, tolerance=1e-4):
    assert result["rmsd"].shape == reference.shape, (result["rmsd"].shape, reference.shape)
    np.testing.assert_array_equal(result["rmsd"][:, 0], reference[:, 0])
    np.testing.assert_allclose(result["rmsd"][:, 1], reference[:, 1], rtol=1e-6)
    difference = np.abs(result["rmsd"][:, 2:] - reference[:, 2:]).max()
    assert difference < tolerance, difference
    check_report(result["report"])


@pytest.fixture(scope="module")
def adk_h5md(comm, session_dir, adk):
    """The AdK trajectory in H5MD, 4-frame gzip chunks (written by every rank, as under mpirun)."""
    path = os.path.join(session_dir, "analysis-adk.h5md")
    convert(adk[1], path, comm=comm, progress=False, chunk_frames=4, compression="gzip", force=True)
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
@pytest.mark.parametrize("weights", [None, "mass"])
def test_weights_and_groups_equal_mdanalysis(comm, adk, engine, weights):
    groups = ["backbone", "resid 10 and name CA", "resid 100:120"]
    reference = mdanalysis_rmsd(*adk, select="name CA", groups=groups, weights=weights, ref_frame=3)
    result = bench_rmsd(adk[1], adk[0], comm=comm, select="name CA", calc_select=groups, weights=weights,
                        ref_frame=3, engine=engine, block_frames=11)
    if comm.rank == 0:
        close(result, reference)
        assert result["labels"] == ["name CA", *groups]
        assert result["report"]["analysis"]["weights"] == (weights or "none")
        assert [g["n"] for g in result["report"]["analysis"]["atoms"]["groups"]] == [855, 1, 337]


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_reference_structure_file(tmp_path, adk, engine):
    pdb = str(tmp_path / "ref.pdb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(*adk)
        u.trajectory[40]
        u.atoms.write(pdb)
    reference = mdanalysis_rmsd(*adk, select="backbone", groups=["name CA"], weights="mass", reference=pdb)
    result = bench_rmsd(adk[1], adk[0], select="backbone", calc_select=["name CA"], weights="mass",
                        reference=pdb, engine=engine)
    close(result, reference)
    assert result["rmsd"][40, 2] < 1e-3  # the frame the structure was written from (PDB's 3 decimals)
    assert result["report"]["analysis"]["reference"]["kind"] == "file"
    with pytest.raises(UsageError, match="give one"):
        bench_rmsd(adk[1], adk[0], reference=pdb, ref_frame=2)
    with pytest.raises(InputError, match="no such reference"):
        bench_rmsd(adk[1], adk[0], reference=str(tmp_path / "nope.pdb"))


def test_reference_with_other_atoms_is_refused(tmp_path, adk):
    pdb = str(tmp_path / "ca.pdb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mda.Universe(*adk).select_atoms("name CA and resid 1:100").write(pdb)
    with pytest.raises(InputError, match="214 atoms, the reference's 100"):
        bench_rmsd(adk[1], adk[0], reference=pdb)


def test_index_groups_by_name_and_number(tmp_path, adk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(adk[0])
    ndx = str(tmp_path / "index.ndx")
    write_index(ndx, {"System": u.atoms.indices, "C-alpha": u.select_atoms("name CA").indices,
                      "Backbone": u.select_atoms("name N CA C").indices})
    groups = read_index(ndx)
    assert [g.name for g in groups] == ["System", "C-alpha", "Backbone"] and len(groups[1].indices) == 214
    reference = mdanalysis_rmsd(*adk, select="name CA", groups=["name N CA C"])
    for fit, group in (("C-alpha", "Backbone"), ("1", "2"), ("c-alpha", "backbone")):
        result = bench_rmsd(adk[1], adk[0], index=ndx, select=fit, calc_select=[group])
        close(result, reference)
        assert result["labels"] == ["index.ndx:C-alpha", "index.ndx:Backbone"]
    mixed = bench_rmsd(adk[1], adk[0], index=ndx, select="name CA", calc_select=["Backbone"])
    close(mixed, reference)
    with pytest.raises(InputError, match="groups 0-2; there is no group 7"):
        bench_rmsd(adk[1], adk[0], index=ndx, select="7")
    with pytest.raises(InputError, match="neither a group of .*index.ndx"):
        bench_rmsd(adk[1], adk[0], index=ndx, select="Side-chain and (")


def test_index_file_errors(tmp_path):
    bad = tmp_path / "bad.ndx"
    bad.write_text("1 2 3\n[ a ]\n4\n")
    with pytest.raises(InputError, match="before the first"):
        read_index(str(bad))
    bad.write_text("[ a ]\n1 x 3\n")
    with pytest.raises(InputError, match="'x' is not an atom number"):
        read_index(str(bad))
    bad.write_text("; nothing\n")
    with pytest.raises(InputError, match="no '\\[ group \\]'"):
        read_index(str(bad))
    with pytest.raises(InputError, match="no such index file"):
        read_index(str(tmp_path / "none.ndx"))


# --- selections on the reference frame's coordinates -------------------------------------------

GEOMETRIC = "name CA and around 10 resid 30"  # 31 atoms at frame 0, 28 at frame 20


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
@pytest.mark.parametrize("kind", ["DCD", "manifest"])
def test_geometric_selection_with_a_topology_without_coordinates(comm, shared_tmp, adk, engine, kind):
    """A PSF has no coordinates: 'around' is evaluated on the reference frame (was refused)."""
    path = adk[1]
    if kind == "manifest":
        path = os.path.join(shared_tmp, "parts")
        split(adk[1], path, 4, comm=comm, progress=False)
    reference = mdanalysis_rmsd(*adk, select=GEOMETRIC, ref_frame=20)
    result = bench_rmsd(path, adk[0], comm=comm, select=GEOMETRIC, ref_frame=20, engine=engine)
    if comm.rank == 0:
        close(result, reference)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u = mda.Universe(*adk)
            u.trajectory[20]
            expected = len(u.select_atoms(GEOMETRIC))
            u.trajectory[0]
            assert len(u.select_atoms(GEOMETRIC)) != expected  # the frame matters
        assert result["report"]["n_selected"] == expected


def test_geometric_selection_uses_the_trajectory_not_the_topology_coordinates(solvated):
    """A GRO has coordinates of its own; the trajectory's reference frame (and box) decide."""
    select = "name CA and around 6 resname LYS"
    reference = mdanalysis_rmsd(solvated["topology"], solvated["XTC"], select=select, ref_frame=5)
    result = bench_rmsd(solvated["XTC"], solvated["topology"], select=select, ref_frame=5, block_frames=4)
    close(result, reference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(solvated["topology"], solvated["XTC"])
        u.trajectory[5]
        at_reference = len(u.select_atoms(select))
        from_topology = len(mda.Universe(solvated["topology"]).select_atoms(select))
    assert result["report"]["n_selected"] == at_reference != from_topology


def test_one_atom_fit_is_refused_and_one_atom_group_agrees(adk):
    with pytest.raises(InputError, match="picks one atom"):
        bench_rmsd(adk[1], adk[0], select="resid 10 and name CA")
    results = [bench_rmsd(adk[1], adk[0], calc_select=["resid 10 and name CA"], engine=engine)["rmsd"]
               for engine in ("blocks", "frames")]
    assert np.isfinite(results[0]).all() and np.abs(results[0] - results[1]).max() < 1e-4
    reference = mdanalysis_rmsd(*adk, groups=["resid 10 and name CA"])
    assert np.abs(results[0][:, 3] - reference[:, 3]).max() < 1e-4


@pytest.mark.parametrize("weights", [None, "mass"])
def test_bench_frames_engine_qcp_nan_two_atom_fit_is_zero_at_the_reference(adk, weights):
    # MDAnalysis's QCP gives 2e-3 A (it has given NaN) for the reference frame itself when the
    # fit group is two atoms; the frames engine recomputes such values from QCP's rotation
    select = "resid 10 and name CA or resid 11 and name CA"
    # (RMSD groups after a collinear fit are not defined: any turn about the line fits)
    results = {engine: bench_rmsd(adk[1], adk[0], select=select, weights=weights, ref_frame=7, engine=engine)["rmsd"]
               for engine in ("blocks", "frames")}
    reference = mdanalysis_rmsd(*adk, select=select, weights=weights, ref_frame=7)
    others = np.delete(np.arange(len(reference)), 7)
    for engine, rmsd in results.items():
        assert rmsd[7, 2] < 1e-6, (engine, rmsd[7])
        assert np.abs(rmsd[others, 2] - reference[others, 2]).max() < 1e-4, engine


def test_bench_frames_engine_qcp_far_atoms_zero_at_the_reference():
    # the differential harness's case: two atoms 9000 A apart, where MDAnalysis's QCP gives
    # 0.52 A for the reference frame itself (an absolute threshold of 0.01 A missed it)
    data = os.path.join(ROOT, "tests", "differential", "data")
    xtc, pdb = (os.path.join(data, "bench-qcp-far-atoms." + ext) for ext in ("xtc", "pdb"))
    reference = mdanalysis_rmsd(pdb, xtc, select="name CA or name C")
    assert reference[0, 2] > 0.1  # MDAnalysis's own value, unresolved
    for engine in ("blocks", "frames"):
        rmsd = bench_rmsd(xtc, pdb, select="name CA or name C", engine=engine, block_frames=52)["rmsd"]
        assert rmsd[0, 2] < 1e-3, (engine, rmsd[0])  # float64 cancellation at 5000 A: 1e-4 A
        assert np.allclose(rmsd[1:, 2], reference[1:, 2], atol=0.02), engine  # float32 at 5000 A


# --- frames analysed ---------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
@pytest.mark.parametrize("frames", [(5, 90, 3), (None, None, 7), (-30, None, None), (10, 11, None)])
def test_start_stop_step_equal_mdanalysis_run(comm, adk, adk_h5md, engine, frames):
    start, stop, step = frames
    reference = mdanalysis_rmsd(*adk, ref_frame=50, start=start, stop=stop, step=step)
    result = bench_rmsd(adk_h5md if comm.size == 1 else adk[1], adk[0], comm=comm, ref_frame=50, start=start,
                        stop=stop, step=step, engine=engine, block_frames=6)
    if comm.rank == 0:
        close(result, reference)


def test_strided_frames_on_chunked_h5md_follow_chunks(adk, adk_h5md):
    reference = mdanalysis_rmsd(*adk, start=2, step=3)
    result = bench_rmsd(adk_h5md, adk[0], start=2, step=3, block_frames=5)
    close(result, reference)
    assert result["report"]["partition"]["scheme"] == "chunks"
    with pytest.raises(InputError, match="--start 50 --stop 40 is an empty range: it starts at frame 50 and stops "
                                         "before frame 40"):
        bench_rmsd(adk[1], adk[0], start=50, stop=40)


def test_empty_frame_range_is_named(adk):
    """Regression: --start 5 --stop 5 was refused as "--step None selects none"."""
    result = run_h5mdtool(["bench", "rmsd", adk[1], "-t", adk[0], "--start", "5", "--stop", "5"])
    assert result.returncode == 1  # a frame range the input does not hold: bad input, not a bad command line
    assert result.stderr == ("error: --start 5 --stop 5 is an empty range: it starts at frame 5 and stops before "
                             "frame 5 (of the 98 frames, 0-97)\n")


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_nonfinite_positions_named_by_frame_and_atom(tmp_path, adk, adk_frames, engine):
    """Regression: the frames engine reported a NaN position as "LinAlgError: SVD did not converge"."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    path = str(tmp_path / "nan.trr")
    frames = adk_frames[:12].copy()
    frames[7, 30, 1] = np.nan
    with TRRFile(path, "w") as handle:
        for number, xyz in enumerate(frames):
            handle.write(xyz, None, None, np.diag([50.0] * 3).astype(np.float32), number, float(number), 0.0, len(xyz))
    with pytest.raises(InputError) as caught:
        bench_rmsd(path, adk[0], engine=engine, select="name CA or index 30")
    assert str(caught.value) == (f"{path}: frame 7 holds non-finite positions (atom 30); h5mdtool refuses NaN and "
                                 "infinite values")


def test_time_selection_like_gmx(tmp_path, adk, adk_segments):
    """-b/-e/--dt pick frames by time (ps); the times come from the XTC frame headers."""
    from h5mdtool.formats.frametimes import select_by_time

    whole = adk_segments["whole"]  # times 0, 2, 4, ... ps
    times = np.array([ts.time for ts in mda.Universe(adk[0], whole).trajectory])
    expected = select_by_time(times, 10.0, 150.0, 6.0)
    np.testing.assert_array_equal(expected, np.arange(6, 76, 3))  # 12, 18, ..., 150 ps
    reference = mdanalysis_rmsd(adk[0], whole)[expected]
    for path in (whole, adk_segments["parts"]):
        result = bench_rmsd(path, adk[0], begin=10.0, end=150.0, dt=6.0)
        close(result, reference)
    assert bench_rmsd(whole, adk[0], begin=191.0)["rmsd"][:, 1].tolist() == [192.0, 194.0]
    with pytest.raises(UsageError, match="not both"):
        bench_rmsd(whole, adk[0], begin=1.0, start=3)
    with pytest.raises(InputError, match="selects none"):
        bench_rmsd(whole, adk[0], begin=1000.0)
    with pytest.raises(UsageError, match="before -b"):
        bench_rmsd(whole, adk[0], begin=10.0, end=5.0)


def test_frame_times_from_headers_equal_mdanalysis(tmp_path, adk, solvated, adk_h5md):
    from h5mdtool.bench.inputs import frame_times, inspect_input

    for path, topology in ((solvated["XTC"], solvated["topology"]), (solvated["TRR"], solvated["topology"]),
                           (adk[1], adk[0]), (adk_h5md, adk[0])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = [ts.time for ts in mda.Universe(topology, path).trajectory]
        np.testing.assert_allclose(frame_times(inspect_input([path])), expected, rtol=1e-6)
    split(adk[1], str(tmp_path / "parts"), 3, progress=False)
    np.testing.assert_allclose(frame_times(inspect_input([str(tmp_path / "parts")])),
                               frame_times(inspect_input([adk[1]])), rtol=1e-6)


# --- H5MD particle groups, layouts, units -----------------------------------------------------

@pytest.fixture(scope="module")
def two_groups(comm, session_dir, adk):
    """An H5MD file with a second particle group, 'aaa', holding the frames in reverse."""
    import h5py

    path = os.path.join(session_dir, "two-groups.h5md")
    convert(adk[1], path, comm=comm, progress=False, force=True)
    if comm.rank == 0:
        with h5py.File(path, "r+") as handle:
            handle.copy("particles/trajectory", "particles/aaa")
            value = handle["particles/aaa/position/value"]
            value[...] = value[...][::-1]
    comm.Barrier()
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_h5md_first_particle_group_as_mdanalysis_and_group_option(comm, adk, two_groups, engine):
    import h5py

    with h5py.File(two_groups, "r") as handle:
        first = list(handle["particles"])[0]  # MDAnalysis's choice: h5py's order (creation order here)
    other = ({"aaa", "trajectory"} - {first}).pop()
    default = bench_rmsd(two_groups, adk[0], comm=comm, engine=engine)
    chosen = bench_rmsd(two_groups, adk[0], comm=comm, engine=engine, group=other)
    if comm.rank == 0:
        close(default, mdanalysis_rmsd(adk[0], two_groups))
        assert default["report"]["input"]["particles_group"] == first
        assert chosen["report"]["input"]["particles_group"] == other
        forward, backward = mdanalysis_rmsd(*adk), mdanalysis_rmsd(*adk, ref_frame=97)[::-1]
        expected = backward if other == "aaa" else forward
        assert np.abs(chosen["rmsd"][:, 2] - expected[:, 2]).max() < 1e-4
    with pytest.raises(InputError, match="no particle group 'nope'; .*aaa"):
        bench_rmsd(two_groups, adk[0], comm=comm, engine=engine, group="nope")


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_group_option_on_h5md_parts_is_read_by_both_engines(tmp_path, adk, engine):
    """--group on a manifest of H5MD parts: the blocks engine read the parts' first group
    (and rank 0's reference frame the named one) before the reading stack; now both engines
    read the named group of every part."""
    import json

    import h5py

    outdir = tmp_path / "parts"
    split(adk[1], str(outdir), 2, format="h5md", progress=False)
    manifest = outdir / "manifest.json"
    document = json.loads(manifest.read_text())
    for part in document["parts"]:
        path = outdir / part["path"]
        with h5py.File(path, "r+") as handle:
            handle.copy("particles/trajectory", "particles/aaa")
            first = list(handle["particles"])[0]  # the default (creation order here)
            value = handle[f"particles/{first}/position/value"]
            value[...] = value[...] * 1.5
        part["bytes"] = os.path.getsize(path)
    document["bytes"] = sum(part["bytes"] for part in document["parts"])
    manifest.write_text(json.dumps(document))
    other = ({"aaa", "trajectory"} - {first}).pop()
    expected = mdanalysis_rmsd(*adk)
    chosen = bench_rmsd(str(outdir), adk[0], engine=engine, group=other, block_frames=7)
    close(chosen, expected)
    default = bench_rmsd(str(outdir), adk[0], engine=engine, block_frames=7)
    assert np.abs(default["rmsd"][:, 2] - 1.5 * expected[:, 2]).max() < 1.5e-4
    with pytest.raises(InputError, match="no particle group 'nope'"):
        bench_rmsd(str(outdir), adk[0], engine=engine, group="nope")


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_trr_frames_without_positions_are_refused_in_one_line(tmp_path, adk, engine):
    """A TRR with frames of velocities only (nstvout != nstxout): MDAnalysis numbers every
    frame (its RMSD stops with NoDataError), so both engines refuse it, naming the frame (the
    frames engine crashed with NoDataError before the port)."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(*adk)
        positions = [ts.positions / 10.0 for ts in universe.trajectory[:4]]
    path = str(tmp_path / "own-steps.trr")
    box = np.diag([20.0, 20.0, 20.0]).astype(np.float32)
    with TRRFile(path, "w") as handle:
        for number, x in enumerate(positions):
            handle.write(x, None, None, box, 2 * number, 2.0 * number, 0.0, len(x))
            handle.write(None, np.ones_like(x), None, box, 2 * number + 1, 2.0 * number + 1, 0.0, len(x))
    with pytest.raises(InputError, match="own-steps.trr: frame 1 holds no positions"):
        bench_rmsd(path, adk[0], engine=engine)
    # the manifest of its TRR parts too (bench-frames-split-trr-without-positions: the frames
    # engine crashed with NoDataError or IndexError on them)
    split(path, str(tmp_path / "parts"), 3, progress=False)
    with pytest.raises(InputError, match="part-0001.trr: frame 1 holds no positions"):
        bench_rmsd(str(tmp_path / "parts" / "manifest.json"), adk[0], engine=engine)
    done = CliRunner().invoke(cli, ["bench", "rmsd", path, "-t", adk[0], "--engine", engine])
    assert done.exit_code == 1 and done.output.count("error:") == 1 and "Traceback" not in done.output


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_h5md_velocities_at_their_own_steps(tmp_path, adk, engine):
    """An H5MD velocity element sampled at steps of its own adds frames without positions to
    the scan; the frames are the rows of position, as MDAnalysis numbers them (its reader
    itself stops at velocity row 10 on this valid file, so the oracle reads the DCD). The
    frames engine's MDAnalysis reader leaves such velocities out (make fuzz case 919: it
    crashed with IndexError past the forces' last row)."""
    import h5py

    path = str(tmp_path / "own-rate.h5md")
    convert(adk[1], path, progress=False, stop=20)
    with h5py.File(path, "r+") as handle:
        group = handle["particles/trajectory"]
        steps = group["position/step"][()]
        velocity = group.create_group("velocity")
        velocity["value"] = np.ones((10, 3341, 3), np.float32)
        velocity["value"].attrs["unit"] = "nm ps-1"
        velocity["step"] = steps[:-1:2] + 1  # between the position frames
        velocity["time"] = group["position/time"][:-1:2] + 0.5
        velocity["time"].attrs["unit"] = "ps"
    result = bench_rmsd(path, adk[0], block_frames=6, engine=engine)
    close(result, mdanalysis_rmsd(*adk, stop=20))
    assert result["report"]["n_frames"] == 20
    # split, the frames between the positions' are frames of the manifest: refused, each
    # part's first such frame named (the blocks engine said the part held 7 frames, not the
    # manifest's 10; the frames engine crashed with IndexError)
    parts = str(tmp_path / "parts")
    split(path, parts, 3, progress=False)
    with pytest.raises(InputError, match="part-0001.h5md: frame 1 holds no positions"):
        bench_rmsd(os.path.join(parts, "manifest.json"), adk[0], engine=engine)


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_split_h5md_with_velocities_at_some_position_steps(comm, shared_tmp, adk, engine):
    """Velocities saved at every third position frame (steps of their own, rows fewer than
    the positions'): the H5MD parts of a split keep them so, and bench reads the parts as
    it reads the whole file (make fuzz cases 481-482, seed 3690965464: the frames engine
    read the parts with MDAnalysis's own H5MD reader, which read velocity row 6 of a part
    holding 6, IndexError)."""
    import h5py

    path = os.path.join(shared_tmp, "every-third.h5md")
    convert(adk[1], path, comm=comm, progress=False, stop=20)
    if comm.rank == 0:
        with h5py.File(path, "r+") as handle:
            group = handle["particles/trajectory"]
            velocity = group.create_group("velocity")
            velocity["value"] = np.ones((7, 3341, 3), np.float32)
            velocity["value"].attrs["unit"] = "nm ps-1"
            velocity["step"] = group["position/step"][::3]
            velocity["time"] = group["position/time"][::3]
            velocity["time"].attrs["unit"] = "ps"
    comm.Barrier()
    parts = os.path.join(shared_tmp, "every-third-parts")
    split(path, parts, 3, comm=comm, progress=False)
    comm.Barrier()
    reference = mdanalysis_rmsd(*adk, stop=20)
    for source in (path, os.path.join(parts, "manifest.json")):
        result = bench_rmsd(source, adk[0], comm=comm, block_frames=4, engine=engine)
        if comm.rank == 0:
            close(result, reference)
            assert result["report"]["n_frames"] == 20


def test_group_option_needs_h5md(adk):
    with pytest.raises(InputError, match="--group"):
        bench_rmsd(adk[1], adk[0], group="trajectory")


SPAN = "resid 50:120 and name CA"  # a run of atoms in the middle: the H5MD reader reads their span


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_h5md_chunks_of_several_frames_and_a_middle_selection(comm, shared_tmp, adk, engine):
    path = os.path.join(shared_tmp, "chunked.h5md")
    convert(adk[1], path, comm=comm, progress=False, chunk_frames=4, compression="gzip")
    reference = mdanalysis_rmsd(adk[0], adk[1], SPAN, 5)
    result = bench_rmsd(path, adk[0], comm=comm, select=SPAN, ref_frame=5, block_frames=10, engine=engine)
    if comm.rank == 0:
        close(result, reference)
        assert result["report"]["input"]["chunks"] == [4, 3341, 3]
        if engine == "blocks":  # whole chunks per rank
            assert all(r["first_frame"] % 4 == 0 for r in result["report"]["ranks"] if r["n_frames"])


@pytest.mark.mpi
def test_h5md_fixed_time_interval_and_angstrom_positions(comm, shared_tmp, adk):
    """H5MD 1.1 allows time as a scalar increment with an offset, and any length unit."""
    import h5py

    path = os.path.join(shared_tmp, "fixed.h5md")
    convert(adk[1], path, comm=comm, progress=False)
    if comm.rank == 0:
        with h5py.File(path, "r+") as handle:
            position = handle["particles/trajectory/position"]
            value = position["value"]
            value[...] = value[...] * 10.0
            value.attrs["unit"] = "Angstrom"
            del position["time"]
            position["time"] = 2.5
            position["time"].attrs["offset"] = 100.0
            position["time"].attrs["unit"] = "ps"
    comm.Barrier()
    result = bench_rmsd(path, adk[0], comm=comm, block_frames=16, begin=105.0)
    if comm.rank == 0:
        rmsd = result["rmsd"]
        np.testing.assert_allclose(rmsd[:, 1], 100.0 + 2.5 * np.arange(2, 98))
        assert np.abs(rmsd[:, 2] - mdanalysis_rmsd(*adk)[2:, 2]).max() < 1e-4


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_h5md_int32_picometre_positions(tmp_path, adk, engine):
    """convert --precision writes int32 positions in pm; the reading stack converts them."""
    path = str(tmp_path / "pm.h5md")
    convert(adk[1], path, progress=False, precision=0.001, chunk_frames=8)
    result = bench_rmsd(path, adk[0], engine=engine, ref_frame=4, block_frames=12)
    close(result, mdanalysis_rmsd(adk[0], path, ref_frame=4))
    assert result["report"]["input"]["dtype"] == "int32"
    assert np.abs(result["rmsd"][:, 2] - mdanalysis_rmsd(*adk, ref_frame=4)[:, 2]).max() < 0.01  # 0.01 A grid


def test_split_xtc_parts_equal_mdanalysis(tmp_path, adk):
    """A manifest of XTC parts, against MDAnalysis on the whole XTC (XTC's precision)."""
    from MDAnalysis.coordinates.XTC import XTCWriter

    whole = str(tmp_path / "adk.xtc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(*adk)
        with XTCWriter(whole, n_atoms=u.atoms.n_atoms) as writer:
            for _ in u.trajectory:
                writer.write(u.atoms)
    reference = mdanalysis_rmsd(adk[0], whole)
    outdir = tmp_path / "parts"
    split(whole, str(outdir), 4, progress=False)
    for engine in ("blocks", "frames"):
        close(bench_rmsd(str(outdir / "manifest.json"), adk[0], engine=engine, block_frames=9), reference)
    assert sorted(os.listdir(outdir)) == ["manifest.json"] + [f"part-000{n}.xtc" for n in range(1, 5)]


# --- compute load and outputs ------------------------------------------------------------------

def test_compute_load_repeats_the_kernel(adk):
    plain = bench_rmsd(adk[1], adk[0], calc_select=["backbone"], repeat=3)
    loaded = bench_rmsd(adk[1], adk[0], calc_select=["backbone"], compute_load=40, repeat=3)
    np.testing.assert_array_equal(plain["rmsd"], loaded["rmsd"])
    compute = [min(run["ranks"][0]["t_compute"] for run in result["report"]["runs"]) for result in (plain, loaded)]
    assert compute[1] > 10 * compute[0]
    assert loaded["report"]["compute_load"] == 40
    assert loaded["report"]["ratio_compute_io"] > plain["report"]["ratio_compute_io"]


def test_blocks_engine_runs_blas_on_one_thread(adk, monkeypatch):
    """The kernel's BLAS calls run with one BLAS thread (threads spinning between its small
    calls would take cores from the decompression threads and other ranks); the setting is
    restored afterwards and the RMSDs are unchanged."""
    from threadpoolctl import threadpool_info

    from h5mdtool.bench import engines as bench_engines

    def blas_threads():
        return {(info["filepath"], info["num_threads"]) for info in threadpool_info() if info["user_api"] == "blas"}

    before = blas_threads()
    seen = []
    compute = bench_engines.BlocksEngine.compute

    def recording(self, positions):
        seen.append(blas_threads())
        return compute(self, positions)

    monkeypatch.setattr(bench_engines.BlocksEngine, "compute", recording)
    result = bench_rmsd(adk[1], adk[0], repeat=1)
    assert seen and all(threads and {count for _, count in threads} == {1} for threads in seen)
    assert blas_threads() == before
    np.testing.assert_allclose(result["rmsd"][:, 2], mdanalysis_rmsd(adk[0], adk[1])[:, 2], atol=1e-4)


@pytest.mark.parametrize("suffix", ["npy", "csv", "xvg"])
def test_rmsd_outputs_in_units(tmp_path, adk, suffix):
    reference = mdanalysis_rmsd(*adk, groups=["backbone"])
    path = tmp_path / f"rmsd.{suffix}"
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--calc-select", "backbone",
                                      "--rmsd-out", str(path), "--time-unit", "ns", "--rmsd-unit", "nm"])
    assert result.exit_code == 0, result.output
    if suffix == "npy":
        table = np.load(path)
    elif suffix == "csv":
        assert path.read_text().splitlines()[0] == 'frame,time_ns,"rmsd_nm (name CA)","rmsd_nm (backbone)"'
        table = np.loadtxt(path, delimiter=",", skiprows=1)
    else:
        text = path.read_text()
        assert '@    xaxis  label "Time (ns)"' in text and '@ s1 legend "backbone"' in text
        rows = np.loadtxt([line for line in text.splitlines() if not line.startswith(("#", "@"))])
        table = np.column_stack([reference[:, 0], rows])
    np.testing.assert_allclose(table[:, 1], reference[:, 1] / 1000, rtol=1e-6)
    assert np.abs(table[:, 2:] - reference[:, 2:] / 10).max() < 1e-5


def test_bench_frames_engine_qcp_smallest_root():
    # make fuzz case 1253: two C-alpha atoms 100 A apart, where MDAnalysis's QCP lands on the
    # key matrix's smallest eigenvalue and reports 101.8 A for the reference frame itself.
    # Both engines give the optimal superposition's RMSD (SVD/Kabsch, computed here in float64).
    data = os.path.join(ROOT, "tests", "differential", "data")
    trz, pdb = (os.path.join(data, "bench-qcp-smallest-root." + ext) for ext in ("trz", "pdb"))
    reference = mdanalysis_rmsd(pdb, trz, select="name CA")
    assert reference[0, 2] > 100  # MDAnalysis's own value
    import MDAnalysis as mda

    universe = mda.Universe(pdb, trz)
    atoms = universe.select_atoms("name CA")
    frames = [atoms.positions.astype(np.float64) for _ in universe.trajectory]
    expected = []
    for frame in frames:
        a, b = frame - frame.mean(axis=0), frames[0] - frames[0].mean(axis=0)
        u, _, vt = np.linalg.svd(a.T @ b)
        d = np.sign(np.linalg.det(u @ vt)) or 1.0
        rotation = u @ np.diag([1.0, 1.0, d]) @ vt
        expected.append(np.sqrt(max(0.0, ((a @ rotation - b) ** 2).sum()) / len(a)))
    for engine in ("blocks", "frames"):
        rmsd = bench_rmsd(trz, pdb, select="name CA", engine=engine)["rmsd"]
        np.testing.assert_allclose(rmsd[:, 2], expected, atol=1e-3, err_msg=engine)


def _kabsch_rmsd(frame, reference):
    a, b = frame - frame.mean(axis=0), reference - reference.mean(axis=0)
    u, _, vt = np.linalg.svd(a.T @ b)
    d = np.sign(np.linalg.det(u @ vt)) or 1.0
    return float(np.sqrt(max(0.0, ((a @ (u @ np.diag([1.0, 1.0, d]) @ vt) - b) ** 2).sum()) / len(a)))


def test_bench_frames_engine_collinear_fit_group_far_from_the_reference(tmp_path):
    # make fuzz case 205 (seed 3652262229): two C-alpha atoms 5500 A apart, RMSD 2.8 A, just
    # above the threshold below which QCP's value was recomputed; MDAnalysis's QCP gives 2.99 A.
    # A collinear fit group is now always fitted by the SVD.
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    frames_nm = np.array([[[133.022, 496.69904, -15.919001], [483.06503, 80.315, -80.912]],
                          [[-367.394, 189.69202, -162.38701], [-143.82701, -308.56702, -212.38301]]], np.float32)
    trr, pdb = str(tmp_path / "two.trr"), str(tmp_path / "two.pdb")
    with TRRFile(trr, "w") as handle:
        for step, xyz in enumerate(frames_nm):
            handle.write(xyz, None, None, np.zeros((3, 3), np.float32), step, float(step), 0.0, 2)
    with open(pdb, "w") as handle:
        for number, (x, y, z) in enumerate(frames_nm[0] * 10, 1):
            handle.write(f"ATOM  {number:5d}  CA  ALA A{number:4d}    {x:8.2f}{y:8.2f}{z:8.2f}  1.00  0.00           C\n")
        handle.write("END\n")
    angstrom = frames_nm.astype(np.float64) * 10
    expected = _kabsch_rmsd(angstrom[1], angstrom[0])
    assert abs(mdanalysis_rmsd(pdb, trr, select="name CA")[1, 2] - expected) > 0.1  # MDAnalysis's QCP
    for engine in ("blocks", "frames"):
        rmsd = bench_rmsd(trr, pdb, select="name CA", engine=engine)["rmsd"]
        assert rmsd[0, 2] < 1e-3, (engine, rmsd[0])
        assert abs(rmsd[1, 2] - expected) < 1e-3, (engine, rmsd[1], expected)


def test_bench_frames_engine_reports_the_scanned_times():
    # make fuzz cases 2535-2539: an H5MD file (MDAnalysis's H5MDWriter) with time in fs; the
    # frames engine reported MDAnalysis's ts.time, converted to ps in float32 (250.000015 ps
    # for 250000 fs). Both engines now report the times of h5mdtool's scan, in float64.
    import h5py

    data = os.path.join(ROOT, "tests", "differential", "data")
    h5md, pdb = (os.path.join(data, "bench-time-fs." + ext) for ext in ("h5md", "pdb"))
    with h5py.File(h5md, "r") as handle:
        time = handle["particles/trajectory/position/time"]
        assert time.attrs["unit"] in ("fs", b"fs")
        expected = np.asarray(time[()], np.float64) / 1000.0
    for engine in ("blocks", "frames"):
        result = bench_rmsd(h5md, pdb, select="index 0:4", engine=engine)["rmsd"]
        np.testing.assert_allclose(result[:, 1], expected, rtol=1e-12, err_msg=engine)

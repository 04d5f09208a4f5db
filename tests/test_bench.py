"""bench rmsd: results equal MDAnalysis's rms.RMSD on every input kind and rank count."""

import json
import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner

from h5mdtool import bench_rmsd, convert, split
from h5mdtool.bench import advice, stragglers
from h5mdtool.cli import cli
from h5mdtool.errors import InputError
from h5mdtool.rmsd import rmsd_to_reference


def mdanalysis_rmsd(topology, trajectory, select="name CA"):
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(mda.Universe(topology, trajectory), select=select).run().results.rmsd


@pytest.fixture(scope="module")
def adk_reference(adk):
    return mdanalysis_rmsd(*adk)


def check_result(comm, result, reference):
    if comm.rank != 0:
        assert result is None
        return
    np.testing.assert_array_equal(result["rmsd"][:, 0], reference[:, 0])
    np.testing.assert_allclose(result["rmsd"][:, 1], reference[:, 1], rtol=1e-6)
    assert np.abs(result["rmsd"][:, 2] - reference[:, 2]).max() < 1e-4
    report = result["report"]
    assert report["n_ranks"] == comm.size
    for run in report["runs"]:
        assert sum(r["n_frames"] for r in run["ranks"]) == report["n_frames"] == len(reference)
        assert [r["rank"] for r in run["ranks"]] == list(range(comm.size))
        for record in run["ranks"]:
            assert record["t_total"] >= record["t_io"] + record["t_compute"]


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
@pytest.mark.parametrize("kind", ["DCD", "H5MD", "H5MD-gzip", "XTC", "manifest-XTC", "manifest-H5MD"])
def test_rmsd_equals_mdanalysis_adk(comm, shared_tmp, adk, adk_reference, kind, engine):
    path = adk[1]
    if kind.startswith("H5MD"):
        path = os.path.join(shared_tmp, "adk.h5md")
        convert(adk[1], path, comm=comm, progress=False, compression="gzip" if kind.endswith("gzip") else "none")
    elif kind == "XTC":
        from MDAnalysis.coordinates.XTC import XTCWriter

        path = os.path.join(shared_tmp, "adk.xtc")
        if comm.rank == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                u = mda.Universe(*adk)
                with XTCWriter(path, n_atoms=u.atoms.n_atoms) as writer:
                    for _ in u.trajectory:
                        writer.write(u.atoms)
        comm.Barrier()
        adk_reference = mdanalysis_rmsd(adk[0], path)
    elif kind.startswith("manifest"):
        outdir = os.path.join(shared_tmp, "parts")
        split(adk[1], outdir, 5, comm=comm, format="h5md" if kind.endswith("H5MD") else "same", progress=False)
        path = os.path.join(outdir, "manifest.json")
    comm.Barrier()
    before = sorted(os.listdir(os.path.dirname(path)))
    result = bench_rmsd(path, adk[0], comm=comm, block_frames=7, repeat=2, engine=engine)
    check_result(comm, result, adk_reference)
    if comm.rank == 0:
        assert result["report"]["engine"] == engine
    comm.Barrier()
    assert sorted(os.listdir(os.path.dirname(path))) == before  # no offset or lock files


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_rmsd_trr_other_selection(comm, solvated, engine):
    reference = mdanalysis_rmsd(solvated["topology"], solvated["TRR"], select="protein and name CA")
    result = bench_rmsd(solvated["TRR"], solvated["topology"], comm=comm, select="protein and name CA",
                        block_frames=3, engine=engine)
    check_result(comm, result, reference)


def test_kernel_against_rotated_copy():
    rng = np.random.default_rng(5)
    reference = rng.normal(size=(50, 3))
    angle = 0.7
    rotation = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    moved = reference @ rotation.T + [3.0, -1.0, 2.0]
    noisy = moved + rng.normal(scale=0.1, size=moved.shape)
    values = rmsd_to_reference(np.stack([moved, noisy]), reference)
    assert values[0] == pytest.approx(0.0, abs=1e-6)  # sqrt of rounding noise
    assert 0.05 < values[1] < 0.2
    mirrored = reference * [1, 1, -1]  # a reflection is not a rotation: no perfect fit
    assert rmsd_to_reference(mirrored[None], reference)[0] > 0.1


def test_stragglers_and_advice_on_synthetic_timings():
    result = stragglers([1.0, 1.1, 0.9, 1.0, 2.0])
    assert result["median_total"] == 1.0
    assert result["over_1.5x_median"] == [4]
    assert result["over_2x_fastest"] == [4]
    assert stragglers([1.0, 1.0, 1.6])["over_1.5x_median"] == [2]
    assert stragglers([1.0, 1.0, 1.6])["over_2x_fastest"] == []
    assert "Heuristic 1" in advice(25.0)
    assert "Heuristic 2.1" in advice(0.5) and "split" in advice(0.5)
    assert advice(None) == "no I/O time measured"


def test_errors(tmp_path, adk, solvated):
    with pytest.raises(InputError, match="matches no atom"):
        bench_rmsd(adk[1], adk[0], select="resname NOPE")
    with pytest.raises(InputError, match="atoms but"):
        bench_rmsd(solvated["XTC"], adk[0])
    outdir = tmp_path / "parts"
    split(adk[1], str(outdir), 3, progress=False)
    os.remove(outdir / "part-0002.dcd")
    with pytest.raises(InputError, match="missing"):
        bench_rmsd(str(outdir / "manifest.json"), adk[0])


def test_cli_outputs(tmp_path, adk, adk_reference):
    report_path, rmsd_path = tmp_path / "report.json", tmp_path / "rmsd.csv"
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--out", str(report_path), "--rmsd-out", str(rmsd_path)])
    assert result.exit_code == 0, result.output
    assert "stragglers" in result.output and "advice" in result.output
    report = json.loads(report_path.read_text())
    assert report["runs"][0]["ranks"][0]["n_frames"] == 98
    assert set(report["runs"][0]) >= {"t_total", "stragglers", "ratio_compute_io", "advice", "ranks"}
    table = np.loadtxt(rmsd_path, delimiter=",", skiprows=1)
    assert np.abs(table[:, 2] - adk_reference[:, 2]).max() < 1e-4
    bad = CliRunner().invoke(cli, ["bench", "rmsd", str(tmp_path / "none.xtc"), "-t", adk[0]])
    assert bad.exit_code == 1 and "no such file" in bad.output and "Traceback" not in bad.output


def synthetic_report(n_ranks, totals, path="/data/md.h5md"):
    ranks = [
        {"rank": r, "n_frames": 10, "t_init_top": 0.1, "t_init_traj": 0.01, "t_io": t / 2, "t_compute": t / 4,
         "t_wait": 0.0, "t_comm": 0.001, "t_total": t}
        for r, t in enumerate(totals)
    ]
    return {"benchmark": "rmsd", "n_ranks": n_ranks, "n_frames": 40, "input": {"path": path},
            "runs": [{"t_total": max(totals), "ranks": ranks, "stragglers": stragglers(totals)}]}


def test_report_arithmetic():
    from h5mdtool.bench import combine_reports

    rows = combine_reports([synthetic_report(4, [2.5, 2.4, 2.5, 2.5]), synthetic_report(1, [8.0]), synthetic_report(2, [4.0, 4.0])])
    assert [row["n_ranks"] for row in rows] == [1, 2, 4]
    assert [row["speedup"] for row in rows] == pytest.approx([1.0, 2.0, 3.2])
    assert [row["efficiency"] for row in rows] == pytest.approx([1.0, 1.0, 0.8])
    assert rows[2]["t_io"] == pytest.approx((2.5 * 3 + 2.4) / 4 / 2)
    with pytest.raises(Exception, match="different inputs"):
        combine_reports([synthetic_report(1, [8.0]), synthetic_report(2, [4.0, 4.0], path="/other.h5md")])


def test_report_cli_and_plots(tmp_path, adk):
    paths = []
    for n, totals in ((1, [8.0]), (2, [4.0, 4.1])):
        path = tmp_path / f"run{n}.json"
        path.write_text(json.dumps(synthetic_report(n, totals)))
        paths.append(str(path))
    result = CliRunner().invoke(cli, ["bench", "report", *paths, "--csv", "--plot", str(tmp_path / "scaling.png")])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("n_ranks,t_total,speedup,efficiency")
    assert lines[2].startswith("2,4.1,1.95122,0.97561")
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--plot", str(tmp_path / "ranks.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ranks.png").stat().st_size > 1000


def test_plot_without_matplotlib(tmp_path, adk, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--plot", str(tmp_path / "r.png")])
    assert result.exit_code == 2
    assert "h5mdtool[plot]" in result.output and not (tmp_path / "r.png").exists()


def mdanalysis_rmsd_ref(topology, trajectory, select, ref_frame):
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(mda.Universe(topology, trajectory), select=select, ref_frame=ref_frame).run().results.rmsd


SPAN = "resid 50:120 and name CA"  # a run of atoms in the middle: the H5MD reader reads their span


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_h5md_chunks_of_several_frames_and_a_middle_selection(comm, shared_tmp, adk, engine):
    path = os.path.join(shared_tmp, "chunked.h5md")
    convert(adk[1], path, comm=comm, progress=False, chunk_frames=4, compression="gzip")
    reference = mdanalysis_rmsd_ref(adk[0], adk[1], SPAN, 5)
    result = bench_rmsd(path, adk[0], comm=comm, select=SPAN, ref_frame=5, block_frames=10, engine=engine)
    check_result(comm, result, reference)
    if comm.rank == 0:
        if engine == "blocks":
            assert result["report"]["input"]["chunks"] == [4, 3341, 3]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert result["report"]["n_selected"] == len(mda.Universe(adk[0]).select_atoms(SPAN))


@pytest.mark.mpi
def test_h5md_fixed_time_interval_and_angstrom_positions(comm, shared_tmp, adk, adk_reference):
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
    result = bench_rmsd(path, adk[0], comm=comm, block_frames=16)
    if comm.rank == 0:
        rmsd = result["rmsd"]
        np.testing.assert_allclose(rmsd[:, 1], 100.0 + 2.5 * np.arange(98))
        assert np.abs(rmsd[:, 2] - adk_reference[:, 2]).max() < 1e-4


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_manifest_ranks_open_only_their_parts(comm, shared_tmp, adk, engine):
    outdir = os.path.join(shared_tmp, "parts")
    split(adk[1], outdir, 7, comm=comm, format="h5md" if engine == "blocks" else "same", progress=False)
    result = bench_rmsd(os.path.join(outdir, "manifest.json"), adk[0], comm=comm, engine=engine, ref_frame=-1)
    if comm.rank != 0:
        return
    from h5mdtool.manifest import read_manifest

    manifest = read_manifest(outdir)
    report = result["report"]
    assert report["input"]["layout"] == "split" and report["input"]["parts"] == 7
    for record in report["ranks"]:
        needed = {p.relative_path for p in manifest.parts_for(record["start"], record["stop"])}
        if record["rank"] == 0:
            needed |= {manifest.parts[-1].relative_path}  # rank 0 reads the reference frame
        assert set(record["opened"]) == needed
    assert "already split" in report["advice"] or "compute-bound" in report["advice"]


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
    assert len(list(outdir.glob("part-*.xtc"))) == 4
    for engine in ("blocks", "frames"):
        result = bench_rmsd(str(outdir / "manifest.json"), adk[0], engine=engine, block_frames=9)
        np.testing.assert_allclose(result["rmsd"][:, 1], reference[:, 1], rtol=1e-6)
        assert np.abs(result["rmsd"][:, 2] - reference[:, 2]).max() < 1e-4
    assert sorted(os.listdir(outdir)) == ["manifest.json"] + [f"part-000{n}.xtc" for n in range(1, 5)]


def test_report_fields(adk):
    result = bench_rmsd(adk[1], adk[0], repeat=2, block_frames=30)
    report = result["report"]
    assert set(report) >= {"n_ranks", "n_frames", "engine", "input", "ranks", "t_total", "stragglers",
                           "ratio_compute_io", "ratio_compute_comm", "advice", "runs", "best_repeat", "n_selected"}
    assert report["input"]["format"] == "DCD" and report["input"]["layout"] == "single shared file"
    assert report["n_selected"] == 214 and len(report["runs"]) == 2
    best = report["runs"][report["best_repeat"]]
    assert report["t_total"] == best["t_total"] == min(run["t_total"] for run in report["runs"])
    assert report["ranks"] == best["ranks"]
    record = report["ranks"][0]
    assert (record["start"], record["stop"], record["n_frames"]) == (0, 98, 98)
    phases = sum(record[k] for k in ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm"))
    assert phases <= record["t_total"] < phases + 0.5
    assert report["ratio_compute_io"] == pytest.approx(record["t_compute"] / record["t_io"])
    assert "convert" in report["advice"] or "compute-bound" in report["advice"]
    json.dumps(report)  # JSON-ready


def test_advice_names_the_next_step_for_the_input():
    assert "already H5MD" in advice(0.3, "H5MD") and "Heuristic 2.1" in advice(0.3, "H5MD")
    assert "already split" in advice(0.3, "split") and "h5mdtool convert" in advice(0.3, "split")
    shared = advice(0.3, "shared")
    assert "h5mdtool convert" in shared and "h5mdtool split" in shared
    assert all("Heuristic 1" in advice(12.0, kind) for kind in ("H5MD", "split", "shared", None))
    assert "I/O-bound" in advice(9.99) and "compute-bound" in advice(10.0)


def test_more_errors(tmp_path, adk, solvated):
    with pytest.raises(InputError, match="atoms but"):
        bench_rmsd(solvated["XTC"], adk[0], engine="frames")
    with pytest.raises(InputError, match="no such file"):
        bench_rmsd(str(tmp_path / "missing.h5md"), adk[0])
    (tmp_path / "bad.h5md").write_bytes(b"not HDF5 at all")
    with pytest.raises(InputError, match="not a readable H5MD"):
        bench_rmsd(str(tmp_path / "bad.h5md"), adk[0])
    outdir = tmp_path / "parts"
    split(adk[1], str(outdir), 3, progress=False)
    with open(outdir / "part-0003.dcd", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(InputError, match="bytes on disk"):
        bench_rmsd(str(outdir / "manifest.json"), adk[0], engine="frames")
    from h5mdtool.errors import UsageError

    with pytest.raises(UsageError, match="outside"):
        bench_rmsd(adk[1], adk[0], ref_frame=98)


def test_cli_checks_outputs_before_the_run(tmp_path, adk):
    out = tmp_path / "report.json"
    out.write_text("{}")
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--out", str(out)])
    assert result.exit_code == 1 and "exists; pass --force" in result.output
    assert out.read_text() == "{}"
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--out", str(out), "--force",
                                      "--rmsd-out", str(tmp_path / "rmsd.npy")])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["n_frames"] == 98
    assert np.load(tmp_path / "rmsd.npy").shape == (98, 3)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary left
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--plot", str(tmp_path / "ranks.txt")])
    assert result.exit_code == 2 and ".png" in result.output
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--out", str(tmp_path / "a.npy"),
                                      "--rmsd-out", str(tmp_path / "a.npy")])
    assert result.exit_code == 2 and "different files" in result.output


def test_report_refuses_unlike_runs_and_pools_repeats():
    from h5mdtool.bench import combine_reports
    from h5mdtool.errors import UsageError

    blocks, frames = synthetic_report(1, [8.0]), synthetic_report(2, [4.0, 4.0])
    blocks["engine"], frames["engine"] = "blocks", "frames"
    with pytest.raises(UsageError, match="engine"):
        combine_reports([blocks, frames])
    rows = combine_reports([synthetic_report(1, [8.0]), synthetic_report(1, [6.0]), synthetic_report(2, [4.0, 4.0])])
    assert [row["n_ranks"] for row in rows] == [1, 2]
    assert rows[0]["t_total"] == 6.0 and rows[1]["speedup"] == pytest.approx(1.5)


@pytest.mark.parametrize("case", ["selection", "missing part"])
def test_errors_under_mpirun_stop_every_rank_with_one_message(tmp_path, adk, case):
    from conftest import run_h5mdtool

    path, select = adk[1], "name CA"
    if case == "selection":
        select = "resname NOPE"
    else:
        split(adk[1], str(tmp_path / "parts"), 4, progress=False)
        os.remove(tmp_path / "parts" / "part-0004.dcd")
        path = str(tmp_path / "parts" / "manifest.json")
    done = run_h5mdtool(["bench", "rmsd", path, "-t", adk[0], "--select", select], ranks=2)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1
    assert len(errors) == 1, done.stderr
    assert ("matches no atom" if case == "selection" else "part-0004.dcd") in errors[0]
    assert "rank" not in errors[0] and "Traceback" not in done.stderr


def test_bench_report_api_reads_files_and_dicts(tmp_path):
    from h5mdtool import bench_report
    from h5mdtool.errors import InputError

    path = tmp_path / "one.json"
    path.write_text(json.dumps(synthetic_report(1, [8.0])))
    rows = bench_report([str(path), synthetic_report(4, [2.0, 2.0, 2.0, 2.5])])
    assert [(row["n_ranks"], row["speedup"], row["efficiency"]) for row in rows] == [(1, 1.0, 1.0), (4, 3.2, 0.8)]
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="not a readable JSON report"):
        bench_report([str(tmp_path / "bad.json")])

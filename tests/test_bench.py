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
from h5mdtool.mpi import SerialComm
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

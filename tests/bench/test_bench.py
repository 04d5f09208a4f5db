"""bench rmsd: results equal MDAnalysis's rms.RMSD on every input kind and rank count; the
per-rank accounting adds up; stragglers are found on work; partitions follow the layout."""

import json
import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import ROOT
from benchcheck import check_report, every_report_adds_up, mdanalysis_rmsd  # noqa: F401 - autouse fixture
from h5mdtool import bench_rmsd, convert, split
from h5mdtool.bench.runner import advice
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import H5mdToolError, InputError, UsageError


@pytest.fixture(scope="module")
def adk_reference(adk):
    return mdanalysis_rmsd(*adk)


def check_result(comm, result, reference, tolerance=1e-4):
    if comm.rank != 0:
        assert result is None
        return
    np.testing.assert_array_equal(result["rmsd"][:, 0], reference[:, 0])
    np.testing.assert_allclose(result["rmsd"][:, 1], reference[:, 1], rtol=1e-6)
    assert np.abs(result["rmsd"][:, 2:] - reference[:, 2:]).max() < tolerance
    report = result["report"]
    assert report["n_ranks"] == comm.size
    check_report(report)
    for run in report["runs"]:
        assert sum(r["n_frames"] for r in run["ranks"]) == report["n_analysed"] == len(reference)


def write_xtc_copy(path, adk):
    from MDAnalysis.coordinates.XTC import XTCWriter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(*adk)
        with XTCWriter(path, n_atoms=u.atoms.n_atoms) as writer:
            for _ in u.trajectory:
                writer.write(u.atoms)


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
@pytest.mark.parametrize("kind", ["DCD", "H5MD", "H5MD-gzip", "XTC", "manifest-XTC", "manifest-H5MD"])
def test_rmsd_equals_mdanalysis_adk(comm, shared_tmp, adk, adk_reference, kind, engine):
    path = adk[1]
    if kind.startswith("H5MD"):
        path = os.path.join(shared_tmp, "adk.h5md")
        convert(adk[1], path, comm=comm, progress=False, compression="gzip" if kind.endswith("gzip") else "none")
    elif kind == "XTC":
        path = os.path.join(shared_tmp, "adk.xtc")
        if comm.rank == 0:
            write_xtc_copy(path, adk)
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


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_segments_are_one_input(comm, adk_segments, adk, engine):
    """Several XTC segments are one trajectory, as convert reads them."""
    reference = mdanalysis_rmsd(adk[0], adk_segments["whole"])
    result = bench_rmsd(adk_segments["parts"], adk[0], comm=comm, block_frames=16, engine=engine)
    check_result(comm, result, reference)
    if comm.rank == 0:
        assert result["report"]["input"]["layout"] == "3 segments"
        opened = {os.path.basename(p) for r in result["report"]["ranks"] for p in r["opened"]}
        assert opened == {"part0.xtc", "part1.xtc", "part2.xtc"}


def test_manifest_directory_is_accepted(tmp_path, adk, adk_reference):
    split(adk[1], str(tmp_path / "parts"), 3, progress=False)
    result = bench_rmsd(str(tmp_path / "parts"), adk[0])
    assert np.abs(result["rmsd"][:, 2] - adk_reference[:, 2]).max() < 1e-4
    assert result["report"]["input"]["layout"] == "split"
    with pytest.raises(UsageError, match="give it alone"):
        bench_rmsd([str(tmp_path / "parts"), adk[1]], adk[0])
    with pytest.raises(InputError, match="without manifest.json"):
        bench_rmsd(str(tmp_path), adk[0])


# --- accounting: every second in one phase ---------------------------------------------------

@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_h5md_bytes_read_counts_stored_chunks_of_every_filter(tmp_path, adk, compression):
    """A filtered dataset is read in whole stored chunks; h5py names only gzip/lzf/szip as
    'compression', so the hdf5plugin codecs (zstd here) were counted as raw atom spans."""
    import h5py

    path = str(tmp_path / "adk.h5md")
    convert(adk[1], path, progress=False, compression=compression)
    with h5py.File(path, "r") as handle:
        stored = handle["particles/trajectory/position/value"].id.get_storage_size()
    report = bench_rmsd(path, adk[0])["report"]
    record, size = report["ranks"][0], os.path.getsize(path)
    reference = round(size / 98)  # rank 0's reference frame, read whole
    if compression is None:
        calpha = [int(i) for i in mda.Universe(*adk).select_atoms("name CA").indices]
        span = calpha[-1] + 1 - calpha[0]
        assert record["bytes_read"] == 98 * span * 3 * 4 + reference
        assert report["input"]["filters"] == []
    else:
        assert abs(record["bytes_read"] - (stored + reference)) <= 1
        assert compression in "".join(report["input"]["filters"]).lower()


def test_phases_add_up_and_reference_broadcast_is_timed(adk, every_report_adds_up):
    result = bench_rmsd(adk[1], adk[0], repeat=2, block_frames=30)
    report = result["report"]
    assert every_report_adds_up == [1, 1]  # the autouse check saw both runs
    record = report["ranks"][0]
    assert (record["first_frame"], record["last_frame"], record["n_frames"]) == (0, 97, 98)
    assert record["t_total"] == pytest.approx(sum(record[k] for k in ("t_init_top", "t_init_traj", "t_io",
                                                                       "t_compute", "t_wait", "t_comm")), abs=1e-9)
    assert record["bytes_read"] > 98 * 3341 * 12 and record["files_opened"] == 1
    assert record["mb_per_s"] == pytest.approx(record["bytes_read"] / 1e6 / record["t_io"])
    provenance = report["provenance"]
    assert set(provenance["versions"]) >= {"h5mdtool", "MDAnalysis", "h5py", "HDF5"}
    assert provenance["hosts"] and provenance["date"] and "command" in provenance
    assert report["input"]["files"][0]["size"] == os.path.getsize(adk[1])
    assert report["topology"]["size"] == os.path.getsize(adk[0])
    assert report["analysis"]["atoms"]["fit"]["n"] == 214 and len(report["analysis"]["atoms"]["fit"]["sha256"]) == 16
    assert report["block_frames"] == 30 and report["compute_load"] == 1
    json.dumps(report)  # JSON-ready


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_real_slow_rank_is_a_straggler_in_io(comm, adk, monkeypatch, engine):
    """One rank made slow with the test hook: judged on work, it is found, with its phase."""
    if comm.size == 1:
        pytest.skip("needs a second rank to slow down (runs under mpirun -n 2 and -n 3)")
    # 1 s per block of 10 frames: several seconds more than the others' work even when a loaded
    # machine makes start-up take 2 s (0.2 s per 3 frames left rank 1 at 1.97x the fastest)
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", "rmsd-block:1:1.0")
    result = bench_rmsd(adk[1], adk[0], comm=comm, block_frames=10, engine=engine)
    if comm.rank != 0:
        return
    blocks = -(-result["report"]["ranks"][1]["n_frames"] // 10)
    check_straggler_report(result["report"], comm.size, 1.0 * blocks)


def check_straggler_report(report, n_ranks, delayed):
    """Rank 1, slowed down by *delayed* seconds in all, is the one straggler, in its I/O."""
    stragglers = report["stragglers"]
    assert 1 in stragglers["over_2x_fastest"], stragglers
    if n_ranks >= 3:  # with two ranks the median is their mean: 1.5x of it needs a 3x slower rank
        assert 1 in stragglers["over_1.5x_median"], stragglers
    assert [entry["rank"] for entry in stragglers["ranks"]] == [1]
    entry = stragglers["ranks"][0]
    assert entry["phase"] == "t_io" and entry["phase_excess"] > 0.9 * delayed
    assert entry["times_fastest"] > 2
    slow = report["ranks"][1]
    others = [r for r in report["ranks"] if r["rank"] != 1]
    # the fast ranks waited for the slow one: their wait is what it spent on its extra work;
    # the slow one waited only for rank 0's serial part (inspection and setup) and at start
    assert all(r["t_wait"] > 0.5 * delayed for r in others)
    assert slow["t_wait"] < 0.5 * delayed
    # everybody ends together: within 10% (on a loaded machine ranks leave the final collective
    # up to a few tenths of a second apart; a straggler's lead is 2x)
    totals = [r["t_total"] for r in report["ranks"]]
    assert max(totals) - min(totals) <= max(0.1, 0.1 * max(totals)), totals


@pytest.mark.serial_only
@pytest.mark.parametrize("ranks", [2, 3])
def test_real_slow_rank_under_mpirun_cli(tmp_path, adk, ranks):
    from conftest import run_h5mdtool

    out = tmp_path / "report.json"
    env = {**os.environ, "H5MDTOOL_TEST_DELAY": "rmsd-block:1:0.2"}
    # one frame a block: the delays (0.2 s each) outweigh the start-up of 3 ranks on 2 cores
    done = run_h5mdtool(["bench", "rmsd", adk[1], "-t", adk[0], "--block-frames", "1", "--out", str(out)],
                        ranks=ranks, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    check_report(report)
    check_straggler_report(report, ranks, 0.2 * report["ranks"][1]["n_frames"])
    line = next(line for line in done.stdout.splitlines() if line.startswith("stragglers:"))
    assert "rank 1 (" in line and " in io)" in line and "x the fastest" in line


# --- partitions ------------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_six_parts_each_opened_by_one_rank(comm, shared_tmp, adk, adk_reference, engine):
    outdir = os.path.join(shared_tmp, "parts")
    split(adk[1], outdir, 6, comm=comm, format="h5md" if engine == "blocks" else "same", progress=False)
    # without reading ahead, which hands the end of rank 0's part to others (test_bench_read_ahead)
    result = bench_rmsd(outdir, adk[0], comm=comm, engine=engine, block_frames=5, read_ahead_mb=0)
    check_result(comm, result, adk_reference)
    if comm.rank != 0:
        return
    report = result["report"]
    opened = [part for record in report["ranks"] for part in record["opened"]]
    if comm.size in (1, 2, 3, 6):  # the rank count divides the parts: whole parts per rank
        assert report["partition"]["scheme"] == "parts" and report["partition"]["shared_units"] == 0
        assert sorted(opened) == sorted(set(opened)) and len(opened) == 6
        for record in report["ranks"]:
            assert record["files_opened"] == 6 // comm.size
    else:
        assert report["partition"]["scheme"] == "frames"


def test_parts_shared_when_ranks_do_not_divide_them():
    from h5mdtool.parallel.partition import partition_frames

    edges = [0, 17, 34, 50, 66, 82, 98]
    assert partition_frames(np.arange(98), 4, part_edges=edges).shared_units == 2
    whole = partition_frames(np.arange(98), 3, part_edges=edges)
    assert whole.bounds == [(0, 34), (34, 66), (66, 98)] and whole.scheme == "parts"
    assert partition_frames(np.arange(0, 98, 5), 2, part_edges=edges).scheme == "parts"
    chunks = partition_frames(np.arange(98), 3, chunk_frames=4)
    assert all(a % 4 == 0 for a, b in chunks.bounds)


def test_block_frames_capped_at_the_rank_frames(tmp_path, adk):
    """--block-frames 1000000 on a 98-frame file allocates 98 frames, not 37 GiB."""
    import tracemalloc

    path = str(tmp_path / "adk.h5md")
    convert(adk[1], path, progress=False)
    tracemalloc.start()
    bench_rmsd(path, adk[0], block_frames=1_000_000, select="all")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200 * 1024**2


# --- errors and advice -----------------------------------------------------------------------

def test_advice_names_the_next_step_for_the_input():
    assert "already H5MD" in advice(0.3, "H5MD") and "Heuristic 2.1" in advice(0.3, "H5MD")
    assert "already split" in advice(0.3, "split") and "h5mdtool convert" in advice(0.3, "split")
    shared = advice(0.3, "shared")
    assert "h5mdtool convert" in shared and "h5mdtool split" in shared
    assert all("Heuristic 1" in advice(12.0, kind) for kind in ("H5MD", "split", "shared", None))
    assert "I/O-bound" in advice(9.99) and "compute-bound" in advice(10.0)
    assert advice(None) == "no I/O time measured"
    # cited briefly every run (in full in --help: tests/bench/test_bench_naming.py)
    assert all("(Khoshlessan et al. 2020, Heuristic" in advice(ratio) and "doi" not in advice(ratio)
               for ratio in (0.3, 12.0))


def test_errors(tmp_path, adk, solvated):
    with pytest.raises(InputError, match="matches no atom"):
        bench_rmsd(adk[1], adk[0], select="resname NOPE")
    with pytest.raises(InputError, match="atoms but"):
        bench_rmsd(solvated["XTC"], adk[0])
    with pytest.raises(InputError, match="atoms but"):
        bench_rmsd(solvated["XTC"], adk[0], engine="frames")
    with pytest.raises(InputError, match="no such file"):
        bench_rmsd(str(tmp_path / "missing.h5md"), adk[0])
    (tmp_path / "bad.h5md").write_bytes(b"not HDF5 at all")
    with pytest.raises(InputError, match="not a readable H5MD"):
        bench_rmsd(str(tmp_path / "bad.h5md"), adk[0])
    with pytest.raises(InputError, match="outside"):
        bench_rmsd(adk[1], adk[0], ref_frame=98)
    outdir = tmp_path / "parts"
    split(adk[1], str(outdir), 3, progress=False)
    with open(outdir / "part-0003.dcd", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(InputError, match="bytes on disk"):
        bench_rmsd(str(outdir / "manifest.json"), adk[0], engine="frames")
    os.remove(outdir / "part-0002.dcd")
    with pytest.raises(InputError, match="missing"):
        bench_rmsd(str(outdir / "manifest.json"), adk[0])


CRASH_DATA = os.path.join(ROOT, "tests", "differential", "data")


@pytest.mark.parametrize("case", ["selection", "missing part", "ref frame", "bench-ref-frame-out-of-range-crash"])
def test_errors_under_mpirun_stop_every_rank_with_one_message(tmp_path, adk, case):
    from conftest import run_h5mdtool

    path, select, extra = adk[1], "name CA", []
    expected = {"selection": "matches no atom", "missing part": "part-0004.dcd", "ref frame": "outside",
                "bench-ref-frame-out-of-range-crash": "declares 20 atoms but frame 0 has 19"}[case]
    if case == "selection":
        select = "resname NOPE"
    elif case == "ref frame":
        extra = ["--ref-frame", "-99", "--block-frames", "3"]
    elif case == "bench-ref-frame-out-of-range-crash":
        # the differential harness's XTC on which MDAnalysis corrupted memory (exit 134)
        path, topology = (os.path.join(CRASH_DATA, "bench-ref-frame-crash." + ext) for ext in ("xtc", "pdb"))
        select, extra = "index 0:4", ["-t", topology, "--ref-frame", "-35", "--block-frames", "3"]
    else:
        split(adk[1], str(tmp_path / "parts"), 4, progress=False)
        os.remove(tmp_path / "parts" / "part-0004.dcd")
        path = str(tmp_path / "parts" / "manifest.json")
    if "-t" not in extra:
        extra = ["-t", adk[0], *extra]
    done = run_h5mdtool(["bench", "rmsd", path, "--select", select, *extra], ranks=2)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr
    assert len(errors) == 1, done.stderr
    assert expected in errors[0]
    assert "rank" not in errors[0] and "Traceback" not in done.stderr


@pytest.mark.parametrize("args,code,text", [
    (["--help"], 0, "Examples:"),
    (["--no-such-option"], 2, "No such option"),
    (["--block-frames", "0"], 2, "--block-frames"),
])
def test_help_and_option_errors_printed_once_under_mpirun(adk, args, code, text):
    from conftest import run_h5mdtool

    done = run_h5mdtool(["bench", "rmsd", adk[1], "-t", adk[0], *args], ranks=3)
    assert done.returncode == code, done.stderr
    output = done.stdout + done.stderr
    assert output.count(text) == 1, output
    if code == 0:
        assert output.count("Usage:") == 1
    else:  # click's usage errors are one 'error:' line, as h5mdtool's own
        assert output.count("error:") == 1 and "Usage:" not in output, output


# --- command line ----------------------------------------------------------------------------

def test_cli_outputs(tmp_path, adk, adk_reference):
    report_path, rmsd_path = tmp_path / "report.json", tmp_path / "rmsd.csv"
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--out", str(report_path),
                                      "--rmsd-out", str(rmsd_path)])
    assert result.exit_code == 0, result.output
    assert "stragglers: none" in result.output and "advice" in result.output and "work" in result.output
    report = json.loads(report_path.read_text())
    check_report(report)
    assert report["runs"][0]["ranks"][0]["n_frames"] == 98
    table = np.loadtxt(rmsd_path, delimiter=",", skiprows=1)
    assert np.abs(table[:, 2] - adk_reference[:, 2]).max() < 1e-4
    bad = CliRunner().invoke(cli, ["bench", "rmsd", str(tmp_path / "none.xtc"), "-t", adk[0]])
    assert bad.exit_code == 1 and "no such file" in bad.output and "Traceback" not in bad.output
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["benchmark"] == "rmsd"


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
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--rmsd-out", str(tmp_path / "a.txt")])
    assert result.exit_code == 2 and ".xvg" in result.output


def test_plot_without_matplotlib(tmp_path, adk, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--plot", str(tmp_path / "r.png")])
    assert result.exit_code == 1
    assert "pip install matplotlib" in result.output and not (tmp_path / "r.png").exists()


@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_opening_parts_is_init_traj_not_io(tmp_path, adk, monkeypatch, engine):
    """A part's open (and, for the frames engine, its Universe's topology parse) is t_init_traj."""
    import time

    from h5mdtool.bench import frames

    split(adk[1], str(tmp_path / "parts"), 4, progress=False)
    slow = {"blocks": "_part_source", "frames": "MDAnalysisFrames._open"}[engine]
    owner, name = (frames, slow) if "." not in slow else (frames.MDAnalysisFrames, slow.split(".")[1])
    original = getattr(owner, name)

    def slow_open(*args, **kwargs):
        time.sleep(0.3)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow_open)
    record = bench_rmsd(str(tmp_path / "parts"), adk[0], engine=engine)["report"]["ranks"][0]
    assert record["files_opened"] == 4
    assert record["t_init_traj"] > 4 * 0.3 and record["t_io"] < 0.3



def test_frames_engine_names_mdanalysis_fixed_step_limit(tmp_path):
    """make fuzz case 602: an H5MD file storing a fixed step interval (valid H5MD, pyh5md's
    choice) is not read by MDAnalysis's H5MDReader; the frames engine, which reads through it,
    said "MDAnalysis cannot read it (...)" with an empty reason. It now names the cause and
    the engine that reads the file, whose RMSD equals MDAnalysis's on the same positions."""
    positions = np.random.default_rng(3).uniform(0, 2, (6, 4, 3)).astype(np.float32)
    path, topology = _small_h5md(tmp_path, positions, step=10, time=0.02)
    with pytest.raises(InputError, match="fixed step interval: --engine blocks reads it"):
        bench_rmsd(path, topology, engine="frames")
    result = bench_rmsd(path, topology, engine="blocks")
    from MDAnalysis.analysis.rms import rmsd

    expected = [rmsd(frame * 10, positions[0] * 10, center=True, superposition=True) for frame in positions]
    np.testing.assert_allclose(result["rmsd"][:, 2], expected, atol=1e-4)


def _small_h5md(tmp_path, positions, step, time=None):
    """An H5MD file of *positions* (nm) with the given ``step`` and ``time`` (datasets or
    fixed values; no time when None), and a PDB topology for it."""
    import h5py

    path = str(tmp_path / "small.h5md")
    with h5py.File(path, "w") as handle:
        handle.create_group("h5md").attrs["version"] = np.array([1, 1], np.int32)
        trajectory = handle.create_group("particles/trajectory")
        box = trajectory.create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = np.array([b"none"] * 3)
        position = trajectory.create_group("position")
        position.create_dataset("value", data=positions).attrs["unit"] = "nm"
        position["step"] = step
        if time is not None:
            position["time"] = time
            position["time"].attrs["unit"] = "ps"
    topology = tmp_path / "top.pdb"
    topology.write_text("".join(f"ATOM  {i + 1:5d}  CA  ALA A{i + 1:4d}       0.000   0.000   0.000  1.00  0.00           C\n"
                                for i in range(positions.shape[1])) + "END\n")
    return path, str(topology)


def _h5md_without_time(tmp_path, n_frames=5, n_atoms=4):
    """Steps but no time (valid H5MD; MDAnalysis's H5MDReader needs a time dataset)."""
    positions = np.random.default_rng(5).uniform(0, 2, (n_frames, n_atoms, 3)).astype(np.float32)
    return _small_h5md(tmp_path, positions, step=np.arange(n_frames, dtype=np.int64) * 10)


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("kind", ["file", "parts"])
def test_frames_engine_refusal_of_h5md_printed_once_under_mpirun(tmp_path, ranks, kind):
    """make fuzz case 2120 (seed 4054140950): under mpirun, every rank opens a single H5MD
    file with MDAnalysis together (``driver="mpio"``); when MDAnalysis could not read it
    (no ``time`` dataset) each rank printed its own ``error: rank N:`` line and the job
    ended in MPI_ABORT. The same happened with split parts, each rank opening its own. The
    ranks now agree on the failure: one line, exit 1."""
    from conftest import run_h5mdtool

    path, topology = _h5md_without_time(tmp_path, n_frames=12)
    if kind == "parts":
        split(path, str(tmp_path / "parts"), 3, format="h5md", progress=False)
        path = str(tmp_path / "parts" / "manifest.json")
    with pytest.raises(InputError, match="MDAnalysis cannot read it"):
        bench_rmsd(path, topology, engine="frames")
    done = run_h5mdtool(["bench", "rmsd", path, "-t", topology, "--engine", "frames"], ranks=ranks)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr
    assert len(errors) == 1 and "MDAnalysis cannot read it" in errors[0], done.stderr
    assert "error: rank" not in done.stderr and "MPI_ABORT" not in done.stderr and "Traceback" not in done.stderr


def _hdf5_handles_on(path):
    """The HDF5 file handles this process holds on *path* (asked of h5py directly, not of
    the h5mdtool helper under test)."""
    import re

    import h5py

    found = []
    for file_id in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
        name = os.fsdecode(file_id.name)
        # a file opened through a Python file object (h5py's fileobj driver, as the
        # MDAnalysis reader of an earlier test may have left for the collector) is named
        # by the object's repr: "<_io.FileIO name='PATH' mode='rb' closefd=True>"
        named = re.fullmatch(r"<_io\.FileIO name='(.*)' mode=.*>", name)
        name = named.group(1) if named else name
        if os.path.exists(name) and os.path.samefile(name, path):
            found.append(file_id)
    return found


@pytest.mark.mpi
def test_frames_engine_refusal_leaves_no_open_file_for_the_collector(comm, shared_tmp):
    """make fuzz case 350 (seed 1697176682): when MDAnalysis failed to open an H5MD file that
    every rank opens together (``driver="mpio"``), its reader kept the file open; the
    garbage collector later closed it on one rank and not on the others, and the next
    collective call hung. The ranks now close it together before raising."""
    import gc
    from pathlib import Path

    path, topology = None, None
    if comm.rank == 0:
        path, topology = _h5md_without_time(Path(shared_tmp))
    path, topology = comm.bcast((path, topology))
    with pytest.raises(InputError, match="MDAnalysis cannot read it"):
        bench_rmsd(path, topology, engine="frames", comm=comm)
    left_open = _hdf5_handles_on(path)
    if comm.rank == 0:
        gc.collect()  # what used to close the file on this rank alone
    comm.Barrier()
    assert left_open == []


@pytest.mark.mpi
def test_frames_engine_closes_the_shared_file_when_another_rank_failed(comm, shared_tmp, adk, monkeypatch):
    """The ranks whose MDAnalysis open of the shared H5MD file worked close it too when
    another rank failed (they get a RemoteRankError), in step with the failing ranks."""
    if comm.size < 2:
        pytest.skip("needs a rank that fails while the others open the file")
    from h5mdtool.bench.frames import MDAnalysisFrames

    path = os.path.join(shared_tmp, "adk.h5md")
    convert(adk[1], path, topology=adk[0], comm=comm, progress=False)
    opened = MDAnalysisFrames._open

    def open_then_fail_on_last_rank(self, number, parallel=False):
        universe = opened(self, number, parallel)
        if comm.rank == comm.size - 1:
            raise InputError("this rank's open failed after the file was opened")
        return universe

    monkeypatch.setattr(MDAnalysisFrames, "_open", open_then_fail_on_last_rank)
    with pytest.raises(H5mdToolError):
        bench_rmsd(path, adk[0], engine="frames", comm=comm)
    left_open = _hdf5_handles_on(path)
    comm.Barrier()
    assert left_open == []


def test_default_block_holds_8_mib_of_the_atoms_read(adk):
    """Without --block-frames, a block holds as many frames as 8 MiB of the atoms read (from
    the first fit atom to the last) hold; the RMSDs are those of any other block size."""
    import MDAnalysis as mda

    ca = mda.Universe(adk[0]).select_atoms("name CA").indices
    span = int(ca[-1]) - int(ca[0]) + 1
    chosen = bench_rmsd(adk[1], adk[0])
    assert chosen["report"]["block_frames"] == (8 << 20) // (span * 3 * 4)
    assert all(r["block_frames"] == chosen["report"]["block_frames"] for r in chosen["report"]["ranks"])
    np.testing.assert_array_equal(chosen["rmsd"], bench_rmsd(adk[1], adk[0], block_frames=7)["rmsd"])

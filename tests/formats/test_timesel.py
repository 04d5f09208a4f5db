"""GROMACS-style selections for convert and split (issue 14): -b/-e/--dt in ps, -n index groups.

Oracles: MDAnalysis reading the source, keeping the frames whose ``ts.time`` passes gmx
trjconv's rule as written from its definition in ``tests/differential/oracle.py``
(``select_times``, which does not call h5mdtool), and ``gmx trjconv -b -e -dt`` itself where
GROMACS is installed.
"""

import json
import os
import shutil
import subprocess
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_h5mdtool, write_xtc
from differential.oracle import Refusal, select_times
from h5mdtool import convert, split
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.formats.frametimes import select_by_time
from h5mdtool.subfiles.manifest import read_manifest
from h5mdtool.formats.ndx import write_index

GMX = shutil.which("gmx")


def source_frames(topology, trajectory):
    """Times, steps and positions (nm, float32 as decoded) of every frame, as MDAnalysis reads them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(topology, trajectory) if topology else mda.Universe(trajectory)
    universe.trajectory.convert_units = False
    times, steps, positions = [], [], []
    for ts in universe.trajectory:
        times.append(ts.time)
        steps.append(ts.data.get("step", ts.frame))
        positions.append(ts.positions.copy())
    return np.array(times), np.array(steps), np.array(positions)


def written(path):
    """Positions, steps and times of an H5MD file h5mdtool wrote."""
    with h5py.File(path, "r") as handle:
        position = handle["particles/trajectory/position"]
        return position["value"][()], position["step"][()], position["time"][()]


def oracle_frames(times, begin=None, end=None, dt=None):
    try:
        return select_times(times, begin, end, dt)
    except Refusal:
        return None


# -- the rule itself, against the oracle written from GROMACS's definition ---------------------

times_lists = st.one_of(
    # regular frames from any origin, as MD engines write them (float32 in XTC)
    st.builds(lambda origin, interval, n: (origin + interval * np.arange(n)).astype(np.float32).astype(float),
              st.sampled_from((0.0, 2.5, 5.0, 100.0, 1000.0)), st.sampled_from((0.001, 0.002, 0.1, 1.0, 2.0, 10.0)),
              st.integers(1, 60)),
    st.lists(st.floats(0, 1000, allow_nan=False, width=32), min_size=1, max_size=40).map(sorted).map(np.array),
)


@settings(max_examples=300, deadline=None)
@given(times=times_lists, data=st.data())
def test_select_by_time_is_gmx_trjconv_rule(times, data):
    """dt_origin='first' keeps exactly the frames gmx trjconv's rule keeps, or refuses when none."""
    def a_time():
        return data.draw(st.one_of(st.sampled_from(list(times)), st.floats(-10, 1100, allow_nan=False)))

    begin = data.draw(st.one_of(st.none(), st.builds(a_time)))
    end = data.draw(st.one_of(st.none(), st.builds(a_time)))
    interval = float(np.median(np.diff(times))) if len(times) > 1 and np.diff(times).max() > 0 else 1.0
    dt = data.draw(st.one_of(st.none(), st.sampled_from([interval * k for k in (1, 2, 3, 0.5, 2.5, 7)])
                             .filter(lambda v: v > 0)))
    expected = oracle_frames(times, begin, end, dt)
    if expected is None:
        with pytest.raises((UsageError, InputError)):
            select_by_time(times, begin, end, dt, dt_origin="first")
    else:
        np.testing.assert_array_equal(select_by_time(times, begin, end, dt, dt_origin="first"), expected)


def test_bench_rule_unchanged():
    """bench rmsd keeps whole multiples of dt (origin 0 ps): frames 5, 15, ... ps have none of 20."""
    times = np.arange(5.0, 106.0, 10.0)
    with pytest.raises(InputError, match="selects none"):
        select_by_time(times, dt=20)
    np.testing.assert_array_equal(select_by_time(times, dt=20, dt_origin="first"), np.arange(0, 11, 2))


# -- convert against MDAnalysis ------------------------------------------------------------------

@pytest.mark.parametrize("kind,begin,end,dt", [
    ("XTC", 150, 750, 200), ("TRR", 150, 750, 200), ("XTC", None, None, 300), ("TRR", 99, 101, None),
    ("XTC", 250, None, 200), ("DCD", 10, 50, 3), ("DCD", None, 9.999999, None),
])
def test_convert_time_selection_equals_mdanalysis(tmp_path, solvated, adk, kind, begin, end, dt):
    topology, trajectory = (adk[0], adk[1]) if kind == "DCD" else (solvated["topology"], solvated[kind])
    times, steps, positions = source_frames(topology, trajectory)
    frames = select_times(times, begin, end, dt)
    out = str(tmp_path / "out.h5md")
    summary = convert(trajectory, out, begin=begin, end=end, dt=dt, progress=False)
    value, step, time = written(out)
    assert summary["n_frames"] == len(frames) == len(value)
    assert summary["frames"]["first_time"] == pytest.approx(times[frames[0]], rel=1e-6)
    np.testing.assert_allclose(time, times[frames], rtol=1e-6)  # the source's times, not renumbered
    if kind == "DCD":
        np.testing.assert_allclose(value, positions[frames] / 10, rtol=1e-6)
    else:
        np.testing.assert_array_equal(value, positions[frames])
        np.testing.assert_array_equal(step, steps[frames])


def test_convert_time_selection_of_joined_segments(tmp_path, adk_segments, adk_frames):
    """Three XTC segments (times 0-78, 80-138, 140-194 ps): times of the joined trajectory."""
    out = str(tmp_path / "out.h5md")
    convert(adk_segments["parts"], out, begin=70, end=150, dt=6, progress=False)
    value, step, time = written(out)
    times = np.arange(98) * 2.0
    frames = select_times(times, 70, 150, 6)
    assert frames[0] == 35 and frames[-1] == 74  # 70 ps, then every 6 ps across both joins
    np.testing.assert_array_equal(time, times[frames])
    np.testing.assert_array_equal(step, frames * 10)
    np.testing.assert_allclose(value, adk_frames[frames], atol=0.0006)  # XTC's 0.001 nm grid


def test_convert_time_selection_after_overlap_drop(tmp_path, adk_frames):
    """A restart repeating frames 30-39: times are those of the trajectory after --on-overlap drop."""
    first, second = str(tmp_path / "a.xtc"), str(tmp_path / "b.xtc")
    write_xtc(first, adk_frames[:40], np.arange(40) * 10, np.arange(40) * 2.0)
    write_xtc(second, adk_frames[30:60], np.arange(30, 60) * 10, np.arange(30, 60) * 2.0)
    out = str(tmp_path / "out.h5md")
    convert([first, second], out, begin=50, dt=10, on_overlap="drop", progress=False)
    _, step, time = written(out)
    np.testing.assert_array_equal(time, np.arange(50, 119, 10.0))
    np.testing.assert_array_equal(step, np.arange(25, 60, 5) * 10)


def test_convert_refuses_number_and_time(tmp_path, solvated):
    with pytest.raises(UsageError, match="by number .* or by time .* not both"):
        convert(solvated["XTC"], str(tmp_path / "o.h5md"), start=1, begin=100, progress=False)
    assert os.listdir(tmp_path) == []


def test_time_selection_refused_without_recorded_time(tmp_path):
    from MDAnalysisTests.datafiles import GSD

    with pytest.raises(InputError, match="records no time"):
        convert(GSD, str(tmp_path / "o.h5md"), begin=1, progress=False)
    assert os.listdir(tmp_path) == []


def test_empty_time_selection_is_one_line_error(tmp_path, solvated):
    out = tmp_path / "o.h5md"
    done = run_h5mdtool(["convert", solvated["XTC"], "-o", str(out), "-b", "950"])
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["error: -b 950 selects none of the 10 frames (times 0-900 ps)"]
    assert os.listdir(tmp_path) == []
    done = run_h5mdtool(["convert", solvated["XTC"], "-o", str(out), "-b", "500", "-e", "100"])
    assert done.returncode == 2
    assert done.stderr.strip() == "error: -e 100.0 ps is before -b 500.0 ps (as float32, as the times are compared)"


def test_convert_cli_summary_names_the_frames(tmp_path, solvated):
    result = CliRunner().invoke(cli, ["convert", solvated["TRR"], "-o", str(tmp_path / "o.h5md"), "-b", "150",
                                      "-e", "750", "--dt", "200", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "frames: 3 of 10 frame(s), 200-600 ps (-b 150 -e 750 --dt 200)" in result.output


# -- index groups --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def index_file(tmp_path_factory, solvated):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(solvated["topology"])
    path = str(tmp_path_factory.mktemp("ndx") / "index.ndx")
    write_index(path, {"System": universe.atoms.indices, "Protein": universe.select_atoms("protein").indices,
                       "C-alpha": universe.select_atoms("name CA").indices, "Shuffled": [5, 3, 4]})
    return path, universe


@pytest.mark.parametrize("key", ["Protein", "1", "protein"])
def test_convert_index_group_by_name_and_number(tmp_path, solvated, index_file, key):
    path, universe = index_file
    out = str(tmp_path / "o.h5md")
    summary = convert(solvated["XTC"], out, index_file=path, select=key, progress=False)
    protein = universe.select_atoms("protein").indices
    assert summary["n_atoms"] == len(protein) == 3341
    _, _, positions = source_frames(solvated["topology"], solvated["XTC"])
    np.testing.assert_array_equal(written(out)[0], positions[:, protein])


def test_index_group_errors(tmp_path, solvated, index_file):
    path, _ = index_file
    out = str(tmp_path / "o.h5md")
    with pytest.raises(InputError, match=r"has groups 0-3; there is no group 9"):
        convert(solvated["XTC"], out, index_file=path, select="9", progress=False)
    with pytest.raises(InputError, match=r"'Water' is not a group of .*\(0 System, 1 Protein, 2 C-alpha, 3 Shuffled\)"):
        convert(solvated["XTC"], out, index_file=path, select="Water", progress=False)
    with pytest.raises(InputError, match="out of order"):
        convert(solvated["XTC"], out, index_file=path, select="Shuffled", progress=False)
    with pytest.raises(UsageError, match="needs --select GROUP"):
        convert(solvated["XTC"], out, index_file=path, progress=False)
    with pytest.raises(InputError, match="no such index file"):
        convert(solvated["XTC"], out, index_file=str(tmp_path / "none.ndx"), select="1", progress=False)
    assert os.listdir(tmp_path) == []


def test_index_name_falls_back_to_a_selection_with_topology(tmp_path, solvated, index_file):
    path, universe = index_file
    summary = convert(solvated["XTC"], str(tmp_path / "o.h5md"), index_file=path, select="resname SOL and name OW",
                      topology=solvated["topology"], progress=False)
    assert summary["n_atoms"] == len(universe.select_atoms("resname SOL and name OW"))


def test_split_n_integer_hints_nparts(tmp_path, solvated):
    """Regression of the old short option: 'split -n 4' now names the index file."""
    done = run_h5mdtool(["split", solvated["XTC"], "-n", "4", "-o", str(tmp_path / "p")])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: Invalid value for '--index' / '-n': no index file '4': -n is the GROMACS index file (as in gmx); "
        "did you mean --nparts 4? (see 'h5mdtool split --help')"]
    assert os.listdir(tmp_path) == []


def test_help_documents_the_options():
    for command in ("convert", "split"):
        text = CliRunner().invoke(cli, [command, "--help"], terminal_width=200).output
        for phrase in ("-b PS", "-e PS", "--dt PS", "-n, --index NDX", "in ps", "Default"):
            assert phrase in text, (command, phrase)
        examples = text.split("Examples:")[1]
        assert " -b " in examples and "--dt" in examples and " -n index.ndx" in examples


# -- split ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["same", "h5md"])
@pytest.mark.parametrize("kind", ["XTC", "TRR", "DCD"])
def test_split_time_selection_equals_mdanalysis(tmp_path, solvated, adk, kind, fmt):
    topology, trajectory = (adk[0], adk[1]) if kind == "DCD" else (solvated["topology"], solvated[kind])
    begin, end, dt = (10, 70, 3) if kind == "DCD" else (100, 900, 200)
    times, steps, positions = source_frames(topology, trajectory)
    frames = select_times(times, begin, end, dt)
    outdir = str(tmp_path / "parts")
    summary = split(trajectory, outdir, 3, format=fmt, begin=begin, end=end, dt=dt, progress=False)
    assert summary["n_frames"] == len(frames)
    manifest = read_manifest(outdir)
    got_times, got_positions = [], []
    for part in manifest.parts:
        part_times, _, part_positions = source_frames(topology, part.path)
        assert len(part_times) == part.n_frames
        got_times.append(part_times)
        got_positions.append(part_positions * (10 if kind == "DCD" and fmt == "h5md" else 1))
    np.testing.assert_allclose(np.concatenate(got_times), times[frames], rtol=1e-6)
    np.testing.assert_allclose(np.concatenate(got_positions), positions[frames], rtol=1e-6, atol=0)
    with open(os.path.join(outdir, "manifest.json")) as handle:
        document = json.load(handle)
    assert document["frames"]["n_frames"] == len(frames) and document["n_frames"] == len(frames)
    assert document["parts"][0]["first_time"] == pytest.approx(times[frames[0]], rel=1e-6)
    from h5mdtool import validate

    assert validate([outdir], progress=False).exit_code == 0


def test_split_h5md_parts_with_an_index_group(tmp_path, solvated, index_file):
    path, universe = index_file
    outdir = str(tmp_path / "parts")
    split(solvated["XTC"], outdir, 2, format="h5md", index_file=path, select="C-alpha", begin=300, progress=False)
    calpha = universe.select_atoms("name CA").indices
    _, _, positions = source_frames(solvated["topology"], solvated["XTC"])
    values = np.concatenate([written(part.path)[0] for part in read_manifest(outdir).parts])
    np.testing.assert_array_equal(values, positions[3:, calpha])


def test_split_refuses_atoms_with_format_same(tmp_path, solvated, index_file):
    with pytest.raises(UsageError, match="--select, -n/--index shape H5MD parts only"):
        split(solvated["XTC"], str(tmp_path / "p"), 2, index_file=index_file[0], select="1", progress=False)


def test_split_more_parts_than_selected_frames(tmp_path, solvated):
    with pytest.raises(InputError, match="--nparts 4 is more than the 3 selected of the 10 frames"):
        split(solvated["XTC"], str(tmp_path / "p"), 4, begin=700, progress=False)
    assert os.listdir(tmp_path) == []


# -- gmx trjconv itself ----------------------------------------------------------------------------

def gmx_trjconv(source, output, *options):
    done = subprocess.run(["gmx", "trjconv", "-f", source, "-o", output, "-quiet", *map(str, options)],
                          input="0\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]
    return _xdr_frames(output)


def _xdr_frames(path):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    opener = XTCFile if path.endswith(".xtc") else TRRFile
    times, steps, positions = [], [], []
    with opener(path) as handle:
        for frame in handle:
            times.append(frame.time)
            steps.append(frame.step)
            positions.append(frame.x.copy())
    return np.array(times), np.array(steps), np.array(positions)


GMX_CASES = [(None, None, 200), (150, 750, 200), (250, None, 300), (None, 450, None), (99, 101, None),
             (50, 850, 100)]


@pytest.mark.skipif(GMX is None, reason="GROMACS (gmx) is not installed: apt-get install gromacs")
@pytest.mark.parametrize("kind", ["XTC", "TRR"])
@pytest.mark.parametrize("begin,end,dt", GMX_CASES)
def test_convert_and_split_equal_gmx_trjconv(tmp_path, solvated, kind, begin, end, dt):
    options = [value for flag, v in (("-b", begin), ("-e", end), ("-dt", dt)) if v is not None for value in (flag, v)]
    gmx_times, gmx_steps, gmx_positions = gmx_trjconv(solvated[kind], str(tmp_path / f"gmx.{kind.lower()}"), *options)
    out = str(tmp_path / "o.h5md")
    convert(solvated[kind], out, begin=begin, end=end, dt=dt, progress=False)
    value, step, time = written(out)
    np.testing.assert_array_equal(time.astype(np.float32), gmx_times)
    np.testing.assert_array_equal(step, gmx_steps)
    if kind == "TRR":
        np.testing.assert_array_equal(value, gmx_positions)
    else:  # gmx re-encodes the XTC: same grid, so within half a grid step
        assert np.abs(value - gmx_positions).max() <= 0.0005 + 1e-6
    split(solvated[kind], str(tmp_path / "parts"), min(2, len(step)), begin=begin, end=end, dt=dt, progress=False)
    parts = [_xdr_frames(part.path) for part in read_manifest(str(tmp_path / "parts")).parts]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), gmx_times)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), gmx_steps)


@pytest.mark.skipif(GMX is None, reason="GROMACS (gmx) is not installed: apt-get install gromacs")
@pytest.mark.parametrize("begin,dt", [(None, 20), (12, 20), (None, 0.3), (0.25, 0.2), (0.25, 0.7)])
def test_dt_counts_from_the_first_frame_as_gmx_trjconv(tmp_path, begin, dt):
    """Frames at 5, 15, ... ps (and 0.0, 0.1, ... ps): gmx's -dt grid starts at the first frame kept."""
    rng = np.random.default_rng(0)
    times = np.arange(5, 106, 10.0) if dt == 20 else np.arange(0, 3, 0.1)
    source = str(tmp_path / "in.xtc")
    write_xtc(source, rng.random((len(times), 3, 3)) * 5, np.arange(len(times)) * 10, times)
    options = (["-b", begin] if begin is not None else []) + ["-dt", dt]
    gmx_times = gmx_trjconv(source, str(tmp_path / "gmx.xtc"), *options)[0]
    out = str(tmp_path / "o.h5md")
    convert(source, out, begin=begin, dt=dt, progress=False)
    np.testing.assert_array_equal(written(out)[2].astype(np.float32), gmx_times)


@pytest.mark.parametrize("begin,end", [(1000000, 999999.99), (1000000, 999999.9), (999999.99, 1000000)])
def test_begin_and_end_compared_as_float32(tmp_path, begin, end):
    """Regression: -b 1000000 -e 999999.99 was refused as "-e before -b", though the two are
    equal as float32, as GROMACS compares times (gmx trjconv keeps the frame at 1e6 ps)."""
    times = np.array([999999.0, 999999.9375, 1000000.0, 1000000.0625, 1000001.0])
    source = str(tmp_path / "late.xtc")
    write_xtc(source, np.random.default_rng(1).random((len(times), 3, 3)) * 5, np.arange(len(times)) * 10, times)
    expected = oracle_frames(source_frames(None, source)[0], begin, end)
    out = str(tmp_path / "o.h5md")
    if expected is None:
        with pytest.raises(UsageError, match="before -b"):
            convert(source, out, begin=begin, end=end, progress=False)
        return
    assert np.float32(begin) == np.float32(end) and len(expected) == 1  # the cases: one frame, at 1e6 ps
    convert(source, out, begin=begin, end=end, progress=False)
    np.testing.assert_array_equal(written(out)[2], times[expected])
    if GMX is not None:
        gmx_times = gmx_trjconv(source, str(tmp_path / "gmx.xtc"), "-b", begin, "-e", end)[0]
        np.testing.assert_array_equal(gmx_times, times[expected])


# -- MPI ------------------------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("begin,end,dt", [(0, 0, None), (150, 750, 200), (None, None, 300), (100, 900, None)])
def test_convert_time_selection_in_parallel(comm, shared_tmp, solvated, begin, end, dt):
    """One frame (ranks without frames), three, four: equal to MDAnalysis on every rank count."""
    out = os.path.join(shared_tmp, "o.h5md")
    summary = convert(solvated["TRR"], out, comm=comm, begin=begin, end=end, dt=dt, compression="gzip",
                      chunk_frames=1, progress=False)
    comm.Barrier()
    times, steps, positions = source_frames(solvated["topology"], solvated["TRR"])
    frames = select_times(times, begin, end, dt)
    value, step, time = written(out)
    assert summary["n_frames"] == len(frames) == len(value)
    np.testing.assert_array_equal(value, positions[frames])
    np.testing.assert_array_equal(step, steps[frames])
    np.testing.assert_allclose(time, times[frames])


@pytest.mark.mpi
def test_convert_segments_and_index_group_in_parallel(comm, shared_tmp, adk_segments, adk_frames):
    path = os.path.join(shared_tmp, "index.ndx")
    if comm.rank == 0:
        write_index(path, {"first": np.arange(100), "odd": np.arange(1, 3341, 2)})
    comm.Barrier()
    out = os.path.join(shared_tmp, "o.h5md")
    convert(adk_segments["parts"], out, comm=comm, index_file=path, select="1", begin=60, end=160, dt=4,
            compression="gzip", progress=False)
    comm.Barrier()
    frames = select_times(np.arange(98) * 2.0, 60, 160, 4)
    value, step, time = written(out)
    np.testing.assert_array_equal(step, frames * 10)
    np.testing.assert_allclose(value, adk_frames[frames][:, 1::2], atol=0.0006)


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["same", "h5md"])
@pytest.mark.parametrize("nparts", [1, 2, 5])
def test_split_time_selection_in_parallel(comm, shared_tmp, adk_segments, adk_frames, fmt, nparts):
    """Uneven parts of frames picked across three segments; a rank may write no part."""
    outdir = os.path.join(shared_tmp, "parts")
    split(adk_segments["parts"], outdir, nparts, comm=comm, format=fmt, begin=31, end=171, dt=6, progress=False)
    comm.Barrier()
    frames = select_times(np.arange(98) * 2.0, 31, 171, 6)
    manifest = read_manifest(outdir)
    sizes = [part.n_frames for part in manifest.parts]
    assert sum(sizes) == len(frames) and max(sizes) - min(sizes) <= 1
    if fmt == "same":
        steps = np.concatenate([_xdr_frames(part.path)[1] for part in manifest.parts])
        values = np.concatenate([_xdr_frames(part.path)[2] for part in manifest.parts])
    else:
        steps = np.concatenate([written(part.path)[1] for part in manifest.parts])
        values = np.concatenate([written(part.path)[0] for part in manifest.parts])
    np.testing.assert_array_equal(steps, frames * 10)
    np.testing.assert_allclose(values, adk_frames[frames], atol=0.0006)


@pytest.mark.mpi
def test_empty_selection_refused_on_every_rank(comm, shared_tmp, solvated):
    with pytest.raises(InputError, match="selects none"):
        convert(solvated["XTC"], os.path.join(shared_tmp, "o.h5md"), comm=comm, begin=110, end=150, progress=False)
    with pytest.raises(InputError, match="selects none"):
        split(solvated["XTC"], os.path.join(shared_tmp, "p"), 2, comm=comm, dt=100, begin=901, progress=False)
    comm.Barrier()
    assert os.listdir(shared_tmp) == []

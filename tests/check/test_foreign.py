"""info and validate on files other programs write (issue 16, parts 5-7): pyh5md, MDAnalysis's
H5MDWriter, hand-written files with fixed step/time and every box form, several particle
groups, filters that are not available; info's printing, pipes and its fix command."""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import foreign
from conftest import ROOT
from h5mdtool import info
from h5mdtool.cli.main import cli
from h5mdtool.check.validate import validate_file

TRAJ = "particles/trajectory"
#: MDAnalysisTests' cu.h5md (ZnH5MD, particle group 'atoms'), beside H5MD_xvf.
CU_H5MD = os.path.join(os.path.dirname(__import__("MDAnalysisTests.datafiles", fromlist=["H5MD_xvf"]).H5MD_xvf), "cu.h5md")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, adk):
    pytest.importorskip("pyh5md")
    directory = str(tmp_path_factory.mktemp("foreign"))
    files = {
        "pyh5md explicit": foreign.pyh5md_explicit(directory),
        "pyh5md linear": foreign.pyh5md_linear(directory),
        "MDAnalysis H5MDWriter": foreign.mdanalysis_writer(directory, *adk),
    }
    for box in ("vector", "matrix", "partial", "series"):
        files[f"fixed step/time, {box} box"] = foreign.plain_fixed_series(directory, box)
    return files


CASES = ["pyh5md explicit", "pyh5md linear", "MDAnalysis H5MDWriter"] + [
    f"fixed step/time, {box} box" for box in ("vector", "matrix", "partial", "series")]


@pytest.mark.parametrize("case", CASES)
def test_info_of_foreign_files(corpus, case):
    path, expected = corpus[case]
    document = info(path)
    for key in ("particle_group", "n_frames", "n_atoms", "elements"):
        assert document[key] == expected[key], key
    assert [group["path"] for group in document["particle_groups"]] == expected["groups"]
    for series in ("step", "time"):
        for key, value in expected[series].items():
            got = document[series][key]
            assert got == pytest.approx(value, rel=1e-6) if isinstance(value, float) else got == value, (series, key, got)
    assert isinstance(document["step"]["first"], int) and isinstance(document["step"]["last"], int)
    if "box" in expected:
        for key, value in expected["box"].items():
            assert np.allclose(document["box"][key], value) if key == "first_edges" else document["box"][key] == value, key
    result = CliRunner().invoke(cli, ["info", path])
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert f"step {expected['step']['first']} to {expected['step']['last']}" in result.output
    assert "irregular" not in result.output


def test_several_particle_groups_are_all_shown(corpus):
    path, _ = corpus["pyh5md explicit"]
    text = CliRunner().invoke(cli, ["info", path]).output
    assert "particle group /particles/atoms:" in text and "particle group /particles/solvent:" in text
    assert f"{foreign.N_FRAMES} frames x 5 atoms in /particles/solvent (position)" in text


def test_float32_time_is_regular_and_printed_as_float32(corpus):
    """Regression: MDAnalysis's float32 times were called irregular, steps printed with 6 digits."""
    path, expected = corpus["MDAnalysis H5MDWriter"]
    document = info(path)
    assert document["time"]["dtype"] == "float32" and document["time"]["regular"] is True
    text = CliRunner().invoke(cli, ["info", path]).output
    line = next(line for line in text.splitlines() if line.strip().startswith("time "))
    first, last, interval = (str(np.float32(v)) for v in (expected["time"]["first"], expected["time"]["last"], document["time"]["interval"]))
    assert line == f"  time {first} to {last} AKMA, interval {interval} (explicit, regular)"


def test_large_steps_are_printed_exactly(tmp_path, corpus):
    path = str(tmp_path / "steps.h5md")
    shutil.copy(corpus["pyh5md explicit"][0], path)
    with h5py.File(path, "r+") as f:
        f["particles/atoms/position/step"][...] = 123456789012 + 1000 * np.arange(foreign.N_FRAMES)
    text = CliRunner().invoke(cli, ["info", path]).output
    assert f"step 123456789012 to {123456789012 + 1000 * (foreign.N_FRAMES - 1)}, interval 1000 (explicit, regular)" in text


def test_fixed_time_of_float32_offset(tmp_path, corpus):
    path = str(tmp_path / "fixed32.h5md")
    shutil.copy(corpus["fixed step/time, vector box"][0], path)
    with h5py.File(path, "r+") as f:
        del f[f"{TRAJ}/position/time"]
        f[f"{TRAJ}/position/time"] = np.float32(0.002)
        f[f"{TRAJ}/position/time"].attrs["offset"] = np.float32(10.0)
    document = info(path)
    assert document["time"]["mode"] == "fixed" and document["time"]["first"] == 10.0
    assert document["time"]["interval"] == pytest.approx(0.002)


@pytest.mark.parametrize("filter_id", [foreign.UNKNOWN_FILTER, 32001])
def test_filter_not_available(tmp_path, filter_id):
    """A plugin filter that is not installed: 'not shown because ...', never a raw exception."""
    if h5py.h5z.filter_avail(filter_id):
        pytest.skip(f"filter {filter_id} is available here")
    path = foreign.unknown_filter(str(tmp_path), filter_id)
    label = "blosc (filter 32001)" if filter_id == 32001 else f"filter {filter_id}"
    note = f"not shown because {label} is not available (pip install hdf5plugin; import hdf5plugin)"
    document = info(path)
    assert document["step"]["note"] == note and document["step"]["mode"] == "explicit"
    assert document["box"]["note"] == f"edges {note}"
    assert document["datasets"][f"/{TRAJ}/position/value"]["note"] == note
    text = CliRunner().invoke(cli, ["info", path]).output
    assert f"step (explicit): {note}" in text and "Traceback" not in text and "OSError" not in text
    report = validate_file(path)
    assert {(f.rule, f.path) for f in report.findings if f.rule in ("FILE006", "MDA010")} == {
        ("FILE006", f"/{TRAJ}/position/step"), ("FILE006", f"/{TRAJ}/box/edges/value"),
        ("FILE006", f"/{TRAJ}/position/value"), ("MDA010", f"/{TRAJ}/position/value")}
    assert not [f for f in report.findings if f.rule == "FILE003"]


def test_mdanalysis_reads_cu_h5md():
    """Regression (issue 16): MDA001 on MDAnalysisTests' cu.h5md, which MDAnalysis reads.

    MDAnalysis 2.11's H5MDReader reads the first group under /particles, whatever its name
    (here 'atoms'); only Universe(FILE) without a topology needs /particles/trajectory.
    """
    from MDAnalysis.coordinates.H5MD import H5MDReader

    path = CU_H5MD
    reader = H5MDReader(path)
    assert reader.n_frames == 20
    reader.close()
    report = validate_file(path, "mdanalysis")
    assert not report.errors, [vars(f) for f in report.errors]
    assert {f.rule for f in report.findings} == {"MDA012"}


def test_info_into_a_closed_pipe(corpus):
    """Regression: 'info FILE | head' raised BrokenPipeError."""
    path, _ = corpus["pyh5md explicit"]
    for command in (["info", path], ["info", path, "--json"], ["validate", path], ["validate", path, "--json"]):
        process = subprocess.Popen([sys.executable, "-m", "h5mdtool"] + command, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT))
        process.stdout.read(10)
        process.stdout.close()  # what head does after its lines
        _, stderr = process.communicate(timeout=120)
        assert stderr == b"", (command, stderr)
        assert process.returncode in (0, 1, 141), (command, process.returncode)


def _fix(path):
    """Run the fix command info prints (as a user would, through the shell)."""
    command = info(path)["fix_command"]
    assert command and command.startswith("h5mdtool convert ")
    bin_directory = os.path.dirname(sys.executable)
    result = subprocess.run(["bash", "-c", command + " --no-progress"], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PATH=bin_directory + os.pathsep + os.environ["PATH"], PYTHONPATH=ROOT))
    assert result.returncode == 0, result.stderr
    return command.split(" -o ")[1].split(" ")[0]


def _layout_rules(path):
    """Layout warnings (LINT006 only notes that a filter comes from hdf5plugin)."""
    return {f.rule for f in validate_file(path, "all").findings if f.rule.startswith("LINT") and f.severity != "note"}


@pytest.mark.parametrize("layout", ["gzip chunks over 1 MiB", "lzf", "auto-chunked and lzf"])
def test_fix_command_fixes_the_layout(tmp_path, solvated, layout):
    """The command info prints runs, and info/validate --profile all no longer report the layout."""
    from h5mdtool import convert

    path = str(tmp_path / "layout.h5md")
    convert(solvated["TRR"], path, progress=False, stop=4)
    with h5py.File(path, "r+") as f:
        for element, options in (("velocity", {"gzip chunks over 1 MiB": dict(chunks=(4, 47681, 3), compression="gzip"),
                                                "lzf": dict(chunks=(1, 47681, 3), compression="lzf"),
                                                "auto-chunked and lzf": dict(chunks=(1, 47681, 3), compression="lzf")}[layout]),
                                 ("position", dict(chunks=True, maxshape=(None, None, 3)) if layout == "auto-chunked and lzf" else None)):
            if options is None:
                continue
            value = f[f"{TRAJ}/{element}/value"]
            data, attributes = value[:], dict(value.attrs)
            del f[f"{TRAJ}/{element}/value"]
            f.create_dataset(f"{TRAJ}/{element}/value", data=data, **options).attrs.update(attributes)
    before = _layout_rules(path)
    assert before
    fixed = _fix(path)
    assert _layout_rules(fixed) == set()
    document = info(fixed)
    assert document["fix_command"] is None
    assert not [f for f in document["findings"] if f["rule"].startswith("LINT") and f["severity"] != "note"]
    assert document["errors"] == 0
    with h5py.File(path, "r") as a, h5py.File(fixed, "r") as b:
        for element in ("position", "velocity"):
            assert np.array_equal(a[f"{TRAJ}/{element}/value"][:], b[f"{TRAJ}/{element}/value"][:])


def test_fix_command_fixes_cu_h5md(tmp_path):
    path = str(tmp_path / "cu.h5md")
    shutil.copy(CU_H5MD, path)
    fixed = _fix(path)
    report = validate_file(fixed, "all")
    assert not report.errors and not [f for f in report.findings if f.rule.startswith("LINT")], \
        [(f.rule, f.message) for f in report.findings]


def test_fix_command_fixes_pyh5md_files(tmp_path, corpus):
    path = str(tmp_path / "pyh5md.h5md")
    shutil.copy(corpus["pyh5md explicit"][0], path)
    fixed = _fix(path)
    assert _layout_rules(fixed) == set()

"""The topology ``convert --topology`` stores, used wherever a topology is asked for:
``bench rmsd md.h5md`` without ``-t``, ``-t md.h5md``, ``convert -s SEL`` of an H5MD input,
and the summaries saying where the topology came from."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from numpy.testing import assert_array_equal

import h5mdtool
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import UsageError
from h5mdtool.h5md.topology import read_universe, resolve_topology


@pytest.fixture(scope="module")
def stored(tmp_path_factory, adk):
    """The AdK DCD converted with its PSF stored, and without a topology."""
    directory = tmp_path_factory.mktemp("stored")
    with_topology, without = str(directory / "adk.h5md"), str(directory / "bare.h5md")
    h5mdtool.convert([adk[1]], with_topology, topology=adk[0], compression="zstd", progress=False)
    h5mdtool.convert([adk[1]], without, progress=False)
    return with_topology, without


def test_read_universe_of_an_h5md_file_gives_its_stored_topology(stored, adk):
    """Regression: MDAnalysis.Universe(md.h5md) had no names ('Topology' object has no attribute 'names')."""
    universe = read_universe(stored[0])
    psf = read_universe(adk[0])
    assert_array_equal(universe.atoms.names, psf.atoms.names)
    assert len(universe.select_atoms("name CA")) == 214


def test_resolve_topology(stored, adk):
    assert resolve_topology([stored[0]]) == (stored[0], f"stored in {stored[0]}")
    assert resolve_topology([stored[0]], adk[0]) == (adk[0], "file")
    assert resolve_topology([stored[1]], stored[0]) == (stored[0], f"stored in {stored[0]}")
    with pytest.raises(UsageError, match="--topology FILE is needed"):
        resolve_topology([stored[1]])


def test_bench_rmsd_reads_the_stored_topology(stored, adk):
    with_psf = h5mdtool.bench_rmsd(stored[0], adk[0], select="backbone")
    alone = h5mdtool.bench_rmsd(stored[0], select="backbone")
    named = h5mdtool.bench_rmsd(stored[1], stored[0], select="backbone")  # -t md.h5md for another file
    assert_array_equal(alone["rmsd"], with_psf["rmsd"])
    assert_array_equal(named["rmsd"], with_psf["rmsd"])
    assert alone["report"]["topology"]["source"] == f"stored in {stored[0]}"
    assert with_psf["report"]["topology"]["source"] == "file"


def test_split_of_a_file_carrying_its_topology_needs_no_topology_either(stored, tmp_path, adk):
    """split writes H5MD parts of an H5MD input by default, each with the input's topology,
    and bench reads a manifest of such parts without -t."""
    parts = str(tmp_path / "parts")
    summary = h5mdtool.split(stored[0], parts, 3, progress=False)
    assert summary["format"] == "H5MD"
    first = os.path.join(parts, "part-0001.h5md")
    with_psf = h5mdtool.bench_rmsd(stored[0], adk[0], select="backbone")
    alone = h5mdtool.bench_rmsd(parts, select="backbone")
    assert_array_equal(alone["rmsd"], with_psf["rmsd"])
    assert alone["report"]["topology"]["source"] == f"stored in {first}"
    features = h5mdtool.bench_dihedrals(parts)
    assert_array_equal(features["features"], h5mdtool.bench_dihedrals(stored[0], adk[0])["features"])
    bare = str(tmp_path / "bare-parts")
    h5mdtool.split(stored[1], bare, 2, progress=False)
    with pytest.raises(UsageError, match="--topology FILE is needed"):
        h5mdtool.bench_rmsd(bare)


def test_bench_rmsd_cli_without_topology(stored):
    runner = CliRunner()
    done = runner.invoke(cli, ["bench", "rmsd", stored[0]])
    assert done.exit_code == 0, done.output
    assert f"topology: stored in {stored[0]}" in done.output
    refused = runner.invoke(cli, ["bench", "rmsd", stored[1]])
    assert refused.exit_code == 2
    assert "--topology FILE is needed" in refused.output and "Traceback" not in refused.output


@pytest.mark.parametrize("command, output", [("rmsd", "--rmsd-out"), ("dihedrals", "--features-out")])
def test_bench_cli_writes_its_outputs_without_topology(stored, tmp_path, command, output):
    """Regression: 'bench dihedrals md.h5md --out report.json' (the topology stored in the
    file, no -t) failed checking its outputs against a topology path of None."""
    report, values = str(tmp_path / "report.json"), str(tmp_path / "values.csv")
    done = CliRunner().invoke(cli, ["bench", command, stored[0], "--stop", "5", "--out", report, output, values])
    assert done.exit_code == 0, done.output
    assert json.loads(open(report).read())["n_analysed"] == 5
    assert len(open(values).read().splitlines()) == 6  # a header and 5 frames
    same = CliRunner().invoke(cli, ["bench", command, stored[0], "--out", values, output, values, "--force"])
    assert same.exit_code == 2
    assert f"--out, {output} and --plot must name different files" in same.output


@pytest.mark.parametrize("command", ["rmsd", "dihedrals"])
def test_bench_without_topology_on_a_missing_input_says_it_is_missing(tmp_path, command):
    """A mistyped input name is reported as missing (exit 1), not as a missing topology."""
    missing = str(tmp_path / "mistyped.h5md")
    done = CliRunner().invoke(cli, ["bench", command, missing])
    assert done.exit_code == 1, done.output
    assert f"{missing}: no such file" in done.output and "--topology" not in done.output


def test_convert_select_of_an_h5md_input_uses_its_stored_topology(stored, tmp_path, adk):
    output = str(tmp_path / "ca.h5md")
    done = CliRunner().invoke(cli, ["convert", stored[0], "-s", "name CA", "-o", output, "--no-progress"])
    assert done.exit_code == 0, done.output
    assert f"from the topology stored in {stored[0]}" in done.output
    import h5mdtool.mdanalysis as h5mda

    ca, psf = h5mda.Universe(output), read_universe(adk[0]).select_atoms("name CA")
    assert_array_equal(ca.atoms.names, psf.names)
    assert_array_equal(ca.atoms.resids, psf.resids)
    source = h5mda.Universe(stored[0])
    for ts in ca.trajectory[::20]:
        source.trajectory[ts.frame]
        assert_array_equal(ca.atoms.positions, source.select_atoms("name CA").positions)
    assert os.path.getsize(output) < os.path.getsize(stored[0])
    assert np.all(ca.atoms.masses == psf.masses)


@pytest.mark.parametrize("options", [
    {"select": "name CA"},
    {"select": "name N CA C O", "calc_select": ["resid 10 20 and name CA CB", "segid 4AKE and resname LYS"],
     "weights": "mass", "ref_frame": 5},
    {"select": "name CA and resnum 1 2 3 4 5", "start": 3, "stop": 90, "step": 7},
])
def test_stored_topology_plan_without_mdanalysis_equals_mdanalysis(stored, monkeypatch, options):
    """Simple selections on a stored topology are resolved from its arrays; the RMSDs and the
    resolved analysis equal those of the same analysis resolved by MDAnalysis."""
    from h5mdtool.bench import analysis

    resolved_by_mdanalysis = analysis._plan_with_mdanalysis

    def refused(*args):
        raise AssertionError("MDAnalysis resolved a simple selection on a stored topology")

    monkeypatch.setattr(analysis, "_plan_with_mdanalysis", refused)
    fast = h5mdtool.bench_rmsd(stored[0], **options)
    monkeypatch.setattr(analysis, "_plan_with_mdanalysis", resolved_by_mdanalysis)
    monkeypatch.setattr(analysis, "_plan_from_stored_topology", lambda *args: None)
    slow = h5mdtool.bench_rmsd(stored[0], **options)
    assert_array_equal(fast["rmsd"], slow["rmsd"])
    assert fast["labels"] == slow["labels"]
    assert fast["report"]["analysis"] == slow["report"]["analysis"]


def test_stored_topology_selection_errors_as_mdanalysis_gives_them(stored):
    from h5mdtool.parallel.errors import InputError

    with pytest.raises(InputError, match=r"selection 'name XX' matches no atom of .*adk\.h5md"):
        h5mdtool.bench_rmsd(stored[0], select="name XX")
    with pytest.raises(InputError, match=r"'index 5' picks one atom"):
        h5mdtool.bench_rmsd(stored[0], select="index 5")
    with pytest.raises(InputError, match=r"selection 'name XX or name YY' matches no atom of .*adk\.h5md"):
        h5mdtool.bench_rmsd(stored[0], select="name XX or name YY")  # left to MDAnalysis: the same message


@pytest.mark.serial_only
@pytest.mark.parametrize("ranks", [None, 2])
def test_bench_rmsd_on_a_stored_topology_does_not_import_mdanalysis(stored, ranks):
    """Rank 0's setup without MDAnalysis's import (0.25-0.7 s of serial work) when the file
    carries its topology and the selection is simple; every rank checks."""
    from conftest import MPIRUN

    script = ("import sys\n"
              "from h5mdtool.cli.main import cli\n"
              "cli.main(sys.argv[1:], standalone_mode=False)\n"
              "print('MDAnalysis imported:', 'MDAnalysis' in sys.modules)\n")
    command = [sys.executable, "-c", script, "bench", "rmsd", stored[0], "--no-progress", "-s", "name CA"]
    done = subprocess.run(([MPIRUN, "-n", str(ranks)] if ranks else []) + command, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("MDAnalysis imported: False") == (ranks or 1), done.stdout
    assert "rmsd: 98 frames" in done.stdout

"""The topology ``convert --topology`` stores, used wherever a topology is asked for:
``bench rmsd md.h5md`` without ``-t``, ``-t md.h5md``, ``convert -s SEL`` of an H5MD input,
and the summaries saying where the topology came from."""

import os

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


def test_bench_rmsd_cli_without_topology(stored):
    runner = CliRunner()
    done = runner.invoke(cli, ["bench", "rmsd", stored[0]])
    assert done.exit_code == 0, done.output
    assert f"topology: stored in {stored[0]}" in done.output
    refused = runner.invoke(cli, ["bench", "rmsd", stored[1]])
    assert refused.exit_code == 2
    assert "--topology FILE is needed" in refused.output and "Traceback" not in refused.output


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

"""Plugin filters are never a surprise: convert's summary, info and validate's default output
say that readers need hdf5plugin, lzf files say that only h5py reads them, and
docs/installation.md quotes what a reader without the plugin sees, as measured here."""

import os
import shutil
import subprocess
import sys

import h5py
import pytest
from click.testing import CliRunner

from conftest import ROOT
from h5mdtool.cli.main import cli

DOC = os.path.join(ROOT, "docs", "installation.md")
VALUES = "/particles/trajectory/position/value"


@pytest.fixture(scope="module")
def files(tmp_path_factory, solvated):
    directory = tmp_path_factory.mktemp("plugins")
    summaries = {}
    for name, options in (("zstd", ["--precision", "0.001"]), ("lz4", ["--compression", "lz4"]),
                          ("lzf", ["--compression", "lzf"]), ("gzip", ["--compression", "gzip"])):
        path = str(directory / f"{name}.h5md")
        result = CliRunner().invoke(cli, ["convert", solvated["XTC"], "-o", path, "--stop", "2", *options])
        assert result.exit_code == 0, result.output
        summaries[name] = (path, result.output)
    return summaries


def test_convert_summary_names_the_plugin(files):
    for name in ("zstd", "lz4"):
        notes = [line for line in files[name][1].splitlines() if line.startswith("note: ")]
        assert any(f"compressed with {name}, a filter from hdf5plugin that every reader needs" in line
                   and "pip install hdf5plugin" in line and "HDF5_PLUGIN_PATH" in line and "Can't read data" in line
                   for line in notes), notes
    assert "note: compressed with lzf: only h5py reads lzf" in files["lzf"][1]
    assert not [line for line in files["gzip"][1].splitlines() if "hdf5plugin" in line or "lzf" in line]


def test_validate_shows_the_plugin_note_without_notes_option(files):
    result = CliRunner().invoke(cli, ["validate", files["zstd"][0]])
    assert result.exit_code == 0, result.output
    assert "note    LINT006" in result.output and "pip install hdf5plugin" in result.output
    assert "not shown" not in result.output
    assert CliRunner().invoke(cli, ["validate", files["zstd"][0], "--strict"]).exit_code == 0
    lzf = CliRunner().invoke(cli, ["validate", files["lzf"][0]]).output
    assert "LINT004" in lzf and "only h5py reads lzf" in lzf and "h5dump" in lzf


def test_info_names_the_plugin(files):
    output = CliRunner().invoke(cli, ["info", files["zstd"][0]]).output
    assert "filters from hdf5plugin (zstd): Python readers (MDAnalysis included): pip install hdf5plugin" in output


def _read_without_plugin(path, plugin_path=None):
    """What h5py says reading *path* in a process that never imports hdf5plugin."""
    environment = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    if plugin_path is not None:
        environment["HDF5_PLUGIN_PATH"] = plugin_path
    code = ("import sys, h5py\n"
            f"f = h5py.File({path!r})\n"
            "try:\n"
            f"    f[{VALUES!r}][0]\n"
            "except OSError as error:\n"
            "    print(f'OSError: {error}')\n"
            "assert 'hdf5plugin' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_installation_doc_quotes_the_errors_seen_here(files, tmp_path):
    """The doc's table was measured with this installation's HDF5 1.10.8; the message must stay verbatim."""
    if h5py.version.hdf5_version != "1.10.8":
        pytest.skip(f"the doc quotes HDF5 1.10.8; this h5py has {h5py.version.hdf5_version}")
    text = open(DOC).read()
    missing_directory = _read_without_plugin(files["zstd"][0])
    assert missing_directory.startswith("OSError: Can't read data (can't open directory: ")
    if "/usr/lib/x86_64-linux-gnu/hdf5/openmpi/plugins" in missing_directory:
        assert f"`{missing_directory}`" in text
    not_registered = _read_without_plugin(files["zstd"][0], plugin_path=str(tmp_path))
    assert f"`{not_registered}`" in text
    # and h5py reads lzf without any plugin
    assert _read_without_plugin(files["lzf"][0]) == ""


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump not installed")
def test_h5dump_without_plugin_path_prints_no_data_and_succeeds(files):
    environment = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    done = subprocess.run(["h5dump", "-d", VALUES, "-s", "0,0,0", "-c", "1,1,3", files["zstd"][0]],
                          capture_output=True, text=True, env=environment, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert "DATA {\n      }" in done.stdout
    assert "**exit status 0**" in open(DOC).read()

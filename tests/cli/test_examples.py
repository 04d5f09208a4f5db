"""The Python examples users copy: examples/parallel_analysis.py, examples/convert_api.py
and the scripts of docs/parallel-analysis.md and docs/mdanalysis.md, each run in a fresh
interpreter as a user runs it, serially and under mpirun, its results checked against
MDAnalysis reading the source DCD (regression: docs/parallel-analysis.md's script opened
the file with MDAnalysis's own H5MD reader, not h5mdtool's, and no test ran any of them)."""

import os
import re

import numpy as np
import pytest
from conftest import ROOT, run_h5mdtool, run_script_without_plugin_path

pytestmark = pytest.mark.serial_only

CONVERTED_FRAMES = 98  # adk_dims.dcd


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The AdK DCD converted with its PSF stored, in 8-frame zstd chunks (so that the
    backend's blocks must end on chunk boundaries); the source Universe, as the oracle."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    directory = tmp_path_factory.mktemp("examples")
    path = directory / "md.h5md"
    done = run_h5mdtool(["convert", DCD, "-t", PSF, "-o", str(path), "--compression", "zstd",
                         "--chunk-frames", "8", "--no-progress"])
    assert done.returncode == 0, done.stderr
    return path, PSF, mda.Universe(PSF, DCD)


def source_rmsd(universe, select="name CA"):
    from MDAnalysis.analysis.rms import RMSD

    return RMSD(universe, select=select).run().results.rmsd


@pytest.mark.parametrize("ranks, topology", [(None, "stored"), (2, "stored"), (3, "stored"), (2, "psf")])
def test_parallel_analysis_example_rmsd_equals_the_source(converted, ranks, topology, tmp_path):
    path, psf, source = converted
    out = tmp_path / "rmsd.npy"
    files = [path] if topology == "stored" else [psf, path]
    done = run_script_without_plugin_path(os.path.join("examples", "parallel_analysis.py"),
                                          files + ["--check", "--out", out], ranks)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equal to the serial run" in done.stdout, done.stdout
    split = re.search(r"frames per rank \[([\d, ]+)\]", done.stdout).group(1)
    counts = [int(value) for value in split.split(",")]
    assert len(counts) == (ranks or 1) and sum(counts) == CONVERTED_FRAMES
    assert all(edge % 8 == 0 for edge in np.cumsum(counts)[:-1]), counts  # whole 8-frame chunks per rank
    result = np.load(out)
    expected = source_rmsd(source)
    np.testing.assert_array_equal(result[:, 0], expected[:, 0])
    np.testing.assert_allclose(result[:, 2], expected[:, 2], atol=1e-4)


@pytest.mark.parametrize("ranks", [None, 2])
def test_parallel_analysis_example_ramachandran(converted, ranks, tmp_path):
    from MDAnalysis.analysis.dihedrals import Ramachandran

    path, psf, source = converted
    out = tmp_path / "angles.npy"
    done = run_script_without_plugin_path(os.path.join("examples", "parallel_analysis.py"),
                                          [psf, path, "--analysis", "ramachandran", "--check", "--out", out,
                                           "--progress"], ranks)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ramachandran: {CONVERTED_FRAMES} frames on {ranks or 1} rank(s)" in done.stdout, done.stdout
    # rank 0 alone reports the run's progress; its standard error is no terminal here: the closing line
    assert done.stderr.count(f"Ramachandran: {CONVERTED_FRAMES} of {CONVERTED_FRAMES} frames (100%)") == 1, \
        done.stderr
    expected = Ramachandran(source.select_atoms("protein")).run().results.angles
    np.testing.assert_allclose(np.load(out), expected, atol=1e-3)


def docs_script(page, number=0):
    """The *number*-th ```python block of docs/*page*."""
    with open(os.path.join(ROOT, "docs", page)) as handle:
        blocks = re.findall(r"```python\n(.*?)```", handle.read(), flags=re.S)
    return blocks[number]


@pytest.mark.parametrize("ranks", [None, 2])
def test_parallel_analysis_docs_script_reads_through_h5mdtool(converted, ranks, tmp_path):
    path, _, source = converted
    script = docs_script("parallel-analysis.md")
    assert 'h5mda.Universe("md.h5md")' in script
    # as the page runs it, in the directory of md.h5md, printing the first rows of the result
    os.symlink(path, tmp_path / "md.h5md")
    (tmp_path / "rmsd.py").write_text(script.replace('print(rmsd.results.rmsd[:5])',
                                                     'import numpy; numpy.save("rmsd.npy", rmsd.results.rmsd)\n'
                                                     '    print(type(u.trajectory).__name__)'))
    done = run_script_without_plugin_path(os.path.join(tmp_path, "rmsd.py"), [], ranks, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["H5MDToolReader"], done.stdout
    np.testing.assert_allclose(np.load(tmp_path / "rmsd.npy")[:, 2], source_rmsd(source)[:, 2], atol=1e-4)


@pytest.mark.parametrize("ranks", [None, 2])
def test_convert_api_example_writes_the_source_positions(converted, ranks, tmp_path):
    import h5mdtool.mdanalysis as h5mda

    _, psf, source = converted
    out = tmp_path / "api.h5md"
    done = run_script_without_plugin_path(os.path.join("examples", "convert_api.py"),
                                          [source.trajectory.filename, "-o", out], ranks)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{CONVERTED_FRAMES} frames x {source.atoms.n_atoms} atoms" in done.stdout, done.stdout
    assert f"on {ranks or 1} rank(s)" in done.stdout
    written = h5mda.Universe(out, topology=psf)
    assert written.trajectory.n_frames == CONVERTED_FRAMES
    for ts_written, ts_source in zip(written.trajectory[::7], source.trajectory[::7]):
        np.testing.assert_allclose(ts_written.positions, ts_source.positions, atol=1e-4)
    written.trajectory.close()


def run_docs_script(script, directory, converted_path, ranks):
    """Run *script* in *directory*, next to a link md.h5md to the converted file."""
    os.symlink(converted_path, directory / "md.h5md")
    (directory / "script.py").write_text(script)
    return run_script_without_plugin_path(os.path.join(directory, "script.py"), [], ranks, cwd=directory)


def test_mdanalysis_docs_first_script_matches_the_source(converted, tmp_path):
    path, _, source = converted
    script = docs_script("mdanalysis.md", 0)
    script = script.replace("    print(ts.frame, ts.time, ca.center_of_geometry())",
                            "    print(ts.frame, *ca.center_of_geometry())")
    script += ('\nimport numpy\nnumpy.save("rmsd.npy", rmsd.results.rmsd)\nnumpy.save("rmsf.npy", rmsf.results.rmsf)'
               '\nnumpy.save("xyz.npy", xyz)\n')
    done = run_docs_script(script, tmp_path, path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    ca = source.select_atoms("name CA")
    lines = done.stdout.split("\n")[:-1]
    assert [int(line.split()[0]) for line in lines] == list(range(0, CONVERTED_FRAMES, 10))
    for line, ts in zip(lines, source.trajectory[::10]):
        np.testing.assert_allclose([float(value) for value in line.split()[1:]], ca.center_of_geometry(), atol=1e-4)
    np.testing.assert_allclose(np.load(tmp_path / "rmsd.npy")[:, 2], source_rmsd(source)[:, 2], atol=1e-4)
    from MDAnalysis.analysis.rms import RMSF

    np.testing.assert_allclose(np.load(tmp_path / "rmsf.npy"), RMSF(ca).run().results.rmsf, atol=1e-4)
    np.testing.assert_allclose(np.load(tmp_path / "xyz.npy"), source.trajectory.timeseries(ca, order="fac"), atol=1e-4)


@pytest.mark.parametrize("ranks", [None, 3])
def test_mdanalysis_docs_mpi_script_gathers_every_frame(converted, ranks, tmp_path):
    path, _, source = converted
    script = docs_script("mdanalysis.md", 3)
    script += ('\nif comm.rank == 0:\n    values = np.concatenate(everything)\n'
               '    np.save("gyration.npy", values)\n')
    done = run_docs_script(script, tmp_path, path, ranks)
    assert done.returncode == 0, done.stdout + done.stderr
    ca = source.select_atoms("name CA")
    expected = [ca.radius_of_gyration() for ts in source.trajectory]
    np.testing.assert_allclose(np.load(tmp_path / "gyration.npy"), expected, atol=1e-4)

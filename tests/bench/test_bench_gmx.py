"""bench rmsd against GROMACS's ``gmx rms`` on the solvated AdK trajectory (TPR, XTC, TRR).

``gmx rms -s md.tpr`` takes the reference from the TPR's coordinates and the masses from
its topology; ``bench rmsd`` takes the same reference as a GRO file written at full
precision from those coordinates (``--reference``) and the masses from the TPR (``-t``).
``-nopbc``: gmx would otherwise make the protein whole across the periodic box, which
MDAnalysis (and h5mdtool) do not.
"""

import os
import shutil
import subprocess
import warnings

import MDAnalysis as mda
import numpy as np
import pytest

from benchcheck import every_report_adds_up  # noqa: F401 - autouse fixture
from h5mdtool import bench_rmsd
from h5mdtool.formats.ndx import write_index

pytestmark = pytest.mark.skipif(shutil.which("gmx") is None,
                                reason="GROMACS (gmx) is not installed: apt-get install gromacs (tools/install.sh does)")

GROUPS = {"CA": "name CA", "BB": "name N CA C", "Protein": "protein"}


def full_precision_gro(tpr, path):
    """A GRO file holding the TPR's coordinates with 9 decimals (MDAnalysis reads any precision)."""
    g96 = path + ".g96"
    subprocess.run(["gmx", "editconf", "-f", tpr, "-o", g96, "-quiet"], check=True, capture_output=True)
    with open(g96) as handle:
        lines = handle.read().split("\n")
    first = lines.index("POSITION") + 1
    xyz = [line.split()[4:7] for line in lines[first:lines.index("END", first)]]
    box = lines[lines.index("BOX") + 1].split()[:3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        atoms = mda.Universe(tpr).atoms
    with open(path, "w") as handle:
        handle.write(f"reference from {os.path.basename(tpr)}\n{len(xyz)}\n")
        for atom, (x, y, z) in zip(atoms, xyz):
            handle.write("%5d%-5s%5s%5d%14.9f%14.9f%14.9f\n" % (atom.resid % 100000, atom.resname[:5], atom.name[:5],
                                                              (atom.index + 1) % 100000, float(x), float(y), float(z)))
        handle.write("%10.5f%10.5f%10.5f\n" % tuple(float(v) for v in box))
    return path


@pytest.fixture(scope="module")
def gmx_case(tmp_path_factory):
    from MDAnalysisTests.datafiles import TPR, TRR, XTC

    directory = tmp_path_factory.mktemp("gmx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(TPR)
    index = str(directory / "index.ndx")
    write_index(index, {name: universe.select_atoms(selection).indices for name, selection in GROUPS.items()})
    return {"tpr": TPR, "XTC": XTC, "TRR": TRR, "index": index, "directory": directory,
            "reference": full_precision_gro(TPR, str(directory / "reference.gro"))}


def gmx_rms(case, trajectory, fit, calc, *options, index=True):
    """Time (ps) and RMSD (nm) columns of ``gmx rms``'s .xvg (groups from our index file, or
    gmx's default groups)."""
    out = str(case["directory"] / "rms.xvg")
    command = ["gmx", "rms", "-s", case["tpr"], "-f", trajectory, "-o", out, "-tu", "ps", "-nopbc", "-quiet", *options]
    if index:
        command += ["-n", case["index"]]
    done = subprocess.run(command, input=f"{fit}\n{calc}\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(out) as handle:
        return np.loadtxt([line for line in handle if not line.startswith(("#", "@"))], ndmin=2)


@pytest.mark.parametrize("kind", ["XTC", "TRR"])
@pytest.mark.parametrize("weights", [None, "mass"])
@pytest.mark.parametrize("fit,calc", [("CA", "CA"), ("BB", "BB"), ("CA", "Protein")])
def test_equals_gmx_rms(gmx_case, kind, weights, fit, calc):
    expected = gmx_rms(gmx_case, gmx_case[kind], fit, calc, "-mw" if weights else "-nomw")
    result = bench_rmsd(gmx_case[kind], gmx_case["tpr"], index=gmx_case["index"], select=fit,
                        calc_select=[] if calc == fit else [calc], weights=weights,
                        reference=gmx_case["reference"], block_frames=4)
    column = 2 if calc == fit else 3
    np.testing.assert_allclose(result["rmsd"][:, 1], expected[:, 0], rtol=1e-6)
    assert np.abs(result["rmsd"][:, column] - 10 * expected[:, 1]).max() < 1e-4


def test_frames_engine_and_time_selection_equal_gmx_rms(gmx_case):
    """-b/-e/--dt pick the frames gmx picks (TRR: times 0, 100, ... 900 ps)."""
    expected = gmx_rms(gmx_case, gmx_case["TRR"], "BB", "BB", "-mw", "-b", "150", "-e", "750", "-dt", "200")
    np.testing.assert_allclose(expected[:, 0], [200, 400, 600])
    for engine in ("blocks", "frames"):
        result = bench_rmsd(gmx_case["TRR"], gmx_case["tpr"], index=gmx_case["index"], select="BB", weights="mass",
                            reference=gmx_case["reference"], begin=150, end=750, dt=200, engine=engine)
        np.testing.assert_allclose(result["rmsd"][:, 1], expected[:, 0], rtol=1e-6)
        assert np.abs(result["rmsd"][:, 2] - 10 * expected[:, 1]).max() < 1e-4


def test_gromacs_backbone_is_n_ca_c(gmx_case):
    """gmx's default 'Backbone' group is N CA C; MDAnalysis's 'backbone' adds O (docs/benchmark.md)."""
    expected = gmx_rms(gmx_case, gmx_case["XTC"], "Backbone", "Backbone", "-nomw", index=False)[:, 1]
    ours = bench_rmsd(gmx_case["XTC"], gmx_case["tpr"], select="name N CA C", reference=gmx_case["reference"])
    mdanalysis_backbone = bench_rmsd(gmx_case["XTC"], gmx_case["tpr"], select="backbone",
                                     reference=gmx_case["reference"])
    assert np.abs(ours["rmsd"][:, 2] - 10 * expected).max() < 1e-4
    assert ours["report"]["n_selected"] == 3 * 214  # N CA C of 214 residues
    assert mdanalysis_backbone["report"]["n_selected"] == 642 + 213  # and O (the C-terminus has OC1, OC2)
    assert np.abs(mdanalysis_backbone["rmsd"][1:, 2] - 10 * expected[1:]).max() > 1e-3

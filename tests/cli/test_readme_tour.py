"""The README's quick tour runs as written: every command, in order, in one directory, exits
0 without a warning.

The tour's file names are mapped to MDAnalysisTests' cobrotoxin system (19385 atoms, 3
frames; the same system as XTC, TRR and TPR): md.xtc, md.trr, md.tpr, part1.xtc to
part3.xtc (md.xtc's frames, one per part, split by h5mdtool), old_autochunked.h5md (an
H5MD file written by pyh5md). What exceeds that small system is scaled down: mpirun's rank
counts to at most 2 (through tools/mpirun.sh), --nparts to at most the 3 frames.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import MPIRUN, ROOT

MAX_RANKS = 2
#: What a warning looks like in h5mdtool's output: validate's and info's findings
#: ("warning LINT003 ...", "1 warning(s)"), "warning: ..." lines, Python's warnings
#: ("UserWarning: ..."), deprecation notes, tracebacks.
WARNING = re.compile(r"^\s*warning\b|warning:|\b[1-9]\d* warning|deprecated|Traceback \(most recent", re.M | re.I)


def tour_commands():
    """The commands of the README's tour code block, continuation lines joined, comments dropped."""
    text = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"## A quick tour\n.*?```sh\n(.*?)```", text, flags=re.S).group(1)
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] in ("h5mdtool", "mpirun"):
            commands.append(words)
    return commands


def runnable(words, n_frames):
    """*words* as this machine runs them: h5mdtool from this checkout, small rank and part counts."""
    words = list(words)
    prefix = []
    if words[0] == "mpirun":
        ranks = int(words[words.index("-n") + 1])
        prefix = [MPIRUN, "-n", str(min(ranks, MAX_RANKS))]
        words = words[words.index("-n") + 2:]
    if "--nparts" in words:
        at = words.index("--nparts") + 1
        words[at] = str(min(int(words[at]), n_frames))
    assert words[0] == "h5mdtool"
    return prefix + [sys.executable, "-m", "h5mdtool"] + words[1:]


@pytest.fixture
def tour_directory(tmp_path):
    from MDAnalysisTests.datafiles import H5MD_xvf, TPR_xvf, TRR_xvf, XTC_sub_sol

    from h5mdtool import split

    for source, name in ((XTC_sub_sol, "md.xtc"), (TRR_xvf, "md.trr"), (TPR_xvf, "md.tpr"),
                         (H5MD_xvf, "old_autochunked.h5md")):
        shutil.copy(source, tmp_path / name)
    split(str(tmp_path / "md.xtc"), str(tmp_path / "segments"), 3, progress=False)
    for number in (1, 2, 3):
        os.rename(tmp_path / "segments" / f"part-000{number}.xtc", tmp_path / f"part{number}.xtc")
    shutil.rmtree(tmp_path / "segments")
    return tmp_path


def tour_analysis():
    """The README's Python block of an MDAnalysis analysis on the tour's files."""
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.search(r"Your own MDAnalysis analysis on a converted file.*?```python\n(.*?)```", text, flags=re.S).group(1)


def test_the_tour_block_is_found():
    commands = tour_commands()
    assert len(commands) >= 10 and commands[0][:2] == ["h5mdtool", "--help"]
    assert any(words[0] == "mpirun" for words in commands)


def test_every_tour_command_runs_without_warning(tour_directory):
    import MDAnalysis as mda

    n_frames = len(mda.Universe(str(tour_directory / "md.tpr"), str(tour_directory / "md.xtc")).trajectory)
    environment = {name: value for name, value in os.environ.items() if name != "H5MDTOOL_TEST_SHARED_DIR"}
    environment["PYTHONPATH"] = ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment["PYTHONWARNINGS"] = "default"  # Python warnings are shown, as a user sees them
    written = set()
    for words in tour_commands():
        command = runnable(words, n_frames)
        done = subprocess.run(command, cwd=tour_directory, capture_output=True, text=True, timeout=600,
                              env=environment)
        shown = " ".join(words)
        assert done.returncode == 0, f"{shown}\n{done.stdout}\n{done.stderr}"
        output = done.stdout + done.stderr
        assert not WARNING.search(output), f"{shown}\n{output}"
        if "-o" in words:
            target = words[words.index("-o") + 1]
            assert target not in written, f"{shown}: writes {target} a second time"
            written.add(target)
    assert {"md.h5md", "striped.h5md", "small.h5md", "md.pdb", "fast.h5md"} <= set(os.listdir(tour_directory))
    # then the analysis on the file the tour stored a topology in, against MDAnalysis on the XTC
    done = subprocess.run([sys.executable, "-c", tour_analysis()], cwd=tour_directory, capture_output=True,
                          text=True, timeout=600, env=environment)
    assert done.returncode == 0 and not WARNING.search(done.stdout + done.stderr), done.stdout + done.stderr
    from MDAnalysis.analysis import rms

    expected = rms.RMSD(mda.Universe(str(tour_directory / "md.tpr"), str(tour_directory / "md.xtc")),
                        select="name CA").run().results.rmsd[-1]
    printed = np.array(done.stdout.replace("[", " ").replace("]", " ").split(), float)
    np.testing.assert_allclose(printed, expected, rtol=1e-5, atol=1e-5)

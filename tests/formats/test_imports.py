"""A reader imports only what its file needs: hdf5plugin (0.1 s) only for plugin filters.

The reader of a rank other than 0 gets the segment rank 0 scanned; it is simulated here
by scanning in this process and reading in a fresh one from the pickled segment.
"""

import pickle
import subprocess
import sys

import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.formats import scan_segment

READ = """
import pickle, sys
import numpy as np
from h5mdtool.formats import REGISTRY
segment = pickle.load(open(sys.argv[1], "rb"))
reader = REGISTRY["H5MD"](segment)
block = __import__("h5mdtool.formats", fromlist=["FrameBlock"]).FrameBlock(2, segment.n_atoms, ["positions"])
reader.read(np.arange(2), block, 0, ["positions"])
np.save(sys.argv[2], block.positions[:2])
print("hdf5plugin" in sys.modules)
"""


@pytest.mark.parametrize("compression,plugin", [(None, False), ("zstd", True)])
def test_reader_registers_plugins_only_for_plugin_filters(tmp_path, adk, compression, plugin):
    path = str(tmp_path / "t.h5md")
    convert(adk[1], path, compression=compression, stop=4, progress=False)
    segment = scan_segment(path)
    assert segment.details["plugins"] is plugin
    with open(tmp_path / "segment.pkl", "wb") as handle:
        pickle.dump(segment, handle)
    done = subprocess.run([sys.executable, "-c", READ, str(tmp_path / "segment.pkl"), str(tmp_path / "read.npy")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(plugin)
    import MDAnalysis as mda

    universe = mda.Universe(adk[0], adk[1])
    expected = np.array([ts.positions / 10 for ts in universe.trajectory[:2]], np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "read.npy"), expected, atol=1e-6)

"""Every codec of --compression round-trips data bit for bit, compressible or not, serially and
in parallel collective writes (issue 13), and readers of the files get the filters registered."""

import os

import h5py
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.h5md.codecs import CODECS, codec
from h5mdtool.parallel.errors import UsageError
from h5mdtool.formats import TrajectoryReader, scan

TRAJ = "particles/trajectory"
PARALLEL = [name for name, c in CODECS.items() if c.parallel and name != "none"]


def _trr(path, frames, v=None):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    with TRRFile(path, "w") as handle:
        for i, x in enumerate(frames):
            handle.write(x, None if v is None else v[i], None, np.diag([9.0, 9.0, 9.0]).astype(np.float32),
                         i, float(i), 0.0, len(x))


@pytest.mark.mpi
@pytest.mark.parametrize("name", PARALLEL)
@pytest.mark.parametrize("data", ["smooth", "random"])
def test_codec_round_trip_serial_and_parallel(comm, shared_tmp, name, data):
    """Random bits do not compress: a codec that declines a chunk must not lose it (the lzf trap)."""
    rng = np.random.default_rng(11)
    if data == "random":
        x = rng.standard_normal((7, 3000, 3)).astype(np.float32) * 1e6
        v = rng.standard_normal((7, 3000, 3)).astype(np.float32)
    else:
        x = np.cumsum(rng.normal(0, 0.01, (7, 3000, 3)), axis=0).astype(np.float32) + 3
        v = (x * 0.5).astype(np.float32)
    source = os.path.join(shared_tmp, "in.trr")
    if comm.rank == 0:
        _trr(source, x, v)
    comm.Barrier()
    output = os.path.join(shared_tmp, f"{name}.h5md")
    convert(source, output, comm=comm, compression=name, chunk_frames=2, progress=False)
    comm.Barrier()
    with h5py.File(output, "r") as f:
        value = f[f"{TRAJ}/position/value"]
        assert codec(name).filter_id in [value.id.get_create_plist().get_filter(i)[0]
                                         for i in range(value.id.get_create_plist().get_nfilters())]
        np.testing.assert_array_equal(value[()], x)
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/value"][()], v)
    index = scan([output])
    with TrajectoryReader(index, None, ("positions",)) as reader:
        block = reader.new_block(7, ("positions",))
        reader.read(np.arange(7), block, ("positions",))
    np.testing.assert_array_equal(block.positions, x)


def test_plugin_filters_are_mandatory(tmp_path, adk):
    """h5py would mark them optional; h5mdtool sets them mandatory (parallel HDF5 loses the skip mark)."""
    output = str(tmp_path / "z.h5md")
    convert(adk[1], output, compression="zstd", stop=3, progress=False)
    with h5py.File(output, "r") as f:
        plist = f[f"{TRAJ}/position/value"].id.get_create_plist()
        flags = {plist.get_filter(i)[0]: plist.get_filter(i)[1] for i in range(plist.get_nfilters())}
    assert flags[32015] & h5py.h5z.FLAG_OPTIONAL == 0


@pytest.mark.parametrize("options, message", [
    ({"compression": "lz4", "compression_level": 2}, "does not apply to lz4"),
    ({"compression": "blosc2", "compression_level": 12}, "blosc2 level must be 0-9"),
    ({"compression": "none", "shuffle": True}, "--shuffle only applies"),
])
def test_codec_usage_errors(tmp_path, adk, options, message):
    with pytest.raises(UsageError, match=message):
        convert(adk[1], str(tmp_path / "o.h5md"), progress=False, **options)

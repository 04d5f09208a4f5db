"""TNG: blocks at their own strides, and damaged files refused before the TNG library sees them."""

import hashlib
import os
import struct
import warnings

import h5py
import numpy as np
import pytest
from MDAnalysisTests import datafiles as data

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError
from h5mdtool.formats import scan
from h5mdtool.formats.tng import FIXED, _strings

from conftest import run_h5mdtool

TRAJ = "particles/trajectory"


def pytng_values(path, block, steps):
    """Values of TNG *block* at *steps*, as pytng reads them."""
    import pytng

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytng.TNGFileIterator(path, "r") as tng:
            buffer = tng.make_ndarray_for_block_from_name(block)
            values = []
            for step in steps:
                tng.read_step(int(step)).get_blockid(tng.block_ids[block], buffer)
                values.append(buffer.copy())
    return np.array(values)


@pytest.mark.mpi
def test_uneven_strides_give_elements_with_their_own_steps(comm, shared_tmp):
    """Positions every 10 steps, velocities and box every 20 (MDAnalysis refuses this file)."""
    output = os.path.join(shared_tmp, "uneven.h5md")
    summary = convert(data.TNG_traj_uneven_blocks, output, comm=comm, progress=False)
    comm.Barrier()
    if comm.rank == 0:
        assert summary["n_frames"] == 51
        with h5py.File(output, "r") as handle:
            steps = handle[f"{TRAJ}/position/step"][()]
            np.testing.assert_array_equal(steps, np.arange(0, 501, 10))
            np.testing.assert_array_equal(handle[f"{TRAJ}/velocity/step"][()], np.arange(0, 501, 20))
            np.testing.assert_array_equal(handle[f"{TRAJ}/position/value"][()],
                                          pytng_values(data.TNG_traj_uneven_blocks, "TNG_TRAJ_POSITIONS", steps))
            np.testing.assert_array_equal(handle[f"{TRAJ}/velocity/value"][()],
                                          pytng_values(data.TNG_traj_uneven_blocks, "TNG_TRAJ_VELOCITIES",
                                                       np.arange(0, 501, 20)))
            np.testing.assert_allclose(handle[f"{TRAJ}/position/time"][()], steps * 0.002, rtol=1e-12)
            edges = handle[f"{TRAJ}/box/edges/value"][()]
            boxes = pytng_values(data.TNG_traj_uneven_blocks, "TNG_TRAJ_BOX_SHAPE", steps[::2]).reshape(-1, 3, 3)
            np.testing.assert_array_equal(edges[::2], boxes)
            assert not edges[1::2].any()  # frames without a box: zero edges, as XTC/TRR store them
    comm.Barrier()


def test_positions_are_bit_for_bit_pytng(tmp_path):
    output = str(tmp_path / "argon.h5md")
    convert(data.TNG_traj, output, progress=False)
    with h5py.File(output, "r") as handle:
        steps = handle[f"{TRAJ}/position/step"][()]
        np.testing.assert_array_equal(steps, np.arange(0, 500001, 5000))
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/value"][()],
                                      pytng_values(data.TNG_traj, "TNG_TRAJ_POSITIONS", steps))


def _damaged(tmp_path, offsets=(), cut=0):
    raw = bytearray(open(data.TNG_traj_vels_forces, "rb").read())
    for offset in offsets:
        raw[offset] ^= 0xFF
    path = str(tmp_path / "damaged.tng")
    open(path, "wb").write(raw[:len(raw) - cut])
    return path


@pytest.mark.parametrize("offsets, cut, message", [
    ((391597, 391598), 0, "TNG block 9 at byte 204021 .FORCES. .in the frame set of TNG frames 0 to 491. fails its MD5"),
    ((1500,), 0, r"\(POSITIONS\) .* fails its MD5 check"),
    ((0, 7), 0, "not a TNG file"),
    ((), 10, "ends inside the TNG block at byte 771901 .in the frame set of TNG frames 492 to 501."),
    ((), 783195 // 2, "ends inside the TNG block"),
], ids=["forces-hash", "positions-hash", "first-header", "truncated-end", "truncated-half"])
def test_damaged_tng_one_line_error_not_a_crash(tmp_path, offsets, cut, message):
    """Two flipped bytes in a forces block made the TNG library crash (SIGSEGV) when opening the file."""
    path = _damaged(tmp_path, offsets, cut)
    with pytest.raises(InputError, match=message):
        scan([path])
    if offsets == (391597, 391598):
        output = tmp_path / "out.h5md"
        done = run_h5mdtool(["convert", path, "-o", str(output)])
        assert done.returncode == 1, (done.returncode, done.stderr)  # not -11 (segmentation fault)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "damaged.tng" in lines[0], done.stderr
        assert not output.exists() and os.listdir(tmp_path) == ["damaged.tng"]


def test_distance_unit_other_than_nm_refused(tmp_path):
    """A TNG file in Angstrom (exponent -10): refused, not read as nm as MDAnalysis would."""
    raw = bytearray(open(data.TNG_traj, "rb").read())
    header_size, contents_size = struct.unpack_from("<qq", raw)
    contents = bytearray(raw[header_size:header_size + contents_size])
    at = _strings(bytes(contents), 0, 9) + 8 + 1 + 8 * 5
    assert struct.unpack_from("<q", contents, at)[0] == -9
    struct.pack_into("<q", contents, at, -10)
    raw[header_size:header_size + contents_size] = contents
    raw[FIXED - 16:FIXED] = hashlib.md5(contents).digest()
    path = str(tmp_path / "angstrom.tng")
    open(path, "wb").write(raw)
    with pytest.raises(InputError, match=r"TNG distance unit 10\^-10 m"):
        scan([path])

"""h5mdtool's XTC decoder (h5mdtool/formats/_xtcframe.c) against MDAnalysis's libmdaxdr.

On every file a writer makes, its positions must be libmdaxdr's bit for bit; on a frame
whose compressed bytes are damaged it must refuse (naming file and frame) or stay inside
the frame's integer box, the same on every run, and never crash.
"""

import glob
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from conftest import ROOT
from xtc_samples import HEADER, damaged_copy, integer_box, read_with_libmdaxdr, write_sample, xtc_samples

from h5mdtool.parallel.errors import InputError
from h5mdtool.formats.xtc import FrameReader, XTCFormat

FUZZ = os.path.join(ROOT, "tests", "scripts", "xtc_fuzz.py")


def decode_file(path):
    """Positions (and, for compressed frames, grid integers) of every frame of *path*."""
    segment = XTCFormat.scan(str(path))
    reader = FrameReader(str(path), segment.offsets)
    positions = np.empty((segment.n_frames, segment.n_atoms, 3), np.float32)
    integers = np.empty_like(positions, dtype=np.int32) if segment.n_atoms > 9 else None
    try:
        for frame in range(segment.n_frames):
            reader.decode(frame, positions[frame], None if integers is None else integers[frame])
    finally:
        reader.close()
    return segment, positions, integers


@settings(max_examples=150, deadline=None)
@given(sample=xtc_samples())
def test_positions_equal_libmdaxdr_bit_for_bit(tmp_path_factory, sample):
    path = tmp_path_factory.mktemp("xtc") / "sample.xtc"
    write_sample(path, sample)
    expected = read_with_libmdaxdr(path)
    try:
        segment, positions, integers = decode_file(path)
    except InputError as error:
        # libmdaxdr's writer ran past its table of sizes on this input (huge values at a fine
        # precision): the file holds undefined values, which the decoder refuses
        assume("one past the format's table" not in str(error))
        raise
    assert positions.tobytes() == expected.tobytes()
    if integers is not None:
        data = path.read_bytes()
        for frame in range(segment.n_frames):
            low, high = integer_box(data, int(segment.offsets[frame]))
            assert (integers[frame] >= low).all() and (integers[frame] <= high).all()
            scale = np.float32(1.0 / np.float64(np.float32(sample["precision"])))
            assert (integers[frame].astype(np.float32) * scale).tobytes() == positions[frame].tobytes()


def _mdanalysis_test_files():
    import MDAnalysisTests

    return sorted(glob.glob(os.path.join(os.path.dirname(MDAnalysisTests.__file__), "data", "**", "*.xtc"),
                        recursive=True))


@pytest.mark.parametrize("path", _mdanalysis_test_files(), ids=os.path.basename)
def test_mdanalysis_test_files_equal_libmdaxdr(path):
    """XTC files written by GROMACS versions and by MDAnalysis."""
    _, positions, _ = decode_file(path)
    assert positions.tobytes() == read_with_libmdaxdr(path).tobytes()


def test_damaged_frames_refused_or_in_their_box_in_a_subprocess(tmp_path):
    """Random byte changes in the compressed coordinates (tests/scripts/xtc_fuzz.py): run
    apart, so that a crash of the decoder fails this test instead of ending pytest."""
    done = subprocess.run([sys.executable, FUZZ, str(tmp_path), "300"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_damaged_frame_named(tmp_path):
    sample = {"n_atoms": 50, "n_frames": 3, "precision": 1000.0, "shape": "walk", "scale": 1.0, "offset": 0.0,
              "seed": 1}
    write_sample(tmp_path / "good.xtc", sample)
    at = damaged_copy(tmp_path / "good.xtc", tmp_path / "bad.xtc", 1)
    for _ in range(2):
        with pytest.raises(InputError, match=rf"^{tmp_path}/bad.xtc: XTC frame 1 at byte {at} is corrupt \(atom 0 "):
            decode_file(tmp_path / "bad.xtc")


def test_byte_count_must_fill_the_frame(tmp_path):
    """The byte count in a frame's header and the frame's span in the scan's index agree."""
    sample = {"n_atoms": 20, "n_frames": 1, "precision": 1000.0, "shape": "uniform", "scale": 1.0, "offset": 0.0,
              "seed": 2}
    write_sample(tmp_path / "one.xtc", sample)
    segment = XTCFormat.scan(str(tmp_path / "one.xtc"))
    with open(tmp_path / "one.xtc", "ab") as handle:
        handle.write(bytes(8))
    reader = FrameReader(str(tmp_path / "one.xtc"), [0, int(segment.offsets[1]) + 8])
    with pytest.raises(InputError, match=r"XTC frame 0 at byte 0 is corrupt \(it declares \d+ bytes of coordinates "
                                         r"but the frame holds \d+\)"):
        reader.decode(0, np.empty((20, 3), np.float32))
    reader.close()


def test_stream_must_end_at_its_byte_count(tmp_path):
    """A stream that decodes every atom before its declared end is damaged (a writer counts
    exactly the bytes it fills): here the byte count grows by 4 and 4 zero bytes follow."""
    sample = {"n_atoms": 20, "n_frames": 1, "precision": 1000.0, "shape": "uniform", "scale": 1.0, "offset": 0.0,
              "seed": 3}
    write_sample(tmp_path / "one.xtc", sample)
    data = bytearray((tmp_path / "one.xtc").read_bytes())
    count = struct.unpack_from(">i", data, HEADER - 4)[0]
    struct.pack_into(">i", data, HEADER - 4, count + 4)
    data[HEADER + count:HEADER + count] = bytes(4)
    (tmp_path / "long.xtc").write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"XTC frame 0 at byte 0 is corrupt \(the 20 atoms end after \d+ of the "
                                         rf"{count + 4} bytes"):
        decode_file(tmp_path / "long.xtc")


def test_run_beyond_the_table_refused(tmp_path):
    """Atoms all more than 2^24 grid units from the previous one make libmdaxdr's writer
    (and GROMACS's) start at size index 73, one past the format's table, and encode runs
    with whatever follows the table in its memory: such a run cannot be decoded, so it is
    refused, the same way every time."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    rng = np.random.default_rng(0)
    xyz = rng.uniform(-3.0e5, 3.0e5, (10, 3)).astype(np.float32)
    with XTCFile(str(tmp_path / "far.xtc"), "w") as handle:
        handle.write(xyz, np.eye(3, dtype=np.float32), 0, 0.0, 100.0)
    data = (tmp_path / "far.xtc").read_bytes()
    assert struct.unpack_from(">i", data, 84)[0] == 73
    for _ in range(2):
        with pytest.raises(InputError, match="uses size index 73, one past the format's table"):
            decode_file(tmp_path / "far.xtc")

"""A scanned segment is broadcast by pickling it: its per-frame arrays that are arithmetic
runs (steps, regular times, fields every frame holds) travel as three numbers, and every
segment comes back equal, whatever its format."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5mdtool import convert
from h5mdtool.formats import scan_segment
from h5mdtool.formats.base import Run


@settings(max_examples=200, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["int64", "int32", "uint32", "float64", "float32", "bool"]),
       n=st.integers(0, 40))
def test_a_run_stands_for_its_array_bit_for_bit(data, dtype, n):
    """Runs (constant or arithmetic, overflowing or not, floats that are not quite a run)
    and non-runs: Run.of then expanded gives the array back, bit for bit, with its dtype."""
    kind = data.draw(st.sampled_from(["run", "random", "nearly"]))
    if dtype == "bool":
        values = np.full(n, data.draw(st.booleans())) if kind == "run" else np.asarray(
            data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    else:
        first = data.draw(st.integers(-1000, 1000))
        stride = data.draw(st.sampled_from([0, 1, 7, -3, 2**40]))
        if dtype.startswith("float"):
            stride = data.draw(st.sampled_from([0.0, 0.5, 0.1, 1 / 3, -2.0]))
        values = (first + np.arange(n) * stride)
        if kind == "random":
            values = values + np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
        elif kind == "nearly" and n > 2:
            values = values.astype(np.float64)
            values[n // 2] = np.nextafter(values[n // 2], np.inf)
        with np.errstate(invalid="ignore", over="ignore"):  # runs that wrap around in small integers
            values = values.astype(dtype)
    packed = Run.of(values)
    back = Run.expanded(pickle.loads(pickle.dumps(packed)))
    assert back.dtype == values.dtype
    assert back.tobytes() == values.tobytes()
    if kind == "run" and n >= 2 and isinstance(packed, np.ndarray):
        assert dtype.startswith("float") or dtype == "uint32", (dtype, values)  # float rounding, or a wrap


def _same(a, b):
    assert a.__dict__.keys() == b.__dict__.keys()
    for name in ("step", "time", "offsets"):
        left, right = getattr(a, name), getattr(b, name)
        assert (left is None) == (right is None)
        if left is not None:
            assert left.dtype == right.dtype and np.array_equal(left, right)
    assert a.fields.keys() == b.fields.keys()
    for name in a.fields:
        assert a.fields[name].dtype == b.fields[name].dtype and np.array_equal(a.fields[name], b.fields[name])
    for name in ("path", "format", "n_atoms", "n_frames", "size", "mtime", "dtype", "boundary", "skip", "cut"):
        assert getattr(a, name) == getattr(b, name)


@pytest.mark.parametrize("source", ["DCD", "XTC", "TRR", "H5MD"])
def test_segments_of_every_format_pickle_back_equal_and_regular_ones_small(tmp_path, adk, solvated, source):
    if source == "DCD":
        path = adk[1]
    elif source == "H5MD":
        path = str(tmp_path / "adk.h5md")
        convert(adk[1], path, progress=False)
    else:
        path = solvated[source]
    segment = scan_segment(path)
    copy = pickle.loads(pickle.dumps(segment))
    _same(copy, segment)
    if source in ("DCD", "H5MD"):  # regular steps and times, positions in every frame: a few numbers
        assert isinstance(Run.of(segment.step), Run) and isinstance(Run.of(segment.fields["positions"]), Run)
        assert len(pickle.dumps(segment)) < 4096


def test_a_long_regular_segment_travels_in_a_few_kilobytes(tmp_path, adk):
    """980 frames or 980,000 of regular steps and times: the pickled segment is the same size,
    where its arrays alone are 17 bytes a frame."""
    path = str(tmp_path / "adk.h5md")
    convert(adk[1], path, progress=False)
    sizes = []
    for n in (980, 980_000):
        segment = scan_segment(path)
        segment.n_frames, segment.step = n, np.arange(n, dtype=np.int64) * 1000
        segment.time, segment.fields = np.arange(n, dtype=np.float64) * 2.0, {"positions": np.ones(n, bool)}
        sizes.append(len(pickle.dumps(segment)))
        _same(pickle.loads(pickle.dumps(segment)), segment)
    assert abs(sizes[1] - sizes[0]) < 16 and sizes[1] < 4096, sizes

"""Issue 6 layout features: chunk planner, stripe alignment, lossy --precision."""

import os

import h5py
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.h5md.layout import AUTO_CHUNK_BYTES, Layout
from h5mdtool.h5md.writer import read_provenance


@pytest.mark.parametrize(
    "n_atoms, stripe_size, expected",
    [
        (3341, None, AUTO_CHUNK_BYTES // (3341 * 12)),  # AdK: 26 frames of 40 KB in 1 MiB
        (214, None, AUTO_CHUNK_BYTES // (214 * 12)),  # C-alpha only: 408 frames
        (47681, None, 1),  # solvated AdK: 572 KB frames, one per chunk
        (3_000_000, None, 1),  # a frame (36 MB) larger than the target: still one frame
        (3341, 4 * 1024**2, 4 * 1024**2 // (3341 * 12)),  # follows the stripe size
    ],
)
def test_auto_chunk_frames(n_atoms, stripe_size, expected):
    layout = Layout(chunk_frames="auto", stripe_size=stripe_size).plan_chunks(100_000, n_atoms)
    assert layout.chunk_frames == expected
    assert layout.chunk_frames * n_atoms * 12 <= max(stripe_size or AUTO_CHUNK_BYTES, n_atoms * 12)
    assert layout.chunk_reason.startswith("auto:")


def test_auto_never_exceeds_frame_count():
    assert Layout(chunk_frames="auto").plan_chunks(5, 10).chunk_frames == 5


def test_alignment_rules():
    aligned = Layout(chunk_frames="auto", stripe_size="1M").plan_chunks(1000, 3341)
    assert aligned.alignment == 1024**2
    assert aligned.file_options() == {"alignment_threshold": 512 * 1024, "alignment_interval": 1024**2}
    small = Layout(chunk_frames=1, stripe_size="1M").plan_chunks(1000, 3341)
    assert small.alignment is None and "less than half" in small.alignment_reason
    compressed = Layout(chunk_frames="auto", stripe_size="1M", compression="gzip").plan_chunks(1000, 3341)
    assert compressed.alignment is None and compressed.file_options() == {}


@pytest.mark.parametrize("precision, step, unit", [(0.001, 1e-3, "pm"), (0.002, 1e-3, "pm"), (0.01, 1e-2, "pm"),
                                                    (1.0, 1.0, "pm"), (5.0, 1.0, "pm"), (0.00025, 1e-4, "fm")])
def test_precision_grid(precision, step, unit):
    encoding = Layout(precision=precision).encoding("positions")
    assert encoding.step == pytest.approx(step) and encoding.step <= precision
    assert encoding.unit == unit and encoding.dtype == "int32"
    assert Layout(precision=precision).encoding("velocities").lossy is False  # positions only


@pytest.mark.parametrize("options", [{"precision": 0}, {"precision": 1e-9}, {"precision": float("inf")},
                                     {"precision": float("nan")}, {"precision": 0.001, "contiguous": True},
                                     {"chunk_frames": "many"}, {"chunk_frames": True}])
def test_layout_refusals(options):
    with pytest.raises(UsageError):
        Layout(**options)


@pytest.mark.mpi
def test_chunks_aligned_to_stripes(comm, shared_tmp, adk):
    output = os.path.join(shared_tmp, "aligned.h5md")
    convert(adk[1], output, comm=comm, chunk_frames="auto", stripe_size="256K", progress=False)
    comm.Barrier()
    with h5py.File(output, "r") as f:
        value = f["particles/trajectory/position/value"]
        assert value.chunks == (256 * 1024 // (3341 * 12), 3341, 3)
        offsets = [value.id.get_chunk_info(i).byte_offset for i in range(value.id.get_num_chunks())]
        record = read_provenance(f)
    assert len(offsets) == -(-98 // value.chunks[0])
    assert all(offset % (256 * 1024) == 0 for offset in offsets)
    assert record["layout"]["alignment"] == 256 * 1024
    assert record["layout"]["chunk_reason"].startswith("auto:")


@pytest.mark.mpi
@pytest.mark.parametrize("precision", [0.001, 0.02])
def test_precision_bound_every_coordinate(comm, shared_tmp, adk, adk_frames, precision):
    """Lossy positions stay within precision/2 of the source (plus float32 rounding)."""
    output = os.path.join(shared_tmp, "lossy.h5md")
    convert(adk[1], output, comm=comm, precision=precision, compression="gzip", progress=False)
    comm.Barrier()
    with h5py.File(output, "r") as f:
        value = f["particles/trajectory/position/value"]
        assert value.dtype == np.int32 and value.attrs["unit"] == "pm"
        stored = value[:].astype(np.float64) * 1e-3
        recorded = value.attrs["precision"] * 1e-3
    source = adk_frames.astype(np.float64)
    error = np.abs(stored - source)
    assert recorded <= precision
    assert np.all(error <= recorded / 2 * (1 + 1e-9))
    assert error.max() > recorded / 4  # really lossy: values moved to the grid


def test_precision_file_smaller_than_lossless(tmp_path, solvated):
    lossless = str(tmp_path / "lossless.h5md")
    lossy = str(tmp_path / "lossy.h5md")
    convert(solvated["XTC"], lossless, compression="gzip", progress=False)
    convert(solvated["XTC"], lossy, compression="gzip", precision=0.001, progress=False)
    assert os.path.getsize(lossy) < 0.8 * os.path.getsize(lossless)
    # XTC is itself stored at 0.001 nm: the values come back to that grid
    with h5py.File(lossless, "r") as a, h5py.File(lossy, "r") as b:
        x, y = a["particles/trajectory/position/value"][:2], b["particles/trajectory/position/value"][:2]
    np.testing.assert_allclose(y * 1e-3, x, atol=1e-6)


def test_precision_xtc_keeps_the_xtc_integers(tmp_path, solvated):
    """--precision xtc: the XTC's own grid, its integers stored exactly (issue 13)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    output = str(tmp_path / "xtc_grid.h5md")
    summary = convert(solvated["XTC"], output, precision="xtc", progress=False)
    assert summary["layout"]["precision"] == pytest.approx(0.001)
    assert summary["layout"]["precision_source"].startswith("xtc")
    with XTCFile(solvated["XTC"]) as handle:
        decoded = [frame.x for frame in handle]
    with h5py.File(output, "r") as f:
        value = f["particles/trajectory/position/value"]
        assert value.dtype == np.int32 and value.attrs["unit"] == "pm" and value.attrs["precision"] == 1.0
        for frame, x in enumerate(decoded):
            np.testing.assert_array_equal(value[frame], np.rint(x.astype(np.float64) * 1000))


def test_precision_xtc_refusals(tmp_path, adk, adk_frames):
    from conftest import write_xtc

    with pytest.raises(InputError, match="not an XTC"):
        convert(adk[1], str(tmp_path / "o.h5md"), precision="xtc", progress=False)
    first, second = str(tmp_path / "a.xtc"), str(tmp_path / "b.xtc")
    write_xtc(first, adk_frames[:2], [0, 1], [0.0, 1.0])
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(second, "w") as handle:
        for i in range(2, 4):
            handle.write(adk_frames[i], np.diag([5.0] * 3).astype(np.float32), i, float(i), precision=100.0)
    with pytest.raises(InputError, match="several precisions"):
        convert([first, second], str(tmp_path / "o.h5md"), precision="xtc", progress=False)
    summary = convert(second, str(tmp_path / "p100.h5md"), precision="xtc", progress=False)
    assert summary["layout"]["precision"] == pytest.approx(0.01)


@pytest.mark.parametrize("velocity_precision, force_precision", [(0.01, None), (None, 0.5), (0.001, 2.0)])
def test_velocity_and_force_precision_bound(tmp_path, velocity_precision, force_precision):
    """Issue 13: lossy velocities and forces only when asked, each within half its precision."""
    from h5mdtool import compare_with_source
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    rng = np.random.default_rng(3)
    x, v, f = (rng.normal(0, s, (4, 500, 3)).astype(np.float32) for s in (3.0, 0.5, 300.0))
    source = str(tmp_path / "xvf.trr")
    with TRRFile(source, "w") as handle:
        for i in range(4):
            handle.write(x[i], v[i], f[i], np.diag([9.0] * 3).astype(np.float32), i, float(i), 0.0, 500)
    output = str(tmp_path / "lossy.h5md")
    summary = convert(source, output, velocity_precision=velocity_precision, force_precision=force_precision,
                      progress=False)
    assert summary["layout"]["compression"] == "zstd"  # auto: lossy values are compressed
    with h5py.File(output, "r") as h:
        np.testing.assert_array_equal(h["particles/trajectory/position/value"][()], x)  # positions untouched
        for name, values, precision in (("velocity", v, velocity_precision), ("force", f, force_precision)):
            stored = h[f"particles/trajectory/{name}/value"]
            assert stored.dtype == np.float32
            if precision is None:
                np.testing.assert_array_equal(stored[()], values)
                assert "precision" not in stored.attrs
            else:
                assert stored.attrs["precision"] <= precision
                assert np.abs(stored[()].astype(np.float64) - values).max() <= stored.attrs["precision"] / 2
    assert compare_with_source([output], [source])["n_differing"] == 0

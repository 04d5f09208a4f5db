"""h5mdtool.mdanalysis's H5MDTOOL reader: MDAnalysis's own reader test suite on files h5mdtool
writes in every layout, values against MDAnalysis's H5MDReader (bit-equal on lossless files)
and against the source (within Q/2 on --precision Q), slicing, random access, timeseries,
elements at their own steps, foreign writers' files, pickling, no file locks, and the
stored topology against the topology file it came from."""

import os
import pickle
import re
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal

mda = pytest.importorskip("MDAnalysis")
from MDAnalysisTests.coordinates.base import BaseReference, MultiframeReaderTest  # noqa: E402

import h5mdtool  # noqa: E402
from forked import exit_code_within  # noqa: E402
import h5mdtool.mdanalysis as h5mda  # noqa: E402
from h5mdtool.mdanalysis import H5MDToolReader  # noqa: E402

#: Layouts h5mdtool writes: convert options. Lossy ones (``precision``) are read within Q/2.
LAYOUTS = {
    "plain": {},
    "gzip-2-frame-chunks": {"compression": "gzip", "chunk_frames": 2},
    "zstd-auto-chunks": {"compression": "zstd"},
    "lz4": {"compression": "lz4", "chunk_frames": 3},
    "blosc2": {"compression": "blosc2", "chunk_frames": 4},
    "lzf": {"compression": "lzf", "chunk_frames": 2},
    "contiguous": {"contiguous": True},
    "precision": {"precision": 0.001},
    "precision-split-xyz": {"precision": 0.001, "split_xyz": True, "chunk_frames": 3},
    "float64-precision": {"precision": 1e-6, "chunk_frames": 2},
}
LOSSLESS = [name for name, options in LAYOUTS.items() if "precision" not in options]


def _quiet_universe(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(*args, **kwargs)


def _converted(directory, source, name, options, **extra):
    path = os.path.join(directory, f"{os.path.basename(source)}-{name}.h5md")
    if not os.path.exists(path):
        h5mdtool.convert([source], path, progress=False, **options, **extra)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return str(tmp_path_factory.mktemp("reader"))


# -- MDAnalysis's reader test suite ------------------------------------------------------


class H5MDToolReference(BaseReference):
    """MDAnalysisTests' 5-frame, 5-atom TRR (positions, velocities, forces, changing
    triclinic box) converted by h5mdtool."""

    def __init__(self, trajectory):
        from MDAnalysis.coordinates.H5MD import H5MDWriter
        from MDAnalysisTests.datafiles import COORDINATES_TOPOLOGY

        super().__init__()
        self.trajectory = trajectory
        self.topology = COORDINATES_TOPOLOGY
        self.reader = H5MDToolReader
        self.writer = H5MDWriter
        self.ext = "h5md"
        self.prec = 3
        self.changing_dimensions = True
        for ts in (self.first_frame, self.second_frame, self.last_frame, self.jump_to_frame):
            ts.velocities = ts.positions / 10
            ts.forces = ts.positions / 100

    def iter_ts(self, i):
        ts = super().iter_ts(i)
        ts.velocities = ts.positions / 10
        ts.forces = ts.positions / 100
        return ts


class TestH5MDToolReaderBaseAPI(MultiframeReaderTest):
    """MDAnalysisTests.coordinates.base.MultiframeReaderTest, on every layout."""

    @pytest.fixture(params=sorted(LAYOUTS))
    @staticmethod
    def ref(request, files):
        from MDAnalysisTests.datafiles import COORDINATES_TRR

        return H5MDToolReference(_converted(files, COORDINATES_TRR, request.param, LAYOUTS[request.param]))


# -- values ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adk_layouts(files, adk):
    """The AdK DCD (98 frames, with unit cells) converted in every layout."""
    return {name: _converted(files, adk[1], name, options) for name, options in LAYOUTS.items()}


@pytest.fixture(scope="module")
def solvated_layouts(files, solvated):
    """The solvated AdK TRR (10 frames, velocities, triclinic box) in a few layouts."""
    chosen = ("plain", "gzip-2-frame-chunks", "precision-split-xyz")
    return {name: _converted(files, solvated["TRR"], name, LAYOUTS[name]) for name in chosen}


def _assert_same_frame(ts, expected, label, converted_time=False):
    assert ts.frame == expected.frame, label
    for field in ("positions", "velocities", "forces"):
        has = getattr(expected, f"has_{field}")
        assert getattr(ts, f"has_{field}") == has, (label, field)
        if has:
            assert_array_equal(getattr(ts, field), getattr(expected, field), err_msg=f"{label} {field}")
    if expected.dimensions is None:
        assert ts.dimensions is None, label
    else:
        assert_array_equal(ts.dimensions, expected.dimensions, err_msg=f"{label} dimensions")
    if converted_time:  # MDAnalysis converts a time unit in float32 (AKMA, fs), h5mdtool in float64
        assert abs(ts.time - expected.time) <= np.spacing(np.float32(expected.time)), label
    else:
        assert ts.time == expected.time, label
    assert ts.data["step"] == expected.data["step"], label


@pytest.mark.parametrize("layout", LOSSLESS)
def test_values_equal_mdanalysis_h5md_reader(adk, adk_layouts, layout):
    path = adk_layouts[layout]
    theirs = _quiet_universe(adk[0], path)  # MDAnalysis's reader first: it opens the file with locks
    ours = h5mda.Universe(path, topology=adk[0])
    assert len(ours.trajectory) == len(theirs.trajectory) == 98
    for ts, expected in zip(ours.trajectory, theirs.trajectory):
        _assert_same_frame(ts, expected, f"{layout} frame {expected.frame}")
    theirs.trajectory.close()


@pytest.mark.parametrize("layout", ["plain", "gzip-2-frame-chunks"])
def test_velocities_and_triclinic_box_equal_mdanalysis_h5md_reader(solvated, solvated_layouts, layout):
    path = solvated_layouts[layout]
    theirs = _quiet_universe(solvated["topology"], path)
    ours = h5mda.Universe(path, topology=solvated["topology"])
    assert ours.trajectory.has_velocities
    for ts, expected in zip(ours.trajectory, theirs.trajectory):
        _assert_same_frame(ts, expected, f"{layout} frame {expected.frame}")
    theirs.trajectory.close()


@pytest.mark.parametrize("layout", [name for name in LAYOUTS if name not in LOSSLESS])
def test_precision_within_half_q_of_the_source(adk, adk_layouts, layout):
    bound = 10.0 * LAYOUTS[layout]["precision"] / 2  # Angstrom
    source = _quiet_universe(*adk)
    ours = h5mda.Universe(adk_layouts[layout], topology=adk[0])
    for ts, expected in zip(ours.trajectory, source.trajectory):
        want = expected.positions.astype(np.float64)
        limit = bound + 2 * np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(ts.positions - want) <= limit), f"frame {ts.frame}"
        if expected.dimensions is None:
            assert ts.dimensions is None
        else:
            assert np.allclose(ts.dimensions, expected.dimensions, rtol=1e-6, atol=0)


def test_solvated_precision_split_xyz_within_half_q(solvated, solvated_layouts):
    source = _quiet_universe(solvated["topology"], solvated["TRR"])
    ours = h5mda.Universe(solvated_layouts["precision-split-xyz"], topology=solvated["topology"])
    for ts, expected in zip(ours.trajectory, source.trajectory):
        want = expected.positions.astype(np.float64)
        assert np.abs(ts.positions - want).max() <= 0.005 + 2 * np.spacing(np.float32(np.abs(want).max()))
        assert_array_equal(ts.velocities, expected.velocities)  # lossless: velocities have no precision here


@pytest.mark.parametrize("layout", ["plain", "gzip-2-frame-chunks", "zstd-auto-chunks", "contiguous"])
def test_slices_fancy_indexing_and_random_access(adk, adk_layouts, layout):
    path = adk_layouts[layout]
    theirs = _quiet_universe(adk[0], path)
    ours = h5mda.Universe(path, topology=adk[0], block_bytes=3341 * 12 * 5)  # blocks of a few frames
    selections = [slice(None, None, 10), slice(5, 60, 3), slice(None, None, -7), [5, 1, 9, 97, 0, 1],
                  np.array([40, 3, 3, 96]), [True] * 50 + [False] * 48]
    for selection in selections:
        got = [(ts.frame, ts.positions.copy()) for ts in ours.trajectory[selection]]
        want = [(ts.frame, ts.positions.copy()) for ts in theirs.trajectory[selection]]
        assert [f for f, _ in got] == [f for f, _ in want], selection
        for (frame, a), (_, b) in zip(got, want):
            assert_array_equal(a, b, err_msg=f"{selection} frame {frame}")
    for frame in np.random.default_rng(3).integers(-98, 98, 60):
        _assert_same_frame(ours.trajectory[int(frame)], theirs.trajectory[int(frame)], f"random {frame}")
    theirs.trajectory.close()


@pytest.mark.parametrize("cache_rows", [0, 1, 3])
@pytest.mark.parametrize("layout", ["gzip-2-frame-chunks", "zstd-auto-chunks", "precision-split-xyz", "plain"])
def test_random_access_cache_within_its_budget(adk, adk_layouts, monkeypatch, layout, cache_rows):
    """Compressed chunk rows read for random access stay decoded up to cache_bytes (the least
    recently used dropped first; uncompressed rows are read again instead): a frame of a
    cached row is served without decoding, every frame
    equals MDAnalysis's H5MDReader's (lossless layouts; --precision: the frame read by a
    reader without cache), and the cache never holds more than its budget."""
    from h5mdtool.h5md.chunkcodec import FilterPipeline

    path = adk_layouts[layout]
    alone = _quiet_universe(adk[0], path) if layout in LOSSLESS else h5mda.Universe(path, topology=adk[0], cache_bytes=0)
    reader = alone.trajectory
    probe = H5MDToolReader(path)
    row_bytes = probe._chunk_frames * 3341 * 3 * 4
    probe.close()
    ours = h5mda.Universe(path, topology=adk[0], cache_bytes=cache_rows * row_bytes)
    decoded = []
    original = FilterPipeline.decode
    monkeypatch.setattr(FilterPipeline, "decode", lambda self, *a, **k: decoded.append(1) or original(self, *a, **k))
    frames = [int(f) for f in np.random.default_rng(4).integers(0, 98, 80)] + [40, 41, 40, 3, 40]
    for frame in frames:
        decoded.clear()
        cached = ours.trajectory._cache.get(frame - frame % ours.trajectory._chunk_frames)
        ts = ours.trajectory[frame]
        if cached is not None and layout != "plain":
            assert not decoded, frame
        assert ours.trajectory._cached_bytes <= max(cache_rows * row_bytes, row_bytes)
        assert len(ours.trajectory._cache) <= (0 if layout == "plain" else cache_rows)
        _assert_same_frame(ts, reader[frame], f"frame {frame}")
    alone.trajectory.close()
    ours.trajectory.close()


@pytest.mark.parametrize("layout", ["plain", "gzip-2-frame-chunks", "precision-split-xyz"])
@pytest.mark.parametrize("by_name", [True, False], ids=["by-name", "old-hdf5-file-object"])
def test_reads_ahead_where_it_overlaps_reading_or_decompression(adk, adk_layouts, monkeypatch, layout, by_name):
    """Iterating forward reads the next block in a background thread: for every layout when
    HDF5 reads the file by name (HDF5 >= 1.10.7: the stdio driver, no lock), and only for
    compressed files, whose chunks decode in threads that release the GIL, when an old HDF5
    reads it through a Python file object (a background read there waits for the GIL at
    each chunk's Python call while the analysis runs: rms.RMSD twice as slow at 600x).
    Frames equal MDAnalysis's H5MDReader's either way."""
    from h5mdtool.mdanalysis import reader as reader_module

    if not by_name:
        monkeypatch.setattr(reader_module, "_hdf5_turns_locking_off", lambda: False)
    path = adk_layouts[layout]
    ours = h5mda.Universe(path, topology=adk[0], block_bytes=3341 * 12 * 8)  # several blocks
    reader = ours.trajectory
    assert (reader._raw is None) == by_name
    assert reader._file.driver == ("stdio" if by_name else "fileobj")
    threads = []
    original = reader._read_block
    monkeypatch.setattr(reader, "_read_block",
                        lambda *a: threads.append(threading.current_thread().name) or original(*a))
    frames = [ts.positions.copy() for ts in reader]
    background = [name for name in threads if name.startswith("h5mdtool-prefetch")]
    if layout == "plain" and not by_name:
        assert not background and reader._prefetcher is None
    else:
        assert background
    if layout in LOSSLESS:
        theirs = _quiet_universe(adk[0], path)
        for frame, ts in enumerate(theirs.trajectory):
            assert_array_equal(frames[frame], ts.positions, err_msg=f"frame {frame}")
        theirs.trajectory.close()
    reader.close()


@pytest.mark.parametrize("waits, decoders", [([0.9] * 4, None), ([0.01] * 4, 1), ([0.01] * 4 + [0.9], None),
                                              ([0.9] * 3 + [0.01] * 3, 1), ([0.3, 0.2], None), ([0.2] * 4, None),
                                              ([0.2] * 5, 1)])
def test_decoding_threads_paced_by_how_long_the_loop_waits(adk, adk_layouts, monkeypatch, waits, decoders):
    """Blocks read ahead are decoded by every thread while the loop over frames waits a
    quarter of its time or more for them (on average, the last block weighing half), by one
    thread while the analysis keeps its core busy. Each entry of *waits* is the share of a
    second between two blocks the loop waited; the reader starts as if it had waited."""
    reader = h5mda.Universe(adk_layouts["zstd-auto-chunks"], topology=adk[0]).trajectory
    clock = [100.0]
    monkeypatch.setattr("h5mdtool.mdanalysis.reader.time.perf_counter", lambda: clock[0])
    for waited in waits:
        reader._served_from = clock[0]
        clock[0] += 1.0
        reader._pace_decoding(waited)
    assert reader._decoders == decoders
    reader.close()


@pytest.mark.parametrize("decoders", [None, 1])
def test_blocks_read_ahead_decoded_by_the_threads_paced(adk, adk_layouts, monkeypatch, decoders):
    """The threads :meth:`_pace_decoding` chose are the ones decoding the blocks read in the
    background; the frames equal MDAnalysis's H5MDReader's."""
    path = adk_layouts["zstd-auto-chunks"]
    reader = h5mda.Universe(path, topology=adk[0], block_bytes=3341 * 12 * 40, threads=2).trajectory
    monkeypatch.setattr(reader, "_pace_decoding", lambda waited: None)
    reader._decoders = decoders
    asked = []
    original = reader._chunks.read
    monkeypatch.setattr(reader._chunks, "read", lambda *a: asked.append((threading.current_thread().name, a[-1]))
                        or original(*a))
    frames = [ts.positions.copy() for ts in reader]
    background = [threads for name, threads in asked if name.startswith("h5mdtool-prefetch")]
    assert background and set(background) == {decoders}
    theirs = _quiet_universe(adk[0], path)
    for frame, ts in enumerate(theirs.trajectory):
        assert_array_equal(frames[frame], ts.positions, err_msg=f"frame {frame}")
    theirs.trajectory.close()
    reader.close()


def test_damaged_chunk_read_ahead_is_one_error_naming_its_rows(tmp_path, adk, adk_layouts):
    """A chunk that cannot be decoded, in a block read ahead while another is served: the
    frames before it are read right, then one InputError names the file and the rows (not
    a thread's traceback, not a block of garbage)."""
    import shutil

    import h5py

    path = str(tmp_path / "damaged.h5md")
    shutil.copy(adk_layouts["gzip-2-frame-chunks"], path)
    with h5py.File(path, "r+") as handle:
        group = next(iter(handle["particles"].values()))
        dataset = group["position/value"]
        mask, stored = dataset.id.read_direct_chunk((60, 0, 0))
        dataset.id.write_direct_chunk((60, 0, 0), stored[: len(stored) // 2], filter_mask=mask)
    theirs = _quiet_universe(adk[0], adk_layouts["gzip-2-frame-chunks"])
    ours = h5mda.Universe(path, topology=adk[0], block_bytes=3341 * 12 * 8)
    served = []
    with pytest.raises(h5mdtool.InputError, match=r"damaged\.h5md: cannot read .*position/value rows") as raised:
        for ts in ours.trajectory:
            assert_array_equal(ts.positions, theirs.trajectory[ts.frame].positions)
            served.append(ts.frame)
    first, last = map(int, re.search(r"rows (\d+) to (\d+)", str(raised.value)).groups())
    assert first <= 60 <= last and served == list(range(first))
    ours.trajectory.close()
    theirs.trajectory.close()


@pytest.mark.parametrize("layout", ["plain", "zstd-auto-chunks", "precision-split-xyz", "contiguous"])
def test_timeseries_equals_frames_read_one_by_one(adk, adk_layouts, layout):
    ours = h5mda.Universe(adk_layouts[layout], topology=adk[0], block_bytes=3341 * 12 * 7)
    atoms = ours.select_atoms("name CA")
    every = np.array([ts.positions.copy() for ts in ours.trajectory])
    ours.trajectory[17]
    for start, stop, step in [(None, None, None), (3, 90, 4), (None, None, 30), (90, 10, -3), (None, None, -1)]:
        expected = every[slice(start, stop, step)]
        assert_array_equal(ours.trajectory.timeseries(start=start, stop=stop, step=step), expected)
        assert_array_equal(ours.trajectory.timeseries(atoms, start=start, stop=stop, step=step),
                           expected[:, atoms.indices])
    assert_array_equal(ours.trajectory.timeseries(atoms[[5, 2, 9]], order="afc"),
                       np.moveaxis(every[:, atoms.indices[[5, 2, 9]]], [0, 1, 2], [1, 0, 2]))
    assert ours.trajectory.ts.frame == 17  # timeseries leaves the reader where it stood


def _trr_with_own_velocity_steps(path, positions, every=3):
    """A TRR (positions in nm) whose frames hold velocities every *every*-th frame and
    forces in frames 1 and 4 only."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    rng = np.random.default_rng(7)
    with TRRFile(path, "w") as handle:
        for i, x in enumerate(positions):
            v = rng.standard_normal(x.shape).astype(np.float32) if i % every == 0 else None
            f = rng.standard_normal(x.shape).astype(np.float32) if i in (1, 4) else None
            handle.write(x, v, f, np.diag([9.0, 8.0, 7.0]).astype(np.float32), 10 * i, 0.5 * i, 0.0, len(x))


@pytest.mark.parametrize("layout", ["plain", "gzip-2-frame-chunks"])
def test_elements_at_their_own_steps_as_the_source_trr(files, adk_frames, layout):
    source = os.path.join(files, "own-steps.trr")
    if not os.path.exists(source):
        _trr_with_own_velocity_steps(source, adk_frames[:8, :50])
    path = _converted(files, source, layout, LAYOUTS[layout])
    from MDAnalysis.coordinates.TRR import TRRReader

    ours, expected = H5MDToolReader(path), TRRReader(source)
    assert len(ours) == len(expected) == 8
    for ts, want in zip(ours, expected):
        _assert_same_frame(ts, want, f"frame {want.frame}")


# -- foreign writers' files -----------------------------------------------------------------


def test_foreign_files_equal_mdanalysis_h5md_reader(files, adk):
    from MDAnalysisTests.datafiles import H5MD_xvf, TPR_xvf

    import foreign

    written = [foreign.mdanalysis_writer(files, *adk)[0], H5MD_xvf]
    for path in written:
        theirs = _quiet_universe(TPR_xvf, path) if path == H5MD_xvf else _quiet_universe(path, format="H5MD")
        ours = h5mda.Universe(path, topology=TPR_xvf) if path == H5MD_xvf else h5mda.Universe(path)
        assert len(ours.trajectory) == len(theirs.trajectory), path
        for ts, expected in zip(ours.trajectory, theirs.trajectory):
            _assert_same_frame(ts, expected, f"{os.path.basename(path)} frame {expected.frame}", converted_time=True)
        theirs.trajectory.close()


def test_file_without_units_reads_as_h5mdtool_reads_it(files):
    """pyh5md without unit attributes: MDAnalysis's H5MDReader refuses to convert; h5mdtool
    reads values without a unit in its own units (nm, ps)."""
    import foreign

    path, expected = foreign.pyh5md_explicit(files)
    raw = _quiet_universe(path, format="H5MD", convert_units=False)
    ours = h5mda.Universe(path)
    assert len(ours.trajectory) == len(raw.trajectory) == expected["n_frames"]
    for ts, stored in zip(ours.trajectory, raw.trajectory):
        assert_array_equal(ts.positions, stored.positions * np.float32(10))
        assert_array_equal(ts.dimensions[:3], stored.dimensions[:3] * np.float32(10))
        assert ts.time == stored.time and ts.data["step"] == stored.data["step"]
    raw.trajectory.close()


def test_fixed_step_interval_file_reads_as_h5mdtool_scans_it(files):
    """pyh5md's fixed step/time interval, which MDAnalysis's H5MDReader cannot index."""
    import foreign
    import h5py

    path, expected = foreign.pyh5md_linear(files)
    ours = h5mda.Universe(path)
    with h5py.File(path, "r") as handle:
        group = handle["particles"][expected["particle_group"].split("/")[-1]]
        positions = group["position/value"][()]
    assert len(ours.trajectory) == expected["n_frames"]
    for ts in ours.trajectory:
        assert_array_equal(ts.positions, positions[ts.frame] * np.float32(10))
        assert ts.data["step"] == expected["step"]["first"] + ts.frame * expected["step"]["interval"]


# -- pickling, processes, locks --------------------------------------------------------------


@pytest.mark.parametrize("layout", ["plain", "zstd-auto-chunks"])
def test_pickled_reader_stands_at_the_same_frame_and_reads_on(adk, adk_layouts, layout):
    ours = h5mda.Universe(adk_layouts[layout], topology=adk[0])
    ours.trajectory[40]
    copy = pickle.loads(pickle.dumps(ours.trajectory))
    _assert_same_frame(copy.ts, ours.trajectory.ts, "after pickling")
    _assert_same_frame(next(copy), next(ours.trajectory), "next after pickling")
    universe_copy = pickle.loads(pickle.dumps(ours))
    assert universe_copy.trajectory.format == "H5MDTOOL"
    assert_array_equal(universe_copy.atoms.positions, ours.atoms.positions)


@pytest.mark.parametrize("layout", ["plain", "zstd-auto-chunks"])
def test_rmsd_with_the_multiprocessing_backend_equals_serial(adk, adk_layouts, layout):
    """Forked workers (the backend's default start method on Linux) read the file at once;
    blocks of one chunk row make each read many times."""
    from MDAnalysis.analysis import rms

    ours = h5mda.Universe(adk_layouts[layout], topology=adk[0], block_bytes=1)
    serial = rms.RMSD(ours, select="name CA").run().results.rmsd
    parallel = rms.RMSD(ours, select="name CA").run(backend="multiprocessing", n_workers=2).results.rmsd
    assert_array_equal(parallel, serial)
    xtc_like = rms.RMSD(_quiet_universe(*adk), select="name CA").run().results.rmsd
    assert np.abs(serial[:, 2] - xtc_like[:, 2]).max() < 1e-4


def _descriptors_of(path):
    """This process's file descriptors open on *path*."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.path.realpath(f"/proc/self/fd/{name}") == os.path.realpath(path):
                found.append(int(name))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc/self/fd"), reason="fork and /proc")
@pytest.mark.parametrize("layout", ["plain", "zstd-auto-chunks"])
def test_forked_child_reads_through_a_handle_of_its_own(adk, adk_layouts, layout):
    """A forked child reading the parent's Universe, and a copy of it, leaves the file
    offsets of the descriptors it shares with its parent where they were, and reads the
    values the parent reads; the parent reads on unharmed. (HDF5's stdio driver reads at
    the descriptor's offset: a child reading through the inherited handle moved the
    parent's, and concurrent children read each other's bytes.)"""
    ours = h5mda.Universe(adk_layouts[layout], topology=adk[0], block_bytes=1)
    expected = {frame: ours.trajectory[frame].positions.copy() for frame in (90, 3, 50, 51)}
    for ts in ours.trajectory[:20]:  # a block read ahead may be pending at the fork
        pass
    shared = _descriptors_of(adk_layouts[layout])
    assert shared, "the reader holds the file open"
    offsets = {fd: os.lseek(fd, 0, os.SEEK_CUR) for fd in shared}
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if every check passes
        status = 1
        try:
            copy = pickle.loads(pickle.dumps(ours))
            same = all(np.array_equal(universe.trajectory[frame].positions, values)
                       for universe in (ours, copy) for frame, values in expected.items())
            walked = sum(1 for _ in ours.trajectory[20:])
            status = 0 if same and walked == len(ours.trajectory) - 20 else 2
        finally:
            os._exit(status)
    assert exit_code_within(pid, timeout=120) == 0
    assert {fd: os.lseek(fd, 0, os.SEEK_CUR) for fd in shared} == offsets
    for frame, values in expected.items():
        assert_array_equal(ours.trajectory[frame].positions, values)
    assert sum(1 for _ in ours.trajectory) == len(ours.trajectory)


def test_open_reader_takes_no_file_lock(adk_layouts):
    """A writer in another process opens the file while the reader holds it open."""
    ours = h5mda.Universe(adk_layouts["plain"])
    code = ("import h5py, sys\n"
            "with h5py.File(sys.argv[1], 'r+') as f: f.attrs['touched'] = 1\n")
    done = subprocess.run([sys.executable, "-c", code, adk_layouts["plain"]], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(ours.trajectory) == 98


#: Opens one file with MDAnalysis's H5MDReader and the H5MDTOOL reader, in both orders,
#: compares frames, and has a writer in another process (HDF5's default locking) open it
#: meanwhile; prints whether the H5MDTOOL reader read through a file object. "old-hdf5"
#: makes the reader take the path of an HDF5 that cannot turn locking off for one file.
_SAME_PROCESS = """
import os, subprocess, sys, warnings
warnings.simplefilter("ignore")
import numpy as np, MDAnalysis as mda
import h5mdtool.mdanalysis as h5mda
top, path, case = sys.argv[1:4]
if case == "old-hdf5":
    import h5mdtool.mdanalysis.reader
    h5mdtool.mdanalysis.reader._hdf5_turns_locking_off = lambda: False
if case == "late":
    import h5py
    h5py.File(path, "r").close()  # HDF5 reads HDF5_USE_FILE_LOCKING at its first open
    os.environ["HDF5_USE_FILE_LOCKING"] = "FALSE"
writer = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
code = "import h5py, sys\\nwith h5py.File(sys.argv[1], 'r+') as f: f.attrs['touched'] = 1\\n"
through = set()
for ours_first in (True, False):
    if ours_first:
        ours = h5mda.Universe(path, topology=top); theirs = mda.Universe(top, path)
    else:
        theirs = mda.Universe(top, path); ours = h5mda.Universe(path, topology=top)
    through.add("file object" if ours.trajectory._raw is not None else "name")
    for frame in (0, 57, 97):
        assert np.array_equal(ours.trajectory[frame].positions, theirs.trajectory[frame].positions), frame
    theirs.trajectory.close()
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=writer)
    assert done.returncode == 0, done.stderr
    ours.trajectory.close()
print(*sorted(through))
"""


@pytest.mark.parametrize("environment", [None, "FALSE", "late", "old-hdf5"],
                         ids=["locking-default", "HDF5_USE_FILE_LOCKING=FALSE", "variable-set-after-first-open",
                              "old-hdf5-file-object"])
def test_no_lock_and_no_clash_with_mdanalysis_reader_in_the_process(tmp_path, adk, adk_layouts, environment):
    """MDAnalysis's H5MDReader and the H5MDTOOL reader open the same file in one process, in
    either order, and read the same values; a writer in another process (HDF5's default
    locking) is not refused. The reader reads by name (HDF5's stdio driver, locking off),
    with or without HDF5_USE_FILE_LOCKING=FALSE, or through a Python file object where
    HDF5 cannot turn locking off for one file."""
    import shutil

    path = str(tmp_path / "own.h5md")
    shutil.copy(adk_layouts["plain"], path)
    env = {key: value for key, value in os.environ.items() if key != "HDF5_USE_FILE_LOCKING"}
    if environment == "FALSE":
        env["HDF5_USE_FILE_LOCKING"] = "FALSE"
    done = subprocess.run([sys.executable, "-c", _SAME_PROCESS, adk[0], path, str(environment)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == ("file object" if environment == "old-hdf5" else "name")


# -- the stored topology ------------------------------------------------------------------


def _assert_same_topology(ours, theirs):
    assert ours.atoms.n_atoms == theirs.atoms.n_atoms
    for attribute in ("names", "types", "resnames", "resids", "segids"):
        assert_array_equal(getattr(ours.atoms, attribute), getattr(theirs.atoms, attribute), err_msg=attribute)
    for attribute in ("masses", "charges", "elements", "chainIDs"):
        if hasattr(theirs.atoms, attribute):
            assert_array_equal(getattr(ours.atoms, attribute), getattr(theirs.atoms, attribute), err_msg=attribute)
    assert len(ours.residues) == len(theirs.residues) and len(ours.segments) == len(theirs.segments)
    theirs_bonds = sorted(map(tuple, np.sort(theirs.atoms.bonds.indices, axis=1))) if hasattr(theirs.atoms, "bonds") else []
    ours_bonds = sorted(map(tuple, np.sort(ours.atoms.bonds.indices, axis=1))) if hasattr(ours.atoms, "bonds") else []
    assert ours_bonds == theirs_bonds


def test_stored_topology_equals_the_psf_it_came_from(files, adk):
    path = _converted(files, adk[1], "with-psf", {}, topology=adk[0])
    theirs = _quiet_universe(adk[0])
    _assert_same_topology(mda.Universe(path), theirs)  # the parser is registered for .h5md files
    _assert_same_topology(h5mda.Universe(path), theirs)
    assert h5mda.Universe(path).select_atoms("name CA").n_atoms == theirs.select_atoms("name CA").n_atoms


def test_stored_topology_equals_the_tpr_it_came_from(files):
    """With its elements (two-letter symbols; ``""`` for the water model's virtual sites) and
    chain IDs, which only a TPR or PDB gives."""
    from MDAnalysisTests.datafiles import TPR_xvf, TRR_xvf

    path = _converted(files, TRR_xvf, "with-tpr", {}, topology=TPR_xvf)
    theirs = _quiet_universe(TPR_xvf)
    assert {"", "Cl", "Na"} <= set(theirs.atoms.elements) and len(set(theirs.atoms.chainIDs)) > 1
    for ours in (mda.Universe(path), h5mda.Universe(path)):
        _assert_same_topology(ours, theirs)
        assert ours.select_atoms("element Na").n_atoms == theirs.select_atoms("element Na").n_atoms > 0


def test_stored_topology_equals_the_gro_it_came_from_for_a_selection(files, solvated):
    path = _converted(files, solvated["TRR"], "protein", {}, topology=solvated["topology"], select="protein")
    theirs = _quiet_universe(solvated["topology"]).select_atoms("protein")
    ours = h5mda.Universe(path)
    assert ours.atoms.n_atoms == theirs.n_atoms
    for attribute in ("names", "resnames", "resids"):
        assert_array_equal(getattr(ours.atoms, attribute), getattr(theirs, attribute), err_msg=attribute)


def test_a_missing_or_foreign_file_is_named_with_what_is_wrong(tmp_path, adk):
    """The parser (topology from the file) and the reader (with a topology file) say the same."""
    (tmp_path / "folder.h5md").mkdir()
    cases = {str(tmp_path / "missing.h5md"): "missing.h5md: no such file",
             adk[1]: "not a readable H5MD file \\(not an HDF5 file",
             str(tmp_path / "folder.h5md"): "folder.h5md: a directory"}
    for path, message in cases.items():
        for arguments in ((path,), (path, adk[0])):
            with pytest.raises(h5mdtool.InputError, match=message):
                h5mda.Universe(*arguments)


def test_file_without_topology_gives_unnamed_atoms(adk_layouts):
    ours = h5mda.Universe(adk_layouts["plain"])
    assert ours.atoms.n_atoms == 3341 and len(ours.residues) == 1
    assert not hasattr(ours.atoms, "names")


@pytest.mark.parametrize("layout", ["plain", "zstd-auto-chunks", "contiguous"])
def test_reader_opens_files_without_hdf5_chunk_cache(adk_layouts, layout):
    """The reader reads whole rows of chunks: HDF5's chunk cache would copy them once more."""
    ours = h5mda.Universe(adk_layouts[layout])
    for reader in (ours.trajectory, pickle.loads(pickle.dumps(ours.trajectory))):
        assert reader._file.id.get_access_plist().get_cache()[2] == 0

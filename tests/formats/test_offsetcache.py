"""The offsets cache gives what a scan of the file gives, or nothing.

The oracle is the scan with the cache off (itself checked against MDAnalysis's offsets and
the collective scan in ``test_xdrscan``). Files are generated as there; the tests make the
cache keep files just written (:data:`~h5mdtool.formats.offsetcache.RECENT_SECONDS` 0) and
check that an entry is found, serves the scan's segment exactly, and that entries which do
not fit the file (damaged, stale, foreign) are refused and removed, never trusted.
"""

import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from h5mdtool.formats import offsetcache, scan_segment
from h5mdtool.formats.registry import REGISTRY
from h5mdtool.parallel.errors import InputError

from test_xdrscan import assert_same_segment, changes, damage, outcome, trajectories, write


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache of its own that keeps files just written; its entries' directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    monkeypatch.delenv(offsetcache.ENVIRONMENT, raising=False)
    monkeypatch.setattr(offsetcache, "RECENT_SECONDS", 0.0)
    return tmp_path / "cache-home" / "h5mdtool" / "offsets"


def uncached(path, **kwargs):
    """The scan with the cache off."""
    saved = os.environ.get(offsetcache.ENVIRONMENT)
    os.environ[offsetcache.ENVIRONMENT] = "off"
    try:
        return scan_segment(path, **kwargs)
    finally:
        if saved is None:
            del os.environ[offsetcache.ENVIRONMENT]
        else:
            os.environ[offsetcache.ENVIRONMENT] = saved


def entries(directory):
    return sorted(name for name in os.listdir(directory)) if os.path.isdir(directory) else []


def cls_of(path):
    return REGISTRY[os.path.splitext(path)[1][1:].upper()]


def adk_xtc(directory, adk_frames, n_frames=40):
    path = str(directory / "adk.xtc")
    write(path, "XTC", 3341, [(xyz, "x") for xyz in adk_frames[:n_frames]])
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trajectory=trajectories(), change=changes)
def test_a_cached_scan_equals_the_scan(tmp_path, monkeypatch, trajectory, change):
    """Scanned once (and kept when whole), scanned again (found): the same segment or the
    same error as the scan with the cache off, on any generated, possibly damaged, file."""
    cache_home = tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.setattr(offsetcache, "RECENT_SECONDS", 0.0)
    kind, n_atoms, frames = trajectory
    path = str(tmp_path / f"t.{kind.lower()}")
    write(path, kind, n_atoms, frames)
    damage(path, change)
    for on_truncated in ("drop", "error"):
        expected, message = outcome(lambda: uncached(path, on_truncated=on_truncated))
        for _ in range(2):  # the first may keep it, the second finds it
            segment, error = outcome(lambda: scan_segment(path, on_truncated=on_truncated))
            assert error == message
            if expected is not None:
                assert_same_segment(segment, expected)
        stat, found = offsetcache.lookup(cls_of(path), path)
        whole = expected is not None and expected.dropped is None
        assert (found is not None) == whole
        if found is not None:
            np.testing.assert_array_equal(found[0], expected.offsets)
    os.remove(path)


def test_kept_outside_the_input_directory_and_found_again(tmp_path, cache, adk_frames):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = adk_xtc(inputs, adk_frames)
    first = scan_segment(path)
    assert os.listdir(inputs) == ["adk.xtc"]  # nothing beside the input
    (entry,) = entries(cache)
    assert entry.endswith(".npz")  # no temporary left
    stat, found = offsetcache.lookup(cls_of(path), path)
    assert found is not None
    np.testing.assert_array_equal(found[0], first.offsets)
    assert_same_segment(scan_segment(path), uncached(path))


def test_a_name_that_is_not_utf8(cache, tmp_path, adk_frames):
    """Bytes 0xff 0xfe in the file's name (lone surrogates in Python): kept and found."""
    written = adk_xtc(tmp_path, adk_frames, 10)  # MDAnalysis's writer takes UTF-8 names only
    path = os.path.join(tmp_path, os.fsdecode(b"run\xff\xfe.xtc"))
    os.rename(written, path)
    assert_same_segment(scan_segment(path), uncached(path))
    assert len(entries(cache)) == 1
    assert offsetcache.lookup(cls_of(path), path)[1] is not None


def test_off_keeps_nothing(cache, tmp_path, adk_frames, monkeypatch):
    path = adk_xtc(tmp_path, adk_frames)
    for setting in ("off", "0", "no", "FALSE"):
        monkeypatch.setenv(offsetcache.ENVIRONMENT, setting)
        scan_segment(path)
        assert not cache.exists()
        assert offsetcache.lookup(cls_of(path), path)[1] is None


def test_where_it_lives(monkeypatch, tmp_path):
    monkeypatch.delenv(offsetcache.ENVIRONMENT, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert offsetcache.cache_directory() == str(tmp_path / "xdg" / "h5mdtool" / "offsets")
    for ignored in ("", "relative/cache"):  # the XDG specification: only absolute paths count
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert offsetcache.cache_directory() == str(tmp_path / "home" / ".cache" / "h5mdtool" / "offsets")
    monkeypatch.setenv("HOME", "relative-home")
    assert offsetcache.cache_directory() is None  # never relative to the working directory


def test_a_file_just_written_is_not_kept(cache, tmp_path, adk_frames, monkeypatch):
    monkeypatch.setattr(offsetcache, "RECENT_SECONDS", 5.0)
    path = adk_xtc(tmp_path, adk_frames)
    scan_segment(path)
    assert entries(cache) == []
    old = time.time() - 60
    os.utime(path, (old, old))
    scan_segment(path)
    assert len(entries(cache)) == 1


def test_a_file_changed_during_its_scan_is_not_kept(cache, tmp_path, adk_frames):
    path = adk_xtc(tmp_path, adk_frames)
    before = os.stat(path)
    segment = uncached(path)
    with open(path, "ab") as handle:  # a simulation appending a frame meanwhile
        handle.write(b"\0" * 4)
    offsetcache.store(cls_of(path), path, before, segment.offsets, np.zeros((segment.n_frames, 60), np.uint8))
    assert entries(cache) == []


def test_an_appended_file_is_scanned_again(cache, tmp_path, adk_frames):
    path = adk_xtc(tmp_path, adk_frames, 20)
    assert scan_segment(path).n_frames == 20
    write(path, "XTC", 3341, [(xyz, "x") for xyz in adk_frames[:30]])  # rewritten in place, longer
    assert_same_segment(scan_segment(path), uncached(path))
    assert scan_segment(path).n_frames == 30


def test_an_entry_whose_sample_disagrees_is_refused_and_removed(cache, tmp_path, adk_frames, monkeypatch):
    """A file changed in place without a new key (the key made blind to times here): the
    sampled headers are walked again, the change is seen, the entry goes and the file is
    scanned, giving the scan's error."""
    monkeypatch.setattr(offsetcache, "entry_key", lambda name, path, stat: f"{name} {path} {stat.st_size}")
    path = adk_xtc(tmp_path, adk_frames)
    offsets = scan_segment(path).offsets
    assert len(entries(cache)) == 1
    sampled = offsetcache.sample_frames(len(offsets) - 1)
    assert len(sampled) == min(40, offsetcache.SAMPLE_FRAMES + 2)
    frame = int(sampled[len(sampled) // 2])
    with open(path, "r+b") as handle:
        handle.seek(int(offsets[frame]))
        handle.write(struct.pack(">i", 1234))  # the frame's magic number
    assert offsetcache.lookup(cls_of(path), path)[1] is None
    assert entries(cache) == []
    with pytest.raises(InputError) as cached:
        scan_segment(path)
    with pytest.raises(InputError) as scanned:
        uncached(path)
    assert str(cached.value) == str(scanned.value) and "magic number 1234" in str(cached.value)


@pytest.mark.parametrize("content", [b"", b"not a zip file", b"PK\x03\x04 cut short"])
def test_a_damaged_entry_is_no_entry(cache, tmp_path, adk_frames, content):
    path = adk_xtc(tmp_path, adk_frames)
    scan_segment(path)
    (entry,) = entries(cache)
    (cache / entry).write_bytes(content)
    assert offsetcache.lookup(cls_of(path), path)[1] is None
    assert entries(cache) == []  # removed
    assert_same_segment(scan_segment(path), uncached(path))


def test_an_entry_of_other_arrays_is_no_entry(cache, tmp_path, adk_frames):
    path = adk_xtc(tmp_path, adk_frames)
    scan_segment(path)
    (entry,) = entries(cache)
    key = offsetcache.entry_key("XTC", path, os.stat(path))
    for offsets in (np.array([0, 10**12]), np.arange(41, dtype=np.int64)[::-1].copy(), np.zeros(3, np.int64)):
        np.savez(cache / entry, key=np.array(key), offsets=offsets, rows=np.zeros((len(offsets) - 1, 60), np.uint8))
        assert offsetcache.lookup(cls_of(path), path)[1] is None
    np.savez(cache / entry, key=np.array("another file"), offsets=np.zeros(2, np.int64), rows=np.zeros((1, 60), np.uint8))
    assert offsetcache.lookup(cls_of(path), path)[1] is None


def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path, adk_frames, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(offsetcache, "RECENT_SECONDS", 0.0)
    path = adk_xtc(tmp_path, adk_frames)
    assert_same_segment(scan_segment(path), uncached(path))


def test_least_recently_used_entries_go_first(tmp_path):
    directory = tmp_path / "offsets"
    directory.mkdir()
    now = time.time()
    for number in range(5):
        entry = directory / f"{number}.npz"
        entry.write_bytes(b"x" * 100)
        os.utime(entry, (now - 100 + number, now - 100 + number))
    stale = directory / ".entry-old.tmp"
    stale.write_bytes(b"")
    os.utime(stale, (now - 2 * offsetcache.STALE_TEMPORARY,) * 2)
    running = directory / ".entry-new.tmp"
    running.write_bytes(b"")
    offsetcache.prune(str(directory), max_bytes=250)
    assert entries(directory) == [".entry-new.tmp", "3.npz", "4.npz"]


def test_a_command_keeps_it_and_the_next_finds_it(tmp_path, adk_frames):
    """``h5mdtool convert`` twice from an XTC last modified long ago: the first keeps its scan
    under $XDG_CACHE_HOME, the second finds it (the entry's time is renewed on use); the
    same frames converted, nothing beside the input."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = adk_xtc(inputs, adk_frames)
    old = time.time() - 3600
    os.utime(path, (old, old))
    home = tmp_path / "home"
    directory = home / "h5mdtool" / "offsets"
    environment = dict(os.environ, XDG_CACHE_HOME=str(home))
    environment.pop(offsetcache.ENVIRONMENT, None)

    def convert(output):
        return subprocess.run([sys.executable, "-m", "h5mdtool", "convert", path, "-o", str(tmp_path / output),
                               "--no-progress", "--json"], capture_output=True, text=True, env=environment,
                              timeout=300)

    first = convert("first.h5md")
    assert first.returncode == 0, first.stderr
    (entry,) = entries(directory)
    os.utime(directory / entry, (old, old))
    second = convert("second.h5md")
    assert second.returncode == 0, second.stderr
    assert os.stat(directory / entry).st_mtime > old + 1800
    assert entries(directory) == [entry]
    assert os.listdir(inputs) == ["adk.xtc"]
    import h5py

    with h5py.File(tmp_path / "first.h5md", "r") as a, h5py.File(tmp_path / "second.h5md", "r") as b:
        np.testing.assert_array_equal(a["particles/trajectory/position/value"][()], b["particles/trajectory/position/value"][()])
        assert len(a["particles/trajectory/position/value"]) == 40


@pytest.mark.mpi
def test_collective_scans_keep_and_find_it(comm, shared_tmp, adk_frames, monkeypatch, tmp_path):
    """Scanned by every rank together, kept by rank 0; the next collective scan is rank 0's
    lookup, broadcast: on every rank the segment of the scan with the cache off."""
    monkeypatch.setenv("XDG_CACHE_HOME", os.path.join(shared_tmp, "home"))
    monkeypatch.setattr(offsetcache, "RECENT_SECONDS", 0.0)
    path = os.path.join(shared_tmp, "adk.xtc")
    if comm.rank == 0:
        write(path, "XTC", 3341, [(xyz, "x") for xyz in adk_frames[:40]])
    comm.Barrier()
    expected = uncached(path)
    for _ in range(2):
        assert_same_segment(scan_segment(path, comm=comm), expected)
        comm.Barrier()
        if comm.rank == 0:
            assert len(entries(os.path.join(shared_tmp, "home", "h5mdtool", "offsets"))) == 1
    comm.Barrier()


def test_bench_says_where_the_offsets_came_from(cache, tmp_path, adk_frames):
    """bench rmsd's input record: scanned the first time, from the cache the next; a
    trajectory of several files says how many came from it."""
    from h5mdtool.bench.inputs import inspect_input, offsets_origin

    path = adk_xtc(tmp_path, adk_frames)
    assert inspect_input([path]).layout["offsets"] == "scanned"
    info = inspect_input([path])
    assert info.layout["offsets"] == "from the offsets cache"
    assert all(segment.cached for segment in info.index.segments)
    fresh = uncached(path)
    assert not fresh.cached
    assert offsets_origin([fresh, info.index.segments[0]], True) == \
        "scanned by all ranks together; 1 of 2 files from the offsets cache"

"""h5mdtool convert: round trips through MDAnalysis's own readers, layout, MPI splits."""

import os
import stat
import sys

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError, OutputError, OverlapError, UsageError
from h5mdtool.h5md.writer import read_provenance
from h5mdtool.parallel.mpi import SerialComm


def assert_same_trajectory(source, written, exact=True, steps=None):
    """Every frame of *written* (H5MD, read by MDAnalysis) equals *source* (a Universe)."""
    copy = written
    assert copy.trajectory.n_frames == source.trajectory.n_frames
    for ts_source, ts_copy in zip(source.trajectory, copy.trajectory):
        if exact:
            np.testing.assert_array_equal(ts_copy.positions, ts_source.positions)
        else:  # Angstrom -> nm -> Angstrom in float32
            np.testing.assert_allclose(ts_copy.positions, ts_source.positions, rtol=2.5e-7, atol=1e-6)
        assert ts_copy.time == pytest.approx(ts_source.time, rel=1e-12, abs=1e-12)
        if ts_source.dimensions is None:
            assert ts_copy.dimensions is None
        else:
            np.testing.assert_allclose(ts_copy.dimensions, ts_source.dimensions, rtol=1e-5)
        if ts_source.has_velocities:
            np.testing.assert_array_equal(ts_copy.velocities, ts_source.velocities)
        if steps is None:
            assert ts_copy.data["step"] == ts_source.data["step"]
        else:
            assert ts_copy.data["step"] == steps[ts_source.frame]
    return copy


LAYOUTS = [
    {},
    {"compression": "gzip", "chunk_frames": 3},
    {"compression": "lzf", "shuffle": False},
    {"contiguous": True},
]


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["XTC", "TRR"])
@pytest.mark.parametrize("options", LAYOUTS, ids=["plain", "gzip-k3", "lzf", "contiguous"])
def test_xdr_round_trip(comm, shared_tmp, solvated, fmt, options):
    output = os.path.join(shared_tmp, "out.h5md")
    if options.get("compression") == "lzf" and comm.size > 1:
        with pytest.raises(UsageError, match="lzf cannot be written in parallel"):
            convert(solvated[fmt], output, comm=comm, progress=False, **options)
        assert not os.path.exists(output)
        return
    summary = convert(solvated[fmt], output, comm=comm, progress=False, **options)
    assert summary["n_frames"] == 10 and summary["n_atoms"] == 47681
    assert summary["fields"] == (["positions", "velocities"] if fmt == "TRR" else ["positions"])
    comm.Barrier()
    source = mda.Universe(solvated["topology"], solvated[fmt])
    copy = mda.Universe(solvated["topology"], output)
    assert_same_trajectory(source, copy)
    assert copy.trajectory.has_velocities == (fmt == "TRR")
    assert not copy.trajectory.has_forces


@pytest.mark.mpi
@pytest.mark.parametrize("options", LAYOUTS[:2], ids=["plain", "gzip-k3"])
def test_dcd_round_trip(comm, shared_tmp, adk, options):
    output = os.path.join(shared_tmp, "adk.h5md")
    convert(adk[1], output, comm=comm, progress=False, **options)
    comm.Barrier()
    source = mda.Universe(*adk)
    copy = mda.Universe(adk[0], output)
    # DCD steps are istart + frame * nsavc (1000, 2000, ...): integration steps.
    assert_same_trajectory(source, copy, exact=False, steps=1000 + 1000 * np.arange(98))
    with h5py.File(output, "r") as f:
        assert list(f["particles/trajectory/box"].attrs["boundary"]) == [b"none"] * 3
        assert "edges" not in f["particles/trajectory/box"]


@pytest.mark.mpi
def test_mdanalysis_reads_with_mpio(comm, shared_tmp, solvated):
    output = os.path.join(shared_tmp, "out.h5md")
    convert(solvated["TRR"], output, comm=comm, progress=False, compression="gzip")
    comm.Barrier()
    kwargs = {"driver": "mpio", "comm": comm} if comm.size > 1 else {}
    copy = mda.Universe(solvated["topology"], output, **kwargs)
    source = mda.Universe(solvated["topology"], solvated["TRR"])
    # each rank reads its own frames, as an MPI analysis would
    frames = np.array_split(np.arange(10), comm.size)[comm.rank]
    try:
        for frame in frames:
            np.testing.assert_array_equal(copy.trajectory[frame].positions, source.trajectory[frame].positions)
            np.testing.assert_array_equal(copy.trajectory[frame].velocities, source.trajectory[frame].velocities)
    finally:
        # closing an MPI-IO file is collective: never leave it to the garbage collector,
        # which would run on one rank at a random time and hang the job
        copy.trajectory.close()


@pytest.mark.mpi
@pytest.mark.parametrize(
    "selection, chunk_frames",
    [({"stop": 2}, 1), ({}, 5), ({"start": 3, "stop": 4}, 1), ({"step": 4}, 2)],
    ids=["2-frames", "2-chunks", "1-frame", "stride"],
)
def test_ranks_without_frames(comm, shared_tmp, adk_segments, adk_frames, selection, chunk_frames):
    """Fewer chunks than ranks: the idle ranks still take part in every collective write."""
    output = os.path.join(shared_tmp, "few.h5md")
    summary = convert(
        adk_segments["whole"], output, comm=comm, progress=False, compression="gzip",
        chunk_frames=chunk_frames, stop=selection.get("stop", 10), start=selection.get("start"),
        step=selection.get("step"),
    )
    frames = np.arange(98)[slice(selection.get("start"), selection.get("stop", 10), selection.get("step"))]
    assert summary["n_frames"] == len(frames)
    comm.Barrier()
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][:], frames * 10)
    reference = mda.Universe(adk_segments["whole"])
    written = mda.Universe(output)
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(written.trajectory[i].positions, reference.trajectory[frame].positions)


@pytest.mark.mpi
@pytest.mark.parametrize("block_bytes", [None, 3 * 3341 * 12], ids=["one-block", "small-blocks"])
def test_segments_concatenate(comm, shared_tmp, adk_segments, block_bytes):
    """Three segments give the same file content as the whole trajectory."""
    kwargs = {} if block_bytes is None else {"block_bytes": block_bytes}
    parts = os.path.join(shared_tmp, "parts.h5md")
    whole = os.path.join(shared_tmp, "whole.h5md")
    convert(adk_segments["parts"], parts, comm=comm, progress=False, **kwargs)
    convert(adk_segments["whole"], whole, comm=comm, progress=False)
    comm.Barrier()
    with h5py.File(parts, "r") as a, h5py.File(whole, "r") as b:
        for name in ("position/value", "position/step", "position/time", "box/edges/value"):
            np.testing.assert_array_equal(a[f"particles/trajectory/{name}"][:], b[f"particles/trajectory/{name}"][:])
        record = read_provenance(a)
    assert [os.path.basename(i["path"]) for i in record["inputs"]] == ["part0.xtc", "part1.xtc", "part2.xtc"]
    assert record["n_ranks"] == comm.size


@pytest.mark.mpi
def test_default_block_size_by_rank_count(comm, shared_tmp, adk_segments):
    """32 MiB blocks on one rank, 2 MiB per rank on several; the frames come back intact."""
    from h5mdtool.conversion.convert import default_block_bytes

    output = os.path.join(shared_tmp, "blocks.h5md")
    summary = convert(adk_segments["whole"], output, comm=comm, progress=False, compression="zstd", chunk_frames=5)
    assert summary["block_bytes"] == (32 if comm.size == 1 else 2) * 1024**2
    assert default_block_bytes(1) == 32 * 1024**2 and default_block_bytes(3) == 2 * 1024**2
    comm.Barrier()
    assert_same_trajectory(mda.Universe(adk_segments["whole"]), mda.Universe(output))


def _nice():
    """The Linux nice value of the calling thread."""
    import threading

    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.mpi
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_compressed_writes_give_way_to_decoding_on_several_ranks(comm, shared_tmp, adk_segments, monkeypatch,
                                                                 compression):
    """On several ranks compressed writes run at nice 19, decoding at the caller's priority;
    uncompressed writes, and everything on one rank, stay in the caller's thread. The
    caller's priority is unchanged after; the frames come back intact."""
    import threading

    from h5mdtool.h5md.writer import TrajectoryWriter

    caller = threading.get_native_id()
    nice_before = _nice()
    seen = {"write": set(), "prepare": set()}
    for method in seen:
        original = getattr(TrajectoryWriter, method)

        def recorded(self, *args, _original=original, _method=method, **kwargs):
            seen[_method].add((threading.get_native_id() == caller, _nice()))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(TrajectoryWriter, method, recorded)
    output = os.path.join(shared_tmp, "priority.h5md")
    convert(adk_segments["whole"], output, comm=comm, progress=False, compression=compression, chunk_frames=3,
            block_bytes=1)
    assert _nice() == nice_before
    assert seen["prepare"] == {(False, nice_before)}  # the decoding thread
    if comm.size == 1 or compression == "none":
        assert seen["write"] == {(True, nice_before)}
    else:
        assert seen["write"] == {(False, max(nice_before, 19))}
    comm.Barrier()
    assert_same_trajectory(mda.Universe(adk_segments["whole"]), mda.Universe(output))


@pytest.mark.mpi
def test_giving_way_to_workers_returns_and_raises(comm):
    from h5mdtool.parallel.mpi import call_giving_way_to_workers

    assert call_giving_way_to_workers(lambda: comm.allreduce(comm.rank + 1), comm) == comm.size * (comm.size + 1) // 2
    with pytest.raises(ZeroDivisionError):
        call_giving_way_to_workers(lambda: 1 / 0, comm)


@pytest.mark.mpi
def test_overlap_refused_or_dropped(comm, shared_tmp, adk_segments):
    first, second = adk_segments["parts"][:2]
    output = os.path.join(shared_tmp, "overlap.h5md")
    # part0 twice: the second copy overlaps completely
    with pytest.raises(OverlapError, match="overlap"):
        convert([first, second, first], output, comm=comm, progress=False)
    assert not os.path.exists(output)
    summary = convert([first, second, first], output, comm=comm, progress=False, on_overlap="drop")
    assert summary["n_frames"] == 70
    comm.Barrier()
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][:], np.arange(70) * 10)


def test_partial_overlap_dropped(tmp_path, adk_frames):
    """A restart that repeats the last 5 frames: the repeated frames are dropped."""
    from conftest import write_xtc

    a, b = str(tmp_path / "a.xtc"), str(tmp_path / "b.xtc")
    write_xtc(a, adk_frames[:20], np.arange(20) * 10, np.arange(20) * 2.0)
    write_xtc(b, adk_frames[15:40], np.arange(15, 40) * 10, np.arange(15, 40) * 2.0)
    output = str(tmp_path / "out.h5md")
    summary = convert([a, b], output, on_overlap="drop", progress=False)
    assert summary["n_frames"] == 40
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][:], np.arange(40) * 10)
        written = f["particles/trajectory/position/value"][:]
    expected = np.concatenate([
        [ts.positions / 10 for ts in mda.Universe(a).trajectory],
        [ts.positions / 10 for ts in mda.Universe(b).trajectory[5:]],
    ])
    np.testing.assert_allclose(written, expected, rtol=1e-6)


def test_steps_going_backwards_inside_a_file(tmp_path, adk_frames):
    path = str(tmp_path / "bad.xtc")
    steps = np.arange(10) * 10
    steps[6] = 20
    from conftest import write_xtc

    write_xtc(path, adk_frames[:10], steps, np.arange(10, dtype=float))
    output = str(tmp_path / "out.h5md")
    with pytest.raises(InputError, match="frame 6 has step 20 after step 50"):
        convert(path, output, progress=False)
    assert not os.path.exists(output)
    assert os.listdir(tmp_path) == ["bad.xtc"]


@pytest.mark.mpi
def test_metadata_units_and_links(comm, shared_tmp, solvated):
    output = os.path.join(shared_tmp, "meta.h5md")
    convert(solvated["TRR"], output, comm=comm, progress=False, chunk_frames=4, author="Ada")
    comm.Barrier()
    with h5py.File(output, "r") as f:
        assert list(f["h5md"].attrs["version"]) == [1, 1]
        # fixed-length ASCII strings, as H5MD 1.1 asks
        assert f["h5md/author"].attrs["name"] == b"Ada"
        assert f["h5md/creator"].attrs["name"] == b"h5mdtool"
        assert list(f["h5md/modules/units"].attrs["version"]) == [1, 0]
        traj = f["particles/trajectory"]
        assert traj["box"].attrs["dimension"] == 3
        assert list(traj["box"].attrs["boundary"]) == [b"periodic"] * 3
        assert traj["position/value"].attrs["unit"] == "nm"
        assert traj["velocity/value"].attrs["unit"] == "nm ps-1"
        assert traj["position/time"].attrs["unit"] == "ps"
        assert traj["box/edges/value"].attrs["unit"] == "nm"
        assert traj["position/value"].dtype == np.float32
        assert traj["position/step"].dtype == np.int64
        assert traj["position/time"].dtype == np.float64
        assert traj["position/value"].chunks == (4, 47681, 3)
        for element in ("velocity", "box/edges"):
            assert traj[f"{element}/step"] == traj["position/step"]  # same object: hard link
            assert traj[f"{element}/time"] == traj["position/time"]
        record = read_provenance(f)
    assert record["layout"]["chunk_frames"] == 4
    assert record["fields"] == ["positions", "velocities", "box"]
    assert record["versions"]["HDF5"] == h5py.version.hdf5_version
    assert record["inputs"][0]["size"] == os.path.getsize(solvated["TRR"])
    assert record["n_ranks"] == comm.size


@pytest.mark.mpi
def test_atom_selection(comm, shared_tmp, adk):
    output = os.path.join(shared_tmp, "ca.h5md")
    summary = convert(adk[1], output, comm=comm, topology=adk[0], select="name CA", progress=False, stop=20)
    comm.Barrier()
    source = mda.Universe(*adk)
    ca = source.select_atoms("name CA")
    assert summary["n_atoms"] == len(ca) == 214
    copy = mda.Universe(output)
    for ts in copy.trajectory:
        source.trajectory[ts.frame]
        np.testing.assert_allclose(ts.positions, ca.positions, rtol=2.5e-7, atol=1e-6)


def test_trr_without_velocities_flag(tmp_path, solvated):
    output = str(tmp_path / "x.h5md")
    summary = convert(solvated["TRR"], output, velocities=False, progress=False)
    assert summary["fields"] == ["positions"]
    with h5py.File(output, "r") as f:
        assert "velocity" not in f["particles/trajectory"]


def test_existing_output_needs_force(tmp_path, adk):
    output = tmp_path / "out.h5md"
    output.write_text("precious")
    with pytest.raises(OutputError, match="--force"):
        convert(adk[1], str(output), progress=False)
    assert output.read_text() == "precious"
    convert(adk[1], str(output), force=True, progress=False, stop=3)
    with h5py.File(output, "r") as f:
        assert f["particles/trajectory/position/value"].shape == (3, 3341, 3)


def _special_file(kind, path):
    if kind == "pipe":
        os.mkfifo(path)
    elif kind == "character device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    else:  # a symbolic link to a device, as /dev/stdout is
        os.symlink("/dev/null", path)


@pytest.mark.parametrize("kind", ["pipe", "character device", "link to a device"])
def test_devices_and_pipes_are_never_replaced_by_an_output(tmp_path, adk, kind):
    """``-o /dev/null --force`` renamed the new file over the device (as root: over the
    machine's /dev/null); a pipe or a link to a device was replaced the same way."""
    from conftest import run_h5mdtool

    node, h5md_node = str(tmp_path / "node.gro"), str(tmp_path / "node.h5md")  # names that fit each output
    for path in (node, h5md_node):
        _special_file(kind, path)
    before = {path: os.lstat(path) for path in (node, h5md_node)}
    h5md = str(tmp_path / "t.h5md")
    convert(adk[1], h5md, topology=adk[0], progress=False, stop=2)
    commands = [(h5md_node, ["convert", adk[1], "-o", h5md_node, "--force"]),
                (node, ["bench", "rmsd", h5md, "-t", adk[0], "--out", node, "--force"]),
                (node, ["topology", h5md, "-o", node, "--force"])]
    for path, args in commands:
        result = run_h5mdtool(args)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.startswith(f"error: {path}: is a ") and "not a regular file" in result.stderr
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino, after.st_rdev) == (before[path].st_mode, before[path].st_ino,
                                                                before[path].st_rdev)
    assert sorted(os.listdir(tmp_path)) == ["node.gro", "node.h5md", "t.h5md"]


@pytest.mark.parametrize("name", ["", "out/", ".", "out/..", "out/."])
def test_output_names_that_name_no_file_are_refused(tmp_path, adk, name):
    """``-o out/`` made a file named ``out``; ``-o ''`` wrote its temporary into the parent
    of the working directory and then failed to rename it over that directory."""
    from conftest import run_h5mdtool

    work = tmp_path / "work"
    work.mkdir()
    h5md = str(tmp_path / "t.h5md")
    convert(adk[1], h5md, topology=adk[0], progress=False, stop=2)
    commands = [["convert", adk[1], "-o", name], ["bench", "rmsd", h5md, "-t", adk[0], "--out", name],
                ["bench", "rmsd", h5md, "-t", adk[0], "--plot", name]]
    for args in commands:
        result = run_h5mdtool(args, cwd=work)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and ("names a directory" in result.stderr
                                                  or "the output file name is empty" in result.stderr), result.stderr
    assert sorted(os.listdir(tmp_path)) == ["t.h5md", "work"] and os.listdir(work) == []


def test_output_is_input_refused(tmp_path, adk_frames):
    from conftest import write_xtc

    path = str(tmp_path / "in.xtc")
    write_xtc(path, adk_frames[:3], [0, 1, 2], [0.0, 1.0, 2.0])
    before = open(path, "rb").read()
    with pytest.raises(UsageError, match="in.xtc: .xtc names XTC, but the output is H5MD"):
        convert(path, path, force=True, progress=False)  # refused by its name before anything is read
    assert open(path, "rb").read() == before
    renamed = str(tmp_path / "in.h5md")
    os.rename(path, renamed)
    with pytest.raises(OutputError, match="one of the inputs"):
        convert(renamed, renamed, force=True, progress=False, format="XTC")
    assert open(renamed, "rb").read() == before


@pytest.mark.parametrize(
    "options, message",
    [
        ({"contiguous": True, "compression": "gzip"}, "--contiguous"),
        ({"compression": "lzf", "compression_level": 3}, "does not apply to lzf"),
        ({"compression": "zstd", "compression_level": 30}, "zstd level must be 1-22"),
        ({"compression": "brotli"}, "unknown compression"),
        ({"chunk_frames": 0}, "chunk-frames"),
        ({"stripe_size": 1000}, "multiple of 64K"),
        ({"step": 0}, "positive"),
    ],
)
def test_usage_errors(tmp_path, adk, options, message):
    output = tmp_path / "out.h5md"
    with pytest.raises(UsageError, match=message):
        convert(adk[1], str(output), progress=False, **options)
    assert not output.exists()


@pytest.mark.parametrize("options, message", [
    ({"select": "name CA"}, "--topology"),
    ({"start": 200}, "--start 200 selects no frame: the trajectory has 98 frame"),
    ({"start": 5, "stop": 5}, "--start 5 --stop 5 is an empty range: it starts at frame 5 and stops before frame 5"),
])
def test_options_that_do_not_fit_the_input_are_input_errors(tmp_path, adk, options, message):
    output = tmp_path / "out.h5md"
    with pytest.raises(InputError, match=message):
        convert(adk[1], str(output), progress=False, **options)
    assert not output.exists()


@pytest.mark.mpi
def test_many_chunks_compressed_in_parallel(comm, shared_tmp):
    """60000 one-frame gzip chunks: parallel HDF5 1.10's v1 B-tree chunk index fails here
    ("writev: Bad address" and a hang); the 1.10 file format h5mdtool writes does not."""
    from conftest import write_xtc

    source = os.path.join(shared_tmp, "long.xtc")
    rng = np.random.default_rng(7)
    positions = rng.random((60000, 10, 3), dtype=np.float32)
    if comm.rank == 0:
        write_xtc(source, positions, np.arange(60000), np.arange(60000) * 0.5)
    comm.Barrier()
    output = os.path.join(shared_tmp, "long.h5md")
    summary = convert(source, output, comm=comm, progress=False, compression="gzip", chunk_frames=1)
    assert summary["n_frames"] == 60000
    comm.Barrier()
    with h5py.File(output, "r") as f:
        value = f["particles/trajectory/position/value"]
        assert value.chunks == (1, 10, 3)
        np.testing.assert_allclose(value[-5:], positions[-5:], atol=6e-4)  # XTC precision 0.001 nm
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][:], np.arange(60000))


@pytest.mark.parametrize("fake_lfs", [False, True], ids=["no-lfs", "fake-lfs"])
def test_stripe_settings_recorded_and_applied(tmp_path, adk, monkeypatch, fake_lfs):
    log = tmp_path / "lfs.log"
    if fake_lfs:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        script = bin_dir / "lfs"
        script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nfor a; do last=$a; done\n: > "$last"\n')
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    else:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    output = str(tmp_path / "striped.h5md")
    summary = convert(adk[1], output, stripe_count=4, stripe_size="1M", progress=False, stop=5)
    with h5py.File(output, "r") as f:
        record = read_provenance(f)
    assert record["layout"]["stripe_count"] == 4
    assert record["layout"]["stripe_size"] == 1024**2
    if fake_lfs:
        assert summary["stripe_applied"] == record["stripe_applied"] == "applied"
        args = log.read_text().split()
        assert args[:5] == ["setstripe", "-c", "4", "-S", str(1024**2)]
        assert args[5].endswith(".tmp") and os.path.dirname(args[5]) == str(tmp_path)
    else:
        assert summary["stripe_applied"] == "lfs not found"


@pytest.mark.mpi
def test_mpi_io_hints_under_mpi(comm, shared_tmp, adk):
    output = os.path.join(shared_tmp, "hints.h5md")
    convert(adk[1], output, comm=comm, stripe_count=2, stripe_size="1M", progress=False, stop=12, compression="gzip")
    comm.Barrier()
    with h5py.File(output, "r") as f:
        record = read_provenance(f)
        assert f["particles/trajectory/position/value"].shape == (12, 3341, 3)
    expected = {"striping_factor": 2, "striping_unit": 1024**2} if comm.size > 1 else {}
    assert record["mpi_io_hints"] == expected


def write_trr(path, positions, velocities, forces, steps, times, box):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    with TRRFile(path, "w") as handle:
        for x, v, f, step, time in zip(positions, velocities, forces, steps, times):
            handle.write(x, v, f, box, int(step), float(time), 0.0, len(x))


@pytest.mark.mpi
def test_trr_with_forces(comm, shared_tmp, adk_frames):
    source = os.path.join(shared_tmp, "xvf.trr")
    rng = np.random.default_rng(3)
    velocities = rng.normal(size=adk_frames[:12].shape).astype(np.float32)
    forces = rng.normal(scale=100, size=adk_frames[:12].shape).astype(np.float32)
    box = np.diag([8.0, 8.0, 8.0]).astype(np.float32)
    if comm.rank == 0:
        write_trr(source, adk_frames[:12], velocities, forces, np.arange(12) * 5, np.arange(12) * 0.01, box)
    comm.Barrier()
    output = os.path.join(shared_tmp, "xvf.h5md")
    summary = convert(source, output, comm=comm, progress=False, compression="gzip", chunk_frames=5)
    assert summary["fields"] == ["positions", "velocities", "forces"]
    comm.Barrier()
    with h5py.File(output, "r") as f:
        traj = f["particles/trajectory"]
        assert traj["force/value"].attrs["unit"] == "kJ mol-1 nm-1"
        assert traj["force/step"] == traj["position/step"]
        np.testing.assert_array_equal(traj["force/value"][:], forces)
        np.testing.assert_array_equal(traj["velocity/value"][:], velocities)
    source_universe = mda.Universe(source)
    copy = mda.Universe(output)
    for a, b in zip(source_universe.trajectory, copy.trajectory):
        np.testing.assert_array_equal(b.positions, a.positions)
        np.testing.assert_array_equal(b.velocities, a.velocities)
        np.testing.assert_array_equal(b.forces, a.forces)
        np.testing.assert_allclose(b.dimensions, a.dimensions)
        assert b.time == pytest.approx(a.time) and b.data["step"] == a.data["step"]
    if comm.rank == 0:
        no_forces = os.path.join(shared_tmp, "xv.h5md")
        assert convert(source, no_forces, comm=SerialComm(), forces=False, progress=False)["fields"] == ["positions", "velocities"]


def test_preallocate_reserves_without_garbage(tmp_path, adk):
    from h5mdtool.parallel.outputs import preallocate

    path = tmp_path / "space"
    path.write_bytes(b"")
    reserved = preallocate(str(path), 1 << 20)  # False where fallocate is unsupported
    assert path.stat().st_size == (1 << 20 if reserved else 0)
    # an uncompressed conversion ends exactly where HDF5's data ends: nothing beyond it
    output = tmp_path / "plain.h5md"
    convert(adk[1], str(output), progress=False)
    raw = 98 * 3341 * 3 * 4
    assert raw < output.stat().st_size < raw + 200_000
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][-2:], [97000, 98000])


def test_load_decoders_imports_by_extension_and_never_raises():
    """Ranks other than 0 import the decoders while rank 0 scans: right modules, no errors."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from h5mdtool.formats import load_decoders\n"
        "load_decoders(['missing.xtc', 'unknown.ext', 'no_extension'])\n"
        "assert 'h5mdtool.formats._xtcframe' in sys.modules\n"
        "load_decoders(['also_missing.dcd'])\n"
        "assert 'MDAnalysis.lib.formats.libdcd' in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr

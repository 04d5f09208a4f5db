"""convert --append (issue 14): extending an h5mdtool file equals converting everything at once,
on 1-3 ranks, and an interrupted append leaves the file as it was."""

import hashlib
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.conversion.append import append
from h5mdtool.parallel.errors import InputError, OverlapError
from h5mdtool.check.validate import validate_file

from conftest import MPIRUN, ROOT, run_h5mdtool, write_xtc
from rankprocs import rank_pids

TRAJ = "particles/trajectory"
BOUNDS = [(0, 37), (37, 70), (70, 98)]


@pytest.fixture(scope="session")
def segments(comm, session_dir, adk_frames):
    """The AdK frames as three XTC segments (steps 10 apart, times 2 ps apart) and three TRRs."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    directory = os.path.join(session_dir, "append-segments")
    if comm.rank == 0:
        os.makedirs(directory)
        for number, (a, b) in enumerate(BOUNDS):
            frames = np.arange(a, b)
            write_xtc(os.path.join(directory, f"s{number}.xtc"), adk_frames[a:b], frames * 10, frames * 2.0)
            with TRRFile(os.path.join(directory, f"s{number}.trr"), "w") as handle:
                for i in frames:
                    handle.write(adk_frames[i], adk_frames[i] * 0.5, None, np.diag([9.0] * 3).astype(np.float32),
                                 int(i) * 10, float(i) * 2.0, 0.0, 3341)
    comm.Barrier()
    return {fmt: [os.path.join(directory, f"s{n}.{fmt}") for n in range(3)] for fmt in ("xtc", "trr")}


def datasets(path):
    with h5py.File(path, "r") as f:
        found = {}
        f[TRAJ].visititems(lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return found


LAYOUTS = [{}, {"compression": "gzip", "chunk_frames": 8}, {"precision": 0.001, "chunk_frames": 5},
           {"compression": "zstd", "chunk_frames": "auto"},
           {"compression": "zstd", "split_xyz": True, "chunk_frames": 3},
           {"precision": 0.001, "split_xyz": False, "chunk_frames": 5}]


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["xtc", "trr"])
@pytest.mark.parametrize("options", LAYOUTS, ids=["plain", "gzip-k8", "precision-k5", "zstd-auto",
                                                      "zstd-split-k3", "precision-joint-k5"])
def test_append_equals_one_convert(comm, shared_tmp, segments, fmt, options):
    whole = os.path.join(shared_tmp, "whole.h5md")
    grown = os.path.join(shared_tmp, "grown.h5md")
    convert(segments[fmt], whole, comm=comm, progress=False, **options)
    convert(segments[fmt][0], grown, comm=comm, progress=False, **options)
    summary = append(segments[fmt][1:], grown, comm=comm, progress=False)
    comm.Barrier()
    assert summary["n_frames_before"][0] == 37 and summary["n_frames_added"][0] == 61
    a, b = datasets(whole), datasets(grown)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    with h5py.File(grown, "r") as f:
        record = f["parameters/h5mdtool"].attrs["json"]
        chunks = f[f"{TRAJ}/position/value"].chunks
    with h5py.File(whole, "r") as f:
        assert chunks == f[f"{TRAJ}/position/value"].chunks
    assert '"appends"' in record
    if comm.rank == 0:
        assert not validate_file(grown, "all").errors
        assert not [n for n in os.listdir(shared_tmp) if n.endswith(".tmp")]


@pytest.mark.mpi
@pytest.mark.parametrize("chunk_frames", [1, 5, 37, 200], ids=["k1", "k5", "one-chunk", "chunk>frames"])
def test_a_file_converted_by_one_process_grows_on_any_number_of_ranks(comm, shared_tmp, segments, chunk_frames):
    """A serial convert left uncompressed chunks to be allocated when first written, and
    parallel HDF5 1.10.8 failed to grow them (``MPI_File_set_view failed: MPI_ERR_TYPE``):
    appending under mpirun to a file converted by one process never worked. Every chunked
    uncompressed dataset is now allocated early; the data survive it (MDAnalysis reads the
    sources; one chunk of 37 frames is 1.5 MB, larger than HDF5's 1 MiB chunk cache)."""
    from h5mdtool.parallel.mpi import SerialComm

    from formats_oracle import compare_output, source_frames

    grown = os.path.join(shared_tmp, "serial.h5md")
    if comm.rank == 0:
        convert(segments["xtc"][0], grown, comm=SerialComm(), progress=False, chunk_frames=chunk_frames)
        with h5py.File(grown, "r") as f:
            for name in ("position/value", "position/step", "position/time", "box/edges/value"):
                dcpl = f[f"{TRAJ}/{name}"].id.get_create_plist()
                assert dcpl.get_alloc_time() == h5py.h5d.ALLOC_TIME_EARLY, name
    comm.Barrier()
    summary = append(segments["xtc"][1:], grown, comm=comm, progress=False)
    assert summary["n_frames_added"] == [61]
    if comm.rank == 0:
        frames = [frame for path in segments["xtc"] for frame in source_frames(path, "XTC")]
        compare_output(grown, frames)
        assert not validate_file(grown, "all").errors
    comm.Barrier()


SERIAL_LAYOUTS = {"gzip-k1": ("xtc", {"compression": "gzip", "chunk_frames": 1}),
                  "zstd-k1": ("xtc", {"compression": "zstd", "chunk_frames": 1}),
                  "zstd-auto": ("xtc", {"compression": "zstd"}),
                  "gzip-k5": ("xtc", {"compression": "gzip", "chunk_frames": 5}),
                  "precision": ("xtc", {"precision": 0.001}),
                  "precision-split-k4": ("xtc", {"precision": 0.001, "split_xyz": True, "chunk_frames": 4}),
                  "zstd-split-k1": ("xtc", {"compression": "zstd", "split_xyz": True, "chunk_frames": 1}),
                  "lz4": ("xtc", {"compression": "lz4", "chunk_frames": 6}),
                  "blosc2": ("xtc", {"compression": "blosc2"}),
                  "velocity-precision": ("trr", {"velocity_precision": 0.01, "chunk_frames": 7})}


@pytest.mark.mpi
@pytest.mark.parametrize("layout", SERIAL_LAYOUTS)
def test_a_compressed_file_converted_by_one_process_grows_on_any_number_of_ranks(comm, shared_tmp, segments, layout):
    """Parallel HDF5 1.10.8 writes compressed chunks assuming they were allocated early, as
    it allocates them; a serial HDF5 allocates them when first written. Appending under
    mpirun to a compressed file converted by one process hung (one-frame chunks) or failed
    with ``addr overflow`` (the partial last chunk). It now equals converting everything at
    once, and holds what MDAnalysis reads from the sources where the layout is lossless."""
    from h5mdtool.parallel.mpi import SerialComm

    from formats_oracle import compare_output, source_frames

    fmt, options = SERIAL_LAYOUTS[layout]
    grown = os.path.join(shared_tmp, "serial.h5md")
    whole = os.path.join(shared_tmp, "whole.h5md")
    if comm.rank == 0:
        convert(segments[fmt][0], grown, comm=SerialComm(), progress=False, **options)
        convert(segments[fmt], whole, comm=SerialComm(), progress=False, **options)
    comm.Barrier()
    summary = append(segments[fmt][1:], grown, comm=comm, progress=False)
    assert summary["n_frames_added"] == [61]
    if comm.rank == 0:
        a, b = datasets(whole), datasets(grown)
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(b[name], a[name], err_msg=name)
        if not any(key.endswith("precision") for key in options):
            compare_output(grown, [frame for path in segments[fmt] for frame in source_frames(path)])
        assert not validate_file(grown, "all").errors
        assert sorted(os.listdir(shared_tmp)) == ["serial.h5md", "whole.h5md"]
    comm.Barrier()


@pytest.mark.mpi
def test_an_lzf_file_is_refused_by_a_parallel_append_before_anything_is_done(comm, shared_tmp, segments):
    """lzf chunks that do not shrink are stored raw, a mark parallel HDF5 loses: one line
    saying so and what works, the file untouched."""
    from h5mdtool.parallel.mpi import SerialComm

    grown = os.path.join(shared_tmp, "lzf.h5md")
    if comm.rank == 0:
        convert(segments["xtc"][0], grown, comm=SerialComm(), progress=False, compression="lzf", chunk_frames=4)
    comm.Barrier()
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    if comm.size > 1:
        with pytest.raises(InputError, match="lzf, which parallel HDF5 cannot write.*append without mpirun"):
            append(segments["xtc"][1:], grown, comm=comm, progress=False)
        assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
        comm.Barrier()
        assert sorted(os.listdir(shared_tmp)) == ["lzf.h5md"]
    elif comm.rank == 0:
        append(segments["xtc"][1:], grown, comm=comm, progress=False)
    comm.Barrier()


@pytest.mark.mpi
def test_an_old_serial_file_is_refused_by_a_parallel_append_before_anything_is_done(comm, shared_tmp, segments):
    """A file converted serially before early allocation: one clear line naming what to do,
    the file untouched, no lock or temporary left; one process appends to it."""
    from h5mdtool.parallel.mpi import SerialComm

    grown = os.path.join(shared_tmp, "old.h5md")
    if comm.rank == 0:
        convert(segments["xtc"][0], grown, comm=SerialComm(), progress=False, chunk_frames=4)
        with h5py.File(grown, "r+") as f:  # the position values as h5mdtool wrote them before
            value = f[f"{TRAJ}/position/value"]
            data, attrs, chunks = value[()], dict(value.attrs), value.chunks
            del f[f"{TRAJ}/position/value"]
            value = f.create_dataset(f"{TRAJ}/position/value", data=data, chunks=chunks, maxshape=(None,) + data.shape[1:])
            value.attrs.update(attrs)
            assert value.id.get_create_plist().get_alloc_time() != h5py.h5d.ALLOC_TIME_EARLY
    comm.Barrier()
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    if comm.size > 1:
        with pytest.raises(InputError, match="position/value is uncompressed and was made by one process.*append "
                                             "without mpirun, or convert the file again"):
            append(segments["xtc"][1:], grown, comm=comm, progress=False)
        assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
        comm.Barrier()
        assert sorted(os.listdir(shared_tmp)) == ["old.h5md"]
    elif comm.rank == 0:
        append(segments["xtc"][1:], grown, comm=comm, progress=False)
        with h5py.File(grown, "r") as f:
            assert f[f"{TRAJ}/position/value"].shape[0] == 98
    comm.Barrier()


@pytest.mark.mpi
def test_append_through_a_symbolic_link_grows_the_file_it_names(comm, shared_tmp, segments):
    """The link stays a link (appending replaced it with a new file, leaving its target as it was)."""
    whole = os.path.join(shared_tmp, "whole.h5md")
    runs = os.path.join(shared_tmp, "runs")
    real = os.path.join(runs, "r1.h5md")
    link = os.path.join(shared_tmp, "latest.h5md")
    if comm.rank == 0:
        os.mkdir(runs)
    comm.Barrier()
    convert(segments["xtc"], whole, comm=comm, progress=False, compression="gzip", chunk_frames=8)
    convert(segments["xtc"][0], real, comm=comm, progress=False, compression="gzip", chunk_frames=8)
    if comm.rank == 0:
        os.symlink(os.path.relpath(real, shared_tmp), link)
    comm.Barrier()
    append(segments["xtc"][1:], link, comm=comm, progress=False)
    comm.Barrier()
    assert os.path.islink(link) and os.path.samefile(link, real)
    a, b = datasets(whole), datasets(real)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    assert sorted(os.listdir(runs)) == ["r1.h5md"] and sorted(os.listdir(shared_tmp)) == sorted(
        ["runs", "whole.h5md", "latest.h5md"])
    comm.Barrier()


@pytest.mark.mpi
def test_append_to_a_selected_file_selects_the_same_atoms(comm, shared_tmp, segments, adk):
    whole = os.path.join(shared_tmp, "ca_whole.h5md")
    grown = os.path.join(shared_tmp, "ca_grown.h5md")
    convert(segments["xtc"], whole, comm=comm, topology=adk[0], select="name CA", progress=False)
    convert(segments["xtc"][0], grown, comm=comm, topology=adk[0], select="name CA", progress=False)
    append(segments["xtc"][1:], grown, comm=comm, progress=False)
    comm.Barrier()
    a, b = datasets(whole), datasets(grown)
    np.testing.assert_array_equal(b["position/value"], a["position/value"])
    np.testing.assert_array_equal(b["id"], a["id"])


def test_append_overlap_is_refused_or_dropped(tmp_path, segments):
    grown = str(tmp_path / "grown.h5md")
    convert(segments["xtc"][:2], grown, progress=False)
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    with pytest.raises(OverlapError, match="already reached step 690"):
        append(segments["xtc"][1:], grown, progress=False)
    assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
    summary = append(segments["xtc"][1:], grown, on_overlap="drop", progress=False)
    assert summary["n_frames_added"] == [28]
    with h5py.File(grown, "r") as f:
        np.testing.assert_array_equal(f[f"{TRAJ}/position/step"][()], np.arange(98) * 10)


def test_append_refusals(tmp_path, segments, adk):
    grown = str(tmp_path / "g.h5md")
    convert(segments["trr"][0], grown, progress=False)
    with pytest.raises(InputError, match="holds positions, velocities but the new frames hold positions"):
        append(segments["xtc"][1], grown, progress=False)  # XTC: no velocities
    with pytest.raises(InputError, match="hold 10 atoms but .* holds 3341"):
        other = str(tmp_path / "few.xtc")
        write_xtc(other, np.zeros((2, 10, 3), np.float32), [1000, 1001], [1.0, 2.0])
        append(other, grown, progress=False)
    plain = str(tmp_path / "plain.h5md")
    with h5py.File(plain, "w") as f:
        f.create_dataset(f"{TRAJ}/position/value", data=np.zeros((2, 3, 3)))
    with pytest.raises(InputError, match="not written by h5mdtool"):
        append(segments["xtc"][1], plain, progress=False)
    contiguous = str(tmp_path / "c.h5md")
    convert(segments["xtc"][0], contiguous, contiguous=True, progress=False)
    with pytest.raises(InputError, match="cannot grow"):
        append(segments["xtc"][1], contiguous, progress=False)
    with pytest.raises(InputError, match="no such file"):
        append(segments["xtc"][1], str(tmp_path / "missing.h5md"), progress=False)


def test_a_periodic_box_is_not_appended_to_a_file_whose_box_is_not(tmp_path, segments):
    """A file whose box has H5MD boundary none (an open system with edges) and new frames
    with a periodic box (an XTC's): refused, the file unchanged; appending them had kept
    boundary none, so their boxes silently lost their periodicity (make fuzz, seed
    4258693996: box-dropped)."""
    grown = str(tmp_path / "g.h5md")
    convert(segments["xtc"][0], grown, progress=False)
    with h5py.File(grown, "r+") as handle:
        handle[f"{TRAJ}/box"].attrs["boundary"] = np.array([b"none"] * 3)
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    with pytest.raises(InputError, match=r"periodic in x, y, z but .*g.h5md's is not \(H5MD boundary none none "
                                         r"none\): an append cannot make it periodic"):
        append(segments["xtc"][1], grown, progress=False)
    assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
    assert sorted(os.listdir(tmp_path)) == ["g.h5md"]
    with h5py.File(grown, "r+") as handle:  # periodic in x and y only: z would be added
        handle[f"{TRAJ}/box"].attrs["boundary"] = np.array([b"periodic", b"periodic", b"none"])
    with pytest.raises(InputError, match="periodic in z but"):
        append(segments["xtc"][1], grown, progress=False)


def test_append_cli(tmp_path, segments):
    grown = str(tmp_path / "g.h5md")
    convert(segments["xtc"][0], grown, progress=False)
    done = run_h5mdtool(["convert", *segments["xtc"][1:], "--append", grown, "--compression", "gzip"])
    assert done.returncode == 2 and "keeps the file's own layout" in done.stderr and done.stderr.count("\n") == 1
    done = run_h5mdtool(["convert", *segments["xtc"][1:], "--append", grown, "-o", str(tmp_path / "x.h5md")])
    assert done.returncode == 2 and "not both" in done.stderr
    done = run_h5mdtool(["convert", *segments["xtc"][1:], "--append", grown])
    assert done.returncode == 0 and "appended 61 frame(s)" in done.stdout, done.stderr
    done = run_h5mdtool(["convert", *segments["xtc"][1:]])
    assert done.returncode == 2 and "--output" in done.stderr


def _wait_for_lock_holders(path, bound=90):
    """Wait until no process the update lock of *path* names runs (killed ranks end late under load)."""
    from h5mdtool.parallel.outputs import _lock_record, lock_path, process_alive

    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        holders, _ = _lock_record(lock_path(path)) if os.path.exists(lock_path(path)) else ([], None)
        if not any(process_alive(pid) for _, pid in holders):
            return
        time.sleep(0.2)
    raise AssertionError(f"the killed append's processes still run {bound} s later")


@pytest.mark.parametrize("ranks", [None, 2])
@pytest.mark.parametrize("where, how", [("convert-round", signal.SIGTERM), ("convert-round", signal.SIGKILL),
                                        ("append-commit", signal.SIGKILL)])
def test_killed_append_leaves_the_file_as_it_was(tmp_path, segments, ranks, where, how):
    grown = str(tmp_path / "g.h5md")
    convert(segments["xtc"][0], grown, progress=False, chunk_frames=4)
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    command = [sys.executable, "-m", "h5mdtool", "convert", *segments["xtc"][1:], "--append", grown, "--block-size", "200K"]
    if ranks:
        command = [MPIRUN, "-n", str(ranks)] + command
    env = dict(os.environ, H5MDTOOL_TEST_DELAY=f"{where}:*:30", PYTHONPATH=ROOT)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(4 if ranks else 3)
    os.killpg(process.pid, how)
    process.communicate(timeout=60)
    assert process.returncode != 0
    assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
    report = validate_file(grown, "all")
    assert not report.errors and not [f for f in report.findings if f.severity == "warning"]
    with h5py.File(grown, "r") as f:
        assert f[f"{TRAJ}/position/value"].shape[0] == 37
    leftover = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    locks = [n for n in os.listdir(tmp_path) if n.endswith(".h5mdtool-lock")]
    if how == signal.SIGTERM:
        assert not leftover and not locks  # cleaned up; after kill -9 a hidden temporary may stay (documented)
    else:  # the lock of killed processes stays (the ranks mpirun started may outlive it a while)
        assert locks == [".g.h5md.h5mdtool-lock"] or (ranks and not locks)
        if locks and not ranks:  # the next append finds its process gone and clears it
            again = run_h5mdtool(["convert", *segments["xtc"][1:], "--append", grown])
            assert again.returncode == 0 and "note: removed the lock" in again.stdout, again.stderr
            assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
            return
        _wait_for_lock_holders(grown)  # the ranks mpirun started end a while after it
        again = run_h5mdtool(["convert", *segments["xtc"][1:], "--append", grown])
        assert again.returncode == 0, again.stderr
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


@pytest.mark.parametrize("ranks", [None, 2])
def test_a_second_append_while_one_runs_is_refused_not_lost(tmp_path, segments, ranks):
    """Two appends at once each published their own copy: both said "appended 4 frame(s)"
    and the first one's frames were gone. The second is now refused while the first runs."""
    grown = str(tmp_path / "g.h5md")
    whole = str(tmp_path / "whole.h5md")
    convert(segments["xtc"], whole, progress=False, chunk_frames=4)
    convert(segments["xtc"][0], grown, progress=False, chunk_frames=4)
    marks = tmp_path / "marks"
    marks.mkdir()
    command = [sys.executable, "-m", "h5mdtool", "convert", segments["xtc"][1], "--append", grown]
    if ranks:
        command = [MPIRUN, "-n", str(ranks)] + command
    env = dict(os.environ, H5MDTOOL_TEST_DELAY="append-commit:*:12", H5MDTOOL_TEST_MARK=str(marks), PYTHONPATH=ROOT)
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not os.listdir(marks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(marks), "the first append never reached its commit"
    second = run_h5mdtool(["convert", segments["xtc"][2], "--append", grown])
    assert second.returncode == 1, second.stderr
    assert "another h5mdtool append is updating it" in second.stderr and "run one at a time" in second.stderr
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    again = run_h5mdtool(["convert", segments["xtc"][2], "--append", grown])
    assert again.returncode == 0, again.stderr
    a, b = datasets(whole), datasets(grown)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    assert sorted(os.listdir(tmp_path)) == ["g.h5md", "marks", "whole.h5md"]


@pytest.mark.parametrize("boxless", ["all", "some"])
def test_new_frames_without_a_box_are_stored_as_one_convert_stores_them_and_said(tmp_path, segments, adk_frames,
                                                                                 boxless):
    """A segment without a box (or with one in some frames) appended to a file with a box got
    zero edges without a word. It now gets what converting everything at once gives (zero
    edges, the XTC/TRR convention, which MDAnalysis reads as no box) and the same note."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    from formats_oracle import mdanalysis_reader

    frames = np.arange(37, 70)
    new = str(tmp_path / "new.xtc")
    with XTCFile(new, "w") as handle:
        for number, i in enumerate(frames):
            box = np.zeros((3, 3), np.float32) if boxless == "all" or number % 3 == 1 else np.diag([6.0] * 3)
            handle.write(adk_frames[i], box.astype(np.float32), int(i) * 10, float(i) * 2.0)
    missing = len(frames) if boxless == "all" else len(frames[1::3])
    grown, whole = str(tmp_path / "grown.h5md"), str(tmp_path / "whole.h5md")
    convert(segments["xtc"][0], grown, progress=False)
    expected = convert([segments["xtc"][0], new], whole, progress=False)
    summary = append(new, grown, progress=False)
    note = f"{missing} frame(s) without a box are stored with zero edges"
    assert [n for n in summary["notes"] if note in n] and [n for n in expected["notes"] if note in n]
    a, b = datasets(whole), datasets(grown)
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    source = mdanalysis_reader(new)
    copy = mdanalysis_reader(grown, "H5MD")
    for number, ts in enumerate(source):
        copied = copy[37 + number].dimensions
        if ts.dimensions is None:
            assert copied is None or not np.any(copied[:3])
        else:
            np.testing.assert_allclose(copied, ts.dimensions, rtol=1e-6)
    assert not validate_file(grown, "all").errors


@pytest.mark.parametrize("killed", [[0], [1], [0, 1]], ids=["rank0", "rank1", "both"])
def test_a_rank_killed_outright_leaves_nothing_the_next_append_cannot_clear(tmp_path, segments, killed):
    """A ``kill -9`` of one rank during an MPI append sometimes left the hidden working copy
    and the lock (when the other ranks were killed before their cleanup ran; always when
    every rank is killed outright), and every later append was refused until the user removed
    the lock by hand. The lock names every rank and the copy: once none of them runs, the
    next append removes both, says so, and appends."""

    grown, whole = str(tmp_path / "g.h5md"), str(tmp_path / "whole.h5md")
    convert(segments["xtc"][0], grown, progress=False, chunk_frames=4)
    convert(segments["xtc"], whole, progress=False, chunk_frames=4)
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    marks = tmp_path / "marks"
    marks.mkdir()
    command = [MPIRUN, "-n", "2", sys.executable, "-m", "h5mdtool", "convert", *segments["xtc"][1:], "--append", grown,
               "--block-size", "200K"]
    env = dict(os.environ, H5MDTOOL_TEST_DELAY="convert-round:*:30", H5MDTOOL_TEST_MARK=str(marks), PYTHONPATH=ROOT)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        ranks = rank_pids(process.pid)
        assert len(os.listdir(marks)) == 2 and sorted(ranks) == [0, 1], (os.listdir(marks), ranks)
        for rank in killed:
            os.kill(ranks[rank], signal.SIGKILL)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in ranks.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert process.returncode != 0
    assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
    left = sorted(n for n in os.listdir(tmp_path) if n.startswith("."))
    if len(killed) == 2 or left:
        assert len(left) == 2 and ".g.h5md.h5mdtool-lock" in left and [n for n in left if n.endswith(".tmp")], left
    again = run_h5mdtool(["convert", *segments["xtc"][1:], "--append", grown])
    assert again.returncode == 0, again.stderr
    if left:
        assert "note: removed the lock and its working copy" in again.stdout, again.stdout
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
    a, b = datasets(whole), datasets(grown)
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)


def test_a_lock_of_another_host_is_named_with_how_to_clear_it(tmp_path, segments):
    """Processes of another host cannot be checked: the lock stays, and the message names
    them and the lock to remove once they are gone. A live process of this host keeps it too;
    dead ones do not, for append and for convert to the same file (which removes the copy)."""
    import socket

    grown = str(tmp_path / "g.h5md")
    convert(segments["xtc"][0], grown, progress=False)
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    lock = tmp_path / ".g.h5md.h5mdtool-lock"
    copy = tmp_path / ".g.h5md.h5mdtool-0123456789ab.tmp"
    host = socket.gethostname()
    lock.write_text(f"{host} {os.getpid()}\nnode-elsewhere 4242\ncopy {copy}\n")
    done = run_h5mdtool(["convert", segments["xtc"][1], "--append", grown])
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert f"process {os.getpid()} on {host}); run one at a time" in done.stderr, done.stderr
    lock.write_text(f"node-elsewhere 4242\n{host} 999999999\ncopy {copy}\n")
    for args in (["convert", segments["xtc"][1], "--append", grown],
                 ["convert", segments["xtc"][0], "-o", grown, "--force"]):
        done = run_h5mdtool(args)
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert (f"(process 4242 on node-elsewhere, which cannot be checked from {host}; if none of them runs, "
                f"remove {lock})") in done.stderr, done.stderr
    assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
    copy.write_bytes(b"stale copy")
    lock.write_text(f"{host} 999999999\n{host} 999999998\ncopy {copy}\n")
    done = run_h5mdtool(["convert", segments["xtc"][0], "-o", grown, "--force"])
    assert done.returncode == 0, done.stderr
    assert f"note: removed the lock and its working copy {copy.name}" in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["g.h5md"]


def test_a_file_with_observables_per_frame_is_refused_before_anything_is_done(tmp_path, segments):
    """A relayout of an H5MD file carries its /observables over, one value per frame. An
    append grew the frames but not them, and MDAnalysis no longer opened the file (it reads
    every observable at each frame; validate: MDA007). Refused in one line, file untouched."""
    from formats_oracle import mdanalysis_reader

    source, grown = str(tmp_path / "source.h5md"), str(tmp_path / "g.h5md")
    convert(segments["xtc"][0], source, progress=False)
    with h5py.File(source, "r+") as f:
        energy = f.create_group("observables/potential_energy")
        energy["value"] = np.linspace(-10.0, -9.0, 37)
        energy["step"] = f[f"{TRAJ}/position/step"]
    convert(source, grown, progress=False)
    assert mdanalysis_reader(grown, "H5MD").n_frames == 37
    before = hashlib.sha256(open(grown, "rb").read()).hexdigest()
    done = run_h5mdtool(["convert", segments["xtc"][1], "--append", grown])
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "/observables/potential_energy holds a value for each of its frames" in done.stderr
    assert hashlib.sha256(open(grown, "rb").read()).hexdigest() == before
    assert sorted(os.listdir(tmp_path)) == ["g.h5md", "source.h5md"]

"""Outputs that do not fit: a full file system or the file size limit (``ulimit -f``).

Every command that writes must end with one ``error:`` line naming the output and the
system's reason, exit status 1, nothing left behind, and its input untouched. HDF5 1.10.8
crashed (segmentation fault) after such an error: closing the abandoned file failed to
write its metadata, and its exit handler closed the half-closed file again.

The full file system is a small tmpfs (mounting one needs root: skipped otherwise); the
file size limit needs no privilege and also makes HDF5's close fail after the space of the
abandoned file was given back (HDF5 extends a file to its end of allocation when closing).
"""

import hashlib
import os
import resource
import subprocess

import pytest

from conftest import run_h5mdtool
from h5mdtool.parallel.errors import OutputError
from h5mdtool.parallel.outputs import preallocate

LAYOUTS = {
    "uncompressed": [],
    "gzip": ["--compression", "gzip"],
    "zstd": ["--compression", "zstd"],
    "precision": ["--precision", "0.001"],
}


@pytest.fixture
def mount_tmpfs(tmp_path):
    """Mount a tmpfs of a given size (``mount_tmpfs("1m")``) in *tmp_path*; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def mount(size):
        mountpoint = tmp_path / f"small{len(mounted)}"
        mountpoint.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(mountpoint)
        return str(mountpoint)

    yield mount
    for mountpoint in mounted:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


@pytest.fixture
def full_disk(mount_tmpfs):
    """A 256 KiB tmpfs: every output of the 98-frame AdK trajectory overflows it."""
    return mount_tmpfs("256k")


def limit_file_size(nbytes):
    """``preexec_fn`` of a child whose files cannot grow beyond *nbytes* (writes fail with EFBIG)."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


def assert_refused(done, output, reason):
    """One error line naming *output* and *reason*, status 1 (not a crash), no traceback."""
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors, done.stderr
    assert output in errors[0] and reason in errors[0], errors
    assert "Traceback" not in done.stderr


def entries(directory):
    return sorted(os.listdir(directory))


def md5(path):
    with open(path, "rb") as handle:
        return hashlib.md5(handle.read()).hexdigest()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_convert_on_a_full_disk(full_disk, adk, adk_segments, layout):
    output = os.path.join(full_disk, "out.h5md")
    done = run_h5mdtool(["convert", adk_segments["whole"], "-t", adk[0], "-o", output, "--no-progress"]
                        + LAYOUTS[layout])
    assert_refused(done, output, "No space left on device")
    assert entries(full_disk) == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_convert_beyond_the_file_size_limit(tmp_path, adk, adk_segments, layout):
    """HDF5 fails to close the abandoned file even once its bytes are dropped: no crash at exit."""
    output = str(tmp_path / "out.h5md")
    done = run_h5mdtool(["convert", adk_segments["whole"], "-t", adk[0], "-o", output, "--no-progress"]
                        + LAYOUTS[layout], preexec_fn=limit_file_size(256 * 1024))
    assert_refused(done, output, "File too large")
    assert entries(tmp_path) == []


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("layout", ["uncompressed", "zstd"])
def test_parallel_convert_on_a_full_disk(full_disk, adk, adk_segments, layout, ranks):
    """Uncompressed: refused by every rank before writing; compressed: the job ends, nothing is left."""
    output = os.path.join(full_disk, "out.h5md")
    done = run_h5mdtool(["convert", adk_segments["whole"], "-t", adk[0], "-o", output, "--no-progress"]
                        + LAYOUTS[layout], ranks=ranks)
    if layout == "uncompressed":
        assert_refused(done, output, "No space left on device")
        assert sum(line.startswith("error:") for line in done.stderr.splitlines()) == 1, done.stderr
    else:
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert f"{output}: cannot be written" in done.stderr, done.stderr
    assert entries(full_disk) == []


@pytest.mark.parametrize("part_format", ["same", "h5md"])
def test_split_on_a_full_disk(full_disk, adk, adk_segments, part_format):
    output = os.path.join(full_disk, "parts")
    done = run_h5mdtool(["split", adk_segments["whole"], "--nparts", "2", "-o", output, "--no-progress",
                         "--output-format", part_format])
    assert_refused(done, os.path.join(output, "part-000"), "No space left on device")
    assert entries(full_disk) == []


@pytest.mark.parametrize("layout", ["uncompressed", "zstd"])
def test_append_on_a_full_disk_leaves_the_file_unchanged(mount_tmpfs, adk, adk_segments, layout):
    """Room for the file of 5 frames and its working copy, not for 93 more frames."""
    full_disk = mount_tmpfs("1m")
    target = os.path.join(full_disk, "target.h5md")
    made = run_h5mdtool(["convert", adk_segments["whole"], "-o", target, "--stop", "5", "--no-progress"]
                        + LAYOUTS[layout])
    assert made.returncode == 0, made.stderr
    before = md5(target)
    done = run_h5mdtool(["convert", adk_segments["whole"], "--append", target, "--on-overlap", "drop",
                         "--no-progress"])
    assert_refused(done, target, "No space left on device")
    assert "left unchanged" in done.stderr
    assert md5(target) == before
    assert entries(full_disk) == ["target.h5md"]


def test_topology_and_benchmark_outputs_on_a_full_disk(full_disk, tmp_path, adk, adk_segments):
    source = str(tmp_path / "with_topology.h5md")
    made = run_h5mdtool(["convert", adk_segments["whole"], "-t", adk[0], "--topology", adk[0], "-o", source,
                         "--no-progress"])
    assert made.returncode == 0, made.stderr
    with open(os.path.join(full_disk, "filler"), "wb") as filler:  # leave no room at all
        try:
            filler.write(bytes(1 << 20))
        except OSError:
            pass
    for name in ("top.pdb", "top.gro", "top.psf"):
        output = os.path.join(full_disk, name)
        assert_refused(run_h5mdtool(["topology", source, "-o", output]), output, "No space left on device")
    for option, name in (("--out", "report.json"), ("--rmsd-out", "rmsd.npy")):
        output = os.path.join(full_disk, name)
        done = run_h5mdtool(["bench", "rmsd", source, "-t", adk[0], option, output, "--no-progress"])
        assert_refused(done, output, "No space left on device")
    assert entries(full_disk) == ["filler"]


def test_preallocate_says_the_space_is_not_there(tmp_path):
    path = tmp_path / "reserved"
    path.write_bytes(b"")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        with pytest.raises(OutputError, match=r"final\.h5md: cannot reserve the 2\.0 MiB it needs \(File too large"):
            preallocate(str(path), 2 << 20, label="final.h5md")
        assert preallocate(str(path), 1 << 19) is True
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert os.path.getsize(path) == 1 << 19

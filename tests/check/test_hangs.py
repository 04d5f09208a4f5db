"""validate and info never hang (issue 16): FIFOs, external links to FIFOs, huge declared
datasets, a global heap that makes libhdf5 loop, and chunk lookups that are quadratic in
HDF5 1.10. Every command runs in a subprocess with a timeout, so a regression fails the
test instead of blocking the suite."""

import json
import os
import shutil
import time

import h5py
import numpy as np
import pytest

from conftest import run_h5mdtool
from h5mdtool import convert

TRAJ = "particles/trajectory"


@pytest.fixture(scope="module")
def small(tmp_path_factory, adk):
    path = str(tmp_path_factory.mktemp("hangs") / "small.h5md")
    convert(adk[1], path, progress=False, stop=3)
    return path


@pytest.fixture
def fifo(tmp_path):
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    return path


def copy(small, tmp_path, name="copy.h5md"):
    path = str(tmp_path / name)
    shutil.copy(small, path)
    return path


def run(args, timeout=90, **env):
    return run_h5mdtool(args, timeout=timeout, env=dict(os.environ, **env))


@pytest.mark.parametrize("command", ["validate", "info"])
def test_fifo_given_as_the_file(fifo, command):
    """Regression: opening a FIFO blocks until a writer appears."""
    result = run([command, fifo])
    assert result.returncode == 1 and result.stderr == f"error: {fifo}: is a FIFO, not a regular file (FILE001)\n"


def test_fifo_given_as_a_manifest_or_part(tmp_path, fifo):
    manifest = tmp_path / "m.json"
    os.mkfifo(manifest)
    result = run(["validate", str(manifest)])
    assert result.returncode == 1 and "is a FIFO, not a regular file" in result.stderr


def test_external_link_to_a_fifo_is_never_read(small, tmp_path, fifo):
    """Regression: MDAnalysis's read check followed /observables/energy into a FIFO and hung."""
    path = copy(small, tmp_path)
    with h5py.File(path, "r+") as f:
        f["observables/energy"] = h5py.ExternalLink(fifo, "/energy")
    result = run(["validate", path, "--json"])
    assert result.returncode == 0, result.stderr
    findings = {(f["rule"], f["path"]) for f in json.loads(result.stdout)["files"][0]["findings"]}
    assert {("LINK001", "/observables/energy"), ("MDA902", "/")} <= findings
    assert run(["info", path]).returncode == 0


@pytest.mark.parametrize("storage", ["external", "virtual"])
def test_raw_data_in_a_fifo_is_never_read(small, tmp_path, fifo, storage):
    """Positions whose raw data sit in another file (external storage, a virtual dataset) are not read."""
    path = copy(small, tmp_path)
    with h5py.File(path, "r+") as f:
        value = f[f"{TRAJ}/position/value"]
        shape, attributes = value.shape, dict(value.attrs)
        del f[f"{TRAJ}/position/value"]
        if storage == "external":
            dataset = f.create_dataset(f"{TRAJ}/position/value", shape=shape, dtype="f4",
                                       external=[(fifo, 0, int(np.prod(shape)) * 4)])
        else:
            layout = h5py.VirtualLayout(shape=shape, dtype="f4")
            layout[:] = h5py.VirtualSource(fifo, "/positions", shape=shape)
            dataset = f.create_virtual_dataset(f"{TRAJ}/position/value", layout)
        dataset.attrs.update(attributes)
    result = run(["validate", path, "--json"])
    assert result.returncode == 0, result.stderr
    findings = {(f["rule"], f["path"]) for f in json.loads(result.stdout)["files"][0]["findings"]}
    assert {("LINK001", f"/{TRAJ}/position/value"), ("MDA902", "/")} <= findings
    assert run(["info", path]).returncode == 0


@pytest.mark.parametrize("case", ["time only", "value, step and time"])
def test_huge_declared_time(small, tmp_path, case):
    """Regression: a time declaring 2**40 entries was read entry by entry (it stores none)."""
    path = copy(small, tmp_path)
    names = ("time",) if case == "time only" else ("value", "step", "time")
    with h5py.File(path, "r+") as f:
        group = f[f"{TRAJ}/position"]
        for name in names:
            old = group[name]
            dtype, attributes = old.dtype, dict(old.attrs)
            del group[name]
            tail = (3341, 3) if name == "value" else ()
            dataset = group.create_dataset(name, shape=(2**40,) + tail, dtype=dtype, maxshape=(None,) + tail,
                                           chunks=(1,) + tail if tail else (4096,))
            dataset.attrs.update(attributes)
    started = time.monotonic()
    for command in (["validate", path], ["validate", path, "--profile", "mdanalysis"], ["info", path], ["info", path, "--json"]):
        result = run(command, timeout=120)
        assert result.returncode in (0, 1) and "Traceback" not in result.stderr, (command, result.stderr)
    assert time.monotonic() - started < 60
    result = run(["validate", path])
    expected = "H5MD024" if case == "time only" else "DATA006"
    assert expected in result.stdout and result.returncode == 1
    if case == "time only":
        document = json.loads(run(["info", path, "--json"]).stdout)
        assert document["time"]["note"].startswith("not shown because")


def _spinning_file(small, tmp_path):
    """Overwrite one byte of the global heap so that HDF5 1.10.8 loops for ever reading a string."""
    data = bytearray(open(small, "rb").read())
    heap = data.find(b"GCOL")
    assert heap > 0
    # the heap object holding a variable-length string attribute (a unit: "nm" or "ps"; the
    # box boundary "none" before h5mdtool wrote it fixed-length): its size field, found by
    # scanning the bytes of the collection; HDF5 1.10.8 never returns from reading it
    targets = [data.find(text, heap) - 8 for text in (b"none\x00\x00\x00\x00", b"nm\x00\x00\x00\x00\x00\x00",
                                                     b"ps\x00\x00\x00\x00\x00\x00")]
    target = next(t for t in targets if t > heap)
    data[target] = 0x7F
    path = tmp_path / "spinning.h5md"
    path.write_bytes(bytes(data))
    return str(path)


def test_hdf5_hang_is_stopped(small, tmp_path):
    """Regression: a corrupt global heap made libhdf5 spin for ever in the isolated child."""
    path = _spinning_file(small, tmp_path)
    started = time.monotonic()
    result = run(["validate", path, "--json"], H5MDTOOL_READ_TIMEOUT="3")
    elapsed = time.monotonic() - started
    findings = json.loads(result.stdout)["files"][0]["findings"]
    if not any(f["rule"] == "FILE005" for f in findings):
        pytest.skip("this HDF5 does not loop on this corruption")
    assert result.returncode == 1 and elapsed < 30
    assert [f["rule"] for f in findings] == ["FILE005"]
    result = run(["info", path], H5MDTOOL_READ_TIMEOUT="3")
    assert result.returncode == 1 and result.stderr.startswith(f"error: {path}: reading the file made no progress for 3 s")
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("(FILE005)\n")
    result = run(["info", path, "--json"], H5MDTOOL_READ_TIMEOUT="3")
    assert result.returncode == 1
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["FILE005"]


def test_info_stripe_alignment_is_not_quadratic(tmp_path):
    """Regression: info took 3 minutes on 58,800 chunks when a stripe size was recorded."""
    path = str(tmp_path / "many.h5md")
    n_chunks = 40_000
    with h5py.File(path, "w") as f:
        value = f.create_dataset(f"{TRAJ}/position/value", shape=(n_chunks, 8, 3), dtype="f4", chunks=(1, 8, 3))
        value[:] = 1.0
        f[f"{TRAJ}/position/step"] = np.arange(n_chunks)
        f.create_group("parameters/h5mdtool").attrs["json"] = json.dumps({"layout": {"stripe_size": 1 << 20}})
    started = time.monotonic()
    result = run(["info", path, "--json"])
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    alignment = json.loads(result.stdout)["stripe_alignment"]
    assert alignment["chunks"] == n_chunks and 0 < alignment["inspected"] <= 256
    assert elapsed < 30, elapsed


@pytest.mark.mpi
def test_hdf5_hang_is_stopped_under_mpi(comm, shared_tmp, adk, monkeypatch):
    """Under mpirun the file is read in a fresh interpreter (fork and exec), stopped the same way."""
    from h5mdtool import info, validate
    from h5mdtool.parallel.errors import InputError

    source = os.path.join(shared_tmp, "source.h5md")
    convert(adk[1], source, comm=comm, progress=False, stop=3)
    comm.Barrier()
    path = None
    if comm.rank == 0:
        path = _spinning_file(source, __import__("pathlib").Path(shared_tmp))
    path = comm.bcast(path)
    monkeypatch.setenv("H5MDTOOL_READ_TIMEOUT", "3")
    started = time.monotonic()
    report = validate([path], comm=comm)
    rules = [f.rule for f in report.files[0].findings]
    if "FILE005" not in rules:
        pytest.skip("this HDF5 does not loop on this corruption")
    assert rules == ["FILE005"] and report.exit_code == 1 and time.monotonic() - started < 60
    with pytest.raises(InputError, match="made no progress for 3 s"):
        info(path, comm=comm)
    monkeypatch.delenv("H5MDTOOL_READ_TIMEOUT")  # 3 s flagged the clean file on a loaded machine
    clean = validate([source], comm=comm)
    assert clean.exit_code == 0 and clean.files[0].read_checks == (["serial", "mpio"] if comm.size > 1 else ["serial"])


def test_a_dataset_declaring_2_to_the_40_rows_gets_its_verdict_in_seconds(tmp_path):
    """Regression: step, time and value declaring 2^40 rows, rows 0-9 and the last one
    written (growable datasets: HDF5's extensible-array chunk index), stalled validate in
    HDF5's chunk count (``get_num_chunks`` walks every index entry up to the last one
    written) until the read timeout, which then called the file damaged (FILE005) and ran
    no other check. The chunks are now looked up one at a time: storage with holes (DATA006)."""
    from conftest import write_xtc

    source, small = str(tmp_path / "ten.xtc"), str(tmp_path / "ten.h5md")
    positions = np.random.default_rng(5).uniform(0.0, 3.0, (10, 4, 3)).astype(np.float32)
    write_xtc(source, positions, np.arange(10) * 10, np.arange(10) * 2.0)
    convert(source, small, progress=False)
    path = str(tmp_path / "huge.h5md")
    rows = 2**40
    with h5py.File(small, "r") as original, h5py.File(path, "w", libver=("v110", "latest")) as f:
        for name in original:
            original.copy(original[name], f, name)
        group = f[TRAJ]
        for element in ("position", "box/edges"):
            for name in ("step", "time", "value"):
                del group[f"{element}/{name}"]
        for element in ("position", "box/edges"):
            for name in ("step", "time", "value") if element == "position" else ("value",):
                old = original[f"{TRAJ}/{element}/{name}"]
                new = group[element].create_dataset(name, shape=(rows,) + old.shape[1:], dtype=old.dtype,
                                                    maxshape=(None,) + old.shape[1:],
                                                    chunks=(65536,) + old.shape[1:])
                new.attrs.update(dict(old.attrs))
                new[:10] = old[:10]
                new[rows - 1] = old[9]
        for name in ("step", "time"):
            group["box/edges"][name] = group[f"position/{name}"]
    result = run(["validate", path, "--json"], H5MDTOOL_READ_TIMEOUT="20")  # it took 2-3 s
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)["files"][0]["findings"]
    rules = {(f["rule"], f["path"]) for f in findings}
    assert "FILE005" not in {rule for rule, _ in rules}
    for name in ("position/step", "position/time", "position/value", "box/edges/value"):
        assert ("DATA006", f"/{TRAJ}/{name}") in rules, findings
    result = run(["info", path], H5MDTOOL_READ_TIMEOUT="20")
    assert result.returncode == 0 and "DATA006" in result.stdout, result.stderr

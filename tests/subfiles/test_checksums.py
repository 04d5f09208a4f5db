"""Split records a checksum of every part; validate DIR verifies them (parts shared among
ranks), so one flipped byte anywhere in an XTC, DCD or H5MD part is found without the source."""

import hashlib
import json
import os

import pytest

from conftest import run_h5mdtool
from h5mdtool import split, validate
from h5mdtool.subfiles import manifest as manifest_module, split as split_module
from h5mdtool.subfiles.manifest import read_manifest


def _flip_middle_byte(path):
    with open(path, "r+b") as handle:
        handle.seek(os.path.getsize(path) // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x01]))


def _split(comm, shared_tmp, source, fmt, nparts=3):
    directory = os.path.join(shared_tmp, "parts")
    split(source, directory, nparts, comm=comm, format=fmt, progress=False)
    comm.Barrier()
    return directory


def _rules(report):
    return {(finding.rule, finding.path) for finding in report.files[0].findings}


SOURCES = {"XTC": ("solvated", "XTC", "same"), "DCD": ("adk", 1, "same"), "H5MD": ("adk", 1, "h5md")}


@pytest.fixture(params=sorted(SOURCES))
def split_parts(request, comm, shared_tmp):
    fixture, key, fmt = SOURCES[request.param]
    source = request.getfixturevalue(fixture)[key]
    return _split(comm, shared_tmp, source, fmt)


@pytest.mark.mpi
def test_split_records_each_parts_blake2b(comm, split_parts):
    document = json.load(open(os.path.join(split_parts, "manifest.json")))
    assert document["manifest_version"] == 3
    for part in document["parts"]:
        with open(os.path.join(split_parts, part["path"]), "rb") as handle:
            expected = hashlib.blake2b(handle.read(), digest_size=16).hexdigest()
        assert part["checksum"] == f"blake2b-128:{expected}"


@pytest.mark.mpi
@pytest.mark.parametrize("fixture, key", [("solvated", "XTC"), ("adk", 1)])
def test_parts_copied_in_many_blocks_are_the_bytes_their_checksums_name(comm, shared_tmp, monkeypatch, request,
                                                                         fixture, key):
    """A part is copied in blocks, each hashed in a thread while it is written and the next
    is read into the other of two buffers: with blocks of an odd size, many to a part, the
    parts are still the source's bytes (XTC: joined, the whole file) and each records the
    BLAKE2b of its own bytes."""
    monkeypatch.setattr(split_module, "COPY_BUFFER", 4093)
    source = request.getfixturevalue(fixture)[key]
    directory = _split(comm, shared_tmp, source, "same", nparts=3)
    document = json.load(open(os.path.join(directory, "manifest.json")))
    contents = [open(os.path.join(directory, part["path"]), "rb").read() for part in document["parts"]]
    assert min(len(content) for content in contents) > 20 * 4093
    for part, content in zip(document["parts"], contents):
        assert part["checksum"] == f"blake2b-128:{hashlib.blake2b(content, digest_size=16).hexdigest()}"
    if key == "XTC":
        assert b"".join(contents) == open(source, "rb").read()


@pytest.mark.mpi
def test_validate_finds_one_flipped_byte_in_a_part(comm, split_parts):
    """Regression: a byte flipped in the middle of a part passed a plain validate DIR (only the
    first and last frames of each part were read)."""
    manifest = read_manifest(split_parts)
    if comm.rank == 0:
        _flip_middle_byte(manifest.parts[1].path)
    comm.Barrier()
    report = validate(split_parts, comm=comm)
    assert ("MAN016", "part-0002" + os.path.splitext(manifest.parts[1].path)[1]) in _rules(report)
    assert not [rule for rule, path in _rules(report) if rule == "MAN016" and not path.startswith("part-0002")]
    assert report.exit_code == 1
    skipped = validate(split_parts, comm=comm, checksums=False)
    assert "MAN016" not in {rule for rule, _ in _rules(skipped)}


@pytest.mark.mpi
def test_checksums_are_shared_among_ranks(comm, shared_tmp, adk, monkeypatch):
    directory = _split(comm, shared_tmp, adk[1], "same", nparts=6)
    hashed = []
    real = manifest_module.file_checksum
    monkeypatch.setattr(manifest_module, "file_checksum", lambda path: hashed.append(path) or real(path))
    report = validate(directory, comm=comm)
    assert not report.files[0].errors
    every = comm.allgather(hashed)
    assert sorted(path for paths in every for path in paths) == sorted(p.path for p in read_manifest(directory).parts)
    assert max(len(paths) for paths in every) == -(-6 // comm.size)


def test_older_manifests_are_read_and_a_bad_checksum_is_man012(tmp_path, adk):
    directory = str(tmp_path / "parts")
    split(adk[1], directory, 2, progress=False)
    path = os.path.join(directory, "manifest.json")
    document = json.load(open(path))
    older = dict(document, manifest_version=2, parts=[{k: v for k, v in part.items() if k != "checksum"}
                                                     for part in document["parts"]])
    json.dump(older, open(path, "w"))
    assert not validate(directory).files[0].findings
    document["parts"][0]["checksum"] = "md5:00"
    json.dump(document, open(path, "w"))
    assert ("MAN012", "part-0001.dcd") in _rules(validate(directory))


@pytest.mark.parametrize("ranks", [None, 2])
def test_cli_names_the_damaged_part(tmp_path, adk, ranks):
    directory = str(tmp_path / "parts")
    split(adk[1], directory, 2, progress=False)
    _flip_middle_byte(os.path.join(directory, "part-0001.dcd"))
    done = run_h5mdtool(["validate", directory], ranks=ranks)
    assert done.returncode == 1
    assert "MAN016 part-0001.dcd" in done.stdout, done.stdout + done.stderr
    done = run_h5mdtool(["validate", directory, "--no-checksums"], ranks=ranks)
    assert "MAN016" not in done.stdout, done.stdout

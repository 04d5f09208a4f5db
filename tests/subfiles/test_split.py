"""h5mdtool split: parts equal the source (bytes and MDAnalysis), manifest, ranks, errors."""

import json
import os

import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner

from h5mdtool import split
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import InputError, OutputError
from h5mdtool.subfiles.manifest import read_manifest


class Written:
    """A split's manifest as written (read here as JSON, independently of the manifest
    reader, which the validate branch extends to version 2)."""

    def __init__(self, outdir):
        path = os.path.join(outdir, "manifest.json")
        with open(path) as handle:
            self.document = json.load(handle)
        self.format = self.document["format"]
        self.source = self.document["source"]
        self.parts = [
            Part(os.path.join(outdir, entry["path"]), entry) for entry in self.document["parts"]
        ]


class Part:
    def __init__(self, path, entry):
        self.path = path
        self.relative_path = entry["path"]
        self.entry = entry
        self.start, self.stop, self.n_frames, self.bytes = (
            entry["start"], entry["stop"], entry["n_frames"], entry["bytes"])


def part_universes(topology, manifest):
    return [mda.Universe(topology, part.path) for part in manifest.parts]


def assert_parts_match(topology, source, manifest, exact=True):
    whole = mda.Universe(topology, source)
    frame = 0
    for part in part_universes(topology, manifest):
        for ts in part.trajectory:
            reference = whole.trajectory[frame]
            if exact:
                np.testing.assert_array_equal(ts.positions, reference.positions)
            else:
                np.testing.assert_allclose(ts.positions, reference.positions, rtol=2.5e-7, atol=1e-6)
            assert ts.time == pytest.approx(reference.time, rel=1e-6, abs=1e-9)
            if reference.dimensions is None:
                assert ts.dimensions is None
            else:
                np.testing.assert_allclose(ts.dimensions, reference.dimensions, rtol=1e-5)
            if reference.has_velocities:
                np.testing.assert_array_equal(ts.velocities, reference.velocities)
            frame += 1
    assert frame == whole.trajectory.n_frames


@pytest.mark.mpi
@pytest.mark.parametrize("nparts", [1, 2, 3, 7])
@pytest.mark.parametrize("fmt", ["XTC", "TRR"])
def test_xdr_parts_are_the_source_bytes(comm, shared_tmp, solvated, fmt, nparts):
    outdir = os.path.join(shared_tmp, "parts")
    summary = split(solvated[fmt], outdir, nparts, comm=comm, progress=False)
    comm.Barrier()
    manifest = Written(outdir)
    assert len(manifest.parts) == nparts and manifest.format == fmt
    sizes = [part.n_frames for part in manifest.parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 10
    assert [p.relative_path for p in manifest.parts] == sorted(p.relative_path for p in manifest.parts)
    joined = b"".join(open(part.path, "rb").read() for part in manifest.parts)
    assert joined == open(solvated[fmt], "rb").read()
    for part in manifest.parts:
        assert os.path.getsize(part.path) == part.bytes
    if comm.rank == 0:
        assert summary["n_parts"] == nparts
    else:
        assert summary is None
    assert_parts_match(solvated["topology"], solvated[fmt], manifest)


@pytest.mark.mpi
@pytest.mark.parametrize("nparts", [1, 4, 5])
def test_dcd_parts(comm, shared_tmp, adk, nparts):
    outdir = os.path.join(shared_tmp, "dcd-parts")
    split(adk[1], outdir, nparts, comm=comm, progress=False)
    comm.Barrier()
    manifest = Written(outdir)
    assert_parts_match(adk[0], adk[1], manifest)
    from MDAnalysis.lib.formats.libdcd import DCDFile

    for part in manifest.parts:
        with DCDFile(part.path) as dcd:
            assert dcd.n_frames == part.n_frames
            assert dcd.header["istart"] == 1000 + 1000 * part.start
            assert dcd.header["nsavc"] == 1000


@pytest.mark.mpi
def test_h5md_parts_keep_global_step_and_time(comm, shared_tmp, solvated):
    outdir = os.path.join(shared_tmp, "h5md-parts")
    split(solvated["TRR"], outdir, 3, comm=comm, format="h5md", compression="gzip", progress=False)
    comm.Barrier()
    manifest = Written(outdir)
    assert manifest.format == "H5MD"
    assert_parts_match(solvated["topology"], solvated["TRR"], manifest)
    whole = mda.Universe(solvated["topology"], solvated["TRR"])
    last = part_universes(solvated["topology"], manifest)[-1]
    assert last.trajectory[0].data["step"] == whole.trajectory[manifest.parts[-1].start].data["step"]


def test_gzip_h5md_parts_are_compressed_by_h5mdtools_encoder(tmp_path, adk):
    """Each rank writes its gzip parts alone, so h5mdtool compresses their chunks (byte planes
    deflated apart: the plane of the positions' top mantissa bits, which deflate barely
    shrinks, stands in the stored chunk as it is), as convert does in one process."""
    import h5py

    outdir = str(tmp_path / "parts")
    split(adk[1], outdir, 2, format="h5md", compression="gzip", chunk_frames=8, progress=False)
    manifest = Written(outdir)
    with h5py.File(manifest.parts[1].path, "r") as handle:
        dataset = handle["particles/trajectory/position/value"]
        _, stored = dataset.id.read_direct_chunk((0, 0, 0))
        values = dataset[:8]
    planes = np.ascontiguousarray(values).reshape(-1).view(np.uint8).reshape(-1, 4).T
    assert planes[2].tobytes()[:4096] in bytes(stored)
    assert_parts_match(adk[0], adk[1], manifest, exact=False)  # nm stored, Angstrom read


@pytest.mark.mpi
def test_segments_and_more_ranks_than_parts(comm, shared_tmp, adk_segments):
    outdir = os.path.join(shared_tmp, "seg-parts")
    split(adk_segments["parts"], outdir, 2, comm=comm, progress=False)
    comm.Barrier()
    manifest = Written(outdir)
    assert [p.n_frames for p in manifest.parts] == [49, 49]
    whole = open(adk_segments["whole"], "rb").read()
    assert b"".join(open(p.path, "rb").read() for p in manifest.parts) == whole
    assert [s["path"].endswith(f"part{n}.xtc") for n, s in enumerate(manifest.source)] == [True] * 3


def test_manifest_contents(tmp_path, solvated):
    outdir = tmp_path / "parts"
    split(solvated["XTC"], str(outdir), 3, progress=False)
    document = json.loads((outdir / "manifest.json").read_text())
    assert document["manifest_version"] == 3 and document["kind"] == "h5mdtool-split"
    assert document["n_frames"] == 10 and document["n_atoms"] == 47681 and document["format"] == "XTC"
    assert document["source"][0]["size"] == os.path.getsize(solvated["XTC"])
    assert [(p["start"], p["stop"]) for p in document["parts"]] == [(0, 4), (4, 7), (7, 10)]
    assert sorted(os.listdir(outdir)) == ["manifest.json", "part-0001.xtc", "part-0002.xtc", "part-0003.xtc"]


def test_refusals(tmp_path, solvated, adk):
    with pytest.raises(InputError, match="more than the 10 frames"):
        split(solvated["XTC"], str(tmp_path / "a"), 11, progress=False)
    assert not (tmp_path / "a").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match="not empty"):
        split(solvated["XTC"], str(busy), 2, progress=False)
    assert (busy / "keep.txt").read_text() == "mine"
    split(solvated["XTC"], str(busy), 2, force=True, progress=False)
    assert not (busy / "keep.txt").exists()
    with pytest.raises(InputError, match="one format"):
        split([solvated["XTC"], solvated["TRR"]], str(tmp_path / "b"), 2, format="same", progress=False)
    with pytest.raises(InputError, match="atoms"):
        split([solvated["XTC"], adk[1]], str(tmp_path / "c"), 2, format="h5md", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["busy"]


def test_fixed_atom_dcd_refused(tmp_path, adk):
    import struct

    data = bytearray(open(adk[1], "rb").read())
    struct.pack_into("<i", data, 40, 5)  # NAMNF: five fixed atoms
    path = tmp_path / "fixed.dcd"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError):
        split(str(path), str(tmp_path / "out"), 2, progress=False)
    assert not (tmp_path / "out").exists()


def test_read_manifest_checks(tmp_path, solvated):
    outdir = tmp_path / "parts"
    split(solvated["XTC"], str(outdir), 2, progress=False)
    path = outdir / "manifest.json"
    document = json.loads(path.read_text())
    document["manifest_version"] = 1  # the reader of this branch reads version 1 only
    document["parts"][1]["start"] = 6
    path.write_text(json.dumps(document))
    with pytest.raises(InputError, match="tile"):
        read_manifest(str(path))
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable JSON"):
        read_manifest(str(path))


def test_cli(tmp_path, adk):
    runner = CliRunner()
    result = runner.invoke(cli, ["split", adk[1], "--nparts", "4", "-o", str(tmp_path / "p"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["n_parts"] == 4
    result = runner.invoke(cli, ["split", adk[1], "--nparts", "400", "-o", str(tmp_path / "q")])
    assert result.exit_code == 1 and result.output.startswith("error: --nparts 400")
    result = runner.invoke(cli, ["split", str(tmp_path / "missing.xtc"), "--nparts", "2", "-o", str(tmp_path / "r")])
    assert result.exit_code == 1 and "no such file" in result.output and "Traceback" not in result.output
    help_text = runner.invoke(cli, ["split", "--help"]).output
    for option in ("--nparts", "--output", "--output-format", "--format", "--on-overlap", "--compression", "--force", "--json"):
        assert option in help_text


def test_h5md_part_without_positions_is_refused(tmp_path):
    """Found by make fuzz (case 60): a TRR saving velocities alone at some steps, split into
    one-frame H5MD parts, gave parts without positions that validate rejected (MDA011).
    Such a split is refused in one line; byte-copied TRR parts and parts that each hold a
    positions frame are still written, and validate accepts them."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    from h5mdtool import validate

    path = str(tmp_path / "own-steps.trr")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    box = np.diag([5.0, 5.0, 5.0]).astype(np.float32)
    with TRRFile(path, "w") as handle:
        for number in range(3):
            handle.write(x + number, None, None, box, 2 * number, 2.0 * number, 0.0, 4)
            handle.write(None, np.ones_like(x), None, box, 2 * number + 1, 2.0 * number + 1, 0.0, 4)
    with pytest.raises(InputError, match="part-0002.h5md would hold frames 1-1 .* none of which has positions"):
        split(path, str(tmp_path / "one-frame"), 6, format="h5md", progress=False)
    assert not os.path.exists(tmp_path / "one-frame")
    done = CliRunner().invoke(cli, ["split", path, "-o", str(tmp_path / "cli"), "--nparts", "6", "--output-format", "h5md"])
    assert done.exit_code == 1 and done.output.count("error:") == 1 and "Traceback" not in done.output
    split(path, str(tmp_path / "same"), 6, progress=False)
    split(path, str(tmp_path / "pairs"), 3, format="h5md", progress=False)
    for directory in ("same", "pairs"):
        report = validate(str(tmp_path / directory / "manifest.json"))
        assert report.errors == 0 and report.exit_code == 0, directory


def test_h5md_parts_of_a_trajectory_without_positions_are_refused(tmp_path):
    """make fuzz case 1808: a TRR none of whose frames has positions (velocities alone), split
    into H5MD parts, crashed with KeyError: 'positions' (the check above looked for frames
    without positions only when some frame had them). Refused in one line; convert already was."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    path = str(tmp_path / "velocities.trr")
    v = np.ones((4, 3), np.float32)
    with TRRFile(path, "w") as handle:
        for number in range(2):
            handle.write(None, v * number, None, np.diag([5.0, 5.0, 5.0]).astype(np.float32), number, float(number),
                         0.0, 4)
    for options in ({}, {"dt": 2.0}):
        with pytest.raises(InputError, match="no frame of the trajectory has positions"):
            split(path, str(tmp_path / "parts"), 1, format="h5md", progress=False, **options)
        assert not os.path.exists(tmp_path / "parts")
    done = CliRunner().invoke(cli, ["split", path, "-o", str(tmp_path / "cli"), "--nparts", "1", "--output-format", "h5md"])
    assert done.exit_code == 1 and done.output.count("error:") == 1 and "Traceback" not in done.output

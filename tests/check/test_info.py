"""info: what a file holds, its layout and one-frame read cost, provenance, advice."""

import json
import math

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import run_h5mdtool
from h5mdtool import convert, info
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import UnreadableError
from h5mdtool.check.lint import one_frame_read

TRAJ = "particles/trajectory"


@pytest.fixture(scope="module")
def trr(tmp_path_factory, solvated):
    path = str(tmp_path_factory.mktemp("info") / "trr.h5md")
    convert(solvated["TRR"], path, progress=False, stop=4)
    return path


def test_info_of_an_h5mdtool_file(trr, solvated):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    document = info(trr)
    assert document["particle_group"] == f"/{TRAJ}"
    assert (document["n_frames"], document["n_atoms"]) == (4, 47681)
    assert document["elements"] == ["position", "velocity"]
    with TRRFile(solvated["TRR"]) as handle:
        frames = [handle.read() for _ in range(4)]
    steps, times = [f.step for f in frames], [f.time for f in frames]
    assert document["step"] == {"mode": "explicit", "first": steps[0], "last": steps[-1], "interval": steps[1] - steps[0],
                                "regular": True, "unit": None, "dtype": "int64"}
    assert document["time"]["unit"] == "ps" and document["time"]["first"] == pytest.approx(times[0])
    assert document["time"]["interval"] == pytest.approx(times[1] - times[0])
    box = document["box"]
    assert box["boundary"] == ["periodic"] * 3 and box["time_dependent"] is True and box["dimension"] == 3
    assert np.allclose(box["first_edges"], frames[0].box)
    value = document["datasets"][f"/{TRAJ}/position/value"]
    assert value["shape"] == [4, 47681, 3] and value["dtype"] == "float32" and value["chunks"] == [1, 47681, 3]
    assert value["filters"] == [] and value["raw_bytes"] == 4 * 47681 * 12 == value["stored_bytes"]
    assert value["one_frame_read"] == {"chunks": 1, "bytes": 47681 * 12, "frame_bytes": 47681 * 12, "chunk_bytes": 47681 * 12}
    assert f"/{TRAJ}/velocity/step" not in document["datasets"]  # a hard link to position/step, listed once
    assert document["provenance"]["h5mdtool_version"] and document["provenance"]["layout"]["chunk_frames"] == 1
    assert document["errors"] == document["warnings"] == 0 and document["fix_command"] is None
    text = CliRunner().invoke(cli, ["info", trr]).output
    assert "4 frames x 47681 atoms in /particles/trajectory (position, velocity)" in text
    assert "one frame: 1 chunk(s), 558.8 KiB for 558.8 KiB of data" in text
    assert "no errors or warnings" in text and "note(s)" not in text


def test_info_describes_the_stored_topology(tmp_path, adk, trr):
    from MDAnalysisTests.datafiles import TPR_xvf, TRR_xvf

    path = str(tmp_path / "xvf.h5md")
    convert(TRR_xvf, path, topology=TPR_xvf, progress=False)
    universe = mda.Universe(TPR_xvf)  # the oracle
    atoms = universe.atoms
    counts = {"atoms": len(atoms), "residues": len(universe.residues), "segments": len(universe.segments),
              "bonds": len(universe.bonds)}
    document = json.loads(CliRunner().invoke(cli, ["info", path, "--json"]).output)
    assert document["topology"] == dict(counts, kinds=len(set(zip(atoms.names, atoms.types))),
                                        attributes=["names", "types", "elements", "chains", "masses", "charges"],
                                        source=TPR_xvf)
    text = CliRunner().invoke(cli, ["info", path]).output
    assert (f"  topology: {counts['atoms']} atoms, {counts['residues']} residues, {counts['segments']} segment(s), "
            f"{counts['bonds']} bonds; names, types, elements, chains, masses, charges; from {TPR_xvf}") in text
    assert info(trr)["topology"] is None and "topology:" not in CliRunner().invoke(cli, ["info", trr]).output


def test_info_of_gzip_and_triclinic_kinds(tmp_path, adk):
    path = str(tmp_path / "gzip.h5md")
    convert(adk[1], path, progress=False, compression="gzip", compression_level=3, chunk_frames=8)
    document = json.loads(CliRunner().invoke(cli, ["info", path, "--json"]).output)
    value = document["datasets"][f"/{TRAJ}/position/value"]
    assert value["filters"] == ["shuffle", "gzip"] and value["compression_level"] == 3
    assert 0 < value["stored_bytes"] < value["raw_bytes"]
    assert value["one_frame_read"]["bytes"] == 8 * 3341 * 12 and value["one_frame_read"]["chunks"] == 1
    assert document["box"]["kind"] == "open (no edges)" and document["box"]["boundary"] == ["none"] * 3
    assert document["time"]["regular"] is True and document["n_frames"] == 98


@pytest.mark.parametrize("compression", ["zstd", "blosc2", "lz4"])
def test_info_names_plugin_filters_and_keeps_them_in_a_fix(tmp_path, adk, compression):
    path = str(tmp_path / "plugin.h5md")
    convert(adk[1], path, progress=False, compression=compression, chunk_frames=8)
    document = info(path)
    names = {"zstd": ["zstd"], "blosc2": ["blosc2"], "lz4": ["bitshuffle"]}[compression]
    assert document["datasets"][f"/{TRAJ}/position/value"]["plugin_filters"] == names
    assert document["plugin_filters"] == names and "HDF5_PLUGIN_PATH" in document["plugin_hint"]
    assert {f["rule"] for f in document["findings"]} == {"LINT006"} and document["fix_command"] is None
    text = CliRunner().invoke(cli, ["info", path]).output
    assert f"filters from hdf5plugin ({names[0]}): Python readers" in text
    assert "no errors or warnings" in text
    # a layout fix keeps the codec rather than trading it for gzip
    with h5py.File(path, "a") as handle:
        value = handle[f"{TRAJ}/position/value"]
        data, attrs = value[:], dict(value.attrs)
        del handle[f"{TRAJ}/position/value"]
        from h5mdtool.h5md.codecs import codec
        import hdf5plugin  # noqa: F401
        options = codec(compression)
        dataset = handle.create_dataset(f"{TRAJ}/position/value", data=data, chunks=(8, 100, 3),
                                        compression=options.filter_id, compression_opts=options.options(options.default_level))
        dataset.attrs.update(attrs)
    split_chunks = info(path)
    assert "LINT001" in {f["rule"] for f in split_chunks["findings"]}
    assert f"--compression {compression}" in split_chunks["fix_command"]


def test_info_of_an_auto_chunked_file_and_its_fix(tmp_path, trr):
    path = str(tmp_path / "auto.h5md")
    with h5py.File(trr, "r") as src, h5py.File(path, "w") as dst:
        for name in ("h5md", "parameters"):
            src.copy(src[name], dst, name=name)
        group = dst.create_group(TRAJ)
        src.copy(src[f"{TRAJ}/box"], group, name="box")
        for element in ("position", "velocity"):
            out = group.create_group(element)
            value = out.create_dataset("value", data=src[f"{TRAJ}/{element}/value"][:], chunks=True, maxshape=(None, None, 3))
            value.attrs["unit"] = src[f"{TRAJ}/{element}/value"].attrs["unit"]
            out["step"] = group["box/edges/step"]
            out["time"] = group["box/edges/time"]
    document = info(path)
    value = document["datasets"][f"/{TRAJ}/position/value"]
    chunks = value["chunks"]
    expected = math.ceil(47681 / chunks[1]) * math.ceil(3 / chunks[2])
    assert value["one_frame_read"]["chunks"] == expected > 1
    assert value["one_frame_read"]["bytes"] == expected * math.prod(chunks) * 4
    assert {f["rule"] for f in document["findings"]} >= {"LINT001", "LINT002"}
    assert document["fix_command"] == f"h5mdtool convert {path} -o {tmp_path}/auto_relayout.h5md --chunk-frames auto"
    text = CliRunner().invoke(cli, ["info", path]).output
    assert f"to fix the layout: {document['fix_command']}" in text
    assert f"one frame: {expected} chunk(s)" in text
    result = run_h5mdtool(document["fix_command"].split()[1:] + ["--no-progress"])
    assert result.returncode == 0, result.stderr
    fixed = info(f"{tmp_path}/auto_relayout.h5md")
    assert fixed["fix_command"] is None and fixed["warnings"] == 0
    assert fixed["datasets"][f"/{TRAJ}/position/value"]["one_frame_read"]["chunks"] == 1
    with h5py.File(path, "r") as a, h5py.File(f"{tmp_path}/auto_relayout.h5md", "r") as b:
        assert np.array_equal(a[f"{TRAJ}/position/value"][:], b[f"{TRAJ}/position/value"][:])


def test_one_frame_read():
    assert one_frame_read((10, 100, 3), (1, 100, 3), 4) == {"chunks": 1, "bytes": 1200, "frame_bytes": 1200, "chunk_bytes": 1200}
    assert one_frame_read((10, 100, 3), (5, 30, 1), 4) == {"chunks": 12, "bytes": 12 * 600, "frame_bytes": 1200, "chunk_bytes": 600}
    assert one_frame_read((10, 100, 3), None, 4)["chunks"] == 0
    assert one_frame_read((2**40, 10**6, 3), (1, 1000, 3), 4)["chunks"] == 1000
    assert one_frame_read((10,), (10,), 8) is None


def test_info_of_a_foreign_file():
    from MDAnalysisTests.datafiles import H5MD_xvf

    document = info(H5MD_xvf)
    assert document["elements"] == ["position", "velocity", "force"] and document["n_atoms"] == 19385
    assert document["provenance"] is None and document["warnings"] == 1
    assert document["box"]["kind"] in ("triclinic", "orthorhombic (stored as a matrix)")
    assert document["datasets"]["/observables/lambda/value"]["shape"] == [3]
    text = CliRunner().invoke(cli, ["info", H5MD_xvf]).output
    assert "3 frames x 19385 atoms" in text and "H5MD102" in text


def test_info_stripe_alignment_and_chunk_reason(tmp_path, adk):
    path = str(tmp_path / "aligned.h5md")
    convert(adk[1], path, chunk_frames="auto", stripe_size="256K", progress=False)
    document = info(path)
    assert document["stripe_alignment"]["share"] == 1.0
    text = CliRunner().invoke(cli, ["info", path]).output
    assert "auto:" in text and "chunks start on a 262144 B stripe boundary" in text


def test_info_of_unreadable_files(tmp_path):
    """Regression: ``info --json`` printed no JSON for a file it could not read, and the
    ``error:`` line named no rule."""
    import os

    (tmp_path / "junk.h5md").write_text("junk")
    os.mkfifo(tmp_path / "fifo.h5md")
    for path in (tmp_path / "junk.h5md", tmp_path / "missing.h5md", tmp_path, tmp_path / "fifo.h5md"):
        with pytest.raises(UnreadableError) as caught:
            info(str(path))
        line = f"error: {caught.value} (FILE001)\n"
        result = CliRunner().invoke(cli, ["info", str(path)])
        assert result.exit_code == 1 and result.output == line
        result = CliRunner().invoke(cli, ["info", str(path), "--json"])
        assert result.exit_code == 1 and result.stderr == line
        document = json.loads(result.stdout)
        assert document["file"] == str(path) and document["readable"] is False and document["errors"] == 1
        assert [(f["rule"], f["message"]) for f in document["findings"]] == [("FILE001", str(caught.value))]
        assert str(path) in str(caught.value)


def test_info_of_a_plain_hdf5_file(tmp_path):
    path = str(tmp_path / "plain.h5")
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(10)
    document = info(path)
    assert document["n_frames"] is None and document["datasets"]["/data"]["shape"] == [10]
    assert {f["rule"] for f in document["findings"]} >= {"H5MD001", "MDA001"}
    result = CliRunner().invoke(cli, ["info", path])
    assert result.exit_code == 0 and "no position, velocity or force data found" in result.output


@pytest.mark.mpi
def test_info_under_mpi(comm, shared_tmp, adk):
    import os

    path = os.path.join(shared_tmp, "mpi.h5md")
    convert(adk[1], path, comm=comm, progress=False)
    document = info(path, comm=comm)
    assert comm.allgather(json.dumps(document, sort_keys=True)) == [json.dumps(document, sort_keys=True)] * comm.size
    assert document["n_frames"] == 98 and document["errors"] == 0

"""validate and info: a corpus of broken files built from a good one, garbage, foreign files."""

import json
import os
import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from h5mdtool import convert
from h5mdtool.cli import cli
from h5mdtool.validate import UnreadableFile, validate_file


@pytest.fixture(scope="module")
def good(tmp_path_factory, solvated):
    path = str(tmp_path_factory.mktemp("good") / "good.h5md")
    convert(solvated["TRR"], path, progress=False, stop=4)
    return path


def mutated(tmp_path, good, change):
    path = str(tmp_path / "bad.h5md")
    shutil.copy(good, path)
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def rules(report):
    return {f.rule for f in report.findings}


@pytest.mark.parametrize("fmt", ["XTC", "TRR"])
def test_h5mdtool_outputs_are_clean(tmp_path, solvated, adk, fmt):
    for source, options in ((solvated[fmt], {}), (solvated[fmt], {"compression": "gzip"}), (adk[1], {"chunk_frames": "auto"})):
        path = str(tmp_path / "out.h5md")
        convert(source, path, progress=False, force=True, **options)
        report = validate_file(path, "all")
        assert report.findings == []


def _set(f, path, name, value):
    f[path].attrs[name] = value


CORPUS = {
    "H5MD001": lambda f: f.move("h5md", "not_h5md"),
    "H5MD002": lambda f: _set(f, "h5md", "version", np.array([1.0, 1.0])),
    "H5MD003": lambda f: f["h5md/author"].attrs.__delitem__("name"),
    "H5MD004": lambda f: f["h5md/creator"].attrs.__delitem__("version"),
    "H5MD005": lambda f: f["h5md/modules/units"].attrs.__delitem__("version"),
    "H5MD010": lambda f: _set(f, "particles/trajectory/box", "dimension", "three"),
    "H5MD011": lambda f: _set(f, "particles/trajectory/box", "boundary", np.array(["periodic", "open", "none"], dtype=h5py.string_dtype())),
    "H5MD012": lambda f: f["particles/trajectory/box"].__delitem__("edges"),
    "H5MD020": lambda f: f["particles/trajectory/position/step"].__setitem__(2, 0),
    "H5MD023": lambda f: (f["particles/trajectory/velocity"].__delitem__("value"),
                          f["particles/trajectory/velocity"].create_dataset("value", data=np.zeros((4, 10)))),
    "H5MD024": lambda f: (f["particles/trajectory"].create_group("image").create_dataset("value", data=np.zeros((4, 1, 3))),
                          f.move("particles/trajectory/position", "particles/trajectory/moved")),
    "H5MD104": lambda f: _set(f, "h5md/author", "email", "not an address"),
    "MDA001": lambda f: f.move("particles/trajectory", "particles/system"),
    "MDA005": lambda f: _set(f, "particles/trajectory/position/value", "unit", "furlong"),
    "LINK001": lambda f: f.__setitem__("external", h5py.ExternalLink("elsewhere.h5", "/data")),
    "LINK002": lambda f: f.__setitem__("loop", h5py.SoftLink("/loop")),
}


@pytest.mark.parametrize("rule", list(CORPUS))
def test_each_rule(tmp_path, good, rule):
    path = mutated(tmp_path, good, CORPUS[rule])
    report = validate_file(path, "all")
    assert rule in rules(report), [vars(f) for f in report.findings]


def test_auto_chunked_layout_lint(tmp_path, good):
    def rechunk(f):
        data = f["particles/trajectory/position/value"][:]
        del f["particles/trajectory/position/value"]
        d = f.create_dataset("particles/trajectory/position/value", data=data, chunks=(4, 100, 1), compression="lzf")
        d.attrs["unit"] = "nm"

    report = validate_file(mutated(tmp_path, good, rechunk), "all")
    lint = {f.rule: f for f in report.findings}
    assert "LINT001" in lint and "touches" in lint["LINT001"].message
    assert lint["LINT001"].fix.startswith("h5mdtool convert ") and "--chunk-frames auto" in lint["LINT001"].fix
    assert "LINT004" in lint
    assert not report.errors


def test_garbage_files(tmp_path, solvated):
    (tmp_path / "text.h5md").write_text("hello")
    (tmp_path / "empty.h5md").write_bytes(b"")
    data = open(solvated["XTC"], "rb").read()
    (tmp_path / "xtc.h5md").write_bytes(data[:5000])
    for name in ("text.h5md", "empty.h5md", "xtc.h5md", "missing.h5md"):
        with pytest.raises(UnreadableFile):
            validate_file(str(tmp_path / name))
    with pytest.raises(UnreadableFile, match="directory"):
        validate_file(str(tmp_path))


def test_truncated_hdf5(tmp_path, good):
    data = open(good, "rb").read()
    path = tmp_path / "truncated.h5md"
    path.write_bytes(data[: len(data) // 3])
    try:
        report = validate_file(str(path))
    except UnreadableFile:
        return
    assert report.errors  # opened, but what is missing is reported


def test_foreign_file():
    from MDAnalysisTests.datafiles import H5MD_xvf

    report = validate_file(H5MD_xvf, "all")
    assert not report.errors
    assert rules(report) == {"H5MD102"}


def test_cli_exit_codes_and_json(tmp_path, good):
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", good])
    assert result.exit_code == 0 and "0 error(s), 0 warning(s)" in result.output
    bad = mutated(tmp_path, good, CORPUS["H5MD020"])
    result = runner.invoke(cli, ["validate", bad, "--json"])
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["errors"] >= 1
    finding = document["files"][0]["findings"][0]
    assert set(finding) == {"rule", "severity", "path", "message", "fix"}
    warned = mutated(tmp_path, good, CORPUS["H5MD104"])
    assert runner.invoke(cli, ["validate", warned]).exit_code == 0
    assert runner.invoke(cli, ["validate", warned, "--strict"]).exit_code == 1
    (tmp_path / "junk.h5md").write_text("junk")
    result = runner.invoke(cli, ["validate", str(tmp_path / "junk.h5md")])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_info(tmp_path, good):
    result = CliRunner().invoke(cli, ["info", good, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["n_frames"] == 4 and document["n_atoms"] == 47681
    value = document["datasets"]["/particles/trajectory/position/value"]
    assert value["chunks"] == [1, 47681, 3] and value["one_frame_read"]["chunks"] == 1
    assert document["provenance"]["h5mdtool_version"]
    text = CliRunner().invoke(cli, ["info", good]).output
    assert "4 frames x 47681 atoms" in text and "no findings" in text


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["TRR", "DCD"])
def test_against_catches_one_changed_coordinate(comm, shared_tmp, solvated, adk, fmt):
    from h5mdtool.compare import compare_with_source

    source = solvated["TRR"] if fmt == "TRR" else adk[1]
    path = os.path.join(shared_tmp, "copy.h5md")
    convert(source, path, comm=comm, progress=False)
    comm.Barrier()
    assert compare_with_source([path], [source], comm=comm)["n_differing"] == 0
    if comm.rank == 0:
        with h5py.File(path, "r+") as f:
            f["particles/trajectory/position/value"][7, 11, 2] += 1e-4
    comm.Barrier()
    result = compare_with_source([path], [source], comm=comm)
    assert result["n_differing"] == 1
    assert result["differing"] == [{"frame": 7, "reason": "positions differ"}]
    loose = compare_with_source([path], [source], comm=comm, tolerance=1e-3)
    assert loose["n_differing"] == 0


def test_against_lossy_file_uses_its_precision(tmp_path, adk):
    from h5mdtool.compare import compare_with_source

    path = str(tmp_path / "lossy.h5md")
    convert(adk[1], path, precision=0.01, compression="gzip", progress=False)
    assert compare_with_source([path], [adk[1]])["n_differing"] == 0
    assert compare_with_source([path], [adk[1]], tolerance=0.0)["n_differing"] > 0


@pytest.mark.parametrize("fmt", ["same", "h5md"])
def test_manifest_validation(tmp_path, adk, fmt):
    from h5mdtool import split

    outdir = tmp_path / "parts"
    split(adk[1], str(outdir), 4, format=fmt, progress=False)
    manifest = str(outdir / "manifest.json")
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", manifest, "--against", adk[1]])
    assert result.exit_code == 0, result.output
    part = sorted(p for p in os.listdir(outdir) if p.startswith("part-"))[1]
    with open(outdir / part, "ab") as handle:
        handle.write(b"\0" * 16)
    result = runner.invoke(cli, ["validate", manifest])
    assert result.exit_code == 1 and "MAN003" in result.output
    os.remove(outdir / part)
    result = runner.invoke(cli, ["validate", manifest, "--json"])
    assert result.exit_code == 1 and json.loads(result.output)["files"][0]["findings"][0]["rule"] == "MAN002"


def test_info_reports_alignment_and_chunk_reason(tmp_path, adk):
    path = str(tmp_path / "aligned.h5md")
    convert(adk[1], path, chunk_frames="auto", stripe_size="256K", progress=False)
    document = json.loads(CliRunner().invoke(cli, ["info", path, "--json"]).output)
    assert document["stripe_alignment"]["share"] == 1.0
    text = CliRunner().invoke(cli, ["info", path]).output
    assert "auto:" in text and "chunks start on a 262144 B stripe boundary" in text


HOSTILE = {
    "zero frames": lambda f: (f["particles/trajectory/position"].__delitem__("value"),
                              f["particles/trajectory/position"].create_dataset("value", shape=(0, 47681, 3), maxshape=(None, 47681, 3), dtype="f4")),
    "dataset for a group": lambda f: (f["particles/trajectory"].__delitem__("velocity"),
                                      f["particles/trajectory"].create_dataset("velocity", data=[1, 2, 3])),
    "string step": lambda f: (f["particles/trajectory/position"].__delitem__("step"),
                              f["particles/trajectory/position"].create_dataset("step", data=np.array(["a", "b", "c", "d"], dtype=h5py.string_dtype()))),
    "huge declared shape": lambda f: f.create_dataset("particles/trajectory/force/value", shape=(2**40, 10**6, 3), dtype="f4", chunks=(1, 1000, 3)),
    "attribute of wrong type": lambda f: _set(f, "h5md/author", "name", np.arange(3)),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_content_gives_findings_not_tracebacks(tmp_path, good, case):
    path = mutated(tmp_path, good, HOSTILE[case])
    report = validate_file(path, "all")
    assert report.errors or report.warnings
    result = CliRunner().invoke(cli, ["validate", path])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert CliRunner().invoke(cli, ["info", path]).exit_code in (0, 1)

"""validate: one broken file per rule (built from a good one), hostile content, garbage,
a foreign H5MD file, --against, manifests, exit codes, the JSON document, the docs."""

import json
import os
import re
import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import ROOT, run_h5mdtool
from h5mdtool import convert, split, validate
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import UnreadableError
from h5mdtool.check.findings import RULES
from h5mdtool.cli.validate import expand_greedy
from h5mdtool.check.validate import _mdanalysis_read, unit_string_problem, validate_file, validate_manifest

TRAJ = "particles/trajectory"


@pytest.fixture(scope="module")
def good(tmp_path_factory, solvated):
    """4 frames of the solvated TRR (positions, velocities, periodic box), as convert writes it."""
    path = str(tmp_path_factory.mktemp("good") / "good.h5md")
    convert(solvated["TRR"], path, progress=False, stop=4)
    return path


def mutated(tmp_path, good, change, name="bad.h5md"):
    path = str(tmp_path / name)
    shutil.copy(good, path)
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def rules(report, severities=("error", "warning", "note")):
    return {f.rule for f in report.findings if f.severity in severities}


def replace(f, path, **kwargs):
    """Replace dataset *path* by a new one made with ``create_dataset(**kwargs)``, keeping attributes."""
    attrs = dict(f[path].attrs)
    del f[path]
    dataset = f.create_dataset(path, **kwargs)
    for key, value in attrs.items():
        dataset.attrs[key] = value
    return dataset


def setattr_(f, path, name, value):
    f[path].attrs[name] = value


def delattr_(f, path, name):
    del f[path].attrs[name]


def corrupt(path, at, length=32):
    data = bytearray(open(path, "rb").read())
    data[at:at + length] = b"\xff" * length
    open(path, "wb").write(bytes(data))


def strings(*values):
    return np.array(values, dtype=h5py.string_dtype())


def many_links(f):
    group = f.create_group("parameters/many")
    for i in range(40):
        group.create_group(f"item{i:03d}")


def undecodable(f):
    """velocity/value re-stored with chunks of a filter no HDF5 has (id 33000, outside the registered range)."""
    del f[f"{TRAJ}/velocity/value"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((1, 47681, 3))
    dcpl.set_filter(33000, h5py.h5z.FLAG_OPTIONAL, (0, 0, 0, 0, 4, 1, 1))
    space = h5py.h5s.create_simple((4, 47681, 3))
    dataset = h5py.Dataset(h5py.h5d.create(f[f"{TRAJ}/velocity"].id, b"value", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl))
    for frame in range(4):
        dataset.id.write_direct_chunk((frame, 0, 0), b"\x01" * 64, filter_mask=0)
    dataset.attrs["unit"] = "nm ps-1"


def auto_chunked(f):
    """Positions re-stored as h5py's auto-chunking stores a resizable dataset (pyh5md did so)."""
    data = f[f"{TRAJ}/position/value"][:]
    replace(f, f"{TRAJ}/position/value", data=data, chunks=True, maxshape=(None, None, 3))


def reorder_particles(f):
    """/particles without creation order, with a group listed before trajectory."""
    f.move("particles", "old")
    f.create_group("particles")  # iterated by name
    f.move("old/trajectory", f"{TRAJ}")
    del f["old"]
    box = f.create_group("particles/another/box")
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = strings("none", "none", "none")


#: One mutation per rule: the rule must be reported for the mutated good file.
CORPUS = {
    "H5MD001": lambda f: f.move("h5md", "not_h5md"),
    "H5MD002": lambda f: setattr_(f, "h5md", "version", np.array([1.0, 1.0])),
    "H5MD003": lambda f: delattr_(f, "h5md/author", "name"),
    "H5MD004": lambda f: delattr_(f, "h5md/creator", "version"),
    "H5MD005": lambda f: delattr_(f, "h5md/modules/units", "version"),
    "H5MD006": lambda f: setattr_(f, "h5md", "version", np.array([2, 0], dtype=np.int32)),
    "H5MD010": lambda f: setattr_(f, f"{TRAJ}/box", "dimension", "three"),
    "H5MD011": lambda f: setattr_(f, f"{TRAJ}/box", "boundary", strings("periodic", "open", "none")),
    "H5MD012": lambda f: f[f"{TRAJ}/box"].__delitem__("edges"),
    "H5MD013": lambda f: replace(f, f"{TRAJ}/box/edges/value", data=np.ones((4, 2, 3), np.float32)),
    "H5MD014": lambda f: (f[TRAJ].__delitem__("box"), f[TRAJ].create_dataset("box", data=[1.0, 2.0, 3.0])),
    "H5MD020": lambda f: f[f"{TRAJ}/velocity"].__delitem__("value"),
    "H5MD021": lambda f: f[f"{TRAJ}/velocity"].__delitem__("step"),
    "H5MD022": lambda f: replace(f, f"{TRAJ}/position/step", data=np.arange(5, dtype=np.int64)),
    "H5MD023": lambda f: f[f"{TRAJ}/position/step"].__setitem__(2, f[f"{TRAJ}/position/step"][1]),
    "H5MD024": lambda f: replace(f, f"{TRAJ}/position/time", data=np.arange(5.0)),
    "H5MD030": lambda f: replace(f, f"{TRAJ}/velocity/value", data=np.zeros((4, 10), np.float32)),
    "H5MD031": lambda f: (f[TRAJ].create_group("image").create_dataset("value", data=np.zeros((4, 1, 3), np.int32)),
                          f.move(f"{TRAJ}/position", f"{TRAJ}/moved")),
    "H5MD032": lambda f: replace(f, f"{TRAJ}/box/edges/step", data=f[f"{TRAJ}/position/step"][:]),
    "H5MD033": lambda f: f[TRAJ].create_dataset("mass", data=np.ones(10, np.float32)),
    "H5MD101": lambda f: delattr_(f, f"{TRAJ}/position/time", "unit"),
    "H5MD102": lambda f: f["h5md/modules"].__delitem__("units"),
    "H5MD103": lambda f: setattr_(f, "h5md/author", "name", "Variable Length"),  # h5mdtool writes fixed-length
    "H5MD104": lambda f: setattr_(f, f"{TRAJ}/position/value", "unit", "Angstrom"),
    "H5MD105": lambda f: setattr_(f, "h5md/author", "email", "not an address"),
    "MDA001": lambda f: f.move(TRAJ, "moved"),
    "MDA012": lambda f: f.move(TRAJ, "particles/system"),
    "MDA002": lambda f: setattr_(f, f"{TRAJ}/box", "dimension", np.int32(2)),
    "MDA003": lambda f: f[f"{TRAJ}/position"].__delitem__("time"),
    "MDA004": lambda f: (f.move(f"{TRAJ}/position", f"{TRAJ}/positions"), f.move(f"{TRAJ}/velocity", f"{TRAJ}/velocities")),
    "MDA005": lambda f: setattr_(f, f"{TRAJ}/position/value", "unit", "furlong"),
    "MDA006": reorder_particles,
    "MDA007": lambda f: f.create_dataset("observables/temperature", data=300.0),
    "MDA008": lambda f: replace(f, f"{TRAJ}/velocity/value", data=np.zeros((3, 47681, 3), np.float32)),
    "MDA009": lambda f: replace(f, f"{TRAJ}/box/edges/value", data=np.ones((2, 3, 3), np.float32)),
    "MDA010": undecodable,
    "MDA011": lambda f: [replace(f, f"{TRAJ}/{e}/value", shape=(0, 47681, 3), maxshape=(None, 47681, 3), dtype="f4", chunks=(1, 47681, 3))
                         for e in ("position", "velocity")]
    + [replace(f, f"{TRAJ}/position/{s}", shape=(0,), maxshape=(None,), dtype=d, chunks=(64,)) for s, d in (("step", "i8"), ("time", "f8"))],
    "MDA900": lambda f: replace(f, f"{TRAJ}/position/value", data=np.full((4, 47681, 3), b"x", dtype="S1")),
    "MDA902": lambda f: f.__setitem__("observables/elsewhere", h5py.ExternalLink("elsewhere.h5", "/energy")),
    "MDA013": lambda f: f[f"{TRAJ}/box/edges/value"].attrs.__setitem__("unit", "Angstrom"),
    "DATA001": lambda f: f[f"{TRAJ}/position/value"].__setitem__(2, 0.0),
    "DATA002": lambda f: f[f"{TRAJ}/velocity/value"].__setitem__((1, 5, 0), np.nan),
    "DATA003": lambda f: f[f"{TRAJ}/position/value"].__setitem__(3, f[f"{TRAJ}/position/value"][3] + 1000 * f[f"{TRAJ}/box/edges/value"][3].max()),
    "DATA004": lambda f: f[f"{TRAJ}/position/step"].__setitem__(2, 0),
    "DATA005": lambda f: f[f"{TRAJ}/box/edges/value"].__setitem__((1, 2, 2), 0.0),
    "DATA006": lambda f: replace(f, f"{TRAJ}/velocity/value", shape=(4, 47681, 3), dtype="f4", chunks=(1, 47681, 3)).__setitem__(np.s_[:2], 1.0),
    "LINT001": auto_chunked,
    "LINT002": lambda f: replace(f, f"{TRAJ}/velocity/value", data=f[f"{TRAJ}/velocity/value"][:], chunks=(1, 47681, 1)),
    "LINT003": lambda f: replace(f, f"{TRAJ}/velocity/value", data=f[f"{TRAJ}/velocity/value"][:], chunks=(4, 47681, 3), compression="gzip"),
    "LINT004": lambda f: replace(f, f"{TRAJ}/velocity/value", data=f[f"{TRAJ}/velocity/value"][:], chunks=(1, 47681, 3), compression="lzf"),
    "LINT006": lambda f: replace(f, f"{TRAJ}/velocity/value", data=f[f"{TRAJ}/velocity/value"][:], chunks=(1, 47681, 3),
                                 **__import__("hdf5plugin").Zstd(clevel=3)),
    "LINK001": lambda f: f.__setitem__("external", h5py.ExternalLink("elsewhere.h5", "/data")),
    "LINK002": lambda f: f[TRAJ].__setitem__("loop", h5py.SoftLink(f"/{TRAJ}/loop")),
}
#: Rules not in the corpus, and where they are tested instead.
ELSEWHERE = {
    "FILE001": "test_garbage_files", "FILE002": "test_unlistable_group", "FILE003": "test_damaged_object_header",
    "FILE004": "test_hdf5_crash_is_contained", "FILE005": "test_hdf5_hang_is_stopped (test_hangs.py)",
    "FILE006": "test_filter_not_available (test_foreign.py)",
    "LINT005": "test_large_contiguous_lint (a 16 GiB dataset is not written)",
    "MDA901": "test_mdanalysis_reads_through_mpio", "MAN001": "test_manifests", "MAN002": "test_manifests",
    "MAN003": "test_manifests", "MAN004": "test_manifests", "MAN005": "test_manifests", "MAN006": "test_manifests",
    **{rule: "test_manifest.py" for rule in ("MAN007", "MAN008", "MAN009", "MAN010", "MAN011", "MAN012", "MAN013",
                                             "MAN014", "MAN015")},
    "MAN016": "test_validate_finds_one_flipped_byte_in_a_part (test_checksums.py)",
    "AGAINST001": "test_against_counts_differ", "AGAINST002": "test_against_catches_one_changed_coordinate",
    "AGAINST003": "test_against_box_mismatch_and_unreadable",
}


def test_every_rule_is_tested_and_documented():
    assert set(CORPUS) | set(ELSEWHERE) == set(RULES)
    assert not set(CORPUS) & set(ELSEWHERE)
    with open(os.path.join(ROOT, "docs", "validation.md")) as handle:
        rows = re.findall(r"^\| ([A-Z][A-Z0-9]*\d{3}) \| (\w+) \| (.*) \| (.*) \|$", handle.read(), flags=re.MULTILINE)
    documented = {rule: (severity, meaning, fix.strip()) for rule, severity, meaning, fix in rows}
    assert len(documented) == len(rows)  # each rule documented once
    assert documented == {rule: (r.severity, r.meaning, r.fix) for rule, r in RULES.items()}


@pytest.mark.parametrize("rule", sorted(CORPUS))
def test_each_rule(tmp_path, good, rule):
    path = mutated(tmp_path, good, CORPUS[rule])
    report = validate_file(path, "all")
    assert rule in rules(report), [vars(f) for f in report.findings]
    severity = RULES[rule].severity
    assert any(f.rule == rule and f.severity == severity for f in report.findings)


@pytest.mark.parametrize("fmt", ["XTC", "TRR", "DCD"])
@pytest.mark.parametrize("options", [{}, {"compression": "gzip"}, {"chunk_frames": "auto"}], ids=["plain", "gzip", "auto"])
def test_h5mdtool_outputs_are_clean(tmp_path, solvated, adk, fmt, options):
    source = adk[1] if fmt == "DCD" else solvated[fmt]
    path = str(tmp_path / "out.h5md")
    convert(source, path, progress=False, **options)
    report = validate([path], profile="all", against=[source])
    assert report.errors == 0 and report.warnings == 0, report.to_json()
    assert rules(report.files[0]) == set()  # no notes either
    assert report.files[0].comparison["n_differing"] == 0
    assert report.exit_code == 0 and validate([path], strict=True).exit_code == 0


def test_parallel_gzip_output_is_clean(tmp_path, solvated):
    path = str(tmp_path / "parallel.h5md")
    result = run_h5mdtool(["convert", solvated["XTC"], "-o", path, "--compression", "gzip", "--no-progress"], ranks=2)
    assert result.returncode == 0, result.stderr
    result = run_h5mdtool(["validate", path, "--strict", "--against", solvated["XTC"]], ranks=2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "10 frames equal to the source (positions, box, step, time) on 2 ranks" in result.stdout
    assert result.stdout.count("out.h5md") == 0 and result.stdout.count("parallel.h5md:") == 1  # rank 0 prints once


def test_zstd_output_read_through_mpi_io_under_mpirun(tmp_path, solvated):
    """MDA901 (MDAnalysis's reader through MPI-IO) runs in the command's own process, which
    must load hdf5plugin's filters itself: without, it found `Can't read data` (make demo)."""
    path = str(tmp_path / "zstd.h5md")
    result = run_h5mdtool(["convert", solvated["XTC"], "-o", path, "--compression", "zstd", "--no-progress"])
    assert result.returncode == 0, result.stderr
    result = run_h5mdtool(["validate", path, "--against", solvated["XTC"]], ranks=2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MDA901" not in result.stdout and "10 frames equal to the source" in result.stdout


def test_auto_chunked_layout_lint_and_its_fix(tmp_path, good):
    path = mutated(tmp_path, good, auto_chunked, "auto.h5md")
    report = validate_file(path, "all")
    lint = {f.rule: f for f in report.findings}
    assert "LINT001" in lint and "LINT002" in lint and not report.errors
    with h5py.File(path, "r") as f:
        chunks = f[f"{TRAJ}/position/value"].chunks
    assert chunks[0] == 1 and chunks[1] < 47681 and chunks[2] == 1  # h5py's guess for this shape
    touched = -(-47681 // chunks[1]) * 3
    assert f"touches {touched} chunks" in lint["LINT001"].message
    fix = lint["LINT001"].fix
    assert fix == f"h5mdtool convert {path} -o {path[:-5]}_relayout.h5md --chunk-frames auto"
    result = run_h5mdtool(fix.split()[1:] + ["--no-progress"])
    assert result.returncode == 0, result.stderr
    fixed = validate([f"{path[:-5]}_relayout.h5md"], against=[path])
    assert fixed.errors == 0 and fixed.warnings == 0 and fixed.files[0].comparison["n_differing"] == 0


def test_lint_fix_keeps_compression_and_precision(tmp_path, adk):
    path = str(tmp_path / "lossy.h5md")
    convert(adk[1], path, precision=0.001, compression="gzip", compression_level=6, progress=False)

    def split_frames(f):
        data = f[f"{TRAJ}/position/value"][:]
        replace(f, f"{TRAJ}/position/value", data=data, chunks=(98, 1000, 3), compression="gzip", compression_opts=6)

    report = validate_file(mutated(tmp_path, path, split_frames), "all")
    fixes = {f.fix for f in report.findings if f.rule.startswith("LINT")}
    assert fixes == {f"h5mdtool convert {tmp_path}/bad.h5md -o {tmp_path}/bad_relayout.h5md --chunk-frames auto "
                     "--compression gzip --compression-level 6 --precision 0.001"}
    assert {"LINT001", "LINT003"} <= rules(report)


def test_large_contiguous_lint(tmp_path, good):
    path = mutated(tmp_path, good, lambda f: f.create_dataset(f"{TRAJ}/force/value", shape=(2**20, 47681, 3), dtype="f4"))
    report = validate_file(path, "all")
    assert "LINT005" in rules(report)  # declared 600 GB, never written: contiguous storage is not allocated


def test_unit_strings():
    for good_unit in ("nm", "ps", "nm ps-1", "kJ mol-1 nm-1", "nm+3", "um+2 s-1", "60 s", "10+3 m", "Ang", "kg", "u"):
        assert unit_string_problem(good_unit) is None, good_unit
    for bad_unit in ("Angstrom", "furlong", "nm  ps-1", "s 60", "nm nm", "", "nm ps^-1"):
        assert unit_string_problem(bad_unit), bad_unit


def test_garbage_files(tmp_path, solvated):
    (tmp_path / "text.h5md").write_text("hello")
    (tmp_path / "empty.h5md").write_bytes(b"")
    (tmp_path / "xtc.h5md").write_bytes(open(solvated["XTC"], "rb").read()[:5000])
    runner = CliRunner()
    for name in ("text.h5md", "empty.h5md", "xtc.h5md", "missing.h5md"):
        with pytest.raises(UnreadableError):
            validate_file(str(tmp_path / name))
        result = runner.invoke(cli, ["validate", str(tmp_path / name)])
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    result = runner.invoke(cli, ["validate", str(tmp_path)])
    assert result.exit_code == 1 and "is a directory" in result.output


def test_truncated_hdf5(tmp_path, good):
    path = tmp_path / "truncated.h5md"
    data = open(good, "rb").read()
    path.write_bytes(data[: len(data) // 3])
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1 and "truncated" in result.output and result.output.count("\n") == 1
    assert CliRunner().invoke(cli, ["info", str(path)]).exit_code == 1


def test_damaged_object_header(tmp_path, good):
    path = str(tmp_path / "damaged.h5md")
    shutil.copy(good, path)
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f[f"{TRAJ}/velocity/value"].id).addr
    corrupt(path, address + 8)
    report = validate_file(path, "all")
    assert "FILE003" in rules(report) and "H5MD020" in rules(report)
    assert CliRunner().invoke(cli, ["validate", path]).exit_code == 1


def test_unlistable_group(tmp_path):
    path = str(tmp_path / "old.h5")
    with h5py.File(path, "w", libver="earliest") as f:  # old-style groups: symbol-table nodes
        group = f.create_group("parameters/many")
        for i in range(40):
            group.create_group(f"item{i:03d}")
    data = open(path, "rb").read()
    at = data.rfind(b"SNOD")
    with open(path, "r+b") as handle:
        handle.seek(at)
        handle.write(b"XXXX")
    report = validate_file(path, "all")
    assert ("FILE002", "/parameters/many") in {(f.rule, f.path) for f in report.findings}
    assert "H5MD001" in rules(report)


def _crash():
    import ctypes

    ctypes.string_at(0)  # reads address 0: a segmentation fault


def test_hdf5_crash_is_contained(tmp_path, good):
    import signal

    from h5mdtool.check.h5access import isolated

    assert isolated(_crash) == ("crash", signal.SIGSEGV)
    assert isolated(divmod, 7, 2) == ("ok", (3, 1))
    path = mutated(tmp_path, good, many_links)
    data = open(path, "rb").read()
    corrupt(path, data.find(b"FHDB"), 64)  # a damaged fractal-heap block: HDF5 1.10.8 crashes listing the group
    result = CliRunner().invoke(cli, ["validate", path, "--json"])
    assert result.exit_code == 1
    found = {f["rule"] for f in json.loads(result.stdout)["files"][0]["findings"]}
    assert found & {"FILE004", "FILE002", "FILE003"}
    result = CliRunner().invoke(cli, ["info", path])
    assert result.exit_code in (0, 1) and "Traceback" not in result.output


def test_foreign_file():
    from MDAnalysisTests.datafiles import H5MD_xvf

    report = validate_file(H5MD_xvf, "all")
    assert not report.errors
    assert rules(report, ("warning",)) == {"H5MD102"}  # written by MDAnalysis without a units module
    assert rules(report, ("note",)) == {"H5MD103"}
    result = CliRunner().invoke(cli, ["validate", H5MD_xvf])
    assert result.exit_code == 0 and "1 warning, 4 notes" in result.output
    assert CliRunner().invoke(cli, ["validate", H5MD_xvf, "--strict"]).exit_code == 1


def test_profiles(tmp_path, good):
    path = mutated(tmp_path, good, lambda f: (setattr_(f, f"{TRAJ}/position/value", "unit", "furlong"), auto_chunked(f)))
    assert rules(validate_file(path, "h5md")) == {"H5MD104"}
    assert rules(validate_file(path, "mdanalysis")) == {"MDA005"}
    assert rules(validate_file(path, "all")) == {"H5MD104", "MDA005", "LINT001", "LINT002"}
    result = CliRunner().invoke(cli, ["validate", path, "--profile", "h5md"])
    assert result.exit_code == 0 and "H5MD104" in result.output
    assert CliRunner().invoke(cli, ["validate", path, "--profile", "mdanalysis"]).exit_code == 1


def test_exit_codes_and_json(tmp_path, good):
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", good])
    assert result.exit_code == 0 and result.output.startswith(f"{good}: no findings")
    bad = mutated(tmp_path, good, CORPUS["DATA004"])
    warned = mutated(tmp_path, good, CORPUS["H5MD105"], "warned.h5md")
    assert runner.invoke(cli, ["validate", warned]).exit_code == 0
    assert runner.invoke(cli, ["validate", warned, "--strict"]).exit_code == 1
    (tmp_path / "junk.h5md").write_text("junk")
    result = runner.invoke(cli, ["validate", good, bad, warned, str(tmp_path / "junk.h5md"), "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert set(document) == {"h5mdtool_version", "profile", "strict", "against", "tolerance", "files", "errors",
                             "warnings", "notes", "unreadable", "exit_code"}
    assert document["exit_code"] == 1 and document["unreadable"] == [str(tmp_path / "junk.h5md")]
    assert [f["file"] for f in document["files"]] == [good, bad, warned, str(tmp_path / "junk.h5md")]
    assert [f["errors"] for f in document["files"]] == [0, 1, 0, 1]
    assert document["errors"] == 2 and document["warnings"] == 1 and document["notes"] == 1  # warned's e-mail
    for file in document["files"]:
        assert set(file) == {"file", "kind", "readable", "errors", "warnings", "notes", "findings", "comparison"}
        for finding in file["findings"]:
            assert set(finding) == {"rule", "severity", "path", "message", "fix"}
            assert finding["rule"] in RULES and finding["severity"] == RULES[finding["rule"]].severity
    step = [f for f in document["files"][1]["findings"] if f["rule"] == "DATA004"]
    assert step == [{"rule": "DATA004", "severity": "error", "path": f"/{TRAJ}/position/step",
                     "message": "step goes backwards at frame 2 (1 of 4 frames)", "fix": RULES["DATA004"].fix}]
    assert document["files"][3]["readable"] is False and document["files"][3]["findings"][0]["rule"] == "FILE001"


def _set_dataset(f, path, data):
    attrs = dict(f[path].attrs) if path in f else {}
    if path in f:
        del f[path]
    f[path] = data
    for key, value in attrs.items():
        f[path].attrs[key] = value


HOSTILE = {
    "zero frames, resizable": CORPUS["MDA011"],
    "huge declared shape": lambda f: (replace(f, f"{TRAJ}/position/value", shape=(2**40, 10**6, 3), dtype="f4", chunks=(1, 1000, 3), maxshape=(None, None, 3)),
                                      replace(f, f"{TRAJ}/position/step", shape=(2**40,), dtype="i8", chunks=(4096,), maxshape=(None,))),
    "zero atoms": lambda f: replace(f, f"{TRAJ}/velocity/value", shape=(4, 0, 3), dtype="f4", chunks=(1, 1, 3), maxshape=(None, None, 3)),
    "string step": lambda f: _set_dataset(f, f"{TRAJ}/position/step", strings("a", "b", "c", "d")),
    "string where the dimension belongs": CORPUS["H5MD010"],
    "float dimension": lambda f: setattr_(f, f"{TRAJ}/box", "dimension", 3.0),
    "boundary of numbers": lambda f: setattr_(f, f"{TRAJ}/box", "boundary", np.arange(3)),
    "compound values": lambda f: replace(f, f"{TRAJ}/velocity/value", data=np.zeros((4, 5, 3), dtype=[("a", "i4"), ("b", "f8")])),
    "empty dataspace value": lambda f: replace(f, f"{TRAJ}/velocity/value", data=h5py.Empty("f4")),
    "scalar value": lambda f: replace(f, f"{TRAJ}/velocity/value", data=1.0),
    "2-D step": lambda f: replace(f, f"{TRAJ}/position/step", data=np.zeros((4, 2), np.int64)),
    "NaN time": lambda f: f[f"{TRAJ}/position/time"].__setitem__(1, np.nan),
    "attribute of wrong type": lambda f: setattr_(f, "h5md/author", "name", np.arange(3)),
    "particles is a dataset": lambda f: (f.__delitem__("particles"), f.create_dataset("particles", data=[1, 2])),
    "h5md is a dataset": lambda f: (f.__delitem__("h5md"), f.create_dataset("h5md", data=[1, 2])),
    "position is a dataset": lambda f: (f[TRAJ].__delitem__("position"), f[TRAJ].create_dataset("position", data=np.zeros((5, 3)))),
    "velocity is a dataset of ints": lambda f: (f[TRAJ].__delitem__("velocity"), f[TRAJ].create_dataset("velocity", data=[1, 2, 3])),
    "soft link loop in the particle group": CORPUS["LINK002"],
    "two soft links pointing at each other": lambda f: (f.__setitem__("a", h5py.SoftLink("/b")), f.__setitem__("b", h5py.SoftLink("/a")),
                                                        f[TRAJ].__setitem__("velocity2", h5py.SoftLink("/a"))),
    "soft link through an external link": lambda f: (f.__setitem__("ext", h5py.ExternalLink("/etc/hostname", "/x")),
                                                     f[TRAJ].__delitem__("velocity"), f[TRAJ].__setitem__("velocity", h5py.SoftLink("/ext/v"))),
    "external link to the box": lambda f: (f[TRAJ].__delitem__("box"), f[TRAJ].__setitem__("box", h5py.ExternalLink("other.h5", "/box"))),
    "hard link cycle": lambda f: f[TRAJ].__setitem__("cycle", f["particles"]),
    "observable of strings": lambda f: f.create_group("observables/e").create_dataset("value", data=strings("x")),
    "manifest-like junk group names": lambda f: f.create_group("particles/ with spaces /and/ deeper"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_content_gives_findings_not_tracebacks(tmp_path, good, case):
    path = mutated(tmp_path, good, HOSTILE[case])
    report = validate_file(path, "all")
    assert report.errors, [vars(f) for f in report.findings]
    for command in (["validate", path], ["validate", path, "--json"], ["info", path], ["info", path, "--json"]):
        result = CliRunner().invoke(cli, command)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "Traceback" not in result.output
    assert CliRunner().invoke(cli, ["validate", path]).exit_code == 1
    assert CliRunner().invoke(cli, ["info", path]).exit_code == 0


def test_external_link_is_not_followed(tmp_path, good):
    target = tmp_path / "target.h5"
    with h5py.File(target, "w") as f:
        f.create_group("box").attrs["dimension"] = np.int32(3)
    path = mutated(tmp_path, good, HOSTILE["external link to the box"])
    report = validate_file(path, "all")
    assert {f.rule for f in report.findings if f.path == f"/{TRAJ}/box"} >= {"LINK001", "H5MD010", "MDA002"}
    os.chmod(target, 0)  # following the link would fail differently
    try:
        assert rules(validate_file(path, "all")) == rules(report)
    finally:
        os.chmod(target, 0o644)


def test_greedy_against_option():
    """--against takes one value per use; after the files, the older several-value spelling still works."""
    assert expand_greedy(["f.h5md", "--against", "a.xtc", "b.xtc", "--json"]) == \
        (["f.h5md", "--against", "a.xtc", "--against", "b.xtc", "--json"], ["b.xtc"])
    assert expand_greedy(["f.h5md", "--against=a.xtc", "b.xtc"]) == (["f.h5md", "--against=a.xtc", "--against", "b.xtc"], ["b.xtc"])
    assert expand_greedy(["x", "--", "--against"]) == (["x", "--", "--against"], [])
    # before the files, --against takes one value: the next argument is a file to validate
    assert expand_greedy(["--against", "md.xtc", "f.h5md"]) == (["--against", "md.xtc", "f.h5md"], [])
    assert expand_greedy(["--against", "a.xtc", "--against", "b.xtc", "f.h5md", "g.h5md"]) == \
        (["--against", "a.xtc", "--against", "b.xtc", "f.h5md", "g.h5md"], [])
    # the values of other options are not files
    assert expand_greedy(["--profile", "h5md", "--against", "a.xtc", "f.h5md"], value_options={"--profile"}) == \
        (["--profile", "h5md", "--against", "a.xtc", "f.h5md"], [])


def test_mdanalysis_read_check_detects_what_rules_miss(tmp_path, good):
    path = mutated(tmp_path, good, CORPUS["MDA900"])
    failure = _mdanalysis_read(path)
    assert failure is not None
    report = validate_file(path, "mdanalysis")
    assert [f.rule for f in report.findings] == ["MDA900"] and failure in report.findings[0].message


@pytest.mark.mpi
def test_mdanalysis_reads_through_mpio(comm, shared_tmp, solvated):
    from h5mdtool.check.validate import _mpi_self

    path = os.path.join(shared_tmp, "mpio.h5md")
    convert(solvated["XTC"], path, comm=comm, progress=False, stop=3)
    comm.Barrier()
    if comm.size > 1:
        assert _mpi_self() is not None
        assert _mdanalysis_read(path, driver="mpio", comm=_mpi_self()) is None
        missing = os.path.join(shared_tmp, "missing.h5md")
        assert _mdanalysis_read(missing, driver="mpio", comm=_mpi_self())
    report = validate([path], comm=comm)
    assert report.exit_code == 0 and report.errors == 0 and report.warnings == 0


# -- --against ----------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["XTC", "TRR", "DCD"])
def test_against_catches_one_changed_coordinate(comm, shared_tmp, solvated, adk, fmt):
    from h5mdtool.check.compare import compare_with_source

    source = adk[1] if fmt == "DCD" else solvated[fmt]
    path = os.path.join(shared_tmp, "copy.h5md")
    convert(source, path, comm=comm, progress=False)
    comm.Barrier()
    clean = compare_with_source([path], [source], comm=comm)
    assert clean["n_differing"] == 0 and clean["compared_frames"] == clean["source_n_frames"]
    assert clean["tolerances"]["relative"] == (2.5e-7 if fmt == "DCD" else 0.0)
    if comm.rank == 0:
        with h5py.File(path, "r+") as f:
            f[f"{TRAJ}/position/value"][7, 11, 2] += 1e-4
    comm.Barrier()
    result = compare_with_source([path], [source], comm=comm)
    assert result["n_differing"] == 1
    assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(7, ["positions"])]
    assert "(atom 11)" in result["differing"][0]["reason"]
    assert compare_with_source([path], [source], comm=comm, tolerance=1e-3)["n_differing"] == 0
    report = validate([path], comm=comm, against=[source])
    assert report.exit_code == 1
    assert [f.rule for f in report.files[0].findings if f.severity == "error"] == ["AGAINST002"]
    message = report.files[0].findings[-1].message
    assert message.startswith(f"1 of {clean['compared_frames']} frames differ from the source; first: frame 7: positions differ at 1 atom(s), the most by ")
    assert message.endswith(" nm (atom 11)")


@pytest.mark.mpi
def test_against_reports_step_time_box_and_velocities(comm, shared_tmp, solvated):
    from h5mdtool.check.compare import compare_with_source

    path = os.path.join(shared_tmp, "copy.h5md")
    convert(solvated["TRR"], path, comm=comm, progress=False)
    comm.Barrier()
    if comm.rank == 0:
        with h5py.File(path, "r+") as f:
            f[f"{TRAJ}/velocity/value"][2, 0, 0] += 1.0
            f[f"{TRAJ}/box/edges/value"][4, 1, 1] *= 1.01
            f[f"{TRAJ}/position/step"][6] += 1  # hard-linked: box and velocity too
            f[f"{TRAJ}/position/time"][9] += 0.5
    comm.Barrier()
    result = compare_with_source([path], [solvated["TRR"]], comm=comm)
    assert [(d["frame"], d["differs"]) for d in result["differing"]] == [
        (2, ["velocities"]), (4, ["box"]), (6, ["step"]), (9, ["time"])]
    assert result["n_differing"] == 4 and result["fields"] == ["positions", "velocities"]


def test_against_lossy_file_uses_its_precision(tmp_path, adk):
    from h5mdtool.check.compare import compare_with_source

    path = str(tmp_path / "lossy.h5md")
    convert(adk[1], path, precision=0.01, compression="gzip", progress=False)
    result = compare_with_source([path], [adk[1]])
    assert result["n_differing"] == 0 and result["tolerances"]["lossy_precision_nm"] == 0.01
    assert result["tolerances"]["positions_absolute_nm"] == 0.005
    assert compare_with_source([path], [adk[1]], tolerance=0.0)["n_differing"] == 98
    assert compare_with_source([path], [adk[1]], tolerance=0.004)["n_differing"] > 0


def test_against_segments_and_greedy_cli(adk_segments, tmp_path):
    path = str(tmp_path / "whole.h5md")
    convert(adk_segments["whole"], path, progress=False)
    result = CliRunner().invoke(cli, ["validate", path, "--against", *adk_segments["parts"], "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("note: one --against for several segments") and "--against once per" in result.stderr
    document = json.loads(result.stdout)
    assert document["against"] == adk_segments["parts"]
    assert document["files"][0]["comparison"]["compared_frames"] == 98


def test_against_counts_differ(tmp_path, adk):
    path = str(tmp_path / "short.h5md")
    convert(adk[1], path, progress=False, stop=50)
    report = validate([path], against=[adk[1]])
    assert [f.rule for f in report.files[0].errors] == ["AGAINST001"]
    assert "50 frames, the source has 98" in report.files[0].errors[0].message
    other = str(tmp_path / "other.h5md")
    convert(adk[1], other, progress=False, topology=adk[0], select="name CA")
    with h5py.File(other, "r+") as f:  # without the atoms' ids, no atom of the source is known to be theirs
        del f["particles/trajectory/id"]
    report = validate([other], against=[adk[1]])
    assert "214 atoms, the source has 3341" in report.files[0].errors[0].message


def test_against_box_mismatch_and_unreadable(tmp_path, solvated):
    good = str(tmp_path / "full.h5md")
    convert(solvated["TRR"], good, progress=False)
    report = validate([good], against=[solvated["TRR"]])
    assert report.files[0].errors == [] and report.files[0].comparison["compared_frames"] == 10
    bad = mutated(tmp_path, good, lambda f: f[f"{TRAJ}/position"].__delitem__("step"))
    report = validate([bad], against=[solvated["TRR"]])
    assert "AGAINST003" in rules(report.files[0])
    nobox = mutated(tmp_path, good, lambda f: (f[f"{TRAJ}/box"].__delitem__("edges"),
                                               setattr_(f, f"{TRAJ}/box", "boundary", strings("none", "none", "none"))), "nobox.h5md")
    report = validate([nobox], against=[solvated["TRR"]])
    assert [f.rule for f in report.files[0].errors] == ["AGAINST003"]
    assert "has no box" in report.files[0].errors[0].message
    result = CliRunner().invoke(cli, ["validate", good, "--against", str(tmp_path / "missing.xtc")])
    assert result.exit_code == 1 and result.output.startswith("error: ") and result.output.count("\n") == 1



def test_against_truncated_source_with_on_truncated_drop(tmp_path, adk_frames):
    """A file made with ``convert --on-truncated drop`` is checked against that source."""
    from conftest import write_xtc
    from h5mdtool.formats import scan

    source = str(tmp_path / "crashed.xtc")
    write_xtc(source, adk_frames[:5], np.arange(5), np.arange(5.0))
    start = int(scan([source]).segments[0].offsets[4])
    with open(source, "r+b") as handle:
        handle.truncate(start + 200)
    path = str(tmp_path / "kept.h5md")
    convert(source, path, on_truncated="drop", progress=False)
    refused = CliRunner().invoke(cli, ["validate", path, "--against", source])
    assert refused.exit_code == 1 and "--on-truncated drop" in refused.output
    result = CliRunner().invoke(cli, ["validate", path, "--against", source, "--on-truncated", "drop", "--json"])
    assert result.exit_code == 0, result.output
    comparison = json.loads(result.stdout)["files"][0]["comparison"]
    assert comparison["compared_frames"] == comparison["source_n_frames"] == 4 and comparison["n_differing"] == 0
    changed = mutated(tmp_path, path, lambda f: f[f"{TRAJ}/position/value"].__setitem__((3, 0, 0), 99.0))
    report = validate([changed], against=[source], on_truncated="drop")
    assert [f.rule for f in report.files[0].errors] == ["AGAINST002"]

# -- manifests ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["same", "h5md"])
def test_manifests(tmp_path, adk, fmt):
    outdir = tmp_path / "parts"
    split(adk[1], str(outdir), 4, format=fmt, progress=False)
    manifest = str(outdir / "manifest.json")
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", manifest, "--against", adk[1]])
    assert result.exit_code == 0, result.output
    assert "98 frames equal to the source" in result.output
    assert runner.invoke(cli, ["validate", str(outdir)]).exit_code == 0  # the directory names its manifest
    parts = sorted(p for p in os.listdir(outdir) if p.startswith("part-"))
    document = json.load(open(manifest))

    def with_document(change, name):
        copy = json.loads(json.dumps(document))
        change(copy)
        path = outdir / name
        path.write_text(json.dumps(copy))
        report, _ = validate_manifest(str(path))
        return rules(report, ("error", "warning"))

    assert with_document(lambda d: d.__setitem__("kind", "something else"), "kind.json") == {"MAN001"}
    assert with_document(lambda d: d["parts"][1].__setitem__("start", d["parts"][1]["start"] + 1), "gap.json") == {"MAN005"}
    assert with_document(lambda d: d.__setitem__("n_frames", 99), "total.json") == {"MAN005"}
    assert with_document(lambda d: d.__setitem__("n_atoms", 10), "atoms.json") == {"MAN006"}

    def shift(d):
        d["parts"][0]["stop"] += 1
        d["parts"][0]["n_frames"] += 1
        d["parts"][1]["start"] += 1
        d["parts"][1]["n_frames"] -= 1

    assert with_document(shift, "shifted.json") == {"MAN004"}
    if fmt == "h5md":
        with h5py.File(outdir / parts[2], "r+") as f:
            f[f"{TRAJ}/position/step"][1] = -5
        report, _ = validate_manifest(manifest)
        assert [(f.rule, f.path) for f in report.errors] == [("DATA004", f"{parts[2]}:/{TRAJ}/position/step")]
        result = runner.invoke(cli, ["validate", manifest, "--against", adk[1]])
        # the part's steps go backwards: it is reported, and not compared with the source
        assert result.exit_code == 1 and "DATA004" in result.output and "AGAINST003" in result.output
    with open(outdir / parts[1], "ab") as handle:
        handle.write(b"\0" * 16)
    result = runner.invoke(cli, ["validate", manifest])
    assert result.exit_code == 1 and "MAN003" in result.output
    os.remove(outdir / parts[1])
    result = runner.invoke(cli, ["validate", manifest, "--json", "--against", adk[1]])
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["files"][0]["findings"]
    assert {f["rule"] for f in findings if f["severity"] == "error"} >= {"MAN002", "AGAINST003"}
    (outdir / "broken.json").write_text("{not json")
    result = runner.invoke(cli, ["validate", str(outdir / "broken.json")])
    assert result.exit_code == 1 and result.output.startswith("error: ")


def test_random_corruption_never_escapes(tmp_path, adk):
    """Bytes overwritten at random: findings, exit status 0, 1 or 2, valid JSON; never a traceback."""
    import random

    source = str(tmp_path / "small.h5md")
    convert(adk[1], source, progress=False, stop=5, compression="gzip")
    data = open(source, "rb").read()
    rng = random.Random(2024)
    runner = CliRunner()
    for trial in range(60):
        damaged = bytearray(data)
        limit = len(damaged) if trial % 3 == 0 else 30000  # metadata sits in the first blocks
        for _ in range(rng.choice([1, 4, 16])):
            at = rng.randrange(0, limit)
            damaged[at:at + 8] = bytes(rng.randrange(256) for _ in range(8))
        path = tmp_path / "damaged.h5md"
        path.write_bytes(bytes(damaged))
        for command in (["validate", str(path), "--json"], ["info", str(path), "--json"]):
            result = runner.invoke(cli, command)
            assert result.exception is None or isinstance(result.exception, SystemExit), (trial, command, result.exception)
            assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output, (trial, command, result.output)
            if result.exit_code == 0 or command[0] == "validate" and result.exit_code == 1:
                json.loads(result.stdout)

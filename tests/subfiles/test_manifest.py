"""Split manifests (issue 15, part 3): every way a manifest can lie has its own rule id;
validate reports it, read_manifest (bench rmsd, validate --against) refuses it in one line."""

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from h5mdtool import split
from h5mdtool.cli.main import cli
from h5mdtool.subfiles.manifest import ManifestError, read_manifest, scan_part
from h5mdtool.check.validate import validate, validate_manifest
from h5mdtool.parallel.errors import InputError


@pytest.fixture(scope="module")
def parts(tmp_path_factory, adk):
    """The AdK DCD split into 4 DCD parts (25, 25, 24, 24 frames: equal sizes in pairs)."""
    directory = tmp_path_factory.mktemp("split") / "parts"
    split(adk[1], str(directory), 4, progress=False)
    return str(directory)


@pytest.fixture
def work(tmp_path, parts):
    """A fresh copy of the split directory, its manifest document and a writer for variants."""
    directory = tmp_path / "parts"
    shutil.copytree(parts, directory)
    document = json.loads((directory / "manifest.json").read_text())

    def write(change, name="variant.json"):
        copy = json.loads(json.dumps(document))
        change(copy)
        path = directory / name
        path.write_text(json.dumps(copy))
        return str(path)

    return directory, document, write


def version2(document, directory):
    """The keys split writes from manifest version 2 on, from the parts themselves."""
    document["manifest_version"] = 2
    for entry in document["parts"]:
        facts = scan_part(os.path.join(directory, entry["path"]))
        entry.update(first_step=facts.first_step, last_step=facts.last_step, first_time=facts.first_time,
                     last_time=facts.last_time)


def errors(path):
    report, _ = validate_manifest(path)
    return {f.rule for f in report.findings if f.severity == "error"}


def refused(path):
    with pytest.raises(ManifestError) as caught:
        read_manifest(path)
    message = str(caught.value)
    assert "\n" not in message and message.endswith(f"({caught.value.rule})")
    return caught.value.rule


def swap(a, b):
    def change(document):
        parts = document["parts"]
        parts[a]["path"], parts[b]["path"] = parts[b]["path"], parts[a]["path"]
    return change


#: Document changes: the rule validate reports and read_manifest refuses with.
DOCUMENT_CASES = {
    "start as a float": (lambda d: d["parts"][1].__setitem__("start", 25.0), "MAN012"),
    "start as a string": (lambda d: d["parts"][1].__setitem__("start", "25"), "MAN012"),
    "n_frames as a boolean": (lambda d: d["parts"][0].__setitem__("n_frames", True), "MAN012"),
    "negative bytes": (lambda d: d["parts"][2].__setitem__("bytes", -1), "MAN012"),
    "n_atoms as a string": (lambda d: d.__setitem__("n_atoms", "3341"), "MAN012"),
    "first_step as a float": (lambda d: d["parts"][0].__setitem__("first_step", 0.5), "MAN012"),
    "absolute path": (lambda d: d["parts"][0].__setitem__("path", "/tmp/part-0001.dcd"), "MAN007"),
    "path leaving the directory": (lambda d: d["parts"][0].__setitem__("path", "../parts/part-0001.dcd"), "MAN007"),
    "NUL in a part path": (lambda d: d["parts"][0].__setitem__("path", "part-00\x0001.dcd"), "MAN007"),
    "unencodable part path": (lambda d: d["parts"][0].__setitem__("path", "part-\ud800.dcd"), "MAN007"),
    "one file listed twice": (lambda d: d["parts"][2].__setitem__("path", d["parts"][1]["path"]), "MAN008"),
    "two entries for the same frames": (lambda d: d["parts"].insert(2, dict(d["parts"][1], path="part-0009.dcd")), "MAN008"),
    "overlapping parts": (lambda d: d["parts"][1].update(start=24, n_frames=26), "MAN010"),
    "a missing part": (lambda d: d["parts"].pop(1), "MAN005"),
    "parts out of order": (lambda d: d["parts"].insert(0, d["parts"].pop(2)), "MAN011"),
    "an empty part list": (lambda d: d.__setitem__("parts", []), "MAN013"),
    "unknown format": (lambda d: d.__setitem__("format", "GRO"), "MAN014"),
    "parts of another format": (lambda d: d.__setitem__("format", "TRR"), "MAN014"),
    "n_frames is not stop - start": (lambda d: d["parts"][1].__setitem__("n_frames", 24), "MAN005"),
    "unsupported version": (lambda d: d.__setitem__("manifest_version", 4), "MAN001"),
    "version as a boolean": (lambda d: d.__setitem__("manifest_version", True), "MAN001"),
    "another kind": (lambda d: d.__setitem__("kind", "something"), "MAN001"),
    "no parts field": (lambda d: d.pop("parts"), "MAN001"),
}


@pytest.mark.parametrize("case", sorted(DOCUMENT_CASES))
def test_document_rules(work, case):
    """Regression: a start given as a float or a string was accepted (exit 0)."""
    _, _, write = work
    change, rule = DOCUMENT_CASES[case]
    path = write(change)
    assert rule in errors(path)
    assert refused(path) == rule
    result = CliRunner().invoke(cli, ["validate", path])
    assert result.exit_code == 1 and rule in result.output


def test_unreadable_manifest_documents(work):
    """Regression: JSON nested 200,000 deep ended in "RuntimeError: RecursionError", no rule, no
    document with --json; a FIFO as the directory's manifest.json was called a directory."""
    directory, _, _ = work
    deep = directory / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    fifo_directory = directory / "fifo"
    fifo_directory.mkdir()
    os.mkfifo(fifo_directory / "manifest.json")
    runner = CliRunner()
    for path, why in ((deep, "nested deeper"), (fifo_directory, "is a FIFO")):
        named = str(path if path.suffix else path / "manifest.json")
        result = runner.invoke(cli, ["validate", str(path)])
        assert result.exit_code == 1 and result.output == f"error: {named}: {result.output.split(': ', 2)[2]}"
        assert why in result.output and result.output.endswith("(FILE001)\n") and result.output.count("\n") == 1
        result = runner.invoke(cli, ["validate", str(path), "--json"])
        assert result.exit_code == 1
        document = json.loads(result.stdout)
        assert document["exit_code"] == 1 and document["unreadable"] == [str(path)]
        [finding] = document["files"][0]["findings"]
        assert finding["rule"] == "FILE001" and finding["message"].startswith(named) and why in finding["message"]
    with pytest.raises(InputError, match="deep.json: not a readable JSON manifest .*nested deeper"):
        read_manifest(str(deep))


@pytest.mark.parametrize("case", ["NUL in a part path", "unencodable part path"])
def test_unusable_part_path_json(work, case):
    """Regression: a NUL byte in a part path ended in "RuntimeError: ValueError: embedded null byte"."""
    _, _, write = work
    path = write(DOCUMENT_CASES[case][0])
    result = CliRunner().invoke(cli, ["validate", path, "--json"])
    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)["files"][0]["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("MAN007", "error")]


def test_clean_split_manifests(work):
    directory, document, write = work
    assert errors(str(directory / "manifest.json")) == set()
    read_manifest(str(directory))
    path = write(lambda d: version2(d, directory), "v2.json")
    assert errors(path) == set()
    manifest = read_manifest(path)
    assert manifest.version == 2
    assert manifest.parts[1].first_step == scan_part(manifest.parts[1].path).first_step == 26000  # DCD: istart + 25 * nsavc


def test_file_rules(work):
    """Sizes and frame counts that disagree with the files are found (read_manifest does not open parts)."""
    directory, _, write = work
    path = write(lambda d: d["parts"][1].__setitem__("bytes", d["parts"][1]["bytes"] + 1))
    assert errors(path) == {"MAN003"}
    read_manifest(path)

    def shift(d):
        d["parts"][0].update(stop=26, n_frames=26)
        d["parts"][1].update(start=26, n_frames=24)

    assert errors(write(shift)) == {"MAN004"}
    os.remove(directory / "part-0004.dcd")
    os.mkfifo(directory / "part-0004.dcd")
    report, _ = validate_manifest(str(directory / "manifest.json"))
    assert [(f.rule, f.path, f.message) for f in report.errors] == [("MAN002", "part-0004.dcd", "is a FIFO, not a regular file")]


@pytest.mark.parametrize("recorded", [False, True], ids=["v1", "v2"])
def test_swapped_part_files(work, recorded):
    """Regression (issue 16): part files of equal size swapped on disk passed a plain validate."""
    directory, _, write = work
    path = str(directory / "manifest.json")
    if recorded:
        path = write(lambda d: version2(d, directory), "manifest.json")
    os.rename(directory / "part-0003.dcd", directory / "tmp.dcd")
    os.rename(directory / "part-0004.dcd", directory / "part-0003.dcd")
    os.rename(directory / "tmp.dcd", directory / "part-0004.dcd")
    assert errors(path) == {"MAN009"}
    report, _ = validate_manifest(path)
    assert [f.path for f in report.errors] == ["part-0003.dcd"]


@pytest.mark.parametrize("recorded", [False, True], ids=["v1", "v2"])
def test_duplicated_part_file(work, recorded):
    """Regression (issue 16): a part file overwritten by a copy of another of the same size passed."""
    directory, _, write = work
    path = str(directory / "manifest.json")
    if recorded:
        path = write(lambda d: version2(d, directory), "manifest.json")
    shutil.copy(directory / "part-0001.dcd", directory / "part-0002.dcd")
    assert errors(path) == {"MAN008"}


def test_recorded_steps_that_match_no_part(work):
    directory, _, write = work

    def wrong(d):
        version2(d, directory)
        d["parts"][2]["last_step"] += 1

    report, _ = validate_manifest(write(wrong))
    assert [(f.rule, f.path) for f in report.errors] == [("MAN015", "part-0003.dcd")]


def test_swapped_entries_by_steps(work):
    """Entries whose paths were swapped in the document (equal sizes): the recorded steps tell."""
    directory, _, write = work

    def swapped(d):
        version2(d, directory)
        swap(2, 3)(d)

    assert errors(write(swapped)) == {"MAN009"}
    assert errors(write(swap(2, 3))) == {"MAN009"}  # version 1: the steps run backwards between parts


def test_validate_against_names_the_rule(work, adk):
    """Regression: broken manifests fell through to a generic 'cannot compare with the source'."""
    _, _, write = work
    for case in ("start as a float", "absolute path", "an empty part list", "unknown format"):
        change, rule = DOCUMENT_CASES[case]
        report = validate([write(change)], against=[adk[1]])
        found = {f.rule: f.message for f in report.files[0].errors}
        assert rule in found and "cannot compare with the source" not in found.get("AGAINST003", "")
        assert found["AGAINST003"].startswith("not compared with the source: fix the manifest first (")
        assert rule in found["AGAINST003"]


def test_bench_rmsd_refuses_in_one_line(work, adk):
    _, _, write = work
    path = write(DOCUMENT_CASES["start as a float"][0])
    result = CliRunner().invoke(cli, ["bench", "rmsd", path, "-t", adk[0]])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and result.output.startswith("error: ") and "(MAN012)" in result.output


def test_constant_steps_are_not_called_swapped(tmp_path):
    """Parts of a trajectory whose steps are all 0 pass; their order cannot be judged from steps."""
    import numpy as np
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    source = str(tmp_path / "constant.xtc")
    rng = np.random.default_rng(3)
    with XTCFile(source, "w") as handle:
        for _ in range(12):
            handle.write(rng.uniform(0, 5, (30, 3)).astype(np.float32), np.diag([5.0] * 3).astype(np.float32), 0, 0.0)
    split(source, str(tmp_path / "parts"), 3, progress=False)
    manifest = str(tmp_path / "parts" / "manifest.json")
    assert errors(manifest) == set()
    result = CliRunner().invoke(cli, ["validate", manifest, "--against", source])
    assert result.exit_code == 0, result.output
    assert "12 frames equal to the source" in result.output

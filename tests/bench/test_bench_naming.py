"""bench names what it read as info does, cites briefly, and combines serial and MPI runs
without a false "software versions differ" warning or escaped JSON."""

import copy
import json

import pytest
from click.testing import CliRunner

from h5mdtool import bench_report, bench_rmsd, convert, info
from h5mdtool.bench.plots import _input_name, rmsd_title
from h5mdtool.bench.report import _label
from h5mdtool.cli.main import cli

VALUES = "/particles/trajectory/position/value"


@pytest.fixture(scope="module")
def zstd_report(tmp_path_factory, adk):
    path = str(tmp_path_factory.mktemp("naming") / "adk-zstd.h5md")
    convert(adk[1], path, precision=0.001, stop=20, progress=False)
    return path, bench_rmsd(path, adk[0], block_frames=8)["report"]


def info_filters(path):
    """What 'h5mdtool info' prints for the positions' filters (the oracle)."""
    line = next(line for line in CliRunner().invoke(cli, ["info", path]).output.splitlines()
                if line.strip().startswith(f"{VALUES}:"))
    return line.split(", ")[2]


def test_every_filter_is_named_as_info_names_it(zstd_report, adk):
    path, report = zstd_report
    assert info_filters(path) == "shuffle+zstd" == "+".join(info(path)["datasets"][VALUES]["filters"])
    assert report["input"]["compression"] == "shuffle+zstd"
    header = CliRunner().invoke(cli, ["bench", "rmsd", path, "-t", adk[0], "--block-frames", "8"]).output
    assert "compression shuffle+zstd" in header.splitlines()[0] and "unknown" not in header
    assert "shuffle+zstd" in _label(report, False) and "shuffle+zstd" in _input_name(report["input"])
    assert "shuffle+zstd" in rmsd_title(report)


@pytest.mark.parametrize("options", [{"compression": "lz4"}, {"compression": "gzip", "compression_level": 6},
                                     {"compression": "blosc2"}])
def test_other_codecs_are_named_as_info_names_them(tmp_path, adk, options):
    path = str(tmp_path / "adk.h5md")
    convert(adk[1], path, stop=8, progress=False, **options)
    report = bench_rmsd(path, adk[0], block_frames=8)["report"]
    assert report["input"]["compression"] == info_filters(path)
    assert "unknown" not in json.dumps(report["input"])


def test_advice_cites_briefly_and_help_in_full(zstd_report):
    advice = zstd_report[1]["advice"]
    assert "(Khoshlessan et al. 2020, Heuristic" in advice and "doi" not in advice and len(advice) < 400
    text = " ".join(CliRunner().invoke(cli, ["bench", "rmsd", "--help"]).output.split())
    assert ('Khoshlessan, Paraskevakos, Fox, Jha & Beckstein, "Parallel performance of molecular dynamics '
            'trajectory analysis"' in text and "doi:10.1002/cpe.5789" in text)


def with_versions(report, n_ranks, **versions):
    other = copy.deepcopy(report)
    other["n_ranks"] = n_ranks
    for run in other["runs"]:
        run["ranks"] = [dict(run["ranks"][0], rank=rank) for rank in range(n_ranks)]
    other["ranks"] = other["runs"][other["best_repeat"]]["ranks"]
    other["provenance"]["versions"].update(versions)
    return other


def test_serial_and_mpi_runs_combine_without_a_version_warning(zstd_report):
    serial = zstd_report[1]
    assert "MPI" not in serial["provenance"]["versions"]
    mpi = {"mpi4py": "4.1.0", "MPI": "Open MPI v4.1.4, package: Debian OpenMPI"}
    result = bench_report([serial, with_versions(serial, 2, **mpi), with_versions(serial, 4, **mpi)])
    assert not [w for w in result["warnings"] if "software versions" in w], result["warnings"]


def test_version_differences_are_named_plainly(zstd_report):
    serial = zstd_report[1]
    newer = with_versions(serial, 2, numpy="9.9.9", MPI="Open MPI v5.0.0")
    older = with_versions(serial, 4, MPI="Open MPI v4.1.4")
    result = bench_report([serial, newer, older])
    warnings = [w for w in result["warnings"] if "software versions" in w]
    assert len(warnings) == 1
    numpy = serial["provenance"]["versions"]["numpy"]
    assert "numpy " + numpy in warnings[0] and "9.9.9" in warnings[0]
    assert "MPI Open MPI v5.0.0" in warnings[0] and "Open MPI v4.1.4" in warnings[0]
    assert "\\" not in warnings[0] and '"' not in warnings[0] and "{" not in warnings[0]

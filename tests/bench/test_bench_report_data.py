"""bench report refuses reports of different data (same sizes and layout: frames reversed),
and compares runs like with like when the reports ran different --repeat counts."""

import copy
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from benchcheck import every_report_adds_up  # noqa: F401 - autouse fixture
from conftest import write_xtc
from h5mdtool import bench_report, bench_rmsd, convert
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import UsageError


@pytest.fixture(scope="module")
def xtc_pair(tmp_path_factory, adk_frames):
    """The AdK trajectory as an XTC, and a copy whose frames are reversed (same steps, times
    and total size)."""
    directory = tmp_path_factory.mktemp("pair")
    steps, times = np.arange(len(adk_frames)) * 10, np.arange(len(adk_frames)) * 1.0
    forward, backward = str(directory / "md.xtc"), str(directory / "reversed" / "md.xtc")
    os.mkdir(directory / "reversed")
    write_xtc(forward, adk_frames, steps, times)
    write_xtc(backward, adk_frames[::-1], steps, times)
    assert os.path.getsize(forward) == os.path.getsize(backward)
    return forward, backward


@pytest.fixture(scope="module")
def reports(xtc_pair, adk):
    return [bench_rmsd(path, adk[0])["report"] for path in xtc_pair]


def test_reports_of_reversed_frames_are_refused(reports):
    """Regression: a copy with its frames reversed (same size, format, layout) was combined
    with path and modification-time warnings only."""
    forward, backward = reports
    assert forward["data"]["bytes"] == backward["data"]["bytes"]
    assert forward["data"]["sample_positions"] != backward["data"]["sample_positions"]
    with pytest.raises(UsageError, match="different data"):
        bench_report([forward, backward])
    other = copy.deepcopy(backward)
    other["data"] = forward["data"]  # the results still tell
    with pytest.raises(UsageError, match="measured different data: at frame"):
        bench_report([forward, other])


def test_same_data_at_another_rank_count_is_combined(reports):
    forward = reports[0]
    again = copy.deepcopy(forward)
    again["n_ranks"] = 2
    for run in again["runs"]:
        run["ranks"] = [dict(run["ranks"][0], rank=rank) for rank in range(2)]
    result = bench_report([forward, again])
    assert [row["n_ranks"] for row in result["rows"]] == [1, 2]


def test_layouts_of_one_trajectory_compared_reversed_refused(tmp_path, xtc_pair, reports, adk):
    converted = str(tmp_path / "md.h5md")
    convert(xtc_pair[0], converted, progress=False)
    h5md = bench_rmsd(converted, adk[0])["report"]
    lossy_path = str(tmp_path / "lossy.h5md")
    convert(xtc_pair[0], lossy_path, progress=False, precision=0.01)
    lossy = bench_rmsd(lossy_path, adk[0])["report"]
    result = bench_report([reports[0], h5md, lossy], layouts_mode=True)
    assert len(result["inputs"]) == 3
    with pytest.raises(UsageError, match="more than 0.1 A apart"):
        bench_report([reports[1], h5md], layouts_mode=True)


def test_digests_identify_what_was_read(reports, xtc_pair, adk_frames):
    """The results digest holds the RMSDs at the sampled frames, as the run computed them."""
    result = bench_rmsd(xtc_pair[0], pytest.importorskip("MDAnalysisTests.datafiles").PSF)
    digest = result["report"]["results"]
    rows = digest["sample_frames"]
    assert rows[0] == 0 and rows[-1] == len(adk_frames) - 1 and len(rows) == 8
    np.testing.assert_array_equal(np.asarray(digest["sample"])[:, 0], result["rmsd"][rows, 2])
    assert result["report"]["data"]["sample_frames"] == rows


def _with_runs(report, n_ranks, totals):
    report = copy.deepcopy(report)
    base = report["runs"][0]
    report["n_ranks"] = n_ranks
    report["runs"] = []
    for number, total in enumerate(totals):
        ranks = [dict(base["ranks"][0], rank=rank) for rank in range(n_ranks)]
        for record in ranks:
            scale = total / record["t_total"]
            for key in ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm", "t_total"):
                record[key] *= scale
        report["runs"].append(dict(base, repeat=number, t_total=ranks[0]["t_total"], ranks=ranks))
    return report


def test_different_repeat_counts_compare_like_with_like(reports):
    """Regression: reports of --repeat 2 and --repeat 1 were mixed, the warm second run of one
    against the cold only run of the other."""
    one = _with_runs(reports[0], 1, [3.0])
    two = _with_runs(reports[0], 2, [2.5, 1.0])  # the second run: no start-up
    result = bench_report([one, two])
    assert result["runs_compared"] == 1
    assert [round(row["t_total"], 6) for row in result["rows"]] == [3.0, 2.5]
    assert any("--repeat 1 and 2" in warning for warning in result["warnings"])
    both = bench_report([_with_runs(reports[0], 1, [3.0, 2.0]), two])
    assert both["runs_compared"] == 2 and [round(r["t_total"], 6) for r in both["rows"]] == [2.0, 1.0]


def test_cli_refuses_in_one_line_and_says_how_runs_were_compared(tmp_path, reports):
    paths = []
    for number, report in enumerate(reports):
        paths.append(str(tmp_path / f"r{number}.json"))
        json.dump(report, open(paths[-1], "w"))
    runner = CliRunner()
    done = runner.invoke(cli, ["bench", "report", *paths])
    assert done.exit_code == 2
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "different data" in lines[0], lines
    done = runner.invoke(cli, ["bench", "report", paths[0]])
    assert done.exit_code == 0 and "best of the first 1 run of each report" in done.output

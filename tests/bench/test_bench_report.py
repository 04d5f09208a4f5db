"""bench report: like with like on resolved values, S(N) and E(N) only against a measured
1-rank run (else "assumed"), one-line messages for malformed reports, the layout comparison,
and plots from 1 to 96 ranks."""

import copy
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from benchcheck import check_adds_up, every_report_adds_up  # noqa: F401 - autouse fixture
from h5mdtool import bench_report, bench_rmsd, convert
from h5mdtool.bench.runner import summarise
from h5mdtool.cli.main import cli
from h5mdtool.parallel.errors import InputError
from h5mdtool.bench.timing import PHASES


@pytest.fixture(scope="module")
def template(adk):
    """A real one-rank report to derive others from."""
    return bench_rmsd(adk[1], adk[0])["report"]


def ranks_at(n_ranks, total_io=8.0, total_compute=2.0, slow=(), seed=0):
    """Per-rank records of a strong-scaling run: I/O and compute divided over the ranks, a
    fixed start-up, *slow* ranks with extra I/O; everyone waits for the slowest."""
    rng = np.random.default_rng(seed + n_ranks)
    records = []
    for rank in range(n_ranks):
        record = {"rank": rank, "host": f"node{rank // 24:02d}", "n_frames": 1000 // n_ranks,
                  "t_init_top": 0.4 + 0.01 * rng.random(), "t_init_traj": 0.02 + 0.01 * rng.random(),
                  "t_io": total_io / n_ranks * (1 + 0.05 * rng.random()) + (3.0 if rank in slow else 0.0),
                  "t_compute": total_compute / n_ranks * (1 + 0.05 * rng.random()), "t_comm": 0.001 * np.log2(2 * n_ranks),
                  "bytes_read": int(4e8 / n_ranks), "files_opened": 1, "opened": ["md.h5md"]}
        records.append(record)
    slowest = max(sum(r[p] for p in ("t_init_top", "t_init_traj", "t_io", "t_compute")) for r in records)
    for record in records:
        record["t_wait"] = slowest - sum(record[p] for p in ("t_init_top", "t_init_traj", "t_io", "t_compute"))
        record["t_total"] = sum(record[p] for p in PHASES)
        record["mb_per_s"] = record["bytes_read"] / 1e6 / record["t_io"]
        check_adds_up(record)
    return records


def synthetic(template, n_ranks, repeats=1, **kwargs):
    report = copy.deepcopy(template)
    runs = []
    for number in range(repeats):
        runs.append({"repeat": number, **summarise(ranks_at(n_ranks, seed=number, **kwargs), "H5MD")})
    best = min(runs, key=lambda run: run["t_total"])
    report.update(n_ranks=n_ranks, runs=runs, best_repeat=best["repeat"], t_total=best["t_total"],
                  ranks=best["ranks"], stragglers=best["stragglers"])
    return report


def test_scaling_against_a_measured_one_rank_run(template):
    reports = [synthetic(template, n) for n in (4, 1, 2)]
    result = bench_report(reports)
    rows = result["rows"]
    assert [row["n_ranks"] for row in rows] == [1, 2, 4]
    assert result["baseline"] == {"n_ranks": 1, "t_total": rows[0]["t_total"], "measured": True,
                                  "serial_fraction": rows[0]["t_serial"] / rows[0]["t_total"]}
    for row in rows:
        assert row["speedup"] == pytest.approx(rows[0]["t_total"] / row["t_total"])
        assert row["efficiency"] == pytest.approx(row["speedup"] / row["n_ranks"])
        assert row["baseline_measured"] is True
    assert rows[2]["t_io"] == pytest.approx(np.mean([r["t_io"] for r in reports[0]["ranks"]]))
    assert result["warnings"] == []


def test_scaling_without_one_rank_is_marked_assumed(template):
    result = bench_report([synthetic(template, n) for n in (2, 8)])
    assert result["baseline"]["measured"] is False and result["baseline"]["n_ranks"] == 2
    assert result["rows"][1]["speedup"] == pytest.approx(2 * result["rows"][0]["t_total"] / result["rows"][1]["t_total"])
    assert not any(row["baseline_measured"] for row in result["rows"])


def test_repeats_and_reports_at_one_rank_count_are_pooled(template):
    slow, fast = synthetic(template, 2, total_io=20.0), synthetic(template, 2, repeats=3)
    rows = bench_report([slow, fast, synthetic(template, 1)])["rows"]
    assert rows[1]["t_total"] == min(run["t_total"] for run in fast["runs"])


@pytest.mark.parametrize("change,what", [
    (lambda r: r.update(engine="frames"), "engine"),
    (lambda r: r.update(compute_load=40), "compute load"),
    (lambda r: r.update(block_frames=64), "block size"),
    (lambda r: r["analysis"]["atoms"]["fit"].update(sha256="0" * 16), "atoms"),
    (lambda r: r["analysis"].update(weights="mass"), "weights"),
    (lambda r: r["analysis"]["reference"].update(frame=5), "reference"),
    (lambda r: r["analysis"]["frames"].update(n=50, sha256="1" * 16), "frames analysed"),
    (lambda r: r["input"]["files"][0].update(size=1), "input file content"),
    (lambda r: r["input"].update(layout="contiguous"), "input file content"),
    (lambda r: r["topology"].update(size=1), "topology"),
])
def test_refuses_unlike_runs_naming_what_differs(template, change, what):
    other = synthetic(template, 2)
    change(other)
    with pytest.raises(InputError, match=f"differ in {what}"):
        bench_report([synthetic(template, 1), other])


def test_resolved_values_are_compared_not_strings(tmp_path, adk, template):
    """'name CA' and 'protein and name CA' pick the same atoms; ref frame -98 is frame 0."""
    same = bench_rmsd(adk[1], adk[0], select="protein and name CA", ref_frame=-98)["report"]
    result = bench_report([template, same])
    assert [row["n_ranks"] for row in result["rows"]] == [1]
    copied = tmp_path / "copy.dcd"
    copied.write_bytes(open(adk[1], "rb").read())
    moved = bench_rmsd(str(copied), adk[0])["report"]
    result = bench_report([template, moved])
    assert any("input path" in warning for warning in result["warnings"])
    assert any("modification time" in warning for warning in result["warnings"])


@pytest.mark.parametrize("damage,message", [
    (lambda r: r.pop("runs"), "has no 'runs'"),
    (lambda r: r["runs"][0]["ranks"][0].pop("t_io"), "runs\\[0\\].ranks\\[0\\] has no 't_io'"),
    (lambda r: r["input"].pop("files"), "input has no 'files'"),
    (lambda r: r.update(report_version=1), "report_version 1"),
    (lambda r: r.update(benchmark="convert"), "not a 'bench rmsd' report"),
    (lambda r: r["runs"][0].update(ranks=[]), "runs\\[0\\] has 0 rank records"),
])
def test_malformed_reports_one_line_naming_the_file(tmp_path, template, damage, message):
    report = copy.deepcopy(template)
    damage(report)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(report))
    with pytest.raises(InputError, match=f"broken.json: .*{message}"):
        bench_report([str(path)])
    result = CliRunner().invoke(cli, ["bench", "report", str(path)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "broken.json" in result.output
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="bad.json: not a readable JSON report"):
        bench_report([str(tmp_path / "bad.json")])


def write_reports(directory, reports):
    paths = []
    for number, report in enumerate(reports):
        path = directory / f"run{number}-{report['n_ranks']}.json"
        path.write_text(json.dumps(report))
        paths.append(str(path))
    return paths


def test_cli_table_csv_json_and_assumed_marks(tmp_path, template):
    paths = write_reports(tmp_path, [synthetic(template, n) for n in (2, 4)])
    result = CliRunner().invoke(cli, ["bench", "report", *paths])
    assert result.exit_code == 0, result.output
    assert "baseline: assumed" in result.output and "1.00*" in result.output
    result = CliRunner().invoke(cli, ["bench", "report", *paths, "--csv"])
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("n_ranks,t_total,speedup,efficiency,t_serial,parallel_efficiency,t_init_top")
    assert lines[0].endswith("baseline_measured")
    assert lines[1].startswith("2,") and lines[1].endswith(",false")
    document = json.loads(CliRunner().invoke(cli, ["bench", "report", *paths, "--json"]).output)
    assert document["mode"] == "scaling" and len(document["rows"]) == 2
    paths = write_reports(tmp_path, [synthetic(template, n) for n in (1, 2)])
    result = CliRunner().invoke(cli, ["bench", "report", *paths])
    assert "measured 1-rank run" in result.output and "*" not in result.output.split("baseline")[1]


# --- layouts side by side ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def layout_reports(tmp_path_factory, adk):
    directory = tmp_path_factory.mktemp("layouts")
    chunked, gzip = str(directory / "adk.h5md"), str(directory / "adk-gzip.h5md")
    convert(adk[1], chunked, progress=False)
    convert(adk[1], gzip, progress=False, compression="gzip", chunk_frames=8)
    return [bench_rmsd(path, adk[0])["report"] for path in (adk[1], chunked, gzip)]


def test_layouts_side_by_side(tmp_path, layout_reports):
    reports = layout_reports + [synthetic(report, 2) for report in layout_reports[:2]]
    result = bench_report(reports, layouts_mode=True)
    assert result["mode"] == "layouts" and len(result["inputs"]) == 3
    labels = [column["label"] for column in result["inputs"]]
    assert labels[0].startswith("adk_dims.dcd (DCD)") and "gzip" in labels[2] and "chunks 8x3341x3" in labels[2]
    assert [row["n_ranks"] for row in result["rows"]] == [1, 2]
    assert set(result["rows"][1]["by_input"]) == set(labels[:2])  # gzip has no 2-rank run
    assert result["rows"][0]["fastest"] == min(labels, key=lambda l: result["rows"][0]["by_input"][l]["t_total"])
    paths = write_reports(tmp_path, reports)
    out = CliRunner().invoke(cli, ["bench", "report", *paths, "--layouts", "--plot", str(tmp_path / "layouts.png")])
    assert out.exit_code == 0, out.output
    assert "A: adk_dims.dcd" in out.output and "fastest" in out.output
    assert (tmp_path / "layouts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = CliRunner().invoke(cli, ["bench", "report", *paths, "--layouts", "--csv"]).output.splitlines()
    assert csv[0] == "n_ranks,input,t_total,t_io,speedup,efficiency,baseline_measured" and len(csv) == 6


def test_layouts_refuse_other_analyses_and_a_single_input(layout_reports):
    other = copy.deepcopy(layout_reports[1])
    other["analysis"]["weights"] = "mass"
    with pytest.raises(InputError, match="weights"):
        bench_report([layout_reports[0], other], layouts_mode=True)
    with pytest.raises(InputError, match="several inputs"):
        bench_report([layout_reports[0]], layouts_mode=True)
    with pytest.raises(InputError, match="input file content"):
        bench_report(layout_reports[:2])  # without --layouts: one input only


# --- plots -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_ranks", [1, 3, 96])
def test_rank_plots(tmp_path, template, n_ranks):
    from h5mdtool.bench.plots import plot_ranks, rmsd_title

    report = synthetic(template, n_ranks, slow=(1, 40) if n_ranks > 1 else ())
    path = tmp_path / f"ranks-{n_ranks}.png"
    plot_ranks(report["runs"][0], str(path), rmsd_title(report))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10000
    if n_ranks > 1:
        assert {entry["rank"] for entry in report["stragglers"]["ranks"]} >= {1}


def test_scaling_plot_of_the_slurm_sweep(tmp_path, template):
    paths = write_reports(tmp_path, [synthetic(template, n, slow=(5,) if n >= 48 else ())
                                     for n in (1, 2, 4, 8, 16, 24, 48, 96)])
    plot = tmp_path / "scaling.png"
    result = CliRunner().invoke(cli, ["bench", "report", *paths, "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "   96 " in result.output and ",5" not in result.output.split("   96 ")[0]
    result = CliRunner().invoke(cli, ["bench", "report", *paths, "--plot", str(plot)])
    assert result.exit_code == 1 and "exists; pass --force" in result.output
    assert CliRunner().invoke(cli, ["bench", "report", *paths, "--plot", str(plot), "--force"]).exit_code == 0


def test_bench_rmsd_plot_from_the_command_line(tmp_path, adk):
    result = CliRunner().invoke(cli, ["bench", "rmsd", adk[1], "-t", adk[0], "--plot", str(tmp_path / "ranks.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ranks.png").stat().st_size > 10000
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]

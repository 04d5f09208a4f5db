"""Checks every ``bench rmsd`` report the tests make: the phases of each rank add up to its total.

Test modules import :func:`every_report_adds_up` (an autouse fixture); it wraps
:func:`h5mdtool.bench.runner.summarise`, through which every run's per-rank records pass, whether
the benchmark is called from Python or through the command line in-process.
"""

import warnings

import MDAnalysis as mda
import pytest

from h5mdtool.bench.timing import PHASES


def check_adds_up(record, tolerance=1e-9):
    """Every second of the rank's run is in exactly one phase: their sum is ``t_total``."""
    total = sum(record[phase] for phase in PHASES)
    assert abs(total - record["t_total"]) <= tolerance * max(1.0, record["t_total"]), (record, total)
    assert all(record[phase] >= 0 for phase in PHASES), record


def check_report(report):
    """Every run's records add up, cover every rank once, and the headline is the best run."""
    for run in report["runs"]:
        assert [r["rank"] for r in run["ranks"]] == list(range(report["n_ranks"]))
        for record in run["ranks"]:
            check_adds_up(record)
        assert run["t_total"] == max(r["t_total"] for r in run["ranks"])
    assert report["t_total"] == min(run["t_total"] for run in report["runs"])


@pytest.fixture(autouse=True)
def every_report_adds_up(monkeypatch):
    """Check the records of every run summarised during the test."""
    from h5mdtool.bench import runner as bench

    original = bench.summarise
    checked = []

    def summarise(records, kind=None):
        for record in records:
            check_adds_up(record)
        checked.append(len(records))
        return original(records, kind)

    monkeypatch.setattr(bench, "summarise", summarise)
    yield checked


def mdanalysis_rmsd(topology, trajectory, select="name CA", ref_frame=0, groups=None, weights=None,
                    reference=None, start=None, stop=None, step=None):
    """The oracle: MDAnalysis's rms.RMSD, with the trajectory at the reference frame when
    selections are made (where h5mdtool evaluates them)."""
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(topology, trajectory)
        if reference is None:
            universe.trajectory[ref_frame]
        else:
            reference = mda.Universe(reference)
        analysis = rms.RMSD(universe, reference, select=select, ref_frame=ref_frame, groupselections=groups,
                            weights=weights)
        return analysis.run(start=start, stop=stop, step=step).results.rmsd

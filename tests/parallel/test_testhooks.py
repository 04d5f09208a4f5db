"""The test-only delay hook: parsing, which rank sleeps, and the marks of sites reached."""

import os
import time

from h5mdtool.parallel.testhooks import VARIABLE, _parse, delay


def test_parse_reads_sites_ranks_and_seconds_and_skips_malformed_entries():
    assert _parse("a:0:1.5, b:*:2,broken,c:1:x") == {("a", "0"): 1.5, ("b", "*"): 2.0}


def test_delay_sleeps_only_on_the_named_rank(monkeypatch):
    monkeypatch.setenv(VARIABLE, "site:1:0.2")
    assert delay("site", 0) == 0.0
    started = time.perf_counter()
    assert delay("site", 1) == 0.2
    assert time.perf_counter() - started >= 0.2
    assert delay("other", 1) == 0.0


def test_delay_for_every_rank_and_unset(monkeypatch):
    monkeypatch.setenv(VARIABLE, "site:*:0.01")
    assert delay("site", 5) == 0.01
    monkeypatch.delenv(VARIABLE)
    assert delay("site", 5) == 0.0


def test_marks_record_the_sites_reached(tmp_path, monkeypatch):
    from h5mdtool.parallel.testhooks import delay

    monkeypatch.delenv("H5MDTOOL_TEST_DELAY", raising=False)
    monkeypatch.setenv("H5MDTOOL_TEST_MARK", str(tmp_path))
    assert delay("rmsd-block", 1) == 0.0
    assert os.listdir(tmp_path) == ["rmsd-block-1"]

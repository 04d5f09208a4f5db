"""The end-of-run summaries read as sentences: no "1225-1225 frames per part", no
"0 frames/s" for a short run, no "lfs not found; not aligned", no "in one chunk: apart"."""

import re

import pytest
from click.testing import CliRunner

from h5mdtool import convert
from h5mdtool.cli.convert import print_summary
from h5mdtool.cli.main import cli
from h5mdtool.parallel.sizes import human_rate


@pytest.mark.parametrize("value, text", [(12345.6, "12346 frames/s"), (10.0, "10 frames/s"), (9.87, "9.9 frames/s"),
                                         (0.1094, "0.11 frames/s"), (0.0, "0 frames/s"), (None, "? frames/s")])
def test_rates_keep_their_digits(value, text):
    assert human_rate(value, "frames/s") == text


def test_a_short_run_is_not_zero_frames_per_second(tmp_path, solvated, capsys):
    summary = convert(solvated["XTC"], str(tmp_path / "o.h5md"), stop=1, progress=False)
    summary.update(seconds=9.17, frames_per_second=1 / 9.17, megabytes_per_second=0.0623)
    print_summary(summary)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "9.17 s on 1 rank(s): 0.11 frames/s, 0.062 MB/s"


def test_who_compressed_is_said(tmp_path, solvated, capsys):
    """One process's threads, or every rank with rank 0 writing (--parallel-compression ranks)."""
    summary = convert(solvated["XTC"], str(tmp_path / "o.h5md"), stop=2, compression="zstd", threads=2,
                      progress=False)
    print_summary(summary)
    assert "compressed in 2 thread(s) per rank" in capsys.readouterr().out
    summary.update(n_ranks=4, threads=1, compressed_by="ranks")  # as 4 ranks report it
    print_summary(summary)
    assert "compressed by each of the 4 ranks (1 thread(s) each), written by rank 0" in capsys.readouterr().out


@pytest.mark.parametrize("nparts, text", [(2, "5 frames per part"), (10, "1 frame per part"), (3, "3-4 frames per part")])
def test_split_names_the_part_sizes_once(tmp_path, solvated, nparts, text):
    result = CliRunner().invoke(cli, ["split", solvated["XTC"], "--nparts", str(nparts), "-o", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert f"10 frames x 47681 atoms, {text}, " in result.output.splitlines()[0]


def test_striping_and_split_xyz_lines(tmp_path, solvated):
    result = CliRunner().invoke(cli, ["convert", solvated["XTC"], "-o", str(tmp_path / "o.h5md"), "--stop", "2",
                                      "--precision", "0.001", "--stripe-size", "1M", "--stripe-count", "2"])
    assert result.exit_code == 0, result.output
    lines = {line.split(":")[0]: line for line in result.output.splitlines()}
    assert lines["striping"] == ("striping: not set: no lfs command (not a Lustre client); "
                                 "chunks not aligned to stripes (only uncompressed chunks are)")
    assert re.search(r"; x, y and z in separate chunks: 0\.\d\dx the bytes of one chunk for the first (frame|\d+ frames) "
                     r"\(0\.95x or less pays\)$", lines["chunks"]), lines["chunks"]

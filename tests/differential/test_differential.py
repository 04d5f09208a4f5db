"""The fixed-seed profile of the differential harness (``make test`` runs it).

About 300 cases (``DIFF_EXAMPLES``), each run serially and on 2 and 3 MPI ranks
(``DIFF_RANKS``), every output checked against MDAnalysis reading the source. The test
fails on any failure, or, with ``H5MDTOOL_DIFF_KNOWN=skip``, on any failure outside the
categories of KNOWN.md. Every failure is printed with a one-line reproduction on input
files kept on disk. See docs/testing.md.
"""

import os

import pytest

from .known import mode
from .session import run_profile, summary_lines

pytestmark = pytest.mark.serial_only

EXAMPLES = int(os.environ.get("DIFF_EXAMPLES", "300"))


@pytest.mark.timeout(int(os.environ.get("DIFF_PYTEST_TIMEOUT", "3600")))
def test_differential_fixed_seed(capsys):
    known_mode = mode()
    with capsys.disabled():
        print()
        runner = run_profile(EXAMPLES, derandomize=True)
        report = "\n".join(summary_lines(runner, known_mode))
        print(report)
    failing = runner.unknown_failures() if known_mode == "skip" else runner.failures
    assert runner.drawn["cases"] > 0, "hypothesis drew no case"
    assert not failing, (f"{len(failing)} failure(s) in {len({(r, n) for r, n, *_ in failing})} run(s) of cases; "
                         f"first: {failing[0][2]}\n    reproduce: {failing[0][3]}\n{report}")


def test_expected_errors_allow_frames_a_coarse_precision_rounds_to_zero():
    """Harness regression (make fuzz case 1633, seed 3993108589): a frame whose atoms all lie
    within precision/2 of the origin may be stored as zeros on the grid, which validate's
    DATA001 cannot tell from lost data; without a precision only true zeros excuse it."""
    import numpy as np

    from .checks import expected_errors
    from .oracle import Field, Frames

    values = np.array([[[0.01, -0.002, 0.0], [0.0, 0.005, -0.01]], [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]])
    frames = Frames(steps=np.arange(2), times=np.arange(2.0), positions=Field(values, np.ones(2, bool), True))
    assert "DATA001" not in expected_errors(frames)
    assert "DATA001" not in expected_errors(frames, precision=0.01)
    assert "DATA001" in expected_errors(frames, precision=0.2)
    assert "DATA001" not in expected_errors(frames, precision="xtc")


@pytest.mark.parametrize("name", ["split-precision-rounds-frames-to-zero",
                                  "validate-against-segments-with-and-without-time",
                                  "split-same-dcd-with-and-without-cells",
                                  "precision-positions-beyond-int32",
                                  "bench-frames-h5md-fixed-box",
                                  "bench-split-swapped-parts",
                                  "bench-frames-split-h5md-own-rate-velocity",
                                  "bench-split-copied-parts",
                                  "append-damaged-xtc-frame",
                                  "append-damaged-xtc-frame-on-overlap-later",
                                  "append-mdanalysis-segment-box",
                                  "append-periodic-box-to-an-open-box",
                                  "append-periodic-z-to-a-slab-box"])
def test_harness_regressions_pass(tmp_path, name):
    """make fuzz cases 1633 (seed 3993108589), 1593 (seed 100494247), 1279 (seed
    3846512740), 249 (seed 1375767528), 496 (seed 3731942123), 387/389 (seed
    1746975965), 1038-1041 (seed 3202204358) and 78-83 (seed 3388510319), rebuilt by hand
    (tests/differential/repro.py): the product was right, the harness's expectations were
    not; they pass serially, the command line included. And two where the product was wrong
    (append-periodic-box-to-an-open-box: an append that dropped the new boxes' periodicity;
    bench-frames-split-h5md-own-rate-velocity, make fuzz cases 481-482, seed 3690965464:
    bench's frames engine crashed on the parts)."""
    import io

    from .repro import recipes
    from .runner import Runner

    case, _ = recipes()[name]
    runner = Runner(str(tmp_path / "base"), ranks=(1,), keep_dir=str(tmp_path / "kept"), log=io.StringIO())
    try:
        failures = runner.run(case)
    finally:
        runner.close()
    assert runner.counts[1]["cases"] == 1
    assert not failures, [failure[2] for failure in failures]

"""Minimal reproductions of the known failure categories (KNOWN.md), through the harness.

``python -m tests.differential.repro [NAME...] [--ranks 1,2,3]`` builds each named case by
hand (the smallest input showing the failure), runs it like any drawn case and prints its
failures with the reproduction lines; the inputs stay in the kept directory it prints.
Without NAME it runs all of them; a category whose case passes is reported as fixed.
The bench crash with an out-of-range reference frame depended on the XTC's bytes: its
input, tests/differential/data/bench-ref-frame-crash.xtc, is a regression test of
tests/bench/test_bench.py.
"""

import shutil
import sys
import tempfile

import numpy as np

from .cases import Case
from .runner import Runner
from .spec import SegmentSpec


def _xtc(n_frames=3, n_atoms=4, box=True, **extra):
    rng = np.random.default_rng(1)
    spec = SegmentSpec(format="xtc", n_atoms=n_atoms, steps=np.arange(n_frames, dtype=np.int64) * 10,
                       times=np.arange(n_frames) * 0.02, positions=rng.uniform(0.5, 4.5, (n_frames, n_atoms, 3)),
                       has_positions=np.ones(n_frames, bool))
    if box:
        spec.box = np.repeat(np.diag([5.0, 5.0, 5.0])[None], n_frames, axis=0)
        spec.has_box = np.ones(n_frames, bool)
    for key, value in extra.items():
        setattr(spec, key, value)
    return spec


def _trr(n_frames=3, n_atoms=4, **extra):
    spec = _xtc(n_frames, n_atoms)
    spec.format = "trr"
    rng = np.random.default_rng(2)
    spec.velocities = rng.normal(0, 1, (n_frames, n_atoms, 3))
    spec.has_velocities = np.ones(n_frames, bool)
    spec.forces = rng.normal(0, 100, (n_frames, n_atoms, 3))
    spec.has_forces = np.ones(n_frames, bool)
    for key, value in extra.items():
        setattr(spec, key, value)
    return spec


def _h5md(**extra):
    spec = _xtc()
    spec.format, spec.writer = "h5md", "h5py"
    for key, value in extra.items():
        setattr(spec, key, value)
    return spec


def _dcd(istart=0, n_frames=3):
    spec = _xtc(n_frames)
    spec.format, spec.box, spec.has_box = "dcd", None, None
    spec.positions = spec.positions * 10.0
    spec.dcd_istart, spec.steps = istart, istart + np.arange(n_frames, dtype=np.int64)
    return spec


NAMES = ["N", "CA", "C", "O"]


def recipes():
    """NAME -> (Case, what it shows)."""
    near = _xtc(n_frames=2, n_atoms=2)
    near.format, near.writer = "h5md", "h5py"  # float32 values kept as written
    near.positions[:, 0, 0] = 0.0099999998
    missing_box = _xtc()
    missing_box.has_box = np.array([False, True, True])
    some_velocities = _trr(has_velocities=np.array([False, True, True]))
    no_time = _h5md(time_store="missing")
    bonded = _h5md(extras=("connectivity",), bonds=np.array([[0, 1], [2, 3]]))
    fixed_box = _h5md(box_store="fixed33")
    in_pm = _h5md(length_unit="pm")
    in_pm.positions = np.full((3, 4, 3), 1855.1884765625)
    in_pm.box = in_pm.box * 1000.0
    own_rate = _h5md()
    own_rate.velocities = np.random.default_rng(3).normal(0, 1, (3, 4, 3))
    own_rate.velocity_rate, own_rate.has_velocities = 2, np.array([True, False, True])
    split_own_rate = _xtc(n_frames=9)
    split_own_rate.format, split_own_rate.writer = "h5md", "h5py"
    split_own_rate.velocities = np.random.default_rng(4).normal(0, 1, (9, 4, 3))
    split_own_rate.velocity_rate, split_own_rate.has_velocities = 3, np.arange(9) % 3 == 0
    natoms = _xtc(n_frames=3, n_atoms=20, natoms_change_frame=1)
    truncated = _xtc(n_frames=3, extra={"truncate": ("header", 0.5)})
    no_positions = _trr(has_positions=np.array([True, False, True]))
    parts_without_positions = _trr(n_frames=6, has_positions=np.array([True, False, True, False, True, True]))
    zero_cells = _dcd(0)
    zero_cells.extra["zero_cells"] = True
    near_origin = _trr(n_frames=3, n_atoms=2)
    near_origin.positions[1] = [[0.01, -0.002, 0.0], [0.0, 0.005, -0.01]]
    timed, untimed = _h5md(), _xtc(n_frames=1)
    untimed.format, untimed.writer, untimed.time_store = "h5md", "h5py", "missing"
    untimed.steps = timed.steps[-1:].copy()  # overlaps the last frame, dropped
    zero_cells_first, without_cells = _dcd(0), _dcd(3)  # steps 0-2, then 3-5
    zero_cells_first.extra["zero_cells"] = True
    appended_damaged = _xtc(n_frames=3, n_atoms=12, steps=np.arange(3, 6, dtype=np.int64) * 10,
                            times=np.arange(3, 6) * 0.02, corrupt_frame=0)
    far = _xtc(n_frames=2, n_atoms=2)
    far.positions[1, 0, 0] = 211138.0  # 2.1e11 fm: beyond int32
    # an append's segments keep the first one's boundary, "none"; MDAnalysis's writer stores periodic
    unbounded = [_h5md(boundary=(False, False, False), steps=np.arange(3, dtype=np.int64) * 10 + 30 * k,
                       times=(np.arange(3) + 3 * k) * 0.02) for k in range(3)]
    unbounded[1].writer = "mdanalysis"
    open_then_periodic = [_h5md(boundary=(False, False, False)),
                          _h5md(steps=np.arange(3, dtype=np.int64) * 10 + 30, times=(np.arange(3) + 3) * 0.02)]
    slab_then_periodic = [_h5md(boundary=(True, True, False)),
                          _h5md(steps=np.arange(3, dtype=np.int64) * 10 + 30, times=(np.arange(3) + 3) * 0.02)]
    return {
        "append-periodic-z-to-a-slab-box": (
            Case("append", slab_then_periodic, NAMES, {"split_at": 1, "base_ranks": 1, "base": {},
                                                       "on_overlap": "error"}),
            "a file whose box is periodic in x and y only, new frames periodic in z too: refused by design "
            "(the oracle expected the append to succeed: make fuzz cases 78-83, seed 3388510319)"),
        "append-periodic-box-to-an-open-box": (
            Case("append", open_then_periodic, NAMES, {"split_at": 1, "base_ranks": 1, "base": {},
                                                       "on_overlap": "error"}),
            "a file whose box has boundary none, new frames with a periodic box: refused (appended, they "
            "lost their periodicity: make fuzz, seed 4258693996, box-dropped)"),
        "append-mdanalysis-segment-box": (
            Case("append", unbounded, NAMES, {"split_at": 2, "base_ranks": 1, "base": {}, "on_overlap": "later"}),
            "segments with boundary none, one written by MDAnalysis's H5MDWriter (which stores the box "
            "as periodic): the file's boundary is the segments' as stored (make fuzz cases 1038-1041, "
            "seed 3202204358)"),
        "append-damaged-xtc-frame": (
            Case("append", [_xtc(n_frames=3, n_atoms=12), appended_damaged], NAMES * 3,
                 {"split_at": 1, "base_ranks": 1, "base": {}, "on_overlap": "error"}, cli=True),
            "an XTC whose frame 0 has damaged coordinates appended to a file: refused naming file "
            "and frame, the file unchanged (make fuzz case 387, seed 1746975965)"),
        "append-damaged-xtc-frame-on-overlap-later": (
            Case("append", [_xtc(n_frames=3, n_atoms=12), appended_damaged], NAMES * 3,
                 {"split_at": 1, "base_ranks": 1, "base": {"precision": 0.01}, "on_overlap": "later"}),
            "the same with --on-overlap later: refused so, or the intact frames appended (make fuzz "
            "case 389, seed 1746975965)"),
        "bench-frames-h5md-fixed-box": (
            Case("bench", [fixed_box], NAMES, {"select": "all", "ref_frame": -1, "engine": "frames",
                                               "block_frames": 2, "input": "source"}),
            "H5MD box/edges a fixed (3, 3) dataset, bench rmsd --engine frames: MDAnalysis cannot "
            "read it, refused in one line (make fuzz case 496, seed 3731942123)"),
        "precision-positions-beyond-int32": (
            Case("convert", [far], NAMES[:2], {"precision": 0.0001}),
            "an XTC coordinate of 211138 nm at --precision 0.0001 (int32 fm): refused in one line by "
            "design (make fuzz case 249, seed 1375767528)"),
        "split-same-dcd-with-and-without-cells": (
            Case("split", [zero_cells_first, without_cells], NAMES, {"nparts": 1, "format": "same"}),
            "two DCD segments whose steps continue, the first with all-zero unit cells, the second "
            "without: one DCD part cannot hold both headers, refused (make fuzz case 1279)"),
        "split-precision-rounds-frames-to-zero": (
            Case("split", [near_origin], NAMES[:2], {"nparts": 3, "format": "h5md", "precision": 0.2}),
            "TRR frame 1 within 0.01 nm of the origin, split in 3 H5MD parts at --precision 0.2: "
            "stored as zeros, which validate calls DATA001 (make fuzz case 1633)"),
        "validate-against-segments-with-and-without-time": (
            Case("validate", [timed, untimed], NAMES, {"mutation": None, "on_overlap": "drop"}, cli=True),
            "two H5MD segments, one without time, validate --against them: refused in one line "
            "(make fuzz case 1593)"),
        "bench-frames-split-h5md-own-rate-velocity": (
            Case("bench", [split_own_rate], NAMES, {"select": "all", "ref_frame": 0, "engine": "frames",
                                                    "block_frames": 1, "input": "split"}, cli=True),
            "an H5MD file with velocities at every third position frame (steps of their own) split in 3 "
            "H5MD parts, bench rmsd --engine frames: the parts are read as the file is (make fuzz cases "
            "481-482, seed 3690965464: MDAnalysis's H5MD reader read a velocity row past the part's last, "
            "IndexError)"),
        "bench-split-swapped-parts": (
            Case("bench", [_xtc(n_frames=6)], NAMES, {"select": "all", "ref_frame": 0, "engine": "blocks",
                                                      "block_frames": 2, "input": "split-swapped"}, cli=True),
            "an XTC split in 3 parts, the first and last part files swapped (recorded sizes made to "
            "match): bench rmsd refuses in one line"),
        "bench-split-copied-parts": (
            Case("bench", [_h5md()], NAMES, {"select": "all", "ref_frame": -1, "engine": "frames",
                                             "block_frames": 1, "input": "split-copied"}, cli=True),
            "an H5MD file split in 3 H5MD parts, the first copied over the last (recorded sizes made "
            "to match), bench rmsd --engine frames: refused in one line"),
        "bench-frames-split-trr-without-positions": (
            Case("bench", [parts_without_positions], NAMES,
                 {"select": "all", "ref_frame": 0, "engine": "frames", "block_frames": 1, "input": "split"}),
            "TRR frames 1 and 3 without positions, split in 3 TRR parts, bench --engine frames on the manifest"),
        "dcd-zero-cell-box-mismatch": (Case("validate", [zero_cells], NAMES, {"mutation": None}),
                                       "DCD flagged periodic whose unit cells have zero lengths (MDAnalysis's "
                                       "DCDWriter without a box), validate --against an exact copy"),
        "single-chunk-zeros": (Case("convert", [_xtc(n_frames=1)], NAMES, {}), "one frame, one chunk: stored as zeros (serial)"),
        "precision-beyond-bound": (Case("convert", [near], NAMES[:2], {"precision": 0.01}), "0.0099999998 with --precision 0.01"),
        "box-first-frame-or-partial": (Case("convert", [missing_box], NAMES, {}), "XTC whose frame 0 has no box"),
        "fields-in-some-frames": (Case("convert", [some_velocities], NAMES, {}), "TRR whose frame 0 has no velocities"),
        "h5md-own-rate-velocity": (Case("convert", [own_rate], NAMES, {}), "H5MD velocity every 2nd position frame"),
        "truncated-accepted": (Case("convert", [truncated], NAMES, {}), "XTC cut inside the last frame's header"),
        "natoms-change-accepted": (Case("convert", [natoms], NAMES * 5, {}), "XTC whose frames 1.. hold one atom more"),
        "time-invented": (Case("convert", [no_time], NAMES, {}), "H5MD without time"),
        "connectivity-stale": (Case("convert", [bonded], NAMES, {"topology": True, "select": "index 2:3"}),
                               "H5MD with /connectivity, --select"),
        "h5md-fixed-box": (Case("convert", [fixed_box], NAMES, {}), "H5MD box/edges a fixed (3, 3) dataset"),
        "h5md-box-vectors": (Case("validate", [_h5md(box_store="n3")], NAMES, {"mutation": None}),
                             "H5MD box as (n, 3) edge vectors, validate --against it"),
        "unit-conversion-ulp": (Case("convert", [in_pm], NAMES, {}), "H5MD in pm: 1855.1884765625 pm"),
        "split-dcd-header-steps": (Case("split", [_dcd(0), _dcd(100)], NAMES, {"nparts": 1, "format": "same"}),
                                   "two DCD segments with a gap in steps, one part"),
        "validate-misses-nan-inf": (Case("validate", [_dcd(0)], NAMES, {"mutation": {"field": "positions", "frame": 1, "atom": 0, "axis": 0, "value": "nan"}}),
                                    "DCD source, copy with one NaN"),
        "bench-frames-engine-qcp-nan": (Case("bench", [_xtc()], NAMES, {"select": "index 0:1", "ref_frame": 0, "engine": "frames", "block_frames": 8, "input": "source"}),
                                        "two atoms, the reference frame itself, engine frames"),
        "bench-one-atom-refused": (Case("bench", [_xtc()], NAMES, {"select": "index 0", "ref_frame": 0, "engine": "frames", "block_frames": 8, "input": "source"}),
                                   "one atom: refused in one line"),
        "bench-frames-without-positions-crash": (Case("bench", [no_positions], NAMES, {"select": "name CA", "ref_frame": 1, "engine": "frames", "block_frames": 8, "input": "source"}),
                                                 "TRR frame 1 without positions, engine frames"),
    }


def main(argv):
    ranks = (1,)
    names = []
    arguments = iter(argv)
    for argument in arguments:
        if argument == "--ranks" or argument.startswith("--ranks="):
            value = argument.split("=", 1)[1] if "=" in argument else next(arguments, "1")
            ranks = tuple(int(r) for r in value.split(","))
        else:
            names.append(argument)
    available = recipes()
    names = names or list(available)
    keep = tempfile.mkdtemp(prefix="h5mdtool-repro-kept-")
    base = tempfile.mkdtemp(prefix="h5mdtool-repro-")
    runner = Runner(base, ranks=ranks, keep_dir=keep, log=sys.stdout)
    try:
        for name in names:
            case, what = available[name]
            print(f"== {name}: {what}", flush=True)
            new = runner.run(case)
            if not new:
                print("   passes (fixed?)")
    finally:
        runner.close()
        shutil.rmtree(base, ignore_errors=True)
    print(f"inputs kept in {keep}")


if __name__ == "__main__":
    main(sys.argv[1:])

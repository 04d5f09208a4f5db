"""Benchmark inputs: the AdK trajectory from MDAnalysisTests repeated N times, as the papers did,
and the solvated AdK (47681 atoms) repeated.

``python benchmarks/data.py 100`` (or 600) writes ``benchmarks/data/adk_100x.xtc`` once and
reuses it afterwards; ``python benchmarks/data.py solvated 100`` writes the solvated system's
10 frames repeated 100 times. Frames keep increasing step and time across the copies (step
1000 * (i + 1), time (i + 1) * dt ps, as the DCD header gives them), so the result is a valid
single trajectory. Positions are the DCD's, in nm, written with MDAnalysis's own XTC writer
at XTC's default precision (0.001 nm).
"""

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
#: shape of the AdK DCD that every benchmark trajectory repeats
ADK_ATOMS = 3341
ADK_FRAMES = 98


def topology():
    """The AdK PSF topology (3341 atoms)."""
    from MDAnalysisTests.datafiles import PSF

    return PSF


def adk_source():
    """Positions (nm, float32), step interval and time interval of the 98-frame AdK DCD."""
    from MDAnalysis import units
    from MDAnalysis.lib.formats.libdcd import DCDFile
    from MDAnalysisTests.datafiles import DCD

    with DCDFile(DCD) as handle:
        header = handle.header
        xyz = (handle.readframes().xyz / 10.0).astype(np.float32)
    dt = float(units.convert(header["delta"], "AKMA", "ps")) * header["nsavc"]
    return xyz, int(header["nsavc"]), dt


def repeated_xtc(repeats, directory=DATA):
    """Path of the AdK XTC repeated *repeats* times (98 * repeats frames), made if missing."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"adk_{repeats}x.xtc")
    if os.path.exists(path):
        return path
    xyz, nsavc, dt = adk_source()
    box = np.zeros((3, 3), np.float32)
    partial = path + ".partial"
    started = time.perf_counter()
    with XTCFile(partial, "w") as handle:
        frame = 0
        for _ in range(repeats):
            for positions in xyz:
                frame += 1
                handle.write(positions, box, frame * nsavc, frame * dt)
    os.replace(partial, path)
    print(f"made {path}: {frame} frames in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def solvated_topology():
    """The solvated AdK's GRO topology (47681 atoms)."""
    from MDAnalysisTests.datafiles import GRO

    return GRO


def repeated_solvated_xtc(copies, directory=DATA, box=True):
    """Path of MDAnalysisTests' solvated AdK (47681 atoms, 10 frames) repeated *copies* times
    as one XTC, made if missing.

    Each copy is shifted by a different whole number of XTC grid steps (0.001 nm) along each
    axis (7, 13 and 3 steps a copy), so no two frames are identical, and the positions stay
    on the XTC grid; steps and times keep increasing. With *box* every frame keeps the
    source's unit cell; without it the frames have none. Frames are written one by one.
    """
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    from MDAnalysisTests.datafiles import XTC

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"solvated_{copies * 10}{'' if box else '_nobox'}.xtc")
    if os.path.exists(path):
        return path
    with XTCFile(XTC) as source:
        frames = list(source)
    grid = 0.001
    steps = [int(frame.step) for frame in frames]
    times = [float(frame.time) for frame in frames]
    dstep, dt = steps[1] - steps[0], times[1] - times[0]
    no_box = np.zeros((3, 3), np.float32)
    partial = path + ".partial"
    started = time.perf_counter()
    with XTCFile(partial, "w") as handle:
        for copy in range(copies):
            shift = np.array([7 * copy, 13 * copy, 3 * copy], np.float64)
            for frame, step, t in zip(frames, steps, times):
                positions = ((np.rint(frame.x.astype(np.float64) / grid) + shift) * grid).astype(np.float32)
                handle.write(positions, frame.box if box else no_box, step + copy * 10 * dstep, t + copy * 10 * dt,
                             1000.0)
    os.replace(partial, path)
    print(f"made {path}: {copies * 10} frames in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


if __name__ == "__main__":
    if sys.argv[1:2] == ["solvated"]:
        for argument in sys.argv[2:] or ["100"]:
            print(repeated_solvated_xtc(int(argument)))
    else:
        for argument in sys.argv[1:] or ["100"]:
            print(repeated_xtc(int(argument)))

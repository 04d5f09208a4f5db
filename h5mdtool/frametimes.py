"""Times of every frame (ps), read from frame headers, and GROMACS-style time selections.

``bench rmsd -b/-e/--dt`` pick frames by time, as ``gmx rms`` does; that needs the time of
every frame before the work is divided. Decoding every frame for it would cost as much as
the benchmark, so rank 0 reads only what each format stores per frame:

- XTC and TRR: the frame header at each offset rank 0 scanned (16 bytes for XTC; TRR's
  header holds its own size fields and the time as float or double);
- DCD: nothing to read: time = (istart / nsavc + frame) * dt, as MDAnalysis computes it;
- H5MD: the particle group's ``position/time`` dataset (or its fixed step and offset).

(The reading stack that replaces :mod:`h5mdtool.sources` scans every frame header on rank 0;
once it is in, these times come from its scan.)
"""

import struct

import numpy as np

from .errors import InputError, UsageError

XTC_MAGIC = 1995
TRR_MAGIC = 1993
FLOAT32_EPS = float(np.finfo(np.float32).eps)


def xtc_times(path, offsets):
    """Times (ps) in the headers of the XTC frames starting at *offsets*."""
    times = np.empty(len(offsets), np.float64)
    with open(path, "rb") as handle:
        for number, offset in enumerate(offsets):
            handle.seek(int(offset))
            magic, _, _, time = struct.unpack(">iiif", handle.read(16))
            if magic != XTC_MAGIC:
                raise InputError(f"{path}: no XTC frame header at byte {offset}")
            times[number] = time
    return times


def trr_times(path, offsets):
    """Times (ps) in the headers of the TRR frames starting at *offsets*."""
    times = np.empty(len(offsets), np.float64)
    with open(path, "rb") as handle:
        for number, offset in enumerate(offsets):
            handle.seek(int(offset))
            magic, _, length = struct.unpack(">iii", handle.read(12))
            if magic != TRR_MAGIC:
                raise InputError(f"{path}: no TRR frame header at byte {offset}")
            handle.seek((length + 3) // 4 * 4, 1)  # the version string, padded to 4 bytes
            sizes = struct.unpack(">13i", handle.read(52))
            box, x, v, f, natoms = sizes[2], sizes[7], sizes[8], sizes[9], sizes[10]
            real = box // 9 if box else next((s // (3 * natoms) for s in (x, v, f) if s and natoms), 4)
            times[number] = struct.unpack(">d" if real == 8 else ">f", handle.read(real))[0]
    return times


def dcd_times(header, n_frames):
    """Times (ps) of DCD frames from the header MDAnalysis reads (see :mod:`h5mdtool.sources`)."""
    frames = np.arange(n_frames, dtype=np.float64)
    return (frames + header["istart"] / header["nsavc"]) * header["dt_ps"]


def segment_times(segment):
    """Times (ps) of every frame of one scanned file (a :class:`~h5mdtool.sources.SegmentInfo`),
    including frames dropped as overlap."""
    if segment.format == "XTC":
        return xtc_times(segment.path, segment.offsets)
    if segment.format == "TRR":
        return trr_times(segment.path, segment.offsets)
    if segment.format == "DCD":
        return dcd_times(segment.dcd_header, segment.n_frames)
    raise InputError(f"{segment.path}: frame times of {segment.format} segments are read with h5md_times")


def h5md_times(path, group):
    """Times (ps) of every frame of an H5MD file's particle *group* (MDAnalysis's default
    without a time dataset: 1 ps per frame)."""
    import h5py

    from .frames import h5md_time_ps

    with h5py.File(path, "r") as handle:
        position = handle["particles"][group]["position"]
        return h5md_time_ps(path, position, 0, position["value"].shape[0])


def _multiple_of(times, dt):
    """GROMACS's ``bRmod``: t is a whole multiple of dt, within 2 float32 epsilons of t."""
    tolerance = 2 * FLOAT32_EPS
    quotient = np.trunc((times + tolerance * times) / dt)
    return np.abs(times - dt * quotient) <= tolerance * np.abs(times)


def select_by_time(times, begin=None, end=None, dt=None):
    """Frame numbers whose time is in ``[begin, end]`` and a whole multiple of *dt* (all in ps).

    Times are compared as float32 ("real" in GROMACS). ``gmx`` keeps the same frames of TRR
    files; on XTC files it measures dt from the first frame when no -b is given, and it
    keeps the first frame at or after -b even when it lies past -e.

    Raises
    ------
    UsageError
        If *dt* is not positive, *end* is before *begin*, or no frame is selected.
    """
    if dt is not None and dt <= 0:
        raise UsageError(f"--dt must be a positive time in ps, got {dt}")
    if begin is not None and end is not None and end < begin:
        raise UsageError(f"-e {end} ps is before -b {begin} ps")
    times = np.asarray(times, np.float32).astype(np.float64)
    keep = np.ones(len(times), bool)
    if begin is not None:
        keep &= times >= float(np.float32(begin))
    if end is not None:
        keep &= times <= float(np.float32(end))
    if dt is not None:
        keep &= _multiple_of(times, float(np.float32(dt)))
    frames = np.flatnonzero(keep)
    if len(frames) == 0:
        span = f"{times.min():g}-{times.max():g} ps" if len(times) else "no frames"
        raise UsageError(f"-b {begin} -e {end} --dt {dt} selects none of the {len(times)} frames (times {span})")
    return frames

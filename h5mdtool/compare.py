"""Frame-by-frame comparison of an H5MD file (or split parts) with the trajectory it came from.

Used by ``validate --against``. Frames are divided among ranks in balanced blocks; each
rank compares its frames block by block (positions, velocities, forces, step, time, box)
and rank 0 collects the differing frames. Positions compare exactly for float32 nm sources
(XTC, TRR); DCD sources (float32 Angstrom) allow the Angstrom-to-nm rounding (2.5e-7
relative); files written with ``--precision`` are compared within half their recorded
precision; ``tolerance`` (nm) overrides all of this.
"""

import numpy as np

from .mpi import balanced_slices, entry_point, root_call
from .sources import TrajectoryReader, scan

BLOCK = 256
FIELDS = (("positions", "position"), ("velocities", "velocity"), ("forces", "force"))


class H5MDBlocks:
    """Blocks of an H5MD file written by h5mdtool (nm, ps), in the FrameBlock vocabulary."""

    def __init__(self, path):
        import h5py

        self.handle = h5py.File(path, "r")
        self.group = self.handle["particles/trajectory"]
        self.n_frames = int(self.group["position/value"].shape[0])
        self.precision = self.group["position/value"].attrs.get("precision")

    def read(self, start, stop):
        block = {"step": self.group["position/step"][start:stop].astype(np.int64),
                 "time": self.group["position/time"][start:stop].astype(np.float64)}
        for field, element in FIELDS:
            if element in self.group:
                block[field] = self.group[f"{element}/value"][start:stop]
        if "edges" in self.group["box"]:
            block["edges"] = self.group["box/edges/value"][start:stop]
        return block

    def close(self):
        self.handle.close()


class SourceBlocks:
    """Blocks of XTC/TRR/DCD trajectories through h5mdtool's readers."""

    def __init__(self, index, fields):
        self.index = index
        self.n_frames = index.n_frames
        self.reader = TrajectoryReader(index, None, fields)
        self.block = self.reader.new_block(BLOCK)
        self.fields = fields

    def read(self, start, stop):
        self.reader.read(np.arange(start, stop), self.block)
        n = self.block.n
        block = {"step": self.block.step[:n].copy(), "time": self.block.time[:n].copy()}
        for field in self.fields:
            block[field] = getattr(self.block, field)[:n].copy()
        if self.index.periodic:
            block["edges"] = self.block.edges[:n].copy()
        return block

    def close(self):
        self.reader.close()


def _differences(mine, theirs, start, tolerance, relative):
    """Frame numbers (and a reason) where the blocks differ."""
    found = {}

    def note(mask, reason):
        for i in np.flatnonzero(mask):
            found.setdefault(start + int(i), reason)

    note(mine["step"] != theirs["step"], "step differs")
    note(~np.isclose(mine["time"], theirs["time"], rtol=1e-9, atol=1e-6), "time differs")
    for field in ("positions", "velocities", "forces"):
        if field in mine and field in theirs:
            a, b = mine[field].astype(np.float64), theirs[field].astype(np.float64)
            limit = tolerance + relative * np.abs(b) if field == "positions" else relative * np.abs(b)
            bad = np.abs(a - b) > limit
            note(bad.reshape(len(a), -1).any(axis=1), f"{field} differ")
    if "edges" in mine and "edges" in theirs:
        bad = ~np.isclose(mine["edges"], theirs["edges"], rtol=1e-6, atol=1e-7)
        note(bad.reshape(len(bad), -1).any(axis=1), "box differs")
    return found


@entry_point
def compare_with_source(file_paths, sources, *, comm=None, tolerance=None, limit=10):
    """Compare H5MD file(s) (or split parts, concatenated) with source trajectories.

    Parameters
    ----------
    file_paths : list of str
        The H5MD file, or the parts of a split trajectory in order (any format h5mdtool reads).
    sources : list of str
        The source trajectory's segments.
    tolerance : float, optional
        Absolute tolerance on positions (nm); default: exact for float32 nm sources,
        DCD rounding for DCD, half the recorded precision for lossy files.
    limit : int
        How many differing frames to report.

    Returns
    -------
    dict
        ``n_frames`` of both sides, ``differing`` (first frames with a reason), ``n_differing``.
    """
    source_index = root_call(comm, scan, list(sources))
    h5md = len(file_paths) == 1 and file_paths[0].lower().endswith((".h5md", ".h5"))
    copy_index = None if h5md else root_call(comm, scan, list(file_paths))
    fields = ["positions"] + [f for f, flag in (("velocities", source_index.has_velocities), ("forces", source_index.has_forces)) if flag]
    copy = H5MDBlocks(file_paths[0]) if h5md else SourceBlocks(copy_index, fields)
    source = SourceBlocks(source_index, fields)
    try:
        if copy.n_frames != source.n_frames:
            return {"n_frames": copy.n_frames, "source_n_frames": source.n_frames, "differing": [],
                    "n_differing": None, "frame_count_differs": True}
        relative = 2.5e-7 if "DCD" in source_index.formats else 0.0
        absolute = 0.0
        precision = getattr(copy, "precision", None)
        if precision is not None:
            # half the grid step, plus float32 rounding of the stored value (absolute near 0)
            rounding = 4 * float(np.finfo(np.float32).eps)
            absolute = float(precision) / 2 + rounding
            relative = max(relative, rounding)
        if tolerance is not None:
            absolute, relative = float(tolerance), 0.0
        start, stop = balanced_slices(source.n_frames, comm.size)[comm.rank]
        found = {}
        for first in range(start, stop, BLOCK):
            last = min(stop, first + BLOCK)
            found.update(_differences(copy.read(first, last), source.read(first, last), first, absolute, relative))
    finally:
        copy.close()
        source.close()
    everything = {}
    for part in comm.allgather(found):
        everything.update(part)
    frames = sorted(everything)
    return {"n_frames": copy.n_frames, "source_n_frames": source.n_frames, "n_differing": len(frames),
            "differing": [{"frame": f, "reason": everything[f]} for f in frames[:limit]],
            "tolerance_nm": absolute, "relative": relative, "frame_count_differs": False}

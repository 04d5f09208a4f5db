"""What a ``bench rmsd`` run read and computed, in a few numbers ``bench report`` can compare.

Two reports can only be combined when they measured the same work on the same data. File
sizes and layouts say little about the data (a copy of a trajectory with its frames in
another order has the same size), so each report records:

- ``data``: the input's total size, the checksums a version-3 split manifest records for
  its parts (digested together), and a digest of the analysed atoms' positions in a
  sample of frames (:data:`SAMPLE_FRAMES` evenly spaced analysed frames, read by rank 0
  after the timed runs through the reading stack, in Angstrom as float32);
- ``results``: the RMSDs at the same sampled frames, each RMSD column's mean and maximum,
  and a digest of every value.

The positions digest is exact (the same bytes give the same values); the sampled RMSDs are
compared with a tolerance, so the same trajectory in layouts that store it differently
(``--precision``, Angstrom or nm) can be compared side by side (``bench report --layouts``).
"""

import hashlib

import numpy as np

#: Frames sampled for the digests (fewer when fewer are analysed).
SAMPLE_FRAMES = 8


def _hasher():
    return hashlib.blake2b(digest_size=16)


def sample_rows(n_rows):
    """Row numbers of the sample: up to :data:`SAMPLE_FRAMES` evenly spaced, first and last included."""
    if n_rows <= 0:
        return np.empty(0, np.int64)
    return np.unique(np.linspace(0, n_rows - 1, min(SAMPLE_FRAMES, n_rows)).round().astype(np.int64))


def data_digest(info, plan):
    """Identify the data a run read (rank 0, after the timed runs).

    Parameters
    ----------
    info : h5mdtool.bench.inputs.InputInfo
    plan : h5mdtool.bench.analysis.RmsdPlan

    Returns
    -------
    dict
        ``bytes`` (the input files' total size), ``part_checksums`` (digest of a split
        manifest's per-part checksums, None when it records none), ``sample_frames`` (frame
        numbers) and ``sample_positions`` (digest of the analysed atoms' positions there).
    """
    from ..formats import read_frame

    frames = plan.frames[sample_rows(len(plan.frames))]
    positions = _hasher()
    for frame in frames:
        index, number = info.locate(int(frame))
        values, _ = read_frame(index, number)
        positions.update(np.ascontiguousarray(values[plan.read_indices], np.float32).tobytes())
    checksums = None
    if info.manifest is not None and all(part.checksum for part in info.manifest.parts):
        hasher = _hasher()
        for part in info.manifest.parts:
            hasher.update(part.checksum.encode() + b"\n")
        checksums = hasher.hexdigest()
    return {"bytes": int(sum(f["size"] for f in info.files)), "part_checksums": checksums,
            "sample_frames": [int(f) for f in frames], "sample_positions": positions.hexdigest()}


def results_digest(rmsd):
    """Identify a run's results: the RMSDs (columns 2...) of :func:`sample_rows`, each
    column's mean and maximum (Angstrom), and a digest of every value."""
    values = np.ascontiguousarray(np.asarray(rmsd, np.float64)[:, 2:])
    rows = sample_rows(len(values))
    every = _hasher()
    every.update(values.tobytes())
    return {"n": int(len(values)), "sample_frames": [int(f) for f in np.asarray(rmsd)[rows, 0]],
            "sample": values[rows].tolist(), "mean": values.mean(axis=0).tolist() if len(values) else [],
            "max": values.max(axis=0).tolist() if len(values) else [], "values": every.hexdigest()}

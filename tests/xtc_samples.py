"""Generated XTC files for the decoder's tests, written by MDAnalysis's ``libmdaxdr`` (the
oracle the decoder must match bit for bit), and the corruptions applied to them.

A sample is drawn as a few numbers (hypothesis shrinks those); :func:`sample_positions`
turns them into coordinates with numpy: uniform clouds, random walks (consecutive atoms
close, so the encoder uses its runs of small differences and moves its size index both
ways), water-like triples, all atoms at one point, and spans beyond 2^24 grid units (the
encoder then stores each coordinate on its own).
"""

import struct

import numpy as np
from hypothesis import strategies as st

PRECISIONS = (100.0, 1000.0, 10000.0)
SHAPES = ("uniform", "walk", "water", "identical", "huge")
#: Bytes before a compressed frame's coordinates; the byte count is the last header word.
HEADER = 92


@st.composite
def xtc_samples(draw):
    """Parameters of a generated XTC file (see :func:`write_sample`)."""
    n_atoms = draw(st.one_of(st.integers(1, 12), st.integers(13, 400)))
    return {
        "n_atoms": n_atoms,
        "n_frames": draw(st.integers(1, 3)),
        "precision": draw(st.sampled_from(PRECISIONS)),
        "shape": draw(st.sampled_from(SHAPES)),
        "scale": draw(st.sampled_from((0.01, 1.0, 10.0, 300.0))),
        "offset": draw(st.sampled_from((0.0, -5.0, 1000.0))),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def sample_positions(sample):
    """Coordinates (n_frames, n_atoms, 3) in nm, float32, whose grid integers fit int32."""
    rng = np.random.default_rng(sample["seed"])
    shape = (sample["n_frames"], sample["n_atoms"], 3)
    scale, kind = sample["scale"], sample["shape"]
    if kind == "uniform":
        xyz = rng.uniform(-scale, scale, shape)
    elif kind == "walk":
        steps = rng.normal(0.0, 0.05, shape) * rng.choice([0.01, 0.1, 1.0, 20.0], size=shape[:2] + (1,))
        xyz = np.cumsum(steps, axis=1) * scale
    elif kind == "water":
        centres = rng.uniform(-scale, scale, (shape[0], (shape[1] + 2) // 3, 1, 3))
        xyz = (centres + rng.normal(0.0, 0.1, centres.shape[:2] + (3, 3))).reshape(shape[0], -1, 3)[:, :shape[1]]
    elif kind == "identical":
        xyz = np.broadcast_to(rng.uniform(-scale, scale, (shape[0], 1, 3)), shape)
    else:  # a span of more than 2^24 grid units: coordinates stored one by one
        span = 2.0**25 / sample["precision"]
        xyz = rng.uniform(-span, span, shape)
        # atoms in pairs: with every atom that far from the previous one, writers index past
        # the end of the format's table (see test_xtc_decoder.py)
        xyz[:, 1::2] = xyz[:, : shape[1] // 2 * 2 : 2] + rng.normal(0.0, scale, (shape[0], shape[1] // 2, 3))
    limit = 2.0e9 / sample["precision"]  # int32 grid integers (the writer refuses beyond)
    xyz = np.clip(np.asarray(xyz) + sample["offset"], -limit, limit)
    return xyz.astype(np.float32)


def write_sample(path, sample):
    """Write *sample* with ``libmdaxdr.XTCFile``; returns its positions (nm, float32)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    xyz = sample_positions(sample)
    box = np.diag([7.0, 8.0, 9.0]).astype(np.float32)
    with XTCFile(str(path), "w") as handle:
        for number, frame in enumerate(xyz):
            handle.write(frame, box, number * 10, number * 2.0, sample["precision"])
    return xyz


def read_with_libmdaxdr(path):
    """Every frame's positions as ``libmdaxdr`` decodes them (float32, nm)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(str(path)) as handle:
        return np.array([frame.x for frame in handle])


def payloads(data, offsets):
    """(start, stop) byte range of each frame's compressed coordinates; none for small frames."""
    ranges = []
    for start in offsets[:-1]:
        n_atoms = struct.unpack_from(">i", data, start + 4)[0]
        if n_atoms > 9:
            count = struct.unpack_from(">i", data, start + HEADER - 4)[0]
            ranges.append((start + HEADER, start + HEADER + count))
    return ranges


def integer_box(data, start):
    """(minimum, maximum) grid integers of the compressed frame at byte *start*."""
    values = struct.unpack_from(">6i", data, start + 60)
    return np.array(values[:3]), np.array(values[3:])


def frame_offsets(data):
    """Start of each frame of the XTC bytes *data*, then the end of the last one."""
    offsets, position = [], 0
    while position < len(data):
        offsets.append(position)
        n_atoms = struct.unpack_from(">i", data, position + 4)[0]
        if n_atoms <= 9:
            position += 56 + 12 * n_atoms
        else:
            position += HEADER + (struct.unpack_from(">i", data, position + HEADER - 4)[0] + 3) // 4 * 4
    return offsets + [position]


def damaged_copy(path, target, frame, first_bytes=16):
    """Copy *path* to *target* with the first bytes of *frame*'s compressed coordinates set
    to 0xff: the first atom's integers then lie beyond the frame's integer box (its number
    of bits holds a value at least the box's size), whatever the frame holds. Returns the
    frame's byte offset."""
    data = bytearray(open(path, "rb").read())
    offsets = frame_offsets(data)
    start, stop = payloads(data, offsets)[frame]
    data[start:start + min(stop - start, first_bytes)] = b"\xff" * min(stop - start, first_bytes)
    with open(target, "wb") as handle:
        handle.write(data)
    return offsets[frame]

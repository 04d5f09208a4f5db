"""How small can an H5MD file at the XTC's precision get? Empirical entropies against the XTC.

A codec that HDF5 runs on a chunk (gzip, Zstd, LZ4, Blosc2) codes bytes, after a shuffle,
with an order-0 entropy coder (Huffman or FSE) plus matches of repeated byte strings. For
positions on the XTC's 0.001 nm grid this script prints, in bits per coordinate:

- the XTC itself (its file size over frames x atoms x 3);
- the order-0 entropy of the integers, per axis (what a perfect order-0 coder of the values
  would need);
- the same of the differences between consecutive atoms of a frame (what XTC's coder
  exploits), and between consecutive frames of an atom.

An entropy above the XTC's bits says that no order-0 coder of that representation reaches
the XTC's size; matches help only where byte strings repeat (frames close in time). Every
representation also has to be one that a plain HDF5 reader returns as coordinates, which
rules out the differences themselves (docs/layouts.md).

``python benchmarks/study_entropy.py`` (AdK 10x and the 10 solvated frames of MDAnalysisTests).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from data import repeated_xtc  # noqa: E402


def grid_integers(path):
    """The XTC's positions as integers on its grid, and the file's bits per coordinate."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(path) as handle:
        frames = [frame.x.copy() for frame in handle]
    positions = np.stack(frames)
    integers = np.rint(positions.astype(np.float64) * 1000).astype(np.int64)
    return integers, os.path.getsize(path) * 8 / positions.size


def entropy(values):
    """Order-0 entropy of *values* in bits per value."""
    _, counts = np.unique(values, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def per_axis(values):
    return float(np.mean([entropy(values[..., axis]) for axis in range(3)]))


def main():
    from MDAnalysisTests.datafiles import XTC

    print("| trajectory | XTC | values | atom differences | frame differences |")
    print("| --- | --- | --- | --- | --- |")
    for name, path in (("AdK 10x (980 frames x 3341 atoms)", repeated_xtc(10)),
                       ("solvated AdK (10 frames x 47681 atoms)", XTC)):
        integers, xtc_bits = grid_integers(path)
        print(f"| {name} | {xtc_bits:.2f} | {per_axis(integers):.2f} | {per_axis(np.diff(integers, axis=1)):.2f} | "
              f"{per_axis(np.diff(integers, axis=0)):.2f} |", flush=True)


if __name__ == "__main__":
    main()

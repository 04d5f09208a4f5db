"""Batched RMSD after optimal superposition, in numpy (no per-frame Python loop).

The result matches MDAnalysis's ``rms.RMSD`` (each structure centred on its centre of
geometry, no weights, optimal rotation, float64 arithmetic). Only the RMSD is computed, never
the rotated coordinates: for centred coordinates X (frame) and Y (reference) of n atoms,

    n * RMSD^2 = |X|^2 + |Y|^2 - 2 (s1 + s2 + d s3)

where s1 >= s2 >= s3 are the singular values of the 3x3 covariance matrix Y^T X and
d = sign(det(Y^T X)) (d = -1 means the best orthogonal fit would be a reflection, which is
not a rotation: Kabsch's correction). This is the same minimum QCP (MDAnalysis's
``qcprot``) finds as the largest eigenvalue of its 4x4 key matrix.

Frames are not centred explicitly: the reference is centred, so Y^T X equals Y^T (X - mean)
for any frame, and |X - mean|^2 = |X|^2 - n |mean|^2. That keeps a block of frames to a few
matrix products (about 4x faster than centring copies of every frame).
"""

import numpy as np


def centred(coordinates):
    """Coordinates minus their centre of geometry, as float64 (last two axes: atoms, xyz)."""
    coordinates = np.asarray(coordinates, dtype=np.float64)
    return coordinates - coordinates.mean(axis=-2, keepdims=True)


def rmsd_to_reference(frames, reference):
    """RMSD of each frame to *reference* after centring and optimal rotation.

    Parameters
    ----------
    frames : array_like, shape (k, n, 3)
        Any float type; arithmetic is float64.
    reference : array_like, shape (n, 3)

    Returns
    -------
    numpy.ndarray, shape (k,)
        In the units of the coordinates.

    Raises
    ------
    ValueError
        If the shapes do not match or there are no atoms.
    """
    frames = np.asarray(frames)
    reference = np.asarray(reference)
    if frames.ndim != 3 or frames.shape[1:] != reference.shape or reference.shape[0] == 0:
        raise ValueError(f"frames {frames.shape} and reference {reference.shape} do not match")
    reference = centred(reference)
    frames = frames.astype(np.float64, copy=False)
    n_atoms = reference.shape[0]
    # (3, n) @ (k, n, 3): the transpose of each covariance matrix, which has the same
    # singular values and determinant
    covariance = np.matmul(reference.T, frames)
    sums = np.matmul(np.ones(n_atoms), frames)  # (k, 3): n * centre of geometry
    flat = frames.reshape(len(frames), 3 * n_atoms)
    frame_squares = np.einsum("ij,ij->i", flat, flat) - np.einsum("ij,ij->i", sums, sums) / n_atoms
    singular = np.linalg.svd(covariance, compute_uv=False)
    singular[:, 2] = np.where(np.linalg.det(covariance) < 0.0, -singular[:, 2], singular[:, 2])
    squared = (frame_squares + np.einsum("ij,ij->", reference, reference) - 2.0 * singular.sum(axis=1)) / n_atoms
    return np.sqrt(np.maximum(squared, 0.0))

"""Batched RMSD after optimal superposition, in numpy (no per-frame Python loop).

The result matches MDAnalysis's ``rms.RMSD`` (centred on the centre of geometry, no weights,
optimal rotation): the minimal RMSD follows from the singular values of the 3x3 covariance
matrix between each centred frame and the centred reference (Kabsch), with the smallest
singular value's sign flipped when the optimal orthogonal matrix would be a reflection.
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
    frames : array, shape (k, n, 3)
    reference : array, shape (n, 3)

    Returns
    -------
    numpy.ndarray, shape (k,)
        In the units of the coordinates.

    Raises
    ------
    ValueError
        If the shapes do not match or there are no atoms.
    """
    frames = centred(frames)
    reference = centred(reference)
    if frames.ndim != 3 or frames.shape[1:] != reference.shape or reference.shape[0] == 0:
        raise ValueError(f"frames {frames.shape} and reference {reference.shape} do not match")
    n_atoms = reference.shape[0]
    covariance = np.einsum("kni,nj->kij", frames, reference)
    u, singular, vt = np.linalg.svd(covariance)
    reflection = np.sign(np.linalg.det(u) * np.linalg.det(vt))
    singular[:, 2] *= reflection
    inner = np.einsum("kni,kni->k", frames, frames) + np.einsum("ni,ni->", reference, reference)
    squared = (inner - 2.0 * singular.sum(axis=1)) / n_atoms
    return np.sqrt(np.maximum(squared, 0.0))

"""Batched RMSD after optimal superposition, in numpy (no per-frame Python loop).

The results match MDAnalysis's ``rms.RMSD``: each structure centred on its (weighted) centre,
optimal rotation, float64 arithmetic, weights (masses) divided by their mean; RMSDs of
further groups (MDAnalysis's ``groupselections``, the "calc group" of ``gmx rms``) are taken
after the fit on the fit group, without fitting them again.

For the fit, only the RMSD is computed, never rotated coordinates: with the reference Y
centred, the frame X centred on its weighted centre c, weights w (sum N) and the weighted
covariance M = sum_i w_i y_i (x_i - c)^T,

    N * RMSD^2 = sum_i w_i |x_i - c|^2 + sum_i w_i |y_i|^2 - 2 (s1 + s2 + d s3)

where s1 >= s2 >= s3 are the singular values of M and d = sign(det M) (d = -1 means the
best orthogonal fit would be a reflection, which is not a rotation: Kabsch's correction).
This is the minimum QCP (MDAnalysis's ``qcprot``) finds as the largest eigenvalue of its 4x4
key matrix.

Frames are not centred explicitly: M = sum_i w_i y_i x_i^T - (sum_i w_i y_i) c^T and
sum_i w_i |x_i - c|^2 = sum_i w_i |x_i|^2 - N |c|^2, so a block of frames costs a few matrix
products (about 4x faster than centring copies of every frame).
"""

import numpy as np


def centred(coordinates, weights=None):
    """Coordinates minus their (weighted) centre, as float64 (last two axes: atoms, xyz)."""
    coordinates = np.asarray(coordinates, dtype=np.float64)
    if weights is None:
        return coordinates - coordinates.mean(axis=-2, keepdims=True)
    weights = np.asarray(weights, dtype=np.float64)
    centre = np.tensordot(weights, coordinates, axes=(0, -2)) / weights.sum()
    return coordinates - np.expand_dims(centre, -2)


def normalised_weights(weights, n_atoms):
    """*weights* as float64 divided by their mean (MDAnalysis's convention), or ones."""
    if weights is None:
        return np.ones(n_atoms)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (n_atoms,) or not np.all(weights > 0):
        raise ValueError(f"weights must be {n_atoms} positive numbers")
    return weights / weights.mean()


def _check(frames, reference):
    frames = np.asarray(frames)
    reference = np.asarray(reference)
    if frames.ndim != 3 or frames.shape[1:] != reference.shape or reference.shape[0] == 0:
        raise ValueError(f"frames {frames.shape} and reference {reference.shape} do not match")
    return frames.astype(np.float64, copy=False), reference


def _covariance(frames, reference, weights):
    """Weighted centres (k, 3), covariances M (k, 3, 3) and centred squares (k,) of *frames*
    (*weights* None: all ones, without multiplying by them)."""
    n_atoms = reference.shape[0]
    flat = frames.reshape(len(frames), 3 * n_atoms)
    if weights is None:
        sums = np.matmul(np.ones(n_atoms), frames)  # (k, 3): N * centre
        covariance = np.matmul(reference.T, frames)  # (3, n) @ (k, n, 3): M, the reference being centred
        squares = np.einsum("ij,ij->i", flat, flat)
    else:
        sums = np.matmul(weights, frames)
        covariance = np.matmul((reference * weights[:, None]).T, frames)
        scaled = flat * np.repeat(np.sqrt(weights), 3)
        squares = np.einsum("ij,ij->i", scaled, scaled)
    centres = sums / n_atoms
    # the reference is centred on its own weighted centre, which may differ from this one
    offset = reference.sum(axis=0) if weights is None else weights @ reference
    if np.any(offset):
        covariance -= np.einsum("i,kj->kij", offset, centres)
    squares -= np.einsum("ij,ij->i", sums, sums) / n_atoms
    return centres, covariance, squares


def rmsd_to_reference(frames, reference, weights=None):
    """RMSD of each frame to *reference* after centring and optimal rotation.

    Parameters
    ----------
    frames : array_like, shape (k, n, 3)
        Any float type; arithmetic is float64.
    reference : array_like, shape (n, 3)
        Centred here (on its weighted centre when *weights* are given).
    weights : array_like, shape (n,), optional
        Per-atom weights (masses for MDAnalysis's ``weights="mass"``); divided by their mean.

    Returns
    -------
    numpy.ndarray, shape (k,)
        In the units of the coordinates.

    Raises
    ------
    ValueError
        If the shapes do not match, there are no atoms or a weight is not positive.
    """
    frames, reference = _check(frames, reference)
    if weights is None:
        return fit_rmsd(frames, centred(reference), None)
    weights = normalised_weights(weights, reference.shape[0])
    return fit_rmsd(frames, centred(reference, weights), weights)


def fit_rmsd(frames, reference, weights, rotations=False):
    """RMSD of *frames* to a reference that is already centred (the kernel of :func:`rmsd_to_reference`).

    Parameters
    ----------
    frames : numpy.ndarray, shape (k, n, 3)
    reference : numpy.ndarray, shape (n, 3), float64
        Centred on its own weighted centre (the reference weights may differ from *weights*,
        as in MDAnalysis when the reference structure's masses differ from the trajectory's).
    weights : numpy.ndarray, shape (n,), or None
        Normalised weights of the trajectory's atoms (mean 1); None: unweighted.
    rotations : bool
        Also return, per frame, the weighted centre (k, 3) and the rotation R (k, 3, 3) that
        superposes the centred frame on the reference as ``(x - centre) @ R``.

    Returns
    -------
    numpy.ndarray, shape (k,), or (rmsd, centres, R) with *rotations*
    """
    n_atoms = reference.shape[0]
    frames = np.asarray(frames).astype(np.float64, copy=False)  # float32 squares would lose 1e-4 A
    centres, covariance, squares = _covariance(frames, reference, weights)
    reference_squares = float(np.einsum("ij,ij->", reference, reference) if weights is None
                              else np.einsum("ij,ij,i->", reference, reference, weights))
    determinant_sign = np.where(np.linalg.det(covariance) < 0.0, -1.0, 1.0)
    if rotations:
        u, singular, vt = np.linalg.svd(covariance)
    else:
        singular = np.linalg.svd(covariance, compute_uv=False)
    singular[:, 2] *= determinant_sign
    squared = (squares + reference_squares - 2.0 * singular.sum(axis=1)) / n_atoms
    values = np.sqrt(np.maximum(squared, 0.0))
    if not rotations:
        return values
    # covariance = sum w y x^T = U S V^T: the rotation taking x onto y is U D V^T (D fixes the
    # reflection); applied to row vectors, x @ (U D V^T)^T = x @ V D U^T
    vt[:, 2, :] *= determinant_sign[:, None]
    rotation = np.matmul(np.swapaxes(vt, 1, 2), np.swapaxes(u, 1, 2))
    return values, centres, rotation


def group_rmsd(frames, reference, weights, centres, rotation):
    """RMSD of a group after the fit of another: MDAnalysis's ``groupselections`` RMSD.

    Parameters
    ----------
    frames : numpy.ndarray, shape (k, m, 3)
        The group's atoms in each frame.
    reference : numpy.ndarray, shape (m, 3), float64
        The group's reference positions minus the fit group's reference centre.
    weights : numpy.ndarray, shape (m,)
        The group's normalised weights (mean 1).
    centres, rotation : from :func:`fit_rmsd` with ``rotations=True``

    Returns
    -------
    numpy.ndarray, shape (k,)
        sqrt(sum_i w_i |(x_i - c) R - y_i|^2 / m): no further superposition.
    """
    moved = np.matmul(np.asarray(frames, np.float64) - centres[:, None, :], rotation)
    moved -= reference
    squared = np.einsum("kij,kij,i->k", moved, moved, weights) / reference.shape[0]
    return np.sqrt(squared)

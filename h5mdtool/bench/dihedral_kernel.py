"""Batched dihedral angles and their (cos, sin) features, in numpy (no per-frame Python loop).

The dihedral of atoms a, b, c, d is the angle between the planes (a, b, c) and (b, c, d),
with MDAnalysis's sign convention (``MDAnalysis.lib.distances.calc_dihedrals``): with bond
vectors b1 = b - a, b2 = c - b, b3 = d - c and the normals n1 = b1 x b2, n2 = b2 x b3,

    angle = atan2((n1 x n2) . b2 / |b2|, n1 . n2)    in (-pi, pi].

Positions are used as they are (no minimum image): molecules must be whole, as they are in
trajectories written for analysis. MDAnalysis's ``Dihedral`` and ``Ramachandran`` apply the
minimum image when the frame has a box, which changes nothing for a whole molecule.

The features are those of dihedral featurization (Khoshlessan et al., guidelines draft,
Algorithm 2): each angle theta as the pair (cos theta, sin theta), in the order of the angles.
"""

import numpy as np


def dihedral_angles(positions, quads):
    """Dihedral angles of every frame.

    Parameters
    ----------
    positions : array_like, shape (k, n, 3)
        Any float type and length unit (angles do not depend on it); arithmetic is float64.
    quads : array_like of int, shape (m, 4)
        The four atoms (columns of *positions*) of each dihedral.

    Returns
    -------
    numpy.ndarray, shape (k, m)
        Radians in (-pi, pi].
    """
    positions = np.asarray(positions, np.float64)
    quads = np.asarray(quads, np.intp)
    a, b, c, d = (positions[:, quads[:, column]] for column in range(4))
    b1, b2, b3 = b - a, c - b, d - c
    n1, n2 = np.cross(b1, b2), np.cross(b2, b3)
    x = np.einsum("kmi,kmi->km", n1, n2)
    y = np.einsum("kmi,kmi->km", np.cross(n1, n2), b2) / np.linalg.norm(b2, axis=-1)
    return np.arctan2(y, x)


def sincos_features(angles):
    """Each angle as (cos, sin): ``[cos a0, sin a0, cos a1, sin a1, ...]`` per frame.

    Parameters
    ----------
    angles : array_like, shape (k, m)
        Radians.

    Returns
    -------
    numpy.ndarray, shape (k, 2 m)
    """
    angles = np.asarray(angles, np.float64)
    features = np.empty(angles.shape[:-1] + (2 * angles.shape[-1],))
    features[..., 0::2] = np.cos(angles)
    features[..., 1::2] = np.sin(angles)
    return features

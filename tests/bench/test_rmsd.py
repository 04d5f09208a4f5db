"""The batched RMSD kernel against MDAnalysis's QCP (``MDAnalysis.analysis.rms.rmsd``) and
against an explicit superposition (rotate the frame with Kabsch's matrix, then measure).

MDAnalysis's QCP stops its Newton iteration at a tolerance: on degenerate (collinear)
structures it differs from the exact minimum by about 2e-6 Angstrom, so comparisons with it
use 1e-5 there; the explicit superposition agrees to 1e-9.
"""

import warnings

import numpy as np
import pytest

from h5mdtool.bench.engines import block_edges
from h5mdtool.bench.rmsd import centred, rmsd_to_reference


def mdanalysis(frames, reference):
    from MDAnalysis.analysis.rms import rmsd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([rmsd(np.asarray(f, np.float64), np.asarray(reference, np.float64), center=True, superposition=True)
                         for f in frames])


def explicit(frames, reference):
    """RMSD after rotating each centred frame onto the centred reference (Kabsch)."""
    reference = reference - reference.mean(axis=0)
    values = []
    for frame in np.asarray(frames, np.float64):
        frame = frame - frame.mean(axis=0)
        u, _, vt = np.linalg.svd(frame.T @ reference)
        d = np.sign(np.linalg.det(u @ vt)) or 1.0
        best = u @ np.diag([1.0, 1.0, d]) @ vt
        values.append(np.sqrt(((frame @ best - reference) ** 2).sum() / len(reference)))
    return np.array(values)


def rotation(rng):
    q = rng.normal(size=4)
    a, b, c, d = q / np.linalg.norm(q)
    return np.array([
        [a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)],
        [2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b)],
        [2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d],
    ])


@pytest.mark.parametrize("n_atoms", [1, 2, 3, 5, 214])
def test_random_frames_equal_qcp(n_atoms):
    rng = np.random.default_rng(n_atoms)
    reference = rng.normal(scale=10.0, size=(n_atoms, 3))
    frames = np.stack([
        (reference + rng.normal(scale=s, size=reference.shape)) @ rotation(rng).T + rng.normal(scale=30, size=3)
        for s in np.linspace(0.0, 20.0, 40)
    ])
    values = rmsd_to_reference(frames, reference)
    np.testing.assert_allclose(values[1:], explicit(frames, reference)[1:], rtol=0, atol=1e-9)
    if n_atoms == 1:  # a centred atom sits at the origin: 0 (MDAnalysis's QCP gives NaN)
        assert not values.any()
        return
    # two atoms are collinear: QCP's Newton tolerance shows (up to 4e-4 measured)
    tolerance = 1e-6 if n_atoms >= 3 else 1e-3
    np.testing.assert_allclose(values[1:], mdanalysis(frames, reference)[1:], rtol=0, atol=tolerance)
    assert values[0] < 1e-5  # a rotated copy: the square root of rounding noise


def test_rotated_and_translated_copy_is_zero_and_reflection_is_not():
    rng = np.random.default_rng(1)
    reference = rng.normal(scale=5.0, size=(100, 3))
    moved = reference @ rotation(rng).T + [40.0, -25.0, 60.0]
    mirrored = reference * [1, 1, -1]  # a reflection is not a rotation: no perfect fit
    values = rmsd_to_reference(np.stack([moved, mirrored]), reference)
    assert values[0] == pytest.approx(0.0, abs=1e-5)  # sqrt of rounding noise
    assert values[1] > 1.0
    assert values[1] == pytest.approx(mdanalysis(mirrored[None], reference)[0], abs=1e-6)


def test_planar_and_collinear_structures():
    rng = np.random.default_rng(2)
    planar = np.c_[rng.normal(size=(30, 2)), np.zeros(30)]
    line = np.outer(np.arange(10.0), [1.0, 2.0, 3.0])
    for reference in (planar, line):
        frames = np.stack([reference @ rotation(rng).T + rng.normal(scale=0.3, size=reference.shape) for _ in range(8)])
        values = rmsd_to_reference(frames, reference)
        np.testing.assert_allclose(values, explicit(frames, reference), rtol=0, atol=1e-9)
        np.testing.assert_allclose(values, mdanalysis(frames, reference), rtol=0, atol=1e-5)


def test_float32_frames_far_from_origin():
    """Coordinates like a large box's (hundreds of Angstrom) keep float64 accuracy."""
    rng = np.random.default_rng(3)
    reference = rng.normal(scale=15.0, size=(214, 3)) + 500.0
    frames = (reference + rng.normal(scale=1.0, size=(64, 214, 3)) + 300.0).astype(np.float32)
    np.testing.assert_allclose(rmsd_to_reference(frames, reference), mdanalysis(frames, reference), rtol=0, atol=1e-6)


def test_equal_to_mdanalysis_on_adk(adk):
    import MDAnalysis as mda

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(*adk)
    ca = u.select_atoms("name CA")
    frames = np.array([ca.positions.copy() for _ in u.trajectory])
    values = rmsd_to_reference(frames, frames[0])
    np.testing.assert_allclose(values[1:], mdanalysis(frames, frames[0])[1:], rtol=0, atol=1e-6)
    assert values[0] < 1e-5 and values.max() > 1.0


def test_shapes():
    assert rmsd_to_reference(np.empty((0, 4, 3)), np.zeros((4, 3))).shape == (0,)
    with pytest.raises(ValueError):
        rmsd_to_reference(np.zeros((2, 4, 3)), np.zeros((5, 3)))
    with pytest.raises(ValueError):
        rmsd_to_reference(np.zeros((4, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError):
        rmsd_to_reference(np.zeros((1, 0, 3)), np.zeros((0, 3)))
    np.testing.assert_allclose(centred([[0.0, 0, 0], [2, 4, 6]]), [[-1, -2, -3], [1, 2, 3]])


@pytest.mark.parametrize("start,stop,block,chunk", [
    (0, 100, 7, 1), (13, 100, 7, 1), (5, 5, 10, 1), (0, 9800, 1024, 1),
    (13, 100, 10, 4), (13, 100, 3, 4), (0, 64, 64, 64), (3, 200, 1024, 100), (30, 31, 8, 4), (3, 200, 10, 64),
])
def test_block_edges_tile_the_range(start, stop, block, chunk):
    edges = block_edges(start, stop, block, chunk)
    flat = [frame for a, b in edges for frame in range(a, b)]
    assert flat == list(range(start, stop))
    assert all(b - a <= max(block, chunk) for a, b in edges)
    if chunk > 1:
        assert all(b % chunk == 0 for a, b in edges[:-1])  # blocks end on chunk boundaries
        assert all((b - a) % chunk == 0 for a, b in edges[1:-1])
    else:
        assert all(b - a == block for a, b in edges[:-1])


def explicit_weighted(frames, fit, reference, weights, groups=()):
    """Weighted Kabsch fit of atoms *fit*, done the long way; then each group's RMSD without refitting."""
    w = np.asarray(weights, np.float64) / np.mean(weights)
    y_centre = w @ reference / w.sum()
    y = reference - y_centre
    fits, group_values = [], [[] for _ in groups]
    for frame in np.asarray(frames, np.float64):
        x_centre = w @ frame[fit] / w.sum()
        x = frame[fit] - x_centre
        u, _, vt = np.linalg.svd((x * w[:, None]).T @ y)
        d = np.sign(np.linalg.det(u @ vt)) or 1.0
        rotation = u @ np.diag([1.0, 1.0, d]) @ vt
        fits.append(np.sqrt((w[:, None] * (x @ rotation - y) ** 2).sum() / len(y)))
        for values, (group_frames_index, group_reference, group_weights) in zip(group_values, groups):
            moved = (frame[group_frames_index] - x_centre) @ rotation
            gw = np.asarray(group_weights, np.float64) / np.mean(group_weights)
            values.append(np.sqrt((gw[:, None] * (moved - (group_reference - y_centre)) ** 2).sum() / len(gw)))
    return np.array(fits), [np.array(v) for v in group_values]


def test_weighted_fit_and_groups_equal_explicit_superposition():
    from h5mdtool.bench.rmsd import fit_rmsd, group_rmsd, normalised_weights

    rng = np.random.default_rng(7)
    n = 60
    reference = rng.normal(scale=8.0, size=(n, 3))
    masses = rng.choice([1.008, 12.011, 14.007, 15.999, 32.06], size=n)
    frames = np.stack([(reference + rng.normal(scale=s, size=reference.shape)) @ rotation(rng).T + rng.normal(size=3) * 20
                       for s in np.linspace(0.1, 3.0, 12)]).astype(np.float32)
    fit = np.arange(0, 40)
    group = np.arange(25, 60)  # overlaps the fit atoms and goes beyond them
    expected_fit, (expected_group,) = explicit_weighted(frames, fit, reference[fit], masses[fit],
                                                        [(group, reference[group], masses[group])])
    w = normalised_weights(masses[fit], len(fit))
    centred_reference = centred(reference[fit], w)
    centre = w @ reference[fit] / w.sum()
    values, centres, rotations = fit_rmsd(frames[:, fit], centred_reference, w, rotations=True)
    np.testing.assert_allclose(values, expected_fit, rtol=0, atol=1e-9)
    np.testing.assert_allclose(fit_rmsd(frames[:, fit], centred_reference, w), expected_fit, rtol=0, atol=1e-9)
    groups = group_rmsd(frames[:, group], reference[group] - centre,
                        normalised_weights(masses[group], len(group)), centres, rotations)
    np.testing.assert_allclose(groups, expected_group, rtol=0, atol=1e-9)
    assert np.allclose(np.linalg.det(rotations), 1.0)


def test_weighted_fit_equals_mdanalysis_qcp():
    from MDAnalysis.analysis.rms import rmsd

    rng = np.random.default_rng(8)
    reference = rng.normal(scale=6.0, size=(80, 3))
    masses = rng.uniform(1.0, 32.0, size=80)
    frames = np.stack([reference @ rotation(rng).T + rng.normal(scale=1.5, size=reference.shape) for _ in range(10)])
    expected = [rmsd(f, reference, weights=masses, center=True, superposition=True) for f in frames]
    np.testing.assert_allclose(rmsd_to_reference(frames, reference, masses), expected, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="positive"):
        rmsd_to_reference(frames, reference, np.zeros(80))

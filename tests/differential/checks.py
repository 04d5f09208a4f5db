"""Checks of one output against the oracle's :class:`~.oracle.Frames`.

Every check returns :class:`Failure` objects. A failure's ``kind`` is a short stable id
(``positions-zeros``, ``box-dropped``, ...): failures are grouped by it in reports and
matched by it against the known-failure list (:mod:`.known`); the message says what and
where (first frame, atom, values).

Guarantees, per output (tests/differential/README in docs/testing.md):
positions bit-exact when the source holds float32 nm (XTC, TRR, H5MD in nm), within 1 ulp
of float32 when a unit is converted (DCD, H5MD in Angstrom or pm), within PRECISION/2 plus
float32 rounding with ``--precision``; velocities and forces the same, and never lossy;
box equal at the positions' frames (1e-6 of the largest edge when converted); step equal; time equal (1e-12
relative when converted); nothing the source has dropped without the command saying so.
"""

import glob
import os
import warnings
from dataclasses import dataclass

import numpy as np

#: Relative box tolerance where a unit or angle conversion is involved (DCD).
BOX_RELATIVE = 1e-6
TIME_RELATIVE = 1e-12
TEMPORARY_PATTERN = ".*.h5mdtool-*.tmp"


@dataclass
class Failure:
    kind: str
    message: str

    def __str__(self):
        return f"[{self.kind}] {self.message}"


def leftover_temporaries(*directories):
    """Failures for temporaries h5mdtool left in *directories*."""
    left = []
    for directory in directories:
        left += glob.glob(os.path.join(directory, TEMPORARY_PATTERN))
    if left:
        return [Failure("temporary-left", f"left behind: {', '.join(sorted(os.path.basename(p) for p in left))}")]
    return []


def _where(bad):
    index = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return tuple(int(i) for i in index)


def compare_values(name, out, out_factor, expected, exact, precision=None, extra_ulps=0):
    """Compare float32 output values (in h5mdtool units after *out_factor*) with the oracle.

    Returns a Failure or None.
    """
    if out.shape != expected.shape:
        return Failure(f"{name}-shape", f"{name}: shape {out.shape}, expected {expected.shape}")
    if out.size == 0:
        return None
    stored = out.astype(np.float64) * out_factor
    reference32 = expected.astype(np.float32)
    if exact and out_factor == 1.0 and precision is None:
        bad = ~((out == reference32) | (np.isnan(out) & np.isnan(reference32)))
        bound = np.zeros_like(expected)
    else:
        ulp = np.spacing(np.abs(reference32)).astype(np.float64)
        ulps = (0 if exact else 1) + (1 if out_factor != 1.0 else 0) + extra_ulps
        bound = ulps * ulp
        if precision is not None:
            bound = bound + precision / 2.0 + 2 * ulp
        bad = np.abs(stored - expected) > bound
    if not bad.any():
        return None
    frame, atom, axis = _where(bad)[:3] if bad.ndim == 3 else (_where(bad) + (0, 0))[:3]
    got, want = stored[frame, atom, axis], expected[frame, atom, axis]
    count = int(bad.sum())
    if not np.any(out) and np.any(expected):
        kind = f"{name}-zeros"
        detail = "every stored value is zero"
    elif precision is not None:
        kind = f"{name}-beyond-precision"
        detail = f"error {abs(got - want):.3g} nm > precision/2 = {precision / 2:.3g}"
    else:
        kind = f"{name}-differ"
        detail = f"error {abs(got - want):.3g}, allowed {bound[frame, atom, axis]:.3g}"
    return Failure(kind, f"{name}: {count} of {out.size} values wrong; first at frame {frame}, atom {atom}, "
                         f"axis {axis}: {got!r} instead of {want!r} ({detail})")


def _summary_mentions(summary, word):
    """True when the command's summary carries a warning that mentions *word*."""
    if not isinstance(summary, dict):
        return False
    for key in ("warnings", "dropped", "notes"):
        value = summary.get(key)
        if value and word in str(value).lower():
            return True
    return False


def check_frames(document, expected, *, precision=None, want_velocities=True, want_forces=True, summary=None,
                 label="output", velocity_precision=None):
    """Failures of an output (as read by :func:`.h5md_output.read_output`) against *expected*."""
    failures = []
    position = document["position"]
    if position is None:
        return [Failure("positions-missing", f"{label}: no position element")]
    mask = expected.positions.mask
    want_steps = expected.steps[mask]
    n_out = position["raw"].shape[0]
    if n_out != len(want_steps):
        failures.append(Failure("frames-count", f"{label}: {n_out} frames, expected {len(want_steps)}"))
        return failures
    if position["raw"].shape[1] != expected.n_atoms:
        failures.append(Failure("atoms-count", f"{label}: {position['raw'].shape[1]} atoms, expected {expected.n_atoms}"))
        return failures
    failures += _check_series(label, "position", position, want_steps,
                              None if expected.times is None else expected.times[mask], expected.time_exact)
    failure = compare_values("positions", position["raw"], position["factor"], expected.positions.values[mask],
                             expected.positions.exact, precision)
    if failure:
        failures.append(failure)
    for name, element, wanted in (("velocities", "velocity", want_velocities), ("forces", "force", want_forces)):
        failures += _check_field(label, name, element, document.get(element), getattr(expected, name), expected,
                                 wanted, summary, velocity_precision if name == "velocities" else None)
    failures += _check_box(label, document, expected)
    return failures


def _check_series(label, element, data, want_steps, want_times, time_exact):
    failures = []
    steps = data["steps"]
    if steps is None:
        return [Failure("step-missing", f"{label}: {element} has no step")]
    if len(steps) != len(want_steps) or np.any(steps != want_steps):
        bad = np.flatnonzero(steps != want_steps) if len(steps) == len(want_steps) else [0]
        first = int(bad[0])
        failures.append(Failure("step-differ", f"{label}: {element} step differs at frame {first}: "
                                               f"{steps[first] if first < len(steps) else None} instead of {want_steps[first]}"))
    times = data["times"]
    if want_times is None:
        if times is not None:
            failures.append(Failure("time-invented", f"{label}: {element} has time {times[:3].tolist()}... but the source has none"))
    elif times is None:
        failures.append(Failure("time-missing", f"{label}: {element} has no time"))
    elif len(times) == len(want_times):
        if time_exact:
            bad = times != want_times
        else:
            bad = np.abs(times - want_times) > TIME_RELATIVE * np.abs(want_times) + 1e-12
        if np.any(bad):
            first = int(np.flatnonzero(bad)[0])
            failures.append(Failure("time-differ", f"{label}: {element} time differs at frame {first}: "
                                                   f"{times[first]!r} instead of {want_times[first]!r}"))
    return failures


def _check_field(label, name, element, data, field, expected, wanted, summary, precision=None):
    """Velocities or forces: written where the source has them, exactly (within *precision* / 2
    for lossy velocities), at their steps."""
    has = field is not None and bool(field.mask.any())
    if not has:
        if data is not None:
            return [Failure(f"{name}-invented", f"{label}: {element} written but the source has no {name}")]
        return []
    if not wanted:
        return []
    if data is None:
        if _summary_mentions(summary, element[:7]):
            return []
        partial = "" if field.mask.all() else f" ({int(field.mask.sum())} of {len(field.mask)} frames have them)"
        return [Failure(f"{name}-dropped", f"{label}: the source has {name}{partial} but the output has none and the summary says nothing")]
    want_steps = expected.steps[field.mask]
    failures = _check_series(label, element, data, want_steps,
                             None if expected.times is None else expected.times[field.mask], expected.time_exact)
    if data["raw"].shape[0] != len(want_steps):
        return failures + [Failure(f"{name}-frames", f"{label}: {element} has {data['raw'].shape[0]} frames, the source has "
                                                     f"{name} in {len(want_steps)} of the selected frames")]
    failure = compare_values(name, data["raw"], data["factor"], field.values[field.mask], field.exact, precision)
    return failures + ([failure] if failure else [])


def _check_box(label, document, expected):
    """The box, stored with the positions: at the frames that hold positions."""
    boundary = document["boundary"]
    edges = document["edges"]
    if expected.edges is not None:
        expected = expected.take(np.flatnonzero(expected.positions.mask))
    if not expected.has_box:
        periodic = [b for b in boundary if b == "periodic"]
        if periodic and edges is not None and np.any(edges):
            return [Failure("box-invented", f"{label}: periodic box {boundary} but the source has none")]
        return []
    want_boundary = ["periodic" if b else "none" for b in expected.boundary]
    failures = []
    if boundary != want_boundary:
        kind = "box-dropped" if all(b == "none" for b in boundary) else "box-boundary"
        failures.append(Failure(kind, f"{label}: boundary {boundary}, the source's is {want_boundary}"))
    if edges is None:
        if not failures:
            failures.append(Failure("box-dropped", f"{label}: no box/edges, the source has a box"))
        return failures
    if edges.shape != expected.edges.shape:
        return failures + [Failure("box-shape", f"{label}: box edges {edges.shape}, expected {expected.edges.shape}")]
    mask = expected.box_mask
    want = expected.edges
    if expected.box_exact and document.get("edges_factor", 1.0) == 1.0:
        bad = edges.astype(np.float32) != want.astype(np.float32)
        bad = bad | (edges != edges.astype(np.float32).astype(np.float64))
    else:
        scale = np.abs(want).reshape(len(want), -1).max(axis=1).reshape(-1, 1, 1)
        bad = np.abs(edges - want) > BOX_RELATIVE * scale + 1e-12
    bad[~mask] = edges[~mask] != 0
    if bad.any():
        frame = int(np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1))[0])
        what = "box-invented" if not mask[frame] else "box-differ"
        failures.append(Failure(what, f"{label}: box of frame {frame} is {edges[frame].tolist()}, "
                                      f"expected {want[frame].tolist() if mask[frame] else 'none (zeros)'}"))
    return failures


def check_mdanalysis_readback(path, topology, expected, precision=None):
    """The output opens with ``MDAnalysis.Universe(topology, path)`` and gives the same frames."""
    import MDAnalysis
    from MDAnalysis.lib.mdamath import triclinic_box

    if not expected.positions.mask.all():
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            universe = MDAnalysis.Universe(topology, path)
            n = universe.trajectory.n_frames
            if n != expected.n_frames:
                return [Failure("mdanalysis-frames", f"MDAnalysis reads {n} frames, expected {expected.n_frames}")]
            tolerance = 10.0 * (precision / 2 if precision else 0.0)
            for ts in universe.trajectory:
                i = ts.frame
                want = expected.positions.values[i] * 10.0
                limit = tolerance + 4 * np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) + 1e-30
                if np.any(np.abs(ts.positions.astype(np.float64) - want) > limit):
                    return [Failure("mdanalysis-positions", f"MDAnalysis reads other positions at frame {i}")]
                if expected.times is not None and abs(ts.time - expected.times[i]) > 1e-9 * max(1.0, abs(expected.times[i])):
                    return [Failure("mdanalysis-time", f"MDAnalysis reads time {ts.time} at frame {i}, expected {expected.times[i]}")]
                if expected.has_box and expected.box_mask[i] and all(expected.boundary):
                    want_box = triclinic_box(*(expected.edges[i] * 10.0))
                    if ts.dimensions is None or np.any(np.abs(ts.dimensions - want_box) > 1e-4 * np.maximum(1.0, np.abs(want_box))):
                        return [Failure("mdanalysis-box", f"MDAnalysis reads box {None if ts.dimensions is None else ts.dimensions.tolist()} "
                                                          f"at frame {i}, expected {want_box.tolist()}")]
    except Exception as error:  # noqa: BLE001 - any failure to read is the finding
        return [Failure("mdanalysis-unreadable", f"MDAnalysis.Universe(topology, output) fails: {type(error).__name__}: {str(error)[:200]}")]
    return []


#: Atom attributes the stored topology must give as MDAnalysis reads them from the topology file.
TOPOLOGY_ATTRIBUTES = ("names", "types", "elements", "resnames", "resids", "segids", "chainIDs")


def check_stored_topology(path, topology, atoms=None):
    """The topology ``convert --topology`` stored in *path*, read by h5mdtool's MDAnalysis
    parser, gives the *atoms* (indices; all when None) of *topology* as MDAnalysis reads
    them: every attribute of :data:`TOPOLOGY_ATTRIBUTES` the topology file has."""
    import MDAnalysis

    import h5mdtool.mdanalysis as h5mda

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = MDAnalysis.Universe(topology).atoms
            theirs = theirs if atoms is None else theirs[np.asarray(atoms)]
            ours = h5mda.Universe(path).atoms
            if len(ours) != len(theirs):
                return [Failure("topology-atoms", f"the stored topology has {len(ours)} atoms, expected {len(theirs)}")]
            for name in TOPOLOGY_ATTRIBUTES:
                if not hasattr(theirs, name):
                    continue
                if not hasattr(ours, name):
                    return [Failure("topology-attribute", f"the stored topology has no {name}")]
                if not np.array_equal(np.asarray(getattr(ours, name)), np.asarray(getattr(theirs, name))):
                    return [Failure("topology-attribute", f"the stored topology's {name} differ from the topology file's")]
    except Exception as error:  # noqa: BLE001 - any failure to read is the finding
        return [Failure("topology-unreadable", f"h5mdtool.mdanalysis.Universe(output) fails: {type(error).__name__}: "
                                               f"{str(error)[:200]}")]
    return []


def check_reader_readback(path, expected, precision=None, want_velocities=True, want_forces=True, label="output"):
    """h5mdtool's own MDAnalysis reader (``h5mdtool.mdanalysis``, format H5MDTOOL) gives the
    oracle's frames: at every frame holding positions, the positions (Angstrom), the
    velocities and forces where the source has them (and only there), step, time and box."""
    import h5mdtool.mdanalysis
    from MDAnalysis.lib.mdamath import triclinic_box

    mask = expected.positions.mask
    if not mask.any():
        return []
    frames = np.flatnonzero(mask)
    try:
        reader = h5mdtool.mdanalysis.H5MDToolReader(path, block_bytes=1 << 16)  # blocks of a few frames
    except Exception as error:  # noqa: BLE001 - any failure to open is the finding
        return [Failure("reader-unreadable", f"{label}: h5mdtool.mdanalysis cannot open it: {type(error).__name__}: "
                                             f"{str(error)[:200]}")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read = [ts.frame for ts in reader if ts.has_positions]
            if len(read) != len(frames):
                return [Failure("reader-frames", f"{label}: the H5MDTOOL reader reads {len(read)} frames with positions, "
                                                 f"expected {len(frames)}")]
            tolerance = 10.0 * (precision / 2 if precision else 0.0)
            fields = [("velocities", expected.velocities, want_velocities), ("forces", expected.forces, want_forces)]
            order = list(range(len(frames)))
            order += order[::-1][:3]  # random access after iterating: back to the last frames
            for number in order:
                ts = reader[read[number]]
                i = frames[number]
                want = expected.positions.values[i] * 10.0
                limit = tolerance + 4 * np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) + 1e-30
                if np.any(np.abs(ts.positions.astype(np.float64) - want) > limit):
                    return [Failure("reader-positions", f"{label}: the H5MDTOOL reader reads other positions at frame {i}")]
                if ts.data["step"] != expected.steps[i]:
                    return [Failure("reader-step", f"{label}: step {ts.data['step']} at frame {i}, expected {expected.steps[i]}")]
                if expected.times is not None and abs(ts.time - expected.times[i]) > 1e-9 * max(1.0, abs(expected.times[i])):
                    return [Failure("reader-time", f"{label}: time {ts.time} at frame {i}, expected {expected.times[i]}")]
                for name, field, wanted in fields:
                    has = wanted and field is not None and bool(field.mask[i])
                    if getattr(ts, f"has_{name}") != has:
                        return [Failure(f"reader-{name}", f"{label}: has_{name} is {not has} at frame {i}")]
                    if has:
                        value = field.values[i] * (10.0 if name == "velocities" else 0.1)
                        bound = 4 * np.spacing(np.abs(value).astype(np.float32)).astype(np.float64) + 1e-30
                        if np.any(np.abs(getattr(ts, name).astype(np.float64) - value) > bound):
                            return [Failure(f"reader-{name}", f"{label}: other {name} at frame {i}")]
                if expected.has_box and expected.box_mask[i] and all(expected.boundary):
                    want_box = triclinic_box(*(expected.edges[i] * 10.0))
                    if ts.dimensions is None or np.any(np.abs(ts.dimensions - want_box) > 1e-4 * np.maximum(1.0, np.abs(want_box))):
                        return [Failure("reader-box", f"{label}: box {None if ts.dimensions is None else ts.dimensions.tolist()} "
                                                      f"at frame {i}, expected {want_box.tolist()}")]
    except Exception as error:  # noqa: BLE001 - any failure to read is the finding
        return [Failure("reader-unreadable", f"{label}: the H5MDTOOL reader fails: {type(error).__name__}: {str(error)[:200]}")]
    finally:
        reader.close()
    return []


def _far_outside_the_box(expected, lengths=99.0):
    """Some frame of *expected* has all its atoms about 100 box lengths beyond one face of its
    periodic box (validate's DATA003; generated coordinates can be that far from a small box)."""
    if not expected.has_box or not all(expected.boundary):
        return False
    for frame in np.flatnonzero(expected.positions.mask & expected.box_mask):
        box = expected.edges[frame]
        if abs(np.linalg.det(box)) == 0:
            continue
        fractional = expected.positions.values[frame] @ np.linalg.inv(box)
        if np.any(fractional.min(axis=0) > lengths) or np.any(fractional.max(axis=0) < -lengths):
            return True
    return False


def expected_errors(expected, want_velocities=True, want_forces=True, precision=None):
    """validate's rules an exact output of *expected* must break: those of files MDAnalysis's
    H5MDReader cannot read (a velocity or force element with steps of its own, held at other
    frames than the positions: MDA008; a trajectory without time: MDA003); DATA001 when
    the source itself holds frames whose positions are all 0.0 (validate cannot tell them
    from lost data), or, with a lossy *precision* (nm), frames whose positions all lie
    within precision/2 of 0 (they may round to 0: make fuzz case 1633, seed 3993108589), and
    DATA003 when its atoms lie about 100 box lengths outside the box."""
    rules = []
    positions = expected.positions.mask
    values = expected.positions.values[positions]
    zero_bound = precision / 2.0 if isinstance(precision, (int, float)) else 0.0
    if expected.n_atoms > 1 and len(values) and np.any(np.all(np.abs(values) <= zero_bound, axis=(1, 2))):
        rules.append("DATA001")
    if _far_outside_the_box(expected):
        rules.append("DATA003")
    for name, wanted in (("velocities", want_velocities), ("forces", want_forces)):
        field = getattr(expected, name)
        if wanted and field is not None and field.mask.any() and not np.array_equal(field.mask, positions):
            rules.append("MDA008")
    if expected.times is None:
        rules.append("MDA003")
    return tuple(rules)


def check_validate(path, label="output", allowed=()):
    """The output passes ``h5mdtool validate``: no error but those of the *allowed* rules."""
    import h5mdtool

    try:
        report = h5mdtool.validate([path], progress=False)
    except Exception as error:  # noqa: BLE001
        return [Failure("validate-crash", f"h5mdtool validate {label}: {type(error).__name__}: {error}")]
    errors = [f"{f.rule} {f.path}: {f.message}" for r in report.files for f in r.findings
              if f.severity == "error" and f.rule not in allowed]
    if report.exit_code != 0 and (errors or report.exit_code != 1):
        return [Failure("validate-rejects-output", f"h5mdtool validate {label} exits {report.exit_code}: "
                                                  + "; ".join(errors[:3])[:400])]
    return []

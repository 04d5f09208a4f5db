"""The analysis ``bench rmsd`` runs, resolved once on rank 0: atoms, weights, reference, frames.

What MDAnalysis's ``rms.RMSD(u, select=..., groupselections=[...], weights=..., reference=...,
ref_frame=...).run(start, stop, step)`` and ``gmx rms`` (fit group, calc group, ``-mw``,
``-s``, ``-n``, ``-b/-e/-dt``) let a user choose, turned into numbers every rank can use
without MDAnalysis's selection machinery:

- the atoms of the fit group and of each further RMSD group, from MDAnalysis selections or
  GROMACS index groups (``-n``). Selections are evaluated on a Universe holding the
  reference frame's coordinates from the trajectory (with its box, for periodic distance
  selections such as ``around``), as MDAnalysis evaluates them on the trajectory's current
  frame; with ``--reference FILE``, the trajectory side is evaluated on its first frame
  (where a fresh MDAnalysis Universe stands) and the reference side on the file;
- the weights (none, or masses divided by their mean, MDAnalysis's convention);
- the reference coordinates, centred on the fit group's weighted centre (the reference
  frame read through the reading stack, :mod:`h5mdtool.formats`);
- the frames, by number (``--start/--stop/--step``) or by time (``-b/-e/--dt``).

The result, :class:`RmsdPlan`, is broadcast; rank 0 also reports how long each of its
steps took so its time can be charged to the right phases.
"""

import hashlib
import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..parallel.errors import InputError, UsageError
from .inputs import atom_count_error, frame_times

#: MDAnalysis's ``rms.RMSD(tol_mass=0.1)``: fit atoms whose masses differ more are refused.
MASS_TOLERANCE = 0.1


@dataclass
class AnalysisOptions:
    """What the user asked for (see ``h5mdtool bench rmsd --help``)."""

    select: str = "name CA"
    calc_select: tuple = ()
    index: str = None
    weights: str = None
    reference: str = None
    ref_frame: int = None
    start: int = None
    stop: int = None
    step: int = None
    begin: float = None
    end: float = None
    dt: float = None


@dataclass
class RmsdPlan:
    """The resolved analysis, the same on every rank.

    Attributes
    ----------
    read_indices : numpy.ndarray
        Atoms each rank reads (increasing): the fit group and every RMSD group.
    fit_columns : numpy.ndarray or None
        Positions of the fit atoms (trajectory side, in the fit order) in ``read_indices``;
        None when they are ``read_indices`` itself.
    group_columns : list of numpy.ndarray
    reference_fit : numpy.ndarray, (n, 3) float64
        Reference positions of the fit atoms (Angstrom) minus their weighted centre.
    reference_groups : list of numpy.ndarray
        Reference positions of each RMSD group minus the same centre.
    fit_weights : numpy.ndarray
        Normalised weights (mean 1) of the trajectory's fit atoms; ones when unweighted.
    group_weights : list of numpy.ndarray
    frames : numpy.ndarray
        The frame numbers analysed (increasing).
    labels : list of str
        The fit group's label, then each RMSD group's.
    description : dict
        For the report: resolved selections (atom counts and digests), weights, reference,
        frame range.
    """

    read_indices: np.ndarray
    fit_columns: np.ndarray
    group_columns: list
    reference_fit: np.ndarray
    reference_groups: list
    fit_weights: np.ndarray
    group_weights: list
    frames: np.ndarray
    labels: list
    weighted: bool
    description: dict = field(default_factory=dict)

    @property
    def n_values(self):
        """Values per frame after frame and time: the fit group's RMSD and each group's."""
        return 1 + len(self.group_columns)

    @property
    def root_frame(self):
        """The trajectory frame rank 0 read while planning (the reference, or frame 0 with a
        reference file)."""
        reference = self.description["reference"]
        return 0 if reference["kind"] == "file" else reference["frame"]


def digest(values):
    """Short SHA-256 of an integer array: two runs picked the same atoms or frames."""
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.int64).tobytes()).hexdigest()[:16]


def _universe(path, what):
    from ..h5md.topology import read_universe

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such {what} file")
    return read_universe(path, what)


def _pick(universe, key, index, source):
    """Atoms of *universe* named by *key*: an index group (by number or name) or a selection."""
    from ..formats.ndx import find_group

    if index is not None:
        path, groups = index
        group = find_group(groups, key, path)
        if group is not None:
            if len(group.indices) and group.indices.max() >= universe.atoms.n_atoms:
                raise InputError(f"{path}: group {group.number} ({group.name}) numbers atom "
                                 f"{group.indices.max() + 1} but {source} has {universe.atoms.n_atoms} atoms")
            if len(group.indices) == 0:
                raise InputError(f"{path}: group {group.number} ({group.name}) is empty")
            return universe.atoms[group.indices], f"{os.path.basename(path)}:{group.name}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            atoms = universe.select_atoms(key)
    except Exception as error:  # noqa: BLE001 - MDAnalysis raises many types here
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        if index is not None:
            names = ", ".join(f"{g.number} {g.name}" for g in index[1])
            raise InputError(f"{key!r} is neither a group of {index[0]} ({names}) nor a valid "
                             f"MDAnalysis selection ({reason})") from None
        raise InputError(f"invalid selection {key!r}: {reason}") from None
    if len(atoms) == 0:
        raise InputError(f"selection {key!r} matches no atom of {source}")
    return atoms, key


def _weights(atoms, weighted, what):
    if not weighted:
        return np.ones(len(atoms))
    masses = np.asarray(atoms.masses, np.float64)
    if not np.all(masses > 0):
        bad = atoms[int(np.flatnonzero(~(masses > 0))[0])]
        raise InputError(f"--weights mass: {what} atom {bad.index + 1} ({bad.name}) has mass {bad.mass}; "
                         "masses must be positive (the topology may lack them)")
    return masses


def select_frames(n_frames, options, times):
    """Frame numbers picked by ``--start/--stop/--step`` or by ``-b/-e/--dt`` (*times*: a
    callable returning every frame's time, called only for a time selection)."""
    from ..formats import select_frames as by_number
    from ..formats.frametimes import by_time, check_one_selection, select_by_time

    check_one_selection(options.start, options.stop, options.step, options.begin, options.end, options.dt)
    if by_time(options.begin, options.end, options.dt):
        return select_by_time(times(), options.begin, options.end, options.dt)
    frames = by_number(n_frames, options.start, options.stop, options.step)
    return np.arange(frames.start, frames.stop, frames.step)


def _frame_universe(universe, info, frame):
    """Put the trajectory's *frame* (with its box) into *universe*; returns seconds to open, read.

    The frame is read through the reading stack (:func:`h5mdtool.bench.frames.read_frame`), any
    format, the chosen H5MD particle group included, and handed to MDAnalysis's
    MemoryReader. Opening is finding the file holding the frame (a part of a split
    trajectory is scanned); every other input was scanned already.
    """
    from MDAnalysis.coordinates.memory import MemoryReader

    from ..formats import read_frame

    started = time.perf_counter()
    index, number = info.locate(frame)
    opened = time.perf_counter()
    positions, dimensions = read_frame(index, number)
    universe.load_new(positions[None], format=MemoryReader, dimensions=dimensions)
    return opened - started, time.perf_counter() - opened


def plan_analysis(info, topology, options):
    """Resolve the analysis on rank 0.

    With a topology stored in an H5MD file (:func:`~h5mdtool.h5md.topology.carries_topology`),
    no ``--reference`` or ``--index``, and selections of the subset
    :func:`~h5mdtool.h5md.selection.select_stored` evaluates, the atoms are found in the
    stored arrays and MDAnalysis is not imported (its import alone is most of rank 0's
    setup); any other analysis is resolved by MDAnalysis. Both give the same plan.

    Parameters
    ----------
    info : h5mdtool.bench.inputs.InputInfo
    topology : str
    options : AnalysisOptions

    Returns
    -------
    (RmsdPlan, dict)
        The plan, and the seconds rank 0 spent in ``t_init_top`` (topology, reference file,
        index, selections), ``t_init_traj`` (opening the trajectory for the reference frame)
        and ``t_io`` (reading it, and frame times for -b/-e/--dt).

    Raises
    ------
    UsageError
        Contradicting options, a reference frame out of range, no frame selected.
    InputError
        Unreadable topology, reference or index file; selections that are invalid, match
        nothing, pick one fit atom, or differ between trajectory and reference.
    """
    phases = {"t_init_top": 0.0, "t_init_traj": 0.0, "t_io": 0.0}
    if options.reference is not None and options.ref_frame is not None:
        raise UsageError("--reference takes the reference from a file; --ref-frame picks one of the trajectory: give one")
    if options.weights not in (None, "mass"):
        raise UsageError(f"--weights must be mass or none, got {options.weights!r}")
    plan = _plan_from_stored_topology(info, topology, options, phases)
    if plan is None:
        plan = _plan_with_mdanalysis(info, topology, options, phases)
    return plan, phases


def _reference_frame(info, options):
    """The frames analysed and the reference frame's number (rank 0)."""
    frames = select_frames(info.n_frames, options, lambda: frame_times(info))
    ref_frame = 0 if options.ref_frame is None else options.ref_frame
    if not -info.n_frames <= ref_frame < info.n_frames:
        raise InputError(f"--ref-frame {ref_frame} is outside the {info.n_frames} frames")
    return frames, ref_frame % info.n_frames


def _plan_from_stored_topology(info, topology, options, phases):
    """The plan from the arrays of a stored topology, or None when MDAnalysis must resolve it
    (a topology file, ``--reference``, ``--index``, selections outside the simple subset,
    masses missing or not positive with ``--weights mass``)."""
    from ..formats import read_frame
    from ..h5md.selection import parse_simple, select_stored
    from ..h5md.topology import carries_topology, read_stored_topology

    keys = (options.select, *options.calc_select)
    if options.reference is not None or options.index is not None or any(parse_simple(k) is None for k in keys):
        return None
    mark = time.perf_counter()
    if not carries_topology(topology):
        return None
    record = read_stored_topology(topology)
    weighted = options.weights == "mass"
    masses = record.get("masses")
    if weighted and (masses is None or not np.all(np.asarray(masses, np.float64) > 0)):
        return None  # MDAnalysis's path gives the error naming the atom
    if len(record["names"]) != info.n_atoms:
        raise atom_count_error(topology, len(record["names"]), info)
    picked = []
    for key in keys:
        atoms = select_stored(record, key)
        if len(atoms) == 0:
            raise InputError(f"selection {key!r} matches no atom of {topology}")
        picked.append(atoms)
    if len(picked[0]) < 2:
        raise InputError(f"{options.select!r} picks one atom: a superposition needs at least two "
                         "(an RMSD group of one atom can follow the fit: --calc-select)")
    phases["t_init_top"] += time.perf_counter() - mark

    mark = time.perf_counter()
    frames, ref_frame = _reference_frame(info, options)
    phases["t_io"] += time.perf_counter() - mark
    mark = time.perf_counter()
    index, number = info.locate(ref_frame)
    opened = time.perf_counter()
    positions = np.asarray(read_frame(index, number, box=False)[0], np.float64)
    phases["t_init_traj"] += opened - mark
    phases["t_io"] += time.perf_counter() - opened

    def weights(atoms):
        return np.asarray(masses, np.float64)[atoms] if weighted else np.ones(len(atoms))

    fit, groups = picked[0], picked[1:]
    return _plan(options, fit, groups, weights(fit), weights(fit), [weights(g) for g in groups],
                 positions[fit], [positions[g] for g in groups], frames, list(keys), ref_frame, None)


def _plan_with_mdanalysis(info, topology, options, phases):
    """The plan from MDAnalysis: topology file, selections, index groups, reference file."""
    from ..formats.ndx import read_index

    mark = time.perf_counter()
    universe = _universe(topology, "topology")
    if universe.atoms.n_atoms != info.n_atoms:
        raise atom_count_error(topology, universe.atoms.n_atoms, info)
    reference_universe = None if options.reference is None else _universe(options.reference, "reference structure")
    if reference_universe is not None and not hasattr(reference_universe, "trajectory"):
        raise InputError(f"{options.reference}: holds no coordinates to use as the reference")
    index = None if options.index is None else (options.index, read_index(options.index))
    phases["t_init_top"] += time.perf_counter() - mark

    mark = time.perf_counter()
    frames, ref_frame = _reference_frame(info, options)
    phases["t_io"] += time.perf_counter() - mark

    # the trajectory side's selection frame: the reference frame, or frame 0 with --reference
    opening, reading = _frame_universe(universe, info, 0 if reference_universe is not None else ref_frame)
    phases["t_init_traj"] += opening
    phases["t_io"] += reading

    mark = time.perf_counter()
    other = universe if reference_universe is None else reference_universe
    other_name = topology if reference_universe is None else options.reference
    fit, fit_label = _pick(universe, options.select, index, topology)
    fit_ref, _ = _pick(other, options.select, index, other_name)
    _check_pair(fit, fit_ref, fit_label, check_masses=True)
    if len(fit) < 2:
        raise InputError(f"{fit_label!r} picks one atom: a superposition needs at least two "
                         "(an RMSD group of one atom can follow the fit: --calc-select)")
    groups, labels = [], [fit_label]
    for key in options.calc_select:
        mobile, label = _pick(universe, key, index, topology)
        ref_atoms, _ = _pick(other, key, index, other_name)
        _check_pair(mobile, ref_atoms, label)
        groups.append((mobile, ref_atoms))
        labels.append(label)
    weighted = options.weights == "mass"
    fit_weights = _weights(fit, weighted, "trajectory")
    ref_weights = _weights(fit_ref, weighted, "reference")
    group_weights = [_weights(mobile, weighted, "trajectory") for mobile, _ in groups]
    phases["t_init_top"] += time.perf_counter() - mark

    mark = time.perf_counter()  # the trajectory (without --reference) stands at the reference frame
    reference = np.asarray(fit_ref.positions, np.float64)
    reference_groups = [np.asarray(ref_atoms.positions, np.float64) for _, ref_atoms in groups]
    phases["t_io"] += time.perf_counter() - mark
    universe.trajectory.close()
    return _plan(options, fit.indices, [mobile.indices for mobile, _ in groups], fit_weights, ref_weights,
                 group_weights, reference, reference_groups, frames, labels, ref_frame, reference_universe)


def _plan(options, fit, groups, fit_weights, ref_weights, group_weights, reference, reference_groups, frames,
          labels, ref_frame, reference_universe):
    """The :class:`RmsdPlan` of resolved atoms (*fit*, *groups*: trajectory indices), weights
    and reference positions (Angstrom)."""
    centre = ref_weights @ reference / ref_weights.sum()
    read_indices = np.sort(np.concatenate([fit] + list(groups)))
    # not np.unique: its first call imports numpy.ma (20 ms of rank 0's setup)
    read_indices = read_indices[np.r_[True, read_indices[1:] != read_indices[:-1]]]
    fit_columns = np.searchsorted(read_indices, fit)
    if np.array_equal(fit_columns, np.arange(len(read_indices))):
        fit_columns = None
    return RmsdPlan(
        read_indices=read_indices, fit_columns=fit_columns,
        group_columns=[np.searchsorted(read_indices, mobile) for mobile in groups],
        reference_fit=reference - centre, reference_groups=[g - centre for g in reference_groups],
        fit_weights=fit_weights / fit_weights.mean(),
        group_weights=[weights / weights.mean() for weights in group_weights],
        frames=frames, labels=labels, weighted=options.weights == "mass",
        description=_describe(options, fit, groups, labels, frames, ref_frame, reference_universe),
    )


def _check_pair(mobile, reference, label, check_masses=False):
    if len(mobile) != len(reference):
        raise InputError(f"{label!r}: the trajectory's selection has {len(mobile)} atoms, the reference's "
                         f"{len(reference)}: they must pick the same atoms")
    if check_masses and hasattr(mobile, "masses") and hasattr(reference, "masses"):
        differ = np.flatnonzero(np.abs(np.asarray(mobile.masses) - np.asarray(reference.masses)) > MASS_TOLERANCE)
        if len(differ):
            a, b = mobile[int(differ[0])], reference[int(differ[0])]
            raise InputError(f"{label!r}: {len(differ)} atom(s) differ between trajectory and reference, e.g. "
                             f"{a.resname}{a.resid} {a.name} (mass {a.mass:.3f}) against {b.resname}{b.resid} "
                             f"{b.name} (mass {b.mass:.3f}); masses must agree within {MASS_TOLERANCE}")


def _describe(options, fit, groups, labels, frames, ref_frame, reference_universe):
    if reference_universe is None:
        reference = {"kind": "frame", "frame": int(ref_frame)}
    else:
        stat = os.stat(options.reference)
        reference = {"kind": "file", "path": os.path.abspath(options.reference), "size": stat.st_size,
                     "mtime": stat.st_mtime}
    if any(v is not None for v in (options.begin, options.end, options.dt)):
        frame_range = {"begin_ps": options.begin, "end_ps": options.end, "dt_ps": options.dt}
    else:
        frame_range = {"start": options.start, "stop": options.stop, "step": options.step}
    return {
        "select": options.select, "calc_select": list(options.calc_select),
        "index": None if options.index is None else os.path.abspath(options.index),
        "weights": options.weights or "none",
        "atoms": {"fit": {"label": labels[0], "n": len(fit), "sha256": digest(fit)},
                  "groups": [{"label": label, "n": len(mobile), "sha256": digest(mobile)}
                             for label, mobile in zip(labels[1:], groups)]},
        "reference": reference,
        "frames": {**frame_range, "n": len(frames), "first": int(frames[0]), "last": int(frames[-1]),
                   "sha256": digest(frames)},
    }

"""``h5mdtool bench dihedrals``: the papers' compute-bound workload, timed per rank.

Dihedral featurization (Khoshlessan et al., guidelines draft, Algorithm 2 and Appendix B.3):
for every frame, the backbone dihedrals phi and psi of each residue, each angle as
(cos, sin). Where RMSD reads many bytes per second of arithmetic (I/O-bound, compute/I-O
about 0.3 in Khoshlessan et al. 2020), featurization computes far more per byte read, the
regime in which the papers saw no stragglers and near-ideal scaling.

The run is ``bench rmsd``'s (:func:`h5mdtool.bench.runner._run_once`): rank 0 inspects the input
and resolves the atoms (:func:`plan_dihedrals`), the frames are divided following the input's
layout, each rank computes its frames with one of two engines, every phase of every rank is
timed, and the results are gathered on rank 0:

- ``blocks`` (:class:`DihedralBlocksEngine`): blocks of frames and the batched kernel of
  :mod:`h5mdtool.bench.dihedral_kernel`;
- ``frames`` (:class:`DihedralFramesEngine`): MDAnalysis frame by frame and one MDAnalysis
  ``calc_dihedrals`` call per angle, as Appendix B.3 calls ``dihedral.value()``.

The features equal MDAnalysis's ``Ramachandran(u.select_atoms(SEL)).run().results.angles``
(phi, psi per residue, in degrees) turned into (cos, sin) pairs, for whole molecules (no
minimum image is applied; MDAnalysis applies it when the frames have a box).
"""

import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..parallel.errors import InputError, UsageError
from ..parallel.mpi import entry_point, root_call
from .analysis import AnalysisOptions, _frame_universe, _pick, _universe, digest, select_frames
from .dihedral_kernel import dihedral_angles, sincos_features
from .engines import BlocksEngine, FramesEngine
from .inputs import resolve_input_topology
from .read_ahead import read_ahead_budget
from .runner import _run_once, checked_options, repeated, report_fields


@dataclass
class DihedralPlan:
    """The resolved featurization, the same on every rank.

    Attributes
    ----------
    read_indices : numpy.ndarray
        Atoms each rank reads (increasing).
    quads : numpy.ndarray, (2 r, 4)
        Columns in ``read_indices`` of the four atoms of each angle: phi then psi of each
        of the r residues.
    frames : numpy.ndarray
        The frame numbers analysed (increasing).
    labels : list of str
        The residues, as ``RESNAME`` + ``RESID``.
    description : dict
        For the report: the selection, residues and frames.
    """

    read_indices: np.ndarray
    quads: np.ndarray
    frames: np.ndarray
    labels: list
    description: dict = field(default_factory=dict)

    @property
    def n_values(self):
        """Values per frame after frame and time: (cos, sin) of every angle."""
        return 2 * len(self.quads)

    #: The frame rank 0 reads while planning (selections are evaluated on it).
    root_frame = 0


def backbone_quads(atoms):
    """Atom indices of the phi and psi dihedrals of *atoms*' residues, as MDAnalysis's
    ``Ramachandran`` picks them (the protein's first and last residue, and residues without
    a neighbour or without one C, N and CA, are left out).

    Returns
    -------
    (numpy.ndarray (2 r, 4), list of residues)
        Rows phi_1, psi_1, phi_2, psi_2, ...

    Raises
    ------
    InputError
        Atoms outside the protein, or no residue with both angles.
    """
    from MDAnalysis.analysis.dihedrals import Ramachandran

    protein = atoms.universe.select_atoms("protein").residues
    if not atoms.residues.issubset(protein):
        raise InputError("dihedrals: the selection holds atoms outside the protein (MDAnalysis's 'protein' "
                         "selection); phi and psi are defined for protein residues")
    no_residue = InputError("no residue of the selection has both backbone dihedrals phi and psi "
                            "(a protein residue that is not a terminus, with atoms C, N and CA)")
    if len(atoms.residues.difference(protein[[0, -1]])) == 0:  # MDAnalysis fails on an empty group
        raise no_residue
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the termini are left out, as intended
        picked = Ramachandran(atoms)
    if len(picked.ag2) == 0:
        raise no_residue
    columns = np.stack([picked.ag1.indices, picked.ag2.indices, picked.ag3.indices, picked.ag4.indices,
                        picked.ag5.indices], axis=1)
    quads = np.empty((2 * len(columns), 4), np.int64)
    quads[0::2], quads[1::2] = columns[:, :4], columns[:, 1:]
    return quads, list(picked.ag3.residues)


def plan_dihedrals(info, topology, options):
    """Resolve the featurization on rank 0.

    Parameters
    ----------
    info : h5mdtool.bench.inputs.InputInfo
    topology : str
    options : h5mdtool.bench.analysis.AnalysisOptions
        ``select`` (the atoms whose residues are featurized), ``index`` and the frames.

    Returns
    -------
    (DihedralPlan, dict)
        The plan and rank 0's seconds in ``t_init_top``, ``t_init_traj`` and ``t_io``.

    Raises
    ------
    UsageError
        No frame selected, contradicting frame options.
    InputError
        Unreadable topology or index, atom counts that differ, a selection that is invalid,
        matches nothing, or holds no residue with phi and psi.
    """
    from ..formats.ndx import read_index
    from .inputs import atom_count_error, frame_times

    phases = {"t_init_top": 0.0, "t_init_traj": 0.0, "t_io": 0.0}
    mark = time.perf_counter()
    universe = _universe(topology, "topology")
    if universe.atoms.n_atoms != info.n_atoms:
        raise atom_count_error(topology, universe.atoms.n_atoms, info)
    index = None if options.index is None else (options.index, read_index(options.index))
    phases["t_init_top"] += time.perf_counter() - mark

    mark = time.perf_counter()
    frames = select_frames(info.n_frames, options, lambda: frame_times(info))
    phases["t_io"] += time.perf_counter() - mark
    opening, reading = _frame_universe(universe, info, DihedralPlan.root_frame)
    phases["t_init_traj"] += opening
    phases["t_io"] += reading

    mark = time.perf_counter()
    atoms, label = _pick(universe, options.select, index, topology)
    atom_quads, residues = backbone_quads(atoms)
    universe.trajectory.close()
    read_indices = np.unique(atom_quads)
    plan = DihedralPlan(
        read_indices=read_indices, quads=np.searchsorted(read_indices, atom_quads), frames=frames,
        labels=[f"{residue.resname}{residue.resid}" for residue in residues],
        description={
            "select": options.select, "index": None if options.index is None else os.path.abspath(options.index),
            "atoms": {"label": label, "n": len(atoms), "sha256": digest(atoms.indices)},
            "residues": {"n": len(residues), "first": f"{residues[0].resname}{residues[0].resid}",
                         "last": f"{residues[-1].resname}{residues[-1].resid}"},
            "n_angles": len(atom_quads), "n_features": 2 * len(atom_quads), "angles_sha256": digest(atom_quads),
            "frames": {"start": options.start, "stop": options.stop, "step": options.step,
                       "begin_ps": options.begin, "end_ps": options.end, "dt_ps": options.dt, "n": len(frames),
                       "first": int(frames[0]), "last": int(frames[-1]), "sha256": digest(frames)},
        },
    )
    phases["t_init_top"] += time.perf_counter() - mark
    return plan, phases


class DihedralBlocksEngine(BlocksEngine):
    """Blocks of frames from an h5mdtool source and the batched kernel (:mod:`h5mdtool.bench.dihedral_kernel`).

    Reading and the loop over blocks are :class:`~h5mdtool.bench.engines.BlocksEngine`'s;
    only the kernel differs.
    """

    def __init__(self, source, plan, compute_load=1):  # the RMSD engine's references are not needed
        self.source, self.plan, self.compute_load = source, plan, compute_load
        self.buffer = None

    def compute(self, positions):
        """(cos, sin) of every angle of every frame, shape (k, 2 angles); any length unit."""
        for _ in range(self.compute_load):
            features = sincos_features(dihedral_angles(positions, self.plan.quads))
        return features


class DihedralFramesEngine(FramesEngine):
    """MDAnalysis frame by frame, one MDAnalysis ``calc_dihedrals`` call per angle (Appendix B.3)."""

    def __init__(self, source, plan, compute_load=1):  # no QCP reference to prepare
        from MDAnalysis.lib.distances import calc_dihedrals

        self.source, self.plan, self.compute_load = source, plan, compute_load
        self.calc_dihedrals = calc_dihedrals
        self.angles = np.empty(len(plan.quads))

    def compute(self, positions):
        """(cos, sin) of every angle of one frame (Angstrom positions)."""
        positions = np.asarray(positions)
        for _ in range(self.compute_load):
            for number, (a, b, c, d) in enumerate(self.plan.quads):
                self.angles[number] = self.calc_dihedrals(positions[a], positions[b], positions[c], positions[d])
        return sincos_features(self.angles[None])[0]


ENGINES = {"blocks": DihedralBlocksEngine, "frames": DihedralFramesEngine}


@entry_point
def bench_dihedrals(inputs, topology=None, *, comm=None, select="protein", index=None, start=None, stop=None, step=None,
                    begin=None, end=None, dt=None, group=None, block_frames=None, compute_load=1, repeat=1,
                    engine="blocks", format=None, read_ahead_mb=None):
    """Run the dihedral featurization benchmark; return the features and the report (rank 0; None elsewhere).

    Parameters
    ----------
    inputs : str or sequence of str
        An H5MD file, a split manifest (or its directory), or XTC/TRR/DCD segments of one
        trajectory, in order.
    topology : str
        Topology read by MDAnalysis (its atom count must match the trajectory's).
    comm : mpi4py communicator, optional
    select : str
        Atoms whose residues are featurized (MDAnalysis selection, or with *index* a group).
    index : str, optional
        GROMACS index file (``.ndx``) whose groups *select* may name.
    start, stop, step : int, optional
        Frames analysed, as MDAnalysis's ``run(start, stop, step)``.
    begin, end, dt : float, optional
        Frames analysed by time in ps, as ``gmx -b -e -dt`` (not with start/stop/step).
    group : str, optional
        H5MD particle group (default: the first listed).
    block_frames : int, optional
        Frames read and featurized at once per rank (blocks engine; whole chunks, at least
        one). Default: as many as 8 MiB of the atoms read hold.
    compute_load : int
        Repeat each kernel call this many times.
    repeat : int
        Number of runs; each gets its own per-rank records.
    engine : {"blocks", "frames"}
    format : str, optional
        Read the input segments as this format whatever their extension.
    read_ahead_mb : int, optional
        MiB of whole frames each other rank may read while rank 0 resolves the analysis, as
        :func:`h5mdtool.bench.runner.bench_rmsd`'s (0: off; default: from the node's memory).

    Returns
    -------
    dict or None
        On rank 0: ``features`` (array (n, 2 + 4 r): frame, time in ps, then for each of the
        r residues cos phi, sin phi, cos psi, sin psi), ``labels`` (the residues) and
        ``report`` (JSON-ready; see docs/benchmark.md).

    Raises
    ------
    UsageError
        Bad options.
    InputError
        Missing or unreadable input, topology or index; a selection that is invalid or holds
        no residue with phi and psi; atom counts that differ. Every rank raises it together.
    """
    paths = checked_options(inputs, block_frames, repeat, compute_load, engine, ENGINES, read_ahead_mb)
    options = AnalysisOptions(select=select, index=index, start=start, stop=stop, step=step, begin=begin, end=end,
                              dt=dt)
    topology, topology_source = root_call(comm, resolve_input_topology, paths, topology)
    budget = read_ahead_budget(comm, read_ahead_mb)

    def run(number):
        return _run_once(paths, topology, options, group, block_frames, compute_load, engine, comm,
                         input_format=format, planner=plan_dihedrals, engines=ENGINES, read_ahead_bytes=budget)

    rows, info, plan, partition, records, runs = repeated(run, repeat, comm)
    if comm.rank != 0:
        return None
    report = {
        **report_fields("dihedrals", engine, comm, info, plan, compute_load, block_frames, topology,
                        topology_source, partition, records, runs),
        "select": select, "n_residues": len(plan.labels), "labels": plan.labels, "analysis": plan.description,
    }
    return {"features": rows, "labels": plan.labels, "report": report}


#: Output formats of the features, by extension.
FEATURE_FORMATS = (".npy", ".csv")


def features_format(path):
    """``npy`` or ``csv`` from *path*'s extension.

    Raises
    ------
    UsageError
        For any other extension.
    """
    for extension in FEATURE_FORMATS:
        if str(path).lower().endswith(extension):
            return extension[1:]
    raise UsageError(f"{path}: --features-out must end in .npy or .csv")


def write_features(handle, features, labels, fmt):
    """Write the features table (frame, time in ps, then cos/sin of phi and psi of each
    residue) to an open binary *handle* as ``npy`` or ``csv`` (with a header naming the columns)."""
    if fmt == "npy":
        np.save(handle, features)
        return
    names = [f"{function}_{angle}_{label}"
             for label in labels for angle in ("phi", "psi") for function in ("cos", "sin")]
    np.savetxt(handle, features, delimiter=",", header=",".join(["frame", "time_ps"] + names), comments="",
               fmt=["%d", "%.10g"] + ["%.10g"] * (features.shape[1] - 2))

"""Which atoms convert and split keep: ``--select``, ``-n/--index`` groups, ``--atom-indices``.

Three ways to name atoms, as users of MDAnalysis, GROMACS and mdconvert do:

- ``--select SEL`` with ``--topology``: an MDAnalysis selection;
- ``-n index.ndx --select GROUP``: a group of a GROMACS index file, by name or by number
  (from 0, as gmx lists them); when GROUP names no group and a topology is given, it is read
  as an MDAnalysis selection (as ``bench rmsd`` does);
- ``--atom-indices FILE``: 0-based indices in a text file (mdconvert's ``-a``).

Atoms are always written in the trajectory's order, so a group must list increasing,
distinct atoms (as gmx's default groups and ``gmx make_ndx`` output do).
"""

import numpy as np

from ..formats.ndx import find_group, read_index
from ..h5md.topology import pick_atoms, read_atom_indices, select_atoms
from ..parallel.errors import InputError, UsageError


def group_atoms(index_file, key, n_atoms):
    """0-based atom indices of the group *key* (name or number) of *index_file*.

    Returns
    -------
    (IndexGroup or None, numpy.ndarray or None)
        None, None when *key* is neither a group's number nor its name.

    Raises
    ------
    InputError
        If the index file cannot be read, the group is empty, numbers atoms beyond the
        trajectory's, or lists atoms out of order or twice.
    UsageError
        If *key* is a group number that does not exist, or a name several groups share.
    """
    groups = read_index(index_file)
    group = find_group(groups, key, index_file)
    if group is None:
        return None, None
    indices = group.indices
    label = f"{index_file}: group {group.number} ({group.name})"
    if len(indices) == 0:
        raise InputError(f"{label} is empty")
    if indices.max() >= n_atoms:
        raise InputError(f"{label} numbers atom {indices.max() + 1} but the trajectory has {n_atoms} atoms")
    if np.any(np.diff(indices) <= 0):
        raise InputError(f"{label} lists atoms out of order or twice; h5mdtool keeps atoms in the trajectory's "
                         "order: sort the group (gmx make_ndx writes sorted groups)")
    return group, np.asarray(indices, np.int64)


def first_selected_frame(index, frames):
    """For :func:`resolve_atoms`: a callable reading the first of trajectory *frames* that holds
    positions (Angstrom, MDAnalysis ``dimensions``), where geometric selections are evaluated."""
    def read():
        from ..formats import read_frame

        held = np.asarray(frames)[index.fields["positions"][frames]]
        return read_frame(index, int(held[0]))

    return read


def resolve_atoms(n_atoms, *, topology=None, select=None, index_file=None, atom_indices_file=None, frame=None):
    """The topology Universe (or None) and the atoms to keep (None: all), from the user's options.

    An MDAnalysis selection is evaluated on the coordinates *frame* gives (a callable, see
    :func:`first_selected_frame`; the topology's own coordinates when None).

    Raises
    ------
    UsageError
        Contradicting options: ``--atom-indices`` with ``--select`` or ``-n``; ``-n`` without
        ``--select``.
    InputError
        ``--select`` naming no group of the index file and no topology to read it as a
        selection; ``--select`` without a topology; unreadable files, a topology whose atom count differs, a selection matching nothing.
    """
    if atom_indices_file is not None and (select is not None or index_file is not None):
        given = "--select" if index_file is None else "-n/--index"
        raise UsageError(f"give the atoms with --atom-indices or with {given}, not both")
    if index_file is None:
        universe, indices = select_atoms(topology, select, n_atoms, frame)
        if atom_indices_file is not None:
            indices = read_atom_indices(atom_indices_file, n_atoms)
        return universe, indices
    if select is None:
        raise UsageError("-n/--index needs --select GROUP: the name or number of the index file's group to keep")
    group, indices = group_atoms(index_file, select, n_atoms)
    universe, _ = select_atoms(topology, None, n_atoms)
    if group is not None:
        return universe, indices
    names = ", ".join(f"{g.number} {g.name}" for g in read_index(index_file))
    if universe is None:
        raise InputError(f"{select!r} is not a group of {index_file} ({names}); give a group's name or number "
                         "(or --topology to read it as an MDAnalysis selection)")
    return universe, pick_atoms(universe, select, topology, frame)

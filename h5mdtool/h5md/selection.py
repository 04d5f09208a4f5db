"""Simple MDAnalysis selections evaluated on a stored topology, without importing MDAnalysis.

Importing MDAnalysis takes 0.25-0.7 s, and rank 0 of ``bench rmsd`` would spend it while
every other rank waits or reads ahead. For an H5MD file carrying its topology and the
selections users give most (``name CA``, ``name N CA C O and segid A``), rank 0 can find the
atoms in the stored arrays (:func:`~h5mdtool.h5md.topology.read_stored_topology`) instead.

:func:`select_stored` does this for a subset of MDAnalysis's selection language whose
meaning is plain equality, and returns None for anything else, which the caller then hands
to MDAnalysis:

- clauses ``name``, ``type``, ``resname``, ``segid`` followed by one or more values, each
  matching atoms whose attribute equals one of them;
- ``resid``, ``resnum`` and ``index`` followed by whole numbers (no ranges);
- ``all``;
- clauses joined by ``and``.

A value is taken only when MDAnalysis could not read it as anything but a value: upper-case
letters (every keyword and operator of MDAnalysis has a lower-case letter), digits, ``_``,
``'`` and ``+``. Wildcards, ranges, parentheses, ``or``, ``not`` and
every other keyword go to MDAnalysis. The atoms are those ``Universe.select_atoms`` gives on
the Universe :func:`~h5mdtool.h5md.topology.universe_from_record` builds from the same
record: increasing indices, each once.
"""

import re

import numpy as np

#: Keywords whose values are strings, and the record arrays they compare (per atom, or per
#: residue / segment with the index array mapping atoms to them).
STRING_FIELDS = {
    "name": ("names", None),
    "type": ("types", None),
    "resname": ("resnames", "resindex"),
    "segid": ("segids", "segindex"),
}
#: Keywords whose values are whole numbers.
NUMBER_FIELDS = {"resid": ("resnums", "resindex"), "resnum": ("resnums", "resindex"), "index": (None, None)}

_STRING_VALUE = re.compile(r"^[A-Z0-9_'+]+$")
_NUMBER_VALUE = re.compile(r"^[0-9]+$")


def parse_simple(selection):
    """The clauses of *selection* as ``[(keyword, values), ...]`` (``("all", ())`` for ``all``),
    or None when it is not of the subset :func:`select_stored` evaluates."""
    tokens = selection.split()
    if not tokens:
        return None
    clauses = []
    for words in _split_on_and(tokens):
        if words is None or not words:
            return None
        keyword, values = words[0], words[1:]
        if keyword == "all":
            if values:
                return None
        elif keyword in STRING_FIELDS:
            if not values or not all(_STRING_VALUE.match(v) for v in values):
                return None
        elif keyword in NUMBER_FIELDS:
            if not values or not all(_NUMBER_VALUE.match(v) for v in values):
                return None
        else:
            return None
        clauses.append((keyword, tuple(values)))
    return clauses


def _split_on_and(tokens):
    clause = []
    for token in tokens:
        if token == "and":
            yield clause
            clause = []
        else:
            clause.append(token)
    yield clause


def select_stored(record, selection):
    """Indices (increasing, int64) of the atoms *selection* picks in a stored topology.

    Parameters
    ----------
    record : dict
        A :func:`~h5mdtool.h5md.topology.read_stored_topology` record.
    selection : str
        An MDAnalysis selection.

    Returns
    -------
    numpy.ndarray or None
        The atoms (possibly none), or None when *selection* is outside the subset this
        module evaluates (see the module's description): MDAnalysis must evaluate it.
    """
    clauses = parse_simple(selection)
    if clauses is None:
        return None
    n_atoms = len(record["names"])
    mask = np.ones(n_atoms, bool)
    for keyword, values in clauses:
        if keyword == "all":
            continue
        if keyword in STRING_FIELDS:
            name, per = STRING_FIELDS[keyword]
            wanted = np.isin(np.asarray(record[name], str), list(values))
        else:
            name, per = NUMBER_FIELDS[keyword]
            numbers = np.array([int(v) for v in values], np.int64)
            wanted = np.isin(np.arange(n_atoms) if name is None else np.asarray(record[name], np.int64), numbers)
        mask &= wanted if per is None else wanted[np.asarray(record[per], np.int64)]
    return np.flatnonzero(mask).astype(np.int64)

"""GROMACS index files (``.ndx``): named groups of atom numbers.

Format: a line ``[ name ]`` opens a group; the whitespace-separated integers that follow
(over any number of lines) are its atoms, numbered from 1. ``gmx`` tools list the groups
numbered from 0 in file order and accept a group by number or by name; so does
:func:`find_group`.
"""

import os
from dataclasses import dataclass

import numpy as np

from ..parallel.errors import InputError


@dataclass
class IndexGroup:
    """One group of an index file: its number (from 0), name and 0-based atom indices."""

    number: int
    name: str
    indices: np.ndarray


def read_index(path):
    """Read a GROMACS index file.

    Returns
    -------
    list of IndexGroup
        In file order.

    Raises
    ------
    InputError
        If the file is missing, holds no group, has numbers before the first group, a token
        that is not a positive whole number, or an unterminated ``[`` line.
    """
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such index file")
    groups, name, atoms = [], None, []
    try:
        with open(path) as handle:
            lines = list(handle)
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: not a readable index file ({error})") from None
    for number, line in enumerate(lines, 1):
        text = line.split(";", 1)[0].strip()
        if not text:
            continue
        if text.startswith("["):
            if not text.endswith("]") or not text[1:-1].strip():
                raise InputError(f"{path}, line {number}: a group header must read '[ name ]'")
            if name is not None:
                groups.append(IndexGroup(len(groups), name, np.asarray(atoms, np.int64) - 1))
            name, atoms = text[1:-1].strip(), []
            continue
        if name is None:
            raise InputError(f"{path}, line {number}: atom numbers before the first '[ group ]'")
        for token in text.split():
            if not token.isdigit() or int(token) < 1:
                raise InputError(f"{path}, line {number}: {token!r} is not an atom number (1, 2, ...)")
            atoms.append(int(token))
    if name is not None:
        groups.append(IndexGroup(len(groups), name, np.asarray(atoms, np.int64) - 1))
    if not groups:
        raise InputError(f"{path}: no '[ group ]' in this index file")
    return groups


def find_group(groups, key, path="index file"):
    """The group *key* names: a group number (from 0, as gmx lists them) or a name.

    Names match exactly first, then ignoring case (as gmx does); an ambiguous name is an
    error. Returns None when *key* is neither a number nor a name of a group.

    Raises
    ------
    InputError
        If *key* is a number outside the groups, or a name that several groups share.
    """
    key = str(key).strip()
    if key.isdigit():
        number = int(key)
        if number >= len(groups):
            raise InputError(f"{path} has groups 0-{len(groups) - 1}; there is no group {number}")
        return groups[number]
    for matches in ([g for g in groups if g.name == key], [g for g in groups if g.name.lower() == key.lower()]):
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            numbers = ", ".join(str(g.number) for g in matches)
            raise InputError(f"{path}: groups {numbers} are all named {key!r}; give the group's number")
    return None


def write_index(path, groups):
    """Write *groups* (name -> 0-based atom indices) as a GROMACS index file (15 numbers a line)."""
    with open(path, "w") as handle:
        for name, indices in groups.items():
            handle.write(f"[ {name} ]\n")
            numbers = [str(int(i) + 1) for i in indices]
            for start in range(0, len(numbers), 15):
                handle.write(" ".join(f"{n:>4}" for n in numbers[start:start + 15]) + "\n")
            handle.write("\n")

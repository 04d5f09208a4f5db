"""An MDAnalysis topology parser for H5MD files (formats ``H5MD`` and ``H5MDTOOL``).

``h5mdtool convert --topology`` stores the topology in the file (the particle group's
``species``, ``mass``, ``charge`` and ``id``, ``/connectivity/bonds`` and H5MD's VMD
structure module ``/parameters/vmd_structure``; see :mod:`h5mdtool.h5md.topology`). This parser
reads it back: atom names, types, ids, elements, masses, charges, residues (names and
numbers), chain IDs, segments and bonds. A file without it gives what MDAnalysis gives for an H5MD file alone
(atoms without names, one residue, one segment), plus what the particle group holds on its
own: ``mass`` and ``charge`` per atom, and ``species`` numbers as atom types.
"""

import numpy as np
from MDAnalysis.core.topology import Topology
from MDAnalysis.core.topologyattrs import (
    Atomids, Atomnames, Atomtypes, Bonds, ChainIDs, Charges, Elements, Masses, Resids, Resnames, Resnums, Segids
)
from MDAnalysis.topology.base import TopologyReaderBase

from ..h5md.topology import PARTICLES, VMD, read_stored_topology, residue_segments, stored_elements
from .reader import H5MDToolReader, opened


def _per_atom(group, name, n_atoms):
    """A per-atom, time-independent dataset of the particle group, or None."""
    dataset = group.get(name)
    if dataset is None or not hasattr(dataset, "shape") or dataset.shape != (n_atoms,):
        return None
    return dataset[()]


class H5MDParser(TopologyReaderBase):
    """Reads the topology an H5MD file carries into an MDAnalysis Topology.

    Importing :mod:`h5mdtool.mdanalysis` registers it for ``.h5md`` files, so
    ``MDAnalysis.Universe("md.h5md")`` has the atoms' names, residues, masses, charges and
    bonds when the file carries them.

    Examples
    --------
    >>> import MDAnalysis as mda
    >>> import h5mdtool.mdanalysis
    >>> u = mda.Universe("adk.h5md")
    >>> u.select_atoms("name CA").n_atoms
    214
    """

    format = ["H5MD", "H5MDTOOL"]

    def parse(self, **kwargs):
        """The Topology stored in the file (see the class docstring).

        Returns
        -------
        MDAnalysis.core.topology.Topology

        Raises
        ------
        h5mdtool.parallel.errors.InputError
            If the stored topology is damaged (arrays that disagree, datasets missing).
        """
        path = str(self.filename)
        with opened(path) as handle:
            particles = handle.get("particles")
            group = handle.get(PARTICLES)
            if group is not None and f"{VMD}/name" in handle and "species" in group:
                return self._stored(read_stored_topology(path, handle))
            if group is None and particles is not None and len(particles):
                group = particles[next(iter(particles))]
            n_atoms = kwargs.get("n_atoms") or H5MDToolReader.parse_n_atoms(path)
            attrs = []
            if group is not None:
                species = _per_atom(group, "species", n_atoms)
                if species is not None:
                    attrs.append(Atomtypes(np.asarray(species).astype(str).astype(object)))
                for name, attr in (("mass", Masses), ("charge", Charges)):
                    values = _per_atom(group, name, n_atoms)
                    if values is not None:
                        attrs.append(attr(np.asarray(values, np.float64)))
        return Topology(n_atoms, 1, 1, attrs=attrs)

    @staticmethod
    def _stored(record):
        n_atoms = len(record["names"])
        n_residues, n_segments = len(record["resnames"]), len(record["segids"])
        ids = record.get("source_ids")
        attrs = [
            Atomids(np.arange(1, n_atoms + 1) if ids is None else np.asarray(ids, np.int64) + 1),
            Atomnames(record["names"].astype(object)),
            Atomtypes(record["types"].astype(object)),
            Resids(np.asarray(record["resnums"], np.int64)),
            Resnums(np.asarray(record["resnums"], np.int64)),
            Resnames(record["resnames"].astype(object)),
            Segids(record["segids"].astype(object)),
        ]
        if "masses" in record:
            attrs.append(Masses(np.asarray(record["masses"], np.float64)))
        if "charges" in record:
            attrs.append(Charges(np.asarray(record["charges"], np.float64)))
        if "chains" in record:
            attrs.append(ChainIDs(np.asarray(record["chains"]).astype(object)[np.asarray(record["resindex"])]))
        elements = stored_elements(record)
        if elements is not None:
            attrs.append(Elements(elements))
        bonds = record.get("bonds")
        if bonds is not None and len(bonds):
            attrs.append(Bonds([tuple(pair) for pair in bonds.tolist()]))
        return Topology(n_atoms, n_residues, n_segments, attrs=attrs,
                        atom_resindex=np.asarray(record["resindex"], np.int64),
                        residue_segindex=np.asarray(residue_segments(record), np.int64))


__all__ = ["H5MDParser"]

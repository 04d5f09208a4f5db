"""h5mdtool for MDAnalysis users: a fast H5MD reader, the topology an H5MD file carries, and
an MPI backend for MDAnalysis's parallel analysis.

Importing this package (``import h5mdtool.mdanalysis``) registers with MDAnalysis

- a trajectory reader under the format name ``H5MDTOOL``
  (:class:`~h5mdtool.mdanalysis.reader.H5MDToolReader`): it reads whole chunks in blocks,
  decompresses them in threads and serves frames from its block buffer, so iterating,
  slicing and random access run at the speed of h5mdtool's own block reader. MDAnalysis's
  own ``H5MD`` reader stays the default for ``.h5md`` files: choose this one with
  ``format="H5MDTOOL"`` or through :func:`Universe`;
- a topology parser for H5MD files (formats ``H5MD`` and ``H5MDTOOL``,
  :class:`~h5mdtool.mdanalysis.topology.H5MDParser`): names, types, elements, residues,
  chains, segments, masses, charges and bonds as ``h5mdtool convert --topology`` stores them, so
  ``MDAnalysis.Universe("md.h5md")`` has the atoms' names and residues.

:class:`MPIBackend` runs an MDAnalysis analysis over the ranks of ``mpirun``
(:mod:`~h5mdtool.mdanalysis.backend`, docs/parallel-analysis.md).

Examples
--------
>>> import h5mdtool.mdanalysis as h5mda
>>> u = h5mda.Universe("md.h5md")                # the topology stored in the file
>>> u = h5mda.Universe("md.h5md", topology="md.psf")
>>> import MDAnalysis as mda
>>> u = mda.Universe("md.psf", "md.h5md", format="H5MDTOOL")
>>> from MDAnalysis.analysis.rms import RMSD
>>> RMSD(u, select="name CA").run(backend=h5mda.MPIBackend(), unsupported_backend=True)
"""

from .backend import MPIBackend
from .reader import H5MDToolReader
from .topology import H5MDParser


def Universe(path, topology=None, **kwargs):
    """An :class:`MDAnalysis.Universe` reading the H5MD file *path* through :class:`H5MDToolReader`.

    Parameters
    ----------
    path : str or path-like
        The H5MD trajectory.
    topology : str or path-like, optional
        A topology file MDAnalysis reads (PSF, GRO, TPR, PDB...). Default: the topology the
        file carries (``h5mdtool convert --topology`` stores one), or, without one, a
        topology of unnamed atoms as MDAnalysis makes for an H5MD file alone.
    **kwargs
        Passed to :class:`MDAnalysis.Universe` (and from there to the reader:
        ``convert_units``, ``driver``, ``comm``, ``block_bytes``, ``threads``, ``group``, ...).

    Returns
    -------
    MDAnalysis.Universe

    Examples
    --------
    >>> import h5mdtool.mdanalysis as h5mda
    >>> from MDAnalysis.analysis import rms
    >>> u = h5mda.Universe("md.h5md")
    >>> rmsd = rms.RMSD(u, select="name CA").run()
    """
    import MDAnalysis

    kwargs.setdefault("format", H5MDToolReader.format)
    path = str(path)
    if topology is None:
        kwargs.setdefault("topology_format", "H5MDTOOL")
        return MDAnalysis.Universe(path, **kwargs)
    return MDAnalysis.Universe(str(topology), path, **kwargs)


__all__ = ["H5MDParser", "H5MDToolReader", "MPIBackend", "Universe"]

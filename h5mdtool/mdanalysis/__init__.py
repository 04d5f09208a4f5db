"""h5mdtool for MDAnalysis users: an MPI backend for MDAnalysis's parallel analysis."""

from .backend import MPIBackend

__all__ = ["MPIBackend"]

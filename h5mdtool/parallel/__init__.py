"""The runtime every other layer stands on: MPI, errors, signals, safe outputs, progress.

Owns the communicator plumbing (:mod:`.mpi`: ``resolve(comm)``, collective error handling,
HDF5 files opened serially or with MPI-IO), the exception hierarchy (:mod:`.errors`),
signal handling (:mod:`.interrupts`), temporaries, publication by rename and locks
(:mod:`.outputs`), progress bars (:mod:`.progress`), heap settings (:mod:`.heap`), the
test-only delay hook (:mod:`.testhooks`) and unit and byte-count helpers (:mod:`.units`).

May import: the standard library, numpy, h5py, mpi4py (lazily). Never another h5mdtool
subpackage.
"""

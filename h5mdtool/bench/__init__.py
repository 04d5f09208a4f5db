"""``h5mdtool bench``: the papers' parallel analysis benchmarks, timed per rank.

Owns the run (:mod:`.runner`: inspect on rank 0, partition, read, compute, gather), what
is read (:mod:`.inputs`, :mod:`.frames`), the analysis resolved once (:mod:`.analysis`),
the frame partition (:mod:`.partition`), the engines and kernels (:mod:`.engines`,
:mod:`.rmsd`), per-rank timing, stragglers and advice (:mod:`.timing`), the RMSD table
(:mod:`.rmsd_output`), combining runs (:mod:`.report`), plots (:mod:`.plots`) and the
publications cited (:mod:`.references`).

May import: :mod:`h5mdtool.check` (layout facts of an input) and everything below it.
"""

"""``h5mdtool convert``: trajectories into one H5MD file, written by all ranks.

Owns converting (:mod:`.convert`: plan on rank 0, broadcast, every rank writes its
frames), appending to a file h5mdtool wrote (:mod:`.append`), what a relayout of an H5MD
input carries over (:mod:`.relayout`) and which atoms are kept (:mod:`.atomselect`).

May import: :mod:`h5mdtool.mdanalysis`, :mod:`h5mdtool.formats`, :mod:`h5mdtool.h5md`,
:mod:`h5mdtool.parallel`.
"""

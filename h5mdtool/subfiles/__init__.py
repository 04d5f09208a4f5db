"""``h5mdtool split``: one trajectory into per-rank part files and their manifest.

Owns splitting (:mod:`.split`) and the manifest format: writing, reading, checking
(:mod:`.manifest`), which ``validate`` and ``bench`` read as well.

May import: :mod:`h5mdtool.conversion` (split's H5MD parts are written by convert's
writer) and everything below it.
"""

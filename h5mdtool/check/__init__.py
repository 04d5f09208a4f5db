"""``h5mdtool validate`` and ``info``: conformance, data sanity, layout lint, sources.

Owns the rule table and reports (:mod:`.findings`), guarded reading of any HDF5 file
(:mod:`.h5access`), H5MD conformance and MDAnalysis readability (:mod:`.validate`), the
layout lint (:mod:`.lint`), data sanity rules (:mod:`.sanity`), frame-by-frame comparison
with a source (:mod:`.compare`) and ``info`` (:mod:`.info`).

May import: :mod:`h5mdtool.subfiles` (manifests) and everything below it.
"""

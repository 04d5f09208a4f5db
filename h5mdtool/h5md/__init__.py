"""Writing H5MD files and the HDF5 machinery under them.

Owns the layout contract (:mod:`.layout`: chunks, filters, stripe hints, value encodings),
the collective writer (:mod:`.writer`), the codecs of ``--compression`` (:mod:`.codecs`),
a dataset's filter pipeline applied to whole chunks outside HDF5 (:mod:`.chunkcodec`,
which also reads chunks for every fast reader) and the direct chunk writer
(:mod:`.chunkwriter`), the topology stored in a file (:mod:`.topology`) and the
provenance record (:mod:`.provenance`).

May import: :mod:`h5mdtool.parallel`. Never :mod:`h5mdtool.formats` or anything above.
"""

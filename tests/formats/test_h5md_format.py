"""How h5mdtool's H5MD format opens a file: HDF5's chunk cache off where no element is
filtered (HDF5 then reads chunks straight into the block, a copy fewer), kept where HDF5
may decompress chunks read in parts."""

import contextlib

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import h5mdtool
from h5mdtool.formats.h5md import H5MDFormat

DEFAULT_CHUNK_CACHE = 1 << 20  # HDF5's rdcc_nbytes


@pytest.fixture(scope="module")
def adk_h5md(tmp_path_factory, adk_segments):
    directory = tmp_path_factory.mktemp("h5md_format")
    paths = {}
    for name, options in {"plain": {}, "gzip": {"compression": "gzip"}}.items():
        paths[name] = str(directory / f"{name}.h5md")
        h5mdtool.convert([adk_segments["whole"]], paths[name], progress=False, **options)
    return paths


def _opened(segment):
    return contextlib.closing(H5MDFormat(segment))


def _chunk_cache_bytes(reader):
    return reader.handle.id.get_access_plist().get_cache()[2]


@pytest.mark.parametrize("layout, cache", [("plain", 0), ("gzip", DEFAULT_CHUNK_CACHE)])
def test_chunk_cache_off_only_without_filters(adk_h5md, layout, cache):
    with _opened(H5MDFormat.scan(adk_h5md[layout])) as reader:
        assert _chunk_cache_bytes(reader) == cache


def test_details_without_the_filter_count_keep_the_cache(adk_h5md):
    """Details recorded before the filter count was (a cached scan) keep HDF5's default."""
    segment = H5MDFormat.scan(adk_h5md["plain"])
    for element in segment.details["elements"].values():
        del element["filters"]
    with _opened(segment) as reader:
        assert _chunk_cache_bytes(reader) == DEFAULT_CHUNK_CACHE


def test_blocks_read_without_the_cache_equal_h5py(adk_h5md):
    import h5py

    segment = H5MDFormat.scan(adk_h5md["plain"])
    path = segment.details["elements"]["positions"]["path"]
    out = np.empty((7, segment.n_atoms, 3), np.float32)
    with _opened(segment) as reader, h5py.File(adk_h5md["plain"], "r") as handle:
        for start in (0, 5, segment.n_frames - 7):
            reader._read(reader.handle[path], start, start + 7, (0, segment.n_atoms), out)
            assert_array_equal(out, handle[path][start:start + 7])

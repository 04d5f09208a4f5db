"""Lossless HDF5 codecs of ``--compression``: built-in ones and hdf5plugin's.

Each :class:`Codec` knows its HDF5 filter, its levels, whether a reader needs hdf5plugin,
and how to set itself on a dataset creation property list. Plugin filters are set as
*mandatory*: h5py marks the filters it does not know as optional, and HDF5 then stores a
chunk unfiltered when the filter declines it, a mark parallel HDF5 1.10.8 loses in
collective writes (seen with lzf, which h5py also marks optional: unreadable chunks).

Readers call :func:`register_plugins` before reading filtered data; h5mdtool's own readers
do so themselves.
"""

from dataclasses import dataclass

from ..parallel.errors import StackError, UsageError

#: HDF5's shuffle filter id (built in).
SHUFFLE_ID = 2


@dataclass(frozen=True)
class Codec:
    """A lossless compression choice.

    Attributes
    ----------
    name : str
        The ``--compression`` value.
    filter_id : int or None
        HDF5 filter id (None for ``none``).
    plugin : bool
        True when readers need the filter plugin (``pip install hdf5plugin`` and ``import
        hdf5plugin`` in Python, or ``HDF5_PLUGIN_PATH`` for C readers and h5dump).
    levels : tuple of int or None
        Allowed ``--compression-level`` range, inclusive.
    default_level : int or None
    byte_shuffle : bool
        Whether HDF5's byte shuffle helps (codecs with their own bit shuffle say False).
    own_shuffle : bool
        Whether the codec shuffles itself and takes ``shuffle`` as its own byte shuffle
        instead of its bit shuffle (Blosc2), rather than HDF5's shuffle filter before it.
    parallel : bool
        Whether it can be written by several ranks (lzf cannot, see :meth:`Layout.check_parallel`).
    outside : bool
        Whether h5mdtool compresses chunks itself, in threads (:mod:`.chunkcodec`): every
        filter but h5py's lzf, which only h5py's HDF5 can run.
    threads_by_default : bool
        Whether one process writing a file compresses its chunks in h5mdtool's threads
        unless told otherwise (``convert --threads``): where compressing costs far more than
        decoding the input (gzip), the threads pay; for the fast codecs HDF5's filters,
        inside its writes, were as fast (docs/performance.md).
    summary : str
    """

    name: str
    filter_id: int = None
    plugin: bool = False
    levels: tuple = None
    default_level: int = None
    byte_shuffle: bool = True
    own_shuffle: bool = False
    parallel: bool = True
    outside: bool = True
    threads_by_default: bool = False
    summary: str = ""

    def check_level(self, level):
        """The level to use: *level* checked, or the default.

        Raises
        ------
        UsageError
            If the codec has no levels or *level* is outside them.
        """
        if level is None:
            return self.default_level
        if self.levels is None:
            raise UsageError(f"--compression-level does not apply to {self.name}")
        low, high = self.levels
        if not low <= level <= high:
            raise UsageError(f"{self.name} level must be {low}-{high}, got {level}")
        return level

    def options(self, level, shuffle=False):
        """hdf5plugin's filter arguments for this codec at *level* (``compression_opts``).

        *shuffle* chooses Blosc2's byte shuffle instead of its bit shuffle: on integer
        positions it stores AdK 12% smaller (docs/layouts.md).
        """
        import hdf5plugin

        if self.name == "zstd":
            return tuple(hdf5plugin.Zstd(clevel=level)["compression_opts"])
        if self.name == "lz4":
            return tuple(hdf5plugin.Bitshuffle(cname="lz4")["compression_opts"])
        if self.name == "blosc2":
            filters = hdf5plugin.Blosc2.SHUFFLE if shuffle else hdf5plugin.Blosc2.BITSHUFFLE
            return tuple(hdf5plugin.Blosc2(cname="zstd", clevel=level, filters=filters)["compression_opts"])
        raise ValueError(self.name)

    def set_on(self, dcpl, level, shuffle):
        """Add this codec's filters to a creation property list: with *shuffle*, HDF5's byte
        shuffle first, or the codec's own byte shuffle (:attr:`own_shuffle`)."""
        import h5py

        if shuffle and not self.own_shuffle:
            dcpl.set_shuffle()
        if self.name == "gzip":
            dcpl.set_deflate(level)
        elif self.name == "lzf":
            dcpl.set_filter(h5py.h5z.FILTER_LZF, h5py.h5z.FLAG_OPTIONAL)
        elif self.filter_id is not None:
            register_plugins(required=True)
            dcpl.set_filter(self.filter_id, h5py.h5z.FLAG_MANDATORY, self.options(level, shuffle and self.own_shuffle))


#: How readers get hdf5plugin's filters, and what they see without them (convert's note,
#: info, validate's LINT006; the messages are HDF5 1.10's, docs/installation.md has others').
PLUGIN_HINT = ("Python readers (MDAnalysis included): pip install hdf5plugin, then import hdf5plugin before opening; "
               "h5dump and other HDF5 programs: export HDF5_PLUGIN_PATH=$(python -c 'import hdf5plugin; "
               "print(hdf5plugin.PLUGIN_PATH)'). Without it h5py and MDAnalysis fail with OSError \"Can't read data "
               "(can't open directory: .../plugins)\" and h5dump prints an empty DATA {} with exit status 0 "
               "(docs/installation.md)")
#: Why lzf is a poor choice for a file that leaves Python.
LZF_HINT = ("only h5py reads lzf (it bundles the filter; hdf5plugin has none): h5dump, C, Fortran and other HDF5 "
            "programs cannot read the data at all; prefer zstd or gzip for files that leave Python")

CODECS = {
    "none": Codec("none", outside=False, summary="no compression"),
    "gzip": Codec("gzip", 1, levels=(0, 9), default_level=4, threads_by_default=True,
                  summary="deflate (zlib), built into every HDF5"),
    "lzf": Codec("lzf", 32000, parallel=False, outside=False, summary="lzf, shipped with h5py (serial writes only)"),
    "zstd": Codec("zstd", 32015, plugin=True, levels=(1, 22), default_level=3,
                  summary="Zstandard, with HDF5's byte shuffle (hdf5plugin)"),
    "lz4": Codec("lz4", 32008, plugin=True, byte_shuffle=False,
                 summary="bitshuffle + LZ4, fastest to read (hdf5plugin)"),
    "blosc2": Codec("blosc2", 32026, plugin=True, levels=(0, 9), default_level=5, byte_shuffle=False,
                    own_shuffle=True, summary="Blosc2: bit shuffle (byte shuffle with --shuffle) + Zstandard (hdf5plugin)"),
}


def codec(name):
    """The :class:`Codec` called *name*.

    Raises
    ------
    UsageError
        For an unknown name.
    """
    try:
        return CODECS[name]
    except KeyError:
        raise UsageError(f"unknown compression {name!r}; choose one of {', '.join(CODECS)}") from None


def register_plugins(required=False):
    """Make hdf5plugin's filters available to this process's HDF5; True when they are.

    Raises
    ------
    StackError
        With *required*, when hdf5plugin is not installed.
    """
    try:
        import hdf5plugin  # noqa: F401 - importing registers the filters with HDF5
    except ImportError:
        if required:
            raise StackError(
                "this compression needs the hdf5plugin package: pip install --no-deps hdf5plugin "
                "(after h5py, so that the parallel h5py stays)"
            ) from None
        return False
    return True

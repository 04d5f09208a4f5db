"""The NetCDF-3 container (classic and 64-bit offset), read by h5mdtool itself.

AMBER NetCDF trajectories are NetCDF-3 files. Their header (magic ``CDF`` and a version
byte, the record count, then the dimensions, the global attributes and the variables with
their attributes, type, size and byte offset) says where every value is, so the header is
parsed here and values are read with numpy. scipy's ``netcdf_file`` would read the same
bytes, but it cannot say which record of a truncated file is incomplete (it fails with a
numpy reshape error) nor leave that record out.

Layout (the NetCDF classic format specification): a variable whose first dimension is the
record (unlimited) dimension stores record ``i`` at ``begin + i * record_size``, where
``record_size`` is the sum of the padded sizes of all record variables (no padding when
there is only one); other variables are stored contiguously at ``begin``. Values are
big-endian.
"""

import struct
from dataclasses import dataclass

import numpy as np

from ..parallel.errors import InputError

#: Magic bytes and version byte -> name.
VERSIONS = {1: "classic", 2: "64-bit offset"}
#: Signature of an HDF5 file (NetCDF-4 files are HDF5 files).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
NC_DIMENSION, NC_VARIABLE, NC_ATTRIBUTE = 10, 11, 12
#: NetCDF-3 external types -> numpy big-endian dtypes.
TYPES = {1: np.dtype("i1"), 2: np.dtype("S1"), 3: np.dtype(">i2"), 4: np.dtype(">i4"),
         5: np.dtype(">f4"), 6: np.dtype(">f8")}
#: Bytes read for the header at first; more are read when it is longer.
FIRST_READ = 64 * 1024
#: Upper bound on header element counts (dimensions, attributes, variables, name length):
#: a corrupt count must not make the parser allocate or loop for ever.
MAX_COUNT = 1 << 24


@dataclass
class Variable:
    """One variable of a NetCDF-3 file.

    Attributes
    ----------
    name : str
    dimensions : tuple of str
    shape : tuple of int
        Per record for a record variable (the record dimension left out), else the whole shape.
    dtype : numpy.dtype
        Big-endian type of the values on disk.
    attributes : dict
        Name -> str (text attributes) or numpy array.
    begin : int
        Byte offset of the values (of record 0 for a record variable).
    record : bool
        True when the first dimension is the record dimension.
    """

    name: str
    dimensions: tuple
    shape: tuple
    dtype: np.dtype
    attributes: dict
    begin: int
    record: bool

    @property
    def nbytes(self):
        """Bytes of the values (of one record for a record variable), unpadded."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class Header:
    """The parsed header of a NetCDF-3 file."""

    version: int
    numrecs: int
    dimensions: dict
    attributes: dict
    variables: dict
    record_size: int
    record_dimension: str = None
    streaming: bool = False
    end: int = 0

    def records_in(self, size):
        """How many whole records a file of *size* bytes holds (may exceed :attr:`numrecs`)."""
        records = [v for v in self.variables.values() if v.record]
        if not records or self.record_size == 0:
            return 0
        first = min(v.begin for v in records)
        last_end = max(v.begin - first + v.nbytes for v in records)
        if size < first + last_end:
            return 0
        return (size - first - last_end) // self.record_size + 1

    def record_end(self, record):
        """Byte just past the last value of *record*."""
        records = [v for v in self.variables.values() if v.record]
        return max(v.begin + v.nbytes for v in records) + record * self.record_size

    def record_start(self, record):
        """Byte of the first value of *record*."""
        return min(v.begin for v in self.variables.values() if v.record) + record * self.record_size


class _Cursor:
    """Reads big-endian header items from bytes, growing them from the file when needed."""

    def __init__(self, path, handle, version):
        self.path, self.handle = path, handle
        self.data = b""
        self.position = 0
        self.offset_format = ">i" if version == 1 else ">q"
        handle.seek(0)
        self.data = handle.read(FIRST_READ)

    def _fill(self, need):
        if len(self.data) >= need:
            return
        self.handle.seek(0)
        self.data = self.handle.read(max(need, 2 * len(self.data)))
        if len(self.data) < need:
            raise InputError(f"{self.path}: the NetCDF header ends early (file of {len(self.data)} bytes): truncated")

    def take(self, count):
        self._fill(self.position + count)
        chunk = self.data[self.position:self.position + count]
        self.position += count
        return chunk

    def int32(self):
        return struct.unpack(">i", self.take(4))[0]

    def count(self, what):
        value = self.int32()
        if not 0 <= value <= MAX_COUNT:
            raise InputError(f"{self.path}: the NetCDF header declares {value} {what}: corrupt")
        return value

    def non_negative(self, what):
        value = self.int32()
        if value < 0:
            raise InputError(f"{self.path}: the NetCDF header declares {value} {what}: corrupt")
        return value

    def offset(self):
        fmt = self.offset_format
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def name(self):
        length = self.count("name characters")
        raw = self.take(length)
        self.take(-length % 4)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{self.path}: the NetCDF header holds a name that is not text: corrupt") from None


def is_hdf5(head):
    """True when *head* (the first bytes of a file) is an HDF5 signature (NetCDF-4)."""
    return head.startswith(HDF5_SIGNATURE)


def read_header(path, handle):
    """Parse the header of the NetCDF-3 file open as *handle*.

    Raises
    ------
    InputError
        Not a NetCDF-3 file (NetCDF-4/HDF5 and CDF-5 files are named as such), or a
        header that is truncated or inconsistent.
    """
    handle.seek(0)
    magic = handle.read(4)
    if len(magic) < 4 or magic[:3] != b"CDF":
        handle.seek(0)
        if is_hdf5(handle.read(8)):
            raise InputError(
                f"{path}: a NetCDF-4 (HDF5-based) file; AMBER NetCDF trajectories are NetCDF-3 "
                "(64-bit offset), as AMBER and cpptraj write them: convert it with "
                "'nccopy -k 64-bit-offset' (or 'cpptraj') and read that"
            )
        raise InputError(f"{path}: not a NetCDF file (no CDF signature)")
    version = magic[3]
    if version == 5:
        raise InputError(f"{path}: a CDF-5 (64-bit data) NetCDF file; h5mdtool reads NetCDF-3 classic and "
                         "64-bit offset files (convert with 'nccopy -k 64-bit-offset')")
    if version not in VERSIONS:
        raise InputError(f"{path}: NetCDF version byte {version} is not 1 or 2: corrupt or unknown")
    cursor = _Cursor(path, handle, version)
    cursor.take(4)
    numrecs = cursor.int32()
    streaming = numrecs == -1
    if numrecs < -1:
        raise InputError(f"{path}: the NetCDF header declares {numrecs} records: corrupt")
    dimensions, record_dimension = {}, None
    names = []
    for name, length in _list(cursor, NC_DIMENSION, "dimensions", lambda: (cursor.name(), cursor.non_negative("as a dimension length"))):
        if length == 0:
            if record_dimension is not None:
                raise InputError(f"{path}: two record (unlimited) dimensions: corrupt")
            record_dimension = name
        dimensions[name] = length
        names.append(name)
    attributes = _attributes(cursor)
    variables = {}
    for _ in range(_list_count(cursor, NC_VARIABLE, "variables")):
        name = cursor.name()
        ids = [cursor.count("dimension ids") for _ in range(cursor.count("dimensions of a variable"))]
        if any(i >= len(names) for i in ids):
            raise InputError(f"{path}: variable {name!r} refers to a dimension that does not exist: corrupt")
        dims = tuple(names[i] for i in ids)
        var_attributes = _attributes(cursor)
        nc_type = cursor.int32()
        if nc_type not in TYPES:
            raise InputError(f"{path}: variable {name!r} has NetCDF type {nc_type}: corrupt or not NetCDF-3")
        cursor.int32()  # vsize: recomputed from the shape, as it overflows for variables over 4 GiB
        begin = cursor.offset()
        record = bool(dims) and dims[0] == record_dimension
        if record_dimension in dims[1:]:
            raise InputError(f"{path}: variable {name!r} uses the record dimension after its first: corrupt")
        shape = tuple(dimensions[d] for d in (dims[1:] if record else dims))
        variables[name] = Variable(name, dims, shape, TYPES[nc_type], var_attributes, begin, record)
    records = [v for v in variables.values() if v.record]
    if len(records) == 1:
        record_size = records[0].nbytes  # one record variable: records are not padded
    else:
        record_size = sum(v.nbytes + (-v.nbytes % 4) for v in records)
    header = Header(version=version, numrecs=max(numrecs, 0), dimensions=dimensions, attributes=attributes,
                    variables=variables, record_size=record_size, record_dimension=record_dimension,
                    streaming=streaming, end=cursor.position)
    for variable in variables.values():
        if variable.begin < header.end:
            raise InputError(f"{path}: variable {variable.name!r} starts at byte {variable.begin}, inside the "
                             "header: corrupt")
    return header


def _list_count(cursor, tag, what):
    """Element count of a header list, 0 when ABSENT."""
    found = cursor.int32()
    count = cursor.count(what)
    if found == 0 and count == 0:
        return 0
    if found != tag:
        raise InputError(f"{cursor.path}: the NetCDF header has tag {found} where its {what} should be: corrupt")
    return count


def _list(cursor, tag, what, item):
    return [item() for _ in range(_list_count(cursor, tag, what))]


def _attributes(cursor):
    attributes = {}
    for _ in range(_list_count(cursor, NC_ATTRIBUTE, "attributes")):
        name = cursor.name()
        nc_type = cursor.int32()
        if nc_type not in TYPES:
            raise InputError(f"{cursor.path}: attribute {name!r} has NetCDF type {nc_type}: corrupt")
        dtype = TYPES[nc_type]
        count = cursor.count("attribute values")
        raw = cursor.take(count * dtype.itemsize)
        cursor.take(-(count * dtype.itemsize) % 4)
        if nc_type == 2:
            attributes[name] = raw.rstrip(b"\0").decode("utf-8", "replace")
        else:
            attributes[name] = np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="))
    return attributes


def record_view(mapped, header, variable, n_records):
    """A read-only numpy view of the first *n_records* records of a record *variable*.

    *mapped* is the whole file as a ``numpy.memmap`` of bytes.
    """
    inner = variable.shape
    strides = [variable.dtype.itemsize]
    for length in reversed(inner[1:]):
        strides.insert(0, strides[0] * length)
    if not inner:
        strides = []
    return np.ndarray(shape=(n_records,) + inner, dtype=variable.dtype, buffer=mapped, offset=variable.begin,
                      strides=(header.record_size,) + tuple(strides))

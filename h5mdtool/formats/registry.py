"""The registry of trajectory formats: name -> :class:`~h5mdtool.formats.base.Format` subclass,
and choosing a format from a file name or ``--format``."""

import importlib
import os

from ..h5md.topology import STRUCTURE_EXTENSIONS
from ..parallel.errors import InputError, UsageError
from .dcd import DCDFormat
from .h5md import H5MDFormat
from .lammps import LAMMPSFormat
from .mdanalysis import GSDFormat, LAMMPSDumpFormat, TRZFormat
from .netcdf import NCDFFormat
from .tng import TNGFormat
from .trr import TRRFormat
from .xtc import XTCFormat

#: Format name -> class.
REGISTRY = {cls.name: cls for cls in (
    XTCFormat, TRRFormat, DCDFormat, H5MDFormat,
    NCDFFormat, LAMMPSFormat, TNGFormat,  # read by h5mdtool (TNG decoded by pytng)
    TRZFormat, GSDFormat, LAMMPSDumpFormat,  # read through MDAnalysis's readers
)}
#: File extension -> format name.
EXTENSIONS = {extension: cls.name for cls in REGISTRY.values() for extension in cls.extensions}
#: Every extension that names a file format a user may mean instead of an H5MD output.
NAMED_FORMATS = {**STRUCTURE_EXTENSIONS, **EXTENSIONS}
#: Extensions of coordinate formats users may expect to be read, which h5mdtool does not read.
NOT_READ = {".gro": "GRO", ".pdb": "PDB", ".ent": "PDB", ".xyz": "XYZ", ".mdcrd": "AMBER ASCII trajectory",
            ".crd": "AMBER ASCII trajectory or CHARMM coordinate"}


def detect_format(path, format=None):
    """The format name of *path*: *format* when given, else from the file's extension.

    Raises
    ------
    UsageError
        If *format* is not a known format name.
    InputError
        If the extension is not one h5mdtool reads.
    """
    if format is not None:
        name = str(format).upper()
        if name not in REGISTRY:
            raise UsageError(f"unknown format {format!r}; choose one of {', '.join(sorted(REGISTRY))}")
        return name
    extension = os.path.splitext(str(path))[1].lower()
    try:
        return EXTENSIONS[extension]
    except KeyError:
        known = ", ".join(sorted(EXTENSIONS))
        if extension in NOT_READ:
            raise InputError(
                f"{path}: h5mdtool does not read {NOT_READ[extension]} files; write the trajectory as XTC or DCD "
                "first (MDAnalysis: u.atoms.write('md.xtc', frames='all'); GROMACS: gmx trjconv -o md.xtc); "
                f"h5mdtool reads {known}"
            ) from None
        raise InputError(
            f"{path}: unknown trajectory extension {extension or '(none)'!r}; h5mdtool reads {known} "
            "(or name the format with --format)"
        ) from None


def format_class(name):
    """The :class:`Format` subclass registered as *name*."""
    return REGISTRY[name]


def load_decoders(paths, format=None):
    """Import the modules that decode *paths* (chosen by extension); never raise.

    Ranks other than 0 call this while rank 0 plans the job. Importing MDAnalysis takes
    about 0.35 s; done here it overlaps rank 0's planning (which reads frames), instead of
    delaying each rank's first block while rank 0 waits at the first collective write.
    Unknown formats and failed imports are left for rank 0 to report.
    """
    modules = set()
    for path in paths:
        try:
            modules.update(REGISTRY[detect_format(path, format)].decoders)
        except (InputError, UsageError):
            pass
    for name in sorted(modules):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - rank 0 reports a broken installation
            pass

"""Units: what h5mdtool stores each field in, and factors from the units files declare.

H5MD's units module writes unit strings such as ``nm``, ``Angstrom ps-1`` or ``10 pm``;
readers turn values into h5mdtool's units (nm, ps, nm/ps, kJ/(mol nm)) with
:func:`unit_factor`, and writers declare :data:`UNITS`.
"""

import re

import numpy as np

from ..parallel.errors import InputError

#: Per-atom fields a frame may hold, in the order h5mdtool writes them.
ATOM_FIELDS = ("positions", "velocities", "forces")
#: Everything a frame may hold besides step and time.
FIELDS = ATOM_FIELDS + ("box",)
#: h5mdtool's units for each field (H5MD notation).
UNITS = {"positions": "nm", "velocities": "nm ps-1", "forces": "kJ mol-1 nm-1", "box": "nm", "time": "ps"}
#: What each field is called in messages.
NAMES = {"positions": "positions", "velocities": "velocities", "forces": "forces", "box": "box"}

ANGSTROM_PER_NM = 10.0

#: Factors to h5mdtool's units for the unit symbols met in MD files (no MDAnalysis import).
TO_INTERNAL = {
    "length": {"nm": 1.0, "Angstrom": 0.1, "angstrom": 0.1, "A": 0.1, "pm": 1e-3, "fm": 1e-6, "um": 1e3, "m": 1e9},
    "time": {"ps": 1.0, "fs": 1e-3, "ns": 1e3, "us": 1e6, "ms": 1e9, "s": 1e12},
    "speed": {"nm ps-1": 1.0, "nm/ps": 1.0, "Angstrom ps-1": 0.1, "Angstrom/ps": 0.1, "Angstrom fs-1": 100.0,
              "Angstrom/fs": 100.0, "A ps-1": 0.1, "m s-1": 1e-3, "m/s": 1e-3, "nm fs-1": 1e3},
    "force": {"kJ mol-1 nm-1": 1.0, "kJ/(mol*nm)": 1.0, "kJ mol-1 Angstrom-1": 10.0,
              "kJ/(mol*Angstrom)": 10.0, "kcal mol-1 Angstrom-1": 41.84, "kcal/(mol*Angstrom)": 41.84},
}
#: MDAnalysis's target unit for each kind, when its tables are needed.
MDANALYSIS_TARGET = {"length": "nm", "time": "ps", "speed": "nm/ps", "force": "kJ/(mol*nm)"}


def text(value):
    """An HDF5 string attribute (bytes, numpy string or str) as str."""
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("ascii", "replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return text(value.item())
    return str(value)


def unit_factor(unit, kind, where):
    """Factor turning values in *unit* (H5MD notation) into h5mdtool's unit of *kind*.

    Raises
    ------
    InputError
        For a unit h5mdtool cannot convert.
    """
    unit = text(unit).strip()
    number = 1.0
    match = re.fullmatch(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s+(.+)", unit)
    if match:
        number, unit = float(match.group(1)), match.group(2).strip()
    table = TO_INTERNAL[kind]
    if unit in table:
        return number * table[unit]
    try:
        from MDAnalysis import units
        from MDAnalysis.coordinates.H5MD import H5MDReader

        name = {"speed": "velocity"}.get(kind, kind)
        translated = H5MDReader._unit_translation[name][unit]
        return number * float(units.get_conversion_factor(kind, translated, MDANALYSIS_TARGET[kind]))
    except (KeyError, ValueError, TypeError, ImportError):
        raise InputError(f"{where} has unit {unit!r}, which h5mdtool cannot convert") from None


def unit_of(dataset):
    """The ``unit`` attribute of *dataset* as str, or None when absent or unreadable."""
    try:
        unit = dataset.attrs.get("unit")
    except Exception:  # noqa: BLE001 - an unreadable unit only loses the unit check
        return None
    if isinstance(unit, np.ndarray) and unit.shape == ():
        unit = unit.item()
    return unit.decode("utf-8", "replace") if isinstance(unit, bytes) else unit if isinstance(unit, str) else None

"""LAMMPS DCD trajectories (``--format LAMMPS``): CHARMM DCD bytes, LAMMPS's time step.

LAMMPS's ``dump dcd`` writes the same bytes as CHARMM (read by :mod:`h5mdtool.formats.dcd`),
but its header's DELTA is the time step in the LAMMPS time unit, not in AKMA units, and
ISTART and NSAVC are LAMMPS time steps. As MDAnalysis's ``LAMMPS.DCDReader`` does by
default, the time unit is taken as fs and lengths as Angstrom (LAMMPS ``units real``):
steps are ``ISTART + frame * NSAVC`` and times ``step * DELTA`` converted from fs to ps.

LAMMPS files end in ``.dcd`` like CHARMM ones, so this format is chosen by name only.
"""

import numpy as np

from .dcd import DCDFormat

#: LAMMPS ``units real``: the time unit of DELTA, as MDAnalysis's LAMMPS DCDReader assumes.
TIME_UNIT = "fs"


def frame_interval_ps(header, unit=TIME_UNIT):
    """Time between two frames of a LAMMPS DCD, in ps (DELTA is in *unit*)."""
    from MDAnalysis import units

    return float(units.convert(header["delta"], unit, "ps")) * (int(header["nsavc"]) or 1)


class LAMMPSFormat(DCDFormat):
    """LAMMPS DCD trajectories (positions in Angstrom, time step in fs)."""

    name = "LAMMPS"
    extensions = ()

    @classmethod
    def scan(cls, path, on_truncated="error"):
        segment = super().scan(path, on_truncated)
        details = segment.details
        interval = frame_interval_ps({"delta": details["delta"], "nsavc": details["nsavc"]})
        frames = np.arange(segment.n_frames, dtype=np.int64)
        segment.time = (frames + details["istart"] / details["nsavc"]) * interval
        details.update(dt_ps=interval, time_unit=TIME_UNIT)
        return segment

"""Writing ``bench rmsd``'s RMSD table: NumPy ``.npy``, ``.csv`` or GROMACS ``.xvg``.

Columns: frame, time, the fit group's RMSD, then each RMSD group's (MDAnalysis's
``results.rmsd`` layout). Time in ps or ns, RMSD in Angstrom or nm; the ``.xvg`` file has
the header ``gmx rms`` writes (title, axis labels with units, one legend per group), so
xmgrace and GROMACS users' scripts read it unchanged.
"""

import numpy as np

from ..parallel.errors import UsageError

FORMATS = (".npy", ".csv", ".xvg")
TIME_UNITS = {"ps": 1.0, "ns": 1e-3}
RMSD_UNITS = {"A": 1.0, "nm": 0.1}


def output_format(path):
    """The format of an RMSD output path, from its extension.

    Raises
    ------
    UsageError
        For any other extension.
    """
    for extension in FORMATS:
        if str(path).lower().endswith(extension):
            return extension[1:]
    raise UsageError(f"{path}: --rmsd-out must end in .npy, .csv or .xvg")


def converted(rmsd, time_unit="ps", rmsd_unit="A"):
    """A copy of *rmsd* (frame, time in ps, RMSDs in Angstrom) in the given units."""
    if time_unit not in TIME_UNITS or rmsd_unit not in RMSD_UNITS:
        raise UsageError(f"units must be time {'/'.join(TIME_UNITS)} and RMSD {'/'.join(RMSD_UNITS)}")
    table = np.array(rmsd, dtype=np.float64, copy=True)
    table[:, 1] *= TIME_UNITS[time_unit]
    table[:, 2:] *= RMSD_UNITS[rmsd_unit]
    return table


def write_rmsd(handle, rmsd, labels, fmt, time_unit="ps", rmsd_unit="A", command=None):
    """Write the RMSD table to an open binary *handle* in format *fmt* (npy, csv or xvg)."""
    table = converted(rmsd, time_unit, rmsd_unit)
    if fmt == "npy":
        np.save(handle, table)
        return
    if fmt == "csv":
        names = [f"rmsd_{rmsd_unit} ({label})".replace('"', "'") for label in labels]
        header = ",".join(["frame", f"time_{time_unit}"] + [f'"{name}"' for name in names])
        np.savetxt(handle, table, delimiter=",", header=header, comments="",
                   fmt=["%d", "%.10g"] + ["%.10g"] * (table.shape[1] - 2))
        return
    lines = ["# This file was created by h5mdtool bench rmsd"]
    if command:
        lines.append(f"# Command line: {command}")
    unit = "\\cE\\C" if rmsd_unit == "A" else "nm"
    lines += ['@    title "RMSD"', f'@    xaxis  label "Time ({time_unit})"', f'@    yaxis  label "RMSD ({unit})"',
              "@TYPE xy", f'@ subtitle "after lsq fit to {labels[0]}"']
    if len(labels) > 1:
        lines.append("@ view 0.15, 0.15, 0.75, 0.85")
        lines.append("@ legend on")
        lines += [f'@ s{number} legend "{label}"' for number, label in enumerate(labels)]
    handle.write(("\n".join(lines) + "\n").encode())
    np.savetxt(handle, table[:, 1:], fmt="%12.7f")

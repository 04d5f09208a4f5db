"""The oracle of the format tests: MDAnalysis reading a source, frame by frame, compared with
what h5mdtool wrote (read back with h5py and with MDAnalysis's H5MD reader)."""

import os
import warnings

import h5py
import numpy as np

TRAJ = "particles/trajectory"
#: Relative tolerances: values pass through at most three float32 roundings (source unit,
#: h5mdtool's unit, MDAnalysis's unit read back) plus unit factors applied in float64.
RTOL = {"positions": 3e-7, "velocities": 5e-7, "forces": 5e-7}


def mdanalysis_reader(path, format=None, **kwargs):
    """MDAnalysis's reader of *path* (format as MDAnalysis names it), warnings silenced."""
    from MDAnalysis.coordinates.core import get_reader_for

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_reader_for(path, format=format)(path, **kwargs)


def source_frames(path, format=None, step=None, **kwargs):
    """Every frame of *path* as MDAnalysis reads it: list of dicts (Angstrom, ps, A/ps, kJ/(mol A)).

    *step* maps ``(ts, frame)`` to the frame's step when MDAnalysis has none of its own.
    """
    reader = mdanalysis_reader(path, format, **kwargs)
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for number, ts in enumerate(reader):
            frame = {"positions": ts.positions.copy(), "time": float(ts.time),
                     "dimensions": None if ts.dimensions is None else ts.dimensions.copy(),
                     "step": step(ts, number) if step else int(ts.data.get("step", number))}
            for name in ("velocities", "forces"):
                if getattr(ts, f"has_{name}"):
                    frame[name] = getattr(ts, name).copy()
            frames.append(frame)
    reader.close()
    return frames


def compare_output(output, frames, fields=("positions", "velocities", "forces")):
    """Assert that the H5MD *output* holds *frames* (from :func:`source_frames`)."""

    with h5py.File(output, "r") as handle:
        steps = handle[f"{TRAJ}/position/step"][()]
        np.testing.assert_array_equal(steps, [frame["step"] for frame in frames])
        for name, element in (("velocities", "velocity"), ("forces", "force")):
            expected = name in fields and name in frames[0]
            assert (element in handle[TRAJ]) == expected, (name, list(handle[TRAJ]))
    copy = mdanalysis_reader(output, "H5MD")
    assert copy.n_frames == len(frames)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for number, ts in enumerate(copy):
            frame = frames[number]
            for name in ("positions", "velocities", "forces"):
                if name in frame and name in fields:
                    np.testing.assert_allclose(getattr(ts, name), frame[name], rtol=RTOL[name], atol=1e-6,
                                               err_msg=f"{name} of frame {number}")
            np.testing.assert_allclose(ts.time, frame["time"], rtol=1e-12, atol=1e-12, err_msg=f"time of frame {number}")
            if frame["dimensions"] is None or not np.any(frame["dimensions"][:3]):
                assert ts.dimensions is None or not np.any(ts.dimensions[:3]), number
            else:
                np.testing.assert_allclose(ts.dimensions[:3], frame["dimensions"][:3], rtol=1e-6)
                np.testing.assert_allclose(ts.dimensions[3:], frame["dimensions"][3:], atol=1e-4)
    copy.close()


def listing(path):
    """Names in the directory of *path* (to show nothing was written beside an input)."""
    return sorted(os.listdir(os.path.dirname(os.path.abspath(path))))

"""A corpus of H5MD files written by other programs (or by hand as others write them), built
by the tests: nothing large is committed. Each builder returns the path it wrote and the
facts ``info`` must report (``expected``)."""

import os

import h5py
import numpy as np

N_FRAMES, N_ATOMS = 6, 20
STRINGS = h5py.string_dtype()


def _positions(n_frames=N_FRAMES, n_atoms=N_ATOMS, seed=5):
    return np.random.default_rng(seed).uniform(0.0, 3.0, (n_frames, n_atoms, 3)).astype(np.float32)


def pyh5md_explicit(directory):
    """pyh5md: time-dependent elements (explicit step/time), a (n, 3) box, two particle groups."""
    import pyh5md

    path = os.path.join(directory, "pyh5md_explicit.h5md")
    positions = _positions()
    with pyh5md.File(path, "w", author="A. Author", creator="pyh5md-test", creator_version="1.2") as f:
        atoms = f.particles_group("atoms")
        atoms.create_box(dimension=3, boundary=["periodic"] * 3, store="time", data=np.full(3, 3.0), time=True)
        position = pyh5md.element(atoms, "position", store="time", data=positions[0], time=True)
        solvent = f.particles_group("solvent")
        solvent.create_box(dimension=3, boundary=["none"] * 3)
        water = pyh5md.element(solvent, "position", store="time", data=positions[0, :5], time=True)
        for frame in range(N_FRAMES):
            position.append(positions[frame], 100 * frame, 0.25 * frame)
            atoms.box.edges.append(np.full(3, 3.0 + frame), 100 * frame, 0.25 * frame)
            water.append(positions[frame, :5], 100 * frame, 0.25 * frame)
    expected = {"particle_group": "/particles/atoms", "n_frames": N_FRAMES, "n_atoms": N_ATOMS,
                "elements": ["position"], "groups": ["/particles/atoms", "/particles/solvent"],
                "step": {"mode": "explicit", "first": 0, "last": 500, "interval": 100, "regular": True},
                "time": {"mode": "explicit", "first": 0.0, "last": 1.25, "interval": 0.25, "regular": True},
                "box": {"kind": "cuboid", "time_dependent": True, "boundary": ["periodic"] * 3, "first_edges": [3.0, 3.0, 3.0]}}
    return path, expected


def pyh5md_linear(directory):
    """pyh5md: a linear element (fixed step and time: scalar increment and offset), a fixed (3,) box."""
    import pyh5md

    path = os.path.join(directory, "pyh5md_linear.h5md")
    positions = _positions()
    with pyh5md.File(path, "w", author="A. Author", creator="pyh5md-test", creator_version="1.2") as f:
        atoms = f.particles_group("atoms")
        atoms.create_box(dimension=3, boundary=["periodic", "periodic", "none"], store="fixed", data=np.array([4.0, 4.0, 0.0]))
        position = pyh5md.element(atoms, "position", store="linear", data=positions[0], step=10, step_offset=1000,
                                  time=0.5, time_offset=20.0)
        for frame in range(N_FRAMES):
            position.append(positions[frame])
    expected = {"particle_group": "/particles/atoms", "n_frames": N_FRAMES, "n_atoms": N_ATOMS, "elements": ["position"],
                "groups": ["/particles/atoms"],
                "step": {"mode": "fixed", "first": 1000, "last": 1000 + 10 * (N_FRAMES - 1), "interval": 10, "regular": True},
                "time": {"mode": "fixed", "first": 20.0, "last": 20.0 + 0.5 * (N_FRAMES - 1), "interval": 0.5, "regular": True},
                "box": {"kind": "cuboid", "time_dependent": False, "boundary": ["periodic", "periodic", "none"],
                        "first_edges": [4.0, 4.0, 0.0]}}
    return path, expected


def mdanalysis_writer(directory, psf, dcd):
    """MDAnalysis's H5MDWriter (float32 time, its own chunks) from the first 20 AdK frames."""
    import warnings

    import MDAnalysis as mda

    path = os.path.join(directory, "mdanalysis.h5md")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(psf, dcd)
        with mda.Writer(path, n_atoms=universe.atoms.n_atoms, author="A. Author") as writer:
            for _ in universe.trajectory[:20]:
                writer.write(universe.atoms)
        times = [ts.time for ts in universe.trajectory[:20]]
        steps = [ts.data.get("step", ts.frame) for ts in universe.trajectory[:20]]
    with h5py.File(path, "r") as f:
        group = f["particles/trajectory"]
        stored_steps = group["position/step"][:]
        stored_times = group["position/time"][:]
        assert group["position/time"].dtype == np.float32  # what makes "irregular" a false verdict
    expected = {"particle_group": "/particles/trajectory", "n_frames": 20, "n_atoms": 3341, "elements": ["position"],
                "groups": ["/particles/trajectory"],
                "step": {"mode": "explicit", "first": int(stored_steps[0]), "last": int(stored_steps[-1]),
                         "interval": int(stored_steps[1] - stored_steps[0]), "regular": True},
                "time": {"mode": "explicit", "first": float(stored_times[0]), "last": float(stored_times[-1]), "regular": True},
                "source_steps": steps, "source_times": times}
    return path, expected


def _h5md_header(f):
    f.create_group("h5md").attrs["version"] = np.array([1, 1], np.int32)
    f["h5md"].create_group("author").attrs["name"] = "A. Author"
    creator = f["h5md"].create_group("creator")
    creator.attrs["name"], creator.attrs["version"] = "hand", "1"


def plain_fixed_series(directory, box):
    """Plain h5py: step and time stored fixed (scalar increment, attribute offset); a box *box*."""
    path = os.path.join(directory, f"plain_fixed_{box}.h5md")
    positions = _positions()
    with h5py.File(path, "w") as f:
        _h5md_header(f)
        group = f.create_group("particles/trajectory")
        position = group.create_group("position")
        position["value"] = positions
        position["value"].attrs["unit"] = "nm"
        position["step"] = np.int64(5)
        position["step"].attrs["offset"] = np.int64(50)
        position["time"] = 0.01
        position["time"].attrs["offset"] = 1.0
        position["time"].attrs["unit"] = "ps"
        box_group = group.create_group("box")
        box_group.attrs["dimension"] = np.int32(3)
        boundary = ["periodic"] * 3 if box != "partial" else ["periodic", "none", "periodic"]
        box_group.attrs["boundary"] = np.array(boundary, dtype=STRINGS)
        first = None
        if box == "vector":
            box_group["edges"] = np.array([3.5, 3.5, 3.5], np.float32)
            first, kind, dependent = [3.5, 3.5, 3.5], "cuboid", False
        elif box in ("matrix", "partial"):
            box_group["edges"] = np.diag([3.5, 3.0, 2.5]).astype(np.float32)
            first, kind, dependent = np.diag([3.5, 3.0, 2.5]).tolist(), "orthorhombic (stored as a matrix)", False
        elif box == "series":
            edges = box_group.create_group("edges")
            edges["value"] = np.tile(np.array([[3.0, 3.1, 3.2]], np.float32), (N_FRAMES, 1))
            edges["step"], edges["time"] = position["step"], position["time"]
            first, kind, dependent = [3.0, 3.1, 3.2], "cuboid", True
    expected = {"particle_group": "/particles/trajectory", "n_frames": N_FRAMES, "n_atoms": N_ATOMS, "elements": ["position"],
                "groups": ["/particles/trajectory"],
                "step": {"mode": "fixed", "first": 50, "last": 50 + 5 * (N_FRAMES - 1), "interval": 5, "regular": True},
                "time": {"mode": "fixed", "first": 1.0, "last": 1.0 + 0.01 * (N_FRAMES - 1), "interval": 0.01, "regular": True},
                "box": {"kind": kind, "time_dependent": dependent, "boundary": boundary, "first_edges": first}}
    return path, expected


#: A filter id no HDF5 installation provides (outside the registered range).
UNKNOWN_FILTER = 33000


def unknown_filter(directory, filter_id=UNKNOWN_FILTER):
    """Positions, step and box edges stored with a filter this HDF5 does not have."""
    path = os.path.join(directory, f"filter_{filter_id}.h5md")
    positions = _positions()
    with h5py.File(path, "w") as f:
        _h5md_header(f)
        group = f.create_group("particles/trajectory")
        position = group.create_group("position")

        def encoded(parent, name, shape, chunks, dtype):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk(chunks)
            dcpl.set_filter(filter_id, h5py.h5z.FLAG_OPTIONAL, (1, 2, 3))
            space = h5py.h5s.create_simple(shape, (h5py.h5s.UNLIMITED,) + shape[1:])
            dataset = h5py.Dataset(h5py.h5d.create(parent.id, name.encode(), dtype, space, dcpl=dcpl))
            for row in range(0, shape[0], chunks[0]):
                dataset.id.write_direct_chunk((row,) + (0,) * (len(shape) - 1), b"\x07" * 64, filter_mask=0)
            return dataset

        encoded(position, "value", positions.shape, (1,) + positions.shape[1:], h5py.h5t.NATIVE_FLOAT).attrs["unit"] = "nm"
        encoded(position, "step", (N_FRAMES,), (N_FRAMES,), h5py.h5t.NATIVE_INT64)
        position["time"] = 0.5 * np.arange(N_FRAMES)
        position["time"].attrs["unit"] = "ps"
        box_group = group.create_group("box")
        box_group.attrs["dimension"] = np.int32(3)
        box_group.attrs["boundary"] = np.array(["periodic"] * 3, dtype=STRINGS)
        edges = box_group.create_group("edges")
        encoded(edges, "value", (N_FRAMES, 3), (N_FRAMES, 3), h5py.h5t.NATIVE_FLOAT).attrs["unit"] = "nm"
        edges["step"], edges["time"] = position["step"], position["time"]
    return path

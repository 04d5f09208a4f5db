"""The harness's own reading of an H5MD output, with plain h5py (no h5mdtool code).

:func:`read_output` normalises what H5MD 1.1 allows: explicit or fixed (``offset``) step
and time, time-dependent or fixed box edges given as (3, 3), (3,) or per frame, any unit
MDAnalysis knows (converted with MDAnalysis's factors to nm, ps, nm/ps, kJ/(mol nm)).
"""

import numpy as np

from .oracle import _factor
from .spec import attribute_text

UNIT_KIND = {"position": ("length", "nm"), "velocity": ("speed", "nm/ps"), "force": ("force", "kJ/(mol*nm)")}


def _mda_unit(kind, unit):
    from MDAnalysis.coordinates.H5MD import H5MDReader

    table = {"length": "length", "speed": "velocity", "force": "force", "time": "time"}[kind]
    return H5MDReader._unit_translation[table][unit]


def _series(group, name, n):
    if name not in group:
        return None, None
    dataset = group[name]
    unit = attribute_text(dataset.attrs["unit"]) if "unit" in dataset.attrs else None
    if dataset.shape == ():
        offset = dataset.attrs.get("offset", 0)
        values = offset + dataset[()] * np.arange(n)
    else:
        values = dataset[:]
    return np.asarray(values), unit


def read_element(group, name):
    """``{"raw", "values" (float64, h5mdtool units), "factor", "steps", "times", "unit"}``."""
    element = group[name]
    value = element["value"]
    raw = value[...]
    n = raw.shape[0]
    kind, target = UNIT_KIND[name]
    unit = attribute_text(value.attrs["unit"]) if "unit" in value.attrs else None
    factor = 1.0 if unit is None else _factor(kind, _mda_unit(kind, unit), target)
    steps, _ = _series(element, "step", n)
    times, time_unit = _series(element, "time", n)
    if times is not None and time_unit is not None:
        times = times * _factor("time", _mda_unit("time", time_unit), "ps")
    return {"raw": raw, "values": raw.astype(np.float64) * factor, "factor": factor, "unit": unit,
            "steps": None if steps is None else steps.astype(np.int64), "times": times,
            "dtype": str(raw.dtype), "attrs": dict(value.attrs)}


def read_output(path, group_name="trajectory"):
    """Everything the checks need from an H5MD file h5mdtool wrote."""
    import h5py

    from h5mdtool.h5md.codecs import register_plugins

    register_plugins()  # hdf5plugin's filters, whatever this process read before
    with h5py.File(path, "r") as handle:
        document = {"particle_groups": list(handle.get("particles", {}).keys())}
        group = handle["particles"][group_name]
        for name in ("position", "velocity", "force"):
            document[name] = read_element(group, name) if name in group else None
        box = group["box"]
        boundary = [attribute_text(b) for b in np.atleast_1d(box.attrs.get("boundary", []))]
        document["boundary"] = boundary
        document["edges"] = None
        n = document["position"]["raw"].shape[0]
        if "edges" in box:
            edges = box["edges"]
            dataset = edges["value"] if isinstance(edges, h5py.Group) else edges
            unit = attribute_text(dataset.attrs["unit"]) if "unit" in dataset.attrs else None
            factor = 1.0 if unit is None else _factor("length", _mda_unit("length", unit), "nm")
            values = dataset[...].astype(np.float64) * factor
            if isinstance(edges, h5py.Group):
                per_frame = values
            else:
                per_frame = np.repeat(values[None], n, axis=0)
            if per_frame.ndim == 2:  # (n, 3): diagonal
                per_frame = np.stack([np.diag(row) for row in per_frame])
            document["edges"] = per_frame
            document["edges_raw_dtype"] = str(dataset.dtype)
            document["edges_factor"] = factor
        document["connectivity"] = {}
        if "connectivity" in handle:
            handle["connectivity"].visititems(
                lambda name, obj: document["connectivity"].__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
        document["observables"] = sorted(handle["observables"].keys()) if "observables" in handle else []
        document["parameters"] = sorted(handle["parameters"].keys()) if "parameters" in handle else []
        document["parameter_attrs"] = sorted(handle["parameters"].attrs.keys()) if "parameters" in handle else []
    return document

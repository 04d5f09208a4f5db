"""Relayout: what convert carries over from an H5MD input besides the rewritten trajectory.

convert rewrites positions, velocities, forces, box, step and time of one particle group
with the new layout. Everything else in the source file (other particle groups and
elements, observables, connectivity, parameters, author and modules) is copied unchanged
by rank 0 into the finished file, after the parallel write. When frames or atoms were
selected, time- or atom-dependent objects would no longer match and are left out; the
provenance lists what was copied and what was not.
"""

import json

from .layout import PARTICLES, PROVENANCE

#: Elements of the particle group that convert writes itself.
REWRITTEN = ("position", "velocity", "force", "box")


def carry_over(source, destination, particle_group, selection_applied):
    """Copy the objects of *source* that convert did not rewrite into *destination*.

    Parameters
    ----------
    source, destination : str
        H5MD input and the newly written file (closed; opened here, serially).
    particle_group : str
        Path of the source particle group that was rewritten (``particles/<name>``).
    selection_applied : bool
        Frames or atoms were selected: leave out observables and per-particle objects.

    Returns
    -------
    dict
        ``copied`` and ``skipped`` HDF5 paths, and the source's creator.
    """
    import h5py

    copied, skipped = [], []
    with h5py.File(source, "r") as src, h5py.File(destination, "r+") as dst:
        def copy(path, target_path=None):
            target_path = target_path or path
            if target_path in dst:
                skipped.append(f"/{path} (already written by h5mdtool)")
                return
            parent, _, name = target_path.rpartition("/")
            src.copy(src[path], dst.require_group(parent) if parent else dst, name=name)
            copied.append(f"/{path}")

        creator = {k: _text(v) for k, v in src["h5md/creator"].attrs.items()} if "h5md/creator" in src else {}
        if "h5md/author" in src:
            author = dst["h5md/author"]
            for key in list(author.attrs):
                del author.attrs[key]
            for key, value in src["h5md/author"].attrs.items():
                author.attrs[key] = value
            copied.append("/h5md/author")
        for name in src.get("h5md/modules", {}):
            copy(f"h5md/modules/{name}")
        for name in src:
            if name in ("h5md", "particles"):
                continue
            if name == "parameters":
                for child in src[name]:
                    copy(f"parameters/{child}")
            elif name == "observables" and selection_applied:
                skipped.append("/observables (frames or atoms were selected)")
            else:
                copy(name)
        for name in src.get("particles", {}):
            path = f"particles/{name}"
            if path != particle_group:
                if selection_applied:
                    skipped.append(f"/{path} (frames or atoms were selected)")
                else:
                    copy(path)
                continue
            for element in src[path]:
                if element in REWRITTEN:
                    continue
                if selection_applied:
                    skipped.append(f"/{path}/{element} (frames or atoms were selected)")
                else:
                    copy(f"{path}/{element}", f"{PARTICLES}/{element}")
        record = json.loads(_text(dst[PROVENANCE].attrs["json"]))
        record["relayout"] = {"source_creator": creator, "copied": copied, "skipped": skipped}
        dst[PROVENANCE].attrs["json"] = json.dumps(record, sort_keys=True)
    return record["relayout"]


def _text(value):
    if isinstance(value, bytes):
        return value.decode()
    if hasattr(value, "item"):
        value = value.item() if getattr(value, "ndim", 1) == 0 else value.tolist()
    return value if isinstance(value, (str, int, float, list)) else str(value)

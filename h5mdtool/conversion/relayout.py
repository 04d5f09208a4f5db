"""Relayout: what convert carries over from an H5MD input besides the rewritten trajectory.

convert rewrites positions, velocities, forces, box, step and time of one particle group
with the new layout. Everything else in the source file is copied by rank 0 into the
finished file, after the parallel write, so that it still describes the frames and atoms
the new file holds:

* time-dependent elements (observables, other elements of any particle group) keep the
  entries whose step is one of the written frames' steps;
* per-particle data of the rewritten group (``species``, ``mass``, ``charge``, ``id``,
  time-dependent ones too) keep the selected atoms, in order;
* ``/connectivity`` datasets of particle index pairs (or tuples) keep the bonds whose atoms
  were all selected, renumbered; anything that cannot be made consistent is left out;
* ``/h5md/author`` is the source's unless ``--author`` was given;
* every group copied, reduced or rewritten keeps the source group's attributes (a particle
  group's box ``dimension`` and ``boundary``, those of ``/parameters``, ...).

The provenance record lists what was copied, what was reduced and what was left out, and why.
"""

import json

import numpy as np

from ..h5md.writer import PARTICLES, PROVENANCE, fixed_ascii_array
from ..parallel.mpi import closing_h5

#: Elements of the particle group that convert writes itself.
REWRITTEN = ("position", "velocity", "force", "box")
#: Memory for one block of rows when a time-dependent value is copied.
COPY_BLOCK_BYTES = 64 * 1024**2


class _Copier:
    """Copies objects from *src* to *dst*, reducing them to the kept steps and atoms."""

    def __init__(self, src, dst, steps, atoms, n_atoms, layout=None):
        self.src, self.dst = src, dst
        self.layout = layout
        self.steps = None if steps is None else np.asarray(steps, np.int64)
        self.atoms = None if atoms is None else np.asarray(atoms, np.int64)
        self.n_atoms = n_atoms
        self.copied, self.reduced, self.skipped = [], [], []

    def _parent(self, target):
        parent, _, name = target.rpartition("/")
        return (self.dst.require_group(parent) if parent else self.dst), name

    def attributes(self, path, target=None):
        """Give the group at *target* (made if missing) the attributes of the source group at
        *path* it does not have yet, with their stored types."""
        target = target or path
        source = self.src[path]
        group = self.dst.require_group(target)
        for name in source.attrs:
            if name not in group.attrs:
                group.attrs.create(name, source.attrs[name], dtype=source.attrs.get_id(name).dtype)

    def copy(self, path, target=None):
        """Copy the object at *path* unchanged (to *target*), unless the destination has it."""
        target = target or path
        if target in self.dst:
            self.skipped.append(f"/{path} (the new file already has /{target})")
            return
        parent, name = self._parent(target)
        self.src.copy(self.src[path], parent, name=name)
        self.copied.append(f"/{path}")

    def element(self, path, target=None, per_particle=False):
        """Copy an element, keeping the kept steps (time-dependent) and the selected atoms."""
        import h5py

        target = target or path
        obj = self.src[path]
        time_dependent = isinstance(obj, h5py.Group) and "value" in obj and "step" in obj
        atoms = self.atoms if per_particle else None
        if isinstance(obj, h5py.Group) and "value" in obj and not time_dependent and self.steps is not None:
            self.skipped.append(f"/{path} (frames were selected and it has no step to select them by)")
            return
        if not time_dependent:
            if isinstance(obj, h5py.Dataset) and atoms is not None and obj.ndim >= 1 and obj.shape[0] == self.n_atoms:
                self._dataset(obj, target, obj[()][atoms])
                self.reduced.append(f"/{path} (the selected atoms)")
            elif isinstance(obj, h5py.Group) and (atoms is not None or self.steps is not None or self.layout is not None):
                for child in obj:
                    self.element(f"{path}/{child}", f"{target}/{child}", per_particle)
                if target in self.dst or not len(obj):  # not when every member was left out
                    self.attributes(path, target)
            else:
                self.copy(path, target)
            return
        value = obj["value"]
        rows = self._rows(obj, value.shape[0], path)
        if rows is None:
            return
        keep_atoms = atoms is not None and value.ndim >= 2 and value.shape[1] == self.n_atoms
        frame_shaped = self.layout is not None and value.ndim == 3
        if rows is Ellipsis and not keep_atoms and not frame_shaped:
            self.copy(path, target)
            return
        self.attributes(path, target)
        self._stream(value, f"{target}/value", None if rows is Ellipsis else rows, atoms if keep_atoms else None,
                     frame_shaped)
        for name in ("step", "time"):
            if name in obj:
                series = obj[name]
                if rows is Ellipsis:
                    self.src.copy(series, self.dst.require_group(target), name=name)
                elif series.shape == ():
                    self._fixed_series(series, f"{target}/{name}", rows)
                else:
                    self._dataset(series, f"{target}/{name}", series[()][rows])
        what = [text for text, done in (("the kept frames", rows is not Ellipsis), ("the selected atoms", keep_atoms),
                                        ("frame-shaped chunks", frame_shaped)) if done]
        self.reduced.append(f"/{path} ({' and '.join(what)})")

    def _fixed_series(self, series, target, rows):
        """A fixed step or time (``offset`` + increment x row) for the kept *rows*.

        Rows kept at a regular stride stay fixed, with the offset of the first kept row and
        the increment times the stride; other selections are written out as explicit values.
        """
        increment = series[()]
        offset = series.attrs.get("offset", 0)
        values = offset + increment * np.asarray(rows, np.int64)
        strides = np.unique(np.diff(rows))
        parent, name = self._parent(target)
        if len(strides) <= 1:
            stride = int(strides[0]) if len(strides) else 1
            dataset = parent.create_dataset(name, data=np.asarray(increment * stride, series.dtype))
            for key, value in series.attrs.items():
                dataset.attrs[key] = value
            dataset.attrs["offset"] = np.asarray(values[0] if len(values) else offset,
                                                 np.asarray(offset).dtype if "offset" in series.attrs else series.dtype)
        else:
            self._dataset(series, target, np.asarray(values, series.dtype))
            if "offset" in parent[name].attrs:
                del parent[name].attrs["offset"]

    def _stream(self, template, target, rows, atoms, frame_shaped):
        """Copy rows *rows* (all when None) and atoms *atoms* of a time-dependent value, in blocks.

        With *frame_shaped*, the copy gets the new file's chunks (whole frames) and codec.
        """
        n = template.shape[0] if rows is None else len(rows)
        shape = (n,) + ((len(atoms),) if atoms is not None else template.shape[1:2]) + template.shape[2:]
        parent, name = self._parent(target)
        if frame_shaped and n:
            options = self.layout.dataset_options(n, shape[1])
            chunks = options["chunks"] or (1,) + shape[1:]
            options["chunks"] = (min(chunks[0], n), shape[1], 1 if self.layout.split_xyz else shape[2])
            options.pop("fill_time", None)
        else:
            options = self._options(template, shape)
        dataset = parent.create_dataset(name, shape=shape, dtype=template.dtype, **options)
        for key, value in template.attrs.items():
            dataset.attrs[key] = value
        row_bytes = max(1, int(np.prod(template.shape[1:], dtype=np.int64)) * template.dtype.itemsize)
        step = max(1, COPY_BLOCK_BYTES // row_bytes)
        for first in range(0, n, step):
            wanted = np.arange(first, min(n, first + step)) if rows is None else rows[first:first + step]
            data = template[int(wanted[0]):int(wanted[-1]) + 1][wanted - wanted[0]]
            dataset[first:first + len(wanted)] = data if atoms is None else data[:, atoms]

    def _options(self, template, shape):
        """Chunks and filters like *template*'s, fitted to *shape*."""
        options = {}
        if template.chunks and len(shape) and all(shape):
            options["chunks"] = tuple(min(c, s) for c, s in zip(template.chunks, shape))
            if template.compression in ("gzip", "lzf"):
                options.update(compression=template.compression, compression_opts=template.compression_opts,
                               shuffle=template.shuffle)
        return options

    def _rows(self, group, length, path):
        """Rows of a time-dependent element whose step was kept (Ellipsis for all, None to skip)."""
        if self.steps is None:
            return Ellipsis
        step = group["step"]
        if step.shape == ():
            steps = float(step.attrs.get("offset", 0)) + float(step[()]) * np.arange(length)
        elif step.shape == (length,):
            steps = step[()]
        else:
            self.skipped.append(f"/{path} (its step does not match its value)")
            return None
        return np.flatnonzero(np.isin(np.asarray(steps, np.int64), self.steps))

    def _dataset(self, template, target, data):
        """A new dataset at *target* with *data*, the attributes of *template* and its filters."""
        parent, name = self._parent(target)
        options = self._options(template, np.shape(data)) if np.ndim(data) else {}
        dataset = parent.create_dataset(name, data=data, dtype=template.dtype, **options)
        for key, value in template.attrs.items():
            dataset.attrs[key] = value

    def connectivity(self, path):
        """Keep the bonds (index tuples) whose atoms were all selected, renumbered."""
        import h5py

        obj = self.src[path]
        if self.atoms is None:
            self.copy(path)
            return
        if not isinstance(obj, h5py.Dataset) or obj.ndim != 2 or obj.dtype.kind not in "iu":
            self.skipped.append(f"/{path} (atoms were selected; only datasets of particle index tuples are renumbered)")
            return
        pairs = obj[()]
        renumber = np.full(self.n_atoms, -1, np.int64)
        renumber[self.atoms] = np.arange(len(self.atoms))
        inside = (pairs >= 0) & (pairs < self.n_atoms)
        if not inside.all():
            self.skipped.append(f"/{path} (holds indices outside the particle group)")
            return
        kept = renumber[pairs]
        kept = kept[(kept >= 0).all(axis=1)]
        self._dataset(obj, path, kept.astype(obj.dtype))
        self.reduced.append(f"/{path} ({len(kept)} of {len(pairs)} entries: those of the selected atoms, renumbered)")


def carry_over(source, destination, particle_group, steps=None, atoms=None, n_atoms=None, keep_author=False,
               layout=None):
    """Copy the objects of *source* that convert did not rewrite into *destination*.

    Parameters
    ----------
    source, destination : str
        H5MD input and the newly written file (closed; opened here, serially).
    particle_group : str
        Path of the source particle group that was rewritten (``particles/<name>``).
    steps : array of int, optional
        Steps of the frames written, when frames were selected (time-dependent objects keep
        these entries); None when every frame was written.
    atoms : array of int, optional
        Indices of the atoms written, when atoms were selected; None for all.
    n_atoms : int, optional
        Atoms of the rewritten group in the source.
    keep_author : bool
        Keep the destination's ``/h5md/author`` (``--author`` was given).
    layout : h5mdtool.h5md.layout.Layout, optional
        Give time-dependent per-particle values (shape (frames, particles, D)) the new
        file's frame-shaped chunks and codec, as convert gives positions.

    Returns
    -------
    dict
        ``copied``, ``reduced`` and ``skipped`` HDF5 paths (with reasons), and the source's
        creator.
    """
    import h5py

    with h5py.File(source, "r") as src, closing_h5(h5py.File(destination, "r+")) as dst:
        copier = _Copier(src, dst, steps, atoms, n_atoms, layout)
        creator = {k: _text(v) for k, v in src["h5md/creator"].attrs.items()} if "h5md/creator" in src else {}
        if "h5md/author" in src and not keep_author:
            author = dst["h5md/author"]
            for key in list(author.attrs):
                del author.attrs[key]
            for key, value in src["h5md/author"].attrs.items():
                author.attrs[key] = value
            copier.copied.append("/h5md/author")
        for name in src.get("h5md/modules", {}):
            copier.copy(f"h5md/modules/{name}")
        for name in src:
            if name in ("h5md", "particles"):
                continue
            if name == "parameters":
                for child in src[name]:
                    copier.copy(f"parameters/{child}")
            elif name == "connectivity":
                for child in src[name]:
                    copier.connectivity(f"connectivity/{child}")
            elif name == "observables":
                for child in src[name]:
                    copier.element(f"observables/{child}")
            else:
                copier.copy(name)
            if name in dst and isinstance(src[name], h5py.Group):
                copier.attributes(name)
        if isinstance(src.get("particles"), h5py.Group):
            copier.attributes("particles")
        for name in src.get("particles", {}):
            path = f"particles/{name}"
            if path != particle_group:
                if path == PARTICLES:
                    copier.skipped.append(f"/{path} (the rewritten group {particle_group} takes its name)")
                else:
                    copier.element(path)
                    if path in dst and "box" not in dst[path]:
                        _ensure_box(src[path], dst[path], path, copier)
                continue
            copier.attributes(path, PARTICLES)
            for element in src[path]:
                if element not in REWRITTEN:
                    copier.element(f"{path}/{element}", f"{PARTICLES}/{element}", per_particle=True)
        _relink_series(src, dst, particle_group)
        record = json.loads(_text(dst[PROVENANCE].attrs["json"]))
        record["relayout"] = {"source_creator": creator, "copied": copier.copied, "reduced": copier.reduced,
                              "skipped": copier.skipped}
        dst[PROVENANCE].attrs["json"] = json.dumps(record, sort_keys=True)
    return record["relayout"]


def _relink_series(src, dst, particle_group):
    """Hard-link again the copied ``step`` and ``time`` datasets that are one object in the
    source (an element sharing its position's step and time, as H5MD asks of ``box/edges``):
    each element is copied on its own, which makes separate datasets of them."""
    import h5py

    copies = {}

    def visit(name, link):  # every link, not every object once: a hard-linked series has several names
        if not isinstance(link, h5py.HardLink) or name.rsplit("/", 1)[-1] not in ("step", "time"):
            return
        obj = src[name]
        if not isinstance(obj, h5py.Dataset):
            return
        if name.startswith(particle_group + "/"):
            element = name[len(particle_group) + 1:].split("/", 1)[0]
            if element in REWRITTEN:
                return
            name = PARTICLES + name[len(particle_group):]
        if name in dst:
            copies.setdefault(hash(obj.id), []).append(name)

    src.visititems_links(visit)
    for first, *others in copies.values():
        kept = dst[first]
        for name in others:
            copy = dst[name]
            if copy.id == kept.id or copy.shape != kept.shape or copy.dtype != kept.dtype \
                    or dict(copy.attrs) != dict(kept.attrs) or not np.array_equal(copy[()], kept[()]):
                continue
            del dst[name]
            dst[name] = kept


def _ensure_box(source_group, group, path, copier):
    """Give a carried-over particle group the box H5MD 1.1 asks of every particle group: the
    source's attributes when its box group was left out as empty, else an open box."""
    box = group.create_group("box")
    source_box = source_group.get("box")
    if source_box is not None and "dimension" in source_box.attrs and "boundary" in source_box.attrs:
        for name in ("dimension", "boundary"):
            box.attrs[name] = source_box.attrs[name]
        copier.copied.append(f"/{path}/box (its attributes; the group holds no data)")
        return
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = fixed_ascii_array(["none"] * 3)
    copier.reduced.append(f"/{path}: box added (dimension 3, boundary none), as H5MD 1.1 asks")


def _text(value):
    if isinstance(value, bytes):
        return value.decode()
    if hasattr(value, "item"):
        value = value.item() if getattr(value, "ndim", 1) == 0 else value.tolist()
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, (str, int, float, list)) else str(value)

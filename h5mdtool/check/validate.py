"""``h5mdtool validate``: H5MD 1.1 conformance, MDAnalysis readability, layout lint, sources.

Files are walked defensively: every HDF5 access goes through :class:`Access`, which turns any
failure into a finding, checks each link's type before following it and never follows an
external link. So wrong types where numbers belong, zero or huge dimensions and soft-link
loops all give findings, never a traceback; only a file that cannot be opened at all raises
:class:`~h5mdtool.parallel.errors.UnreadableError` (exit status 1).

Rules are listed in :data:`h5mdtool.check.findings.RULES` and docs/validation.md. Structural checks
read whole 1-D ``step`` and ``time`` datasets in blocks of a million entries and never loop
over frames in Python; the data checks (:mod:`h5mdtool.check.sanity`) read per-atom data once, in
bounded blocks of whole chunks. Nothing is read that the file only declares (see
:func:`h5access.storage`), and the MDAnalysis read check never runs on a file with external
links or external raw data (MDAnalysis would follow them).
"""

import os
import re
import sys
from dataclasses import dataclass

import numpy as np

from ..h5md.units import unit_of
from ..parallel.errors import H5mdToolError, UnreadableError, UsageError
from ..parallel.mpi import debug_enabled, entry_point, root_call
from ..parallel.sizes import human_bytes
from . import lint, sanity
from .findings import FileReport, ValidationReport
from .h5access import (
    Access, heartbeat, integers, is_dataset, is_group, isolated, join_path, keeps_data_elsewhere, load_filter_plugins,
    open_hdf5, reason, text_of
)

PROFILES = ("h5md", "mdanalysis", "all")
#: Per-particle vector elements: values ``[n][N][D]`` (time-dependent) or ``[N][D]``.
VECTORS = ("position", "velocity", "force", "image")
#: Standard per-particle elements (particle index on the axis after the frame axis).
PER_PARTICLE = VECTORS + ("mass", "species", "id", "charge")
#: Elements whose values carry a physical unit, with MDAnalysis's unit table for them.
UNIT_KINDS = {"position": "length", "velocity": "velocity", "force": "force", "edges": "length"}
#: Used when MDAnalysis's own table cannot be imported (MDAnalysis 2.x H5MDReader).
FALLBACK_MDA_UNITS = {
    "time": {"ps", "fs", "ns", "second", "sec", "s", "AKMA"},
    "length": {"Angstrom", "angstrom", "A", "nm", "pm", "fm"},
    "velocity": {"Angstrom ps-1", "A ps-1", "Angstrom fs-1", "A fs-1", "Angstrom AKMA-1", "A AKMA-1",
                 "nm ps-1", "nm ns-1", "pm ps-1", "m s-1"},
    "force": {"kJ mol-1 Angstrom-1", "kJ mol-1 nm-1", "Newton", "N", "J m-1", "kcal mol-1 Angstrom-1",
              "kcal mol-1 A-1"},
}
#: Unit symbols of the units module's "SI" system, prefixes, constants.
SI_SYMBOLS = {"m", "Ang", "L", "s", "Hz", "kg", "g", "u", "N", "dyn", "Pa", "bar", "atm", "poise", "J",
              "cal", "erg", "eV", "W", "K", "mol", "A", "C", "V", "cd", "rad", "degree"}
SI_CONSTANTS = {"pi", "kB", "Nav", "c", "e"}
SI_PREFIXES = ("da", "E", "P", "T", "G", "M", "k", "h", "d", "c", "m", "u", "n", "p", "f", "a")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
#: Entries of step/time read at once (8 MiB of int64).
SERIES_BLOCK = 1 << 20
#: Objects visited at most when looking for links (bounds the walk of pathological files).
MAX_OBJECTS = 100_000
#: MDAnalysis's read check allocates whole frames: larger ones are not read (MDA902).
MAX_READ_CHECK_FRAME_BYTES = 1024**3


@dataclass
class Element:
    """An H5MD element as found: a time-dependent group or a time-independent dataset."""

    path: str
    obj: object
    time_dependent: bool
    value: object = None
    shape: tuple = None
    step: object = None
    time: object = None
    step_mode: str = None  # "explicit" or "fixed"
    time_mode: str = None

    @property
    def n_frames(self):
        return self.shape[0] if self.time_dependent and self.shape else None

    def particle_count(self):
        """Length of the particle axis (after the frame axis), or None."""
        if not self.shape:
            return None
        axis = 1 if self.time_dependent else 0
        return self.shape[axis] if len(self.shape) > axis else None


class Checker:
    """Runs the rules of one profile over one open file."""

    def __init__(self, handle, report, profile, path):
        self.handle = handle
        self.report = report
        self.profile = profile
        self.path = path
        self.access = Access(handle, report)
        self.groups = {}  # particle group path -> {"dimension", "boundary", "elements", "edges", "group"}
        self.ordered = set()  # step/time datasets already checked for their order (hard links)
        self.external = []  # paths of external links, virtual datasets, external raw data

    @property
    def h5md(self):
        return self.profile in ("h5md", "all")

    @property
    def mdanalysis(self):
        return self.profile in ("mdanalysis", "all")

    def add(self, rule, path, message, fix=None, severity=None):
        self.report.add(rule, path, message, fix, severity)

    def run(self):
        phases = [("links", self.walk_links)]
        if self.h5md:
            phases.append(("/h5md", self.check_metadata))
        phases.append(("/particles", self.check_particles))
        if self.h5md:
            phases.append(("/observables", self.check_observables))
        phases.append(("data", self.check_data))
        if self.mdanalysis:
            phases.append(("MDAnalysis profile", lambda: MDAnalysisProfile(self).run()))
        if self.profile == "all":
            phases.append(("layout lint", self.lint))
        for name, phase in phases:
            try:
                phase()
            except Exception as error:  # noqa: BLE001 - a safety net: damaged content must give a finding
                if debug_enabled():
                    raise
                self.add("FILE003", "/", f"the {name} checks stopped on unreadable content: {reason(error)}")

    # -- links ---------------------------------------------------------------------------
    def walk_links(self):
        """Report external links and broken soft links anywhere in the file."""
        import h5py

        a = self.access
        for visited, (group, name, path, link, obj) in enumerate(a.walk(self.handle), 1):
            if visited % 1000 == 0:
                heartbeat()
            if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
                outcome = a.resolve(group, name, path)
                if isinstance(outcome, tuple):
                    a.report_problem(path, outcome)
                    if outcome[0] == "external":
                        self.external.append(path)
            elif obj is not None and is_dataset(obj) and self.external_storage(obj, path):
                self.external.append(path)
            if visited >= MAX_OBJECTS:
                break

    def external_storage(self, dataset, path):
        """True (and LINK001) for a virtual dataset or one whose raw data lives in external files."""
        try:
            external = keeps_data_elsewhere(dataset)
        except Exception as error:  # noqa: BLE001
            self.add("FILE003", path, f"cannot read the dataset's storage: {reason(error)}")
            return False
        if external:
            self.add("LINK001", path, "a virtual dataset, or raw data kept in external files: not read")
        return external

    # -- /h5md ---------------------------------------------------------------------------
    def check_string(self, obj, name, path, rule, variable, required=True):
        """A scalar string attribute: its text, or None (then *rule* when required)."""
        value = self.access.attr(obj, name, path)
        if value is None:
            if required:
                self.add(rule, path, f"no attribute {name}")
            return None
        text = text_of(value)
        if text is None and isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "OSU":
            text = text_of(value.reshape(()))
            if text is not None:
                self.add("H5MD103", path, f"attribute {name} is an array of one string; H5MD 1.1 asks a scalar string")
        if text is None:
            self.add(rule, path, f"attribute {name} must be a string, not {type(value).__name__} {np.asarray(value).dtype}")
            return None
        self.check_string_kind(obj, name, path, variable)
        return text

    def check_string_kind(self, obj, name, path, variable):
        kind = self.access.string_kind(obj, name)
        if kind is None:
            return
        is_variable, shape = kind
        wanted = "variable-length" if variable else "fixed-length"
        if is_variable != variable:
            self.add("H5MD103", path, f"attribute {name} is a {'variable' if is_variable else 'fixed'}-length string; H5MD 1.1 asks a {wanted} string")

    def check_metadata(self):
        a = self.access
        root = a.child(self.handle, "h5md", "/h5md")
        if root is None:
            self.add("H5MD001", "/h5md", "no /h5md group: not an H5MD file")
            return
        if not is_group(root):
            self.add("H5MD001", "/h5md", "/h5md is not a group")
            return
        version = integers(a.attr(root, "version", "/h5md"))
        if version is None or version.shape != (2,):
            self.add("H5MD002", "/h5md", "attribute version must be two integers, e.g. [1, 1]")
        elif tuple(int(v) for v in version) not in ((1, 0), (1, 1)):
            self.add("H5MD006", "/h5md", f"version {tuple(int(v) for v in version)} is not 1.0 or 1.1; checked against H5MD 1.1")
        author = a.child(root, "author", "/h5md/author")
        if author is None or not is_group(author):
            self.add("H5MD003", "/h5md/author", "no group author")
        else:
            self.check_string(author, "name", "/h5md/author", "H5MD003", variable=False)
            if a.attr(author, "email", "/h5md/author") is not None:
                email = self.check_string(author, "email", "/h5md/author", "H5MD105", variable=False)
                if email is not None and not EMAIL.fullmatch(email):
                    self.add("H5MD105", "/h5md/author", f"email {email!r} does not look like name@domain.tld")
        creator = a.child(root, "creator", "/h5md/creator")
        if creator is None or not is_group(creator):
            self.add("H5MD004", "/h5md/creator", "no group creator")
        else:
            self.check_string(creator, "name", "/h5md/creator", "H5MD004", variable=False)
            self.check_string(creator, "version", "/h5md/creator", "H5MD004", variable=False)
        modules = a.child(root, "modules", "/h5md/modules")
        units = None
        if modules is not None:
            if not is_group(modules):
                self.add("H5MD014", "/h5md/modules", "modules must be a group")
            else:
                for name in a.names(modules, "/h5md/modules"):
                    path = f"/h5md/modules/{name}"
                    module = a.child(modules, name, path)
                    if module is None:
                        continue
                    if not is_group(module):
                        self.add("H5MD014", path, "a module must be a group")
                        continue
                    version = integers(a.attr(module, "version", path))
                    if version is None or version.shape != (2,):
                        self.add("H5MD005", path, "module without an Integer[2] attribute version")
                    if name == "units":
                        units = module
        if units is None:
            self.add("H5MD102", "/h5md/modules/units", "no units module: the unit attributes are not declared")
        else:
            self.check_string(units, "system", "/h5md/modules/units", "H5MD102", variable=False)

    # -- time-dependent elements ---------------------------------------------------------
    def element(self, obj, path):
        """Check an element (group or dataset) and return what was found."""
        if is_dataset(obj):
            return Element(path, obj, False, value=obj, shape=self.access.shape(obj, path))
        a = self.access
        element = Element(path, obj, True)
        value = a.child(obj, "value", f"{path}/value")
        if value is None or not is_dataset(value):
            if self.h5md:
                self.add("H5MD020", path, "time-dependent element (a group) without a value dataset")
        else:
            element.value = value
            shape = a.shape(value, f"{path}/value")
            if not shape:
                if self.h5md:
                    self.add("H5MD020", f"{path}/value", "value has no [variable] first dimension (scalar or empty dataspace)")
            else:
                element.shape = shape
        self.check_step(element)
        self.check_time(element)
        return element

    def check_step(self, element):
        a, path = self.access, f"{element.path}/step"
        step = a.child(element.obj, "step", path)
        if step is None:
            if self.h5md:
                self.add("H5MD021", element.path, "time-dependent element without a step dataset")
            return
        if not is_dataset(step):
            if self.h5md:
                self.add("H5MD021", path, "step must be a dataset")
            return
        element.step = step
        shape, kind = a.shape(step, path), a.kind(step, path)
        if shape is None or kind is None:
            if self.h5md and shape is None:
                self.add("H5MD021", path, "step has an empty dataspace")
            return
        if len(shape) == 0:
            element.step_mode = "fixed"
        elif len(shape) == 1:
            element.step_mode = "explicit"
        if kind not in "iu":
            if self.h5md:
                self.add("H5MD021", path, f"step must hold integers, not {step.dtype}")
            return
        if element.step_mode is None:
            if self.h5md:
                self.add("H5MD021", path, f"step has shape {shape}; it must be 1-D (explicit) or scalar (fixed)")
            return
        if element.step_mode == "fixed":
            if not self.h5md:
                return
            increment = a.read(step, path)
            if increment is not None and int(increment) <= 0:
                self.add("H5MD023", path, f"fixed step increment {int(increment)} must be positive")
            offset = a.attr(step, "offset", path)
            if offset is not None and (integers(offset) is None or np.ndim(offset) != 0):
                self.add("H5MD021", path, "attribute offset of a fixed step must be a scalar integer")
            return
        n = element.n_frames
        if n is not None and shape[0] != n:
            if self.h5md:
                self.add("H5MD022", path, f"step has {shape[0]} entries but value has {n} rows")
            return
        if self.first_visit(step):
            self.check_order(step, path, "step", shape[0])

    def check_time(self, element):
        a, path = self.access, f"{element.path}/time"
        time = a.child(element.obj, "time", path)
        if time is None:
            return
        if not is_dataset(time):
            if self.h5md:
                self.add("H5MD024", path, "time must be a dataset")
            return
        element.time = time
        shape, kind = a.shape(time, path), a.kind(time, path)
        if shape is not None:
            element.time_mode = {0: "fixed", 1: "explicit"}.get(len(shape))
        if shape is None or kind is None:
            return
        if kind not in "iuf":
            if self.h5md:
                self.add("H5MD024", path, f"time must hold Float or Integer values, not {time.dtype}")
            return
        if element.time_mode is None:
            if self.h5md:
                self.add("H5MD024", path, f"time has shape {shape}; it must be 1-D (explicit) or scalar (fixed)")
            return
        if element.step_mode and element.time_mode != element.step_mode:
            if self.h5md:
                self.add("H5MD024", path, f"time is {element.time_mode} but step is {element.step_mode}: both must use the same storage mode")
            return
        if element.time_mode == "explicit":
            n = element.n_frames
            if n is not None and shape[0] != n:
                if self.h5md:
                    self.add("H5MD024", path, f"time has {shape[0]} entries but value has {n} rows")
                return
            if self.first_visit(time):
                self.check_order(time, path, "time", shape[0])

    def first_visit(self, dataset):
        """True the first time *dataset* (by object, whatever its path) is seen here."""
        key = self.access.key(dataset)
        if key is None:
            return True
        if key in self.ordered:
            return False
        self.ordered.add(key)
        return True

    def check_order(self, dataset, path, series, length):
        """DATA004 (backwards), H5MD023 (a repeated step), DATA002 (non-finite time), DATA006.

        Only the stored entries are read (a file may declare 2**40 entries and store none).
        """
        rows = sanity.readable_rows(self.report, dataset, path, series)
        try:
            backwards, repeated, nonfinite = sanity.series_problems(dataset, rows)
        except Exception as error:  # noqa: BLE001 - a damaged chunk is a finding
            self.add("FILE003", path, f"cannot read the data: {reason(error)}")
            return
        if backwards:
            self.add("DATA004", path, f"{series} goes backwards at {backwards.text(length)}")
        if repeated and series == "step" and self.h5md:
            self.add("H5MD023", path, f"step repeats the previous step at {repeated.text(length)}; H5MD 1.1 asks strictly increasing steps")
        if nonfinite:
            self.add("DATA002", path, f"{series} is NaN or inf at {nonfinite.text(length)}")

    # -- particles ---------------------------------------------------------------------------
    def check_particles(self):
        a = self.access
        particles = a.child(self.handle, "particles", "/particles")
        if particles is None:
            return
        if not is_group(particles):
            if self.h5md:
                self.add("H5MD014", "/particles", "/particles must be a group")
            return
        for name in a.names(particles, "/particles"):
            path = f"/particles/{name}"
            group = a.child(particles, name, path)
            if group is None:
                continue
            if not is_group(group):
                if self.h5md:
                    self.add("H5MD014", path, "a particle group must be a group")
                continue
            self.groups[path] = self.check_particle_group(group, path)

    def check_box(self, group, path):
        """The box's dimension (or None), its edges element (or None) and its boundary strings."""
        a = self.access
        box_path = f"{path}/box"
        box = a.child(group, "box", box_path)
        if box is None:
            if self.h5md:
                self.add("H5MD010", box_path, "particle group without a box group")
            return None, None, []
        if not is_group(box):
            if self.h5md:
                self.add("H5MD014", box_path, "box must be a group")
            return None, None, []
        dimension = None
        raw = integers(a.attr(box, "dimension", box_path))
        if raw is None or raw.shape != () or int(raw) < 1:
            if self.h5md:
                self.add("H5MD010", box_path, "box needs a scalar integer attribute dimension >= 1")
        else:
            dimension = int(raw)
        boundary = a.attr(box, "boundary", box_path)
        texts = []
        if boundary is not None and np.ndim(boundary) == 1:
            texts = [text_of(b) for b in boundary]
        if self.h5md:
            if (boundary is None or np.ndim(boundary) != 1 or (dimension and len(texts) != dimension)
                    or any(t not in ("periodic", "none") for t in texts)):
                shown = boundary.tolist() if isinstance(boundary, np.ndarray) else boundary
                self.add("H5MD011", box_path, f"boundary must be {dimension or 'D'} strings, each 'periodic' or 'none'; found {shown!r}")
            elif boundary is not None:
                self.check_string_kind(box, "boundary", box_path, variable=False)
        edges_path = f"{box_path}/edges"
        edges = a.child(box, "edges", edges_path)
        if edges is None:
            if self.h5md and "periodic" in texts:
                self.add("H5MD012", box_path, "periodic box without edges")
            return dimension, None, texts
        if not (is_group(edges) or is_dataset(edges)):
            return dimension, None, texts
        element = self.element(edges, edges_path)
        if self.h5md and element.shape is not None and dimension:
            data = element.shape[1:] if element.time_dependent else element.shape
            if data not in ((dimension,), (dimension, dimension)):
                where = f"{edges_path}/value" if element.time_dependent else edges_path
                form = "[n][D] or [n][D][D]" if element.time_dependent else "[D] or [D][D]"
                self.add("H5MD013", where, f"edges of shape {element.shape} do not fit dimension {dimension} ({form})")
        if self.h5md and element.value is not None:
            kind = self.access.kind(element.value, element.path)
            if kind is not None and kind not in "iuf":
                self.add("H5MD013", element.path, f"edges must be Float or Integer, not {element.value.dtype}")
        return dimension, element, texts

    def check_particle_group(self, group, path):
        a = self.access
        elements = {}
        for name in a.names(group, path):
            if name == "box":
                continue
            element_path = f"{path}/{name}"
            obj = a.child(group, name, element_path)
            if obj is None or not (is_group(obj) or is_dataset(obj)):
                continue
            elements[name] = self.element(obj, element_path)
        dimension, edges, boundary = self.check_box(group, path)
        if self.h5md:
            self.check_vectors(elements, dimension)
            self.check_links(path, elements, edges)
            self.check_counts(elements)
            for name, element in list(elements.items()) + [("edges", edges)]:
                if element is not None and name in UNIT_KINDS:
                    self.check_units(element)
        return {"dimension": dimension, "boundary": boundary, "elements": elements, "edges": edges, "group": group}

    def check_vectors(self, elements, dimension):
        for name in VECTORS:
            element = elements.get(name)
            if element is None or element.shape is None:
                continue
            rank = 3 if element.time_dependent else 2
            where = f"{element.path}/value" if element.time_dependent else element.path
            form = "[n][N][D]" if element.time_dependent else "[N][D]"
            if len(element.shape) != rank or (dimension and element.shape[-1] != dimension):
                self.add("H5MD030", where, f"{name} values must be {form} with D = {dimension or 'the box dimension'}, got shape {element.shape}")
            kind = self.access.kind(element.value, where)
            if kind is not None and kind not in "iuf":
                self.add("H5MD030", where, f"{name} values must be Float or Integer, not {element.value.dtype}")
        if "image" in elements and "position" not in elements:
            self.add("H5MD031", elements["image"].path, "image requires position")

    def check_links(self, path, elements, edges):
        position = elements.get("position")
        if position is None or not position.time_dependent:
            return
        for other in (edges, elements.get("image")):
            if other is None or not other.time_dependent:
                continue
            for series in ("step", "time"):
                mine, theirs = getattr(other, series), getattr(position, series)
                if mine is None and theirs is None:
                    continue
                if mine is None or theirs is None or not self.access.same(mine, theirs):
                    self.add("H5MD032", f"{other.path}/{series}", f"{series} is not a hard link to {position.path}/{series}")

    def check_counts(self, elements):
        counts = {name: elements[name].particle_count() for name in PER_PARTICLE if name in elements}
        counts = {name: n for name, n in counts.items() if n is not None}
        if not counts:
            return
        reference = "position" if "position" in counts else next(iter(counts))
        for name, n in counts.items():
            if n != counts[reference]:
                self.add("H5MD033", elements[name].path, f"{name} holds {n} particles but {reference} holds {counts[reference]}")

    def check_units(self, element):
        targets = [(element.value, f"{element.path}/value" if element.time_dependent else element.path)]
        if element.time is not None:
            targets.append((element.time, f"{element.path}/time"))
        for dataset, path in targets:
            if dataset is None:
                continue
            value = self.access.attr(dataset, "unit", path)
            if value is None:
                self.add("H5MD101", path, "no unit attribute")
                continue
            text = text_of(value)
            if text is None:
                self.add("H5MD104", path, f"unit must be a string, not {np.asarray(value).dtype}")
                continue
            self.check_string_kind(dataset, "unit", path, variable=True)
            problem = unit_string_problem(text)
            if problem:
                self.add("H5MD104", path, f"unit {text!r} is not a unit string of the units module: {problem}")

    # -- observables -----------------------------------------------------------------------
    def check_observables(self):
        root = self.access.child(self.handle, "observables", "/observables")
        if root is not None and not is_group(root):
            self.add("H5MD014", "/observables", "/observables must be a group")
            return
        for obj, path in self.observables():
            if is_group(obj):
                self.element(obj, path)

    def observables(self):
        """Yield ``(object, path)`` of every observable: time-dependent elements (groups with a
        ``value`` or ``step``) and time-independent ones (datasets), at most 8 groups deep."""
        a = self.access
        root = a.child(self.handle, "observables", "/observables")
        if root is None or not is_group(root):
            return
        stack = [(root, "/observables", 0)]
        while stack:
            group, path, depth = stack.pop()
            for name in a.names(group, path):
                child_path = join_path(path, name)
                obj = a.child(group, name, child_path)
                if obj is None:
                    continue
                if not is_group(obj):
                    yield obj, child_path
                    continue
                members = a.names(obj, child_path)
                if "value" in members or "step" in members:
                    yield obj, child_path
                elif depth < 8:
                    stack.append((obj, child_path, depth + 1))

    # -- data sanity -------------------------------------------------------------------------
    def check_data(self):
        """DATA001-DATA006 over every particle group's box and per-atom elements; DATA002 over
        the observables."""
        self.check_observable_data()
        for info in self.groups.values():
            box = self.data_box(info)
            for name in ("position", "velocity", "force"):
                element = info["elements"].get(name)
                if element is None or not element.time_dependent or element.value is None or not element.shape \
                        or len(element.shape) != 3 or self.access.kind(element.value, element.path) not in tuple("iuf"):
                    continue
                path = f"{element.path}/value"
                if path in self.external:
                    continue
                rows = sanity.readable_rows(self.report, element.value, path, f"{name} values")
                try:
                    sanity.check_values(self.report, element, name, box, rows)
                except Exception as error:  # noqa: BLE001 - a damaged chunk is a finding
                    self.add("FILE003", path, f"cannot read the data: {reason(error)}")

    def check_observable_data(self):
        """DATA002 (and DATA006) over every observable's float values."""
        a = self.access
        for obj, path in self.observables():
            time_dependent = is_group(obj)
            value = a.child(obj, "value", f"{path}/value") if time_dependent else obj
            value_path = f"{path}/value" if time_dependent else path
            if value is None or not is_dataset(value) or value_path in self.external \
                    or a.kind(value, value_path) != "f" or a.shape(value, value_path) is None:
                continue
            name = path.rsplit("/", 1)[-1]
            try:
                shape = value.shape
                rows = sanity.readable_rows(self.report, value, value_path, f"{name} values") if shape else 1
                sanity.check_finite(self.report, value, value_path, f"observable {name}", rows, time_dependent)
            except Exception as error:  # noqa: BLE001 - a damaged chunk is a finding
                self.add("FILE003", value_path, f"cannot read the data: {reason(error)}")

    def data_box(self, info):
        """The group's periodic box for the data checks (after DATA002/DATA005 on it), or None."""
        edges, dimension, boundary = info["edges"], info["dimension"], info["boundary"]
        if edges is None or edges.value is None or not dimension or len(boundary) != dimension \
                or "periodic" not in boundary or edges.shape is None:
            return None
        data_shape = edges.shape[1:] if edges.time_dependent else edges.shape
        if data_shape not in ((dimension,), (dimension, dimension)) or self.access.kind(edges.value, edges.path) not in tuple("iuf"):
            return None
        value_path = f"{edges.path}/value" if edges.time_dependent else edges.path
        if value_path in self.external:
            return None
        rows = sanity.readable_rows(self.report, edges.value, value_path, "box edges") if edges.time_dependent else 1
        position = info["elements"].get("position")
        box = sanity.Box(edges, [b == "periodic" for b in boundary], dimension, False, unit_of(edges.value))
        try:
            sanity.check_box_series(self.report, box, rows)
        except Exception as error:  # noqa: BLE001
            self.add("FILE003", value_path, f"cannot read the data: {reason(error)}")
            return None
        if position is not None and position.time_dependent and position.shape:
            box.frames_match = not edges.time_dependent or (
                rows >= position.shape[0] and edges.shape[0] == position.shape[0]
                and position.step is not None and self.access.same(edges.step, position.step))
        return box

    # -- layout ----------------------------------------------------------------------------
    def lint(self):
        for info in self.groups.values():
            for element in info["elements"].values():
                if element.time_dependent and element.value is not None and element.shape and len(element.shape) == 3:
                    lint.lint_dataset(self.report, f"{element.path}/value", element.value, self.path)


def unit_string_problem(text):
    """Why *text* is not a unit string of the H5MD units module ("SI" system), or None."""
    factors = text.split(" ")
    if not text or any(f == "" for f in factors):
        return "factors are separated by single spaces"
    seen = set()
    for position, factor in enumerate(factors):
        if re.fullmatch(r"\d+(\.\d+)?([+-]\d+)?", factor):
            if position:
                return "a numeric factor must come first"
            continue
        match = re.fullmatch(r"([A-Za-z]+)([+-]?[1-9]\d*)?", factor)
        if not match:
            return f"cannot read factor {factor!r}"
        symbol = match.group(1)
        if not _known_symbol(symbol):
            return f"unknown symbol {symbol!r}"
        if symbol in seen:
            return f"symbol {symbol!r} occurs twice"
        seen.add(symbol)
    return None


def _known_symbol(symbol):
    if symbol in SI_SYMBOLS or symbol in SI_CONSTANTS:
        return True
    return any(symbol.startswith(p) and symbol[len(p):] in SI_SYMBOLS for p in SI_PREFIXES)


def mdanalysis_units():
    """MDAnalysis's table of the unit strings its H5MDReader understands, by kind."""
    try:
        from MDAnalysis.coordinates.H5MD import H5MDReader

        return {kind: set(table) for kind, table in H5MDReader._unit_translation.items()}
    except Exception:  # noqa: BLE001 - private table moved: use the copy
        return FALLBACK_MDA_UNITS


class MDAnalysisProfile:
    """What MDAnalysis's ``H5MDReader`` needs (MDAnalysis 2.x, ``convert_units=True``)."""

    ELEMENTS = ("position", "velocity", "force")

    def __init__(self, checker):
        self.checker = checker
        self.access = checker.access
        self.add = checker.add
        self.errors_before = len(checker.report.errors)

    def run(self):
        group, path = self.particle_group()
        if group is None:
            return
        members = self.access.names(group, path)
        box = self.check_box(group, path)
        present = [name for name in self.ELEMENTS if name in members]
        first = self.check_elements(group, path, present)
        if first is not None:
            n_frames = first["n_frames"]
            self.check_series(first)
            self.check_units(group, path, present, first, box)
            self.check_edges(box, path, n_frames)
            self.check_observables(n_frames)
        if self.new_errors():
            return
        if self.checker.external:
            shown = ", ".join(self.checker.external[:3]) + (", ..." if len(self.checker.external) > 3 else "")
            self.add("MDA902", "/", f"not read with MDAnalysis: the file has external links or external raw data ({shown}), which MDAnalysis would follow")
            return
        frame_bytes = self.frame_bytes(first)
        if frame_bytes > MAX_READ_CHECK_FRAME_BYTES:
            self.add("MDA902", "/", f"not read with MDAnalysis: one frame takes {human_bytes(frame_bytes)} of memory")
            return
        self.read_check()

    def frame_bytes(self, first):
        """Memory MDAnalysis allocates for one frame (float32 positions, velocities, forces)."""
        if first is None:
            return 0
        return first["n_atoms"] * 3 * 4 * 3

    def new_errors(self):
        return len(self.checker.report.errors) > self.errors_before

    def particle_group(self):
        """The group MDAnalysis's H5MDReader reads: the first one listed under /particles."""
        a = self.access
        particles = a.child(self.checker.handle, "particles", "/particles")
        if particles is None or not is_group(particles):
            self.add("MDA001", "/particles", "no /particles group: MDAnalysis reads the first particle group in it")
            return None, None
        names = a.names(particles, "/particles")
        if not names:
            self.add("MDA001", "/particles", "no particle group in /particles: MDAnalysis reads the first one")
            return None, None
        if "trajectory" not in names:
            self.add("MDA012", f"/particles/{names[0]}", "MDAnalysis reads this group (the first listed); Universe(FILE) without a topology needs /particles/trajectory")
        elif names[0] != "trajectory":
            self.add("MDA006", "/particles", f"MDAnalysis reads the first group listed, here {names[0]!r}, not 'trajectory'")
        path = f"/particles/{names[0]}"
        group = a.child(particles, names[0], path)
        if group is None or not is_group(group):
            return None, None
        return group, path

    def check_box(self, group, path):
        box = self.access.child(group, "box", f"{path}/box")
        if box is None or not is_group(box):
            self.add("MDA002", f"{path}/box", "no box group (MDAnalysis reads box.attrs['dimension'])")
            return None
        dimension = integers(self.access.attr(box, "dimension", f"{path}/box"))
        if dimension is None or dimension.size != 1 or int(dimension.reshape(-1)[0]) != 3:
            self.add("MDA002", f"{path}/box", "MDAnalysis needs box dimension 3")
        return box

    def check_elements(self, group, path, present):
        a = self.access
        first = None
        for name in present:
            element_path = f"{path}/{name}"
            obj = a.child(group, name, element_path)
            value = a.child(obj, "value", f"{element_path}/value") if obj is not None and is_group(obj) else None
            shape = a.shape(value, f"{element_path}/value") if value is not None and is_dataset(value) else None
            if shape is None or len(shape) != 3 or shape[2] != 3:
                self.add("MDA004", element_path, f"{name} must be a group with [n][N][3] values for MDAnalysis, found {'shape ' + str(shape) if shape else 'none'}")
                continue
            for label in self.unavailable(value, f"{element_path}/value"):
                self.add("MDA010", f"{element_path}/value", f"{label} is not available to this h5py/HDF5: the values cannot be decoded here")
            if first is None:
                first = {"name": name, "path": element_path, "group": obj, "n_frames": shape[0], "n_atoms": shape[1]}
                if shape[0] == 0:
                    self.add("MDA011", f"{element_path}/value", "no frames")
            elif (shape[0], shape[1]) != (first["n_frames"], first["n_atoms"]):
                self.add("MDA008", f"{element_path}/value", f"{name} holds {shape[0]} frames of {shape[1]} atoms, {first['name']} {first['n_frames']} of {first['n_atoms']}"
                         + (": MDAnalysis would read it at the wrong frames" if shape[1] == first["n_atoms"] else ""))
        if not present:
            self.add("MDA004", path, "none of position, velocity, force: MDAnalysis has nothing to read")
        return first

    def unavailable(self, dataset, path):
        try:
            return lint.unavailable_filters(dataset)
        except Exception as error:  # noqa: BLE001
            self.add("FILE003", path, f"cannot read the filters: {reason(error)}")
            return []

    def check_series(self, first):
        a = self.access
        for series in ("step", "time"):
            path = f"{first['path']}/{series}"
            dataset = a.child(first["group"], series, path)
            shape = a.shape(dataset, path) if dataset is not None and is_dataset(dataset) else None
            if shape is None:
                self.add("MDA003", path, f"no {series} dataset (MDAnalysis reads {first['name']}/{series}[frame])")
            elif len(shape) != 1 or shape[0] < first["n_frames"]:
                self.add("MDA003", path, f"{series} has shape {shape}; MDAnalysis needs one entry per frame ({first['n_frames']}) in a 1-D dataset")

    def unit_of(self, dataset, path):
        value = self.access.attr(dataset, "unit", path) if dataset is not None else None
        return text_of(value)

    def check_units(self, group, path, present, first, box):
        a = self.access
        table = mdanalysis_units()
        time = a.child(first["group"], "time", f"{first['path']}/time")
        if time is not None and is_dataset(time):
            unit = self.unit_of(time, f"{first['path']}/time")
            if unit not in table["time"]:
                self.add("MDA005", f"{first['path']}/time", f"time unit {unit!r} is not one MDAnalysis knows ({', '.join(sorted(table['time']))})")
        for name in present:
            value_path = f"{path}/{name}/value"
            obj = a.child(group, name, f"{path}/{name}")
            value = a.child(obj, "value", value_path) if obj is not None and is_group(obj) else None
            if value is None:
                continue
            kind = UNIT_KINDS[name]
            unit = self.unit_of(value, value_path)
            if unit not in table[kind]:
                self.add("MDA005", value_path, f"{kind} unit {unit!r} is not one MDAnalysis knows ({', '.join(sorted(table[kind]))})")
        if "position" in present and box is not None:
            self.check_box_unit(box, path)
        if "position" not in present and box is not None:
            edges = a.child(box, "edges", f"{path}/box/edges")
            value = a.child(edges, "value", f"{path}/box/edges/value") if edges is not None and is_group(edges) else None
            if value is not None and self.unit_of(value, f"{path}/box/edges/value") not in table["length"]:
                self.add("MDA005", f"{path}/box/edges/value", "without positions MDAnalysis takes the length unit from the box, which has none it knows")

    def check_box_unit(self, box, path):
        """MDA013: MDAnalysis converts the box with the positions' unit, not the box's own."""
        a = self.access
        edges = a.child(box, "edges", f"{path}/box/edges") if "edges" in a.names(box, f"{path}/box") else None
        if edges is None:
            return
        value = a.child(edges, "value", f"{path}/box/edges/value") if is_group(edges) else edges
        position = a.child(a.child(box.parent, "position", f"{path}/position"), "value", f"{path}/position/value")
        if value is None or position is None:
            return
        box_unit = self.unit_of(value, value.name)
        position_unit = self.unit_of(position, position.name)
        factors = sanity.NM_PER_UNIT.get(box_unit), sanity.NM_PER_UNIT.get(position_unit)
        if None not in factors and factors[0] != factors[1]:
            self.add("MDA013", value.name, f"box edges are in {box_unit} but positions in {position_unit}: MDAnalysis "
                     f"reads the box {factors[1] / factors[0]:g} times its size")

    def check_edges(self, box, path, n_frames):
        a = self.access
        if box is None or "edges" not in a.names(box, f"{path}/box"):
            return
        edges_path = f"{path}/box/edges"
        edges = a.child(box, "edges", edges_path)
        value = a.child(edges, "value", f"{edges_path}/value") if edges is not None and is_group(edges) else None
        shape = a.shape(value, f"{edges_path}/value") if value is not None and is_dataset(value) else None
        if shape is None or len(shape) < 2 or shape[1:] not in ((3,), (3, 3)) or shape[0] < n_frames:
            self.add("MDA009", edges_path, f"MDAnalysis reads box/edges/value[frame] as [3] or [3][3]; found {'value of shape ' + str(shape) if shape else 'no time-dependent edges'}")

    def check_observables(self, n_frames):
        a = self.access
        root = a.child(self.checker.handle, "observables", "/observables")
        if root is None or not is_group(root):
            return
        for name in a.names(root, "/observables"):
            path = f"/observables/{name}"
            obj = a.child(root, name, path)
            if obj is None:
                continue
            if not is_group(obj):
                self.add("MDA007", path, "a time-independent observable: MDAnalysis expects observables/<name>/value[frame] and fails")
                continue
            members = a.names(obj, path)
            targets = [(obj, path)] if "value" in members else [(a.child(obj, sub, f"{path}/{sub}"), f"{path}/{sub}") for sub in members]
            for target, target_path in targets:
                value = a.child(target, "value", f"{target_path}/value") if target is not None and is_group(target) else None
                shape = a.shape(value, f"{target_path}/value") if value is not None and is_dataset(value) else None
                if not shape or shape[0] < n_frames:
                    self.add("MDA007", target_path, f"MDAnalysis reads {target_path}/value[frame] for each of {n_frames} frames; found {'shape ' + str(shape) if shape else 'no time-dependent value'}")

    def read_check(self):
        """Open the file with MDAnalysis's H5MDReader and read its first and last frames."""
        path = self.checker.path
        failure = _mdanalysis_read(path)
        if failure:
            self.add("MDA900", "/", f"MDAnalysis's H5MDReader: {failure}")
            return
        self.checker.report.read_checks.append("serial")
        mpio_read_check(self.checker.report, path)


def mpio_read_check(report, path):
    """MDA901: read *path* through MPI-IO on MPI.COMM_SELF when MPI runs in this process."""
    comm = _mpi_self()
    if comm is None or "mpio" in report.read_checks:
        return
    report.read_checks.append("mpio")
    failure = _mdanalysis_read(path, driver="mpio", comm=comm)
    if failure:
        report.add("MDA901", "/", f"MDAnalysis's H5MDReader with driver='mpio': {failure}")


def _mdanalysis_read(path, **options):
    """MDAnalysis's H5MDReader opens *path* and reads its last frame: None, or why it failed.
    hdf5plugin's filters are loaded first, as every reader needs them (MDA901 runs in the
    calling process, not in the isolated child that loaded them for the other checks)."""
    import warnings

    load_filter_plugins()
    try:
        from MDAnalysis.coordinates.H5MD import H5MDReader

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = H5MDReader(path, **options)
            try:
                if reader.n_frames > 1:
                    reader[reader.n_frames - 1]
            finally:
                reader.close()
    except Exception as error:  # noqa: BLE001 - whatever MDAnalysis raises is the finding
        return reason(error)
    return None


def _mpi_self():
    """MPI.COMM_SELF when MPI is already running and h5py can use MPI-IO, else None."""
    module = sys.modules.get("mpi4py.MPI")
    if module is None:
        return None
    try:
        import h5py

        if not h5py.get_config().mpi or not module.Is_initialized() or module.Is_finalized():
            return None
        return module.COMM_SELF
    except Exception:  # noqa: BLE001
        return None


def validate_file(path, profile="all", label=None):
    """Check one H5MD file (on this process).

    Parameters
    ----------
    path : str
    profile : {"h5md", "mdanalysis", "all"}
        ``h5md``: the H5MD 1.1 rules; ``mdanalysis``: what MDAnalysis's H5MDReader needs;
        ``all``: both plus the layout lint.
    label : str, optional
        How to name the file in the report and fix commands (default: *path*).

    Returns
    -------
    FileReport

    Raises
    ------
    UnreadableError
        If *path* is missing, a directory, not HDF5 or truncated (exit status 1).
    UsageError
        For an unknown profile.
    """
    if profile not in PROFILES:
        raise UsageError(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    report = FileReport(label or path)
    with open_hdf5(path) as handle:
        Checker(handle, report, profile, label or path).run()
    return report


def validate_manifest(path, profile="all", label=None, with_checksums=False):
    """Check a split ``manifest.json``: its document, and that its parts exist, match and tile.

    Every problem is reported with its own rule (``MAN001``-``MAN015``, see
    :mod:`h5mdtool.subfiles.manifest`); H5MD parts are validated too (their findings are prefixed
    with the part's name). Checksums (``MAN016``) are verified apart, by every rank
    (:func:`h5mdtool.subfiles.manifest.checksum_problems`).

    Returns
    -------
    (FileReport, Manifest or None)
        The manifest when its parts can be compared with a source; with *with_checksums*,
        also the ``(relative path, path, checksum)`` of each part that records a checksum
        and is on disk at its recorded size.

    Raises
    ------
    UnreadableError
        If the manifest is missing, not a regular file, a directory without manifest.json,
        or not JSON.
    """
    from ..subfiles.manifest import document_problems, load_document, manifest_file, part_problems

    path = manifest_file(path)
    document = load_document(path, UnreadableError)
    report = FileReport(label or path, kind="manifest")
    problems, manifest = document_problems(document, os.path.dirname(os.path.abspath(path)))
    for problem in problems:
        report.add(problem.rule, problem.where, problem.message)
    if manifest is None:
        return (report, None, []) if with_checksums else (report, None)
    manifest.path = os.path.abspath(path)
    problems, facts = part_problems(manifest)
    for problem in problems:
        report.add(problem.rule, problem.where, problem.message)
    explained = set()
    for part in manifest.parts:
        found = facts.get(part.path)
        h5md = found.format == "H5MD" if found is not None else manifest.format == "H5MD" and os.path.isfile(part.path)
        if not h5md:
            continue
        try:
            part_report = validate_file(part.path, profile, label=part.path)
        except UnreadableError as error:
            report.add("MAN004", part.relative_path, str(error))
            continue
        for finding in part_report.findings:
            report.add(finding.rule, f"{part.relative_path}:{finding.path}", finding.message, finding.fix, finding.severity)
        if found is None and part_report.errors:
            explained.add(part.relative_path)  # its own findings say why it cannot be read
    report.findings = [f for f in report.findings if not (f.rule == "MAN004" and f.path in explained)]
    blocking = ("MAN001", "MAN002", "MAN004", "MAN006", "MAN012", "MAN013")
    comparable = not explained and not any(f.rule in blocking for f in report.findings)
    if not with_checksums:
        return report, manifest if comparable else None
    sized = {f.path for f in report.findings if f.rule in ("MAN002", "MAN003")}  # a size that differs says enough
    checksums = [(part.relative_path, part.path, part.checksum) for part in manifest.parts
                 if part.checksum is not None and part.relative_path not in sized]
    return report, manifest if comparable else None, checksums


def is_manifest_path(path):
    """True for ``*.json`` files and directories holding a ``manifest.json`` (of any file type)."""
    return str(path).lower().endswith(".json") or (os.path.isdir(path) and os.path.lexists(os.path.join(path, "manifest.json")))


def _check_path(path, profile):
    """Rank-0 part of validate for one path: (FileReport, files to compare or None, parts
    whose checksums to verify)."""
    kind = "manifest" if is_manifest_path(path) else "h5md"
    outcome = isolated(_check_path_here, path, profile, kind)
    if outcome[0] == "ok":
        report, compared, checksums = outcome[1]
        if "serial" in report.read_checks:  # the child read it; through MPI-IO only this process can
            mpio_read_check(report, path)
        return report, compared, checksums
    report = FileReport(path, kind=kind)
    if outcome[0] == "crash":
        report.add("FILE004", "/", f"libhdf5 crashed (signal {outcome[1]}) while reading the file: its metadata is damaged; no other check could run")
        return report, None, []
    if outcome[0] == "timeout":
        report.add("FILE005", "/", f"reading the file made no progress for {outcome[1]:g} s (libhdf5 loops on damaged metadata?); "
                   "the reader was stopped and no other check could run (H5MDTOOL_READ_TIMEOUT sets the limit)")
        return report, None, []
    error = outcome[1]
    if isinstance(error, UnreadableError):
        report.readable = False
        report.add("FILE001", "/", str(error))
        return report, None, []
    raise error


def _check_path_here(path, profile, kind):
    if kind == "manifest":
        report, manifest, checksums = validate_manifest(path, profile, label=path, with_checksums=True)
        return report, None if manifest is None else [part.path for part in manifest.parts], checksums
    return validate_file(path, profile), [path], []


@entry_point
def validate(paths, *, comm=None, profile="all", against=None, tolerance=None, strict=False, progress=None,
             on_overlap="error", on_truncated="error", against_format=None, checksums=True):
    """Validate H5MD files and split manifests; optionally compare them with their source.

    Parameters
    ----------
    paths : str or sequence of str
        H5MD files, ``manifest.json`` files of ``h5mdtool split`` (or their directories).
    profile : {"h5md", "mdanalysis", "all"}
    against : sequence of str, optional
        The source trajectory's segments (XTC, TRR, DCD, H5MD): every frame of each file
        (or of a manifest's parts, in order) is compared with it, frames divided among ranks.
    tolerance : float, optional
        Absolute tolerance for the comparison (nm for positions and box, nm/ps, kJ/(mol nm));
        default: exact for float32 sources in the file's units, see :func:`compare_with_source`.
    strict : bool
        Warnings fail too (exit status 1).
    progress : bool, optional
        Progress bar on rank 0 for the comparison.
    on_overlap : {"error", "later", "first"}
        How the source's overlapping segments are joined (as ``convert --on-overlap``).
    on_truncated : {"error", "drop"}
        A source segment whose last frame is incomplete: refuse, or compare without that
        frame (as ``convert --on-truncated``).
    against_format : str, optional
        Read the source's segments as this format whatever their extension (``LAMMPS`` for a
        LAMMPS DCD), as ``convert(format=...)``.
    checksums : bool
        Verify the checksum a manifest records for each part (every part read whole, the
        parts shared among ranks); False skips it, for speed.

    Returns
    -------
    ValidationReport
        The same on every rank; ``exit_code`` is 0 or 1.

    Raises
    ------
    UsageError
        For an unknown profile, or no paths.
    InputError
        If a source given with *against* cannot be read.
    """
    from ..formats import scan
    from ..subfiles.manifest import checksum_problems
    from .compare import compare_with_source

    if profile not in PROFILES:
        raise UsageError(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    if not paths:
        raise UsageError("no file to validate")
    if tolerance is not None and not tolerance >= 0:
        raise UsageError(f"--tolerance must be >= 0, got {tolerance}")
    against = [os.fspath(p) for p in against or []]
    if against_format is not None and not against:
        raise UsageError("--against-format names the format of the --against source: give the source")
    source = scan(against, on_overlap, format=against_format, on_truncated=on_truncated, comm=comm) if against else None
    if profile != "h5md" and comm.rank == 0:
        import MDAnalysis.coordinates.H5MD  # noqa: F401 - imported once, before the forked readers
    reports = []
    for path in paths:
        report, compared, parts = root_call(comm, _check_path, path, profile)
        reports.append(report)
        if checksums and parts:
            for problem in checksum_problems(parts, comm):
                report.add(problem.rule, problem.where, problem.message)
        if source is None or not report.readable:
            continue
        if compared is None:
            broken = sorted({f.rule for f in report.errors if f.rule.startswith("MAN")})
            report.add("AGAINST003", "/", f"not compared with the source: fix the manifest first ({', '.join(broken)})")
            continue
        try:
            result = compare_with_source(compared, source, comm=comm, tolerance=tolerance, progress=progress)
        except H5mdToolError as error:
            report.add("AGAINST003", "/", f"cannot compare with the source: {error}")
            continue
        add_comparison(report, result)
    return ValidationReport(reports, profile=profile, strict=strict, against=against, tolerance=tolerance)


def add_comparison(report, result):
    """Turn a :func:`compare_with_source` result into findings of *report*."""
    report.comparison = result
    if result["n_atoms"] != result["source_n_atoms"] and not result.get("atoms_by_id"):
        report.add("AGAINST001", "/", f"{result['n_atoms']} atoms, the source has {result['source_n_atoms']}")
        return
    if result["n_frames"] != result["source_n_frames"]:
        report.add("AGAINST001", "/", f"{result['n_frames']} frames, the source has {result['source_n_frames']} (the first {result['compared_frames']} were compared)")
    if result.get("box_mismatch"):
        report.add("AGAINST003", "/particles/trajectory/box", result["box_mismatch"])
    if result["n_differing"]:
        first = "; ".join(f"frame {d['frame']}: {d['reason']}" for d in result["differing"])
        report.add("AGAINST002", "/", f"{result['n_differing']} of {result['compared_frames']} frames differ from the source; first: {first}")

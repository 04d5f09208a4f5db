"""``h5mdtool validate``: H5MD 1.1 conformance, MDAnalysis readability and layout lint.

Every check produces :class:`Finding` records (stable rule id, severity, HDF5 path,
message, and a fix where one exists). Files are walked defensively: every HDF5 access is
guarded, so any content (wrong types, zero or huge dimensions, soft-link loops) gives
findings, never a traceback; external links are reported and not followed.
"""

import os
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import H5mdToolError, UsageError

PROFILES = ("h5md", "mdanalysis", "all")
ERROR, WARNING = "error", "warning"
KNOWN_UNITS = {
    "length": {"nm", "Angstrom", "angstrom", "A", "pm", "fm"},
    "time": {"ps", "fs", "ns", "second", "sec", "s", "AKMA"},
    "velocity": {"nm ps-1", "Angstrom ps-1", "A ps-1", "Angstrom fs-1", "A fs-1", "nm ns-1", "pm ps-1", "m s-1",
                 "Angstrom AKMA-1", "A AKMA-1"},
    "force": {"kJ mol-1 nm-1", "kJ mol-1 Angstrom-1", "Newton", "N", "J m-1", "kcal mol-1 Angstrom-1", "kcal mol-1 A-1"},
}
ELEMENT_KINDS = {"position": "length", "velocity": "velocity", "force": "force"}
#: Filters every HDF5 library has built in (no plugin needed to read).
BUILTIN_FILTERS = {1: "gzip", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset"}
DEFAULT_CHUNK_CACHE = 1024**2
LARGE_CONTIGUOUS = 16 * 1024**3


class UnreadableFile(H5mdToolError):
    """The file could not be read at all (missing, not HDF5, truncated, a directory)."""

    exit_code = 2


@dataclass
class Finding:
    """One problem found in a file."""

    rule: str
    severity: str
    path: str
    message: str
    fix: str = None


@dataclass
class FileReport:
    """Findings for one file."""

    file: str
    findings: list = field(default_factory=list)

    def add(self, rule, severity, path, message, fix=None):
        self.findings.append(Finding(rule, severity, path, message, fix))

    @property
    def errors(self):
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self):
        return [f for f in self.findings if f.severity == WARNING]

    def as_dict(self):
        return {"file": self.file, "errors": len(self.errors), "warnings": len(self.warnings),
                "findings": [asdict(f) for f in self.findings]}


def _get(group, name):
    """``group[name]`` or None, for any failure (missing, dangling or looping link...)."""
    try:
        return group[name]
    except Exception:  # noqa: BLE001 - h5py raises KeyError, OSError, RuntimeError...
        return None


def _attr(obj, name):
    try:
        return obj.attrs[name] if name in obj.attrs else None
    except Exception:  # noqa: BLE001
        return None


def _is_group(obj):
    import h5py

    return isinstance(obj, h5py.Group)


def _is_dataset(obj):
    import h5py

    return isinstance(obj, h5py.Dataset)


def _text(value):
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "OSU":
        return _text(value.item())
    return None


def _integers(value):
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001
        return None
    return array if array.dtype.kind in "iu" else None


def _links(report, group, path):
    """Report external links and dangling soft links under *group*; return child names safe to open."""
    import h5py

    safe = []
    try:
        names = list(group)
    except Exception as error:  # noqa: BLE001
        report.add("FILE002", ERROR, path, f"cannot list this group: {error}")
        return safe
    for name in names:
        child_path = f"{path.rstrip('/')}/{name}"
        try:
            link = group.get(name, getlink=True)
        except Exception:  # noqa: BLE001
            link = None
        if isinstance(link, h5py.ExternalLink):
            report.add("LINK001", WARNING, child_path, f"external link to {link.filename}:{link.path}, not followed")
            continue
        if isinstance(link, h5py.SoftLink) and _get(group, name) is None:
            report.add("LINK002", ERROR, child_path, f"soft link to {link.path} cannot be resolved (dangling or a loop)")
            continue
        safe.append(name)
    return safe


def _check_h5md_root(report, handle):
    root = _get(handle, "h5md")
    if root is None or not _is_group(root):
        report.add("H5MD001", ERROR, "/h5md", "missing /h5md group")
        return
    version = _integers(_attr(root, "version"))
    if version is None or version.shape != (2,):
        report.add("H5MD002", ERROR, "/h5md", "attribute version must be two integers, e.g. [1, 1]")
    author = _get(root, "author")
    if author is None or _text(_attr(author, "name")) is None:
        report.add("H5MD003", ERROR, "/h5md/author", "missing group author with a string attribute name")
    elif _attr(author, "email") is not None:
        email = _text(_attr(author, "email"))
        if email is None or not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
            report.add("H5MD104", WARNING, "/h5md/author", f"email {email!r} does not look like an e-mail address")
    creator = _get(root, "creator")
    if creator is None or _text(_attr(creator, "name")) is None or _text(_attr(creator, "version")) is None:
        report.add("H5MD004", ERROR, "/h5md/creator", "missing group creator with string attributes name and version")
    modules = _get(root, "modules")
    if modules is not None and _is_group(modules):
        for name in _links(report, modules, "/h5md/modules"):
            module = _get(modules, name)
            if module is None or _attr(module, "version") is None:
                report.add("H5MD005", ERROR, f"/h5md/modules/{name}", "module without a version attribute")
    if modules is None or _get(modules, "units") is None:
        report.add("H5MD102", WARNING, "/h5md/modules/units", "no units module: unit attributes are not declared")


def _series_length(report, element, path, name, n_frames):
    """Check an element's step or time; return True if it is explicit (1-D)."""
    dataset = _get(element, name)
    if dataset is None:
        return None
    if not _is_dataset(dataset):
        report.add("H5MD020", ERROR, f"{path}/{name}", f"{name} must be a dataset")
        return None
    shape = dataset.shape
    if shape == ():
        return False
    if len(shape) != 1 or shape[0] != n_frames:
        report.add("H5MD020" if name == "step" else "H5MD021", ERROR, f"{path}/{name}",
                   f"{name} has shape {shape}; it must be 1-D with one entry per frame ({n_frames})")
        return True
    if name == "step":
        if dataset.dtype.kind not in "iu":
            report.add("H5MD020", ERROR, f"{path}/step", f"step must hold integers, not {dataset.dtype}")
        else:
            try:
                steps = dataset[:]
                if np.any(np.diff(steps) <= 0):
                    at = int(np.flatnonzero(np.diff(steps) <= 0)[0]) + 1
                    report.add("H5MD020", ERROR, f"{path}/step", f"step must increase strictly; entry {at} does not")
            except Exception as error:  # noqa: BLE001
                report.add("FILE003", ERROR, f"{path}/step", f"cannot read: {error}")
    return True


def _check_element(report, element, path, dimension, profile):
    value = _get(element, "value")
    if value is None or not _is_dataset(value):
        report.add("H5MD020", ERROR, path, "time-dependent element without a value dataset")
        return None
    shape = value.shape
    name = path.rsplit("/", 1)[-1]
    if name in ELEMENT_KINDS and (len(shape) != 3 or (dimension and shape[2] != dimension)):
        report.add("H5MD023", ERROR, f"{path}/value", f"{name} values must be [n][N][D] with D = {dimension}, got {shape}")
    n_frames = shape[0] if shape else 0
    if _get(element, "step") is None:
        report.add("H5MD020", ERROR, path, "time-dependent element without a step dataset")
    else:
        _series_length(report, element, path, "step", n_frames)
    _series_length(report, element, path, "time", n_frames)
    kind = ELEMENT_KINDS.get(name, "length" if name == "edges" else None)
    unit = _text(_attr(value, "unit"))
    if kind and unit is None:
        report.add("H5MD101", WARNING, f"{path}/value", "no unit attribute")
    elif kind and unit not in KNOWN_UNITS[kind] and profile in ("mdanalysis", "all"):
        report.add("MDA005", ERROR, f"{path}/value", f"unit {unit!r} is not one MDAnalysis knows")
    time = _get(element, "time")
    if time is not None and _text(_attr(time, "unit")) not in KNOWN_UNITS["time"] and profile in ("mdanalysis", "all"):
        report.add("MDA005", ERROR, f"{path}/time", f"time unit {_text(_attr(time, 'unit'))!r} is not one MDAnalysis knows")
    return value


def _check_particles(report, handle, profile):
    particles = _get(handle, "particles")
    if particles is None or not _is_group(particles):
        if profile in ("mdanalysis", "all"):
            report.add("MDA001", ERROR, "/particles", "no /particles group")
        return {}
    groups = _links(report, particles, "/particles")
    if profile in ("mdanalysis", "all"):
        if "trajectory" not in groups:
            report.add("MDA001", ERROR, "/particles/trajectory", "MDAnalysis reads the group particles/trajectory")
        elif groups[0] != "trajectory":
            report.add("MDA006", ERROR, "/particles", f"MDAnalysis reads the first group listed, here {groups[0]!r}, not 'trajectory'")
    values = {}
    for name in groups:
        group = _get(particles, name)
        path = f"/particles/{name}"
        if group is None or not _is_group(group):
            continue
        box = _get(group, "box")
        dimension = None
        if box is None:
            report.add("H5MD010", ERROR, f"{path}/box", "particle group without a box")
        else:
            dim = _integers(_attr(box, "dimension"))
            if dim is None or dim.shape != () or not 1 <= int(dim) <= 3:
                report.add("H5MD010", ERROR, f"{path}/box", "box needs an integer attribute dimension (1-3)")
            else:
                dimension = int(dim)
                if dimension != 3 and profile in ("mdanalysis", "all") and name == "trajectory":
                    report.add("MDA002", ERROR, f"{path}/box", "MDAnalysis needs box dimension 3")
            boundary = _attr(box, "boundary")
            texts = [_text(b) for b in np.atleast_1d(boundary)] if boundary is not None else []
            if boundary is None or (dimension and len(texts) != dimension) or any(t not in ("periodic", "none") for t in texts):
                report.add("H5MD011", ERROR, f"{path}/box", "boundary must list 'periodic' or 'none' for each dimension")
            edges = _get(box, "edges")
            if edges is None and any(t == "periodic" for t in texts):
                report.add("H5MD012", ERROR, f"{path}/box", "periodic box without edges")
            if edges is not None:
                value = _check_element(report, edges, f"{path}/box/edges", dimension, profile) if _is_group(edges) else edges
                if value is not None and dimension and value.shape[-1:] != (dimension,):
                    report.add("H5MD012", ERROR, f"{path}/box/edges", f"edges shape {value.shape} does not fit dimension {dimension}")
        names = _links(report, group, path)
        present = [e for e in ELEMENT_KINDS if e in names]
        if name == "trajectory" and not present and profile in ("mdanalysis", "all"):
            report.add("MDA004", ERROR, path, "none of position, velocity, force: MDAnalysis has nothing to read")
        if "image" in names and "position" not in names:
            report.add("H5MD024", ERROR, f"{path}/image", "image requires position")
        for element_name in present:
            element = _get(group, element_name)
            if element is not None and _is_group(element):
                values[f"{path}/{element_name}/value"] = _check_element(report, element, f"{path}/{element_name}", dimension, profile)
            else:
                report.add("H5MD020", ERROR, f"{path}/{element_name}", "a time-dependent element must be a group with value and step")
        position = _get(group, "position")
        edges = _get(group, "box/edges")
        if position is not None and edges is not None and _is_group(edges) and _get(edges, "step") is not None:
            for series in ("step", "time"):
                a, b = _get(position, series), _get(edges, series)
                if a is not None and b is not None and a != b:
                    report.add("H5MD025", WARNING, f"{path}/box/edges/{series}", f"box and position {series} are not the same object (hard link)")
    return values


def lint_dataset(report, path, dataset):
    """Layout warnings for a per-atom ``(n, N, D)`` value dataset, with the fix spelled out."""
    fix = f"h5mdtool convert {report.file} -o {os.path.splitext(report.file)[0]}_relayout.h5md --chunk-frames auto"
    try:
        shape, chunks = dataset.shape, dataset.chunks
        itemsize = dataset.dtype.itemsize
        plist = dataset.id.get_create_plist()
        filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    except Exception as error:  # noqa: BLE001
        report.add("FILE003", ERROR, path, f"cannot read the dataset's layout: {error}")
        return
    if len(shape) != 3:
        return
    frame_bytes = shape[1] * shape[2] * itemsize
    if chunks is None:
        if shape[0] * frame_bytes > LARGE_CONTIGUOUS:
            report.add("LINT005", WARNING, path, f"contiguous dataset of {shape[0] * frame_bytes / 1e9:.0f} GB: cannot be compressed or grown", fix)
        return
    if chunks[1] < shape[1] or chunks[2] < shape[2]:
        touched = -(-shape[1] // chunks[1]) * -(-shape[2] // chunks[2])
        read = touched * int(np.prod(chunks)) * itemsize
        report.add("LINT001", WARNING, path,
                   f"chunks {chunks} split a frame: reading one frame touches {touched} chunks and "
                   f"{read / 1e6:.1f} MB for {frame_bytes / 1e6:.2f} MB of data (paper 004: 10x slower)", fix)
    chunk_bytes = int(np.prod(chunks)) * itemsize
    if chunk_bytes > DEFAULT_CHUNK_CACHE:
        report.add("LINT003", WARNING, path, f"chunks of {chunk_bytes / 1e6:.1f} MB exceed the default 1 MiB chunk cache: every read decompresses again unless readers raise rdcc_nbytes", fix)
    for code in filters:
        if code not in BUILTIN_FILTERS:
            report.add("LINT004", WARNING, path, f"filter {code} is not built into HDF5: readers need its plugin (h5py bundles lzf)",
                       f"h5mdtool convert {report.file} -o {os.path.splitext(report.file)[0]}_gzip.h5md --compression gzip")


def validate_file(path, profile="all"):
    """Check one H5MD file.

    Parameters
    ----------
    path : str
    profile : {"h5md", "mdanalysis", "all"}

    Returns
    -------
    FileReport

    Raises
    ------
    UnreadableFile
        If *path* is missing, a directory, not HDF5 or truncated (exit code 2).
    """
    import h5py

    if profile not in PROFILES:
        raise UsageError(f"--profile must be one of {', '.join(PROFILES)}")
    if not os.path.exists(path):
        raise UnreadableFile(f"{path}: no such file")
    if os.path.isdir(path):
        raise UnreadableFile(f"{path}: is a directory")
    try:
        handle = h5py.File(path, "r")
    except Exception as error:  # noqa: BLE001
        raise UnreadableFile(f"{path}: not a readable HDF5 file (empty, truncated or another format: {str(error).splitlines()[0]})") from None
    report = FileReport(path)
    with handle:
        _links(report, handle, "/")
        if profile in ("h5md", "all"):
            _check_h5md_root(report, handle)
        values = _check_particles(report, handle, profile)
        for value_path, dataset in values.items():
            if dataset is not None:
                lint_dataset(report, value_path, dataset)
    if profile == "mdanalysis":
        report.findings = [f for f in report.findings if not f.rule.startswith("H5MD") or f.severity == ERROR and f.rule in ("H5MD020", "H5MD023")]
    return report


def validate_manifest(path):
    """Check a split ``manifest.json``: structure, parts present, sizes and frame counts.

    Returns
    -------
    (FileReport, Manifest or None)
    """
    import h5py

    from .errors import InputError
    from .manifest import read_manifest
    from .sources import scan_segment

    report = FileReport(path)
    try:
        manifest = read_manifest(path)
    except InputError as error:
        if not os.path.exists(path):
            raise UnreadableFile(str(error)) from None
        report.add("MAN001", ERROR, path, str(error))
        return report, None
    for part in manifest.parts:
        if not os.path.isfile(part.path):
            report.add("MAN002", ERROR, part.relative_path, "part listed in the manifest is missing")
            continue
        size = os.path.getsize(part.path)
        if size != part.bytes:
            report.add("MAN003", ERROR, part.relative_path, f"{size} bytes on disk, {part.bytes} in the manifest")
        try:
            if part.path.lower().endswith((".h5md", ".h5")):
                with h5py.File(part.path, "r") as handle:
                    frames = int(handle["particles/trajectory/position/value"].shape[0])
            else:
                frames = scan_segment(part.path).n_frames
        except Exception as error:  # noqa: BLE001 - any unreadable part is a finding
            report.add("MAN004", ERROR, part.relative_path, f"part cannot be read: {str(error).splitlines()[0]}")
            continue
        if frames != part.n_frames:
            report.add("MAN004", ERROR, part.relative_path, f"holds {frames} frames, the manifest says {part.n_frames}")
    return report, manifest

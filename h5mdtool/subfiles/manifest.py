"""The manifest of a split trajectory (``DIR/manifest.json``): writing, reading, checking.

Format (versions 1, 2 and 3 are read)::

    {
      "manifest_version": 1 | 2 | 3,
      "kind": "h5mdtool-split",
      "format": "XTC" | "TRR" | "DCD" | "H5MD",   # format of the parts
      "n_frames": int, "n_atoms": int,
      "source": [{"path", "format", "size", "mtime", "n_frames", ...}, ...],
      "parts": [{"path": "part-0001.xtc" (relative to the manifest's directory),
                 "start": int, "stop": int,  # frame numbers in the whole trajectory, stop exclusive
                 "n_frames": int, "bytes": int,
                 # optional (written by split from version 2 on; checked when present):
                 "first_step": int, "last_step": int, "first_time": float, "last_time": float (ps; null when the trajectory records no time)
                 # optional (written by split from version 3 on; verified by validate when present):
                 "checksum": "blake2b-128:<32 hex digits>"  # of the part file's bytes
                }, ...],
      "created", "command", "h5mdtool_version", "n_ranks"
    }

Parts tile the frames: listed by ``start``, the first starts at 0, each starts where the
previous stopped, the last stops at ``n_frames``. Every way a manifest can break this has
its own rule id (``MAN001``-``MAN015``, :data:`h5mdtool.check.findings.RULES`):
:func:`document_problems` lists them from the document alone, :func:`part_problems` from
the part files; :func:`read_manifest` refuses a manifest with one line naming the first.
"""

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from ..formats.base import check_regular_file
from ..parallel.errors import InputError

#: Versions this h5mdtool reads.
SUPPORTED_VERSIONS = (1, 2, 3)
MANIFEST_KIND = "h5mdtool-split"
MANIFEST_NAME = "manifest.json"
#: Formats of parts, with the file extensions each may have.
PART_EXTENSIONS = {"XTC": (".xtc",), "TRR": (".trr",), "DCD": (".dcd",), "H5MD": (".h5md", ".h5")}
#: Part entries' counts, and the optional first/last step (int) and time (number, ps).
PART_COUNTS = ("start", "stop", "n_frames", "bytes")
STEP_KEYS = ("first_step", "last_step")
TIME_KEYS = ("first_time", "last_time")
#: The checksum split records per part: BLAKE2b with a 16-byte digest (hashlib).
CHECKSUM_ALGORITHM = "blake2b-128"
#: Bytes read at once when a file is hashed.
CHECKSUM_BUFFER = 16 * 1024**2
#: How every MAN005 message starts.
NOT_TILED = "the parts do not tile the frames"
#: Relative agreement of a recorded time with the part's (float32 resolution, as compare).
TIME_RELATIVE = float(np.finfo(np.float32).eps)


@dataclass
class Problem:
    """One thing wrong with a manifest: its rule id, where (``/`` or a part's path) and why."""

    rule: str
    where: str
    message: str


class ManifestError(InputError):
    """A manifest that breaks rule :attr:`rule` (the message names it)."""

    def __init__(self, path, problem):
        where = "" if problem.where == "/" else f"part {problem.where}: "
        super().__init__(f"{path}: {where}{problem.message} ({problem.rule})")
        self.rule = problem.rule

    def __reduce__(self):  # picklable, so rank 0 can broadcast it
        return _rebuild_error, (type(self), self.args), self.__dict__


def _rebuild_error(cls, args):
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


@dataclass
class Part:
    """One part file of a split trajectory."""

    path: str  # absolute
    relative_path: str
    start: int
    stop: int
    n_frames: int
    bytes: int
    first_step: int = None
    last_step: int = None
    first_time: float = None
    last_time: float = None
    checksum: str = None

    def recorded(self):
        """``(first_step, last_step, first_time, last_time)`` as the manifest records them (None if absent)."""
        return (self.first_step, self.last_step, self.first_time, self.last_time)


@dataclass
class Manifest:
    """A parsed, structurally checked manifest."""

    path: str
    format: str
    n_frames: int
    n_atoms: int
    parts: list
    source: list
    document: dict
    version: int = SUPPORTED_VERSIONS[-1]

    def parts_for(self, start, stop):
        """Parts overlapping trajectory frames ``[start, stop)``."""
        return [part for part in self.parts if part.start < stop and part.stop > start]


def new_checksum():
    """A hasher of :data:`CHECKSUM_ALGORITHM` (``update(bytes)``, then :func:`checksum_text`)."""
    return hashlib.blake2b(digest_size=16)


def checksum_text(hasher):
    """The checksum as a manifest records it: ``"blake2b-128:<hex>"``."""
    return f"{CHECKSUM_ALGORITHM}:{hasher.hexdigest()}"


def file_checksum(path):
    """The :data:`CHECKSUM_ALGORITHM` checksum of the file at *path*, as a manifest records it.

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    hasher = new_checksum()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHECKSUM_BUFFER)
            if not block:
                break
            hasher.update(block)
    return checksum_text(hasher)


def _is_checksum(value):
    if not isinstance(value, str):
        return False
    algorithm, _, digest = value.partition(":")
    return algorithm == CHECKSUM_ALGORITHM and len(digest) == 32 and all(c in "0123456789abcdef" for c in digest)


def write_manifest(directory, document):
    """Write *document* as ``directory/manifest.json`` (stable key order, trailing newline)."""
    path = os.path.join(directory, MANIFEST_NAME)
    with open(path, "w") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return path


def is_manifest(path):
    """True when *path* names a manifest (a ``.json`` file)."""
    return str(path).lower().endswith(".json")


def manifest_file(path):
    """``manifest.json`` inside *path* when it is a directory, else *path*."""
    path = os.fspath(path)
    return os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path


def load_document(path, error=InputError):
    """The JSON document at *path* (never blocks on a FIFO).

    Raises
    ------
    error
        If *path* is missing, not a regular file, unreadable or not JSON.
    """
    check_regular_file(path, error)
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError) as problem:
        raise error(f"{path}: not a readable JSON manifest ({problem})") from None
    except RecursionError:
        raise error(f"{path}: not a readable JSON manifest (arrays or objects nested deeper than "
                    f"Python's recursion limit, {sys.getrecursionlimit()})") from None


# -- the document ----------------------------------------------------------------------


def _is_count(value):
    """A whole number >= 0 (JSON integers only: not true/false, not 1.0, not "1")."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_step(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


def _unusable_name(relative):
    """Why *relative* can name no file on any file system (a NUL, an unencodable character), or None."""
    try:
        encoded = os.fsencode(relative)
    except UnicodeError as problem:
        return f"cannot be encoded for the file system ({problem.reason})"
    return "holds a NUL character" if b"\0" in encoded else None


def _escapes(relative):
    return os.path.isabs(relative) or relative.replace("\\", "/").split("/")[0] == ".." or \
        os.path.normpath(relative).startswith("..")


def document_problems(document, directory="."):
    """Everything wrong with a manifest document that shows without opening its parts.

    Parameters
    ----------
    document : object
        The parsed JSON.
    directory : str
        The manifest's directory (part paths are relative to it).

    Returns
    -------
    (list of Problem, Manifest or None)
        The problems in the order found, and the manifest when its fields could be read
        (even if its parts do not tile).
    """
    problems = []

    def add(rule, where, message):
        problems.append(Problem(rule, where, message))

    if not isinstance(document, dict):
        add("MAN001", "/", f"a manifest is a JSON object, not {type(document).__name__}")
        return problems, None
    if document.get("kind") != MANIFEST_KIND:
        add("MAN001", "/", f"not an h5mdtool split manifest (kind must be {MANIFEST_KIND!r}, got {document.get('kind')!r})")
        return problems, None
    version = document.get("manifest_version")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        add("MAN001", "/", f"manifest version {version!r} is not supported (this h5mdtool reads versions "
                           f"{', '.join(str(v) for v in SUPPORTED_VERSIONS)})")
        return problems, None
    missing = [key for key in ("format", "n_frames", "n_atoms", "parts") if key not in document]
    if missing:
        add("MAN001", "/", f"no field {', '.join(missing)}")
        return problems, None
    fmt = document["format"]
    if fmt not in PART_EXTENSIONS:
        add("MAN014", "/", f"unknown format {fmt!r} (known: {', '.join(PART_EXTENSIONS)})")
    for key in ("n_frames", "n_atoms"):
        if not _is_count(document[key]):
            add("MAN012", "/", f"{key} must be a whole number >= 0, got {document[key]!r}")
    entries = document["parts"]
    if not isinstance(entries, list):
        add("MAN001", "/", f"parts must be a list, not {type(entries).__name__}")
        return problems, None
    if not entries:
        add("MAN013", "/", "the part list is empty")
        return problems, None
    parts, usable = [], not problems
    for number, entry in enumerate(entries):
        name = entry.get("path") if isinstance(entry, dict) else None
        where = name if isinstance(name, str) else f"#{number}"
        if not isinstance(entry, dict):
            add("MAN001", where, f"part {number} is not a JSON object")
            usable = False
            continue
        absent = [key for key in ("path",) + PART_COUNTS if key not in entry]
        if absent:
            add("MAN001", where, f"part {number} has no field {', '.join(absent)}")
            usable = False
            continue
        if not isinstance(name, str) or not name:
            add("MAN001", where, f"part {number}: path must be a string, got {name!r}")
            usable = False
            continue
        bad = [key for key in PART_COUNTS if not _is_count(entry[key])]
        bad += [key for key in STEP_KEYS if key in entry and not _is_step(entry[key])]
        # null: the trajectory records no time (split writes none rather than inventing one)
        bad += [key for key in TIME_KEYS if entry.get(key) is not None and not _is_time(entry[key])]
        if "checksum" in entry and not _is_checksum(entry["checksum"]):
            bad.append("checksum")
        for key in bad:
            kind = ("an integer" if key in STEP_KEYS else "a finite number" if key in TIME_KEYS
                    else f"'{CHECKSUM_ALGORITHM}:' and 32 hex digits" if key == "checksum" else "a whole number >= 0")
            add("MAN012", where, f"{key} must be {kind}, got {entry[key]!r}")
        if bad:
            usable = False
            continue
        unusable = _unusable_name(name)
        if unusable:  # named by number: the name itself cannot be printed as it is
            add("MAN007", f"#{number}", f"path {name!r} {unusable}")
            usable = False
            continue
        if _escapes(name):
            add("MAN007", where, f"path {name!r} is absolute or leaves the manifest's directory")
        elif fmt in PART_EXTENSIONS and not name.lower().endswith(PART_EXTENSIONS[fmt]):
            add("MAN014", where, f"the extension of {name!r} is not that of {fmt} parts ({', '.join(PART_EXTENSIONS[fmt])})")
        parts.append(Part(path=os.path.join(directory, name), relative_path=name, start=entry["start"],
                          stop=entry["stop"], n_frames=entry["n_frames"], bytes=entry["bytes"],
                          checksum=entry.get("checksum"), **{key: entry.get(key) for key in STEP_KEYS + TIME_KEYS}))
    if not usable:
        return problems, None
    problems += _tiling_problems(parts, document["n_frames"])
    manifest = Manifest(path=None, format=fmt, n_frames=document["n_frames"], n_atoms=document["n_atoms"],
                        parts=parts, source=list(document.get("source") or []), document=document, version=version)
    return problems, manifest


def _tiling_problems(parts, n_frames):
    """MAN008 (same file twice, same frames twice), MAN011 (order), MAN010, MAN005."""
    problems = []
    seen = {}
    for number, part in enumerate(parts):
        key = os.path.normpath(part.relative_path)
        if key in seen:
            problems.append(Problem("MAN008", part.relative_path, f"listed twice (entries {seen[key]} and {number})"))
        seen.setdefault(key, number)
    for before, after in zip(parts, parts[1:]):
        if after.start < before.start:
            problems.append(Problem("MAN011", after.relative_path, f"listed after {before.relative_path} but starts earlier "
                                                                   f"(frame {after.start} < {before.start}): parts must be listed in frame order"))
            break
    expected = 0
    previous = None
    for part in sorted(parts, key=lambda p: (p.start, p.stop)):
        frames = f"frames {part.start}-{part.stop}"
        if part.stop <= part.start:
            problems.append(Problem("MAN005", part.relative_path, f"{NOT_TILED}: it covers {frames}, and a part holds at least one frame"))
            continue
        if part.n_frames != part.stop - part.start:
            problems.append(Problem("MAN005", part.relative_path, f"{NOT_TILED}: n_frames is {part.n_frames} but it covers {frames} ({part.stop - part.start})"))
        if previous is not None and (part.start, part.stop) == (previous.start, previous.stop):
            problems.append(Problem("MAN008", part.relative_path, f"covers {frames}, as {previous.relative_path} does"))
        elif part.start < expected:
            problems.append(Problem("MAN010", part.relative_path, f"covers {frames} but {previous.relative_path} already covers frames up to {expected}"))
        elif part.start > expected:
            problems.append(Problem("MAN005", part.relative_path, f"{NOT_TILED}: it starts at frame {part.start}, frames {expected}-{part.start} are in no part (a missing part)"))
        expected = max(expected, part.stop)
        previous = part
    if expected != n_frames:
        problems.append(Problem("MAN005", "/", f"{NOT_TILED}: they cover frames 0-{expected} but the manifest says {n_frames} frames"))
    return problems


def read_manifest(path):
    """Read a split manifest and check its document (every rule that needs no part file).

    Parameters
    ----------
    path : str
        ``manifest.json`` or the directory holding it.

    Returns
    -------
    Manifest

    Raises
    ------
    InputError
        If the file is missing, not a regular file or not JSON.
    ManifestError
        For the first broken rule (``MAN001``, ``MAN005``, ``MAN007``, ``MAN008``,
        ``MAN010``-``MAN014``), named in its one-line message.
    """
    path = manifest_file(path)
    document = load_document(path)
    problems, manifest = document_problems(document, os.path.dirname(os.path.abspath(path)))
    if problems:
        raise ManifestError(path, problems[0])
    manifest.path = os.path.abspath(path)
    return manifest


# -- the part files ---------------------------------------------------------------------


def checksum_problems(parts, comm):
    """Parts whose bytes do not give the checksum the manifest records (``MAN016``).

    Parameters
    ----------
    parts : list of (str, str, str)
        ``(relative path, path, recorded checksum)`` of each part to verify, the same list on
        every rank.
    comm : communicator
        The parts are shared among its ranks (balanced contiguous runs); each rank reads
        and hashes its own.

    Returns
    -------
    list of Problem
        In part order, the same on every rank.
    """
    from ..parallel.mpi import balanced_slices, is_parallel

    first, last = balanced_slices(len(parts), comm.size)[comm.rank]
    found = []
    for number in range(first, last):
        relative, path, recorded = parts[number]
        try:
            actual = file_checksum(path)
        except OSError as error:
            found.append(Problem("MAN016", relative, f"cannot be read to verify its checksum ({error.strerror or error})"))
            continue
        if actual != recorded:
            found.append(Problem("MAN016", relative, f"its bytes give checksum {actual}, the manifest records {recorded}: "
                                                     "the part changed since the split (damaged or replaced)"))
    if not is_parallel(comm):
        return found
    return [problem for rank_problems in comm.allgather(found) for problem in rank_problems]


@dataclass
class PartFacts:
    """What a part file really holds."""

    n_frames: int
    n_atoms: int
    first_step: int
    last_step: int
    first_time: float
    last_time: float
    digest: str  # of the first frame's positions (velocities, forces when no frame has positions)
    format: str = None
    has_time: bool = True
    problems: list = field(default_factory=list)

    def actual(self):
        return (self.first_step, self.last_step, self.first_time, self.last_time)


def scan_part(path, near_step=None):
    """Frames, atoms, first and last step and time of one part file, and a digest of frame 0.

    *near_step* places steps an XTC or TRR part stores modulo 2**32 (its recorded first step).

    Raises
    ------
    InputError
        If the part cannot be read.
    """
    from ..formats import TrajectoryIndex, TrajectoryReader, scan_segment

    segment = scan_segment(path, near_step=near_step)
    index = TrajectoryIndex([segment])
    # a TRR part may hold frames of velocities or forces alone (nstvout != nstxout)
    field = next(name for name in ("positions", "velocities", "forces") if index.has(name))
    first = int(np.flatnonzero(index.fields[field])[0])
    with TrajectoryReader(index, None, (field,)) as reader:
        block = reader.read(np.array([first]), reader.new_block(1))
        values = np.ascontiguousarray(getattr(block, field)[0])
        digest = hashlib.blake2b(field.encode() + values.tobytes(), digest_size=16).hexdigest()
    steps = segment.step
    times = segment.time if segment.time is not None else np.full(len(steps), np.nan)
    return PartFacts(segment.n_frames, segment.n_atoms, int(steps[0]), int(steps[-1]), float(times[0]),
                     float(times[-1]), digest, segment.format, segment.time is not None)


def segment_clock(segment):
    """``(first_step, last_step, first_time, last_time)`` of a scanned part and whether it records time."""
    steps, times = segment.step, segment.time
    if times is None:
        return (int(steps[0]), int(steps[-1]), None, None), False
    return (int(steps[0]), int(steps[-1]), float(times[0]), float(times[-1])), True


def clock_problem(manifest, part, actual, has_time=True, others=None):
    """The problem of a part whose first or last step or time is not the one recorded, or None.

    A check from each part's own scan, for readers that must refuse swapped or copied parts
    before reading them (``bench rmsd``); ``validate`` checks more (:func:`part_problems`).

    Parameters
    ----------
    manifest : Manifest
    part : Part
    actual : tuple
        The part's ``(first_step, last_step, first_time, last_time)`` (:func:`segment_clock`).
    has_time : bool
        False when the part records no time (times are then not compared).
    others : dict, optional
        Part path -> ``(actual, has_time)`` of other parts scanned by the caller: tells a
        swap (the other part holds this one's frames) from a copy.

    Returns
    -------
    Problem or None
        ``MAN009`` when the part holds the frames recorded for another part (swapped, or a
        copy of it: ``MAN008``, when the other part is known to hold its own), ``MAN015``
        when they are nobody's; None when they match or the manifest records none (version 1).
    """
    recorded = part.recorded()
    if all(value is None for value in recorded) or _matches(recorded, actual, has_time):
        return None
    others = others or {}
    owner = next((other for other in manifest.parts if other is not part
                  and not all(value is None for value in other.recorded())
                  and _matches(other.recorded(), actual, has_time)), None)
    if owner is None:
        return Problem("MAN015", part.relative_path, f"holds {_describe(actual)}, the manifest records {_describe(recorded)}")
    theirs = others.get(owner.path)
    if theirs is not None and _matches(owner.recorded(), *theirs):
        return Problem("MAN008", part.relative_path, f"holds the frames recorded for {owner.relative_path} "
                                                     f"({_describe(actual)}): a copy of that part")
    how = "swapped" if theirs is not None and _matches(recorded, *theirs) else "swapped with or copied from it"
    return Problem("MAN009", part.relative_path, f"holds the frames recorded for {owner.relative_path} "
                                                 f"({_describe(actual)}), not its own ({_describe(recorded)}): {how}")


def _same_time(a, b):
    return a is None or b is None or abs(a - b) <= TIME_RELATIVE * max(abs(a), abs(b)) + 1e-9


def _matches(recorded, actual, has_time=True):
    """Recorded ``(first_step, last_step, first_time, last_time)`` agree with the part's actual ones."""
    steps = all(r is None or r == a for r, a in zip(recorded[:2], actual[:2]))
    times = not has_time or all(_same_time(r, a) for r, a in zip(recorded[2:], actual[2:]))
    return steps and times


def part_problems(manifest):
    """Everything wrong with a manifest's part files (rank 0; reads two frames of each part).

    Missing or irregular files (``MAN002``), sizes (``MAN003``), frame counts and unreadable
    parts (``MAN004``), atom counts (``MAN006``), recorded steps and times that are another
    part's (``MAN009`` swapped, ``MAN008`` duplicated) or nobody's (``MAN015``), two files
    holding the same frames (``MAN008``) and, without recorded steps, steps that run
    backwards between parts that each increase (``MAN009``).

    Returns
    -------
    (list of Problem, dict)
        The problems, and :class:`PartFacts` by part path for the parts that could be read.
    """
    problems, facts = [], {}
    for part in manifest.parts:
        name = part.relative_path
        try:
            check_regular_file(part.path)
        except InputError as error:
            problems.append(Problem("MAN002", name, f"{'missing' if 'no such file' in str(error) else str(error).split(': ', 1)[-1]}"))
            continue
        size = os.path.getsize(part.path)
        if size != part.bytes:
            problems.append(Problem("MAN003", name, f"{size} bytes on disk, {part.bytes} in the manifest"))
        try:
            found = scan_part(part.path, near_step=part.first_step)
        except InputError as error:
            problems.append(Problem("MAN004", name, f"cannot be read: {error}"))
            continue
        except Exception as error:  # noqa: BLE001 - any unreadable part is a finding
            problems.append(Problem("MAN004", name, f"cannot be read: {type(error).__name__}: {error}"))
            continue
        facts[part.path] = found
        if found.n_frames != part.n_frames:
            problems.append(Problem("MAN004", name, f"holds {found.n_frames} frames, the manifest says {part.n_frames}"))
        if found.n_atoms != manifest.n_atoms:
            problems.append(Problem("MAN006", name, f"holds {found.n_atoms} atoms, the manifest says {manifest.n_atoms}"))
    problems += _identity_problems(manifest, facts)
    return problems, facts


def _describe(values):
    first_step, last_step, first_time, last_time = values
    text = f"steps {first_step}-{last_step}"
    return text + (f", times {first_time:g}-{last_time:g} ps" if first_time is not None and last_time is not None else "")


def _identity_problems(manifest, facts):
    """Swapped, duplicated and mislabelled parts, from recorded steps/times or from the files."""
    problems = []
    read = [part for part in manifest.parts if part.path in facts]
    flagged = set()
    for part in read:
        actual = facts[part.path]
        recorded = part.recorded()
        if all(value is None for value in recorded) or _matches(recorded, actual.actual(), actual.has_time):
            continue
        owner = next((other for other in read if other is not part and not all(v is None for v in other.recorded())
                      and _matches(other.recorded(), actual.actual(), actual.has_time)), None)
        if owner is not None and _matches(recorded, facts[owner.path].actual(), facts[owner.path].has_time):
            if owner.path not in flagged:
                problems.append(Problem("MAN009", part.relative_path, f"holds the frames recorded for {owner.relative_path} "
                                                                      f"({_describe(actual.actual())}) and {owner.relative_path} holds this part's: swapped"))
            flagged.add(part.path)
        elif owner is not None:
            problems.append(Problem("MAN008", part.relative_path, f"holds the frames recorded for {owner.relative_path} "
                                                                  f"({_describe(actual.actual())}): a duplicate of that part"))
            flagged.add(part.path)
        else:
            problems.append(Problem("MAN015", part.relative_path, f"holds {_describe(actual.actual())}, the manifest records {_describe(recorded)}"))
            flagged.add(part.path)
    by_content = {}
    for part in read:
        actual = facts[part.path]
        key = (actual.digest, actual.n_frames, actual.first_step, actual.last_step)
        if key in by_content and part.path not in flagged:
            problems.append(Problem("MAN008", part.relative_path, f"holds the same frames as {by_content[key].relative_path} "
                                                                  f"(same first frame, {_describe(actual.actual())})"))
            flagged.add(part.path)
        by_content.setdefault(key, part)
    if any(part.first_step is not None for part in manifest.parts) or len(read) != len(manifest.parts):
        return problems
    ranges = [(facts[p.path].first_step, facts[p.path].last_step, p) for p in read]
    increasing = all(first < last or facts[p.path].n_frames == 1 for first, last, p in ranges)
    ordered = sorted(ranges, key=lambda r: r[0])
    disjoint = all(a[1] < b[0] for a, b in zip(ordered, ordered[1:]))
    if increasing and disjoint:
        for before, after in zip(ranges, ranges[1:]):
            if after[0] < before[1] and before[2].path not in flagged:
                problems.append(Problem("MAN009", before[2].relative_path, f"holds steps {before[0]}-{before[1]}, after those of "
                                        f"{after[2].relative_path} ({after[0]}-{after[1]}) listed behind it: parts swapped "
                                        "(or the source's steps go backwards here: check with --against SOURCE)"))
                break
    return problems

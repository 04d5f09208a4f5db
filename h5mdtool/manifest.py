"""The manifest of a split trajectory (``DIR/manifest.json``): writing, reading, checking.

Format (version 1)::

    {
      "manifest_version": 1,
      "kind": "h5mdtool-split",
      "format": "XTC" | "TRR" | "DCD" | "H5MD",   # format of the parts
      "n_frames": int, "n_atoms": int,
      "source": [{"path", "format", "size", "mtime", "n_frames", ...}, ...],
      "parts": [{"path": "part-0001.xtc" (relative to the manifest's directory),
                 "start": int, "stop": int,  # frame numbers in the whole trajectory, stop exclusive
                 "n_frames": int, "bytes": int}, ...],
      "created", "command", "h5mdtool_version", "n_ranks"
    }

Parts tile the frames: the first starts at 0, each starts where the previous stopped, the
last stops at ``n_frames``.
"""

import json
import os
from dataclasses import dataclass

from .errors import InputError

MANIFEST_VERSION = 1
MANIFEST_KIND = "h5mdtool-split"
MANIFEST_NAME = "manifest.json"


@dataclass
class Part:
    """One part file of a split trajectory."""

    path: str  # absolute
    relative_path: str
    start: int
    stop: int
    n_frames: int
    bytes: int


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

    def parts_for(self, start, stop):
        """Parts overlapping trajectory frames ``[start, stop)``."""
        return [part for part in self.parts if part.start < stop and part.stop > start]


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


def read_manifest(path):
    """Read and check a split manifest.

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
        If the file is missing, not JSON, of another kind or version, or its parts do not
        tile ``[0, n_frames)``.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, MANIFEST_NAME)
    try:
        with open(path) as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest") from None
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a readable JSON manifest ({error})") from None
    if not isinstance(document, dict) or document.get("kind") != MANIFEST_KIND:
        raise InputError(f"{path}: not an h5mdtool split manifest (kind must be {MANIFEST_KIND!r})")
    if document.get("manifest_version") != MANIFEST_VERSION:
        raise InputError(
            f"{path}: manifest version {document.get('manifest_version')!r} is not supported "
            f"(this h5mdtool reads version {MANIFEST_VERSION})"
        )
    directory = os.path.dirname(os.path.abspath(path))
    try:
        n_frames = int(document["n_frames"])
        parts = [
            Part(
                path=os.path.join(directory, str(entry["path"])),
                relative_path=str(entry["path"]),
                start=int(entry["start"]),
                stop=int(entry["stop"]),
                n_frames=int(entry["n_frames"]),
                bytes=int(entry["bytes"]),
            )
            for entry in document["parts"]
        ]
        manifest = Manifest(
            path=os.path.abspath(path),
            format=str(document["format"]),
            n_frames=n_frames,
            n_atoms=int(document["n_atoms"]),
            parts=parts,
            source=list(document.get("source", [])),
            document=document,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{path}: malformed manifest ({type(error).__name__}: {error})") from None
    expected = 0
    for number, part in enumerate(parts):
        if part.start != expected or part.stop <= part.start or part.n_frames != part.stop - part.start:
            raise InputError(
                f"{path}: part {number} ({part.relative_path}) covers frames "
                f"{part.start}-{part.stop} but the parts must tile the frames from {expected} on"
            )
        expected = part.stop
    if expected != n_frames:
        raise InputError(f"{path}: the parts cover {expected} frames but the manifest says {n_frames}")
    return manifest

"""``h5mdtool info``: what an H5MD file holds and how it is laid out, with layout advice."""

import os

import numpy as np

from .layout import read_provenance
from .validate import FileReport, UnreadableFile, lint_dataset, validate_file


def _filters(dataset):
    plist = dataset.id.get_create_plist()
    names = {1: "gzip", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset", 32000: "lzf"}
    return [names.get(plist.get_filter(i)[0], str(plist.get_filter(i)[0])) for i in range(plist.get_nfilters())]


def describe_dataset(dataset):
    """Shape, dtype, chunks, filters, stored and raw bytes, one-frame read cost of *dataset*."""
    raw = int(np.prod(dataset.shape, dtype=np.int64)) * dataset.dtype.itemsize
    record = {
        "shape": list(dataset.shape), "dtype": str(dataset.dtype),
        "chunks": list(dataset.chunks) if dataset.chunks else None,
        "filters": _filters(dataset), "raw_bytes": raw,
        "stored_bytes": int(dataset.id.get_storage_size()),
    }
    if dataset.ndim >= 2 and dataset.shape[0]:
        frame = int(np.prod(dataset.shape[1:])) * dataset.dtype.itemsize
        if dataset.chunks:
            chunks_touched = int(np.prod([-(-s // c) for s, c in zip(dataset.shape[1:], dataset.chunks[1:])]))
            record["one_frame_read"] = {"chunks": chunks_touched,
                                        "bytes": chunks_touched * int(np.prod(dataset.chunks)) * dataset.dtype.itemsize,
                                        "frame_bytes": frame}
        else:
            record["one_frame_read"] = {"chunks": 0, "bytes": frame, "frame_bytes": frame}
    return record


def aligned_share(dataset, interval):
    """Share of *dataset*'s chunks whose file address is a multiple of *interval* bytes."""
    count = dataset.id.get_num_chunks()
    aligned = sum(dataset.id.get_chunk_info(i).byte_offset % interval == 0 for i in range(count))
    return {"stripe_size": interval, "chunks": count, "aligned": aligned,
            "share": aligned / count if count else None}


def info(path):
    """Describe an H5MD file: frames, atoms, time, box, datasets, provenance, lint findings.

    Raises
    ------
    UnreadableFile
        If the file cannot be opened as HDF5.
    """
    import h5py

    report = validate_file(path, profile="all")
    result = {"file": os.path.abspath(path), "bytes": os.path.getsize(path), "datasets": {}}
    with h5py.File(path, "r") as handle:
        group = handle.get("particles/trajectory")
        value = group.get("position/value") if group is not None and "position" in group else None
        if value is not None:
            result["n_frames"], result["n_atoms"] = int(value.shape[0]), int(value.shape[1])
            time = group["position"].get("time")
            if time is not None and time.shape and time.shape[0]:
                t = time[:]
                result["time"] = {"first": float(t[0]), "last": float(t[-1]), "unit": str(time.attrs.get("unit", "")),
                                  "interval": float(np.median(np.diff(t))) if len(t) > 1 else None}
            box = group.get("box")
            result["box"] = [str(b.decode() if isinstance(b, bytes) else b) for b in np.atleast_1d(box.attrs.get("boundary", []))] if box is not None else None

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("parameters/"):
                result["datasets"][f"/{name}"] = describe_dataset(obj)

        handle.visititems(visit)
        result["provenance"] = read_provenance(handle)
        stripe = ((result["provenance"] or {}).get("layout") or {}).get("stripe_size")
        if value is not None and stripe and value.chunks:
            result["stripe_alignment"] = aligned_share(value, int(stripe))
    result["findings"] = [vars(f) for f in report.findings]
    return result

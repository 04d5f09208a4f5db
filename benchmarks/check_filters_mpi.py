"""Round-trip check of compression filters in collective parallel writes (compression study).

``tools/mpirun.sh -n 2 .venv/bin/python benchmarks/check_filters_mpi.py [KEY ...]``

For each candidate layout of ``layout_candidates.py`` (default: the ones the study
recommends), every rank writes its whole chunks of real XTC-decoded positions (the AdK 100x
trajectory's first frames) with collective HDF5 calls through the mpio driver; rank 0 then
reopens the file serially and compares every value with what was written: equal for
lossless layouts, within the bound for lossy ones. Three shapes per layout: many chunks
spread over the ranks, a partial last chunk, and a single chunk (the other ranks write
nothing and take part with an empty selection). Exit status 1 when any check fails.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from layout_candidates import candidates, write_file  # noqa: E402

RECOMMENDED = [
    "i32-shuffle-gzip4", "i32-shuffle-zstd3", "i32-bshuf-lz4", "i32-bshuf-zstd3", "i32-blosc2-shuffle-zstd5",
    "i32-blosc2-bitshuffle-zstd5", "f32-shuffle-lz4",
    "i32-blosc2-bitshuffle-lz4-5", "f32-blosc2-bitshuffle-zstd1", "f32-bshuf-lz4", "f32-shuffle-zstd1",
    "f32-sz-abs", "f32-sz3-abs", "f32-zfp-acc", "f32-so3-gzip4",
]
#: (frames, chunk frames): many chunks; a partial last chunk; one chunk for all ranks
SHAPES = [(96, 8), (100, 16), (8, 8)]


def positions(n_frames):
    """The first *n_frames* XTC-decoded frames of the AdK 100x trajectory (float32 nm)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    from data import repeated_xtc

    with XTCFile(repeated_xtc(100)) as xtc:
        return np.stack([xtc.read().x for _ in range(n_frames)]).astype(np.float32)


def main(keys):
    import h5py
    import hdf5plugin  # noqa: F401 - registers the filters
    from mpi4py import MPI

    from h5mdtool.parallel.mpi import resolve

    comm = resolve()
    assert h5py.get_config().mpi, "h5py without MPI"
    table = candidates()
    keys = keys or RECOMMENDED
    data = positions(max(n for n, _ in SHAPES))
    directory = comm.bcast(tempfile.mkdtemp(prefix="filters-", dir=os.environ.get("TMPDIR")) if comm.rank == 0 else None)
    failures = 0
    for key in keys:
        candidate = table[key]
        rep = candidate.representation
        for n_frames, chunk in SHAPES:
            path = os.path.join(directory, f"{key}-{n_frames}-{chunk}.h5md")
            block = data[:n_frames]
            stored_range = (int(rep.encode(block).min()), int(rep.encode(block).max())) if candidate.nbit else None
            error = None
            try:
                write_file(path, candidate, block, chunk, comm, stored_range=stored_range)
            except Exception as exc:  # noqa: BLE001 - reported per layout
                error = f"write failed: {exc}"
            errors = comm.gather(error)
            if comm.rank == 0:
                message = next((e for e in errors if e), None)
                if message is None:
                    with h5py.File(path, "r") as handle:
                        stored = handle["particles/trajectory/position/value"][()]
                    expected = rep.encode(block)
                    if candidate.lossy:
                        worst = float(np.abs(rep.decode(stored) - block.astype(np.float64)).max())
                        ok = worst <= candidate.bound_nm * (1 + 1e-6) + 1e-7
                        message = f"max error {worst:.3g} nm (bound {candidate.bound_nm:g})"
                    else:
                        ok = np.array_equal(stored, expected)
                        message = "identical" if ok else f"{int((stored != expected).sum())} values differ"
                else:
                    ok = False
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {comm.size} ranks  {key:<32s} {n_frames:4d} frames, chunks of "
                      f"{chunk:3d}: {message}", flush=True)
                if os.path.exists(path):
                    os.remove(path)
            comm.Barrier()
    if comm.rank == 0:
        os.rmdir(directory)
        print(f"{failures} failure(s); h5py {h5py.version.version}, HDF5 {h5py.version.hdf5_version}, "
              f"hdf5plugin {hdf5plugin.version}, {MPI.Get_library_version().splitlines()[0]}")
    sys.exit(1 if comm.bcast(failures) else 0)


if __name__ == "__main__":
    main(sys.argv[1:])

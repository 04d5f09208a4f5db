"""Parallel compressed writes: HDF5's collective filtered write against our own compression
threads with HDF5's direct chunk write (compression study, issue 13 part 1, item 5).

``[tools/mpirun.sh -n N] python study_parallel_write.py POSITIONS.npy KEY METHOD OUTPUT
[--chunk-frames 32] [--threads T] [--check]``

Methods (every one writes the same H5MD file, chunks of whole frames, each rank its
balanced share of whole chunks, in rounds of about 32 MiB of positions per rank):

``hdf5``    collective ``H5Dwrite`` through the mpio driver: HDF5 1.10.8 runs the filters
            on each rank's chunks, then exchanges the compressed sizes, reallocates file
            space collectively and writes with collective MPI-IO (``write_file``).
``gather``  each rank compresses its chunks in T threads (``h5mdtool.h5md.chunkcodec.FilterPipeline``,
            byte for byte HDF5's output), rank 0 gathers them and stores them with
            ``write_direct_chunk`` into the file it opened without MPI-IO.
``pwrite``  as ``gather``, but only the chunk *sizes* go to rank 0: it allocates every
            chunk with ``write_direct_chunk`` (its own chunks with their data, the others'
            with zeros of the right size), looks their file addresses up
            (``get_chunk_info_by_coord``) and broadcasts them; every rank then writes its
            own compressed chunks at those addresses with ``os.pwrite``.

Direct chunk writes into a file opened with the mpio driver by every rank were tried
first (``probe_direct_chunk_mpio.py``): each rank writing only its own chunks hangs in the
collective close (the ranks' metadata differ); every rank writing every chunk with the
same bytes works but makes every rank hold and write all the data.

Rank 0 prints one JSON line: seconds (creation to close, all ranks), bytes, per-rank
round timelines (compress, exchange, write), and with ``--check`` whether the file reads
back (h5py, HDF5's filters) equal to what was written.
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from layout_candidates import BLOCK_BYTES, XTC_GRID_NM, candidates, create_file, write_file  # noqa: E402


def rounds_of(begin, stop, capacity, slices):
    n_rounds = max(-(-(b - a) // capacity) for a, b in slices)
    for number in range(n_rounds):
        first = begin + number * capacity
        yield number, first, min(stop, first + capacity)


def compress_block(pipeline, stored, chunk, pool):
    """Compressed bytes of each whole chunk of *stored* (frames of one round), in threads."""
    pieces = [stored[i:i + chunk] for i in range(0, len(stored), chunk)]
    if len(pieces) and len(pieces[-1]) < chunk:  # a partial last chunk is stored at full size
        padded = np.zeros((chunk,) + stored.shape[1:], stored.dtype)
        padded[:len(pieces[-1])] = pieces[-1]
        pieces[-1] = padded
    if pool is None:
        return [bytes(pipeline.encode(p)[0]) for p in pieces]
    return list(pool.map(lambda p: bytes(pipeline.encode(p)[0]), pieces))


def direct_write(path, candidate, local, n_frames, local_start, chunk, comm, method, threads):
    """The ``gather`` and ``pwrite`` methods; returns (seconds, this rank's timeline)."""
    import h5py

    from h5mdtool.h5md.chunkcodec import FilterPipeline
    from h5mdtool.parallel.mpi import chunk_aligned_slices

    n_atoms = local.shape[1]
    rep = candidate.representation
    capacity = max(1, BLOCK_BYTES // (chunk * n_atoms * 12)) * chunk
    slices = chunk_aligned_slices(n_frames, chunk, comm.size)
    begin, stop = slices[comm.rank]
    buffer = np.empty((min(capacity, max(1, stop - begin)), n_atoms, 3), rep.dtype)
    comm.Barrier()
    started = time.perf_counter()
    h5file = value = None
    if comm.rank == 0:
        h5file = h5py.File(path, "w", libver=("v110", "latest"), rdcc_nbytes=0)
        value, steps, times_ = create_file(h5file, candidate, n_frames, n_atoms, chunk)
        steps[...] = np.arange(1, n_frames + 1)
        times_[...] = np.arange(n_frames, dtype=np.float64)
        h5file.flush()
    # every rank needs the pipeline's parameters: rank 0 made the dataset, the others build
    # the same one in memory
    if comm.rank == 0:
        pipeline = FilterPipeline.of(value)
    else:
        scratch = h5py.File(f"scratch-{os.getpid()}", "w", driver="core", backing_store=False)
        scratch_value, _, _ = create_file(scratch, candidate, n_frames, n_atoms, chunk)
        pipeline = FilterPipeline.of(scratch_value)
    comm.Barrier()
    if comm.rank != 0 and method == "pwrite":
        descriptor = os.open(path, os.O_WRONLY)
    pool = ThreadPoolExecutor(threads) if threads > 1 and pipeline.thread_safe else None
    timeline = []
    for number, first, last in rounds_of(begin, stop, capacity, slices):
        count = max(0, last - first)
        t0 = time.perf_counter()
        stored = rep.encode(local[first - local_start:last - local_start], out=buffer[:count])
        chunks = compress_block(pipeline, stored, chunk, pool) if count else []
        t1 = time.perf_counter()
        if method == "gather":
            received = comm.gather((first, chunks))
            t2 = time.perf_counter()
            if comm.rank == 0:
                for start, pieces in received:
                    for i, piece in enumerate(pieces):
                        value.id.write_direct_chunk((start + i * chunk, 0, 0), piece)
        else:
            sizes = comm.gather((first, [len(p) for p in chunks]))
            t2 = time.perf_counter()
            addresses = None
            if comm.rank == 0:
                zeros = memoryview(bytes(max((max(s, default=0) for _, s in sizes), default=0)))
                addresses = []
                for rank, (start, lengths) in enumerate(sizes):
                    places = []
                    for i, length in enumerate(lengths):
                        offset = (start + i * chunk, 0, 0)
                        value.id.write_direct_chunk(offset, chunks[i] if rank == 0 else zeros[:length])
                        places.append(value.id.get_chunk_info_by_coord(offset).byte_offset)
                    addresses.append(places)
            places = comm.bcast(addresses)[comm.rank]
            if comm.rank != 0:
                for piece, address in zip(chunks, places):
                    os.pwrite(descriptor, piece, address)
        t3 = time.perf_counter()
        timeline.append({"round": number, "frames": count, "start": t0 - started, "compress": t1 - t0,
                         "exchange": t2 - t1, "write": t3 - t2})
    if pool is not None:
        pool.shutdown()
    if comm.rank != 0 and method == "pwrite":
        os.close(descriptor)
    comm.Barrier()  # every pwrite is done before rank 0 writes the metadata and closes
    if comm.rank == 0:
        h5file.close()
    else:
        scratch.close()
    comm.Barrier()
    return time.perf_counter() - started, timeline


def check(path, candidate, every):
    """True when the stored values equal the representation of *every* (lossy: within bound)."""
    import h5py

    rep = candidate.representation
    worst, equal = 0.0, True
    with h5py.File(path, "r") as handle:
        value = handle["particles/trajectory/position/value"]
        for first in range(0, value.shape[0], 2048):
            stored = value[first:first + 2048]
            source = np.asarray(every[first:first + 2048])
            if candidate.lossy:
                worst = max(worst, float(np.abs(rep.decode(stored) - source).max()))
            else:
                equal &= bool(np.array_equal(stored, rep.encode(source)))
    return equal and (not candidate.lossy or worst <= candidate.bound_nm * (1 + 1e-6) + 1e-7)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("positions")
    parser.add_argument("key")
    parser.add_argument("method", choices=["hdf5", "gather", "pwrite"])
    parser.add_argument("output")
    parser.add_argument("--chunk-frames", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="compression threads per rank (gather, pwrite)")
    parser.add_argument("--check", action="store_true", help="read the file back and compare (rank 0)")
    args = parser.parse_args()

    import hdf5plugin  # noqa: F401 - registers the filters

    from h5mdtool.parallel.mpi import chunk_aligned_slices, resolve

    comm = resolve()
    candidate = candidates(XTC_GRID_NM)[args.key]
    every = np.load(args.positions, mmap_mode="r")
    n_frames = len(every)
    chunk = min(args.chunk_frames, n_frames)
    begin, stop = chunk_aligned_slices(n_frames, chunk, comm.size)[comm.rank]
    local = np.array(every[begin:max(stop, begin + 1)])
    if args.method == "hdf5":
        result = write_file(args.output, candidate, local, chunk, comm, n_frames=n_frames, local_start=begin)
        seconds, timeline = result["seconds"], result["timeline"]
    else:
        seconds, timeline = direct_write(args.output, candidate, local, n_frames, begin, chunk, comm, args.method,
                                         args.threads)
    seconds = max(comm.allgather(seconds))
    timelines = comm.gather(timeline)
    if comm.rank == 0:
        document = {"key": args.key, "method": args.method, "ranks": comm.size, "threads": args.threads,
                    "chunk_frames": chunk, "seconds": seconds, "bytes": os.path.getsize(args.output),
                    "timelines": timelines}
        if args.check:
            document["check"] = check(args.output, candidate, every)
        print(json.dumps(document))


if __name__ == "__main__":
    main()

"""Does parallel HDF5 accept direct chunk writes into a file opened with the mpio driver?

``python benchmarks/probe_direct_chunk_mpio.py`` runs each pattern under
``tools/mpirun.sh -n 2`` with a time limit and prints what happened:

``own``   each rank ``write_direct_chunk``s only its own chunks (independent calls);
``every`` every rank writes every chunk, in the same order, with the same bytes;
``own-collective-dxpl`` as ``own`` with a collective transfer property list.

Then rank 0 reopens the file serially and compares it with the data. The chunks are
shuffle + deflate compressed in numpy/zlib (``h5mdtool.h5md.chunkcodec``), the dataset has the same
filters, so any HDF5 reader decodes them.
"""

import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(HERE), "tools", "mpirun.sh")

WORKER = r'''
import os, sys
import numpy as np
import h5py
from mpi4py import MPI
sys.path.insert(0, sys.argv[3])
from h5mdtool.h5md.chunkcodec import FilterPipeline

comm = MPI.COMM_WORLD
pattern, path = sys.argv[1], sys.argv[2]
n_frames, n_atoms, chunk = 64, 100, 8
data = np.random.default_rng(0).integers(-5000, 5000, size=(n_frames, n_atoms, 3), dtype=np.int32)
n_chunks = n_frames // chunk
handle = h5py.File(path, "w", driver="mpio", comm=comm, libver=("v110", "latest"))
value = handle.create_dataset("value", shape=data.shape, dtype=np.int32, chunks=(chunk, n_atoms, 3),
                              compression="gzip", compression_opts=4, shuffle=True, fill_time="never")
pipeline = FilterPipeline.of(value)
mine = range(comm.rank, n_chunks, comm.size)
dxpl = None
if pattern == "own-collective-dxpl":
    dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
    dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
try:
    for c in (range(n_chunks) if pattern == "every" else mine):
        piece = bytes(pipeline.encode(data[c * chunk:(c + 1) * chunk])[0])
        if dxpl is None:
            value.id.write_direct_chunk((c * chunk, 0, 0), piece)
        else:
            value.id.write_direct_chunk((c * chunk, 0, 0), piece, dxpl=dxpl)
    print(f"rank {comm.rank}: write_direct_chunk returned", flush=True)
except Exception as error:
    print(f"rank {comm.rank}: {type(error).__name__}: {error}", flush=True)
handle.close()
print(f"rank {comm.rank}: closed", flush=True)
comm.Barrier()
if comm.rank == 0:
    with h5py.File(path, "r") as check:
        print("read back equal:", np.array_equal(check["value"][()], data), flush=True)
'''


def main():
    directory = tempfile.mkdtemp(prefix="probe-")
    for pattern in ("own", "own-collective-dxpl", "every"):
        path = os.path.join(directory, f"{pattern}.h5")
        # a session of its own, so a hung job is ended whole (mpirun and its ranks)
        job = subprocess.Popen([MPIRUN, "-n", "2", sys.executable, "-c", WORKER, pattern, path, HERE],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, _ = job.communicate(timeout=60)
            verdict = f"exit {job.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            out, _ = job.communicate()
            verdict = "HUNG (killed after 60 s)"
        lines = [line for line in out.splitlines() if line.strip()]
        print(f"== {pattern}: {verdict}")
        for line in lines:
            print(f"   {line}")
        if os.path.exists(path):
            os.remove(path)
    os.rmdir(directory)


if __name__ == "__main__":
    main()

"""Convert with the Python API, serially or under mpirun, and read the result back.

    python examples/convert_api.py md.xtc [more segments...] -o md.h5md
    mpirun -n 4 python examples/convert_api.py md.xtc -o md.h5md
"""

import argparse

import h5mdtool


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    comm = h5mdtool.resolve_comm()  # MPI.COMM_WORLD under mpirun, a serial stand-in otherwise
    summary = h5mdtool.convert(
        args.inputs, args.output, comm=comm, compression="gzip", chunk_frames=1, force=True
    )
    if comm.rank == 0:
        print(f"{summary['n_frames']} frames x {summary['n_atoms']} atoms in "
              f"{summary['seconds']:.1f} s on {summary['n_ranks']} rank(s)")


if __name__ == "__main__":
    main()

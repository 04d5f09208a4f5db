#!/usr/bin/env bash
# mpirun with the flags this machine needs: Open MPI refuses root without
# --allow-run-as-root and more ranks than cores without --oversubscribe.
#
# Open MPI's cm PML loads the PSM and PSM2 network libraries at every start to look for
# Omni-Path or InfiniBand hardware (0.2 s of MPI_Init on a machine without any); with no
# such device here it ends up with ob1 (shared memory, TCP) anyway, so ask for ob1 at
# once. An OMPI_MCA_pml of the user's own is kept.
set -euo pipefail
launcher=${MPIEXEC:-mpirun}
flags=()
if "$launcher" --version 2>/dev/null | grep -qi "open mpi"; then
    flags+=(--oversubscribe)
    if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
    if [ -z "${OMPI_MCA_pml:-}" ] && ! compgen -G "/sys/class/infiniband/*" >/dev/null \
        && ! compgen -G "/dev/hfi1*" >/dev/null && ! compgen -G "/dev/ipath*" >/dev/null; then
        export OMPI_MCA_pml=ob1
    fi
fi
exec "$launcher" "${flags[@]}" "$@"

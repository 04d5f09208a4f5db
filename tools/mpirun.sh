#!/usr/bin/env bash
# mpirun with the flags this machine needs: Open MPI refuses root without
# --allow-run-as-root and more ranks than cores without --oversubscribe.
set -euo pipefail
launcher=${MPIEXEC:-mpirun}
flags=()
if "$launcher" --version 2>/dev/null | grep -qi "open mpi"; then
    flags+=(--oversubscribe)
    if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
fi
exec "$launcher" "${flags[@]}" "$@"

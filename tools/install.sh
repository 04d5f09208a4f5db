#!/usr/bin/env bash
# Idempotent installer behind `make install` (and, with --with-gromacs, `make test` and
# `make bench`).
#  1. system packages (Open MPI, parallel HDF5, hdf5-tools, a C compiler and the Python
#     headers) via apt when root, else advice; with --with-gromacs also GROMACS, which only
#     the tests (gmx rms) and the benchmarks (gmx trjconv) compare against;
#  2. ./.venv with mpi4py (the binary wheel on Debian's Open MPI; built from source with the
#     site's mpicc when HDF5_DIR points at a site HDF5, or with MPI4PY_FROM_SOURCE=1) and h5py
#     built from source against parallel HDF5;
#  3. hdf5plugin (compression filters) without dependencies, after the parallel h5py;
#  4. h5mdtool in editable mode with its test, plot, formats and fast extras (pytng, gsd: TNG and
#     GSD inputs; deflate and zstandard: reading gzip and Zstd chunks faster; all depend on numpy or nothing,
#     so they cannot displace the parallel h5py);
#     this compiles h5mdtool's XTC decoder (a C extension: a C compiler and the Python
#     headers, as h5py's build needs too), and then h5mdtool's bytecode (every run).
# Every step is skipped when already done, so a second run takes seconds.
set -euo pipefail

WITH_GROMACS=0
for argument in "$@"; do
    case "$argument" in
        --with-gromacs) WITH_GROMACS=1 ;;
        *) echo "usage: tools/install.sh [--with-gromacs]" >&2; exit 2 ;;
    esac
done

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
APT_PACKAGES="openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools pkg-config gcc python3-dev"
# GROMACS (--with-gromacs): the tests compare bench rmsd with gmx rms (skipped, with the
# reason, without it), the benchmarks split against gmx trjconv
GROMACS_APT_PACKAGES="gromacs"

say() { printf '[install] %s\n' "$*"; }

have_parallel_hdf5() {
    if [ -n "${HDF5_DIR:-}" ]; then return 0; fi
    pkg-config --exists hdf5-openmpi 2>/dev/null || pkg-config --exists hdf5-mpich 2>/dev/null
}

have_c_build_tools() {
    # a C compiler and the headers of the Python the venv is made from (h5py, h5mdtool's XTC decoder)
    command -v cc >/dev/null 2>&1 && "$PYTHON" -c "import os, sys, sysconfig
sys.exit(0 if os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 1)" 2>/dev/null
}

system_packages() {
    if command -v mpicc >/dev/null 2>&1 && have_parallel_hdf5 && have_c_build_tools; then
        say "MPI compiler, parallel HDF5, C compiler and Python headers found"
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing system packages: $APT_PACKAGES"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq $APT_PACKAGES >/dev/null
        return
    fi
    cat >&2 <<MSG
[install] missing: an MPI compiler (mpicc), parallel HDF5, a C compiler or the Python headers.
  On Debian/Ubuntu as root:  apt-get install $APT_PACKAGES
  On a cluster (no root):    module load openmpi hdf5/parallel   # your site's module names
                             export HDF5_DIR=\$(dirname \$(dirname \$(which h5pcc)))
                             make install
  See docs/installation.md.
MSG
    exit 1
}

hdf5_build_env() {
    export CC=mpicc HDF5_MPI=ON
    if [ -z "${HDF5_DIR:-}" ]; then
        if pkg-config --exists hdf5-openmpi 2>/dev/null; then
            export HDF5_PKGCONFIG_NAME=hdf5-openmpi
        elif pkg-config --exists hdf5-mpich 2>/dev/null; then
            export HDF5_PKGCONFIG_NAME=hdf5-mpich
        fi
    fi
}

python_environment() {
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    local pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
    if ! "$VENV/bin/python" -c "import mpi4py, numpy, Cython, pkgconfig" 2>/dev/null; then
        say "installing build requirements and mpi4py"
        $pip install --upgrade pip setuptools wheel
        $pip install numpy Cython pkgconfig
        if [ -n "${HDF5_DIR:-}" ] || [ "${MPI4PY_FROM_SOURCE:-0}" = 1 ]; then
            # a site MPI: build mpi4py against the same MPI that HDF5 was built with (not a
            # wheel from pip's cache, which may have been built against another: see h5py)
            MPICC=${MPICC:-mpicc} $pip install --no-cache-dir --no-binary=mpi4py mpi4py
        else
            $pip install mpi4py
        fi
    fi
    if "$VENV/bin/python" -c "import h5py, sys; sys.exit(0 if h5py.get_config().mpi else 1)" 2>/dev/null; then
        say "h5py with MPI already installed"
    else
        say "building h5py against parallel HDF5${HDF5_DIR:+ in $HDF5_DIR} (a few minutes)"
        hdf5_build_env
        # --no-cache-dir: pip's wheel cache keys a wheel built from source by h5py's version
        # alone, so it would hand this venv an h5py built earlier against another HDF5 (an
        # earlier HDF5_DIR, Debian's, another cluster's sharing this home directory)
        $pip install --no-cache-dir --no-build-isolation --no-binary=h5py --force-reinstall --no-deps h5py
        "$VENV/bin/python" -c "import h5py, sys; sys.exit(0 if h5py.get_config().mpi else 1)" \
            || { echo "[install] h5py was built without MPI; see docs/installation.md" >&2; exit 1; }
    fi
    if ! "$VENV/bin/python" -c "import hdf5plugin" 2>/dev/null; then
        # --no-deps: hdf5plugin requires h5py, and pip could otherwise replace the parallel
        # build with a serial wheel
        say "installing hdf5plugin (compression filters) without dependencies"
        $pip install --no-deps "hdf5plugin>=4.0"
        "$VENV/bin/python" -c "import h5py, hdf5plugin, sys; sys.exit(0 if h5py.get_config().mpi else 1)" \
            || { echo "[install] h5py lost its MPI support while installing hdf5plugin; see docs/installation.md" >&2; exit 1; }
    fi
    if ! "$VENV/bin/python" -c "import pyh5md" 2>/dev/null; then
        # the tests write foreign H5MD files with it; --no-deps keeps the parallel h5py
        say "installing pyh5md (tests)"
        $pip install --no-deps "pyh5md>=1.2"
    fi
    if ! "$VENV/bin/python" -c "import h5mdtool.formats._xtcframe, MDAnalysisTests, pytest, matplotlib, tqdm, click, pytng, gsd, scipy, deflate, zstandard" 2>/dev/null \
        || [ setup.cfg -nt "$VENV/.h5mdtool-installed" ] || [ setup.py -nt "$VENV/.h5mdtool-installed" ] \
        || [ h5mdtool/formats/_xtcframe.c -nt "$VENV/.h5mdtool-installed" ]; then
        say "installing h5mdtool (editable) with test, plot, formats and fast extras"
        $pip install --no-build-isolation -e ".[test,plot,formats,fast]"
        "$VENV/bin/python" -c "import h5py, sys; sys.exit(0 if h5py.get_config().mpi else 1)" \
            || { echo "[install] installing the extras replaced the parallel h5py; see docs/installation.md" >&2; exit 1; }
        touch "$VENV/.h5mdtool-installed"
    fi
    # An editable install leaves h5mdtool's modules uncompiled, and where PYTHONDONTWRITEBYTECODE
    # is set (container images often set it) Python compiles every one of them again at each
    # start: 0.15-0.3 s of every command and of every MPI rank's start here. compileall writes
    # their bytecode (again only for modules changed since), which Python reads whatever that
    # variable says; a module edited later is compiled in memory until the next install.
    "$VENV/bin/python" -m compileall -q h5mdtool
    say "ready: $("$VENV/bin/python" -c 'import h5py, mpi4py, MDAnalysis; print("h5py", h5py.version.version, "HDF5", h5py.version.hdf5_version, "mpi4py", mpi4py.__version__, "MDAnalysis", MDAnalysis.__version__)')"
}

gromacs_package() {
    if command -v gmx >/dev/null 2>&1; then
        say "GROMACS found (gmx, compared against in the tests and benchmarks)"
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing $GROMACS_APT_PACKAGES (gmx, compared against in the tests and benchmarks)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq $GROMACS_APT_PACKAGES >/dev/null || { apt-get update -qq && apt-get install -y -qq $GROMACS_APT_PACKAGES >/dev/null; }
        return
    fi
    say "gmx not found: the tests and benchmarks comparing with GROMACS will skip it (apt-get install $GROMACS_APT_PACKAGES)"
}

system_packages
if [ "$WITH_GROMACS" = 1 ]; then
    gromacs_package
fi
python_environment

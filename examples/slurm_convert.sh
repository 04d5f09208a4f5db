#!/bin/bash
# Convert a segmented GROMACS trajectory into one striped, compressed H5MD file on Lustre.
#SBATCH --job-name=h5mdtool-convert
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=16
#SBATCH --time=00:30:00
set -euo pipefail

module load openmpi hdf5/parallel          # your site's modules (see docs/installation.md)
# the environment `make install` made in the h5mdtool clone (Slurm runs a copy of this
# script, so name the clone: sbatch --export=ALL,H5MDTOOL_DIR=/path/to/h5mdtool ...)
source "${H5MDTOOL_DIR:-$HOME/h5mdtool}/.venv/bin/activate"

OUT=$SCRATCH/md/md.h5md
mkdir -p "$(dirname "$OUT")"
# Stripe the output over 8 OSTs in 4 MiB stripes. h5mdtool also passes the same values as
# MPI-IO hints and runs `lfs setstripe` on its temporary file; setting the directory default
# as well covers tools that write beside it later.
lfs setstripe -c 8 -S 4M "$(dirname "$OUT")"

srun h5mdtool convert md.part0001.xtc md.part0002.xtc md.part0003.xtc \
    -o "$OUT" --compression gzip --compression-level 1 \
    --stripe-count 8 --stripe-size 4M --no-progress --json > convert-summary.json

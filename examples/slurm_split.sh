#!/bin/bash
# Split a long XTC into one part per rank of a later analysis job (subfiling), on Lustre.
#SBATCH --job-name=h5mdtool-split
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --time=00:20:00
set -euo pipefail

module load openmpi hdf5/parallel          # your site's modules (docs/installation.md)
source ~/venvs/h5mdtool/bin/activate

PARTS=$SCRATCH/md-parts
# 96 parts serve analysis jobs on 96, 48, 32, 24... ranks (each reads whole parts).
srun h5mdtool split md.part0001.xtc md.part0002.xtc --nparts 96 -o "$PARTS" --force --no-progress

# An analysis rank r of R then reads the parts listed in $PARTS/manifest.json for its
# balanced share, e.g. in Python:
#   from h5mdtool.manifest import read_manifest
#   from h5mdtool.mpi import balanced_slices
#   m = read_manifest("$PARTS")
#   first, last = balanced_slices(len(m.parts), R)[r]
#   my_files = [p.path for p in m.parts[first:last]]

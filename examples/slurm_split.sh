#!/bin/bash
# Split a long XTC into parts for analysis jobs (subfiling), on Lustre, then analyse them.
#SBATCH --job-name=h5mdtool-split
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --time=00:20:00
set -euo pipefail

module load openmpi hdf5/parallel          # your site's modules (docs/installation.md)
# the environment `make install` made in the h5mdtool clone (Slurm runs a copy of this
# script, so name the clone: sbatch --export=ALL,H5MDTOOL_DIR=/path/to/h5mdtool ...)
source "${H5MDTOOL_DIR:-$HOME/h5mdtool}/.venv/bin/activate"

PARTS=$SCRATCH/md-parts
# 96 parts serve analysis jobs on 96, 48, 32, 24, ... ranks: when the rank count divides the
# part count, each rank reads whole parts and opens only its own (but for the end of rank 0's
# last part, which bench rmsd gives to a few ranks that read ahead while rank 0 set up).
srun h5mdtool split md.part0001.xtc md.part0002.xtc --nparts 96 -o "$PARTS" --force --no-progress

# An analysis on this job's 4 ranks: each reads 24 whole parts (the report's partition line
# says so; with a rank count that does not divide 96 it says how many parts ranks shared).
srun --ntasks=4 h5mdtool bench rmsd "$PARTS" --topology md.tpr --force --out rmsd-split-4.json

# From Python, rank r of R reads the same parts:
#   from h5mdtool import read_manifest
#   from h5mdtool.parallel.partition import partition_frames
#   import numpy as np
#   m = read_manifest("$PARTS")
#   edges = [p.start for p in m.parts] + [m.n_frames]
#   first, last = partition_frames(np.arange(m.n_frames), R, part_edges=edges).bounds[r]
#   my_files = [p.path for p in m.parts_for(first, last)]

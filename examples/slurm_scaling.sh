#!/bin/bash
# Strong-scaling sweep of the RMSD benchmark on one H5MD file (read with MPI-IO), 1 to 96
# ranks, then the scaling table and plots. Re-runnable: --force replaces an earlier sweep's
# reports and plots. The 1-rank run is the baseline of S(N) and E(N) (without it, bench report
# marks them "assumed").
#SBATCH --job-name=h5mdtool-rmsd-scaling
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=24
#SBATCH --time=01:00:00
set -euo pipefail

module load openmpi hdf5/parallel          # your site's modules (docs/installation.md)
# the environment `make install` made in the h5mdtool clone (Slurm runs a copy of this
# script, so name the clone: sbatch --export=ALL,H5MDTOOL_DIR=/path/to/h5mdtool ...)
source "${H5MDTOOL_DIR:-$HOME/h5mdtool}/.venv/bin/activate"

INPUT=$SCRATCH/md/md.h5md
TOP=$SCRATCH/md/md.tpr
mkdir -p reports
for n in 1 2 4 8 16 24 48 96; do
    srun --ntasks=$n h5mdtool bench rmsd "$INPUT" --topology "$TOP" --repeat 3 --force \
        --out reports/rmsd-$n.json --plot reports/ranks-$n.png > reports/rmsd-$n.txt
done
# speed-up, efficiency and per-phase scaling; stragglers per rank count
h5mdtool bench report reports/rmsd-*.json --plot reports/scaling.png --force | tee reports/scaling.txt

# To choose a layout from this cluster's numbers, run the same loop on other copies of the
# trajectory (md.xtc, a gzip H5MD, a split directory...) with --out reports/NAME-$n.json, then:
#   h5mdtool bench report reports/*.json --layouts --plot reports/layouts.png --force

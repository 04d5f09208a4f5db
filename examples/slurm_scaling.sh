#!/bin/bash
# Strong-scaling sweep of the RMSD benchmark on one H5MD file (read with MPI-IO).
#SBATCH --job-name=h5mdtool-rmsd-scaling
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=24
#SBATCH --time=01:00:00
set -euo pipefail

module load openmpi hdf5/parallel          # your site's modules (docs/installation.md)
source ~/venvs/h5mdtool/bin/activate

INPUT=$SCRATCH/md/md.h5md
TOP=$SCRATCH/md/md.psf
mkdir -p reports
for n in 1 2 4 8 16 24 48 96; do
    srun --ntasks=$n h5mdtool bench rmsd "$INPUT" --topology "$TOP" --repeat 3 --force \
        --out reports/rmsd-$n.json --plot reports/ranks-$n.png > reports/rmsd-$n.txt
done
# speed-up, efficiency and per-phase scaling
h5mdtool bench report reports/rmsd-*.json --plot reports/scaling.png --force | tee reports/scaling.txt

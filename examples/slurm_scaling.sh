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
    srun --ntasks=$n h5mdtool bench rmsd "$INPUT" --topology "$TOP" --repeat 3 \
        --out reports/rmsd-$n.json > reports/rmsd-$n.txt
done
# speed-up and efficiency from the reports
python - <<'PY'
import glob, json
runs = sorted((json.load(open(p)) for p in glob.glob("reports/rmsd-*.json")), key=lambda r: r["n_ranks"])
t1 = runs[0]["t_total"]
for r in runs:
    s = t1 / r["t_total"]
    print(f"{r['n_ranks']:>4} ranks  {r['t_total']:8.2f} s  speed-up {s:6.2f}  efficiency {s / r['n_ranks']:.2f}")
PY

# h5mdtool: `make demo` installs everything and runs the main job on bundled data;
# `make test` installs and runs the whole suite, serially and under mpirun -n 2 and -n 3,
# then the differential harness's fixed-seed profile (docs/testing.md); `make fuzz` runs
# its long profile.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
H5MDTOOL := $(VENV)/bin/h5mdtool
MPIRUN := tools/mpirun.sh
# A hung MPI test must fail the run, never block it.
MPI_TIMEOUT ?= 1200
DEMO_DIR ?= demo-output
# Differential harness (tests/differential, docs/testing.md): cases of the fixed-seed
# profile, cases of the long profile, and whether failures in the categories listed in
# tests/differential/KNOWN.md fail the run (fail) or are only reported (skip; for a
# category still open).
DIFF_EXAMPLES ?= 300
FUZZ_EXAMPLES ?= 3000
DIFF_KNOWN ?= fail

.PHONY: install install-with-gromacs demo test test-serial test-mpi test-differential fuzz bench bench-quick clean help

help:
	@echo "make install   system packages (root, Debian), .venv, parallel h5py, h5mdtool"
	@echo "               (make test and make bench add GROMACS, which they compare against)"
	@echo "make demo      install, then convert the AdK trajectories with mpirun -n 2 and benchmark RMSD on them"
	@echo "make test      install, then pytest serially and under mpirun -n 2 and -n 3, then the"
	@echo "               differential harness (DIFF_EXAMPLES=$(DIFF_EXAMPLES) cases at 1, 2 and 3 ranks)"
	@echo "make fuzz      the differential harness's long profile (FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) cases)"
	@echo "make bench     benchmarks against their peers, in the same run (docs/performance.md)"

install:
	@VENV=$(VENV) tools/install.sh

# make install plus GROMACS (apt, as root), which only the tests and benchmarks compare against
install-with-gromacs:
	@VENV=$(VENV) tools/install.sh --with-gromacs

demo: install
	@mkdir -p $(DEMO_DIR)
	@set -e; \
	DCD=$$($(PY) -c "from MDAnalysisTests.datafiles import DCD; print(DCD)"); \
	XTC=$$($(PY) -c "from MDAnalysisTests.datafiles import XTC; print(XTC)"); \
	PSF=$$($(PY) -c "from MDAnalysisTests.datafiles import PSF; print(PSF)"); \
	echo "== adenylate kinase in vacuum (DCD, 98 frames x 3341 atoms), 2 ranks, topology stored in the file"; \
	$(MPIRUN) -n 2 $(H5MDTOOL) convert $$DCD -t $$PSF -o $(DEMO_DIR)/adk.h5md --force --no-progress; \
	$(H5MDTOOL) topology $(DEMO_DIR)/adk.h5md -o $(DEMO_DIR)/adk_from_h5md.pdb --force; \
	echo; echo "== solvated adenylate kinase (XTC, 10 frames x 47681 atoms), 2 ranks, gzip"; \
	$(MPIRUN) -n 2 $(H5MDTOOL) convert $$XTC -o $(DEMO_DIR)/adk_solvated.h5md --compression gzip --force --no-progress; \
	echo; echo "== the same at the XTC's own precision: its integers kept exactly, smaller"; \
	$(MPIRUN) -n 2 $(H5MDTOOL) convert $$XTC -o $(DEMO_DIR)/adk_solvated_xtcgrid.h5md --precision xtc --force --no-progress; \
	echo; echo "== validating against the sources (frames divided over 2 ranks), then info"; \
	$(MPIRUN) -n 2 $(H5MDTOOL) validate $(DEMO_DIR)/adk.h5md --against $$DCD; \
	$(MPIRUN) -n 2 $(H5MDTOOL) validate $(DEMO_DIR)/adk_solvated.h5md --against $$XTC; \
	$(MPIRUN) -n 2 $(H5MDTOOL) validate $(DEMO_DIR)/adk_solvated_xtcgrid.h5md --against $$XTC; \
	$(H5MDTOOL) info $(DEMO_DIR)/adk_solvated.h5md; \
	echo; echo "== reading both back with MDAnalysis (serial and MPI-IO) against the sources"; \
	$(PY) examples/check_roundtrip.py $(DEMO_DIR); \
	$(MPIRUN) -n 2 $(PY) examples/check_roundtrip.py $(DEMO_DIR); \
	echo; echo "== the papers' RMSD benchmark on the converted file and its stored topology, 2 ranks: per-rank phases, stragglers, advice"; \
	$(MPIRUN) -n 2 $(H5MDTOOL) bench rmsd $(DEMO_DIR)/adk.h5md --block-frames 16 \
		--out $(DEMO_DIR)/rmsd-2.json --rmsd-out $(DEMO_DIR)/rmsd.xvg --force

test: install-with-gromacs test-serial test-mpi test-differential

test-serial:
	$(PY) -m pytest -q -p no:cacheprovider --color=no --ignore=tests/differential tests

test-mpi:
	timeout $(MPI_TIMEOUT) $(MPIRUN) -n 2 $(PY) tests/mpi_pytest.py -q -p no:cacheprovider --color=no -m mpi tests
	timeout $(MPI_TIMEOUT) $(MPIRUN) -n 3 $(PY) tests/mpi_pytest.py -q -p no:cacheprovider --color=no -m mpi tests

# Serial controller; it starts one worker pool per rank count itself (1, 2, 3).
test-differential:
	H5MDTOOL_DIFF_KNOWN=$(DIFF_KNOWN) DIFF_EXAMPLES=$(DIFF_EXAMPLES) \
		$(PY) -m pytest -q -p no:cacheprovider --color=no tests/differential

fuzz: install
	H5MDTOOL_DIFF_KNOWN=$(DIFF_KNOWN) FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m tests.differential.fuzz

bench: install-with-gromacs
	$(PY) benchmarks/run.py

bench-quick: install-with-gromacs
	@echo "[bench] quick mode: 100x inputs only. Speed targets are set on the 600x runs of make bench,"
	@echo "[bench] where work dominates start-up; at 100x most ratios print MISS by design."
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(DEMO_DIR) benchmarks/results .pytest_cache build *.egg-info

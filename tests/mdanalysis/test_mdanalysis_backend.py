"""MPIBackend: MDAnalysis analyses run on the ranks of an MPI job give the serial run's results.

Every analysis is run twice in the same process, serially (MDAnalysis's default) and with
the backend, and the results compared. Marked ``mpi``: on 1 rank serially, and on every rank
under mpirun -n 2 and -n 3, where each rank must end with the serial results.
"""

import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis.base import AnalysisBase, AnalysisFromFunction
from MDAnalysis.analysis.dihedrals import Dihedral, Ramachandran
from MDAnalysis.analysis.rdf import InterRDF
from MDAnalysis.analysis.rms import RMSD, RMSF

from h5mdtool import convert
from h5mdtool.parallel.errors import RemoteRankError
from h5mdtool import mdanalysis as h5mda
from h5mdtool.mdanalysis import MPIBackend
from h5mdtool.mdanalysis.backend import reader_chunk_frames

pytestmark = [pytest.mark.mpi, pytest.mark.filterwarnings("ignore")]


def parallel(analysis, comm, **kwargs):
    """*analysis* run with the MPI backend on *comm*; also returns the backend."""
    backend = MPIBackend(comm)
    analysis.run(backend=backend, unsupported_backend=True, **kwargs)
    return analysis, backend


@pytest.fixture(scope="module")
def universe(adk):
    return mda.Universe(*adk)


@pytest.fixture(scope="module")
def solvated_universe(solvated):
    return mda.Universe(solvated["topology"], solvated["XTC"])


def assert_same_run(serial, run):
    np.testing.assert_array_equal(run.frames, serial.frames)
    np.testing.assert_array_equal(run.times, serial.times)
    assert run.n_frames == serial.n_frames


@pytest.mark.parametrize("frames", [{}, {"start": 3, "stop": 90, "step": 4}, {"frames": [50, 3, 97, 4, 20]},
                                    {"frames": np.arange(98) % 3 == 0}, {"start": 7, "stop": 8}],
                         ids=["all", "start-stop-step", "fancy", "mask", "one-frame"])
def test_rmsd_equals_serial(comm, universe, frames):
    serial = RMSD(universe, select="name CA", groupselections=["backbone"]).run(**frames)
    run, backend = parallel(RMSD(universe, select="name CA", groupselections=["backbone"]), comm, **frames)
    np.testing.assert_array_equal(run.results.rmsd, serial.results.rmsd)
    assert_same_run(serial, run)
    assert sum(backend.last_run["partition"]["frames_per_rank"]) == serial.n_frames
    assert len(backend.last_run["t_compute"]) == comm.size


def test_dihedral_and_ramachandran_equal_serial(comm, universe):
    protein = universe.select_atoms("protein")
    serial = Ramachandran(protein).run(step=3)
    run, _ = parallel(Ramachandran(protein), comm, step=3)
    np.testing.assert_array_equal(run.results.angles, serial.results.angles)
    assert_same_run(serial, run)
    groups = [residue.phi_selection() for residue in protein.residues[1:9]]
    serial = Dihedral(groups).run()
    run, _ = parallel(Dihedral(groups), comm)
    np.testing.assert_array_equal(run.results.angles, serial.results.angles)


def test_rdf_equals_serial(comm, solvated_universe):
    """Counts are summed exactly; the RDF's normalisation uses the bin edges, which
    MDAnalysis's aggregator averages over the blocks, so it may differ in the last bits."""
    oxygens = solvated_universe.select_atoms("name OW")[:400]
    serial = InterRDF(oxygens, oxygens, nbins=50, range=(2.0, 8.0)).run()
    run, _ = parallel(InterRDF(oxygens, oxygens, nbins=50, range=(2.0, 8.0)), comm)
    np.testing.assert_array_equal(run.results.count, serial.results.count)
    assert run.results.volume_cum == pytest.approx(serial.results.volume_cum, rel=1e-14)
    np.testing.assert_allclose(run.results.rdf, serial.results.rdf, rtol=1e-12)
    assert run.n_frames == serial.n_frames == 10  # the normalisation counts every rank's frames


def test_analysis_from_function_equals_serial(comm, universe):
    atoms = universe.select_atoms("name CA")
    serial = AnalysisFromFunction(lambda ag: ag.center_of_mass(), atoms).run()
    run, _ = parallel(AnalysisFromFunction(lambda ag: ag.center_of_mass(), atoms), comm)
    np.testing.assert_array_equal(run.results.timeseries, serial.results.timeseries)


def test_not_parallelizable_analysis_is_refused(comm, universe):
    with pytest.raises(ValueError, match="Can not parallelize class .*RMSF"):
        RMSF(universe.select_atoms("name CA")).run(backend=MPIBackend(comm), unsupported_backend=True)


def test_n_workers_is_the_communicator_size(comm, universe):
    backend = MPIBackend(comm)
    assert backend.n_workers == comm.size
    RMSD(universe, select="name CA").run(backend=backend, unsupported_backend=True, n_workers=comm.size, stop=5)
    with pytest.raises(ValueError, match="n_workers specified twice"):
        RMSD(universe, select="name CA").run(backend=backend, unsupported_backend=True, n_workers=comm.size + 1)


def test_more_ranks_than_frames_and_no_frames(comm, universe):
    for frames in ({"frames": [9]}, {"start": 5, "stop": 5}):
        serial = RMSD(universe, select="name CA").run(**frames)
        run, _ = parallel(RMSD(universe, select="name CA"), comm, **frames)
        np.testing.assert_array_equal(run.results.rmsd, serial.results.rmsd)
        assert_same_run(serial, run)


@pytest.fixture(scope="module")
def chunked_h5md(comm, session_dir, adk):
    """The AdK trajectory as H5MD chunked by 7 frames (the last chunk partial)."""
    path = os.path.join(session_dir, "adk-chunk7.h5md")
    convert(adk[1], path, comm=comm, topology=adk[0], chunk_frames=7, progress=False)
    return path


def test_blocks_follow_the_chunks_of_mdanalysis_h5md_reader(comm, adk, chunked_h5md, universe):
    h5md = mda.Universe(adk[0], chunked_h5md)
    assert reader_chunk_frames(h5md.trajectory) == 7
    serial = RMSD(universe, select="name CA").run(step=2)
    run, backend = parallel(RMSD(h5md, select="name CA"), comm, step=2)
    np.testing.assert_allclose(run.results.rmsd[:, 2], serial.results.rmsd[:, 2], atol=1e-4)  # float32 nm in the file
    partition = backend.last_run["partition"]
    assert partition["scheme"] == "chunks" and partition["units"] == 14
    selected = np.arange(0, 98, 2)
    for edge in np.cumsum(partition["frames_per_rank"])[:-1]:  # no chunk is read by two ranks
        assert edge in (0, len(selected)) or selected[edge] // 7 != selected[edge - 1] // 7

def test_blocks_follow_the_chunks_of_h5mdtools_reader(comm, adk, chunked_h5md, universe):
    ours = h5mda.Universe(chunked_h5md)
    assert ours.trajectory.chunk_frames == 7 and reader_chunk_frames(ours.trajectory) == 7
    serial = RMSD(universe, select="name CA").run(step=3)
    run, backend = parallel(RMSD(ours, select="name CA"), comm, step=3)
    np.testing.assert_allclose(run.results.rmsd[:, 2], serial.results.rmsd[:, 2], atol=1e-4)
    partition = backend.last_run["partition"]
    assert partition["scheme"] == "chunks" and partition["units"] == 14
    selected = np.arange(0, 98, 3)
    for edge in np.cumsum(partition["frames_per_rank"])[:-1]:  # no chunk is read by two ranks
        assert edge in (0, len(selected)) or selected[edge] // 7 != selected[edge - 1] // 7


def test_reader_chunk_frames_attribute_and_explicit_chunks(comm, universe):
    frames = np.arange(98)
    universe.trajectory.chunk_frames = 10
    try:
        _, backend = parallel(RMSD(universe, select="name CA"), comm)
    finally:
        del universe.trajectory.chunk_frames
    counts = backend.last_run["partition"]["frames_per_rank"]
    assert all(edge % 10 == 0 for edge in np.cumsum(counts)[:-1])
    assert sum(counts) == len(frames)
    backend = MPIBackend(comm, chunk_frames=30)
    RMSD(universe, select="name CA").run(backend=backend, unsupported_backend=True)
    assert all(edge % 30 == 0 for edge in np.cumsum(backend.last_run["partition"]["frames_per_rank"])[:-1])
    with pytest.raises(ValueError, match="chunk_frames"):
        MPIBackend(comm, chunk_frames=0)


class FailsOnLastFrame(AnalysisBase):
    """Parallelizable; raises while analysing the trajectory's last frame (the last rank's block)."""

    _analysis_algorithm_is_parallelizable = True

    def _prepare(self):
        self.results.seen = []

    def _single_frame(self):
        if self._ts.frame == self._trajectory.n_frames - 1:
            raise RuntimeError("broken frame")
        self.results.seen.append(self._ts.frame)


def test_a_failing_rank_is_reported_on_every_rank(comm, universe):
    """Every rank raises the failure's type (a script's except clause runs on all of them);
    on the others it is caused by a RemoteRankError naming the failing rank."""
    last_rank = comm.size - 1
    with pytest.raises(RuntimeError, match="broken frame") as raised:
        FailsOnLastFrame(universe.trajectory).run(backend=MPIBackend(comm), unsupported_backend=True)
    if comm.rank != last_rank:
        assert isinstance(raised.value.__cause__, RemoteRankError)
        assert str(raised.value.__cause__) == f"rank {last_rank}: RuntimeError: broken frame"


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("cannot pickle")


def test_a_failure_that_does_not_pickle_is_a_remote_rank_error(comm):
    def fail_on_last_item(item):
        if item == 4:
            raise Unpicklable("odd failure")
        return item

    expected = Unpicklable if comm.rank == comm.size - 1 else RemoteRankError
    with pytest.raises(expected, match="odd failure"):
        MPIBackend(comm).apply(fail_on_last_item, list(range(5)))


def test_other_functions_are_mapped_over_items(comm):
    backend = MPIBackend(comm)
    assert backend.apply(lambda x: x * x, list(range(7))) == [x * x for x in range(7)]
    assert backend.apply(lambda x: x, []) == []


def test_serial_without_mpi(universe):
    """Outside mpirun the backend has one rank and needs no MPI."""
    if os.environ.get("H5MDTOOL_TEST_SHARED_DIR"):
        pytest.skip("run serially only")
    backend = MPIBackend()
    assert backend.n_workers == 1 and type(backend.comm).__name__ == "SerialComm"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serial = RMSD(universe, select="name CA").run()
        run = RMSD(universe, select="name CA").run(backend=backend, unsupported_backend=True)
    np.testing.assert_array_equal(run.results.rmsd, serial.results.rmsd)


def test_progress_is_shown_by_rank_0_in_frames_of_the_whole_run(comm, universe, capsys):
    """``MPIBackend(progress=True)``: rank 0 shows the run's progress (here, no terminal: the
    line at the end, counting every frame of the run), the other ranks nothing; the results
    are the serial run's and the analysis keeps no trace of the counting."""
    serial = RMSD(universe, select="name CA").run(start=2)
    analysis = RMSD(universe, select="name CA")
    analysis.run(backend=MPIBackend(comm, progress=True), unsupported_backend=True, start=2)
    np.testing.assert_array_equal(analysis.results.rmsd, serial.results.rmsd)
    assert "_single_frame" not in vars(analysis)
    err = capsys.readouterr().err
    if comm.rank == 0:
        assert f"RMSD: {serial.n_frames} of {serial.n_frames} frames (100%)" in err, err
    else:
        assert err == "", err
    quiet = RMSD(universe, select="name CA")
    quiet.run(backend=MPIBackend(comm), unsupported_backend=True, start=2)
    assert capsys.readouterr().err == ""

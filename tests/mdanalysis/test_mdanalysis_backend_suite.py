"""MDAnalysis's own analysis tests, run with :class:`h5mdtool.mdanalysis.MPIBackend`.

MDAnalysis parametrizes its analysis tests with ``client_<Analysis>`` fixtures holding the
keywords of ``run()`` for each backend (``MDAnalysisTests/analysis/conftest.py``); here the
same test classes and functions are collected with fixtures that hold
``backend=MPIBackend(), unsupported_backend=True``, so they check the backend against
MDAnalysis's reference values, serially and on every rank under mpirun. A subset, to keep
the MPI runs short: RMSD, dihedrals and RDF here, ``AnalysisBase.run`` itself in
``test_mdanalysis_backend_base_suite.py`` (``TestContacts`` and ``TestJanin`` passed too,
on 1, 2 and 3 ranks, but take the longest).
"""

import pytest
from MDAnalysisTests.analysis.test_dihedrals import TestDihedral, TestRamachandran  # noqa: F401
from MDAnalysisTests.analysis.test_rdf import (sels, test_count, test_count_sum, test_exclusion,  # noqa: F401
                                               test_ignore_same_residues, test_nbins, test_norm, test_range, u)
from MDAnalysisTests.analysis.test_rms import TestRMSD  # noqa: F401

from h5mdtool.mdanalysis import MPIBackend

pytestmark = pytest.mark.mpi


@pytest.fixture
def mpi_backend(comm):
    return {"backend": MPIBackend(comm), "unsupported_backend": True}


client_RMSD = client_Dihedral = client_Ramachandran = client_InterRDF = mpi_backend

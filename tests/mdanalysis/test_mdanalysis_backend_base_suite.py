"""MDAnalysis's tests of ``AnalysisBase.run`` with a backend (frames, times, start/stop/step,
frame lists and masks, rewinding, AnalysisFromFunction), run with
:class:`h5mdtool.mdanalysis.MPIBackend`; see ``test_mdanalysis_backend_suite.py``."""

import pytest
from MDAnalysisTests.analysis.test_base import (test_AnalysisFromFunction,  # noqa: F401
                                                test_AnalysisFromFunction_args_content, test_analysis_class,
                                                test_frame_bool_fail, test_frame_fail, test_frame_slice_parallel,
                                                test_frames_times, test_rewind, test_start_stop_step_parallel, u)

from h5mdtool.mdanalysis import MPIBackend

pytestmark = pytest.mark.mpi


@pytest.fixture
def mpi_backend(comm):
    return {"backend": MPIBackend(comm), "unsupported_backend": True}


client_FrameAnalysis = client_AnalysisFromFunction = client_AnalysisFromFunctionAnalysisClass = mpi_backend

"""h5mdtool: MPI-parallel conversion, splitting, validation and benchmarking of MD trajectories.

The command line (``h5mdtool --help``) is a thin layer over this API; every function takes
``comm=None`` and runs serially without MPI or under ``mpirun``/``srun`` unchanged.
Heavy dependencies (MDAnalysis, h5py, mpi4py) are imported only when a function needs them.
"""

__version__ = "0.1.0"

from .errors import H5mdToolError  # noqa: E402
from .convert import convert  # noqa: E402
from .append import append  # noqa: E402
from .split import split  # noqa: E402
from .bench import bench_rmsd  # noqa: E402
from .bench_report import bench_report  # noqa: E402
from .info import info  # noqa: E402
from .validate import validate, validate_file, validate_manifest  # noqa: E402
from .compare import compare_with_source  # noqa: E402

__all__ = ["__version__", "H5mdToolError", "append", "bench_report", "bench_rmsd", "compare_with_source", "convert", "info",
           "split", "validate", "validate_file", "validate_manifest"]

"""h5mdtool: MPI-parallel conversion, splitting, validation and benchmarking of MD trajectories.

The command line (``h5mdtool --help``) is a thin layer over this API; every function takes
``comm=None`` and runs serially without MPI or under ``mpirun``/``srun`` unchanged.
Heavy dependencies (numpy, MDAnalysis, h5py, mpi4py) are imported only when a function
needs them: the API's functions are imported when first used, so that importing the
package costs nothing and the command line can install its signal handling before numpy,
h5py and MDAnalysis load (a second during which Ctrl-C must already end it cleanly).
"""

import importlib
import sys
import types

__version__ = "0.1.0"

from .errors import H5mdToolError  # noqa: E402

#: The public API: name -> the module that defines it.
_API = {
    "append": "append",
    "bench_report": "bench_report",
    "bench_rmsd": "bench",
    "compare_with_source": "compare",
    "convert": "convert",
    "info": "info",
    "split": "split",
    "validate": "validate",
    "validate_file": "validate",
    "validate_manifest": "validate",
}

__all__ = ["__version__", "H5mdToolError", *sorted(_API)]


def __getattr__(name):
    """Import an API function when it is first used (``from h5mdtool import convert``)."""
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    function = getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    globals()[name] = function
    return function


def __dir__():
    return sorted(set(globals()) | set(_API))


class _Package(types.ModuleType):
    """The package keeps each API name bound to its function.

    Importing a submodule binds the package's attribute of that name to the submodule, and
    several functions share their module's name (``h5mdtool.convert`` is the function, its
    module is ``sys.modules["h5mdtool.convert"]``); an import of the module from anywhere
    must not replace the function.
    """

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _API.get(name) == name and value.__name__ == f"{__name__}.{name}":
            value = getattr(value, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

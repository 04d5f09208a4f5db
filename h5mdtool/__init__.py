"""h5mdtool: MPI-parallel conversion, splitting, validation and benchmarking of MD trajectories.

The command line (``h5mdtool --help``) is a thin layer over this API; every function takes
``comm=None`` and runs serially without MPI or under ``mpirun``/``srun`` unchanged.
Heavy dependencies (numpy, MDAnalysis, h5py, mpi4py) are imported only when a function
needs them: the API's functions are imported when first used, so that importing the
package costs nothing and the command line can install its signal handling before numpy,
h5py and MDAnalysis load (a second during which Ctrl-C must already end it cleanly).

The public API is :data:`__all__`, documented in docs/api.md; the subpackages are the
implementation and may change.
"""

__version__ = "0.1.0"

#: The public API: name -> (module, attribute). Imported on first use (PEP 562), so
#: ``import h5mdtool`` loads none of h5py, MDAnalysis or mpi4py.
_API = {
    "H5mdToolError": ("parallel.errors", "H5mdToolError"),
    "InputError": ("parallel.errors", "InputError"),
    "OutputError": ("parallel.errors", "OutputError"),
    "UsageError": ("parallel.errors", "UsageError"),
    "StackError": ("parallel.errors", "StackError"),
    "resolve_comm": ("parallel.mpi", "resolve"),
    "read_manifest": ("subfiles.manifest", "read_manifest"),
    "convert": ("conversion.convert", "convert"),
    "append": ("conversion.append", "append"),
    "split": ("subfiles.split", "split"),
    "bench_rmsd": ("bench.runner", "bench_rmsd"),
    "bench_dihedrals": ("bench.dihedrals", "bench_dihedrals"),
    "bench_report": ("bench.report", "bench_report"),
    "info": ("check.info", "info"),
    "validate": ("check.validate", "validate"),
    "validate_file": ("check.validate", "validate_file"),
    "validate_manifest": ("check.validate", "validate_manifest"),
    "compare_with_source": ("check.compare", "compare_with_source"),
}

__all__ = ["__version__"] + sorted(_API)


def __getattr__(name):
    """Import an API function when it is first used (``from h5mdtool import convert``)."""
    import importlib

    if name in _API:
        module, attribute = _API[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    # only the API: not the subpackages, which become attributes once imported
    return sorted(__all__)

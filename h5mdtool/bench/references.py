"""The publications h5mdtool's behaviour and messages rest on, cited in full where they are used.

Short keys are used in code; :data:`CITATIONS` gives what messages print and
``docs/references.md`` the full list.
"""

#: key -> short citation for messages (authors, venue, year, DOI).
CITATIONS = {
    "khoshlessan2020": ("Khoshlessan, Paraskevakos, Fox, Jha & Beckstein, \"Parallel performance of molecular "
                        "dynamics trajectory analysis\", Concurrency and Computation: Practice and Experience "
                        "32:e5789 (2020), doi:10.1002/cpe.5789"),
    "khoshlessan2017": ("Khoshlessan, Paraskevakos, Jha & Beckstein, \"Parallel Analysis in MDAnalysis using the "
                        "Dask Parallel Computing Library\", Proc. 16th Python in Science Conf. (SciPy 2017), "
                        "pp. 64-72, doi:10.25080/shinma-7f4c6e7-00a"),
    "jakupovic2021": ("Jakupovic & Beckstein, \"MPI-parallel Molecular Dynamics Trajectory Analysis with the H5MD "
                      "Format in the MDAnalysis Python Package\", Proc. 20th Python in Science Conf. (SciPy 2021), "
                      "pp. 40-48, doi:10.25080/majora-1b6fd038-005"),
}


def cite(key):
    """The citation of publication *key* for a message."""
    return CITATIONS[key]

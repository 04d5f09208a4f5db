"""Progress bars: one tqdm bar on rank 0, off with ``--no-progress`` or when not a terminal."""

import sys


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_bar(total, description, comm, enabled=None, unit="frame"):
    """Return a progress bar for *total* units of work of the whole job.

    Parameters
    ----------
    total : int
    description : str
    comm : communicator
        Only rank 0 shows a bar.
    enabled : bool, optional
        Force the bar on or off; by default it shows when standard error is a terminal.
    unit : str
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or comm.rank != 0:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=description,
        unit=unit,
        unit_scale=True,
        dynamic_ncols=True,
        file=sys.stderr,
        leave=False,
    )

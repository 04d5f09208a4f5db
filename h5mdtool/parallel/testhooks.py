"""Test-only hooks: delays injected through one environment variable.

``H5MDTOOL_TEST_DELAY="site:rank:seconds[,site:rank:seconds...]"`` makes :func:`delay` sleep
*seconds* each time the named *site* is reached on the named *rank* (``*`` for every rank).
The test suite uses it to make one rank a real straggler (``bench rmsd``) or to keep a
command running long enough to be interrupted (``convert``, ``split``). Unset, a call costs
one dictionary lookup.

Sites: ``convert-round`` (each round of collective writes), ``split-part`` (each part
written), ``rmsd-block`` (each block of frames read and superposed, while reading; each
block read ahead while rank 0 plans),
``bench-setup`` (rank 0's resolution of the analysis in ``bench rmsd``: topology, selections,
reference; the other ranks wait, reading ahead), ``inspect`` (rank 0's reading of an input's
metadata, which the other ranks wait for: an H5MD file's, a file of a format rank 0 scans
alone).

``H5MDTOOL_TEST_MARK=DIR`` makes :func:`delay` create ``DIR/SITE-RANK`` when a site is
reached, so a test knows a command got there (e.g. before interrupting it).
"""

import os
import time

VARIABLE = "H5MDTOOL_TEST_DELAY"
MARK_VARIABLE = "H5MDTOOL_TEST_MARK"


def _parse(text):
    """``"a:0:1.5,b:*:2"`` -> ``{("a", "0"): 1.5, ("b", "*"): 2.0}``; malformed entries are ignored."""
    delays = {}
    for entry in text.split(","):
        site, _, rest = entry.strip().partition(":")
        rank, _, seconds = rest.partition(":")
        try:
            delays[(site, rank.strip() or "*")] = float(seconds)
        except ValueError:
            continue
    return delays


def delay(site, rank=0):
    """Sleep as ``H5MDTOOL_TEST_DELAY`` asks for *site* on *rank*; return the seconds slept."""
    marks = os.environ.get(MARK_VARIABLE)
    if marks:
        open(os.path.join(marks, f"{site}-{rank}"), "a").close()
    text = os.environ.get(VARIABLE)
    if not text:
        return 0.0
    delays = _parse(text)
    seconds = delays.get((site, str(rank)), delays.get((site, "*"), 0.0))
    if seconds > 0:
        time.sleep(seconds)
    return seconds

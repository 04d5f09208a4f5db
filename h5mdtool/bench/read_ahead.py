"""Reading ahead while rank 0 resolves the analysis: the serial part off the critical path.

Rank 0 of ``bench rmsd`` (and ``bench dihedrals``) parses the topology, evaluates the
selections and reads the reference alone (:mod:`h5mdtool.bench.analysis`): 0.5-0.9 s on the
development machine, most of it importing MDAnalysis. The other ranks need none of it to
start reading when the frames are chosen by number (``--start/--stop/--step``): every rank
computes the frames and the partition rank 0 will choose (:func:`planned_share`), reads whole
frames (all atoms: the atoms analysed are not known yet) from the start of its share, block
by block within a memory budget (:func:`read_ahead_budget`), and stops as soon as rank 0 is
done (:func:`read_ahead`). Rank 0 then gives the end of its share to the others
(:func:`h5mdtool.parallel.partition.shed_root_frames`), so the time it spent alone is shared
by every rank instead of being waited for.

The frames read ahead are read by each rank on its own (an H5MD file without MPI-IO), since
rank 0 is not there to open the file collectively; the rest of the run is read as before.
Frames chosen by time (``-b/-e/--dt``) and the ``frames`` engine do not read ahead.

A split trajectory reads ahead too, each rank in its own parts; rank 0's end lies in its
part, which a rank taking a piece of it opens and scans from the start (an XTC part's frame
headers) besides its own: so the end goes in pieces of :data:`PART_PIECE_FRAMES` frames at
least to as few ranks as that needs (at 384 ranks a few ranks, not all 383, touch rank 0's
part).
"""

import numpy as np

from ..formats.base import ANGSTROM_PER_NM
from ..parallel.partition import partition_frames
from ..parallel.testhooks import delay
from .engines import frame_blocks
from .frames import ManifestFrames, TrajectoryFrames

#: Default budget: this fraction of the node's available memory, divided among its ranks...
MEMORY_FRACTION = 0.25
#: ...and at most this many bytes per rank.
MAX_BUDGET = 2 << 30
#: Budget where the available memory cannot be read (not Linux).
FALLBACK_BUDGET = 256 << 20
#: Frames per block read ahead at most: rank 0, once done, waits for the block being read
#: (128 AdK frames: about 5 ms from an H5MD file in the page cache, 20 ms from an XTC here).
BLOCK_FRAMES = 128
#: Frames of the first block read ahead; each next block is twice as large, up to
#: BLOCK_FRAMES. The first blocks are the slowest (the file's first reads, memory the process
#: never touched: 128 AdK frames took 73 ms as a first block on 2 ranks), and rank 0's plan
#: may be ready within tens of milliseconds (a stored topology); a small first block keeps
#: rank 0 from waiting for a large one.
FIRST_BLOCK_FRAMES = 8
#: Frames of rank 0's end a rank takes at least when the trajectory is split: taking a piece
#: costs it an open and a scan of rank 0's part (2 us a frame header for an XTC here).
PART_PIECE_FRAMES = 256


def available_memory():
    """Bytes of memory available to new processes (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_ahead_budget(comm, megabytes=None):
    """Bytes each rank may hold of frames read ahead.

    Parameters
    ----------
    comm : communicator
        Every rank calls it (the ranks sharing a node are counted with
        ``Split_type(COMM_TYPE_SHARED)``).
    megabytes : int, optional
        The budget in MiB (0: no reading ahead). Default: :data:`MEMORY_FRACTION` of the
        node's available memory divided among the node's ranks, at most :data:`MAX_BUDGET`.
    """
    if megabytes is not None:
        return int(megabytes) << 20
    if comm.size == 1:
        return 0  # no other rank to read while rank 0 plans
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local = node.size
    finally:
        node.Free()
    available = available_memory()
    if available is None:
        return FALLBACK_BUDGET
    return int(min(MAX_BUDGET, available * MEMORY_FRACTION / local))


def planned_share(info, options, n_ranks, rank, chunk_frames):
    """This rank's frames as rank 0's plan will divide them, or None when the plan decides
    them in a way the other ranks cannot foresee (frames chosen by time) or the options are
    invalid (rank 0's plan reports that).

    Parameters
    ----------
    info : h5mdtool.bench.inputs.InputInfo
    options : h5mdtool.bench.analysis.AnalysisOptions
    n_ranks, rank : int
    chunk_frames : int
        Frames per chunk the partition follows (1 but for the blocks engine on H5MD).
    """
    from ..formats.frametimes import by_time
    from .analysis import select_frames

    if by_time(options.begin, options.end, options.dt):
        return None
    try:
        frames = select_frames(info.n_frames, options, times=None)  # by number: no times needed
    except Exception:  # noqa: BLE001 - rank 0's plan raises it for every rank
        return None
    first, last = partition_frames(frames, n_ranks, chunk_frames, info.part_edges()).bounds[rank]
    return frames[first:last]


class ReadAhead:
    """Whole frames one rank read before the analysis was resolved (a prefix of its share).

    Attributes
    ----------
    frames : numpy.ndarray
        The frame numbers read, in order.
    blocks : list of (numpy.ndarray, numpy.ndarray)
        Positions of every atom (k, n_atoms, 3) in the frame sources' units (nm) and times (ps).
    opened : list of str
        Files opened to read them.
    scans : dict
        A split trajectory's parts scanned to read them: path -> Segment
        (:func:`h5mdtool.bench.frames.checked_part_scans` checks them without a second scan).
    nbytes : int
    io_seconds : float
        Time spent reading them.
    scale : float
        Angstrom per unit of the positions (an engine's source attribute).
    """

    scale = ANGSTROM_PER_NM
    chunk_frames = 1

    def __init__(self):
        self.frames = np.empty(0, np.int64)
        self.blocks = []
        self.opened = []
        self.scans = {}
        self.nbytes = 0
        self.io_seconds = 0.0

    def __len__(self):
        return len(self.frames)

    def saved_frames(self, computed, compute):
        """Frames' worth of work reading ahead saved this rank: the frames read, less the
        compute (*compute* seconds a frame) of those still to compute (all but *computed*),
        against a frame's cost of reading ahead (whole frames) and computing."""
        if not len(self):
            return 0.0
        full = self.io_seconds / len(self) + compute
        return len(self) - (len(self) - computed) * (compute / full if full > 0 else 0.0)


def _whole_frames_source(info, block_frames):
    if info.kind == "split":
        return ManifestFrames(info.manifest, None, block_frames, info.h5md_group)
    return TrajectoryFrames(info.index, None, block_frames)  # comm None: no collective open


def read_ahead(info, frames, block_frames, chunk_frames, budget, ready, clock, rank=None):
    """Read whole frames of *frames* until *ready()* is true or *budget* bytes are held.

    Parameters
    ----------
    info : h5mdtool.bench.inputs.InputInfo
    frames : numpy.ndarray
        This rank's share (:func:`planned_share`), read from its start.
    block_frames, chunk_frames : int
        Frames per block (at most :data:`BLOCK_FRAMES`) and per chunk (blocks end on chunk
        boundaries, as the engine's, whole chunks at least).
    budget : int
        Bytes of positions to hold at most.
    ready : callable
        True once rank 0's plan is ready (tested before each block).
    clock : h5mdtool.bench.timing.PhaseClock
        Opening is charged to ``t_init_traj``, reading to ``t_io``.
    rank : int, optional
        This rank, for the test hook ``rmsd-block`` (a rank slow in its reading is slow
        reading ahead too).

    Returns
    -------
    ReadAhead
        What was read; empty when nothing could be (a file that cannot be read is reported
        by the run itself, every rank together, when it reads the frame again).
    """
    ahead = ReadAhead()
    itemsize = np.dtype(info.index.dtype).itemsize if info.index is not None else 4  # float32 mostly
    frame_bytes = info.n_atoms * 3 * itemsize
    if budget < frame_bytes or len(frames) == 0 or ready():
        return ahead
    source = None
    read = []
    try:
        source = _whole_frames_source(info, block_frames)
        clock.charge("t_init_traj")
        for block in growing_blocks(frames, min(block_frames, BLOCK_FRAMES), chunk_frames):
            if ready() or ahead.nbytes + len(block) * frame_bytes > budget:
                break
            positions, times = _read_block(source, block)
            delay("rmsd-block", rank)
            ahead.blocks.append((positions, times))
            ahead.nbytes += positions.nbytes
            read.append(block)
            ahead.io_seconds += clock.charge("t_io")
    except Exception:  # noqa: BLE001 - read again, and reported, after the plan
        return ReadAhead()
    finally:
        if source is not None:
            ahead.opened = list(source.opened)
            ahead.scans = dict(getattr(source, "scans", {}))
            source.close()
    ahead.frames = np.concatenate(read) if read else ahead.frames
    return ahead


def growing_blocks(frames, block_frames, chunk_frames=1):
    """Blocks of *frames* (as :func:`~h5mdtool.bench.engines.frame_blocks` cuts them, on
    chunk boundaries) of :data:`FIRST_BLOCK_FRAMES` frames first, then each twice as many, up
    to *block_frames*; yields each block's frame numbers."""
    row, size = 0, min(FIRST_BLOCK_FRAMES, block_frames)
    while row < len(frames):
        # the first block of the frames left: a slice longer than any block cut from it
        _, block = frame_blocks(frames[row:row + 2 * (size + chunk_frames)], size, chunk_frames)[0]
        yield block
        row += len(block)
        size = min(2 * size, block_frames)


def _read_block(source, block):
    """Whole frames of *block* in a buffer of their own (kept until the plan is ready)."""
    first, last = int(block[0]), int(block[-1])
    if last - first + 1 == len(block):
        return source.read(first, last + 1, fresh=True)
    # a strided selection, frame by frame: each copied out of the reused buffer before the next read
    pairs = [(positions.copy(), times) for positions, times in
             (source.read(int(frame), int(frame) + 1) for frame in block)]
    return np.concatenate([p for p, _ in pairs]), np.concatenate([t for _, t in pairs])

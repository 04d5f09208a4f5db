"""Per-rank timing of the benchmark: phases that add up, stragglers and what made them slow.

Khoshlessan et al. 2020 (section 5, figure 2d) and Jakupovic & Beckstein 2021 (its table of timings) split each rank's time
into opening the topology and the trajectory, reading, computing, waiting for the other
ranks and gathering the results. :class:`PhaseClock` charges every second of a rank's run to
exactly one of those phases, so ``t_total`` is their sum. Time a rank spends waiting for
another (for rank 0's inspection and setup, in a broadcast, before a collective open, at the
final barrier) is ``t_wait`` wherever it happens; the other phases hold the rank's own work.

Rank 0 resolves the analysis alone while the others read ahead, then wait: rank 0's setup
is recorded apart (``serial``: its seconds per phase), the run's *serial part* is what no
other rank worked during it (:func:`serial_seconds`), and :func:`find_stragglers` judges
every rank on its own reading and computing outside it, :func:`work`: ``t_io +
t_compute`` less rank 0's setup part of them, plus the part of rank 0's setup the others
overlapped. (Judged on
``t_total``, every rank looks alike, since all of them leave the final barrier together;
judged with the serial part or start-up, rank 0 or the others would look slow for work
that is not their share of the frames.)
"""

import statistics
import time

#: The phases of a rank's run, in order; ``t_total`` is their sum.
PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm")

#: Phases that are the rank's own work (the others are waiting for, or talking to, other ranks).
WORK_PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute")

#: The work stragglers are judged on: reading and computing the rank's share (start-up,
#: imports among it, is the same on every rank and is no sign of a straggler).
JUDGED_PHASES = ("t_io", "t_compute")

#: Khoshlessan et al. 2020 section 2.1: "any component ... whose runtime exceeds a typical run time (for
#: example, 1.5 times the median runtime) can be considered a straggler".
MEDIAN_FACTOR = 1.5

#: Khoshlessan et al. 2020 section 6.1: "any MPI rank that took at least about twice as long as the group
#: of ranks that finished fastest".
FASTEST_FACTOR = 2.0

#: A rank over those limits is a straggler only when its work exceeds the median by this
#: fraction of the run's ``t_total`` at least: ranks whose reading and computing take a few
#: hundredths of a second differ by 2x from noise alone, and delay no one.
MIN_EXCESS_FRACTION = 0.05


class PhaseClock:
    """Charges the time since the previous mark to one phase; nothing falls between phases.

    Examples
    --------
    >>> clock = PhaseClock()
    >>> # ... open the trajectory ...
    >>> _ = clock.charge("t_init_traj")
    >>> record = clock.record()  # phases and t_total, their sum
    """

    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.phases = dict.fromkeys(PHASES, 0.0)

    def charge(self, phase, until=None):
        """Add the seconds since the previous mark (to *until*, a ``time.perf_counter()``
        value, default now) to *phase*; return them."""
        now = time.perf_counter() if until is None else until
        elapsed = now - self.last
        self.phases[phase] += elapsed
        self.last = now
        return elapsed

    def split(self, parts, rest, until=None):
        """Charge the seconds since the previous mark (to *until*, default now): *parts*
        (phase -> seconds measured inside that interval) to their phases, what remains to *rest*."""
        now = time.perf_counter() if until is None else until
        elapsed = now - self.last
        measured = 0.0
        for phase, seconds in parts.items():
            seconds = min(max(float(seconds), 0.0), elapsed - measured)
            self.phases[phase] += seconds
            measured += seconds
        self.phases[rest] += elapsed - measured
        self.last = now

    def record(self):
        """The phases so far and ``t_total`` (their sum: from the start to the last mark)."""
        return {**self.phases, "t_total": self.last - self.started}


def own(record, phase):
    """Seconds of *phase* that are the rank's own work outside the serial part (rank 0's
    inspection and setup, recorded in its ``serial``)."""
    return record[phase] - (record.get("serial") or {}).get(phase, 0.0)


def work(record):
    """A rank's own work on its share of the frames: reading and computing
    (:data:`JUDGED_PHASES`), rank 0's serial part left out; for rank 0, also the part of its
    setup the other ranks overlapped by reading ahead (``setup_shared``, :func:`share_setup`),
    which it did instead of the frames it handed them."""
    return sum(own(record, phase) for phase in JUDGED_PHASES) + record.get("setup_shared", 0.0)


def share_setup(records):
    """Record on rank 0's record the seconds of its setup the others did not wait for
    (``setup_shared``: its setup less the serial part), so that :func:`work` compares it
    with the ranks that took over part of its frames."""
    if len(records) > 1 and records[0].get("serial"):
        setup = sum(records[0]["serial"].values())
        records[0]["setup_shared"] = max(setup - serial_seconds(records), 0.0)


def serial_seconds(records):
    """The serial part of a run: the seconds rank 0 worked alone while every other rank waited.

    That is rank 0's setup on one rank, and with several the least time any other rank
    waited idle for it (``t_plan_wait``: the others read ahead meanwhile, up to a memory
    budget, :mod:`h5mdtool.bench.read_ahead`); reports without ``t_plan_wait`` (before
    reading ahead) count rank 0's whole setup.
    """
    setup = sum((records[0].get("serial") or {}).values())
    waits = [r["t_plan_wait"] for r in records[1:] if r.get("t_plan_wait") is not None]
    if len(records) > 1 and len(waits) == len(records) - 1:
        return min(setup, min(waits))
    return setup


def find_stragglers(records):
    """Ranks whose work took far longer than the others', and in which phase.

    Ranks are judged on :func:`work`, their own reading and computing outside the serial part,
    and must exceed the median work by :data:`MIN_EXCESS_FRACTION` of the run at least.

    Parameters
    ----------
    records : list of dict
        Per-rank records in rank order, with every field of :data:`PHASES` and ``t_total``
        (and rank 0's ``serial``, when it has one).

    Returns
    -------
    dict
        ``median_work`` and ``fastest_work`` (s); ``over_1.5x_median`` and
        ``over_2x_fastest``: the ranks over each limit; ``ranks``: for each of them its
        ``work``, ``times_median``, ``times_fastest``, ``excess`` over the median (s), and
        the ``phase`` that exceeds the most that phase's median over the other, typical
        ranks (with ``phase_excess`` in s).
    """
    works = [work(r) for r in records]
    median, fastest = statistics.median(works), min(works)
    floor = median + MIN_EXCESS_FRACTION * max(r["t_total"] for r in records)
    over_median = [r["rank"] for r, w in zip(records, works) if w > MEDIAN_FACTOR * median and w > floor]
    over_fastest = [r["rank"] for r, w in zip(records, works) if w > FASTEST_FACTOR * fastest and w > floor]
    slow = set(over_median) | set(over_fastest)
    typical = [r for r in records if r["rank"] not in slow] or records
    phase_medians = {phase: statistics.median(own(r, phase) for r in typical) for phase in JUDGED_PHASES}
    details = []
    for record, seconds in zip(records, works):
        if record["rank"] not in slow:
            continue
        excesses = {phase: own(record, phase) - phase_medians[phase] for phase in JUDGED_PHASES}
        phase = max(excesses, key=excesses.get)
        details.append({
            "rank": record["rank"], "host": record.get("host"), "work": seconds,
            "times_median": seconds / median if median > 0 else None,
            "times_fastest": seconds / fastest if fastest > 0 else None,
            "excess": seconds - median, "phase": phase, "phase_excess": excesses[phase],
        })
    return {
        "median_work": median, "fastest_work": fastest, "rule_median": MEDIAN_FACTOR,
        "rule_fastest": FASTEST_FACTOR, "rule_min_excess": MIN_EXCESS_FRACTION, "over_1.5x_median": over_median,
        "over_2x_fastest": over_fastest, "ranks": details,
    }


def describe_stragglers(result):
    """One line for people: which ranks, by how much, in which phase (or that there are none)."""
    if not result["ranks"]:
        return (f"stragglers: none (work = own io + compute: median {result['median_work']:.3f} s, "
                f"fastest {result['fastest_work']:.3f} s; limits 1.5x the median, 2x the fastest, and 5% of "
                "t_total above the median)")
    parts = []
    for entry in result["ranks"]:
        rules = []
        if entry["rank"] in result["over_1.5x_median"]:
            rules.append(f"{entry['times_median']:.1f}x the median")
        if entry["rank"] in result["over_2x_fastest"]:
            rules.append(f"{entry['times_fastest']:.1f}x the fastest")
        parts.append(f"rank {entry['rank']} ({entry['work']:.3f} s of work, {' and '.join(rules)}; "
                     f"+{entry['phase_excess']:.3f} s in {entry['phase'][2:]})")
    return (f"stragglers: {'; '.join(parts)} (median work {result['median_work']:.3f} s, "
            f"fastest {result['fastest_work']:.3f} s)")


"""Per-rank timing of the benchmark: phases that add up, stragglers and what made them slow.

Khoshlessan et al. 2020 (section 5, figure 2d) and Jakupovic & Beckstein 2021 (its table of timings) split each rank's time
into opening the topology and the trajectory, reading, computing, waiting for the other
ranks and gathering the results. :class:`PhaseClock` charges every second of a rank's run to
exactly one of those phases, so ``t_total`` is their sum, and :func:`find_stragglers` judges
ranks on their *work*, the time before they wait: ``t_total - t_wait - t_comm``. (Judged on
``t_total``, every rank looks alike, since all of them leave the final barrier together.)
"""

import statistics
import time

#: The phases of a rank's run, in order; ``t_total`` is their sum.
PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm")

#: Phases that are the rank's own work (the others are waiting for, or talking to, other ranks).
WORK_PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute")

#: Khoshlessan et al. 2020 section 2.1: "any component ... whose runtime exceeds a typical run time (for
#: example, 1.5 times the median runtime) can be considered a straggler".
MEDIAN_FACTOR = 1.5

#: Khoshlessan et al. 2020 section 6.1: "any MPI rank that took at least about twice as long as the group
#: of ranks that finished fastest".
FASTEST_FACTOR = 2.0


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

    def charge(self, phase):
        """Add the seconds since the previous mark to *phase*; return them."""
        now = time.perf_counter()
        elapsed = now - self.last
        self.phases[phase] += elapsed
        self.last = now
        return elapsed

    def split(self, parts, rest):
        """Charge the seconds since the previous mark: *parts* (phase -> seconds measured
        inside that interval) to their phases, what remains to *rest*."""
        now = time.perf_counter()
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


def work(record):
    """A rank's own work: its time before it waits, ``t_total - t_wait - t_comm``."""
    return record["t_total"] - record["t_wait"] - record["t_comm"]


def find_stragglers(records):
    """Ranks whose work took far longer than the others', and in which phase.

    Parameters
    ----------
    records : list of dict
        Per-rank records in rank order, with every field of :data:`PHASES` and ``t_total``.

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
    over_median = [r["rank"] for r, w in zip(records, works) if w > MEDIAN_FACTOR * median]
    over_fastest = [r["rank"] for r, w in zip(records, works) if w > FASTEST_FACTOR * fastest]
    slow = set(over_median) | set(over_fastest)
    typical = [r for r in records if r["rank"] not in slow] or records
    phase_medians = {phase: statistics.median(r[phase] for r in typical) for phase in WORK_PHASES}
    details = []
    for record, seconds in zip(records, works):
        if record["rank"] not in slow:
            continue
        excesses = {phase: record[phase] - phase_medians[phase] for phase in WORK_PHASES}
        phase = max(excesses, key=excesses.get)
        details.append({
            "rank": record["rank"], "host": record.get("host"), "work": seconds,
            "times_median": seconds / median if median > 0 else None,
            "times_fastest": seconds / fastest if fastest > 0 else None,
            "excess": seconds - median, "phase": phase, "phase_excess": excesses[phase],
        })
    return {
        "median_work": median, "fastest_work": fastest, "rule_median": MEDIAN_FACTOR,
        "rule_fastest": FASTEST_FACTOR, "over_1.5x_median": over_median,
        "over_2x_fastest": over_fastest, "ranks": details,
    }


def describe_stragglers(result):
    """One line for people: which ranks, by how much, in which phase (or that there are none)."""
    if not result["ranks"]:
        return (f"stragglers: none (work before waiting: median {result['median_work']:.3f} s, "
                f"fastest {result['fastest_work']:.3f} s; limits 1.5x the median, 2x the fastest)")
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


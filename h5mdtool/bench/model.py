"""A scaling model of ``bench rmsd`` from its per-phase times at 1 rank and at one more count.

A run of N ranks is modelled as

    t(N) = s + q / N + c + max(o + (P(N) - (N - 1) r o) / N, o) + a log2 N   (collective costs growing with log N)
    t(N) = s + q / N + c + max(o + (P(N) - (N - 1) r o) / N, o) + b (N - 1)  (collective costs growing with N)
    P(N) = p (1 + k log2 N)

with, from the fastest 1-rank run (its one rank record):

- ``s``, the serial part: the setup that does not shrink with more ranks (``t_init_top`` +
  ``t_init_traj``: topology, selections, reference, opening and inspecting the input), less
  ``o`` and ``q``;
- ``c``, the 1-rank run's ``t_comm``;
- ``p``, the parallel part: ``t_io`` + ``t_compute``, the work the ranks divide;

and from the fastest run at the second-smallest rank count M (2 in the usual 1-2 pair):

- ``o``, the part of rank 0's setup the other ranks overlapped by reading ahead
  (:mod:`h5mdtool.bench.read_ahead`): rank 0's setup less the run's serial part (the least
  any other rank waited idle for it); a run without reading ahead has ``o = 0``. Rank 0
  cannot finish before it (the ``max``);
- ``r``, what reading ahead is worth: the frames the other ranks read ahead, at the 1-rank
  run's reading time a frame, over the seconds they took (1 when they are as fast as the
  run's own reading; less, because every frame read ahead goes to memory the process
  touches for the first time and holds every atom). Each other rank does ``r o`` of the
  divided work while rank 0 sets up, and rank 0 hands it frames for that: with ``r = 1``
  the setup ``o`` is divided like the frames, with ``r = 0`` it is waited for;
- ``k``, the contention of the parallel part: its busiest rank's ``t_io + t_compute``
  (rank 0's with the overlapped setup; another rank's with its reading ahead) is the
  ``max`` term's first argument at M (ranks contending for the disk, the page cache or
  memory bandwidth, or frames shared unevenly; ``e = 1 / (1 + k log2 M)`` is the parallel
  part's efficiency at M). Reading ahead slower than the run's reading is in ``r``, not in
  ``k``: each rank reads ahead for at most ``o`` at any rank count, where ``k`` is
  extrapolated;
- the change of what every rank pays before and after its work, ``max over ranks of
  (t_init_top + t_init_traj + t_comm)`` at M (rank 0's less ``o``) less ``s + q + c``. A
  growth is charged per doubling of the ranks, ``a`` (tree-shaped collectives: broadcasts,
  gathers, a collective open), or per added rank, ``b`` (what rank 0 does once per rank,
  what a file system serialises). A decrease means part of the setup is divided among the
  ranks (each opens only its own parts of a split trajectory): that part, ``q``, is taken
  out of ``s`` (``a = b = 0``).

Measurements the model cannot hold, from runs that vary, are bounded: ``q`` is at most the
setup left after ``o`` (the serial part is never negative), ``k`` is at least 0 (a
parallel part faster on M ranks than one rank's divided by M, which noise or caches can
give, is taken as ideal: the model does not extrapolate a super-linear speed-up), and
``r`` is at most 1.

The rank-wait time (``t_wait``: imbalance, stragglers) is not modelled, so the prediction
at M differs from the measurement by that wait only, and at 1 rank it is the measurement.
The two forms bound what measurements at 1 and 2 ranks can tell about many ranks;
docs/performance.md sets them beside measurements on 16 cores.
"""

import math

from ..parallel.errors import UsageError

#: Phases of a rank's setup and of its collective calls (the model's s, c, a and b).
SETUP = ("t_init_top", "t_init_traj")


def _fastest(runs):
    return min(runs, key=lambda run: run["t_total"])


def fit(runs_by_ranks):
    """The model's parameters from the runs of several rank counts.

    Parameters
    ----------
    runs_by_ranks : dict
        Rank count -> list of runs (each with ``t_total`` and per-rank ``ranks`` records).

    Returns
    -------
    dict
        ``s``, ``q``, ``o``, ``c``, ``p``, ``a``, ``b`` (seconds), ``r`` (what reading ahead is
        worth), ``k`` and ``e`` (the parallel part's contention, and its efficiency at the
        second rank count), ``from_ranks``
        (the two rank counts used) and ``measured`` (rank count -> fastest t_total).

    Raises
    ------
    UsageError
        Without a 1-rank run and a run at another rank count.
    """
    counts = sorted(runs_by_ranks)
    if 1 not in runs_by_ranks or len(counts) < 2:
        raise UsageError("--model needs a 1-rank report and one at another rank count (2 ranks, best)")
    one = _fastest(runs_by_ranks[1])["ranks"][0]
    second = counts[1]
    run = _fastest(runs_by_ranks[second])
    s = sum(one[phase] for phase in SETUP)
    c = one["t_comm"]
    p = one["t_io"] + one["t_compute"]
    o = min(overlapped_setup(run), s)  # a setup slower beside the others' reading is growth, not overlap
    r = read_ahead_worth(run, one["t_io"] / one["n_frames"] if one.get("n_frames") else 0.0)
    busiest = max(rank["t_io"] + rank["t_compute"] + (rank.get("setup_shared") or 0.0) for rank in run["ranks"])
    work = second * (busiest - o) + (second - 1) * r * o  # P(M), from the busiest rank's t(M)
    k = max((work / p - 1) / math.log2(second), 0.0) if p > 0 else 0.0
    change = max(sum(rank[phase] for phase in SETUP) + rank["t_comm"] - (rank.get("setup_shared") or 0.0)
                 for rank in run["ranks"]) - (s - o + c)
    growth = max(change, 0.0)
    q = min(max(-change, 0.0) * second / (second - 1), max(s - o, 0.0))
    return {"s": s - o - q, "q": q, "o": o, "r": r, "c": c, "p": p, "k": k, "e": 1 / (1 + k * math.log2(second)),
            "a": growth / math.log2(second), "b": growth / (second - 1), "from_ranks": [1, second],
            "measured": {n: _fastest(runs)["t_total"] for n, runs in sorted(runs_by_ranks.items())}}


def read_ahead_worth(run, seconds_per_frame):
    """What a second of reading ahead in *run* did of the divided work (``r``, at most 1).

    Parameters
    ----------
    run : dict
        A run's report (its ``ranks`` records, with ``n_read_ahead`` and ``t_read_ahead``).
    seconds_per_frame : float
        Reading time of a frame in the run proper (the 1-rank run's ``t_io`` a frame).

    Returns
    -------
    float
        The frames read ahead at *seconds_per_frame* over the seconds spent reading them; 1
        when nothing was read ahead, or reports carry no such times.
    """
    seconds = sum(rank.get("t_read_ahead") or 0.0 for rank in run["ranks"])
    frames = sum(rank.get("n_read_ahead") or 0 for rank in run["ranks"])
    if seconds <= 0 or seconds_per_frame <= 0:
        return 1.0
    return min(frames * seconds_per_frame / seconds, 1.0)


def overlapped_setup(run):
    """Seconds of rank 0's setup the other ranks overlapped by reading ahead in *run*: its
    setup less the run's serial part (0 for a run without reading ahead, and on one rank)."""
    ranks = run["ranks"]
    if len(ranks) < 2 or run.get("t_serial") is None or not ranks[0].get("serial"):
        return 0.0
    return max(sum(ranks[0]["serial"].values()) - run["t_serial"], 0.0)


def predict(parameters, n_ranks):
    """Predicted t(N), S(N) and E(N) of *n_ranks* ranks in both forms of the model.

    Returns
    -------
    dict
        ``n_ranks``; ``log`` and ``linear``: each ``t_total``, ``speedup`` and
        ``efficiency`` (against the 1-rank run's measured time); ``measured``: the fastest
        measured t_total at that count, or None.
    """
    if n_ranks < 1:
        raise UsageError(f"--model takes a rank count of at least 1, got {n_ranks}")
    m = parameters
    o, worth = m.get("o", 0.0), m.get("r", 1.0)
    work = m["p"] * (1 + m["k"] * math.log2(n_ranks))
    divided = max(o + (work - (n_ranks - 1) * worth * o) / n_ranks, o)
    base = m["s"] + m["q"] / n_ranks + m["c"] + divided
    t1 = m["measured"][1]
    result = {"n_ranks": n_ranks, "measured": m["measured"].get(n_ranks)}
    for form, growth in (("log", m["a"] * math.log2(n_ranks)), ("linear", m["b"] * (n_ranks - 1))):
        t = base + growth
        result[form] = {"t_total": t, "speedup": t1 / t, "efficiency": t1 / t / n_ranks}
    return result


def model(runs_by_ranks, n_ranks):
    """:func:`fit` the runs and :func:`predict` *n_ranks* ranks (and every measured count).

    Returns
    -------
    dict
        ``parameters`` (:func:`fit`), ``prediction`` (:func:`predict` of *n_ranks*) and
        ``checks``: the prediction at each measured rank count beside the measurement.
    """
    parameters = fit(runs_by_ranks)
    checks = [predict(parameters, n) for n in sorted(runs_by_ranks)]
    return {"parameters": parameters, "prediction": predict(parameters, n_ranks), "checks": checks}


def describe(result):
    """Lines for people: the parameters, then measured and predicted times."""
    m = result["parameters"]
    lines = [
        f"model from the {m['from_ranks'][0]}- and {m['from_ranks'][1]}-rank runs: "
        f"t(N) = s + q/N + c + max(o + (p (1 + k log2 N) - (N - 1) r o)/N, o) + a log2 N  (or + b (N - 1))",
        f"  s = {m['s']:.3f} s serial setup, q = {m['q']:.3f} s divided setup, "
        f"o = {m.get('o', 0.0):.3f} s setup overlapped by reading ahead (worth r = {m.get('r', 1.0):.2f} of "
        f"the run's reading), c = {m['c']:.3f} s, "
        f"p = {m['p']:.3f} s parallel work, "
        f"k = {m['k']:.2f} (its efficiency at {m['from_ranks'][1]} ranks {m['e']:.2f}), "
        f"a = {m['a']:.3f} s per doubling (b = {m['b']:.3f} s per added rank)",
        f"{'ranks':>7} {'measured':>9} {'t, log N':>9} {'E, log N':>9} {'t, N':>9} {'E, N':>7}",
    ]
    rows = {row["n_ranks"]: row for row in result["checks"]}
    rows[result["prediction"]["n_ranks"]] = result["prediction"]
    for n, row in sorted(rows.items()):
        measured = "-" if row["measured"] is None else f"{row['measured']:.3f}"
        lines.append(f"{n:>7} {measured:>9} {row['log']['t_total']:>9.3f} {row['log']['efficiency']:>9.2f} "
                     f"{row['linear']['t_total']:>9.3f} {row['linear']['efficiency']:>7.2f}")
    return lines

"""Hypothesis strategies: small trajectories in every input format, and commands to run on them.

Hypothesis draws a handful of numbers and choices (formats, sizes, feature switches, a
seed); numpy turns the seed into the arrays (:func:`.spec.coordinates`), so a case is cheap
to draw and shrinks on its parameters. :func:`cases` is the one entry point: a
:class:`~.cases.Case` with its input segments and a command (convert, split, validate
``--against``, bench rmsd) with random options.
"""

import numpy as np
from hypothesis import strategies as st

from .cases import Case
from .spec import (BOX_STORES, ISSUE14_FORMATS, LENGTH_PER_NM, LENGTH_UNITS, REGIMES, TIME_PER_PS, TIME_UNITS,
                   SegmentSpec, boxes, coordinates, make_steps)
from .writers import ATOM_NAMES

COMMANDS = ("convert", "split", "validate", "bench", "append")
#: Formats of the segments an append case draws (several segments of one trajectory).
APPEND_FORMATS = ("xtc", "trr", "dcd", "h5md")
#: --on-overlap values drawn for several segments ("drop" is the older name of "first")
OVERLAP_CHOICES = ("error", "later", "later", "first", "drop")
#: Selections tried with a topology; "name XX" matches nothing (a refusal).
SELECTIONS = ("name CA", "all", "index 0", "index 1:3", "name CA or name N", "resid 1", "not name OW",
              "backbone", "name XX")
XTC_PRECISIONS = (1000.0, 100.0, 10000.0)
#: Input formats drawn: the four of issue 11 four times as often as each of issue 14's, so
#: that the new formats are about one case in five of the fixed-seed profile.
DRAWN_FORMATS = ("xtc", "trr", "dcd", "h5md") * 4 + ISSUE14_FORMATS
#: Formats MDAnalysis numbers or times per file (no step in NCDF, GSD's made-up time):
#: their cases have one segment.
SINGLE_SEGMENT_FORMATS = ("ncdf", "trz", "gsd")
#: LAMMPS DCD time steps drawn (fs, LAMMPS ``units real``).
LAMMPS_DELTAS_FS = (1.0, 2.0, 0.5)


def cli_compressions():
    """The compressions the command line offers (new filters are fuzzed as soon as they exist)."""
    from h5mdtool.cli.convert import command

    for parameter in command.params:
        if parameter.name == "compression":
            return tuple(parameter.type.choices)
    return ("none",)


def _mask(draw, rng, n, mode):
    if mode == "all":
        return np.ones(n, bool)
    if mode == "none":
        return np.zeros(n, bool)
    if mode == "first_missing":
        mask = np.ones(n, bool)
        mask[0] = False
        return mask
    mask = rng.random(n) < 0.5  # "some"
    return mask


@st.composite
def segment_sets(draw, fmt=None, max_segments=3, formats=DRAWN_FORMATS, min_segments=1):
    """1-3 segments of one trajectory (one format of *formats*, or XTC with TRR), with their atom names."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_atoms = draw(st.integers(1, 50))
    names = [ATOM_NAMES[i] for i in rng.integers(0, len(ATOM_NAMES), n_atoms)]
    fmt = fmt or draw(st.sampled_from(formats))
    n_segments = draw(st.sampled_from((1, 1, 1, 2, 2, 3)[: 2 * max_segments]))
    if n_segments > max_segments or fmt in SINGLE_SEGMENT_FORMATS:
        n_segments = 1 if fmt in SINGLE_SEGMENT_FORMATS else max_segments
    n_segments = max(n_segments, min_segments)
    mixed = fmt in ("xtc", "trr") and n_segments > 1 and draw(st.booleans()) and draw(st.booleans())
    regime = draw(st.sampled_from(REGIMES))
    box_kind = draw(st.sampled_from(("none", "ortho", "triclinic")))
    box_changing = draw(st.booleans())
    overlap = draw(st.sampled_from(("after", "after", "after", "overlap", "gap"))) if n_segments > 1 else "after"
    common = {"regime": regime, "box_kind": box_kind, "box_changing": box_changing,
              # DCD restarts keep the time step; NSAVC changes only now and then
              "dcd_delta": float(draw(st.sampled_from((1.0, 0.5, 0.02045482949774598)))),  # AKMA; the last is 1 fs
              "lammps_delta": float(draw(st.sampled_from(LAMMPS_DELTAS_FS))),
              "dcd_nsavc": int(draw(st.sampled_from((1, 2, 10)))), "dcd_nsavc_varies": draw(st.integers(0, 5)) == 0}
    segments = []
    last_step = None
    stride = int(draw(st.sampled_from((1, 2, 5, 10, 100))))
    dt_per_step = float(draw(st.sampled_from((0.001, 0.002, 0.004, 0.01))))
    time_origin = float(draw(st.sampled_from((0.0, 0.0, 100.0, 2.5))))
    for number in range(n_segments):
        seg_fmt = fmt
        if mixed and number > 0:
            seg_fmt = draw(st.sampled_from(("xtc", "trr")))
        n_frames = draw(st.integers(1, 60 if n_segments == 1 else 25))
        if last_step is None:
            first_step = int(draw(st.sampled_from((0, 0, 1, 1000, 250000))))
        elif overlap == "overlap":
            back = draw(st.integers(0, max(0, n_frames * stride)))
            first_step = max(0, last_step - back)
        else:
            first_step = last_step + stride * (1 if overlap == "after" else draw(st.integers(2, 10)))
        segment = _segment(draw, rng, seg_fmt, n_atoms, n_frames, first_step, stride, dt_per_step, time_origin,
                           common, first=(number == 0))
        segments.append(segment)
        last_step = int(segment.steps[-1])
    return segments, names, {"seed": seed, "overlap": overlap}


def _segment(draw, rng, fmt, n_atoms, n_frames, first_step, stride, dt_per_step, time_origin, common, first):
    irregular = fmt in ("xtc", "trr") and draw(st.booleans()) and draw(st.booleans())
    if fmt in ("dcd", "lammps"):
        return _dcd_segment(draw, rng, n_atoms, n_frames, first_step, stride, common, fmt)
    if fmt in SINGLE_SEGMENT_FORMATS:
        return _mda_written_segment(draw, rng, fmt, n_atoms, n_frames, first_step, stride, dt_per_step, time_origin,
                                    common)
    steps = make_steps(rng, n_frames, first_step, stride, irregular)
    times = time_origin + steps * dt_per_step
    positions = coordinates(rng, (n_frames, n_atoms, 3), common["regime"])
    spec = SegmentSpec(format=fmt, n_atoms=n_atoms, steps=steps, times=times, positions=positions,
                       has_positions=np.ones(n_frames, bool))
    if common["box_kind"] != "none":
        spec.box = boxes(rng, n_frames, common["box_kind"], common["box_changing"])
        spec.has_box = np.ones(n_frames, bool)
    if fmt in ("xtc", "trr"):
        spec.times = spec.times.astype(np.float32).astype(np.float64)
        if spec.box is not None:
            presence = draw(st.sampled_from(("all", "all", "all", "not_first", "some")))
            if presence == "not_first" and first:
                spec.has_box[0] = False
            elif presence == "some":
                spec.has_box = rng.random(n_frames) < 0.6
    if fmt == "xtc":
        spec.xtc_precision = draw(st.sampled_from(XTC_PRECISIONS))
        if n_frames > 1 and draw(st.integers(0, 24)) == 0:
            spec.natoms_change_frame = int(draw(st.integers(1, n_frames - 1)))
    if fmt == "trr":
        _trr_fields(draw, rng, spec)
    if fmt == "h5md":
        _h5md_layout(draw, rng, spec, common)
    if fmt in ("xtc", "trr") and spec.natoms_change_frame is None and draw(st.integers(0, 19)) == 0:
        spec.extra["truncate"] = (draw(st.sampled_from(("header", "data"))), draw(st.floats(0.0, 1.0)))
    if (fmt == "xtc" and n_atoms > 9 and not spec.damaged and "truncate" not in spec.extra
            and draw(st.integers(0, 19)) == 0):
        spec.corrupt_frame = int(draw(st.integers(0, n_frames - 1)))
    return spec


def _trr_fields(draw, rng, spec):
    n = spec.n_frames
    for name, scale in (("velocities", 1.0), ("forces", 300.0)):
        mode = draw(st.sampled_from(("all", "all", "none", "some", "first_missing")))
        mask = _mask(draw, rng, n, mode)
        if mask.any():
            setattr(spec, name, rng.normal(0.0, scale, (n, spec.n_atoms, 3)))
            setattr(spec, f"has_{name}", mask)
    if draw(st.integers(0, 7)) == 0:
        # some frames hold velocities or forces but no positions
        if spec.velocities is None:
            spec.velocities = rng.normal(0.0, 1.0, (n, spec.n_atoms, 3))
            spec.has_velocities = np.zeros(n, bool)
        spec.has_positions = rng.random(n) < 0.6
        spec.has_velocities = spec.has_velocities | ~spec.has_positions
    spec.extra["lambda"] = float(draw(st.sampled_from((0.0, 0.5))))


def _dcd_segment(draw, rng, n_atoms, n_frames, first_step, stride, common, fmt="dcd"):
    """A CHARMM DCD, or a LAMMPS one (*fmt* "lammps": the same bytes, DELTA in fs)."""
    nsavc = common["dcd_nsavc"]
    if common["dcd_nsavc_varies"]:
        nsavc = int(draw(st.sampled_from((1, 2, 10, stride))))
    istart = int(first_step - first_step % nsavc)
    steps = istart + nsavc * np.arange(n_frames, dtype=np.int64)
    delta = common["dcd_delta"] if fmt == "dcd" else common["lammps_delta"]
    spec = SegmentSpec(format=fmt, n_atoms=n_atoms, steps=steps, times=None,
                       positions=10.0 * coordinates(rng, (n_frames, n_atoms, 3), common["regime"]),
                       has_positions=np.ones(n_frames, bool), dcd_istart=istart, dcd_nsavc=nsavc,
                       dcd_delta_akma=delta, dcd_angles=draw(st.sampled_from(("cosine", "degrees"))))
    if common["box_kind"] != "none":
        lengths = rng.uniform(20.0, 120.0, 3)
        angles = np.full(3, 90.0)
        if common["box_kind"] == "triclinic":
            angles = rng.uniform(70.0, 110.0, 3)
        cells = np.tile(np.concatenate([lengths, angles]), (n_frames, 1))
        if common["box_changing"]:
            cells[:, :3] *= 1.0 + rng.uniform(-0.02, 0.02, (n_frames, 1))
        spec.extra["dcd_cells"] = cells
        spec.has_box = np.ones(n_frames, bool)
    elif draw(st.integers(0, 3)) == 0:
        spec.extra["zero_cells"] = True  # the periodic flag set, every cell of zero lengths (no box)
    if draw(st.integers(0, 19)) == 0:
        spec.extra["truncate"] = (draw(st.sampled_from(("header", "data"))), draw(st.floats(0.0, 1.0)))
    return spec


def _mda_written_segment(draw, rng, fmt, n_atoms, n_frames, first_step, stride, dt_per_step, time_origin, common):
    """One AMBER NetCDF, TRZ or GSD file (values in the units its writer takes: Angstrom, ps).

    NCDF: time (stored float32 by MDAnalysis's NCDFWriter), velocities and forces each in all
    frames or none, unit cell or none; no step (the format has none). TRZ: step (``ntrj``),
    time, velocities (the format always stores them: zeros when drawn absent), box or zeros.
    GSD: step, positions and a box (orthorhombic, gsd's default unit box, or now and then
    all-zero, which MDAnalysis's GSDReader cannot read); no time, no velocities MDAnalysis reads. ``extra["dimensions"]`` holds each frame's box as MDAnalysis's
    ``[a, b, c, alpha, beta, gamma]``, the form the writers take.
    """
    steps = np.arange(n_frames, dtype=np.int64)
    if fmt != "ncdf":
        steps = make_steps(rng, n_frames, first_step, stride, irregular=draw(st.booleans()))
    times = time_origin + steps * dt_per_step if fmt != "gsd" else np.arange(n_frames, dtype=np.float64)
    spec = SegmentSpec(format=fmt, n_atoms=n_atoms, steps=steps, times=times,
                       positions=10.0 * coordinates(rng, (n_frames, n_atoms, 3), common["regime"]),
                       has_positions=np.ones(n_frames, bool))
    box_kind = common["box_kind"]
    if fmt == "gsd" and box_kind == "triclinic":
        # MDAnalysis's GSDReader takes HOOMD's tilt factors xy, xz, yz for cosines of angles
        # (arccos), which HOOMD's box definition does not say: triclinic GSD boxes are not drawn
        box_kind = "ortho"
    if box_kind != "none":
        from MDAnalysis.lib.mdamath import triclinic_box

        vectors = 10.0 * boxes(rng, n_frames, box_kind, common["box_changing"])
        spec.extra["dimensions"] = np.array([triclinic_box(*b) for b in vectors], np.float64)
        spec.has_box = np.ones(n_frames, bool)
    if fmt == "gsd" and box_kind == "none" and draw(st.integers(0, 5)) == 0:
        spec.extra["zero_box"] = True  # HOOMD boxes have positive lengths; MDAnalysis cannot read this one
    if fmt in ("ncdf", "trz"):
        if fmt == "trz" or draw(st.booleans()):
            spec.velocities = rng.normal(0.0, 10.0, (n_frames, n_atoms, 3))
            spec.has_velocities = np.ones(n_frames, bool)
            if fmt == "trz" and draw(st.integers(0, 3)) == 0:
                spec.velocities[:] = 0.0  # what TRZWriter stores for a universe without velocities
        if fmt == "ncdf" and draw(st.booleans()):
            spec.forces = rng.normal(0.0, 50.0, (n_frames, n_atoms, 3))
            spec.has_forces = np.ones(n_frames, bool)
    if fmt == "ncdf" and draw(st.integers(0, 3)) == 0:
        # scale_factor attributes other than AMBER's velocity one (the writer divides, readers multiply)
        spec.extra["ncdf_scales"] = {name: float(draw(st.sampled_from((0.5, 2.0, 20.455))))
                                     for name in ("scale_coordinates", "scale_time", "scale_forces",
                                                  "scale_cell_lengths") if draw(st.booleans())}
    return spec


def _h5md_layout(draw, rng, spec, common):
    writer = draw(st.sampled_from(("h5mdtool", "mdanalysis", "pyh5md", "h5py", "h5py")))
    spec.writer = writer
    n = spec.n_frames
    with_velocities = draw(st.booleans())
    with_forces = draw(st.booleans())
    if with_velocities:
        spec.velocities = rng.normal(0.0, 1.0, (n, spec.n_atoms, 3))
        spec.has_velocities = np.ones(n, bool)
    if with_forces:
        spec.forces = rng.normal(0.0, 300.0, (n, spec.n_atoms, 3))
        spec.has_forces = np.ones(n, bool)
    if writer == "h5mdtool":
        spec.box_store = "n33" if spec.box is not None else "none"
        return
    spec.length_unit = draw(st.sampled_from(LENGTH_UNITS))
    spec.time_unit = draw(st.sampled_from(TIME_UNITS))
    factor = LENGTH_PER_NM[spec.length_unit]
    spec.positions = spec.positions * factor
    if spec.velocities is not None:
        spec.velocities = spec.velocities * factor
    if spec.forces is not None and spec.length_unit == "Angstrom":
        spec.forces = spec.forces / 10.0
    if spec.box is not None:
        spec.box = spec.box * factor
    spec.times = spec.times * TIME_PER_PS[spec.time_unit]
    if writer == "mdanalysis":
        spec.box_store = "n33" if spec.box is not None else "none"
        return
    # pyh5md and h5py: every H5MD variant
    regular = n < 2 or len(set(np.diff(spec.steps).tolist())) == 1
    spec.step_store = draw(st.sampled_from(("explicit", "explicit", "fixed"))) if regular else "explicit"
    spec.time_store = draw(st.sampled_from(("explicit", "explicit", "fixed", "missing")))
    if spec.time_store == "fixed" and spec.step_store != "fixed":
        spec.time_store = "explicit"
    if spec.time_store == "fixed":
        spec.times = spec.times[0] + (spec.times[1] - spec.times[0] if n > 1 else 1.0) * np.arange(n)
    if spec.box is not None:
        stores = [s for s in BOX_STORES if s != "none"]
        if common["box_kind"] == "triclinic":
            stores = [s for s in stores if s in ("n33", "fixed33")]
        if common["box_changing"]:
            stores = [s for s in stores if not s.startswith("fixed")]
        spec.box_store = draw(st.sampled_from(stores))
        if spec.box_store.startswith("fixed"):
            spec.box = np.repeat(spec.box[:1], n, axis=0)
        spec.boundary = draw(st.sampled_from(((True, True, True),) * 4 + ((True, True, False), (False, False, False))))
    else:
        spec.box_store = "none"
        spec.boundary = (False, False, False)
    if spec.velocities is not None and n > 2 and draw(st.integers(0, 3)) == 0:
        spec.velocity_rate = int(draw(st.integers(2, 3)))
        spec.has_velocities = np.arange(n) % spec.velocity_rate == 0
    extras = []
    for extra in ("observables", "connectivity", "parameters", "other_group"):
        if draw(st.integers(0, 4)) == 0:
            extras.append(extra)
    spec.extras = tuple(extras)
    if "other_group" in extras:
        spec.extra["other_box"] = draw(st.sampled_from(("empty", "edges")))
    if "connectivity" in extras:
        pairs = max(1, spec.n_atoms - 1)
        spec.bonds = np.stack([np.arange(pairs), np.minimum(np.arange(pairs) + 1, spec.n_atoms - 1)], axis=1)
    if draw(st.integers(0, 5)) == 0 and "other_group" not in extras:
        spec.group_name = "atoms"


# -- options ------------------------------------------------------------------------------

@st.composite
def frame_options(draw, n_frames):
    options = {}
    if draw(st.integers(0, 2)) == 0:
        options["start"] = draw(st.one_of(st.none(), st.integers(-n_frames - 2, n_frames + 1)))
        options["stop"] = draw(st.one_of(st.none(), st.integers(-n_frames - 2, n_frames + 2)))
        options["step"] = draw(st.one_of(st.none(), st.integers(1, 5), st.just(0)))
    return {k: v for k, v in options.items() if v is not None}


def _segment_times(segments):
    """Every segment's times (ps) joined, or None when a segment records none."""
    times = [s.times for s in segments]
    if any(t is None for t in times) or not times:
        return None
    return np.concatenate([np.asarray(t, np.float64) for t in times])


@st.composite
def time_options(draw, segments):
    """-b/-e/--dt (keywords begin, end, dt) near the segments' own times: on a frame's time
    (GROMACS's float32 bounds), between frames, outside the trajectory; dt a multiple of the
    frame interval or not."""
    if draw(st.integers(0, 2)) != 0:
        return {}
    times = _segment_times(segments)
    if times is None or len(times) == 0:
        times = np.array([0.0, 1.0])
    low, high = float(times.min()), float(times.max())
    interval = float(np.median(np.diff(np.unique(times)))) if len(np.unique(times)) > 1 else 1.0

    def a_time():
        kind = draw(st.sampled_from(("frame", "frame", "between", "below", "above")))
        if kind == "frame":
            return float(times[draw(st.integers(0, len(times) - 1))])
        if kind == "between":
            return float(draw(st.floats(low, high, allow_nan=False, allow_infinity=False)))
        if kind == "below":
            return low - interval * draw(st.integers(1, 3))
        return high + interval * draw(st.integers(1, 3))

    options = {}
    if draw(st.booleans()):
        options["begin"] = a_time()
    if draw(st.booleans()):
        options["end"] = a_time()
    if draw(st.booleans()) or not options:
        options["dt"] = draw(st.sampled_from((interval, 2 * interval, 3 * interval, 0.7 * interval, 2.5 * interval)))
    return options


@st.composite
def layout_options(draw, n_frames, allow_stripes=True):
    options = {}
    choice = draw(st.sampled_from(("one", "one", "k", "auto", "huge", "contiguous")))
    if choice == "k":
        options["chunk_frames"] = draw(st.integers(2, max(2, n_frames + 1)))
    elif choice == "auto":
        options["chunk_frames"] = "auto"
    elif choice == "huge":
        options["chunk_frames"] = draw(st.integers(n_frames, n_frames + 100))
    elif choice == "contiguous":
        options["contiguous"] = True
    compression = draw(st.sampled_from(cli_compressions()))
    if compression != "none" and (choice != "contiguous" or draw(st.integers(0, 4)) == 0):
        options["compression"] = compression
        if compression == "gzip" and draw(st.booleans()):
            options["compression_level"] = draw(st.integers(0, 9))
        if draw(st.integers(0, 3)) == 0:
            options["shuffle"] = draw(st.booleans())
    elif draw(st.integers(0, 19)) == 0:
        options["shuffle"] = True  # without compression: a usage error
    if draw(st.integers(0, 3)) == 0:
        options["split_xyz"] = draw(st.booleans())  # True without compression: a usage error
    if draw(st.integers(0, 2)) == 0:
        digits = draw(st.integers(1, 6))
        options["precision"] = draw(st.sampled_from((10.0 ** -digits, 5 * 10.0 ** -(digits + 1), 2 * 10.0 ** -digits)))
        options["precision"] = max(options["precision"], 1e-6)
    if allow_stripes and draw(st.integers(0, 9)) == 0:
        options["stripe_count"] = draw(st.sampled_from((1, 2, 4, -1, 0)))
        options["stripe_size"] = draw(st.sampled_from((65536, 1048576, 4 * 1048576, 100000)))
    return options


@st.composite
def convert_options(draw, segments, names):
    n_frames = sum(s.n_frames for s in segments)
    options = dict(draw(frame_options(n_frames)))
    options.update(draw(time_options(segments)))
    options.update(draw(layout_options(n_frames)))
    if draw(st.integers(0, 3)) == 0:
        options["topology"] = True  # the case's PDB
        if draw(st.integers(0, 3)) != 0:
            options["select"] = draw(st.sampled_from(SELECTIONS))
    if len(segments) > 1:
        options["on_overlap"] = draw(st.sampled_from(OVERLAP_CHOICES))
    if any("other_group" in s.extras for s in segments) and draw(st.booleans()):
        options["group"] = segments[0].group_name  # the group read, named (--group)
    if draw(st.integers(0, 5)) == 0:
        options["velocities"] = False
    if draw(st.integers(0, 5)) == 0:
        options["forces"] = False
    if draw(st.integers(0, 3)) == 0:
        options["block_bytes"] = draw(st.sampled_from((1, 4096, 65536)))
    if draw(st.integers(0, 3)) == 0:
        options["threads"] = draw(st.integers(1, 3))  # compression in h5mdtool's threads
    if draw(st.booleans()):
        # under MPI: each rank compresses its chunks, rank 0 stores them (no effect on one rank)
        options["parallel_compression"] = "ranks"
    return options


@st.composite
def split_options(draw, segments):
    n_frames = sum(s.n_frames for s in segments)
    options = {"nparts": draw(st.sampled_from((1, 2, 2, 3, 3, 4, 5, 7, n_frames, n_frames + 1)))}
    if any(s.format in ("h5md",) + ISSUE14_FORMATS for s in segments) and draw(st.integers(0, 4)) != 0:
        options["format"] = "h5md"  # "same" on H5MD or issue 14's formats is a usage error: drawn now and then
    else:
        options["format"] = draw(st.sampled_from(("same", "same", "h5md")))
    formats = {s.format for s in segments}
    default = "same" if len(formats) == 1 and formats <= {"xtc", "trr", "dcd"} else "h5md"
    if options["format"] == default and draw(st.booleans()):
        options["default_format"] = True  # split is not given the parts' format: its default must be this one
    if options["format"] == "h5md":
        options.update(draw(layout_options(n_frames, allow_stripes=False)))
    options.update(draw(time_options(segments)))
    if len(segments) > 1:
        options["on_overlap"] = draw(st.sampled_from(OVERLAP_CHOICES))
    return options


@st.composite
def append_options(draw, segments):
    """convert the first segments (on 1-3 ranks, in a drawn layout), then --append the others.

    ``base`` holds the first convert's options (the layout the append keeps), ``split_at``
    the number of segments it converts, ``base_ranks`` its rank count; the append itself
    runs at every rank count of the harness.
    """
    n_frames = sum(s.n_frames for s in segments)
    base = draw(layout_options(n_frames, allow_stripes=False))
    if base.get("contiguous") and draw(st.integers(0, 4)):
        del base["contiguous"]  # refused (it cannot grow): drawn now and then
    if draw(st.integers(0, 5)) == 0:
        base["velocity_precision"] = draw(st.sampled_from((0.01, 0.001)))
    options = {"split_at": draw(st.integers(1, len(segments) - 1)), "base_ranks": draw(st.sampled_from((1, 1, 2, 3))),
               "base": base, "on_overlap": draw(st.sampled_from(OVERLAP_CHOICES))}
    for name in ("velocities", "forces"):
        if draw(st.integers(0, 5)) == 0:
            options[name] = False
    if draw(st.integers(0, 3)) == 0:
        options["block_bytes"] = draw(st.sampled_from((1, 4096, 65536)))
    return options


@st.composite
def validate_options(draw, segments):
    """Which value of the reference copy to change (none: the copy must pass)."""
    field = draw(st.sampled_from(("none", "none", "positions", "positions", "velocities", "forces", "box",
                                  "step", "time")))
    n_frames = sum(s.n_frames for s in segments)
    mutation = None
    if field != "none":
        mutation = {
            "field": field,
            "frame": draw(st.integers(0, n_frames - 1)),
            "atom": draw(st.integers(0, 49)),
            "axis": draw(st.integers(0, 2)),
            "value": draw(st.sampled_from(("shift", "shift", "nan", "inf", "-inf"))),
        }
    options = {"mutation": mutation}
    if len(segments) > 1:
        options["on_overlap"] = draw(st.sampled_from(OVERLAP_CHOICES))
    return options


@st.composite
def bench_options(draw, n_frames):
    return {
        "select": draw(st.sampled_from(("name CA",) * 4 + ("all", "all", "index 0:4", "index 0", "name CA or name C", "name XX"))),
        "ref_frame": draw(st.sampled_from((0, 0, 0, -1, -1, n_frames // 2, n_frames // 3, n_frames, -n_frames - 1))),
        "engine": draw(st.sampled_from(("blocks", "blocks", "frames"))),
        "block_frames": draw(st.sampled_from((1, 3, 1024, max(1, n_frames - 1)))),
        # split-swapped, split-copied: two parts' files swapped or one copied over another
        # (sizes in the manifest made to match): bench must refuse before reading
        "input": draw(st.sampled_from(("source", "source", "converted", "split", "split", "split-swapped",
                                       "split-copied"))),
    }


@st.composite
def cases(draw, commands=COMMANDS):
    """One differential case: input segments, a command and its options."""
    command = draw(st.sampled_from(commands))
    if command == "bench":
        segments, names, info = draw(segment_sets(max_segments=1, formats=DRAWN_FORMATS))
    elif command == "append":
        segments, names, info = draw(segment_sets(formats=APPEND_FORMATS, min_segments=2))
        for segment in segments[1:]:  # one trajectory: the file keeps its boundary
            segment.boundary = segments[0].boundary
    else:
        segments, names, info = draw(segment_sets(formats=DRAWN_FORMATS))
    if command == "convert":
        options = draw(convert_options(segments, names))
    elif command == "split":
        options = draw(split_options(segments))
    elif command == "validate":
        options = draw(validate_options(segments))
    elif command == "append":
        options = draw(append_options(segments))
    else:
        options = draw(bench_options(segments[0].n_frames))
    cli = draw(st.integers(0, 24)) == 0
    return Case(command=command, segments=segments, names=names, options=options, cli=cli, info=info)

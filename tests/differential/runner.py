"""Run one case at every rank count and judge the outcomes against the oracle.

For each case the controller (the serial process running hypothesis):

1. writes the inputs once (:meth:`.cases.Case.materialize`);
2. computes what the command must do (:func:`plan`): refuse (and why), or write exactly the
   oracle's frames; some inputs may also be refused by design (``either``: a lossy layout
   asked together with velocities, fields present in some frames only, ...), and then a
   success is checked as strictly as any other;
3. sends the API call to the pool of each rank count (1 = a serial worker process, 2 and 3 =
   one ``mpirun`` each) and checks the outcome and every file written
   (:mod:`.checks`), plus, for a sample, the same command through the command line;
4. keeps the case's directory when something failed and prints one reproduction line per
   failure.

A failure is a :class:`~.checks.Failure`; :class:`Runner` counts cases and failures per rank
count (the numbers ``make fuzz`` prints).
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

from . import oracle
from .cases import base_file, base_request, command_line, input_format, outputs, reproduction, request, stage
from .checks import (Failure, check_frames, check_mdanalysis_readback, check_reader_readback, check_stored_topology,
                     check_validate, expected_errors, leftover_temporaries)
from .h5md_output import read_output
from .known import classify
from .pool import ROOT, Pool
from .writers import SourceUnavailable, write_reference_copy

#: A Python exception name at the start of an abort message: a crash, not a refusal.
PYTHON_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b: ")


class Unusable(Exception):
    """The case cannot be judged (an input that cannot be made); hypothesis rejects it."""


@dataclass
class Plan:
    """What the command must do."""

    must: str  # "succeed", "refuse" or "either"
    reasons: list = field(default_factory=list)
    refusal_kind: str = None
    expected: object = None  # oracle.Frames of the output
    refuse_at_ranks: dict = field(default_factory=dict)  # ranks -> reason (e.g. lzf in parallel)
    names: str = None  # a refusal for a damaged XTC frame must match this (file and frame)

    def at(self, ranks):
        if ranks in self.refuse_at_ranks or (ranks > 1 and "parallel" in self.refuse_at_ranks):
            reason = self.refuse_at_ranks.get(ranks) or self.refuse_at_ranks["parallel"]
            return Plan("refuse", self.reasons + [reason], "bad-option", self.expected)
        return self


# -- plans ----------------------------------------------------------------------------

def layout_problem(options):
    """Why a layout option set is a usage error, or None (the documented rules)."""
    compression = options.get("compression", "auto")  # the command's default
    # auto: zstd with --precision, else no compression (issue 13's defaults)
    compressed = compression not in ("none", "auto") or (compression == "auto" and options.get("precision") is not None)
    if options.get("contiguous") and compressed:
        return "--contiguous with --compression"
    if options.get("contiguous") and options.get("precision") is not None:
        return "--contiguous with --precision"
    if options.get("shuffle") and not compressed:
        return "--shuffle without --compression"
    if options.get("split_xyz") and not compressed:
        return "--split-xyz without --compression"
    if options.get("stripe_size") is not None and options["stripe_size"] % 65536:
        return "--stripe-size not a multiple of 64K"
    if options.get("stripe_count") is not None and (options["stripe_count"] == 0 or options["stripe_count"] < -1):
        return "--stripe-count 0"
    return None


def read_sources(case):
    """The oracle's frames of the joined trajectory; :class:`oracle.Refusal` when it must be refused."""
    for spec in case.segments:
        problem = oracle.damage(spec)
        if problem:
            raise oracle.Refusal(problem, ) from None
    for spec, path in zip(case.segments, case.inputs):
        if spec.format == "xtc" and oracle.xtc_index_may_pass_table(path, spec):
            raise Unusable("an XTC whose writer may have used a size index past the format's table: "
                           "its values are undefined (h5mdtool refuses such runs; test_xtc_decoder.py)")
    pieces = [oracle.read_segment(spec, path, case.topology) for spec, path in zip(case.segments, case.inputs)]
    return oracle.join(pieces, case.options.get("on_overlap", "error"))


def _refusal_kind(reason):
    for word, kind in (("truncated", "truncated"), ("atom count", "natoms-change"), ("starts at step", "overlap"),
                       ("steps do not", "steps-backwards"), ("selection", "selection"), ("step", "frames"),
                       ("--", "bad-option")):
        if word in reason:
            return kind
    return "bad-input"


MIXED_TIME = "segments some of which record time and some not"


def _mixed_time(case):
    """Segments some of which record time (every XTC, TRR, DCD) and some not (H5MD without time)."""
    return len({s.format == "h5md" and s.time_store == "missing" for s in case.segments}) > 1


def _source_reasons(case, expected):
    """What in the source lets any command refuse it: frames without positions, no time, mixed time."""
    reasons = []
    if not expected.positions.mask.all():
        reasons.append("frames without positions")
    if expected.times is None:
        reasons.append("the source has no time")
    if _mixed_time(case):
        reasons.append(MIXED_TIME)
    return reasons


def _beyond_int32_grid(positions, precision):
    """Positions that, rounded to *precision*'s decimal grid, may not fit int32 in the stored
    unit (pm, or fm for steps below 0.001 nm; docs/convert.md): refused by design, "a value
    of ... does not fit int32" (make fuzz case 249, seed 1375767528: 211138 nm at 0.0001).
    Within a step of the limit either outcome is allowed (float32 rounding of the value)."""
    if not isinstance(precision, (int, float)) or not positions.mask.any():
        return False
    step = 10.0 ** -max(0, math.ceil(-math.log10(precision) - 1e-9))
    unit = 1e-3 if step >= 1e-3 * (1 - 1e-9) else 1e-6
    largest = np.abs(positions.values[positions.mask]).max() / step
    return largest >= (2**31 - 1) // round(step / unit) - 1


def _either_reasons(case, expected, options):
    """Why the command may refuse valid input by design (then a success is still checked)."""
    reasons = []
    wanted = [name for name in ("velocities", "forces")
              if options.get(name, True) and getattr(expected, name) is not None and getattr(expected, name).mask.any()]
    if options.get("precision") is not None and wanted:
        reasons.append(f"--precision with {' and '.join(wanted)} in the source")
    if _beyond_int32_grid(expected.positions, options.get("precision")):
        reasons.append("--precision with positions beyond int32 multiples of its unit (refused by design)")
    for name in wanted:
        if not getattr(expected, name).mask.all():
            reasons.append(f"{name} in some frames only")
    reasons += _source_reasons(case, expected)
    if any(s.format == "h5md" and s.velocity_rate > 1 for s in case.segments):
        reasons.append("an H5MD velocity sampled at its own steps")
    return reasons


def plan(case):
    """What *case*'s command must do (see :class:`Plan`)."""
    options = case.options
    try:
        if case.command in ("convert", "split"):
            layout_options = options if case.command == "convert" or options.get("format") == "h5md" else {}
            problem = layout_problem(layout_options)
            if problem:
                raise oracle.Refusal(problem)
        if case.command == "split" and options["format"] == "same":
            formats = {s.format for s in case.segments}
            if formats - {"xtc", "trr", "dcd"}:
                # byte copies of XTC, TRR and CHARMM DCD frames only (LAMMPS DCD is named by --format)
                raise oracle.Refusal(f"--format same with {', '.join(sorted(formats))} input")
            if len(formats) > 1:
                raise oracle.Refusal("--format same with inputs of several formats")
        joined = read_sources(case)
        if case.command in ("convert", "split"):
            frames = _frames(options, joined)
            atoms = oracle.select_atoms(case.topology, options.get("select")) if options.get("topology") else None
            expected = joined.take(frames, atoms)
        else:
            expected = joined
        if case.command == "split" and options["nparts"] > expected.n_frames:
            raise oracle.Refusal(f"--nparts {options['nparts']} above {expected.n_frames} frames")
        if case.command == "bench":
            return _corrupt_frames_plan(case, _bench_plan(case, expected))
        if case.command == "append":
            return _corrupt_frames_plan(case, _append_plan(case, expected))
    except oracle.Refusal as refusal:
        return Plan("refuse", [str(refusal)], _refusal_kind(str(refusal)))
    result = Plan("succeed", expected=expected)
    if case.command in ("convert", "split"):
        reasons = _either_reasons(case, expected, options if case.command == "convert" else {})
        if case.command == "split" and options["format"] == "h5md":
            reasons = _either_reasons(case, expected, options)
        if case.command == "split" and options["format"] == "same":
            dcd = [s for s in case.segments if s.format == "dcd"]
            if len({s.dcd_nsavc for s in dcd}) > 1:
                reasons.append("DCD segments with different NSAVC")
            elif any(b.dcd_istart != a.dcd_istart + a.n_frames * a.dcd_nsavc for a, b in zip(dcd, dcd[1:])):
                # one DCD header per part: a part spanning a gap or an overlap in steps is refused
                reasons.append("DCD segments whose steps do not continue from one header to the next")
            if len({"dcd_cells" in s.extra or bool(s.extra.get("zero_cells")) for s in dcd}) > 1:
                # the unit-cell flag (and the CHARMM version written with it) is a header word:
                # a part spanning a segment with cells, even all-zero ones, and one without is
                # refused (make fuzz cases 39, seed 2816046300, and 1279, seed 3846512740; a
                # DCD spec keeps its cells in extra, never in box)
                reasons.append("DCD segments with and without unit cells")
            if _uneven_dcd_steps(case, expected):
                reasons.append("DCD frames picked by time whose steps are not evenly spaced")
        if reasons:
            result.must, result.reasons = "either", reasons
        if options.get("compression") == "lzf" and case.command == "convert":  # split: one rank per part
            result.refuse_at_ranks["parallel"] = "lzf cannot be written in parallel (refused by design)"
    elif _mixed_time(case):
        result.must, result.reasons = "either", [MIXED_TIME]
    return _corrupt_frames_plan(case, result)


#: Options by which convert and split may leave frames unread.
FRAME_CHOICES = ("start", "stop", "step", "begin", "end", "dt")


def _corrupt_frames_plan(case, result):
    """An XTC frame with damaged coordinates: refused, naming file and frame, by a command
    that decodes every frame (bench, validate --against, convert and split --format h5md
    keeping every frame); otherwise refused so, or, when that frame is not read, the intact
    file's output (the oracle read the intact copy)."""
    segments = list(zip(case.segments, case.inputs))
    if case.command == "append":  # the frames appended (a damaged first segment leaves no file to grow: unusable)
        segments = segments[case.options["split_at"]:]
    damaged = [(spec, path) for spec, path in segments if spec.corrupt_frame is not None]
    if not damaged:
        return result
    result.names = "|".join(rf"{re.escape(path)}: XTC frame {spec.corrupt_frame} at byte \d+ is corrupt"
                            for spec, path in damaged)
    reason = "damaged coordinates in " + ", ".join(f"XTC frame {spec.corrupt_frame} of {os.path.basename(path)}"
                                                   for spec, path in damaged)
    options = case.options
    reads_every_frame = case.command in ("bench", "validate") or (
        not any(options.get(name) is not None for name in FRAME_CHOICES)
        and options.get("on_overlap", "error") == "error")
    if case.command == "split" and options.get("format") == "same":
        reads_every_frame = False  # byte copies: prepare() leaves such a case out
    if result.must == "succeed" and reads_every_frame:
        result.must, result.reasons, result.refusal_kind = "refuse", [reason], "corrupt-xtc"
    elif result.must == "succeed":
        result.must, result.reasons = "either", [reason + " (read only if kept)"]
    else:
        result.reasons = result.reasons + [reason]
    return result


def _names_failure(the_plan, message):
    """A refusal for a damaged XTC frame that does not name the file and frame."""
    if not the_plan.names or re.search(the_plan.names, message or ""):
        return []
    if the_plan.must == "refuse" or "is corrupt" in (message or ""):
        return [Failure("corrupt-xtc-not-named", f"expected /{the_plan.names}/; got: {(message or '')[:300]}")]
    return []


def _frames(options, joined):
    """The frames a convert or split keeps: by number or by time (-b/-e/--dt), not both."""
    by_number = any(options.get(k) is not None for k in ("start", "stop", "step"))
    by_time = any(options.get(k) is not None for k in ("begin", "end", "dt"))
    if by_number and by_time:
        raise oracle.Refusal("--start/--stop/--step with -b/-e/--dt")
    if by_time:
        if not joined.time_recorded:
            raise oracle.Refusal("-b/-e/--dt on a source that records no time (MDAnalysis makes up 1 ps per frame)")
        return oracle.select_times(joined.times, options.get("begin"), options.get("end"), options.get("dt"))
    return oracle.select_frames(joined.n_frames, options.get("start"), options.get("stop"), options.get("step"))


def _uneven_dcd_steps(case, expected):
    """A split --format same of DCD frames whose steps are not evenly spaced: one header per part
    cannot describe them (refused by design when a part holds such frames)."""
    return (case.command == "split" and case.options.get("format") == "same"
            and any(s.format == "dcd" for s in case.segments) and expected.n_frames > 2
            and len(set(np.diff(expected.steps).tolist())) > 1)


def _append_plan(case, expected):
    """An append of the last segments to the first ones' convert equals one convert of all of
    them, where the append may not refuse by design: the parts must hold the same fields
    (time, velocities, forces; a box only where the file has one: new frames without one get
    zero edges, as one convert gives them), and some new frame must remain."""
    options = case.options
    split_at = options["split_at"]
    if options["base"].get("contiguous"):
        return Plan("refuse", ["--append to a contiguous file (it cannot grow)"], "bad-input", expected)
    if split_at == 1 and case.segments[0].format == "h5md" and "observables" in case.segments[0].extras:
        # carried over by the first convert (one H5MD input), one value per frame: MDAnalysis
        # would read past them once the file grows
        return Plan("refuse", ["--append to a file whose /observables hold a value per frame"], "bad-input",
                    expected)
    result = Plan("succeed", expected=expected)
    reasons = _either_reasons(case, expected, dict(options["base"], **{k: options[k] for k in ("velocities", "forces")
                                                                       if k in options}))
    pieces = [oracle.read_segment(spec, path, case.topology) for spec, path in zip(case.segments, case.inputs)]
    head, tail = pieces[:split_at], pieces[split_at:]

    def held(parts, name):
        if name == "box":
            return any(p.has_box for p in parts)
        fields = [getattr(p, name) for p in parts]
        return any(f is not None and f.mask.any() for f in fields)

    for name in ("velocities", "forces"):
        if options.get(name, True) and held(head, name) != held(tail, name):
            reasons.append(f"{name} in the file or in the new frames only (an append cannot change the elements)")
    if held(tail, "box") and not held(head, "box"):
        reasons.append("a box in the new frames only (an append cannot add one)")

    def periodic(parts):  # the axes a convert of *parts* marks periodic (any part's box periodic there)
        return {axis for p in parts if p.edges is not None for axis in range(3) if p.boundary[axis]}

    if held(tail, "box") and held(head, "box") and periodic(tail) - periodic(head):
        reasons.append("the new frames' box periodic on an axis where the file's is not (an append cannot make "
                       "it periodic)")
    if len({s.format for s in case.segments}) > 1:
        reasons.append("segments of several formats (the file and the new frames may store values differently)")
    if options["on_overlap"] in ("first", "drop") and max(int(s.steps.max()) for s in case.segments[split_at:]) \
            <= max(int(s.steps.max()) for s in case.segments[:split_at]):
        reasons.append("--on-overlap first and every new frame's step is in the file (nothing to append)")
    if reasons:
        result.must, result.reasons = "either", reasons
    if options["base"].get("compression") == "lzf":
        result.refuse_at_ranks["parallel"] = "an lzf file cannot be appended to in parallel (refused by design)"
    return result


def _bench_plan(case, expected):
    options = case.options
    n = int(expected.positions.mask.sum())  # bench's frames are those holding positions
    atoms = oracle.select_atoms(case.topology, options["select"])
    if not -n <= options["ref_frame"] < n:
        raise oracle.Refusal(f"--ref-frame {options['ref_frame']} outside {n} frames")
    result = Plan("succeed", expected=expected)
    result.atoms = np.arange(expected.n_atoms) if atoms is None else atoms
    if len(result.atoms) < 2:
        # bench rmsd's policy: a superposition needs two atoms (MDAnalysis's QCP gives NaN)
        raise oracle.Refusal(f"--select {options['select']!r} picks one atom: nothing to superpose")
    reasons = []
    reasons += _source_reasons(case, expected)
    if (options["engine"] == "frames" and options.get("input", "source") == "source"
            and any(s.format == "h5md" and s.group_name != "trajectory" for s in case.segments)):
        # the frames engine reads through MDAnalysis, whose H5MDReader opens particles/trajectory only
        reasons.append("engine frames on an H5MD file whose particle group is not named trajectory")
    if (options["engine"] == "frames" and options.get("input", "source") == "source"
            and not all(oracle.mda_readable(s) for s in case.segments)):
        # MDAnalysis's H5MDReader indexes step[frame] and box/edges/value[frame]: a fixed
        # step (make fuzz case 602) or a fixed box (case 496, seed 3731942123) fails
        reasons.append("engine frames on an H5MD file MDAnalysis cannot read frame by frame")
    if options.get("input") in DAMAGED_PARTS:
        return Plan("refuse", [DAMAGED_PARTS[options["input"]]], "bad-input", expected)
    if reasons:
        result.must, result.reasons = "either", reasons
    return result


#: bench inputs made of split parts damaged on purpose: the refusal each must bring.
DAMAGED_PARTS = {"split-swapped": "the first and last part files swapped (their recorded sizes made to match)",
                 "split-copied": "the first part file copied over the last (its recorded size made to match)"}


def damage_parts(manifest_path, kind):
    """Swap the first and last part files of a split (``split-swapped``) or copy the first over
    the last (``split-copied``), then record the sizes now on disk, so that only a check of
    what the parts hold can tell.

    Raises
    ------
    Unusable
        One part only, or two parts that record the same steps and times (nothing to tell).
    """
    with open(manifest_path) as handle:
        document = json.load(handle)
    parts = document["parts"]
    clock = ("first_step", "last_step", "first_time", "last_time")
    if len(parts) < 2 or [parts[0].get(k) for k in clock] == [parts[-1].get(k) for k in clock]:
        raise Unusable(f"{kind}: {len(parts)} part(s) that do not tell apart")
    directory = os.path.dirname(manifest_path)
    first, last = (os.path.join(directory, part["path"]) for part in (parts[0], parts[-1]))
    if kind == "split-swapped":
        os.rename(first, first + ".swap")
        os.rename(last, first)
        os.rename(first + ".swap", last)
    else:
        shutil.copyfile(first, last)
    for part in (parts[0], parts[-1]):
        part["bytes"] = os.path.getsize(os.path.join(directory, part["path"]))
    with open(manifest_path, "w") as handle:
        json.dump(document, handle)


# -- preparation of extra inputs ---------------------------------------------------------

def prepare(case, the_plan, pools, timeout):
    """Make what the command reads besides the sources (validate copy, bench input, the file
    an append grows)."""
    serial_pool = pools[1]
    if case.command == "append":
        pool = pools.get(case.options["base_ranks"], serial_pool)
        outcome = pool.call(base_request(case), timeout)
        if outcome["status"] != "done" or outcome["ranks"][0]["status"] != "ok" or not os.path.isfile(base_file(case)):
            raise Unusable(f"the first segments cannot be converted: {str(outcome)[:300]}")
        case.info["base_ranks_used"] = pool.ranks
        return
    if case.command == "split" and case.options.get("format") == "same" and the_plan.names:
        raise Unusable("split --format same copies frames without decoding them: a damaged XTC frame is copied")
    if case.command == "validate":
        if (the_plan.must == "refuse" and not the_plan.names) or the_plan.expected is None:
            raise Unusable(f"validate needs a readable source: {the_plan.reasons}")
        expected = the_plan.expected
        if not expected.positions.mask.all() or expected.times is None:
            raise Unusable("validate copies need positions and time in every frame")
        path = os.path.join(case.directory, "copy.h5md")
        case.prepared["copy"] = path
        case.prepared["change"] = write_reference_copy(expected, path, case.options.get("mutation"))
    elif case.command == "bench":
        kind = case.options.get("input", "source")
        damaged = kind in DAMAGED_PARTS and the_plan.reasons == [DAMAGED_PARTS[kind]]
        if kind == "source" or (the_plan.must == "refuse" and not damaged):
            case.prepared["bench_input"] = case.inputs[0]
            return
        if kind == "converted":
            target = os.path.join(case.directory, "bench.h5md")
            call = {"function": "convert", "args": [case.inputs, target],
                    "kwargs": {"progress": False, "format": input_format(case)}}
        else:
            target = os.path.join(case.directory, "bench-parts")
            call = {"function": "split", "args": [case.inputs, target, min(3, the_plan.expected.n_frames)],
                    "kwargs": {"progress": False, "input_format": input_format(case)}}
            if damaged and case.segments[0].format not in ("xtc", "trr", "dcd"):
                call["kwargs"]["format"] = "h5md"  # parts of other sources are H5MD files
            target = os.path.join(target, "manifest.json")
        outcome = serial_pool.call(call, timeout)
        if outcome["status"] != "done" or outcome["ranks"][0]["status"] != "ok":
            raise Unusable(f"cannot make the bench input ({kind}): {outcome}")
        if kind in DAMAGED_PARTS:
            damage_parts(target, kind)
        case.prepared["bench_input"] = target


# -- judging outcomes -------------------------------------------------------------------

def merge(outcome):
    """One outcome from the per-rank outcomes: rank 0's, after checking that ranks agree."""
    if outcome["status"] != "done":
        return outcome, []
    ranks = outcome["ranks"]
    # ranks that did not fail themselves raise RemoteRankError: only the status must agree
    statuses = {o["status"] for o in ranks}
    failures = []
    if len(statuses) > 1:
        failures.append(Failure("ranks-disagree", "ranks ended differently: "
                                + "; ".join(f"rank {r}: {o['status']} {o.get('type') or ''} {o.get('message', '')[:100]}"
                                            for r, o in enumerate(ranks))))
    return ranks[0], failures


def judge(case, the_plan, outcome, ranks):
    """Failures of one run (*outcome* from a pool) of *case* at *ranks* ranks."""
    the_plan = the_plan.at(ranks)
    directory = case.run_directory(ranks)
    result, failures = merge(outcome)
    status = result["status"]
    if status == "hang":
        return failures + [Failure("hang", f"no outcome after {result['seconds']:.0f} s; pool log: {result['log'][-300:]!r}")]
    if status == "dead":
        message = _abort_message(result["log"])
        if message and not PYTHON_EXCEPTION.match(message) and the_plan.must != "succeed":
            failures += _refusal_leftovers(case, directory) + _names_failure(the_plan, message)
            return failures
        kind = "abort" if message else "pool-died"
        if message and PYTHON_EXCEPTION.match(message):
            kind = "crash:" + message.split(":", 1)[0]
        return failures + [Failure(kind, f"the job ended (exit {result.get('exit_code')}): {(message or result['log'][-400:])[:400]}")]
    if status == "crash":
        last = (result.get("traceback") or "").strip().splitlines()[-3:]
        return failures + [Failure(f"crash:{result['type']}", f"{result['type']}: {result['message'][:300]} | {' / '.join(last)[:300]}")]
    if status == "error":
        if the_plan.must == "succeed":
            failures.append(Failure("refused-valid-input", f"{result['type']}: {result['message'][:300]}"))
        # the rank that read the damaged frame names it; the others raise RemoteRankError
        messages = " | ".join(o.get("message") or "" for o in outcome["ranks"])
        return failures + _refusal_leftovers(case, directory) + _names_failure(the_plan, messages)
    # ok
    if case.command == "validate" and the_plan.names:
        return (failures + _judge_validate_damaged(case, the_plan, result.get("result"), ranks)
                + leftover_temporaries(directory, case.directory))
    if the_plan.must == "refuse":
        failures.append(Failure(f"accepted-{the_plan.refusal_kind}", f"succeeded although it must refuse: {'; '.join(the_plan.reasons)}"))
        return failures + leftover_temporaries(directory, case.directory)
    checker = {"convert": _judge_convert, "split": _judge_split, "validate": _judge_validate, "bench": _judge_bench,
               "append": _judge_append}[case.command]
    return failures + checker(case, the_plan, result.get("result"), ranks) + leftover_temporaries(directory, case.directory)


def _abort_message(log):
    for line in log.splitlines():
        match = re.match(r"error: rank \d+: (.*)", line.strip())
        if match:
            return match.group(1)
    return None


def _refusal_leftovers(case, directory):
    failures = leftover_temporaries(directory, case.directory)
    if case.command == "append":
        target = outputs(case, int(os.path.basename(directory)[1:]))
        if _digest(target) != _digest(base_file(case)):
            failures.append(Failure("file-changed-after-refusal", f"{os.path.basename(target)} differs from the file "
                                                                   "it was before the refused append"))
        failures += [Failure("lock-left", f"left behind: {name}") for name in os.listdir(directory)
                     if name.endswith(".h5mdtool-lock")]
    if case.command in ("convert", "split"):
        target = outputs(case, int(os.path.basename(directory)[1:]))
        if os.path.exists(target):
            failures.append(Failure("output-after-refusal", f"{os.path.basename(target)} exists after the refusal"))
    return failures


def _digest(path):
    import hashlib

    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _judge_append(case, the_plan, summary, ranks):
    """The grown file holds every frame of the joined segments, as one convert of them would."""
    path = outputs(case, ranks)
    options = case.options
    precision = options["base"].get("precision")
    try:
        document = read_output(path)
    except Exception as error:  # noqa: BLE001
        return [Failure("output-unreadable", f"cannot read the grown file: {type(error).__name__}: {error}")]
    failures = check_frames(document, the_plan.expected, precision=precision,
                            want_velocities=options.get("velocities", True), want_forces=options.get("forces", True),
                            summary=summary, velocity_precision=options["base"].get("velocity_precision"))
    allowed = expected_errors(the_plan.expected, options.get("velocities", True), options.get("forces", True),
                              precision)
    if not failures and not allowed and options["base"].get("velocity_precision") is None:
        failures += check_mdanalysis_readback(path, case.topology, the_plan.expected, precision)
    failures += check_validate(path, allowed=allowed + carried_over_rules(case))
    directory = case.run_directory(ranks)
    failures += [Failure("lock-left", f"left behind: {name}") for name in os.listdir(directory)
                 if name.endswith(".h5mdtool-lock")]
    return failures


def _judge_convert(case, the_plan, summary, ranks):
    path = outputs(case, ranks)
    if not os.path.isfile(path):
        return [Failure("output-missing", f"{path} not written although convert succeeded")]
    options = case.options
    precision = options.get("precision")
    try:
        document = read_output(path)
    except Exception as error:  # noqa: BLE001
        return [Failure("output-unreadable", f"cannot read the output: {type(error).__name__}: {error}")]
    failures = check_frames(document, the_plan.expected, precision=precision,
                            want_velocities=options.get("velocities", True), want_forces=options.get("forces", True),
                            summary=summary)
    failures += _check_carried_over(case, document)
    failures += check_copied_attributes(case, path)
    if options.get("topology"):
        failures += check_stored_topology(path, case.topology, oracle.select_atoms(case.topology, options.get("select")))
    position_frames = int(the_plan.expected.positions.mask.sum())
    if summary is not None and summary.get("n_frames") != position_frames:
        failures.append(Failure("summary-frames", f"summary says {summary.get('n_frames')} frames, expected {position_frames} "
                                                  "(the frames holding positions)"))
    allowed = expected_errors(the_plan.expected, options.get("velocities", True), options.get("forces", True),
                              precision)
    if not failures and not allowed:  # wrong values would only be seen again through MDAnalysis
        failures += check_mdanalysis_readback(path, _topology_for(case), the_plan.expected, precision)
        failures += check_reader_readback(path, the_plan.expected, precision, options.get("velocities", True),
                                          options.get("forces", True))
    failures += check_validate(path, allowed=allowed + carried_over_rules(case))
    return failures


def carried_over_rules(case):
    """validate's rules an output may break through what it carries over from an H5MD source
    as it is: the observables of a source whose step is fixed and time explicit (H5MD024 in the
    source too; make fuzz cases 664, 665)."""
    mixed = any(s.format == "h5md" and "observables" in s.extras and s.step_store == "fixed"
                and s.time_store == "explicit" for s in case.segments)
    return ("H5MD024",) if mixed else ()


def _topology_for(case):
    """The PDB of the written atoms (the selection's, when there is one)."""
    select = case.options.get("select")
    if not (case.options.get("topology") and select):
        return case.topology
    path = os.path.join(case.directory, f"top-selected-{abs(hash(select)) % 10**8}.pdb")
    if not os.path.exists(path):
        import MDAnalysis

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MDAnalysis.Universe(case.topology).select_atoms(select).write(path)
    return path


def _check_carried_over(case, document):
    """H5MD input: connectivity follows the atom selection; parameters and observables are kept."""
    source = case.segments[0]
    if len(case.segments) != 1 or source.format != "h5md":
        return []
    failures = []
    options = case.options
    selected = options.get("topology") and options.get("select")
    if "connectivity" in source.extras and document["connectivity"]:
        if selected:
            atoms = oracle.select_atoms(case.topology, options["select"])
            for name, bonds in document["connectivity"].items():
                if bonds.size and (bonds.max() >= len(atoms)
                                   or not _same_bonds(bonds, source.bonds, atoms)):
                    failures.append(Failure("connectivity-stale", f"/connectivity/{name} still indexes the source's "
                                                                  f"{source.n_atoms} atoms after --select ({len(atoms)} kept)"))
        else:
            for name, bonds in document["connectivity"].items():
                if not np.array_equal(np.sort(bonds, axis=0), np.sort(source.bonds, axis=0)):
                    failures.append(Failure("connectivity-differ", f"/connectivity/{name} differs from the source's"))
    return failures


def check_copied_attributes(case, path):
    """H5MD input: every group and dataset carried over into the output *path* (other particle
    groups, /parameters, /observables, /connectivity) keeps the attributes it has in the source."""
    import h5py

    source = case.segments[0]
    if len(case.segments) != 1 or source.format != "h5md":
        return []
    failures = []
    with h5py.File(case.inputs[0], "r") as src, h5py.File(path, "r") as out:
        roots = [f"particles/{name}" for name in src.get("particles", {}) if name != source.group_name]
        roots += [name for name in ("parameters", "observables", "connectivity") if name in src]
        for root in roots:
            paths = [root]
            src[root].visit(lambda name: paths.append(f"{root}/{name}"))
            for name in paths:
                if name.startswith("parameters/h5mdtool") or name not in out:
                    continue  # h5mdtool's own record; objects left out are said in the provenance
                want, got = src[name].attrs, out[name].attrs
                lost = [key for key in want if key != "offset"  # a fixed step or time follows the kept frames
                        and (key not in got or not np.array_equal(np.asarray(got[key]), np.asarray(want[key])))]
                if lost:
                    failures.append(Failure("attributes-dropped", f"/{name} lost or changed attribute(s) {lost}"))
    return failures


def _same_bonds(bonds, source_bonds, atoms):
    position = {int(a): i for i, a in enumerate(atoms)}
    kept = [(position[a], position[b]) for a, b in source_bonds.tolist() if a in position and b in position]
    return sorted(map(tuple, bonds.tolist())) == sorted(kept)


def _judge_split(case, the_plan, summary, ranks):
    directory = outputs(case, ranks)
    manifest = os.path.join(directory, "manifest.json")
    if not os.path.isfile(manifest):
        return [Failure("split-no-manifest", f"{manifest} missing after success")]
    with open(manifest) as handle:
        document = json.load(handle)
    parts = document.get("parts", [])
    failures = []
    nparts = case.options["nparts"]
    sizes = [p["stop"] - p["start"] for p in parts]
    if len(parts) != nparts:
        failures.append(Failure("split-parts-count", f"{len(parts)} parts, asked {nparts}"))
    if sizes and max(sizes) - min(sizes) > 1:
        failures.append(Failure("split-unbalanced", f"part sizes {sizes}"))
    expected = the_plan.expected
    same = case.options["format"] == "same"
    for number, part in enumerate(parts):
        path = os.path.join(directory, part["path"])
        want = expected.take(np.arange(part["start"], part["stop"]))
        label = f"part {number} ({part['path']})"
        try:
            if same:
                fmt = case.segments[0].format
                spec = _part_spec(case, fmt)
                got = oracle.read_segment(spec, path, case.topology)
                failures += [Failure(f.kind, f"{label}: {f.message}") for f in compare_frames(got, want)]
            else:
                part_failures = check_frames(read_output(path), want, precision=case.options.get("precision"), label=label)
                if not part_failures:
                    part_failures = check_reader_readback(path, want, case.options.get("precision"),
                                                          case.options.get("velocities", True),
                                                          case.options.get("forces", True), label=label)
                failures += part_failures
                failures += [Failure(f.kind, f"{label}: {f.message}") for f in check_copied_attributes(case, path)]
        except Exception as error:  # noqa: BLE001
            failures.append(Failure("split-part-unreadable", f"{label}: {type(error).__name__}: {str(error)[:200]}"))
    if sum(sizes) != expected.n_frames:
        failures.append(Failure("split-frames", f"parts hold {sum(sizes)} frames, the source {expected.n_frames}"))
    failures += _validate_manifest(case, the_plan, manifest)
    return failures


def _part_spec(case, fmt):
    from .spec import SegmentSpec

    return SegmentSpec(format=fmt, n_atoms=case.segments[0].n_atoms, steps=np.zeros(1), times=None, positions=None)


def compare_frames(got, want):
    """Frames of a byte-copied part against the source's: everything identical."""
    failures = []
    if got.n_frames != want.n_frames:
        return [Failure("split-frames", f"{got.n_frames} frames, expected {want.n_frames}")]
    if np.any(got.steps != want.steps):
        failures.append(Failure("step-differ", f"steps {got.steps[:5].tolist()}... instead of {want.steps[:5].tolist()}..."))
    if got.times is not None and want.times is not None and np.any(np.abs(got.times - want.times) > 1e-9 * np.abs(want.times) + 1e-12):
        failures.append(Failure("time-differ", "times differ"))
    for name in ("positions", "velocities", "forces"):
        a, b = getattr(got, name), getattr(want, name)
        mask_a = np.zeros(got.n_frames, bool) if a is None else a.mask
        mask_b = np.zeros(want.n_frames, bool) if b is None else b.mask
        if np.any(mask_a != mask_b):
            failures.append(Failure(f"{name}-differ", f"{name} present in frames {np.flatnonzero(mask_a)[:8].tolist()}, "
                                                      f"the source in {np.flatnonzero(mask_b)[:8].tolist()}"))
        elif mask_a.any() and np.any(a.values[mask_a] != b.values[mask_b]):
            failures.append(Failure(f"{name}-differ", f"{name} differ from the source"))
    if (got.edges is None) != (want.edges is None) or (got.edges is not None and np.any(np.abs(got.edges - want.edges) > 1e-6 * np.abs(want.edges).max(initial=1.0))):
        failures.append(Failure("box-differ", "boxes differ from the source"))
    return failures


def _validate_manifest(case, the_plan, manifest):
    import h5mdtool

    failures = []
    selected = any(case.options.get(k) is not None for k in ("start", "stop", "step", "begin", "end", "dt"))
    # validate --against compares with every frame of the source: not with a selection of them
    for against in (None,) if selected else (None, case.inputs):
        label = "validate manifest" + (" --against the source" if against else "")
        try:
            report = h5mdtool.validate([manifest], against=against, on_overlap=case.options.get("on_overlap", "error"),
                                       against_format=input_format(case) if against else None, progress=False)
        except Exception as error:  # noqa: BLE001
            failures.append(Failure("validate-manifest-crash" if not against else "validate-against-parts-crash",
                                    f"{label}: {type(error).__name__}: {error}"))
            continue
        allowed = expected_errors(the_plan.expected, precision=case.options.get("precision")) + carried_over_rules(case)
        errors = [f"{f.rule}: {f.message}" for r in report.files for f in r.findings
                  if f.severity == "error" and f.rule not in allowed]
        if report.exit_code != 0 and (errors or report.exit_code != 1):
            failures.append(Failure("validate-rejects-split" if not against else "validate-against-parts",
                                    f"{label} exits {report.exit_code}: {'; '.join(errors[:2])[:300]}"))
    return failures


def _judge_validate_damaged(case, the_plan, report, ranks):
    """validate --against a source with a damaged XTC frame: exit 1, a finding naming it, or
    (a copy with a changed value) the change found first (a changed step or time stops the
    comparison before any frame is decoded)."""
    findings = [f for file in report["files"] for f in file["findings"]]
    if report["exit_code"] == 1 and any(re.search(the_plan.names, f["message"]) for f in findings):
        return []
    if case.prepared.get("change") is not None and not _judge_validate(case, the_plan, report, ranks):
        return []
    return [Failure("validate-missed-corrupt-xtc", f"exit {report['exit_code']}, no finding matching /{the_plan.names}/: "
                                                   + "; ".join(f"{f['rule']}: {f['message']}" for f in findings[:2])[:300])]


def _judge_validate(case, the_plan, report, ranks):
    change = case.prepared.get("change")
    findings = [f for file in report["files"] for f in file["findings"]]
    errors = [f for f in findings if f["severity"] == "error"]
    if change is None:
        allowed = expected_errors(the_plan.expected)
        errors = [f for f in errors if f["rule"] not in allowed]
        if report["exit_code"] != 0 and (errors or report["exit_code"] != 1):
            return [Failure("validate-false-alarm", f"an exact copy of the source fails (exit {report['exit_code']}): "
                                                    + "; ".join(f"{f['rule']}: {f['message']}" for f in errors[:2])[:400])]
        return []
    frame = change["frame"]
    reported = [f for f in findings if f["rule"] == "AGAINST002" and re.search(rf"\bframe {frame}:", f["message"])]
    if change["field"] in ("step", "time"):
        # a step or time that no longer increases is found where the series stops increasing:
        # at the changed frame or the next one (whose value is then not above it)
        reported += [f for f in findings if f["rule"] in ("H5MD023", "H5MD024", "DATA004")
                     and re.search(rf"\bat frames? (\d+[-, ]+)*({frame}|{frame + 1})\b", f["message"])]
    failures = []
    if report["exit_code"] != 1:
        failures.append(Failure(f"validate-missed-{change['field']}-{change['value']}",
                                f"{change['field']} changed at frame {frame} ({change['where']}, {change['value']}) but validate exits {report['exit_code']}"))
    elif not reported:
        failures.append(Failure(f"validate-frame-not-named-{change['field']}",
                                f"{change['field']} changed at frame {frame} ({change['value']}); errors: "
                                + "; ".join(f"{f['rule']}: {f['message']}" for f in errors[:2])[:300]))
    return failures


def _kabsch_rmsd(frame, reference):
    """RMSD after optimal superposition by the SVD (Kabsch), in float64."""
    a, b = frame - frame.mean(axis=0), reference - reference.mean(axis=0)
    u, _, vt = np.linalg.svd(a.T @ b)
    d = np.sign(np.linalg.det(u @ vt)) or 1.0
    rotation = u @ np.diag([1.0, 1.0, d]) @ vt
    return float(np.sqrt(max(0.0, ((a @ rotation - b) ** 2).sum()) / len(frame)))


def _rmsd(mda_rmsd, frame, reference, tolerance=1e-4):
    """MDAnalysis's RMSD after superposition, cross-checked by the Kabsch superposition.

    MDAnalysis's QCP is ill-conditioned for coincident or collinear atoms (one or two atoms,
    identical frames): there it returns NaN or errs by up to 1e-2 A (measured on two-atom
    selections). Where the two disagree beyond *tolerance*, the SVD's value is used.
    """
    value = mda_rmsd(frame, reference, center=True, superposition=True)
    check = _kabsch_rmsd(frame, reference)
    if np.isnan(value) or abs(value - check) > tolerance:
        return check
    return value


def _judge_bench(case, the_plan, result, ranks):
    from MDAnalysis.analysis.rms import rmsd as mda_rmsd

    if ranks > 1 and result is None:
        return [Failure("bench-no-result", "rank 0 returned no result")]
    expected = the_plan.expected
    atoms = the_plan.atoms
    # bench's frames are those holding positions (a TRR's velocity-only frames are not frames of
    # an RMSD: make fuzz case 970)
    held = np.flatnonzero(expected.positions.mask)
    n_frames = len(held)
    times = None if expected.times is None else expected.times[held]
    positions = expected.positions.values[held][:, atoms] * 10.0
    reference = positions[case.options["ref_frame"]]
    # float32 coordinates, and the precision of QCP's eigenvalue (1e-11 relative, so an RMSD
    # near zero is resolved to about sqrt(1e-11) times the coordinates' size)
    scale = float(np.abs(positions).max(initial=1.0))
    tolerance = 1e-4 + 2e-6 * scale + 1e-5 * scale
    want = np.array([_rmsd(mda_rmsd, frame, reference, tolerance) for frame in positions])
    got = np.asarray(result["rmsd"], np.float64)
    failures = []
    if got.shape != (n_frames, 3):
        return [Failure("bench-shape", f"rmsd array {got.shape}, expected ({n_frames}, 3)")]
    if np.any(got[:, 0] != np.arange(n_frames)):
        failures.append(Failure("bench-frames", f"frame column {got[:5, 0].tolist()}..."))
    if times is not None and np.any(np.abs(got[:, 1] - times) > 1e-9 * np.abs(times) + 1e-9):
        bad = int(np.flatnonzero(np.abs(got[:, 1] - times) > 1e-9 * np.abs(times) + 1e-9)[0])
        failures.append(Failure("bench-time", f"time of frame {bad}: {got[bad, 1]} instead of {times[bad]}"))
    deviation = np.abs(got[:, 2] - want)
    if np.any(~(deviation <= tolerance)):
        bad = int(np.argmax(np.where(np.isnan(deviation), np.inf, deviation)))
        failures.append(Failure("bench-rmsd", f"RMSD of frame {bad}: {got[bad, 2]!r} A, MDAnalysis {want[bad]!r} A "
                                              f"(tolerance {tolerance:.2g} A)"))
    return failures


# -- the command line sample --------------------------------------------------------------

def run_cli(case, the_plan, ranks, timeout):
    """Run the case's command through ``python -m h5mdtool`` and check exit status and stderr."""
    the_plan = the_plan.at(ranks)
    call = request(case, ranks)
    directory = os.path.join(case.run_directory(ranks), "cli")
    os.makedirs(directory, exist_ok=True)
    override = None
    if case.command in ("convert", "append"):
        override = os.path.join(directory, "out.h5md")
    if case.command == "append":
        stage(case, override)
    elif case.command == "split":
        override = os.path.join(directory, "parts")
    argv = [sys.executable, "-m", "h5mdtool", *command_line(call, override)]
    if ranks > 1:
        argv = [os.path.join(ROOT, "tools", "mpirun.sh"), "-n", str(ranks), *argv]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("H5MDTOOL_DEBUG", None)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return [Failure("cli-hang", f"the command line did not end within {timeout} s")]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    failures = []
    if "Traceback (most recent call last)" in done.stderr:
        failures.append(Failure("cli-traceback", f"exit {done.returncode}, traceback on stderr: {lines[-1][:200] if lines else ''}"))
    refused = done.returncode != 0
    if case.command == "validate" and the_plan.names:
        found = re.search(the_plan.names, done.stdout) or case.prepared.get("change") is not None
        if done.returncode != 1 or not found:
            failures.append(Failure("cli-validate-missed-corrupt-xtc", f"exit {done.returncode}, stdout: {done.stdout[-300:]}"))
        return failures + leftover_temporaries(directory)
    if case.command == "validate":
        # an exact copy of a source that breaks validate's rules itself (expected_errors) exits
        # 1 when validate finds them, 0 at the rules' edges (make fuzz cases 474, 475)
        exact = case.prepared.get("change") is None
        expected_codes = ((0, 1) if expected_errors(the_plan.expected) else (0,)) if exact else (1,)
        if errors and the_plan.must != "succeed":
            # the --against sources may be refused, in one line (make fuzz case 1593, seed
            # 100494247: segments of which some record time and some not)
            if done.returncode not in (1, 2):
                failures.append(Failure("cli-exit-status", f"refusal with exit status {done.returncode} (1 or 2 "
                                                           f"expected): {' | '.join(lines[-2:])[:200]}"))
            if len(errors) != 1 or (ranks == 1 and len(lines) != 1):
                failures.append(Failure("cli-error-lines", f"stderr is not one 'error:' line: {lines[:4]}"))
        elif done.returncode not in expected_codes:
            failures.append(Failure("cli-exit", f"validate exits {done.returncode}, expected "
                                                f"{' or '.join(map(str, expected_codes))}: {done.stderr[-200:]}"))
        return failures + leftover_temporaries(directory)
    if refused:
        if the_plan.must == "succeed":
            failures.append(Failure("cli-refused-valid-input", f"exit {done.returncode}: {' | '.join(lines[-2:])[:300]}"))
        if done.returncode not in (1, 2):
            failures.append(Failure("cli-exit-status", f"refusal with exit status {done.returncode} (1 or 2 expected): {' | '.join(lines[-2:])[:200]}"))
        if len(errors) != 1 or (ranks == 1 and len(lines) != 1):
            failures.append(Failure("cli-error-lines", f"stderr is not one 'error:' line: {lines[:4]}"))
        elif PYTHON_EXCEPTION.match(errors[0][len("error: "):]) or "(run with --debug" in errors[0]:
            failures.append(Failure("cli-crash", f"{errors[0][:300]}"))
        else:
            failures += _names_failure(the_plan, errors[0])
        if override and os.path.exists(override) and case.command != "append":
            failures.append(Failure("output-after-refusal", "the command line left its output after refusing"))
    elif the_plan.must == "refuse":
        failures.append(Failure(f"cli-accepted-{the_plan.refusal_kind}", f"exit 0 although it must refuse: {'; '.join(the_plan.reasons)}"))
    return failures + leftover_temporaries(directory)


# -- the runner ---------------------------------------------------------------------------

def may_corrupt_memory(case, the_plan, outcome):
    """True after a run that may have let MDAnalysis's decoders write past their buffers: a
    damaged XTC/TRR that was not refused (so it was decoded), or bench's out-of-range
    reference frame (measured to corrupt the heap before it is refused). The pool is
    restarted after such a run, so the damage does not surface in an unrelated case."""
    ranks = outcome.get("ranks") or [{}]
    accepted = outcome.get("status") == "done" and ranks[0].get("status") == "ok"
    if accepted and any(oracle.damage(spec) for spec in case.segments):
        return True
    return case.command == "bench" and the_plan.refusal_kind == "bad-option"


def first_of_each_kind(failures):
    """One failure per kind (split parts repeat the same failure), noting how many more."""
    seen = {}
    for failure in failures:
        if failure.kind in seen:
            seen[failure.kind][1] += 1
        else:
            seen[failure.kind] = [failure, 0]
    return [Failure(f.kind, f.message + (f" (and {more} more like it)" if more else "")) for f, more in seen.values()]


class Runner:
    """Pools for each rank count, case numbering, counts, kept failures."""

    def __init__(self, base, ranks=(1, 2, 3), timeout=120, keep_dir=None, known_mode="report", log=None):
        self.base = base
        self.ranks = tuple(ranks)
        self.timeout = timeout
        self.keep_dir = keep_dir or os.path.join(base, "kept")
        self.known_mode = known_mode
        self.pools = {n: Pool(n, base) for n in self.ranks}
        if 1 not in self.pools:
            self.pools[1] = Pool(1, base)
        self.counts = {n: {"cases": 0, "failures": 0, "known": 0} for n in self.ranks}
        self.failures = []  # (ranks, case number, Failure, reproduction, known category)
        self.number = 0
        self.log = log or sys.stderr
        self.cli_runs = 0
        self.plans = {}
        self.input_formats = {}
        self.seen = set()

    def close(self):
        for pool in self.pools.values():
            pool.close()

    def run(self, case):
        """Run *case* at every rank count; return the new failures. Raises :class:`Unusable`."""
        fingerprint = json.dumps(case.describe(), sort_keys=True, default=str)
        if fingerprint in self.seen:
            raise Unusable("drawn before")
        self.seen.add(fingerprint)
        self.number += 1
        try:
            case.materialize(os.path.join(self.base, "cases"), self.number)
        except SourceUnavailable as error:
            raise Unusable(str(error)) from None
        the_plan = plan(case)
        key = f"{case.command}:{the_plan.must}" + (f"({the_plan.refusal_kind})" if the_plan.must == "refuse" else "")
        self.plans[key] = self.plans.get(key, 0) + 1
        formats = "+".join(sorted({s.format for s in case.segments}))
        self.input_formats[formats] = self.input_formats.get(formats, 0) + 1
        prepare(case, the_plan, self.pools, self.timeout)
        new = []
        for ranks in self.ranks:
            call = request(case, ranks)
            pool = self.pools[ranks]
            if case.command == "append":
                stage(case, outputs(case, ranks))
            outcome = pool.call(call, self.timeout, label=(case.number, False))
            risky = may_corrupt_memory(case, the_plan, outcome)
            pool.history[-1] = (case.number, risky)
            earlier = []
            if outcome["status"] == "dead" and len(pool.history) > 1:
                # the pool ran other cases before: see whether this one fails on its own
                earlier = [entry for entry in pool.history[:-1] if entry]
                if case.command == "append":
                    stage(case, outputs(case, ranks))
                outcome = pool.call(call, self.timeout, label=(case.number, risky))
            failures = judge(case, the_plan, outcome, ranks)
            if risky:  # memory may be corrupted: the next case at this rank count gets a fresh pool
                pool.restart()
            if earlier and outcome["status"] != "dead":
                suspects = [number for number, was_risky in earlier if was_risky]
                failures.append(Failure("pool-died-after-earlier-cases",
                                        f"the pool died on this case after running cases {[n for n, _ in earlier][-8:]} "
                                        f"and it passes on a fresh pool; the earlier cases that may corrupt memory: "
                                        f"{suspects or 'none'}"))
                if suspects:
                    case.info["corrupted_by"] = suspects
            if case.cli:
                self.cli_runs += 1
                failures += run_cli(case, the_plan, ranks, self.timeout)
            failures = first_of_each_kind(failures)
            self.counts[ranks]["cases"] += 1
            line = reproduction(call, ranks)
            for failure in failures:
                category = classify(case, failure)
                new.append((ranks, case.number, failure, line, category))
            if any(item[4] is None for item in new if item[0] == ranks):
                self.counts[ranks]["failures"] += 1
            elif failures:
                self.counts[ranks]["known"] += 1
        if new:
            self._keep(case, the_plan, new)
            self.failures += new
        else:
            shutil.rmtree(case.directory, ignore_errors=True)
        return new

    def _keep(self, case, the_plan, failures):
        """Move the case's files to the kept directory and print a reproduction per failure."""
        os.makedirs(self.keep_dir, exist_ok=True)
        target = os.path.join(self.keep_dir, os.path.basename(case.directory))
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(case.directory, target)
        with open(os.path.join(target, "case.json"), "w") as handle:
            json.dump({"case": case.describe(), "plan": {"must": the_plan.must, "reasons": the_plan.reasons},
                       "failures": [{"ranks": r, "kind": f.kind, "message": f.message, "known": k} for r, _, f, _, k in failures]},
                      handle, indent=1, default=str)
        for ranks, number, failure, line, known in failures:
            line = line.replace(case.directory, target)
            tag = f"known:{known}" if known else "NEW"
            self.log.write(f"FAIL case {number} n={ranks} {tag} {failure}\n    reproduce: {line}\n")
        self.log.flush()

    def report(self):
        """``N cases, F failures`` per rank count, then failures grouped by kind."""
        lines = ["cases by command and expectation: " + ", ".join(f"{k} {v}" for k, v in sorted(self.plans.items())),
                 "cases by input format: " + ", ".join(f"{k} {v}" for k, v in sorted(self.input_formats.items()))]
        for ranks in self.ranks:
            c = self.counts[ranks]
            lines.append(f"ranks {ranks}: {c['cases']} cases, {c['failures']} failures"
                         + (f" ({c['known']} more cases with known failures only)" if c["known"] else ""))
        groups = {}
        for ranks, number, failure, _, known in self.failures:
            key = (failure.kind, known)
            groups.setdefault(key, {"ranks": set(), "cases": set(), "example": failure.message})
            groups[key]["ranks"].add(ranks)
            groups[key]["cases"].add(number)
        for (kind, known), group in sorted(groups.items(), key=lambda item: (item[0][1] is not None, item[0][0])):
            lines.append(f"  {kind:<40} {'known:' + known if known else 'NEW':<28} ranks {sorted(group['ranks'])} "
                         f"cases {len(group['cases'])}: {group['example'][:160]}")
        return "\n".join(lines)

    def unknown_failures(self):
        return [item for item in self.failures if item[4] is None]

"""Known failure categories of the current package (listed in KNOWN.md), and the switch.

Each category matches a failure by its kind (a regular expression over the whole
:attr:`~.checks.Failure.kind`) and, where the kind alone would be too broad, by a predicate
on the case. With ``H5MDTOOL_DIFF_KNOWN=skip`` (what ``make test`` sets while KNOWN.md is
not empty) failures in a known category are reported as ``known:<name>`` but do not fail the
fixed-seed profile; with ``H5MDTOOL_DIFF_KNOWN=fail`` (the default) every failure fails it.
When a fix lands, delete its category here and in KNOWN.md: the harness then keeps it fixed.
"""

import os
import re
from dataclasses import dataclass

VARIABLE = "H5MDTOOL_DIFF_KNOWN"


@dataclass(frozen=True)
class Category:
    name: str
    kinds: str  # regular expression matched against the whole failure kind
    predicate: object = None  # case -> bool

    def matches(self, case, failure):
        if not re.fullmatch(self.kinds, failure.kind):
            return False
        return self.predicate is None or bool(self.predicate(case))


# -- predicates on cases ----------------------------------------------------------------

def _segments(case, **wanted):
    return [s for s in case.segments if all(getattr(s, k) == v for k, v in wanted.items())]


def _writes_h5md(case):
    return case.command == "convert" or (case.command == "split" and case.options.get("format") == "h5md") \
        or (case.command == "bench" and case.options.get("input") == "converted")


def _partial_box(case):
    """A box missing in some frames (frame 0 of segment 0 among them), or an H5MD box
    periodic in some dimensions only, or stored in a shape other than (n, 3, 3)."""
    for s in case.segments:
        if s.has_box is not None and s.box is not None and not s.has_box.all():
            return True
        if s.format == "h5md" and s.box is not None and (not all(s.boundary) or s.box_store not in ("n33", "none")):
            return True
    return False


def _partial_fields(case):
    """Velocities or forces (or positions) in some frames only, in the joined trajectory."""
    names = ("has_positions", "has_velocities", "has_forces")
    for name in names:
        masks = [getattr(s, name) for s in case.segments]
        present = [m for m in masks if m is not None]
        if present and (len(present) < len(masks) or not all(m.all() for m in present)):
            return True
    return False


def _converted_units(case):
    return any(s.format == "h5md" and s.length_unit != "nm" for s in case.segments)


def _h5md_fixed_box(case):
    return any(s.format == "h5md" and s.box is not None and s.box_store.startswith("fixed") for s in case.segments)


def _no_time(case):
    return any(s.format == "h5md" and s.time_store == "missing" for s in case.segments)


def _bench_ref_out_of_range(case):
    if case.command != "bench":
        return False
    n = case.segments[0].n_frames
    return not -n <= case.options.get("ref_frame", 0) < n


def _dcd_split_same(case):
    return case.command == "split" and case.options.get("format") == "same" and len(_segments(case, format="dcd")) > 1


def _validate_tolerant(case):
    """validate --against where the comparison has a tolerance (units converted: DCD, H5MD
    not in nm), or any mutation to NaN/inf."""
    return case.command == "validate"


CATEGORIES = (
    Category("single-chunk-zeros", r"(positions|velocities|forces)-zeros|mdanalysis-positions",
             lambda case: _writes_h5md(case)),
    Category("precision-beyond-bound", r"positions-beyond-precision|validate-against-parts|validate-rejects-output",
             lambda case: case.options.get("precision") is not None),
    Category("box-first-frame-or-partial", r"box-dropped|box-boundary|box-differ|box-invented|mdanalysis-box|validate-false-alarm|validate-against-parts|validate-rejects-output",
             _partial_box),
    Category("unit-conversion-ulp", r"(positions|velocities|forces)-differ|validate-against-parts", _converted_units),
    Category("fields-in-some-frames", r"(velocities|forces)-(dropped|frames|differ)|positions-(dropped|frames|missing)"
                                      r"|validate-rejects-output|validate-against-parts|time-differ|step-differ",
             _partial_fields),
    Category("h5md-own-rate-velocity", r"velocities-(dropped|frames|differ)|validate-rejects-output",
             lambda case: any(s.format == "h5md" and s.velocity_rate > 1 for s in case.segments)),
    Category("truncated-accepted", r"(cli-)?accepted-truncated"),
    Category("natoms-change-accepted", r"(cli-)?accepted-natoms-change|bench-rmsd|crash:.*|pool-died|abort",
             lambda case: any(s.natoms_change_frame is not None for s in case.segments)),
    Category("time-invented", r"time-invented|validate-rejects-(output|split)|validate-against-parts", _no_time),
    Category("connectivity-stale", r"connectivity-stale"),
    Category("h5md-fixed-box", r"crash:ValueError|refused-valid-input|box-.*", _h5md_fixed_box),
    Category("split-dcd-header-steps", r"step-differ|time-differ|validate-against-parts", _dcd_split_same),
    Category("validate-misses-nan-inf", r"validate-(missed|frame-not-named)-.*-(nan|inf|-inf)", _validate_tolerant),
    Category("bench-frames-engine-qcp-nan", r"bench-rmsd",
             lambda case: case.command == "bench" and case.options.get("engine") == "frames"),
    Category("bench-frames-without-positions-crash", r"crash:NoDataError|pool-died|abort|cli-.*",
             lambda case: case.command == "bench" and _partial_fields(case)),
    Category("memory-corruption-from-earlier-case", r"pool-died-after-earlier-cases",
             lambda case: bool(case.info.get("corrupted_by"))),
    Category("bench-ref-frame-out-of-range-crash",
             r"pool-died|pool-died-after-earlier-cases|abort|crash:.*|cli-exit-status|cli-error-lines|cli-crash",
             _bench_ref_out_of_range),
    Category("h5md-box-vectors", r"validate-(false-alarm|frame-not-named-.*|missed-.*|against-parts|rejects-output)"
                                 r"|refused-valid-input|crash:.*|box-.*",
             lambda case: any(s.format == "h5md" and s.box is not None and s.box_store == "n3" for s in case.segments)),
)


def classify(case, failure):
    """Name of the known category *failure* of *case* falls in, or None."""
    for category in CATEGORIES:
        if category.matches(case, failure):
            return category.name
    return None


def mode():
    """``skip`` (known failures do not fail the run) or ``fail``."""
    value = os.environ.get(VARIABLE, "fail").strip().lower()
    return "skip" if value in ("skip", "1", "yes", "true") else "fail"

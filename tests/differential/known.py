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


CATEGORIES = ()  # none: every failure fails the fixed-seed profile


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

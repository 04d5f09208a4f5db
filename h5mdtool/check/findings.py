"""Findings of ``validate`` and ``info``: the rule table, one finding, reports per file and per run.

Every rule has a stable id, a default severity and the profile that runs it; the table
:data:`RULES` is the single source for the command's output and for docs/validation.md
(a test checks that both list the same ids).

Severities: ``error`` (the file breaks H5MD 1.1, MDAnalysis cannot read it, or it differs
from its source), ``warning`` (a recommendation or a layout that reads slowly; fails only
with ``--strict``) and ``note`` (a point of the specification that no known reader depends
on, or a fact about the file a user must pass on, such as a plugin filter; never fails).
Notes are printed with ``--notes``, except those a user must see (:attr:`Rule.shown`).
"""

import json
from dataclasses import asdict, dataclass, field

ERROR, WARNING, NOTE = "error", "warning", "note"
SEVERITIES = (ERROR, WARNING, NOTE)


@dataclass(frozen=True)
class Rule:
    """One check: default severity, the profile that runs it, what it means, how to fix it.

    *shown*: a note printed without ``--notes`` (what every reader of the file must know).
    """

    severity: str
    profile: str
    meaning: str
    fix: str = ""
    shown: bool = False


RULES = {
    # reading the file at all; links
    "FILE001": Rule(ERROR, "any", "the file cannot be read at all: missing, a directory, not a regular file (a FIFO, a device), not HDF5 (or not JSON for a manifest), truncated; exit status 1", "check the path; regenerate or copy the file again"),
    "FILE002": Rule(ERROR, "any", "a group cannot be listed", "the file is damaged: regenerate it"),
    "FILE003": Rule(ERROR, "any", "an object, attribute or dataset cannot be read (damaged, or a datatype h5py cannot map)", "regenerate the file"),
    "FILE004": Rule(ERROR, "any", "libhdf5 itself crashed while reading the file (damaged metadata); files are read in a child process so that only it dies, and no other check could run", "regenerate or copy the file again"),
    "FILE005": Rule(ERROR, "any", "reading the file made no progress for `H5MDTOOL_READ_TIMEOUT` seconds (default 60): libhdf5 loops on damaged metadata (seen with a corrupt global heap); the child process reading it is stopped, and no other check could run", "regenerate or copy the file again"),
    "FILE006": Rule(WARNING, "any", "a dataset the checks read (per-atom values, step, time, box edges) uses an HDF5 filter that is not available here: its values were not checked", "pip install hdf5plugin (h5mdtool loads it when it is installed), or point HDF5_PLUGIN_PATH at the filter's plugin"),
    "LINK001": Rule(WARNING, "any", "an external link, a virtual dataset or a dataset whose raw data lives in external files: reported, never followed or read (the target may be missing, slow or a FIFO that blocks forever); readers need the other files", "copy the data into the file (h5mdtool convert does) or ship all the files"),
    "LINK002": Rule(ERROR, "any", "a soft link that cannot be resolved (dangling, or a loop); a warning outside the groups H5MD defines", "remove or repair the link"),
    # H5MD 1.1
    "H5MD001": Rule(ERROR, "h5md", "no `/h5md` group: not an H5MD file", "convert the trajectory with `h5mdtool convert`"),
    "H5MD002": Rule(ERROR, "h5md", "`/h5md` attribute `version` is not two integers", "set `version = [1, 1]` (Integer[2])"),
    "H5MD003": Rule(ERROR, "h5md", "no `/h5md/author` group with a string attribute `name`", "add it"),
    "H5MD004": Rule(ERROR, "h5md", "no `/h5md/creator` group with string attributes `name` and `version`", "add them"),
    "H5MD005": Rule(ERROR, "h5md", "a module under `/h5md/modules` has no Integer[2] attribute `version`", "add it"),
    "H5MD006": Rule(WARNING, "h5md", "the file declares an H5MD version other than 1.0 or 1.1; it was checked against 1.1", "use a validator for that version"),
    "H5MD010": Rule(ERROR, "h5md", "a particle group has no `box` group, or `box` has no scalar integer attribute `dimension` >= 1", "add `box` with `dimension`"),
    "H5MD011": Rule(ERROR, "h5md", "`box` attribute `boundary` is not one string `periodic` or `none` per dimension", "fix the attribute"),
    "H5MD012": Rule(ERROR, "h5md", "a boundary is `periodic` but `box` has no `edges`", "add `box/edges`"),
    "H5MD013": Rule(ERROR, "h5md", "`edges` does not fit the dimension D: a fixed box is [D] or [D][D], a time-dependent box's `value` is [n][D] or [n][D][D]", "rewrite the box"),
    "H5MD014": Rule(ERROR, "h5md", "a dataset (or other object) where H5MD expects a group: `/particles`, a particle group, `box`, `/observables`", "rewrite the file"),
    "H5MD020": Rule(ERROR, "h5md", "a time-dependent element (a group) has no `value` dataset with a [variable] first dimension", "add `value`, or store a time-independent element as a dataset"),
    "H5MD021": Rule(ERROR, "h5md", "a time-dependent element has no `step`, or `step` is not an Integer dataset that is 1-D (explicit) or scalar (fixed)", "rewrite `step`"),
    "H5MD022": Rule(ERROR, "h5md", "an explicit `step` does not have one entry per row of `value`", "rewrite `step`"),
    "H5MD023": Rule(ERROR, "h5md", "an explicit `step` repeats a step (H5MD 1.1 asks strictly increasing steps; steps that go backwards are `DATA004`), or the fixed increment is not positive", "rewrite `step`"),
    "H5MD024": Rule(ERROR, "h5md", "`time` is not Float or Integer, is not stored like `step` (both explicit or both fixed), or has not one entry per row of `value` (times that go backwards are `DATA004`, non-finite times `DATA002`)", "rewrite `time`"),
    "H5MD030": Rule(ERROR, "h5md", "`position`, `velocity`, `force` or `image` values are not [n][N][D] (time-dependent) or [N][D] (fixed) with D the box dimension", "rewrite the data"),
    "H5MD031": Rule(ERROR, "h5md", "`image` without `position`", "add `position` or drop `image`"),
    "H5MD032": Rule(ERROR, "h5md", "`box/edges` or `image` does not share `step` and `time` with `position` by hard link", "hard-link them (h5mdtool's files do)"),
    "H5MD033": Rule(ERROR, "h5md", "per-particle elements of one particle group hold different numbers of particles", "rewrite the elements"),
    "H5MD101": Rule(WARNING, "h5md", "a dimensionful dataset (`position`, `velocity`, `force`, `edges` values, `time`) has no `unit` attribute", "add `unit` (units module)"),
    "H5MD102": Rule(WARNING, "h5md", "no units module `/h5md/modules/units`: unit attributes are not declared", "add the group with `version = [1, 0]` and `system = \"SI\"`"),
    "H5MD103": Rule(NOTE, "h5md", "a string attribute of another kind than the specification's: H5MD 1.1 asks scalar fixed-length strings for `name`, `email`, `version` (creator) and the units module's `system`, fixed-length strings for `boundary`; `unit` is checked as variable-length, the kind MDAnalysis 2.11 reads (it refuses fixed-length units); no known reader depends on the others", "rewrite the attribute with the other string kind"),
    "H5MD104": Rule(WARNING, "h5md", "a `unit` attribute that is not a string, or not a unit string of the units module (`nm`, `ps`, `nm ps-1`, `kJ mol-1 nm-1`; `Angstrom` is spelt `Ang` there)", "use the units module's symbols"),
    "H5MD105": Rule(WARNING, "h5md", "the author's `email` does not look like `name@domain.tld`", "fix or drop it"),
    # MDAnalysis
    "MDA001": Rule(ERROR, "mdanalysis", "no particle group under `/particles`: MDAnalysis's H5MDReader reads the first group listed there", "`h5mdtool convert FILE -o new.h5md`"),
    "MDA002": Rule(ERROR, "mdanalysis", "the particle group MDAnalysis reads has no `box` with `dimension` 3", "MDAnalysis reads 3-D systems only"),
    "MDA003": Rule(ERROR, "mdanalysis", "the first of position, velocity, force has no 1-D `step` and `time` (MDAnalysis indexes both by frame)", "store explicit step and time"),
    "MDA004": Rule(ERROR, "mdanalysis", "none of `position`, `velocity`, `force` with [n][N][3] values: MDAnalysis has nothing to read", "add positions"),
    "MDA005": Rule(ERROR, "mdanalysis", "a unit that MDAnalysis does not know, or none where it needs one (values of position, velocity, force, time; the box when there are no positions)", "use `nm`, `Angstrom`, `ps`, `nm ps-1`, `kJ mol-1 nm-1`, ..."),
    "MDA006": Rule(ERROR, "mdanalysis", "another group is listed before `trajectory` under `/particles`; MDAnalysis reads the first one", "relayout with `h5mdtool convert` (it keeps `trajectory` first)"),
    "MDA007": Rule(ERROR, "mdanalysis", "an observable MDAnalysis cannot read at every frame (it reads `observables/<name>/value[frame]` or `observables/<name>/<sub>/value[frame]`)", "store observables as time-dependent groups sampled with the positions"),
    "MDA008": Rule(ERROR, "mdanalysis", "velocity or force values have another frame or atom count than the first element: MDAnalysis reads every element at the first one's frame index and ignores their own `step` (valid H5MD when each element has its own step, as `convert` writes a TRR with nstvout != nstxout; h5py and h5mdtool read it)", "sample them with the positions, or leave them out (`convert --no-velocities`/`--no-forces`)"),
    "MDA009": Rule(ERROR, "mdanalysis", "`box/edges` is not a time-dependent element whose values are [n][3] or [n][3][3] with a row per frame", "store the box per frame"),
    "MDA010": Rule(ERROR, "mdanalysis", "a dataset uses an HDF5 filter that is not available here: it cannot be decoded", "install the filter plugin (HDF5_PLUGIN_PATH), or relayout with `--compression gzip` where it is available"),
    "MDA011": Rule(ERROR, "mdanalysis", "no frames: MDAnalysis reads frame 0 when it opens a trajectory", ""),
    "MDA012": Rule(WARNING, "mdanalysis", "the particle group MDAnalysis reads is not named `trajectory`: `Universe(topology, FILE)` reads it, but `Universe(FILE)` without a topology looks for `/particles/trajectory` only", "give a topology, or relayout with `h5mdtool convert` (it names the group `trajectory`)"),
    "MDA013": Rule(ERROR, "mdanalysis", "box edges in another length unit than the positions: MDAnalysis's H5MDReader converts the box with the positions' unit, so it reads a box scaled by the ratio of the two", "store the edges in the positions' unit (h5mdtool convert does)"),
    "MDA900": Rule(ERROR, "mdanalysis", "MDAnalysis's H5MDReader failed to open the file or read its first and last frames (the message says why)", "see the message"),
    "MDA901": Rule(ERROR, "mdanalysis", "the same through MPI-IO (`driver=\"mpio\"`); checked when validate runs under mpirun/srun", "see the message"),
    "MDA902": Rule(WARNING, "mdanalysis", "MDAnalysis's read check was not run: the file has external links, virtual datasets or external raw data (MDAnalysis follows them, and a target that is a FIFO or a dead mount blocks it for ever), or one frame is too large to read here (the message says which)", "copy the data into the file (h5mdtool convert does)"),
    # layout lint
    "LINT001": Rule(WARNING, "all", "chunks split a frame over the atoms: reading one frame touches several chunks and reads data it does not need (h5py auto-chunking; about 10x slower reads in Jakupovic & Beckstein, SciPy 2021, doi:10.25080/majora-1b6fd038-005)", "`h5mdtool convert FILE -o FILE_relayout.h5md --chunk-frames auto`"),
    "LINT002": Rule(WARNING, "all", "chunks split the xyz axis: every frame read touches one chunk per coordinate at least", "as LINT001"),
    "LINT003": Rule(WARNING, "all", "compressed chunks of several frames that do not fit in HDF5's default 1 MiB chunk cache: reading frame by frame decompresses the whole chunk again for every frame", "relayout with `--chunk-frames auto` (chunks within 1 MiB), or readers raise `rdcc_nbytes`"),
    "LINT004": Rule(WARNING, "all", "a filter that is neither built into HDF5 nor in hdf5plugin (lzf, an unregistered filter): every reader must find and install its plugin (h5py bundles lzf; C, Fortran and other HDF5 programs do not)", "relayout with `--compression zstd` (readers use hdf5plugin) or `--compression gzip` (no plugin)"),
    "LINT006": Rule(NOTE, "all", "a filter from hdf5plugin (zstd, blosc, blosc2, bitshuffle, lz4, zfp, sz, bzip2, ...), as `convert --precision` writes: Python readers, MDAnalysis included, need `pip install hdf5plugin` and `import hdf5plugin` before opening the file; other HDF5 programs (h5dump, C, Fortran) need `HDF5_PLUGIN_PATH` set to hdf5plugin's plugin directory", "none needed; for readers that cannot install plugins, relayout with `--compression gzip` (about 8% larger at 0.001 nm)", shown=True),
    "LINT005": Rule(WARNING, "all", "a contiguous dataset of 16 GiB or more: it cannot be compressed or extended", "relayout chunked, with `--compression gzip` if space matters"),
    # data sanity (every profile; no source needed)
    "DATA001": Rule(ERROR, "any", "frames whose positions are all 0.0 in a system of more than one atom: data never written or lost (HDF5 1.10.8's single-chunk bug wrote whole files of zeros)", "regenerate the file from its source and check it with `validate --against`"),
    "DATA002": Rule(ERROR, "any", "non-finite values (NaN, inf) in positions, velocities, forces, box edges, time or an observable's value (`/observables`), by frame", "regenerate the file; if the source holds them too, the simulation produced them"),
    "DATA003": Rule(ERROR, "any", "frames whose atoms all lie more than 100 box lengths beyond one face of the periodic box (judged from the frame's bounding box): garbage coordinates or a unit mix-up; unwrapped trajectories drift far less", "regenerate the file from its source and check it with `validate --against`"),
    "DATA004": Rule(ERROR, "any", "`step` or `time` goes backwards from one frame to the next", "regenerate the file; segments that restart are joined with `convert --on-overlap later`"),
    "DATA005": Rule(ERROR, "any", "frames whose periodic box has zero volume (a periodic edge of length 0, or edge vectors in one plane)", "regenerate the file from its source"),
    "DATA006": Rule(ERROR, "any", "per-frame data (`value`, `step` or `time`) that the file declares but never stored (chunks or contiguous storage never written): readers get the fill value; only the stored rows are checked", "regenerate the file (its writer stopped early)"),
    # split manifests
    "MAN001": Rule(ERROR, "manifest", "not a split manifest: not a JSON object, another `kind`, an unsupported `manifest_version` (1, 2 and 3 are read) or a missing field (the message says which)", "re-run `h5mdtool split`"),
    "MAN002": Rule(ERROR, "manifest", "a part listed in the manifest is missing, or is not a regular file", "re-run split, or restore the part"),
    "MAN003": Rule(ERROR, "manifest", "a part's size on disk differs from the manifest", "re-run split, or restore the part"),
    "MAN004": Rule(ERROR, "manifest", "a part holds another number of frames than the manifest says, or cannot be read", "re-run split"),
    "MAN005": Rule(ERROR, "manifest", "the parts do not tile the frames: frames in no part (a missing part), a part whose `n_frames` is not `stop - start` or that is empty, or a total other than `n_frames`", "re-run split"),
    "MAN006": Rule(ERROR, "manifest", "a part holds another number of atoms than the manifest says", "re-run split"),
    "MAN007": Rule(ERROR, "manifest", "a part path that is absolute, leaves the manifest's directory (`..`) or can name no file (a NUL character, a character the file system cannot encode): split writes paths relative to the manifest, so the directory can be moved", "re-run split, or make the path relative"),
    "MAN008": Rule(ERROR, "manifest", "duplicated parts: one file listed twice, two entries for the same frames, or two part files holding the same frames", "re-run split"),
    "MAN009": Rule(ERROR, "manifest", "swapped parts: a part file holds the frames the manifest gives another part (found from the recorded steps and times, or from steps that run backwards between parts)", "re-run split, or restore the parts' names"),
    "MAN010": Rule(ERROR, "manifest", "overlapping parts: a part starts before the previous one stops", "re-run split"),
    "MAN011": Rule(ERROR, "manifest", "parts out of order: the list is not sorted by `start`", "re-run split"),
    "MAN012": Rule(ERROR, "manifest", "a count that is not a whole number >= 0 (a boolean, a float, a string, a negative number): `n_frames`, `n_atoms`, a part's `start`, `stop`, `n_frames`, `bytes`; or a recorded `first_step`/`last_step` that is not an integer, `first_time`/`last_time` that is not a number, a `checksum` that is not `blake2b-128:` and 32 hex digits", "re-run split"),
    "MAN013": Rule(ERROR, "manifest", "an empty part list", "re-run split"),
    "MAN014": Rule(ERROR, "manifest", "an unknown `format` (XTC, TRR, DCD, H5MD are known), or a part whose extension is not the format's", "re-run split"),
    "MAN015": Rule(ERROR, "manifest", "a part's first or last step or time (recorded by split in `first_step`, `last_step`, `first_time`, `last_time`) differs from the part's frames", "re-run split, or restore the part"),
    "MAN016": Rule(ERROR, "manifest", "a part's bytes do not give the checksum split recorded for it (manifest version 3): the part changed since the split, damaged or replaced (every part is read whole; `--no-checksums` skips it)", "restore the part from a copy, or re-run split"),
    # comparison with the source
    "AGAINST001": Rule(ERROR, "against", "the file (or the parts together) and the source hold different numbers of frames or atoms", "re-run the conversion"),
    "AGAINST002": Rule(ERROR, "against", "frames differ from the source: the first ones are listed by number, with what differs (positions, velocities, forces, step, time, box) and by how much; a NaN or inf on either side is always a difference", "re-run the conversion"),
    "AGAINST003": Rule(ERROR, "against", "the file cannot be compared with the source: the trajectory cannot be read, or one side has a periodic box and the other none", "fix the errors reported for the file first"),
}


@dataclass
class Finding:
    """One problem found in a file."""

    rule: str
    severity: str
    path: str
    message: str
    fix: str = None

    def shown(self, notes=False):
        """Whether the report for people prints it: errors, warnings, notes with *notes* or marked shown."""
        return self.severity != NOTE or notes or RULES[self.rule].shown


@dataclass
class FileReport:
    """The findings for one file (an H5MD file or a split manifest)."""

    file: str
    kind: str = "h5md"
    findings: list = field(default_factory=list)
    readable: bool = True
    comparison: dict = None
    #: MDAnalysis reads that succeeded ("serial", "mpio"); not part of the JSON document
    read_checks: list = field(default_factory=list)

    def add(self, rule, path, message, fix=None, severity=None):
        """Record a finding of *rule* (its default severity and fix unless *severity*, *fix* are given)."""
        finding = Finding(rule, severity or RULES[rule].severity, path, message, fix or RULES[rule].fix or None)
        if finding not in self.findings:
            self.findings.append(finding)
        return finding

    def has(self, rule, path=None):
        return any(f.rule == rule and (path is None or f.path == path) for f in self.findings)

    def count(self, severity):
        return sum(f.severity == severity for f in self.findings)

    @property
    def errors(self):
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self):
        return [f for f in self.findings if f.severity == WARNING]

    def failed(self, strict=False):
        return bool(self.errors) or (strict and bool(self.warnings))

    def as_dict(self):
        return {
            "file": self.file,
            "kind": self.kind,
            "readable": self.readable,
            "errors": self.count(ERROR),
            "warnings": self.count(WARNING),
            "notes": self.count(NOTE),
            "findings": [asdict(f) for f in self.findings],
            "comparison": self.comparison,
        }


@dataclass
class ValidationReport:
    """The outcome of one ``validate`` run over several files."""

    files: list
    profile: str = "all"
    strict: bool = False
    against: list = field(default_factory=list)
    tolerance: float = None

    @property
    def errors(self):
        return sum(r.count(ERROR) for r in self.files)

    @property
    def warnings(self):
        return sum(r.count(WARNING) for r in self.files)

    @property
    def notes(self):
        return sum(r.count(NOTE) for r in self.files)

    @property
    def unreadable(self):
        return [r.file for r in self.files if not r.readable]

    @property
    def exit_code(self):
        """1 if a file could not be read at all or has errors (or warnings with strict), else 0."""
        return 1 if self.unreadable or any(r.failed(self.strict) for r in self.files) else 0

    def as_dict(self):
        from .. import __version__

        return {
            "h5mdtool_version": __version__,
            "profile": self.profile,
            "strict": self.strict,
            "against": list(self.against),
            "tolerance": self.tolerance,
            "files": [r.as_dict() for r in self.files],
            "errors": self.errors,
            "warnings": self.warnings,
            "notes": self.notes,
            "unreadable": self.unreadable,
            "exit_code": self.exit_code,
        }

    def to_json(self):
        return json.dumps(self.as_dict(), indent=2, sort_keys=True, default=str)

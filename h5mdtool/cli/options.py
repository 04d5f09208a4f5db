"""Click options shared by several commands (layout, frames, atoms, output, progress)."""

import json
import sys

import click

from ..h5md.layout import COMPRESSIONS, parse_size
from ..parallel.errors import UsageError, mark_collective


class SizeType(click.ParamType):
    """A byte count such as 1048576, 64K, 1M or 4MiB."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except UsageError as error:
            self.fail(str(error), param, ctx)


SIZE = SizeType()


class PrecisionType(click.ParamType):
    """A grid step in nm (a finite number >= 1e-6), or ``xtc``."""

    name = "NM|xtc"

    def convert(self, value, param, ctx):
        if value == "xtc" or isinstance(value, float):
            return value
        try:
            number = float(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number of nm nor 'xtc'", param, ctx)
        if not (number >= 1e-6 and number != float("inf")):
            self.fail(f"{value} is not a finite number of nm >= 1e-06", param, ctx)
        return number


PRECISION = PrecisionType()


class ChunkFrames(click.ParamType):
    """A positive frame count or ``auto``."""

    name = "K|auto"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int):
            return value
        try:
            frames = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a whole number nor 'auto'", param, ctx)
        if frames < 1:
            self.fail(f"{value} is not >= 1", param, ctx)
        return frames


def deprecation_note(old, new):
    """Tell the user, on standard error and from rank 0 only, that *old* still works but *new* is its name."""
    from ..parallel.mpi import launcher_rank

    if launcher_rank() == 0:
        click.echo(f"note: {old} is deprecated: use {new}", err=True)


def select_not_a_file(also=""):
    """A click callback refusing a structure file given to -s/--select, a gmx habit.

    gmx's ``-s`` is the run input (``md.tpr``); h5mdtool's ``-s`` is the atom selection and
    its topology is ``-t``. *also* adds a further suggestion to the message.
    """

    def check(ctx, param, value):
        import os

        from ..h5md.topology import STRUCTURE_EXTENSIONS

        if value is not None and not any(c.isspace() for c in value) \
                and os.path.splitext(value)[1].lower() in STRUCTURE_EXTENSIONS:
            # every rank parses the same command line and stops here
            raise mark_collective(UsageError(f"-s {value}: -s/--select is an atom selection or index group here, "
                                             f"not gmx's run input; did you mean -t/--topology {value}{also}?"))
        return value

    return check


def compose(*decorators):
    def apply(function):
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


frame_options = compose(
    click.option("--start", type=int, default=None, help="First frame to use (0-based, negative counts from the end). Default: 0."),
    click.option("--stop", type=int, default=None, help="Frame to stop before (exclusive). Default: the end."),
    click.option("--step", type=int, default=None, help="Use every STEP-th frame. Default: 1."),
)

#: Frames by time, as gmx trjconv -b/-e/-dt (keywords begin, end, dt of convert and split).
time_options = compose(
    click.option("-b", "begin", type=float, default=None, metavar="PS", help="First time to use, in ps (gmx trjconv -b): frames with time >= PS, compared as float32 as GROMACS does. Times are the inputs' own, of the joined trajectory (after --on-overlap). Not with --start/--stop/--step; refused for inputs that record no time. Default: from the first frame."),
    click.option("-e", "end", type=float, default=None, metavar="PS", help="Last time to use, in ps (gmx trjconv -e): frames with time <= PS. Default: to the last frame."),
    click.option("--dt", type=click.FloatRange(min=0, min_open=True), default=None, metavar="PS", help="Only frames whose time minus the first selected frame's time is a whole multiple of PS ps (gmx trjconv -dt: 't MOD dt = first time', within 2 float32 epsilons). bench rmsd --dt counts from 0 ps instead (gmx rms). Default: every frame."),
)


class IndexFile(click.ParamType):
    """A GROMACS index file; an integer that names no file hints at --nparts (split's old -n)."""

    name = "NDX"

    def convert(self, value, param, ctx):
        import os

        if not os.path.exists(value) and value.strip().isdigit() and ctx is not None and ctx.info_name == "split":
            self.fail(f"no index file {value!r}: -n is the GROMACS index file (as in gmx); "
                      f"did you mean --nparts {value}?", param, ctx)
        return value


index_option = click.option("--index", "-n", "index_file", type=IndexFile(), default=None, help="GROMACS index file (.ndx, as gmx -n): --select then names one of its groups, by name or by number (from 0, as gmx lists them); a name that is no group is read as an MDAnalysis selection when --topology is given. The group's atoms must be increasing (atoms are kept in the trajectory's order). Default: none.")

atom_options = compose(
    click.option("--topology", "-t", type=str, default=None, metavar="FILE", help="Topology file (PSF, GRO, PDB, TPR...): checked against the trajectory's atom count, used by --select, and stored in the output (species, mass, charge, id, bonds and the VMD structure module) so the file is self-contained."),
    click.option("--select", "-s", type=str, default=None, metavar="SEL", callback=select_not_a_file(), help='Atoms to keep: an MDAnalysis selection, e.g. "protein" (needs --topology, unless the input is an H5MD file carrying its own), or with -n a group of the index file by name or number, e.g. Protein or 1. Default: all atoms.'),
    click.option("--atom-indices", "atom_indices_file", type=str, default=None, metavar="FILE", help="Text file of 0-based atom indices to keep (increasing; whitespace or commas), as mdconvert's -a; an alternative to --select and -n that needs no topology."),
    index_option,
)

segment_options = compose(
    click.option("--on-overlap", type=click.Choice(["error", "later", "first", "drop"]), default="error", show_default=True, help="Segments whose steps overlap (a run restarted from a checkpoint): refuse; 'later' keeps the restart's frames and drops the earlier file's frames from the restart's first step on (gmx trjcat's rule: what a crashed run wrote past its checkpoint is not what the restart continues); 'first' keeps the earlier file's frames and drops the later file's up to their last step ('drop' is its older name). The summary says what was dropped."),
)

truncation_option = click.option("--on-truncated", type=click.Choice(["error", "drop"]), default="error", show_default=True, help="An input whose last frame is incomplete (a crashed run): refuse, or leave that frame out (the summary names it and its bytes).")


def input_format_option(*names, dest="input_format", subject="every input", also=(), note=""):
    """The option naming the input format (``--format`` of every command), overriding extensions.

    The choices are the formats of the reading stack's registry, with their extensions, and
    *also* (older meanings a command still accepts, explained by *note*); *subject* says
    which files it applies to (validate: the --against source).
    """
    from ..formats import REGISTRY

    known = "; ".join(
        f"{name} ({' '.join(cls.extensions)})" if cls.extensions else f"{name} (no extension: name it)"
        for name, cls in sorted(REGISTRY.items())
    )
    return click.option(
        *names, dest, type=click.Choice(sorted(REGISTRY) + list(also), case_sensitive=False), default=None,
        help=f"Read {subject} as this format, whatever its extension (as MDAnalysis's format=). "
             f"Formats and the extensions that select them: {known}. Default: from the extension.{note}",
    )


chunk_options = compose(
    click.option("--chunk-frames", type=ChunkFrames(), default=None, help="Frames per HDF5 chunk; chunks are (K, n_atoms, 3), or (K, n_atoms, 1) with --split-xyz, so the atoms of a frame are never split. 'auto': as many whole frames as fit in the stripe size, or 1 MiB (h5py's chunk cache). Default: auto when compressed (codecs gain from several frames per chunk), else 1. MDAnalysis 2.11 reads an H5MD file one frame at a time and decompresses a whole chunk for each: for frame-by-frame analysis with it, give 1."),
    click.option("--precision", type=PRECISION, default=None, help="Store positions lossily, in nm: each coordinate is rounded to a decimal grid step of at most PRECISION (error at most PRECISION/2) and stored as an integer in pm (fm below 0.001 nm), which every H5MD reader, MDAnalysis included, turns back into lengths. 'xtc': the XTC inputs' own grid (0.001 nm for GROMACS' default), keeping their integers exactly. Default: lossless float32."),
    click.option("--velocity-precision", type=click.FloatRange(min=1e-6, max=1e6), default=None, help="Store velocities lossily, in nm/ps: rounded to the power of two at most VELOCITY_PRECISION (error at most half of it), still float32 in nm ps-1 for every reader. Default: lossless."),
    click.option("--force-precision", type=click.FloatRange(min=1e-6, max=1e6), default=None, help="Store forces lossily, in kJ/(mol nm), as --velocity-precision does velocities. Default: lossless."),
    click.option("--contiguous", is_flag=True, help="Store positions without chunks (uncompressed only)."),
    click.option("--compression", type=click.Choice(COMPRESSIONS), default="auto", show_default=True, help="Lossless HDF5 filter for per-atom data. auto: none, or zstd with a --precision (at 0.001 nm: 0.96x the XTC's size for a protein in vacuum, 1.18-1.25x for a solvated one). Built into every HDF5: gzip (the no-plugin choice: 1.04x the XTC with --precision 0.001). Bundled with h5py, read by h5py only (not by h5dump or C programs, not in hdf5plugin: avoid it for files that leave Python): lzf (serial only). Through hdf5plugin (readers need it: pip install hdf5plugin and 'import hdf5plugin' before h5py or MDAnalysis opens the file, or HDF5_PLUGIN_PATH for C tools and h5dump): zstd (byte shuffle + Zstandard), lz4 (bitshuffle + LZ4, fastest to read), blosc2 (bit shuffle + Zstandard; with --shuffle, byte shuffle: the smallest, 0.94x the XTC's size with --precision xtc on AdK in vacuum). Parallel writes stay collective."),
    click.option("--compression-level", type=int, default=None, help="Codec level: gzip 0-9 (default 4), zstd 1-22 (3), blosc2 0-9 (5); lz4 and lzf have none."),
    click.option("--shuffle/--no-shuffle", default=None, help="HDF5 byte shuffle before the codec; for blosc2, Blosc2's own byte shuffle instead of its bit shuffle (smaller integer positions: 0.94x the XTC's size against 1.04x on AdK). Default: on for gzip, lzf and zstd; off for lz4 and blosc2, which bit-shuffle themselves."),
    click.option("--split-xyz/--no-split-xyz", default=None, help="Store x, y and z in separate chunks, (K, n_atoms, 1) instead of (K, n_atoms, 3); compressed only. Atoms near each other in the file (bonded atoms, a water molecule) share the high bytes of each coordinate, which the codec then sees side by side: integers on a --precision grid shrink (solvated AdK at 0.001 nm: 1.18x the XTC's size instead of 1.40x; AdK in vacuum, whose frames are close in time: the same size). A frame still reads as one, from three chunks of a third of the size (bench rmsd: 9-15% slower). Default: with --precision, --velocity-precision or --force-precision, on when it stores the first frames at least 5% smaller (printed with the chunks), else off."),
)

stripe_options = compose(
    click.option("--stripe-count", type=int, default=None, help="Lustre stripe count for the output (-1: all targets). Passed as MPI-IO hint striping_factor and to 'lfs setstripe' when available."),
    click.option("--stripe-size", type=SIZE, default=None, help="Lustre stripe size in bytes, K/M/G accepted (e.g. 1M); a multiple of 64K. MPI-IO hint striping_unit."),
)

#: How an H5MD file is stored: chunks, compression, precision, striping.
layout_options = compose(chunk_options, stripe_options)

#: Which per-atom fields of a TRR (or H5MD) input are written.
field_options = compose(
    click.option("--velocities/--no-velocities", default=True, show_default=True, help="Write velocities wherever frames hold them (TRR, H5MD; with their own steps when saved at other frames than the positions)."),
    click.option("--forces/--no-forces", default=True, show_default=True, help="Write forces wherever frames hold them (TRR, H5MD)."),
)


def given_on_command_line(ctx, names):
    """The parameters among *names* that the user set (not left at their defaults), as a dict."""
    from click.core import ParameterSource

    return {
        name: ctx.params[name]
        for name in names
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)
    }


run_options = compose(
    click.option("--force", is_flag=True, help="Replace an existing output."),
    click.option("--progress/--no-progress", default=None, help="Progress on rank 0. Default: a live bar when the output reaches a terminal, also through mpirun; a line every 30 s under srun (its terminal cannot be seen from the ranks); nothing in logs. --progress where no terminal is seen: the lines (docs/convert.md)."),
    click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON document on standard output."),
)


def emit_json(document):
    """Print *document* as JSON on standard output."""
    json.dump(document, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")

"""Click options shared by several commands (layout, frames, atoms, output, progress)."""

import json
import sys

import click

from ..layout import COMPRESSIONS, parse_size
from ..errors import UsageError


class SizeType(click.ParamType):
    """A byte count such as 1048576, 64K, 1M or 4MiB."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except UsageError as error:
            self.fail(str(error), param, ctx)


SIZE = SizeType()


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

atom_options = compose(
    click.option("--topology", "-t", type=str, default=None, help="Topology file (PSF, GRO, PDB, TPR...) for --select; also checked against the trajectory's atom count."),
    click.option("--select", "-s", type=str, default=None, help='MDAnalysis selection of the atoms to keep, e.g. "protein". Needs --topology. Default: all atoms.'),
)

segment_options = compose(
    click.option("--on-overlap", type=click.Choice(["error", "drop"]), default="error", show_default=True, help="Segments whose steps overlap (restarts): refuse, or drop the repeated frames keeping the first copy."),
)

chunk_options = compose(
    click.option("--chunk-frames", type=ChunkFrames(), default="1", show_default=True, help="Frames per HDF5 chunk; chunks are (K, n_atoms, 3) so a frame is never split. 'auto': as many whole frames as fit in the stripe size, or 1 MiB."),
    click.option("--precision", type=click.FloatRange(min=1e-6), default=None, help="Store positions lossily, absolute error at most PRECISION/2 nm per coordinate (HDF5's built-in scale-offset filter; any HDF5 reader opens the file). XTC's own precision is 0.001. Default: lossless."),
    click.option("--contiguous", is_flag=True, help="Store positions without chunks (uncompressed only)."),
    click.option("--compression", type=click.Choice(COMPRESSIONS), default="none", show_default=True, help="HDF5 filter for per-atom data. gzip and lzf are lossless; parallel writes stay collective."),
    click.option("--compression-level", type=click.IntRange(0, 9), default=None, help="gzip level 0-9. Default: 4."),
    click.option("--shuffle/--no-shuffle", default=None, help="Byte-shuffle before compressing (better ratios). Default: on when compressing."),
)

stripe_options = compose(
    click.option("--stripe-count", type=int, default=None, help="Lustre stripe count for the output (-1: all targets). Passed as MPI-IO hint striping_factor and to 'lfs setstripe' when available."),
    click.option("--stripe-size", type=SIZE, default=None, help="Lustre stripe size in bytes, K/M/G accepted (e.g. 1M); a multiple of 64K. MPI-IO hint striping_unit."),
)

#: How an H5MD file is stored: chunks, compression, precision, striping.
layout_options = compose(chunk_options, stripe_options)

#: Which per-atom fields of a TRR (or H5MD) input are written.
field_options = compose(
    click.option("--velocities/--no-velocities", default=True, show_default=True, help="Write TRR velocities when present."),
    click.option("--forces/--no-forces", default=True, show_default=True, help="Write TRR forces when present."),
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
    click.option("--force", "-f", is_flag=True, help="Replace an existing output."),
    click.option("--progress/--no-progress", default=None, help="Progress bar on rank 0. Default: on when standard error is a terminal."),
    click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON document on standard output."),
)


def emit_json(document):
    """Print *document* as JSON on standard output."""
    json.dump(document, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def human_bytes(count):
    """1536 -> '1.5 KiB'."""
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024

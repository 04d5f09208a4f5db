"""``h5mdtool split``."""

import click

from ..formats.frametimes import frames_phrase
from ..parallel.errors import UsageError
from ..parallel.mpi import resolve
from ..parallel.sizes import human_bytes, human_rate
from .options import (
    atom_options, chunk_options, deprecation_note, emit_json, field_options, frame_options, given_on_command_line,
    input_format_option, run_options, segment_options, time_options, truncation_option
)

#: Options that shape H5MD parts; passed to the library only when given, so that the
#: library can refuse them with --output-format same.
H5MD_PART_PARAMETERS = ("chunk_frames", "precision", "velocity_precision", "force_precision", "contiguous",
                        "compression", "compression_level", "shuffle", "split_xyz", "velocities", "forces", "topology",
                        "select", "index_file", "atom_indices_file")


def resolve_format_names(part_format, input_format, old_input_format):
    """The parts' (None: the library's default) and the input's format from --output-format,
    --format and the older spellings.

    ``--format`` names the input format, as in every command; it used to name the parts'
    format (``same`` or ``h5md``) and ``--input-format`` the input's. Scripts written so
    keep working, with a deprecation note: ``--format same|h5md`` without
    ``--output-format`` still means the parts' format (an H5MD input is found by its
    extension; ``--format H5MD --output-format h5md`` names both).
    """
    if part_format is None and input_format is not None and input_format.lower() in ("same", "h5md"):
        part_format, input_format = input_format.lower(), None
        deprecation_note(f"split --format {part_format} (the parts' format)",
                         f"--output-format {part_format}; --format names the input format, as in convert")
    if old_input_format is not None:
        deprecation_note("split --input-format", "--format")
        if input_format is not None:
            raise UsageError("--input-format is the old name of --format: give --format alone")
        input_format = old_input_format
    if input_format is not None and input_format.lower() == "same":
        raise UsageError("--format names the input format; 'same' is a format of the parts: --output-format same")
    return part_format, input_format


@click.command("split")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--nparts", type=click.IntRange(min=1), required=True, help="Number of parts (balanced: sizes differ by at most one frame). Independent of the number of ranks; at most the number of frames split. Long form only: -n is the index file, as in gmx.")
@click.option("--output", "-o", required=True, metavar="DIR", help="Directory for the parts and manifest.json: created when missing, filled when empty (it keeps its permissions, group and Lustre striping), refused when not empty unless --force.")
@click.option("--output-format", "part_format", type=click.Choice(["same", "h5md"]), default=None, help="Format of the parts. same: the input's format, frames copied byte for byte (XTC, TRR, DCD); h5md: H5MD parts, shaped by the options below. Default: same for XTC, TRR or DCD inputs of one format, h5md for any other input (H5MD, NetCDF, TNG..., mixed formats).")
@frame_options
@time_options
@atom_options
@segment_options
@truncation_option
@input_format_option("--format", also=("same",), note=" (Given 'same' or 'h5md' without --output-format, --format names the parts' format, as it did before; deprecated.)")
@click.option("--input-format", "old_input_format", default=None, hidden=True, help="Old name of --format.")
@chunk_options
@field_options
@run_options
@click.pass_context
def command(ctx, inputs, nparts, output, part_format, start, stop, step, begin, end, dt, on_overlap, on_truncated,
            input_format, old_input_format, force, progress, as_json, **h5md_options):
    """Split one trajectory into N part files plus a manifest, for one file per rank.

    Several INPUT files are segments of one trajectory. Parts are named part-0001.xtc, ...
    so they sort in order; DIR/manifest.json describes them, with each part's frames,
    first and last step and time (read by 'bench rmsd' and 'validate'). Run under
    mpirun/srun to write parts in parallel; a rank may write several parts or none.

    Frames: all, or those picked by number (--start/--stop/--step) or by time in ps
    (-b/-e/--dt, as gmx trjconv); the parts keep the source's steps and times, and the
    manifest numbers the frames split from 0.

    The atom options (--topology, --select, -n, --atom-indices), the layout options
    (--chunk-frames to --shuffle) and --no-velocities/--no-forces shape H5MD parts
    (--output-format h5md) as they shape convert's output; with --output-format same they are refused. A DCD part gets the header of the segment it comes from; a part that
    would span DCD segments whose headers disagree is refused (use --output-format h5md).

    Parts are written into a hidden directory inside DIR and moved into place, the
    manifest last, when every rank succeeded; on an error or a signal (Ctrl-C, SIGTERM,
    SIGHUP) DIR is left as it was.

    \b
    Examples:
      h5mdtool split md.xtc --nparts 64 -o md-parts/
      h5mdtool split run1.xtc run2.xtc --nparts 16 -o parts/ --on-overlap later
      h5mdtool split md.xtc --nparts 8 -b 1000 -e 5000 --dt 10 -o parts/
      mpirun -n 8 h5mdtool split md.dcd --nparts 32 -o parts/ --output-format h5md --compression gzip
      h5mdtool split md.trr --nparts 4 -o parts/ --output-format h5md -n index.ndx -s Protein --no-forces
    """
    from ..subfiles.split import split

    part_format, input_format = resolve_format_names(part_format, input_format, old_input_format)
    comm = resolve()
    summary = split(
        list(inputs), output, nparts, comm=comm, format=part_format, start=start, stop=stop, step=step, begin=begin,
        end=end, dt=dt, on_overlap=on_overlap,
        on_truncated=on_truncated, input_format=input_format, force=force, progress=progress, **given_on_command_line(ctx, H5MD_PART_PARAMETERS),
    )
    if comm.rank != 0:
        return
    if as_json:
        emit_json(summary)
        return
    sizes = sorted({part["n_frames"] for part in summary["parts"]})
    per_part = "-".join(map(str, sizes[::len(sizes) - 1] if len(sizes) > 1 else sizes))
    click.echo(
        f"wrote {summary['n_parts']} {summary['format']} parts to {summary['output']}: "
        f"{summary['n_frames']} frames x {summary['n_atoms']} atoms, {per_part} frame{'s' if sizes[-1] > 1 else ''} "
        f"per part, {human_bytes(summary['bytes'])}"
    )
    click.echo(f"frames: {frames_phrase(summary['frames'])}")
    for dropped in summary["dropped"]:
        click.echo(f"dropped {dropped['n_frames']} frame(s) of {dropped['path']}: {dropped['reason']}")
    click.echo(f"manifest: {summary['manifest']}")
    click.echo(
        f"{summary['seconds']:.2f} s on {summary['n_ranks']} rank(s): "
        f"{human_rate(summary['megabytes_per_second'], 'MB/s')}"
    )

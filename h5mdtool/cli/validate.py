"""``h5mdtool validate``."""

import sys

import click

from .options import deprecation_note, emit_json, input_format_option, segment_options, truncation_option


def expand_greedy(args, option="--against", value_options=()):
    """The older spelling of *option* with several values, rewritten as one value per use.

    ``--against`` takes one source segment per use (``--against a.xtc --against b.xtc``),
    so ``validate --against md.xtc file.h5md`` validates file.h5md. It used to take every
    following argument up to the next option; scripts that put the files first
    (``validate file.h5md --against a.xtc b.xtc``) keep working: after the files, the
    arguments following one ``--against`` are its segments, as before.

    Parameters
    ----------
    args : list of str
    option : str
    value_options : collection of str
        The command's other options that take a value (their values are not files).

    Returns
    -------
    (list of str, list of str)
        The arguments, and the segments taken the older way (for a deprecation note).
    """
    out, older = [], []
    files_given = in_against = expects_value = False
    for position, token in enumerate(args):
        if expects_value:
            out.append(token)
            expects_value = False
            in_against = out[-2] == option
        elif token == "--":
            return out + list(args[position:]), older
        elif token.startswith("-") and token != "-":
            out.append(token)
            name = token.split("=", 1)[0]
            in_against = name == option and "=" in token
            expects_value = "=" not in token and (name == option or name in value_options)
        elif in_against and files_given:
            out += [option, token]
            older.append(token)
        else:
            out.append(token)
            files_given, in_against = True, False
    return out, older


class GreedyCommand(click.Command):
    """A command whose ``--against`` still takes several values after the files, the older way."""

    def parse_args(self, ctx, args):
        value_options = {name for param in self.params if isinstance(param, click.Option) and not param.is_flag
                         for name in param.opts}
        args, older = expand_greedy(list(args), value_options=value_options)
        if older:
            deprecation_note(f"one --against for several segments ({' '.join(older)} after its first)",
                             "--against once per segment")
        return super().parse_args(ctx, args)


@click.command("validate", cls=GreedyCommand)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--profile", type=click.Choice(["h5md", "mdanalysis", "all"]), default="all", show_default=True,
              help="h5md: the H5MD 1.1 rules; mdanalysis: what MDAnalysis's H5MDReader needs (and a read of the first and last frames); all: both plus the layout lint.")
@click.option("--against", multiple=True, metavar="SOURCE",
              help="Source trajectory the files were made from (any format convert reads); repeat it for each segment, in order (--against part1.xtc --against part2.xtc). Every frame's positions, velocities, forces, step, time and box are compared; frames are divided among MPI ranks.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=None,
              help="Absolute tolerance of --against, in nm for positions and box (nm/ps, kJ/(mol nm) for velocities, forces). Default: exact for float32 sources in the file's units (XTC, TRR), the box included; 2.5e-7 relative where units are converted (DCD; the box within 1e-6 of its largest edge); half the recorded precision of lossy files. A NaN or inf on either side is a difference whatever the tolerance.")
@input_format_option("--against-format", dest="against_format", subject="the --against source's files")
@segment_options
@truncation_option
@click.option("--strict", is_flag=True, help="Warnings fail too (exit status 1).")
@click.option("--checksums/--no-checksums", default=True, show_default=True,
              help="Verify the checksum split recorded for each part of a manifest (version 3): every part is read whole, the parts shared among MPI ranks. --no-checksums skips it, for speed (the first and last frames of each part are still checked).")
@click.option("--notes", is_flag=True, help="Also print notes (points of the specification no known reader depends on); --json always has them.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: files, findings (rule, severity, path, message, fix), comparisons, totals, exit code.")
@click.option("--progress/--no-progress", default=None, help="Progress on rank 0 for --against, as for convert: a live bar when the output reaches a terminal (also through mpirun), lines under srun, nothing in logs.")
def command(files, profile, against, tolerance, against_format, on_overlap, on_truncated, strict, checksums, notes,
            as_json, progress):
    """Check H5MD files: H5MD 1.1 conformance, MDAnalysis readability, layout lint, data.

    The data rules need no source: frames of zeros, NaN or inf, frames far outside the box,
    steps or times that go backwards, boxes of zero volume, data declared but never stored.
    They read the per-atom data once, in bounded blocks (seconds for a 2 GiB file).

    FILE may also be a split manifest (manifest.json, or the directory holding it): its
    document, and its parts' existence, sizes, frame and atom counts, order and identity
    (swapped or duplicated parts) are checked, and each part's bytes against the checksum
    split recorded (any changed byte is found); H5MD parts are validated too. Every finding
    has a stable rule id (docs/validation.md).

    Serial runs read each file in a child process: a libhdf5 crash, or no progress for
    H5MDTOOL_READ_TIMEOUT seconds (default 60), becomes a finding instead of a hang.

    Exit status: 0 no errors (warnings allowed unless --strict); 1 errors found, or a file
    could not be read at all (missing, a directory, a FIFO, not HDF5, truncated: one
    'error:' line each, the other files still checked); 2 a wrong command line.

    \b
    Examples:
      h5mdtool validate md.h5md
      h5mdtool validate md.h5md --against part1.xtc --against part2.xtc
      h5mdtool validate md.h5md --against crashed.xtc --on-truncated drop
      mpirun -n 4 h5mdtool validate md.h5md --against md.xtc --json
      h5mdtool validate parts/manifest.json --against md.xtc
      h5mdtool validate md.h5md --against-format LAMMPS --against lammps.dcd
    """
    from ..check.validate import validate
    from ..parallel.mpi import resolve

    comm = resolve()
    report = validate(list(files), comm=comm, profile=profile, against=list(against), tolerance=tolerance,
                      strict=strict, progress=progress, on_overlap=on_overlap, on_truncated=on_truncated,
                      against_format=against_format, checksums=checksums)
    if comm.rank == 0:
        if as_json:
            emit_json(report.as_dict())
        else:
            print_report(report, notes)
    sys.exit(report.exit_code)


def _plural(count, word):
    return f"{count} {word}{'' if count == 1 else 's'}"


def print_report(report, notes=False):
    """The human-readable report: findings per file, then totals."""
    for file in report.files:
        if not file.readable:
            for finding in file.findings:
                click.echo(f"error: {finding.message} ({finding.rule})", err=True)
            continue
        counts = [_plural(file.count(s), s) for s in ("error", "warning", "note") if file.count(s)]
        click.echo(f"{file.file}: {', '.join(counts) if counts else 'no findings'}")
        for finding in file.findings:
            if not finding.shown(notes):
                continue
            click.echo(f"  {finding.severity:<7} {finding.rule} {finding.path}: {finding.message}")
            if finding.fix:
                click.echo(f"          fix: {finding.fix}")
        hidden = sum(not finding.shown(notes) for finding in file.findings)
        if hidden:
            click.echo(f"  ({_plural(hidden, 'note')} not shown: --notes)")
        comparison = file.comparison
        if comparison and comparison.get("compared_frames") is not None and not comparison.get("n_differing"):
            by_id = comparison.get("atoms_by_id")
            if (comparison["n_atoms"] == comparison["source_n_atoms"] or by_id) and comparison["compared_frames"]:
                fields = comparison["fields"] + (["box"] if comparison["box_compared"] else []) + ["step"]
                if comparison.get("time_compared", True):
                    fields.append("time")
                atoms = (f"; its {comparison['n_atoms']} atoms against the source's atoms of the same id "
                         f"(of {comparison['source_n_atoms']})" if by_id else "")
                click.echo(f"  {comparison['compared_frames']} frames equal to the source ({', '.join(fields)}) "
                           f"on {_plural(comparison['n_ranks'], 'rank')}{atoms}"
                           + ("" if comparison.get("time_compared", True) else "; time not compared: the file stores none"))
    if len(report.files) > 1:
        click.echo(f"{_plural(len(report.files), 'file')}: {_plural(report.errors, 'error')}, "
                   f"{_plural(report.warnings, 'warning')}"
                   + (f", {_plural(len(report.unreadable), 'unreadable file')}" if report.unreadable else ""))

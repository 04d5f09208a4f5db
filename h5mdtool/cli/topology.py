"""``h5mdtool topology``."""

import click

from ..h5md.topology import TOPOLOGY_FORMATS
from ..parallel.errors import UsageError
from .options import deprecation_note, emit_json


@click.command("topology")
@click.argument("file", metavar="FILE")
@click.option("--output", "-o", required=True, metavar="FILE", help="Topology file to write (.pdb, .gro or .psf).")
@click.option("--output-format", "fmt", type=click.Choice(TOPOLOGY_FORMATS), default=None, help="Format written. Default: from the output's extension.")
@click.option("--format", "old_fmt", type=click.Choice(TOPOLOGY_FORMATS), default=None, hidden=True, help="Old name of --output-format.")
@click.option("--frame", type=int, default=0, show_default=True, help="Frame whose positions go into PDB and GRO files (0-based; negative counts from the end).")
@click.option("--force", is_flag=True, help="Replace an existing output.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def command(file, output, fmt, old_fmt, frame, force, as_json):
    """Write the topology an H5MD file carries (convert --topology stores one) for other programs.

    The atoms are the file's own (a --select'ed file gives the selected atoms), with names,
    types, elements, residues, chains, segments, masses, charges and bonds as the source
    topology had them, as far as the format written holds them, so MDAnalysis, VMD or
    GROMACS tools can read FILE with it. Positions (PDB, GRO) are those of --frame.

    \b
    Examples:
      h5mdtool convert md.xtc -t md.tpr -s protein -o protein.h5md
      h5mdtool topology protein.h5md -o protein.pdb
      h5mdtool topology protein.h5md -o protein.psf
    """
    from ..h5md.topology import write_topology_file
    from ..mdanalysis import H5MDToolReader  # registers h5mdtool's reader: every layout h5mdtool writes

    if old_fmt is not None:
        deprecation_note("topology --format", "--output-format (--format names input formats)")
        if fmt is not None:
            raise UsageError("--format is the old name of --output-format: give --output-format alone")
        fmt = old_fmt
    summary = write_topology_file(file, output, format=fmt, frame=frame, force=force,
                                  trajectory_format=H5MDToolReader.format)
    if as_json:
        emit_json(summary)
        return
    click.echo(f"wrote {summary['output']}: {summary['format'].upper()}, {summary['atoms']} atoms in "
               f"{summary['residues']} residues")

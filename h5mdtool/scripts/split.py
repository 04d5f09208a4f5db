"""``h5mdtool split``."""

import click

from ..mpi import resolve
from .options import emit_json, human_bytes, run_options, segment_options, SIZE  # noqa: F401


@click.command("split")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--nparts", "-n", type=click.IntRange(min=1), required=True, help="Number of parts (balanced: sizes differ by at most one frame). Independent of the number of ranks; at most the frame count.")
@click.option("--output", "-o", required=True, help="Directory for the parts and manifest.json (created; refused when not empty without --force).")
@click.option("--format", "part_format", type=click.Choice(["same", "h5md"]), default="same", show_default=True, help="same: parts in the input's format, frames copied byte for byte (XTC, TRR, DCD); h5md: H5MD parts with the layout options below.")
@segment_options
@click.option("--chunk-frames", default="1", show_default=True, help="H5MD parts: frames per chunk, or 'auto'.")
@click.option("--contiguous", is_flag=True, help="H5MD parts: no chunking (uncompressed only).")
@click.option("--compression", type=click.Choice(["none", "gzip", "lzf"]), default="none", show_default=True, help="H5MD parts: compression filter.")
@click.option("--compression-level", type=click.IntRange(0, 9), default=None, help="H5MD parts: gzip level 0-9. Default: 4.")
@click.option("--shuffle/--no-shuffle", default=None, help="H5MD parts: byte shuffle before compressing. Default: on when compressing.")
@click.option("--precision", type=click.FloatRange(min=1e-6), default=None, help="H5MD parts: lossy positions, error at most PRECISION/2 nm.")
@run_options
def command(inputs, nparts, output, part_format, on_overlap, chunk_frames, contiguous, compression,
            compression_level, shuffle, precision, force, progress, as_json):
    """Split one trajectory into N part files plus a manifest, for one file per rank.

    Several INPUT files are segments of one trajectory. Parts are named part-0001.xtc, ...
    so they sort in order; DIR/manifest.json describes them (read by 'bench rmsd' and
    'validate'). Run under mpirun/srun to write parts in parallel.

    \b
    Examples:
      h5mdtool split md.xtc --nparts 64 -o md-parts/
      mpirun -n 8 h5mdtool split md.dcd -n 32 -o parts/ --format h5md --compression gzip
    """
    from ..split import split

    chunk = chunk_frames if chunk_frames == "auto" else int(chunk_frames)
    comm = resolve()
    summary = split(
        list(inputs), output, nparts, comm=comm, format=part_format, on_overlap=on_overlap,
        force=force, progress=progress, chunk_frames=chunk, contiguous=contiguous,
        compression=compression, compression_level=compression_level, shuffle=shuffle,
        precision=precision,
    )
    if comm.rank != 0:
        return
    if as_json:
        emit_json(summary)
        return
    sizes = [part["n_frames"] for part in summary["parts"]]
    click.echo(
        f"wrote {summary['n_parts']} {summary['format']} parts to {summary['output']}: "
        f"{summary['n_frames']} frames x {summary['n_atoms']} atoms, {min(sizes)}-{max(sizes)} frames "
        f"per part, {human_bytes(summary['bytes'])}"
    )
    click.echo(f"manifest: {summary['manifest']}")
    click.echo(
        f"{summary['seconds']:.2f} s on {summary['n_ranks']} rank(s): "
        f"{summary['megabytes_per_second']:.0f} MB/s"
    )

"""``h5mdtool convert``."""

import click

from ..mpi import resolve
from .options import atom_options, emit_json, frame_options, human_bytes, layout_options, run_options, segment_options, SIZE


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--output", "-o", required=True, help="H5MD file to write (written under a temporary name, renamed when complete).")
@atom_options
@frame_options
@click.option("--velocities/--no-velocities", default=True, show_default=True, help="Write TRR velocities when present.")
@click.option("--forces/--no-forces", default=True, show_default=True, help="Write TRR forces when present.")
@segment_options
@layout_options
@click.option("--block-size", type=SIZE, default="32M", show_default=True, help="Memory for one block of frames (bytes, K/M/G); each rank holds two, decoding one while writing the other.")
@click.option("--author", default=None, help="Author name recorded in /h5md/author. Default: the user name.")
@run_options
def command(inputs, output, topology, select, start, stop, step, velocities, forces, on_overlap,
            chunk_frames, precision, contiguous, compression, compression_level, shuffle, stripe_count,
            stripe_size, block_size, author, force, progress, as_json):
    """Convert XTC, TRR, DCD or H5MD trajectories into one H5MD 1.1 file.

    Several INPUT files are segments of one trajectory, concatenated in order (as
    'gmx mdrun -noappend' leaves them). An H5MD input is rewritten with the new layout
    (relayout) and everything else in it is carried over. Positions are stored as float32 in nm, time in ps,
    steps as int64, with frame-shaped chunks. Run under mpirun/srun to write in parallel.

    \b
    Examples:
      h5mdtool convert md.xtc -o md.h5md
      mpirun -n 4 h5mdtool convert part*.xtc -o md.h5md --compression gzip
      h5mdtool convert md.trr -t md.tpr -s protein -o protein.h5md --no-forces
      h5mdtool convert autochunked.h5md -o fast.h5md --chunk-frames auto
    """
    from ..convert import convert

    comm = resolve()
    summary = convert(
        list(inputs), output, comm=comm, topology=topology, select=select, start=start,
        stop=stop, step=step, velocities=velocities, forces=forces, on_overlap=on_overlap,
        chunk_frames=chunk_frames, contiguous=contiguous, compression=compression,
        compression_level=compression_level, shuffle=shuffle, precision=precision, stripe_count=stripe_count,
        stripe_size=stripe_size, force=force, progress=progress, block_bytes=block_size,
        author=author,
    )
    if comm.rank != 0:
        return
    if as_json:
        emit_json(summary)
        return
    layout = summary["layout"]
    chunks = "contiguous" if layout["contiguous"] else f"chunks of {min(layout['chunk_frames'], summary['n_frames'])} frame(s)"
    compression = layout["compression"]
    if compression == "gzip":
        compression += f" level {layout['compression_level']}"
    if layout["shuffle"]:
        compression += " + shuffle"
    if layout["precision"] is not None:
        compression = f"scale-offset {layout['precision']} nm + {compression}"
    click.echo(
        f"wrote {summary['output']}: {summary['n_frames']} frames x {summary['n_atoms']} atoms "
        f"({', '.join(summary['fields'])}), {human_bytes(summary['bytes'])}"
    )
    click.echo(f"layout: {chunks}, compression {compression}, box {'periodic' if summary['periodic'] else 'none'}")
    click.echo(f"chunks: {layout['chunk_reason']}")
    if layout["stripe_count"] is not None or layout["stripe_size"] is not None:
        click.echo(f"striping: lfs setstripe {summary['stripe_applied']}; {layout['alignment_reason']}")
    if summary.get("relayout"):
        relayout = summary["relayout"]
        click.echo(f"carried over from the H5MD input: {len(relayout['copied'])} object(s)"
                   + (f"; left out: {', '.join(relayout['skipped'])}" if relayout["skipped"] else ""))
    click.echo(
        f"{summary['seconds']:.2f} s on {summary['n_ranks']} rank(s): "
        f"{summary['frames_per_second']:.0f} frames/s, {summary['megabytes_per_second']:.1f} MB/s"
    )

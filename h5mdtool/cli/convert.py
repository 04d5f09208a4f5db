"""``h5mdtool convert``."""

import click

from ..formats.frametimes import frames_phrase
from ..parallel.mpi import resolve
from ..parallel.sizes import human_bytes, human_rate
from .options import (
    SIZE, atom_options, emit_json, field_options, frame_options, input_format_option, layout_options, run_options,
    segment_options, time_options, truncation_option
)


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--output", "-o", default=None, metavar="FILE", help="H5MD file to write (written under a temporary name, renamed when complete); a name ending in another format's extension (.xtc, .pdb, ...) is refused.")
@click.option("--append", "append_to", default=None, metavar="FILE", help="Instead of --output: add the frames of INPUT... to FILE, an H5MD file written by h5mdtool, in its own layout. The frames must follow its last step (--on-overlap later replaces the file's frames from the first new step on, first drops the new frames the file holds). Interrupted, FILE keeps its old frames: the new ones become visible all at once at the end.")
@atom_options
@frame_options
@time_options
@field_options
@segment_options
@truncation_option
@input_format_option("--format")
@click.option("--group", default=None, metavar="NAME", help="H5MD input: the particle group to read. Default: the first one listed, the one MDAnalysis reads.")
@layout_options
@click.option("--block-size", type=SIZE, default=None, help="Memory for one block of frames (bytes, K/M/G); each rank holds two, decoding one while writing the other, and each block is one (collective) write. Default: 32M on one rank, 2M per rank under mpirun/srun, where smaller rounds were faster (docs/performance.md).")
@click.option("--threads", type=click.IntRange(min=0), default=None, metavar="N", help="Threads per process that compress chunks outside HDF5 (stored with its direct chunk write) while the next frames are decoded; 0: HDF5's own filters, inside its writes. One process: default one per core for gzip (whose compressing outweighs decoding: 600x AdK in 33 s on 2 cores against 61 s with HDF5's filter), HDF5's own filters for the other codecs (as fast on the 2-core machine measured; docs/performance.md). With --parallel-compression ranks: default 1 per rank.")
@click.option("--parallel-compression", type=click.Choice(["hdf5", "ranks"]), default="hdf5", show_default=True, help="Compressed output under mpirun/srun: 'hdf5': parallel HDF5 compresses inside its collective writes, every rank writing its chunks; 'ranks': each rank compresses its own chunks (--threads each) and rank 0 writes them all into a file it opens alone, so the compression scales with the ranks and the writing does not. Neither was clearly faster on 2 ranks of the 2-core machine measured (docs/performance.md). lzf always uses HDF5's.")
@click.option("--author", default=None, metavar="NAME", help="Author name recorded in /h5md/author. Default: the user name.")
@run_options
def command(inputs, output, append_to, topology, select, atom_indices_file, index_file, start, stop, step, begin, end, dt,
            velocities, forces, on_overlap, on_truncated,
            input_format, group, chunk_frames, precision, velocity_precision, force_precision, contiguous,
            compression, compression_level, shuffle, split_xyz, stripe_count, stripe_size, block_size, threads, parallel_compression,
            author, force, progress, as_json):
    """Convert MD trajectories into one H5MD 1.1 file.

    Inputs: GROMACS XTC, TRR and TNG; CHARMM/NAMD DCD (LAMMPS DCD with --format LAMMPS);
    AMBER NetCDF; TRZ, GSD and LAMMPS dump (through MDAnalysis's readers); H5MD. Not read:
    multi-model GRO and PDB, XYZ, AMBER ASCII trajectories (write them as XTC or DCD first).
    Several INPUT files are segments of one trajectory, concatenated in order (as
    'gmx mdrun -noappend' leaves them). An H5MD input is rewritten with the new layout
    (relayout) and everything else in it is carried over. Positions are stored as float32
    in nm (float64 when the input is double precision), time in ps, steps as int64, with
    frame-shaped chunks. Velocities and forces are written wherever frames hold them, with
    their own steps when saved at other frames than the positions. Every frame header is
    checked before anything is decoded, and every decoded value must be finite. Run under
    mpirun/srun to write in parallel.

    \b
    Guarantees: XTC/TRR values bit for bit; DCD positions within half a unit in the last
    place of the nm value; --precision Q within Q/2; or an error, never silent change.

    \b
    Examples:
      h5mdtool convert md.xtc -o md.h5md
      mpirun -n 4 h5mdtool convert part*.xtc -o md.h5md --compression gzip
      h5mdtool convert md.trr -t md.tpr -s protein -o protein.h5md --no-forces
      h5mdtool convert md.xtc -n index.ndx -s Protein -b 1000 -e 5000 --dt 10 -o prot.h5md
      h5mdtool convert md.xtc -o small.h5md --precision 0.001
      h5mdtool convert crashed.xtc -o md.h5md --on-truncated drop
      h5mdtool convert autochunked.h5md -o fast.h5md --chunk-frames auto
      mpirun -n 4 h5mdtool convert next_part.xtc --append md.h5md
    """
    from ..conversion.convert import convert

    comm = resolve()
    if append_to is not None or output is None:
        from ..conversion.append import append, check_append_options
        from ..parallel.errors import UsageError

        if append_to is None:
            raise UsageError("give the output file with --output FILE (or --append FILE to extend one)")
        check_append_options(output, append_to, topology=topology, select=select, atom_indices_file=atom_indices_file,
                             index_file=index_file, start=start, stop=stop, step=step, begin=begin, end=end, dt=dt,
                             group=group, chunk_frames=chunk_frames,
                             precision=precision, velocity_precision=velocity_precision,
                             force_precision=force_precision, contiguous=contiguous, compression=compression,
                             compression_level=compression_level, shuffle=shuffle, split_xyz=split_xyz,
                             stripe_count=stripe_count,
                             stripe_size=stripe_size, author=author, force=force, threads=threads,
                             parallel_compression=parallel_compression)
        summary = append(list(inputs), append_to, comm=comm, on_overlap=on_overlap, on_truncated=on_truncated,
                         format=input_format, velocities=velocities, forces=forces, progress=progress,
                         block_bytes=block_size)
        if comm.rank == 0:
            if as_json:
                emit_json(summary)
            else:
                click.echo(f"appended {sum(summary['n_frames_added'])} frame(s) to {summary['target']} "
                           f"after its {summary['n_frames_before'][0]} in {summary['seconds']:.2f} s on "
                           f"{summary['n_ranks']} rank(s)")
                for note in summary["notes"]:
                    click.echo(f"note: {note}")
        return
    summary = convert(
        list(inputs), output, comm=comm, topology=topology, select=select, index_file=index_file,
        atom_indices_file=atom_indices_file, start=start, stop=stop, step=step, begin=begin, end=end, dt=dt,
        velocities=velocities, forces=forces, on_overlap=on_overlap,
        on_truncated=on_truncated, format=input_format, group=group,
        chunk_frames=chunk_frames, contiguous=contiguous, compression=compression,
        compression_level=compression_level, shuffle=shuffle, split_xyz=split_xyz, precision=precision,
        velocity_precision=velocity_precision, force_precision=force_precision, stripe_count=stripe_count,
        stripe_size=stripe_size, force=force, progress=progress, block_bytes=block_size, threads=threads,
        parallel_compression=parallel_compression, author=author,
    )
    if comm.rank != 0:
        return
    if as_json:
        emit_json(summary)
        return
    print_summary(summary)


def describe_compression(layout):
    """One phrase for the filters and encoding of a layout record."""
    compression = layout["compression"]
    if compression == "gzip":
        compression += f" level {layout['compression_level']}"
    if layout["shuffle"]:
        compression += " + shuffle"
    encoding = layout.get("positions_encoding")
    if encoding:
        compression = (f"positions as {encoding['dtype']} {encoding['unit']} on a {encoding['grid_step_nm']:g} nm grid "
                       f"(error <= {encoding['max_error_nm']:g} nm), {compression}")
    for field, unit in (("velocities", "nm/ps"), ("forces", "kJ/(mol nm)")):
        encoding = layout.get(f"{field}_encoding")
        if encoding:
            compression += f", {field} on a {encoding['grid_step']:g} {unit} grid (error <= {encoding['max_error']:g})"
    return compression


def describe_striping(applied, n_ranks):
    """What became of the asked Lustre striping (``lfs_setstripe``'s outcome), in words."""
    hints = "; the MPI-IO hints were passed" if n_ranks > 1 else ""
    if applied == "applied":
        return "set with lfs setstripe" + hints
    if applied == "lfs not found":
        return "not set: no lfs command (not a Lustre client)" + hints
    return f"not set: lfs setstripe {applied}" + hints


def print_summary(summary):
    """The end-of-run summary of convert, for people."""
    layout = summary["layout"]
    chunks = "contiguous" if layout["contiguous"] else f"chunks of {min(layout['chunk_frames'], summary['n_frames'])} frame(s)"
    click.echo(
        f"wrote {summary['output']}: {summary['n_frames']} frames x {summary['n_atoms']} atoms "
        f"({', '.join(summary['fields'])}), {human_bytes(summary['bytes'])}"
    )
    click.echo(f"frames: {frames_phrase(summary['frames'])}")
    boundary = summary["boundary"]
    box = "none" if not summary["box"] else ("periodic" if set(boundary) == {"periodic"} else "/".join(boundary))
    click.echo(f"layout: {chunks}, compression {describe_compression(layout)}, box {box}")
    click.echo(f"chunks: {layout['chunk_reason']}")
    if summary.get("compressed_by") == "ranks":
        click.echo(f"compressed by each of the {summary['n_ranks']} ranks ({summary['threads']} thread(s) each), "
                   "written by rank 0")
    elif summary.get("threads"):
        click.echo(f"compressed in {summary['threads']} thread(s) per rank")
    if layout["stripe_count"] is not None or layout["stripe_size"] is not None:
        click.echo(f"striping: {describe_striping(summary['stripe_applied'], summary['n_ranks'])}; "
                   f"{layout['alignment_reason']}")
    if summary.get("topology"):
        topology = summary["topology"]
        click.echo(f"topology: {topology['atoms']} atoms, {topology['residues']} residues, {topology['bonds']} bonds "
                   f"from {topology['source']} (read it back with 'h5mdtool topology')")
    for note in summary["notes"]:
        click.echo(f"note: {note}")
    if summary.get("relayout"):
        relayout = summary["relayout"]
        click.echo(f"carried over from the H5MD input: {len(relayout['copied'])} object(s) as they were"
                   + (f", {len(relayout['reduced'])} reduced to the frames and atoms written" if relayout["reduced"] else ""))
        for skipped in relayout["skipped"]:
            click.echo(f"note: left out {skipped}")
    click.echo(
        f"{summary['seconds']:.2f} s on {summary['n_ranks']} rank(s): "
        f"{human_rate(summary['frames_per_second'], 'frames/s')}, {human_rate(summary['megabytes_per_second'], 'MB/s')}"
    )

"""``h5mdtool bench``: benchmarks (``bench rmsd``, ``bench dihedrals``, ``bench report``)."""

import json
import os

import click

from ..bench.references import cite
from ..parallel.errors import UsageError, mark_collective
from ..parallel.sizes import human_bytes
from .options import compose, emit_json, input_format_option, select_not_a_file


#: bench rmsd's and bench dihedrals' --read-ahead-mb
READ_AHEAD_OPTION = click.option(
    "--read-ahead-mb", type=click.IntRange(min=0), default=None, metavar="MIB",
    help="While rank 0 resolves the analysis (topology, selections, reference), every other rank reads whole "
         "frames of its share, up to MIB MiB each, and rank 0 then hands them the end of its share, so its setup "
         "is shared instead of waited for (blocks engine, frames chosen by number; a split trajectory's end of "
         "rank 0's part goes in pieces of 256 frames at least). 0: off. Default: a quarter of the node's available "
         "memory divided among its ranks, at most 2048.")


@click.group("bench")
def command():
    """Benchmarks of parallel trajectory analysis, timed per MPI rank.

    \b
    Examples:
      mpirun -n 4 h5mdtool bench rmsd md.h5md -t md.tpr --out rmsd-4.json
      mpirun -n 4 h5mdtool bench dihedrals md.h5md -t md.tpr
      h5mdtool bench report rmsd-*.json --plot scaling.png
    """


def _check_outputs(outputs, inputs, force, plot_path):
    """Rank 0, before the run: every output may be written (*outputs*: option -> path or
    None; *inputs*: paths, None for a topology not given); matplotlib is there for --plot."""
    from ..bench.plots import _pyplot, image_format
    from ..parallel.outputs import check_output_file

    names = [path for path in outputs.values() if path is not None]  # an empty name is refused, not ignored
    if len(set(map(os.path.abspath, names))) != len(names):
        raise UsageError(f"{', '.join(list(outputs)[:-1])} and {list(outputs)[-1]} must name different files")
    inputs = [path for path in inputs if path is not None]
    for path in names:
        check_output_file(path, inputs=inputs, force=force)
    if plot_path:
        image_format(plot_path)
        _pyplot()  # fails with a message naming the 'plot' extra


def _write(path, write):
    """Call ``write(temporary_path)``, then move the complete file to *path*."""
    from ..parallel.outputs import publish, remove_quietly, temporary_name, write_failures_reported

    temporary = temporary_name(path)
    try:
        with write_failures_reported(temporary, path):
            write(temporary)
        publish(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise


def _write_stream(path, write, binary=False):
    """Like :func:`_write`, with ``write(handle)`` given the open temporary file."""

    def to_file(temporary):
        with open(temporary, "wb" if binary else "w") as handle:
            write(handle)

    _write(path, to_file)


def _save_json(document, path):
    def write(handle):
        json.dump(document, handle, indent=2, default=str)
        handle.write("\n")

    _write_stream(path, write)


def _fmt(value, width=8, digits=3):
    return f"{value:>{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def _layout(source):
    """The input's format and layout for a report's first line."""
    layout = ", ".join(f"{key} {source[key]}" for key in ("layout", "chunks", "compression", "parts")
                       if source.get(key) is not None)
    return f"{source['format']}; {layout}"


def print_rmsd_report(report):
    """The per-rank table of every run, stragglers, partition and advice."""
    source, analysis = report["input"], report["analysis"]
    groups = "".join(f", then {g['label']!r} ({g['n']} atoms)" for g in analysis["atoms"]["groups"])
    reference = analysis["reference"]
    reference = (f"frame {reference['frame']}" if reference["kind"] == "frame"
                 else os.path.basename(reference["path"]))
    click.echo(f"bench rmsd: {source['path']} ({_layout(source)}), {report['n_analysed']} of "
               f"{report['n_frames']} frames, fit {analysis['atoms']['fit']['label']!r} "
               f"({report['n_selected']} atoms){groups}, weights {analysis['weights']}, reference {reference}, "
               f"engine {report['engine']}, compute load {report['compute_load']}, {report['n_ranks']} rank(s)")
    topology = report["topology"]
    click.echo(f"topology: {topology['path'] if topology.get('source', 'file') == 'file' else topology['source']}")
    print_runs(report)


def print_runs(report):
    """Partition, the per-rank table of every run, stragglers and advice (any benchmark)."""
    from ..bench.timing import describe_stragglers, work

    source = report["input"]
    partition = report["partition"]
    if partition["scheme"] == "parts":
        click.echo(f"partition: whole parts, {partition['units'] // report['n_ranks']} of {partition['units']} per rank")
    elif source.get("layout") == "split":
        click.echo(f"partition: balanced frames; {partition['shared_units']} of {partition['units']} parts read by "
                   f"two or more ranks ({report['n_ranks']} ranks do not divide {partition['units']} parts)")
    elif partition["scheme"] == "chunks":
        click.echo(f"partition: whole chunks ({partition['units']} chunks)")
    header = ("rank  frames  init_top init_traj       io  compute     wait     comm    total     work"
              "     MB/s  files  host")
    for run in report["runs"]:
        click.echo(f"run {run['repeat'] + 1}/{len(report['runs'])}: t_total {run['t_total']:.3f} s (seconds per phase; "
                   "work = the rank's own io + compute; rank 0's: with the part of its setup the others overlapped, "
                   "without the serial part)")
        click.echo(header)
        for r in run["ranks"]:
            click.echo(f"{r['rank']:>4} {r['n_frames']:>7} {r['t_init_top']:>9.3f} {r['t_init_traj']:>9.3f} "
                       f"{r['t_io']:>8.3f} {r['t_compute']:>8.3f} {r['t_wait']:>8.3f} {r['t_comm']:>8.3f} "
                       f"{r['t_total']:>8.3f} {work(r):>8.3f} {_fmt(r.get('mb_per_s'), 8, 1)} "
                       f"{r.get('files_opened', 0):>6}  {r['host']}")
        _print_read_ahead(run, partition)
        if run.get("t_serial") is not None:
            click.echo(f"serial part: {run['t_serial']:.3f} s ({100 * (run['serial_fraction'] or 0):.1f}% of t_total), "
                       "rank 0 alone resolving the analysis (topology, selections, reference) while every other "
                       "rank waited idle")
        click.echo(describe_stragglers(run["stragglers"]))
    best = report["runs"][report["best_repeat"]]
    total_bytes = sum(r.get("bytes_read") or 0 for r in best["ranks"])
    click.echo(f"best run: {report['best_repeat'] + 1}, t_total {report['t_total']:.3f} s; "
               f"read {human_bytes(total_bytes)} in all")
    click.echo(f"advice: {report['advice']}")


def _print_read_ahead(run, partition):
    """What the other ranks read while rank 0 planned, and what rank 0 handed them."""
    planned = partition.get("planned_frames_per_rank")
    others = run["ranks"][1:]
    if planned is None or not others:
        return
    read = sum(r.get("n_read_ahead", 0) for r in others)
    setup = run["ranks"][0].get("t_serial") or 0.0
    handed = planned[0] - run["ranks"][0]["n_frames"]
    click.echo(f"read ahead: while rank 0 planned ({setup:.3f} s) the other ranks read {read} frames "
               f"({max(r.get('t_read_ahead', 0.0) for r in others):.3f} s at most); rank 0 handed them {handed} "
               f"of its {planned[0]} frames")


#: Options of every benchmark: the particle group, the input format and the frames analysed.
input_and_frames_options = compose(
    click.option("--group", default=None, metavar="NAME", help="H5MD particle group to read. Default: the first listed under /particles, the one MDAnalysis reads."),
    input_format_option("--format", subject="every INPUT file (not a split manifest)"),
    click.option("--start", type=int, default=None, help="First frame analysed (0-based, negative from the end), as MDAnalysis run(start=...). Default: 0."),
    click.option("--stop", type=int, default=None, help="Frame to stop before (exclusive). Default: the end."),
    click.option("--step", type=click.IntRange(min=1), default=None, help="Analyse every STEP-th frame. Default: 1."),
    click.option("-b", "begin", type=float, default=None, metavar="PS", help="First time analysed, in ps (gmx -b): frames with time >= B. Not with --start/--stop/--step."),
    click.option("-e", "end", type=float, default=None, metavar="PS", help="Last time analysed, in ps (gmx -e): frames with time <= E."),
    click.option("--dt", type=click.FloatRange(min=0, min_open=True), default=None, metavar="PS", help="Only frames whose time is a whole multiple of DT ps, counted from 0 ps (gmx rms -dt on TRR files). convert and split --dt count from the first frame kept instead (gmx trjconv)."),
)


@click.command("rmsd", epilog=f"The advice, the straggler limits and --compute-load follow {cite('khoshlessan2020')}.")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--topology", "-t", default=None, metavar="FILE", help="Topology read by MDAnalysis (PSF, GRO, TPR, PDB..., or an H5MD file carrying one); its atom count must match INPUT's. Default: the topology an H5MD INPUT carries (convert --topology stores one).")
@click.option("--select", "-s", default="name CA", show_default=True, metavar="SEL", callback=select_not_a_file(" (or --reference, gmx rms's -s)"), help="Fit group: an MDAnalysis selection, or with -n a group of the index file (name or number). Evaluated on the reference frame's coordinates (and box) from the trajectory, as MDAnalysis evaluates it on the current frame.")
@click.option("--calc-select", multiple=True, metavar="SEL", help="Further RMSD group, measured after the fit on --select without refitting (MDAnalysis's groupselections, gmx rms's calc group); repeat for several. Selection or index group.")
@click.option("--index", "-n", default=None, metavar="NDX", help="GROMACS index file; --select and --calc-select may name its groups by name or number (from 0, as gmx lists them).")
@click.option("--weights", type=click.Choice(["none", "mass"]), default="none", show_default=True, help="mass: mass-weighted fit and RMSD (MDAnalysis weights='mass'; gmx rms's default -mw). none: unweighted (MDAnalysis's default, gmx rms -nomw).")
@click.option("--reference", default=None, metavar="FILE", help="Structure file (PDB, GRO, ...) holding the reference, as gmx rms -s; selections are evaluated on it and on the trajectory's first frame. Default: --ref-frame of the trajectory.")
@click.option("--ref-frame", type=int, default=None, help="Reference frame of the trajectory (0-based; negative counts from the end). Default: 0.")
@input_and_frames_options
@click.option("--engine", type=click.Choice(["blocks", "frames"]), default="blocks", show_default=True, help="blocks: blocks of frames read at once (H5MD: only the span of the atoms used) and a batched numpy kernel; frames: MDAnalysis iterated frame by frame as the papers did (each load timed as I/O, each superposition as compute).")
@click.option("--block-frames", type=click.IntRange(min=1), default=None, help="Frames read and superposed at once per rank, bounding memory (capped at the frames a rank reads; for H5MD chunked by several frames, whole chunks, at least one). Default: as many as 8 MiB of the atoms read hold (about 200 AdK frames), so a block is still in the CPU's cache when it is gathered.")
@READ_AHEAD_OPTION
@click.option("--compute-load", type=click.IntRange(min=1), default=1, show_default=True, help="Repeat each superposition K times, as the 40x/70x/100x RMSD loads of Khoshlessan et al. 2020 (cited below): raises the compute/I-O ratio to see how the advice and the scaling change (a synthetic load; 'bench dihedrals' is the papers' real compute-bound workload).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Number of runs; the report's headline is the fastest, every run is kept.")
@click.option("--out", "out_path", default=None, metavar="FILE.json", help="Write the JSON report here (per-rank timings in seconds, bytes read, stragglers, compute/I-O ratio, advice, provenance).")
@click.option("--rmsd-out", default=None, metavar="FILE", help="Write the RMSDs (frame, time, fit group, then each --calc-select group) as .npy, .csv or GROMACS .xvg.")
@click.option("--time-unit", type=click.Choice(["ps", "ns"]), default="ps", show_default=True, help="Time unit of --rmsd-out (gmx rms -tu).")
@click.option("--rmsd-unit", type=click.Choice(["A", "nm"]), default="A", show_default=True, help="RMSD unit of --rmsd-out: Angstrom (MDAnalysis) or nm (gmx rms).")
@click.option("--plot", "plot_path", default=None, metavar="FILE", help="Draw per-rank bars of the phases of the fastest run, waiting shown apart (.png/.pdf/.svg; needs matplotlib, the 'plot' extra).")
@click.option("--force", is_flag=True, help="Replace existing --out, --rmsd-out and --plot files.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.option("--progress/--no-progress", default=None, help="Progress of each run on rank 0, per block of frames (its cost is negligible next to a block's read and fit). Default: a live bar when the output reaches a terminal, also under mpirun; sparse lines under srun; none in logs (docs/convert.md).")
def rmsd_command(inputs, topology, select, calc_select, index, weights, reference, ref_frame, group, input_format, start, stop,
                 step, begin, end, dt, engine, block_frames, read_ahead_mb, compute_load, repeat, out_path, rmsd_out, time_unit,
                 rmsd_unit, plot_path, force, as_json, progress):
    """RMSD after optimal superposition, frames split over MPI ranks, every phase timed.

    INPUT is an H5MD file (read with MPI-IO on several ranks), one or several trajectory
    files of any format convert reads (segments of one trajectory, shared by all ranks, which find XTC/TRR frame
    offsets together), or a split manifest.json or its directory (ranks read whole parts when their count divides
    the parts'). The RMSDs equal MDAnalysis's rms.RMSD(u, select=SEL, groupselections=...,
    weights=..., ref_frame=...).run(start, stop, step), and gmx rms with the same groups.

    Per rank, in seconds, adding up to t_total: t_init_top (topology, selections,
    reference), t_init_traj (inspecting and opening the trajectory, importing its
    decoders), t_io, t_compute, t_wait (any wait for another rank: for rank 0's setup, at
    a collective open, at the barrier after the loop), t_comm (broadcasts and the Gatherv
    of the results). While rank 0 resolves the analysis the other ranks read ahead
    (--read-ahead-mb) and take the end of its share; the serial part (rank 0 alone while
    every other rank waits idle) is reported apart. Stragglers are judged on each
    rank's own io + compute (the serial part left out); the compute/I-O ratio of the
    advice is the typical (median) rank's.

    \b
    Examples:
      h5mdtool bench rmsd md.h5md -t md.psf
      h5mdtool bench rmsd md.h5md                     # the topology convert -t stored in it
      mpirun -n 8 h5mdtool bench rmsd md.h5md -t md.tpr --repeat 3 --out rmsd-8.json
      mpirun -n 4 h5mdtool bench rmsd parts/ -t md.tpr --engine frames
      h5mdtool bench rmsd run1.xtc run2.xtc -t md.tpr -n index.ndx -s Backbone \\
          --calc-select Protein --weights mass -b 1000 --dt 10 --rmsd-out rmsd.xvg --rmsd-unit nm
      h5mdtool bench rmsd md.h5md -t md.tpr --reference start.pdb --compute-load 40
      h5mdtool bench rmsd lammps.dcd -t system.data --format LAMMPS
    """
    from ..bench.rmsd_output import output_format
    from ..bench.runner import bench_rmsd
    from ..parallel.mpi import resolve, root_call

    comm = resolve()
    if rmsd_out is not None:
        try:
            fmt = output_format(rmsd_out)
        except UsageError as error:
            raise mark_collective(error)
    # before the run, so a long benchmark is not lost to an unwritable output
    root_call(comm, _check_outputs, {"--out": out_path, "--rmsd-out": rmsd_out, "--plot": plot_path},
              (*inputs, topology), force, plot_path)
    result = bench_rmsd(list(inputs), topology, comm=comm, select=select, calc_select=calc_select, index=index,
                        weights=None if weights == "none" else weights, reference=reference, ref_frame=ref_frame,
                        start=start, stop=stop, step=step, begin=begin, end=end, dt=dt, group=group, format=input_format,
                        block_frames=block_frames, compute_load=compute_load, repeat=repeat, engine=engine,
                        progress=progress, read_ahead_mb=read_ahead_mb)
    if comm.rank != 0:
        return
    report = result["report"]
    if out_path:
        _save_json(report, out_path)
    if rmsd_out:
        from ..bench.rmsd_output import write_rmsd

        command = report["provenance"]["command"]
        _write_stream(rmsd_out, lambda handle: write_rmsd(handle, result["rmsd"], result["labels"], fmt, time_unit,
                                                    rmsd_unit, command), binary=True)
    if plot_path:
        from ..bench.plots import image_format, plot_ranks, rmsd_title

        best = report["runs"][report["best_repeat"]]
        _write(plot_path, lambda temporary: plot_ranks(best, temporary, rmsd_title(report), image_format(plot_path)))
    if as_json:
        emit_json(report)
        return
    print_rmsd_report(report)
    values = result["rmsd"][:, 2]
    written = [path for path in (out_path, rmsd_out, plot_path) if path]
    click.echo(f"rmsd: {len(values)} frames, mean {values.mean():.3f} A, max {values.max():.3f} A"
               + (f"; written to {', '.join(written)}" if written else ""))


def _runs_line(result):
    count = result["runs_compared"]
    return (f"per rank count the fastest run: best of the first {count} run{'s' if count > 1 else ''} of each report "
            f"(the smallest --repeat among them; a first run includes start-up)")


def print_dihedrals_report(report):
    """The run's summary line, then the per-rank table of every run (:func:`print_runs`)."""
    source, analysis = report["input"], report["analysis"]
    residues = analysis["residues"]
    click.echo(f"bench dihedrals: {source['path']} ({_layout(source)}), {report['n_analysed']} of "
               f"{report['n_frames']} frames, {residues['n']} residues of {analysis['atoms']['label']!r} "
               f"({residues['first']} to {residues['last']}; {analysis['n_features']} features per frame: "
               f"cos and sin of phi and psi), engine {report['engine']}, compute load {report['compute_load']}, "
               f"{report['n_ranks']} rank(s)")
    print_runs(report)


@click.command("dihedrals")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--topology", "-t", default=None, metavar="FILE", help="Topology read by MDAnalysis (PSF, GRO, TPR, PDB..., or an H5MD file carrying one); its atom count must match INPUT's. Default: the topology an H5MD INPUT carries (convert --topology stores one).")
@click.option("--select", "-s", default="protein", show_default=True, metavar="SEL", callback=select_not_a_file(), help="Atoms whose residues are featurized: an MDAnalysis selection, or with -n a group of the index file. Residues are kept as MDAnalysis's Ramachandran keeps them (not the protein's first or last residue; each needs C, N and CA and both neighbours).")
@click.option("--index", "-n", default=None, metavar="NDX", help="GROMACS index file; --select may name its groups by name or number (from 0).")
@input_and_frames_options
@click.option("--engine", type=click.Choice(["blocks", "frames"]), default="blocks", show_default=True, help="blocks: blocks of frames read at once and a batched numpy kernel; frames: MDAnalysis iterated frame by frame and one MDAnalysis calc_dihedrals call per angle, as the papers' code called dihedral.value() (each load timed as I/O, each frame's angles as compute).")
@click.option("--block-frames", type=click.IntRange(min=1), default=None, help="Frames read and featurized at once per rank, bounding memory (capped at the frames a rank reads; for H5MD chunked by several frames, whole chunks, at least one). Default: as many as 8 MiB of the atoms read hold.")
@READ_AHEAD_OPTION
@click.option("--compute-load", type=click.IntRange(min=1), default=1, show_default=True, help="Repeat each frame's (or block's) featurization K times: a synthetic load on top of the real one.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Number of runs; the report's headline is the fastest, every run is kept.")
@click.option("--out", "out_path", default=None, metavar="FILE.json", help="Write the JSON report here (per-rank timings in seconds, bytes read, stragglers, compute/I-O ratio, advice, provenance).")
@click.option("--features-out", default=None, metavar="FILE", help="Write the features (frame, time in ps, then cos phi, sin phi, cos psi, sin psi of each residue) as .npy or .csv.")
@click.option("--plot", "plot_path", default=None, metavar="FILE", help="Draw per-rank bars of the phases of the fastest run, waiting shown apart (.png/.pdf/.svg; needs matplotlib, the 'plot' extra).")
@click.option("--force", is_flag=True, help="Replace existing --out, --features-out and --plot files.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.option("--progress/--no-progress", default=None, help="Accepted for symmetry with other commands; the benchmark shows no bar (it would disturb the timings).")
def dihedrals_command(inputs, topology, select, index, group, input_format, start, stop, step, begin, end, dt, engine,
                      block_frames, read_ahead_mb, compute_load, repeat, out_path, features_out, plot_path, force, as_json,
                      progress):
    """Backbone dihedral featurization, frames split over MPI ranks, every phase timed.

    The papers' compute-bound workload (dihedral featurization, Algorithm 2 of Khoshlessan,
    Paraskevakos, Fox, Jha & Beckstein, Guidelines for obtaining ideal performance for
    parallel analysis of molecular dynamics trajectories with Python on HPC resources,
    manuscript): for every frame, phi and psi of each residue, each angle as (cos, sin);
    4 features per residue (848 for the 212 inner residues of adenylate kinase). The angles
    equal MDAnalysis's Ramachandran(u.select_atoms(SEL)).run().results.angles for whole
    molecules (no minimum image is applied).

    INPUT is read as by 'bench rmsd': an H5MD file (MPI-IO on several ranks), XTC/TRR/DCD
    segments, or a split manifest. Per rank, in seconds, adding up to t_total: t_init_top,
    t_init_traj, t_io, t_compute, t_wait, t_comm (see 'bench rmsd --help'); stragglers are
    judged on work = total - wait - comm, and the advice follows the compute/I-O ratio.

    \b
    Examples:
      h5mdtool bench dihedrals md.h5md -t md.psf
      mpirun -n 4 h5mdtool bench dihedrals md.h5md -t md.tpr --repeat 3 --out dihedrals-4.json
      mpirun -n 4 h5mdtool bench dihedrals md.xtc -t md.tpr --engine frames --features-out features.npy
    """
    from ..bench.dihedrals import bench_dihedrals, features_format, write_features
    from ..parallel.mpi import resolve, root_call

    comm = resolve()
    if features_out is not None:
        try:
            fmt = features_format(features_out)
        except UsageError as error:
            raise mark_collective(error)
    root_call(comm, _check_outputs, {"--out": out_path, "--features-out": features_out, "--plot": plot_path},
              (*inputs, topology), force, plot_path)
    result = bench_dihedrals(list(inputs), topology, comm=comm, select=select, index=index, start=start, stop=stop,
                             step=step, begin=begin, end=end, dt=dt, group=group, format=input_format,
                             block_frames=block_frames, compute_load=compute_load, repeat=repeat, engine=engine,
                             read_ahead_mb=read_ahead_mb)
    if comm.rank != 0:
        return
    report = result["report"]
    if out_path:
        _save_json(report, out_path)
    if features_out:
        _write_stream(features_out, lambda handle: write_features(handle, result["features"], result["labels"], fmt),
                      binary=True)
    if plot_path:
        from ..bench.plots import image_format, plot_ranks

        best = report["runs"][report["best_repeat"]]
        title = (f"bench dihedrals: {os.path.basename(report['input']['path'])}, engine {report['engine']}, "
                 f"{report['n_ranks']} rank(s)\n{report['n_residues']} residues, {report['n_analysed']} frames, "
                 f"compute load {report['compute_load']}; fastest of {len(report['runs'])} run(s)")
        _write(plot_path, lambda temporary: plot_ranks(best, temporary, title, image_format(plot_path)))
    if as_json:
        emit_json(report)
        return
    print_dihedrals_report(report)
    written = [path for path in (out_path, features_out, plot_path) if path]
    click.echo(f"dihedrals: {len(result['features'])} frames x {result['features'].shape[1] - 2} features"
               + (f"; written to {', '.join(written)}" if written else ""))


def _print_scaling(result):
    from ..bench.timing import PHASES

    context, baseline = result["context"], result["baseline"]
    click.echo(f"bench report: {context['input']} ({context['format']}, {context['layout']}), engine "
               f"{context['engine']}, fit {context['select']!r} ({context['n_selected']} atoms), weights "
               f"{context['weights']}, {context['n_frames']} frames, compute load {context['compute_load']}")
    if baseline["measured"]:
        click.echo(f"baseline: the measured 1-rank run ({baseline['t_total']:.3f} s): S(N) = t(1) / t(N), E(N) = S(N) / N")
    else:
        click.echo(f"baseline: assumed (no 1-rank run): {baseline['n_ranks']} ranks taken as perfectly scaled, "
                   f"S(N) = {baseline['n_ranks']} t({baseline['n_ranks']}) / t(N); S and E marked *")
    mark = "" if baseline["measured"] else "*"
    if baseline.get("serial_fraction") is not None:
        click.echo(f"serial part (rank 0 alone while every other rank waits idle) at {baseline['n_ranks']} rank(s): "
                   f"{100 * baseline['serial_fraction']:.1f}% of t_total; E_par(N): efficiency of the rest, "
                   "(t(1) - serial(1)) / (N (t(N) - serial(N)))")
    click.echo(_runs_line(result))
    click.echo("ranks   total(s)    S(N)    E(N)  serial(s)  E_par" + "".join(f" {p[2:]:>9}" for p in PHASES)
               + "  max work  stragglers")
    for row in result["rows"]:
        click.echo(f"{row['n_ranks']:>5} {row['t_total']:>10.3f} {row['speedup']:>6.2f}{mark:1} {row['efficiency']:>6.2f}{mark:1}"
                   + f" {_fmt(row.get('t_serial'), 10)} {_fmt(row.get('parallel_efficiency'), 6, 2)}"
                   + "".join(f" {row[p]:>9.3f}" for p in PHASES)
                   + f" {row['max_work']:>9.3f}  {','.join(map(str, row['stragglers'])) or '-'}")


def _print_layouts(result):
    context = result["context"]
    click.echo(f"bench report --layouts: engine {context['engine']}, fit {context['select']!r} "
               f"({context['n_selected']} atoms), weights {context['weights']}, {context['n_frames']} frames, "
               f"compute load {context['compute_load']}; per input: t_total (s), mean t_io (s), S(N)")
    click.echo(_runs_line(result))
    letters = {column["label"]: chr(ord("A") + number) for number, column in enumerate(result["inputs"])}
    for column in result["inputs"]:
        baseline = "measured 1-rank run" if column["baseline"]["measured"] else \
            f"assumed: {column['baseline']['n_ranks']} ranks perfectly scaled (*)"
        click.echo(f"  {letters[column['label']]}: {column['label']}; baseline {baseline}")
    click.echo("ranks" + "".join(f" {letters[c['label']] + ' total':>10} {'io':>8} {'S(N)':>7}" for c in result["inputs"])
               + "  fastest")
    for row in result["rows"]:
        cells = []
        for column in result["inputs"]:
            entry = row["by_input"].get(column["label"])
            if entry is None:
                cells.append(f" {'-':>10} {'-':>8} {'-':>7}")
                continue
            mark = "" if entry["baseline_measured"] else "*"
            cells.append(f" {entry['t_total']:>10.3f} {entry['t_io']:>8.3f} {entry['speedup']:>6.2f}{mark:1}")
        click.echo(f"{row['n_ranks']:>5}" + "".join(cells) + f"  {letters[row['fastest']]}")


@click.command("report")
@click.argument("runs", nargs=-1, required=True, metavar="RUN.json...")
@click.option("--layouts", "layouts_mode", is_flag=True, help="Compare several inputs (one trajectory in different layouts or formats) at the same rank counts, side by side, like the table of files of Jakupovic & Beckstein, MPI-parallel Molecular Dynamics Trajectory Analysis with the H5MD Format in the MDAnalysis Python Package, SciPy 2021, doi:10.25080/majora-1b6fd038-005, instead of one input's scaling.")
@click.option("--plot", "plot_path", default=None, metavar="FILE", help="Draw the comparison (.png/.pdf/.svg; needs matplotlib, the 'plot' extra): speed-up and efficiency, and each phase, against ranks on log2 axes; with --layouts, each input's time against ranks.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the table as CSV (seconds; one row per rank count, or per rank count and input with --layouts).")
@click.option("--json", "as_json", is_flag=True, help="Print the combined table as one JSON document.")
@click.option("--force", is_flag=True, help="Replace an existing --plot file.")
@click.option("--model", "model_ranks", type=click.IntRange(min=1), default=None, metavar="N", help="Also predict t(N), S(N) and E(N) for N ranks from the 1-rank run and the next rank count's (2, best): serial setup + parallel work / (its efficiency x N) + collective costs growing with log2 N, or with N (docs/performance.md); printed beside the measured counts.")
def report_command(runs, layouts_mode, plot_path, as_csv, as_json, force, model_ranks):
    """Combine 'bench rmsd --out' reports: scaling of one input, or inputs side by side.

    Reports are compared on resolved values: input content (sizes, layout), topology, atoms
    picked, weights, reference, frames, engine, block size and compute load must agree
    (else the command refuses and says what differs); paths, modification times and
    software versions may differ and are listed as warnings. The data must be the same: each
    report records a digest of the analysed atoms in sampled frames (and of a split's part
    checksums) and the RMSDs there; reports of one input must agree on them, inputs side by
    side (--layouts) on the RMSDs within 0.1 A (what a lossy layout moves them).

    Per rank count: the fastest run's t_total (s) over reports and over the first R runs of
    each, R the smallest --repeat among the reports (a first run includes start-up), the speed-up
    S(N) = t(1)/t(N) and efficiency E(N) = S(N)/N against the measured 1-rank run (without
    one, marked * and "assumed": the smallest rank count N0 counts as perfectly scaled,
    S(N) = N0 t(N0)/t(N)), the serial part (rank 0 alone while every other rank waits idle) and the
    efficiency of the rest, E_par(N) = (t(1) - serial(1)) / (N (t(N) - serial(N))), the mean
    of each phase over ranks (s), the slowest rank's work (its own io + compute) and the
    stragglers.

    \b
    Examples:
      h5mdtool bench report rmsd-1.json rmsd-2.json rmsd-4.json --plot scaling.png
      h5mdtool bench report reports/*.json --csv > scaling.csv
      h5mdtool bench report chunked-*.json gzip-*.json xtc-*.json --layouts --plot layouts.png
    """
    from ..bench.report import bench_report
    from ..bench.timing import PHASES

    if plot_path is not None:
        _check_outputs({"--plot": plot_path}, runs, force, plot_path)
    result = bench_report(list(runs), layouts_mode=layouts_mode, model_ranks=model_ranks)
    for warning in result["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        emit_json(result)
    elif as_csv and layouts_mode:
        click.echo("n_ranks,input,t_total,t_io,speedup,efficiency,baseline_measured")
        for row in result["rows"]:
            for label, entry in row["by_input"].items():
                click.echo(f"{row['n_ranks']},\"{label}\",{entry['t_total']:.6g},{entry['t_io']:.6g},"
                           f"{entry['speedup']:.6g},{entry['efficiency']:.6g},{str(entry['baseline_measured']).lower()}")
    elif as_csv:
        columns = ["n_ranks", "t_total", "speedup", "efficiency", "t_serial", "parallel_efficiency", *PHASES, "max_work"]
        click.echo(",".join(columns) + ",baseline_measured")
        for row in result["rows"]:
            click.echo(",".join("" if row[c] is None else f"{row[c]:.6g}" for c in columns)
                       + f",{str(row['baseline_measured']).lower()}")
    elif layouts_mode:
        _print_layouts(result)
    else:
        _print_scaling(result)
    if "model" in result and not as_json:
        from ..bench.model import describe

        click.echo("\n".join(describe(result["model"])), err=as_csv)
    if plot_path:
        from ..bench.plots import image_format, plot_layouts, plot_scaling

        draw = plot_layouts if layouts_mode else plot_scaling
        _write(plot_path, lambda temporary: draw(result, temporary, image_format(plot_path)))


command.add_command(rmsd_command)
command.add_command(dihedrals_command)
command.add_command(report_command)

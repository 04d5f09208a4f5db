"""``h5mdtool bench``: benchmarks (``bench rmsd``, ``bench report``)."""

import json
import os

import click
import numpy as np

from ..errors import UsageError, mark_collective
from .options import emit_json


@click.group("bench")
def command():
    """Benchmarks of parallel trajectory analysis, timed per MPI rank."""


def _check_outputs(outputs, inputs, force, plot_path):
    """Rank 0, before the run: every output may be written; matplotlib is there for --plot."""
    from ..outputs import check_output_file
    from ..plots import _pyplot, image_format

    names = [path for path in outputs if path]
    if len(set(map(os.path.abspath, names))) != len(names):
        raise UsageError("--out, --rmsd-out and --plot must name different files")
    for path in names:
        check_output_file(path, inputs=inputs, force=force)
    if plot_path:
        image_format(plot_path)
        _pyplot()  # fails with a message naming the 'plot' extra


def _write(path, write):
    """Call ``write(temporary_path)``, then move the complete file to *path*."""
    from ..outputs import publish, remove_quietly, temporary_name

    temporary = temporary_name(path)
    try:
        write(temporary)
        publish(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise


def _save_rmsd(rmsd, path):
    def write(temporary):
        with open(temporary, "wb") as handle:
            if path.endswith(".npy"):
                np.save(handle, rmsd)
            else:
                np.savetxt(handle, rmsd, delimiter=",", header="frame,time_ps,rmsd_angstrom", comments="",
                           fmt=("%d", "%.10g", "%.10g"))

    _write(path, write)


def _save_json(document, path):
    def write(temporary):
        with open(temporary, "w") as handle:
            json.dump(document, handle, indent=2, default=str)
            handle.write("\n")

    _write(path, write)


def _print_table(report):
    source = report["input"]
    layout = ", ".join(f"{key} {source[key]}" for key in ("layout", "chunks", "compression", "parts") if source.get(key) is not None)
    click.echo(f"bench rmsd: {source['path']} ({source['format']}{'; ' + layout if layout else ''}), "
               f"{report['n_frames']} frames, {report['n_selected']} atoms ({report['select']}), "
               f"engine {report['engine']}, {report['n_ranks']} rank(s)")
    for run in report["runs"]:
        click.echo(f"run {run['repeat'] + 1}/{len(report['runs'])}: t_total {run['t_total']:.3f} s")
        click.echo("rank  frames  init_top init_traj       io  compute     wait     comm    total  host")
        for r in run["ranks"]:
            click.echo(f"{r['rank']:>4} {r['n_frames']:>7} {r['t_init_top']:>9.3f} {r['t_init_traj']:>9.3f} "
                       f"{r['t_io']:>8.3f} {r['t_compute']:>8.3f} {r['t_wait']:>8.3f} {r['t_comm']:>8.3f} "
                       f"{r['t_total']:>8.3f}  {r['host']}")
        slow = run["stragglers"]
        click.echo(f"stragglers: {slow['over_1.5x_median'] or 'none'} over 1.5x the median total "
                   f"({slow['median_total']:.3f} s); {slow['over_2x_fastest'] or 'none'} over 2x the fastest")
    click.echo(f"best run: {report['best_repeat'] + 1}, t_total {report['t_total']:.3f} s")
    click.echo(f"advice: {report['advice']}")


@command.command("rmsd")
@click.argument("input_path", metavar="INPUT")
@click.option("--topology", "-t", required=True, help="Topology file read by MDAnalysis (PSF, GRO, TPR, PDB...); its atom count must match INPUT's.")
@click.option("--select", "-s", default="name CA", show_default=True, help="MDAnalysis selection of the atoms superposed.")
@click.option("--ref-frame", type=int, default=0, show_default=True, help="Reference frame (0-based; negative counts from the end).")
@click.option("--engine", type=click.Choice(["blocks", "frames"]), default="blocks", show_default=True, help="blocks: blocks of frames read at once (H5MD: only the span of selected atoms) and a batched numpy kernel; frames: MDAnalysis iterated frame by frame as the papers did (each load timed as I/O, each rms.rmsd call as compute).")
@click.option("--block-frames", type=click.IntRange(min=1), default=1024, show_default=True, help="Frames read and superposed at once per rank, bounding memory (blocks engine; for H5MD chunked by several frames, rounded down to whole chunks, at least one).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Number of runs; the report's headline is the fastest, every run is kept.")
@click.option("--out", "out_path", default=None, help="Write the JSON report here (per-rank timings in seconds, stragglers, compute/I-O ratio, advice).")
@click.option("--rmsd-out", default=None, help="Write the RMSD array (frame, time in ps, RMSD in Angstrom) as .npy or .csv.")
@click.option("--plot", "plot_path", default=None, help="Draw per-rank stacked bars of the phases of the fastest run (.png/.pdf/.svg; needs matplotlib, the 'plot' extra).")
@click.option("--force", "-f", is_flag=True, help="Replace existing --out, --rmsd-out and --plot files.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.option("--progress/--no-progress", default=None, help="Accepted for symmetry with other commands; the benchmark shows no bar (it would disturb the timings).")
def rmsd_command(input_path, topology, select, ref_frame, engine, block_frames, repeat, out_path, rmsd_out, plot_path, force, as_json, progress):
    """C-alpha RMSD after optimal superposition, split over ranks, every phase timed.

    INPUT is an H5MD file (read with MPI-IO on several ranks), an XTC/TRR/DCD file (one shared
    file; rank 0 scans the offsets), or a split manifest.json (each rank opens only the parts
    holding its frames). The RMSD equals MDAnalysis's rms.RMSD(u, select=SEL).run().

    Per rank, in seconds: t_init_top (topology), t_init_traj (opening the trajectory), t_io,
    t_compute, t_wait (barrier after the loop: the straggler signal), t_comm (Gatherv of the
    results to rank 0), t_total. Run it under mpirun/srun for several ranks.
    """
    from ..bench import bench_rmsd
    from ..mpi import resolve, root_call

    comm = resolve()
    if rmsd_out is not None and not rmsd_out.endswith((".npy", ".csv")):
        raise mark_collective(UsageError("--rmsd-out must end in .npy or .csv"))
    # before the run, so a long benchmark is not lost to an unwritable output
    root_call(comm, _check_outputs, (out_path, rmsd_out, plot_path), (input_path, topology), force, plot_path)
    result = bench_rmsd(input_path, topology, comm=comm, select=select, ref_frame=ref_frame,
                        block_frames=block_frames, repeat=repeat, engine=engine)
    if comm.rank != 0:
        return
    report = result["report"]
    if out_path:
        _save_json(report, out_path)
    if rmsd_out:
        _save_rmsd(result["rmsd"], rmsd_out)
    if plot_path:
        from ..plots import image_format, plot_ranks

        best = report["runs"][report["best_repeat"]]
        title = f"bench rmsd ({report['engine']}): {report['n_frames']} frames, {report['n_ranks']} ranks"
        _write(plot_path, lambda temporary: plot_ranks(best, temporary, title, image_format(plot_path)))
    if as_json:
        emit_json(report)
        return
    _print_table(report)
    values = result["rmsd"][:, 2]
    click.echo(f"rmsd: {len(values)} frames, mean {values.mean():.3f} A, max {values.max():.3f} A"
               + "".join(f"; written to {path}" for path in (out_path, rmsd_out, plot_path) if path))


@command.command("report")
@click.argument("runs", nargs=-1, required=True, metavar="RUN.json...")
@click.option("--plot", "plot_path", default=None, help="Draw speed-up, efficiency and per-phase scaling (.png/.pdf/.svg; needs matplotlib, the 'plot' extra).")
@click.option("--csv", "as_csv", is_flag=True, help="Print the table as CSV.")
@click.option("--force", "-f", is_flag=True, help="Replace an existing --plot file.")
def report_command(runs, plot_path, as_csv, force):
    """Combine 'bench rmsd --out' reports of one input at different rank counts.

    Prints, per rank count, the fastest repeat's t_total (s), the speed-up S(N) = t1/tN, the
    efficiency S/N and the mean time of each phase over ranks (s). Without a 1-rank run the
    smallest rank count N0 is the baseline: S(N) = N0 t(N0) / t(N).
    """
    from ..bench import bench_report
    from ..plots import PHASES

    if plot_path:
        _check_outputs((plot_path,), runs, force, plot_path)
    rows = bench_report(runs)
    columns = ["n_ranks", "t_total", "speedup", "efficiency", *PHASES]
    if as_csv:
        click.echo(",".join(columns))
        for row in rows:
            click.echo(",".join(f"{row[c]:.6g}" for c in columns))
    else:
        click.echo("ranks   total(s)  speed-up  efficiency" + "".join(f" {p[2:]:>9}" for p in PHASES))
        for row in rows:
            click.echo(f"{row['n_ranks']:>5} {row['t_total']:>10.3f} {row['speedup']:>9.2f} {row['efficiency']:>11.2f}"
                       + "".join(f" {row[p]:>9.3f}" for p in PHASES))
    if plot_path:
        from ..plots import image_format, plot_scaling

        title = f"bench rmsd scaling, {rows[0]['n_frames']} frames"
        _write(plot_path, lambda temporary: plot_scaling(rows, temporary, title, image_format(plot_path)))

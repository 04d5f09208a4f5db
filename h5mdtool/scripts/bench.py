"""``h5mdtool bench``: benchmarks (``bench rmsd``)."""

import json

import click
import numpy as np

from ..errors import UsageError
from ..mpi import resolve
from .options import emit_json


@click.group("bench")
def command():
    """Benchmarks of parallel trajectory analysis, timed per MPI rank."""


@command.command("rmsd")
@click.argument("input_path", metavar="INPUT")
@click.option("--topology", "-t", required=True, help="Topology file read by MDAnalysis (PSF, GRO, TPR, PDB...).")
@click.option("--select", "-s", default="name CA", show_default=True, help="MDAnalysis selection of the atoms superposed.")
@click.option("--ref-frame", type=int, default=0, show_default=True, help="Reference frame (negative counts from the end).")
@click.option("--engine", type=click.Choice(["blocks", "frames"]), default="blocks", show_default=True, help="blocks: blocks of frames read at once and a batched numpy kernel; frames: MDAnalysis iterated frame by frame as the papers did (each load timed as I/O, each rms.rmsd call as compute).")
@click.option("--block-frames", type=click.IntRange(min=1), default=1024, show_default=True, help="Frames read and superposed at once per rank (bounds memory; blocks engine).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Number of runs.")
@click.option("--out", "out_path", default=None, help="Write the JSON report here (per-rank timings, stragglers, compute/I-O ratio, advice).")
@click.option("--rmsd-out", default=None, help="Write the RMSD array (frame, time in ps, RMSD in Angstrom) as .npy or .csv.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.option("--plot", "plot_path", default=None, help="Draw per-rank stacked bars of the phases (PNG; needs matplotlib, the 'plot' extra).")
@click.option("--progress/--no-progress", default=None, help="Accepted for symmetry with other commands; the benchmark prints no bar (it would disturb the timings).")
def rmsd_command(input_path, topology, select, ref_frame, engine, block_frames, repeat, out_path, rmsd_out, as_json, plot_path, progress):
    """C-alpha RMSD after optimal superposition, split over ranks, every phase timed.

    INPUT is an H5MD file (read with MPI-IO on several ranks), an XTC/TRR/DCD file, or a
    split manifest.json. The RMSD equals MDAnalysis's rms.RMSD(u, select=SEL).run().
    Per rank: t_init_top (topology), t_init_traj (opening the trajectory), t_io, t_compute,
    t_wait (barrier after the loop: the straggler signal), t_comm (Gatherv), t_total.
    """
    from ..bench import bench_rmsd

    if plot_path:
        from ..plots import _pyplot

        _pyplot()  # fail before the run when matplotlib is missing
    if rmsd_out is not None and not rmsd_out.endswith((".npy", ".csv")):
        raise UsageError("--rmsd-out must end in .npy or .csv")
    comm = resolve()
    result = bench_rmsd(input_path, topology, comm=comm, select=select, ref_frame=ref_frame,
                        block_frames=block_frames, repeat=repeat, engine=engine)
    if comm.rank != 0:
        return
    report = result["report"]
    if out_path:
        with open(out_path, "w") as handle:
            json.dump(report, handle, indent=2, default=str)
            handle.write("\n")
    if rmsd_out:
        if rmsd_out.endswith(".npy"):
            np.save(rmsd_out, result["rmsd"])
        else:
            np.savetxt(rmsd_out, result["rmsd"], delimiter=",", header="frame,time_ps,rmsd_angstrom", comments="")
    if plot_path:
        from ..plots import plot_ranks

        best = min(report["runs"], key=lambda run: run["t_total"])
        plot_ranks(best, plot_path, f"bench rmsd: {report['n_frames']} frames, {report['n_ranks']} ranks")
    if as_json:
        emit_json(report)
        return
    for run in report["runs"]:
        click.echo(f"run {run['repeat'] + 1}/{len(report['runs'])}: {report['n_frames']} frames on "
                   f"{report['n_ranks']} rank(s), t_total {run['t_total']:.3f} s")
        click.echo("rank  frames  init_top init_traj       io  compute     wait     comm    total")
        for r in run["ranks"]:
            click.echo(f"{r['rank']:>4} {r['n_frames']:>7} {r['t_init_top']:>9.3f} {r['t_init_traj']:>9.3f} "
                       f"{r['t_io']:>8.3f} {r['t_compute']:>8.3f} {r['t_wait']:>8.3f} {r['t_comm']:>8.3f} {r['t_total']:>8.3f}")
        slow = run["stragglers"]
        click.echo(f"stragglers: {slow['over_1.5x_median'] or 'none'} over 1.5x the median; "
                   f"{slow['over_2x_fastest'] or 'none'} over 2x the fastest")
        click.echo(f"advice: {run['advice']}")


@command.command("report")
@click.argument("runs", nargs=-1, required=True, metavar="RUN.json...")
@click.option("--plot", "plot_path", default=None, help="Draw speed-up, efficiency and per-phase scaling (PNG; needs the 'plot' extra).")
@click.option("--csv", "as_csv", is_flag=True, help="Print the table as CSV.")
def report_command(runs, plot_path, as_csv):
    """Combine 'bench rmsd --out' reports of one input at different rank counts.

    Prints speed-up S(N) = t1/tN, efficiency S/N and the mean time of each phase per rank
    count (the smallest rank count is the baseline when there is no 1-rank run).
    """
    from ..bench import combine_reports
    from ..errors import InputError
    from ..plots import PHASES

    reports = []
    for path in runs:
        try:
            with open(path) as handle:
                reports.append(json.load(handle))
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: not a readable JSON report ({error})") from None
    rows = combine_reports(reports)
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
        from ..plots import plot_scaling

        plot_scaling(rows, plot_path, f"bench rmsd scaling, {rows[0]['n_frames']} frames")

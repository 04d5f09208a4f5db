"""``h5mdtool validate`` and ``h5mdtool info``."""

import sys

import click

from .options import emit_json, human_bytes


@click.command("validate")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--profile", type=click.Choice(["h5md", "mdanalysis", "all"]), default="all", show_default=True, help="h5md: H5MD 1.1 rules; mdanalysis: what MDAnalysis's H5MDReader needs; all: both plus layout lint.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with every finding.")
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
@click.option("--against", multiple=True, metavar="SOURCE", help="Source trajectory (repeat for segments): compare every frame's positions, velocities, forces, step, time and box. Frames are divided among MPI ranks.")
@click.option("--tolerance", type=float, default=None, help="Absolute tolerance on positions in nm. Default: exact for XTC/TRR sources, float32 rounding for DCD, half the recorded precision of lossy files.")
def validate_command(files, profile, as_json, strict, against, tolerance):
    """Check H5MD files: conformance, MDAnalysis readability, layout lint.

    Exit status: 0 no errors (warnings allowed unless --strict), 1 errors found, 2 a file
    could not be read at all. Every finding has a stable rule id (docs/validation.md).
    """
    from ..compare import compare_with_source
    from ..manifest import is_manifest
    from ..mpi import resolve
    from ..validate import ERROR, UnreadableFile, validate_file, validate_manifest

    comm = resolve()
    reports, unreadable = [], []
    for path in files:
        try:
            if is_manifest(path):
                report, manifest = validate_manifest(path)
                compared = [p.path for p in manifest.parts] if manifest is not None and not report.errors else None
            else:
                report = validate_file(path, profile)
                compared = [path]
        except UnreadableFile as error:
            unreadable.append(str(error))
            continue
        reports.append(report)
        if against and compared:
            result = compare_with_source(compared, list(against), comm=comm, tolerance=tolerance)
            if result["frame_count_differs"]:
                report.add("AGAINST000", ERROR, path, f"{result['n_frames']} frames, the source has {result['source_n_frames']}")
            elif result["n_differing"]:
                first = ", ".join(f"{d['frame']} ({d['reason']})" for d in result["differing"])
                report.add("AGAINST001", ERROR, path, f"{result['n_differing']} frame(s) differ from the source; first: {first}")
    if comm.rank != 0:
        sys.exit(2 if unreadable else 1 if any(r.errors or (strict and r.warnings) for r in reports) else 0)
    failed = any(r.errors or (strict and r.warnings) for r in reports)
    if as_json:
        emit_json({"files": [r.as_dict() for r in reports], "unreadable": unreadable,
                   "errors": sum(len(r.errors) for r in reports), "warnings": sum(len(r.warnings) for r in reports)})
    else:
        for report in reports:
            for f in report.findings:
                click.echo(f"{report.file}: {f.severity} {f.rule} {f.path}: {f.message}" + (f"\n    fix: {f.fix}" if f.fix else ""))
            click.echo(f"{report.file}: {len(report.errors)} error(s), {len(report.warnings)} warning(s)")
        for message in unreadable:
            click.echo(f"error: {message}", err=True)
    sys.exit(2 if unreadable else 1 if failed else 0)


@click.command("info")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON document.")
def info_command(file, as_json):
    """Frames, atoms, time, box, every dataset's layout, provenance and layout advice."""
    from ..info import info

    result = info(file)
    if as_json:
        emit_json(result)
        return
    click.echo(f"{result['file']} ({human_bytes(result['bytes'])})")
    if "n_frames" in result:
        click.echo(f"  {result['n_frames']} frames x {result['n_atoms']} atoms; box: {', '.join(result.get('box') or ['?'])}")
    if result.get("time"):
        t = result["time"]
        click.echo(f"  time {t['first']:g} to {t['last']:g} {t['unit']}, interval {t['interval']}")
    for path, d in result["datasets"].items():
        line = f"  {path}: {tuple(d['shape'])} {d['dtype']}, chunks {tuple(d['chunks']) if d['chunks'] else 'contiguous'}"
        line += f", filters {'+'.join(d['filters']) or 'none'}, {human_bytes(d['stored_bytes'])} stored / {human_bytes(d['raw_bytes'])} raw"
        if "one_frame_read" in d and len(d["shape"]) == 3:
            r = d["one_frame_read"]
            line += f"; one frame reads {r['chunks']} chunk(s), {human_bytes(r['bytes'])}"
        click.echo(line)
    if result.get("provenance"):
        p = result["provenance"]
        click.echo(f"  written by h5mdtool {p.get('h5mdtool_version')} on {p.get('n_ranks')} rank(s), {p.get('created')}: {p.get('command')}")
        layout = p.get("layout") or {}
        if layout.get("chunk_reason"):
            click.echo(f"  chunks: {layout['chunk_reason']}; {layout.get('alignment_reason')}")
    if result.get("stripe_alignment"):
        a = result["stripe_alignment"]
        click.echo(f"  stripe alignment: {a['aligned']} of {a['chunks']} chunks start on a {a['stripe_size']} B stripe boundary")
    for f in result["findings"]:
        click.echo(f"  {f['severity']} {f['rule']} {f['path']}: {f['message']}" + (f"\n    fix: {f['fix']}" if f.get("fix") else ""))
    if not result["findings"]:
        click.echo("  no findings: valid H5MD, readable by MDAnalysis, frame-friendly layout")

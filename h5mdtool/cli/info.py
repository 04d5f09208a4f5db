"""``h5mdtool info``."""

import sys

import click
import numpy as np

from ..parallel.sizes import human_bytes
from .options import emit_json


@click.command("info")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON document.")
def command(file, as_json):
    """Frames, atoms, time, box, every dataset's layout, provenance and layout advice.

    For each dataset: shape, dtype, chunks, filters, stored and raw bytes, and for
    per-atom data what reading one frame touches (chunks and bytes). The findings of
    'h5mdtool validate' follow, with the 'h5mdtool convert' command that fixes the layout
    ones. Exit status 1 if the file cannot be read at all or libhdf5 crashes or stops
    making progress on it (damaged metadata), 2 for a wrong command line, else 0.

    \b
    Examples:
      h5mdtool info md.h5md
      h5mdtool info md.h5md --json | python -m json.tool
      h5mdtool info md.h5md | head
    """
    from ..check.info import info, unreadable_record
    from ..parallel.errors import InputError
    from ..parallel.mpi import debug_enabled, resolve

    comm = resolve()
    try:
        result = info(file, comm=comm)
    except InputError as error:
        if debug_enabled():
            raise
        record = unreadable_record(file, error)
        if comm.rank == 0:
            if as_json:
                emit_json(record)
            finding = record["findings"][0]
            click.echo(f"error: {finding['message']} ({finding['rule']})", err=True)
        sys.exit(error.exit_code)
    if comm.rank != 0:
        return
    if as_json:
        emit_json(result)
        return
    print_info(result)


def _number(value, dtype=None):
    """Integers exactly; floats as their own dtype prints them (float32 times without float64 noise)."""
    if value is None:
        return "?"
    if isinstance(value, int) or (isinstance(value, float) and dtype and np.dtype(dtype).kind in "iu" and value.is_integer()):
        return str(int(value))
    if dtype == "float32":
        return str(np.float32(value))
    return repr(float(value))


def _series_line(name, s):
    unit = f" {s['unit']}" if s.get("unit") else ""
    if s.get("note"):
        return f"  {name}{unit} ({s.get('mode') or '?'}): {s['note']}"
    regular = {True: "regular", False: "irregular", None: "not checked"}[s["regular"]]
    dtype = s.get("printed_as") or s.get("dtype")
    return (f"  {name} {_number(s['first'], dtype)} to {_number(s['last'], dtype)}{unit}, interval "
            f"{_number(s['interval'], dtype)} ({s['mode']}, {regular})")


def _group_lines(group):
    lines = []
    if group["n_frames"] is not None:
        lines.append(f"  {group['n_frames']} frames x {group['n_atoms']} atoms in {group['path']} "
                     f"({', '.join(group['elements'])})")
    else:
        lines.append(f"  {group['path']}: no position, velocity or force data found")
    for series in ("step", "time"):
        if group.get(series):
            lines.append(_series_line(series, group[series]))
    box = group.get("box")
    if box:
        shape = "time-dependent" if box["time_dependent"] else ("fixed" if box["time_dependent"] is False else "")
        line = (f"  box: {box['kind'] or '?'}{', ' + shape if shape else ''}; "
                f"boundary {' '.join(str(b) for b in box['boundary']) or '?'}")
        lines.append(line + (f"; {box['note']}" if box.get("note") else ""))
    return lines


def print_info(result):
    """The human-readable description."""
    from ..check.lint import filters_phrase

    echo = click.echo
    echo(f"{result['file']} ({human_bytes(result['bytes'])})")
    groups = result.get("particle_groups") or []
    if not groups:
        echo("  no position, velocity or force data found")
    for group in groups:
        if len(groups) > 1:
            echo(f"  particle group {group['path']}:")
        for line in _group_lines(group):
            echo(line)
    topology = result.get("topology")
    if topology:
        source = f"; from {topology['source']}" if topology.get("source") else ""
        echo(f"  topology: {topology['atoms']} atoms, {topology['residues']} residues, {topology['segments']} "
             f"segment(s), {topology['bonds']} bonds; {', '.join(topology['attributes'])}{source} "
             f"('h5mdtool topology {result['file']} -o top.pdb' writes it out)")
    echo("  datasets:")
    for path, d in result["datasets"].items():
        if "error" in d:
            echo(f"    {path}: cannot describe ({d['error']})")
            continue
        shape = "x".join(str(s) for s in d["shape"]) if d["shape"] is not None else "empty"
        chunks = "x".join(str(c) for c in d["chunks"]) if d["chunks"] else "contiguous"
        filters = filters_phrase(d["filters"], d.get("compression_level")) or "no filters"
        line = (f"    {path}: {shape} {d['dtype']}, chunks {chunks}, {filters}, "
                f"{human_bytes(d['stored_bytes'])} stored / {human_bytes(d['raw_bytes'])} raw")
        echo(line)
        if d.get("note"):
            echo(f"      values {d['note']}")
        read = d.get("one_frame_read")
        if read:
            chunk_text = "contiguous read" if not read["chunks"] else f"{read['chunks']} chunk(s)"
            echo(f"      one frame: {chunk_text}, {human_bytes(read['bytes'])} for {human_bytes(read['frame_bytes'])} of data")
    provenance = result.get("provenance")
    if isinstance(provenance, dict):
        echo(f"  written by h5mdtool {provenance.get('h5mdtool_version')} on {provenance.get('n_ranks')} rank(s), "
             f"{provenance.get('created')}: {provenance.get('command')}")
        layout = provenance.get("layout") if isinstance(provenance.get("layout"), dict) else {}
        if layout.get("chunk_reason"):
            echo(f"  chunks: {layout['chunk_reason']}; {layout.get('alignment_reason')}")
    alignment = result.get("stripe_alignment")
    if alignment:
        echo(f"  stripe alignment: {alignment['aligned']} of {alignment['inspected']} chunks start on a "
             f"{alignment['stripe_size']} B stripe boundary"
             + (f" (a sample of the {alignment['chunks']} chunks)" if alignment["inspected"] < alignment["chunks"] else ""))
    for problem in result.get("problems", []):
        echo(f"  {problem}")
    shown = [f for f in result["findings"] if f["severity"] != "note"]
    notes = len(result["findings"]) - len(shown)
    if shown:
        echo(f"  findings ({result['errors']} error(s), {result['warnings']} warning(s); see 'h5mdtool validate'):")
    for f in shown:
        echo(f"    {f['severity']} {f['rule']} {f['path']}: {f['message']}")
    if result.get("fix_command"):
        echo(f"  to fix the layout: {result['fix_command']}")
    if result.get("plugin_filters"):
        echo(f"  filters from hdf5plugin ({', '.join(result['plugin_filters'])}): {result['plugin_hint']}")
    if not shown:
        echo("  no errors or warnings: valid H5MD, readable by MDAnalysis, frame-shaped layout"
             + (f" ({notes} note(s): 'h5mdtool validate --notes')" if notes else ""))

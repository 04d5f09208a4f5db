"""A differential case: input files, a command with options, and how to run it.

:class:`Case` is drawn by :mod:`.strategies`, written to disk once by :meth:`Case.materialize`
(inputs and a PDB topology in the case's directory, shared by every rank count) and turned
into an API request (:func:`request`, run by the pools) or a command line
(:func:`command_line`, used for the CLI sample and for every reproduction line).
"""

import json
import os
import shlex
from dataclasses import dataclass, field

from .spec import FORMAT_OVERRIDE
from .writers import write_segment, write_topology

#: LAMMPS DCD files end in .dcd like CHARMM's: the format is then named (:func:`input_format`).
EXTENSIONS = {"xtc": ".xtc", "trr": ".trr", "dcd": ".dcd", "h5md": ".h5md", "ncdf": ".ncdf", "trz": ".trz",
              "gsd": ".gsd", "lammps": ".dcd"}
#: The keyword naming the input format in each API call (split's ``format`` is the parts' format).
INPUT_FORMAT_KEYWORD = {"convert": "format", "split": "input_format", "validate": "against_format", "bench": "format",
                        "append": "format"}
#: Case options that are not keywords of the command's API call (append: how its file is made).
NOT_KEYWORDS = ("mutation", "input", "nparts", "split_at", "base_ranks", "base", "default_format")


@dataclass
class Case:
    command: str
    segments: list
    names: list
    options: dict
    cli: bool = False
    info: dict = field(default_factory=dict)
    number: int = None
    directory: str = None
    inputs: list = None
    topology: str = None
    #: extra inputs made by the controller before the run (validate copy, bench input)
    prepared: dict = field(default_factory=dict)

    def materialize(self, base, number):
        """Write the inputs and the topology into ``base/case-NNNNN``."""
        self.number = number
        self.directory = os.path.join(base, f"case-{number:05d}")
        os.makedirs(self.directory, exist_ok=True)
        self.topology = write_topology(self.segments[0].n_atoms, self.names, os.path.join(self.directory, "top.pdb"))
        self.inputs = []
        for index, segment in enumerate(self.segments):
            path = os.path.join(self.directory, f"seg{index}{EXTENSIONS[segment.format]}")
            self.inputs.append(write_segment(segment, path))
        return self

    def run_directory(self, ranks):
        path = os.path.join(self.directory, f"r{ranks}")
        os.makedirs(path, exist_ok=True)
        return path

    def describe(self):
        return {"command": self.command, "options": self.options, "segments": [s.describe() for s in self.segments],
                "atom_names": self.names, **self.info}


def input_format(case):
    """The format name the commands must be given (``LAMMPS``), or None when the extension tells."""
    names = {FORMAT_OVERRIDE.get(s.format) for s in case.segments}
    return names.pop() if len(names) == 1 else None


def api_kwargs(case):
    """Keyword arguments of the API call, with the case's file names filled in."""
    options = {key: value for key, value in case.options.items() if key not in NOT_KEYWORDS}
    if case.options.get("default_format"):  # split's own choice of the parts' format, which is options["format"]
        del options["format"]
    if options.get("topology") is True:
        options["topology"] = case.topology
    name = input_format(case)
    # bench reads the source, or an H5MD file or split parts made from it (which need no format)
    reads_source = case.command != "bench" or case.prepared.get("bench_input") == case.inputs[0]
    if name is not None and reads_source:
        options[INPUT_FORMAT_KEYWORD[case.command]] = name
    return options


def outputs(case, ranks):
    """Where the command writes at *ranks* ranks."""
    directory = case.run_directory(ranks)
    return {
        "convert": os.path.join(directory, "out.h5md"),
        "append": os.path.join(directory, "out.h5md"),
        "split": os.path.join(directory, "parts"),
    }.get(case.command, directory)


def base_file(case):
    """append: the file the first segments were converted into (copied before each run)."""
    return os.path.join(case.directory, "base.h5md")


def base_request(case):
    """append: the API call converting the first ``split_at`` segments into :func:`base_file`."""
    kwargs = dict(case.options["base"], progress=False, on_overlap=case.options["on_overlap"])
    for name in ("velocities", "forces"):
        if name in case.options:
            kwargs[name] = case.options[name]
    name = input_format(case)
    if name is not None:
        kwargs["format"] = name
    return {"function": "convert", "args": [case.inputs[:case.options["split_at"]], base_file(case)], "kwargs": kwargs}


def stage(case, path):
    """append: put a fresh copy of the base file at *path* (the file the append grows)."""
    import shutil

    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copyfile(base_file(case), path)


def request(case, ranks):
    """The API call (for the pools) running *case* at *ranks* ranks."""
    kwargs = api_kwargs(case)
    if case.command == "convert":
        return {"function": "convert", "args": [case.inputs, outputs(case, ranks)], "kwargs": dict(kwargs, progress=False)}
    if case.command == "split":
        return {"function": "split", "args": [case.inputs, outputs(case, ranks), case.options["nparts"]],
                "kwargs": dict(kwargs, progress=False)}
    if case.command == "append":
        return {"function": "append", "args": [case.inputs[case.options["split_at"]:], outputs(case, ranks)],
                "kwargs": dict(kwargs, progress=False)}
    if case.command == "validate":
        return {"function": "validate", "args": [[case.prepared["copy"]]],
                "kwargs": dict(kwargs, against=case.inputs, progress=False)}
    if case.command == "bench":
        return {"function": "bench_rmsd", "args": [case.prepared["bench_input"], case.topology], "kwargs": kwargs}
    raise ValueError(case.command)


_FLAGS = {
    "topology": "--topology", "select": "--select", "start": "--start", "stop": "--stop", "step": "--step",
    "on_overlap": "--on-overlap", "chunk_frames": "--chunk-frames", "precision": "--precision",
    "compression": "--compression", "compression_level": "--compression-level", "stripe_count": "--stripe-count",
    "stripe_size": "--stripe-size", "block_bytes": "--block-size", "format": "--format", "ref_frame": "--ref-frame",
    "engine": "--engine", "block_frames": "--block-frames", "begin": "-b", "end": "-e", "dt": "--dt",
    "against_format": "--against-format", "threads": "--threads", "group": "--group",
    "parallel_compression": "--parallel-compression",
}
#: split's keywords whose options are named otherwise: --format names the input format in every command.
SPLIT_FLAGS = {"format": "--output-format", "input_format": "--format"}


def command_line(call, output_override=None):
    """``h5mdtool ...`` arguments equivalent to the API *call* (a :func:`request`)."""
    function, args, kwargs = call["function"], call["args"], dict(call["kwargs"])
    kwargs.pop("progress", None)
    if function == "convert":
        argv = ["convert", *args[0], "-o", output_override or args[1]]
    elif function == "split":
        argv = ["split", *args[0], "--nparts", str(args[2]), "-o", output_override or args[1]]
    elif function == "append":
        argv = ["convert", *args[0], "--append", output_override or args[1]]
    elif function == "validate":
        argv = ["validate", *args[0]]
        if kwargs.get("on_overlap"):
            argv += ["--on-overlap", kwargs.pop("on_overlap")]
        for source in kwargs.pop("against"):
            argv += ["--against", source]
    elif function == "bench_rmsd":
        argv = ["bench", "rmsd", args[0], "--topology", args[1]]
        if kwargs.get("select") is not None:
            argv += ["--select", kwargs.pop("select")]
    else:
        raise ValueError(function)
    for key, value in kwargs.items():
        if key in ("velocities", "forces"):
            if not value:
                argv.append(f"--no-{key}")
        elif key == "contiguous":
            if value:
                argv.append("--contiguous")
        elif key in ("shuffle", "split_xyz"):
            flag = key.replace("_", "-")
            argv.append(f"--{flag}" if value else f"--no-{flag}")
        elif function == "split" and key in SPLIT_FLAGS:
            argv += [SPLIT_FLAGS[key], str(value)]
        elif key in _FLAGS:
            argv += [_FLAGS[key], str(value)]
    if function in ("convert", "split", "append"):
        argv.append("--no-progress")
    return argv


def reproduction(call, ranks):
    """One shell line that reruns *call* at *ranks* ranks."""
    argv = ["h5mdtool", *command_line(call)]
    if ranks > 1:
        argv = ["tools/mpirun.sh", "-n", str(ranks), *argv]
    api = f"h5mdtool.{call['function']}(*{json.dumps(call['args'])}, **{json.dumps(call['kwargs'])})"
    line = " ".join(shlex.quote(a) for a in argv) + f"    # API: {api}"
    if call["function"] == "append":  # the file it grows: a copy of the case's base.h5md
        output = call["args"][1]
        base = os.path.join(os.path.dirname(os.path.dirname(output)), "base.h5md")
        line = f"cp {shlex.quote(base)} {shlex.quote(output)} && {line}"
    return line

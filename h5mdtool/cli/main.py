"""The ``h5mdtool`` command line: a click group over the library API.

Each command lives in its own module of :mod:`h5mdtool.cli` and only parses options, calls the library and
prints. Errors derived from :class:`~h5mdtool.parallel.errors.H5mdToolError` become one
``error: ...`` line on standard error and the error's exit code (1, or 2 for usage errors);
``--debug`` shows the traceback instead. click's own usage errors (a missing option, a
value of the wrong type) become one such line with exit code 2 too. The command's entry
point (:func:`h5mdtool.__main__.main`) installs the signal handling of
:mod:`h5mdtool.parallel.interrupts` before anything heavy is imported: SIGINT, SIGTERM, SIGHUP (and
the batch systems' SIGUSR1, SIGUSR2, SIGXCPU) remove the temporaries, print
``error: interrupted`` and exit with 128 + the signal number. Under
mpirun, help, version and errors are printed by rank 0 only (:class:`RankZeroHelp`).
"""

import importlib
import os
import sys

import click

from .. import __version__
from ..parallel import interrupts
from ..parallel.errors import H5mdToolError
from ..parallel.heap import keep_freed_heap
from ..parallel.mpi import debug_enabled, hdf5_exit_is_unsafe, launcher_rank

#: The commands: name -> (the module of this package that defines it as ``command``, the
#: first paragraph of its help, which ``h5mdtool --help`` lists). A command's module is
#: imported only when the command runs or shows its own help, so ``h5mdtool --help`` and
#: ``--version`` load neither numpy nor the reading stack (tests/cli check that each
#: paragraph is the command's own).
COMMANDS = {
    "bench": ("bench", "Benchmarks of parallel trajectory analysis, timed per MPI rank."),
    "convert": ("convert", "Convert MD trajectories into one H5MD 1.1 file."),
    "info": ("info", "Frames, atoms, time, box, every dataset's layout, provenance and layout advice."),
    "split": ("split", "Split one trajectory into N part files plus a manifest, for one file per rank."),
    "topology": ("topology", "Write the topology an H5MD file carries (convert --topology stores one) for other "
                             "programs."),
    "validate": ("validate", "Check H5MD files: H5MD 1.1 conformance, MDAnalysis readability, layout lint, data."),
}


def _rank():
    from ..parallel.mpi import resolve

    return resolve().rank


#: click >= 8.2 raises this to show the help of a group called without a command.
_SHOW_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(text):
    return " ".join(str(text).split())


#: What gmx's short options mean there, for a user who types them out of habit.
GMX_HABITS = {
    "-f": "-f is not an option of h5mdtool (gmx's input file): give the input files as arguments, "
          "e.g. 'h5mdtool convert md.xtc -o md.h5md'; --force replaces an existing output",
}


def _usage_exit(error):
    """Report a click usage error as one ``error:`` line (rank 0 only) and exit with 2."""
    interrupts.settle()
    hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
    message = _one_line(error.format_message()).rstrip(".")
    if isinstance(error, click.NoSuchOption) and error.option_name in GMX_HABITS:
        message = GMX_HABITS[error.option_name]
    if _rank() == 0:
        click.echo(f"error: {message}{hint}", err=True)
    sys.exit(2)


class RankZeroHelp:
    """Click mixin for the top-level group: under mpirun, only rank 0 prints help and version.

    Other ranks end quietly with status 0 when ``--help`` (or ``--version``) appears anywhere
    on the command line before ``--``, which covers every command's help, or when the
    command line names a group, the top-level one included, that shows its help when given
    no arguments (``h5mdtool``, ``h5mdtool bench``). Usage errors are reported by rank 0
    alone through :func:`_usage_exit`, after every rank has started MPI, so no rank ends the
    job before rank 0 has printed the error.
    """

    quiet_options = ("--version",)

    def parse_args(self, ctx, args):
        if launcher_rank() != 0 and self._prints_help(ctx, args):
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def _prints_help(self, ctx, args):
        """True when *args* ask this group, or one of its commands, for help or the version."""
        options = args[: args.index("--")] if "--" in args else args
        if any(arg in (*ctx.help_option_names, *self.quiet_options) for arg in options):
            return True
        command, rest = self, list(args)
        while isinstance(command, click.Group):
            if not rest:
                return command.no_args_is_help
            # group options are flags (--debug): the first word names the command
            words = [number for number, arg in enumerate(rest) if not arg.startswith("-")]
            if not words:
                return False
            command, rest = command.get_command(ctx, rest[words[0]]), rest[words[0] + 1:]
        return False


def _short_help(text, limit):
    """The first sentence of *text*, cut at a word with ``...`` to at most *limit* characters
    (how click shortens a command's help in a group's list)."""
    first = text.split("\n\n")[0].replace("\n", " ").strip()
    end = first.find(". ")
    sentence = first if end < 0 else first[: end + 1]
    if len(sentence) <= limit:
        return sentence
    return sentence[: max(limit - 3, 0)].rsplit(" ", 1)[0] + "..."


class LazyCommands:
    """Click mixin for the top-level group: its commands (:data:`COMMANDS`) are imported when used."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        return importlib.import_module(f"{__package__}.{COMMANDS[name][0]}").command

    def format_commands(self, ctx, formatter):
        """The list of commands with the one line of each, as click shortens it, without importing them."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, _short_help(text, limit)) for name, (_, text) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class ErrorHandlingGroup(LazyCommands, RankZeroHelp, click.Group):
    """Turns h5mdtool's and click's errors into one line and an exit code, printed by rank 0 only."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _SHOW_HELP:
            raise  # 'h5mdtool' alone shows the help
        except click.UsageError as error:
            _usage_exit(error)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except H5mdToolError as error:
            interrupts.settle()
            if debug_enabled():
                raise
            if not error.collective or _rank() == 0:
                click.echo(f"error: {error}", err=True)
            sys.exit(error.exit_code)
        except BrokenPipeError:
            stop_on_closed_output()
        except _SHOW_HELP:
            raise
        except click.UsageError as error:
            _usage_exit(error)
        except click.ClickException as error:
            interrupts.settle()
            click.echo(f"error: {_one_line(error.format_message())}", err=True)
            sys.exit(error.exit_code)
        except (click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        except Exception as error:  # noqa: BLE001 - last resort: no traceback for users
            interrupts.settle()
            if debug_enabled():
                raise
            click.echo(
                f"error: {type(error).__name__}: {error} (run with --debug for the traceback)",
                err=True,
            )
            sys.exit(1)


@click.group(cls=ErrorHandlingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="h5mdtool")
@click.option(
    "--debug",
    is_flag=True,
    help="Show full tracebacks instead of one-line errors (also H5MDTOOL_DEBUG=1).",
)
def cli(debug):
    """Make and check H5MD layouts for parallel analysis of MD trajectories.

    Every command runs serially or unchanged under mpirun/srun; with several ranks the work
    is divided among them and only rank 0 prints.
    """
    if debug:
        os.environ["H5MDTOOL_DEBUG"] = "1"


#: Exit status when the reader of standard output went away (as a shell reports SIGPIPE).
CLOSED_OUTPUT_STATUS = 128 + 13


def stop_on_closed_output():
    """End quietly when standard output was closed by its reader (``h5mdtool info FILE | head``).

    As well-behaved command-line tools do: no message, no traceback, status 141 (what a
    shell reports for SIGPIPE). Standard output is pointed at /dev/null first so that
    Python's final flush does not fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(CLOSED_OUTPUT_STATUS)


def main(argv=None):
    """Run the command line; with the signal handlers that :mod:`h5mdtool.__main__` installs
    before it imports this module (installed here when called otherwise)."""
    keep_freed_heap()
    interrupts.install()
    try:
        cli.main(args=argv, prog_name="h5mdtool", standalone_mode=True)
    except SystemExit as ending:
        try:
            sys.stdout.flush()  # output still buffered: the reader may be gone by now
        except BrokenPipeError:
            stop_on_closed_output()
        if hdf5_exit_is_unsafe():
            interrupts.settle()
            leave_without_hdf5_exit_handler(ending.code)
        raise ending
    finally:
        interrupts.settle()  # a signal that arrived while finishing still ends the run as one


def leave_without_hdf5_exit_handler(code):
    """End the process without running HDF5's exit handler, which would crash.

    After HDF5 failed to close a file (its metadata could not be written: a full disk),
    HDF5 1.10.8 crashes with a segmentation fault when its exit handler closes that file
    again, after the error was reported. Every output was already removed by then; MPI is
    finalized (the error reached every rank, or the job was aborted before this point).
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    module = sys.modules.get("mpi4py.MPI")
    if module is not None and module.Is_initialized() and not module.Is_finalized():
        module.Finalize()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        code = 1
    os._exit(code)

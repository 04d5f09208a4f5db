"""``python -m h5mdtool`` and the ``h5mdtool`` command."""


def main(argv=None):
    """Install the signal handling, then import and run the command line.

    The handlers come first: importing numpy, h5py and MDAnalysis takes about a second, and
    a Ctrl-C (or a batch system's signal) during it must end the run as any other does, with
    one line and status 128 + the signal number, not a ``KeyboardInterrupt`` traceback.
    """
    from .parallel import interrupts

    interrupts.install()
    from .cli.main import main as run

    return run(argv)


if __name__ == "__main__":
    main()

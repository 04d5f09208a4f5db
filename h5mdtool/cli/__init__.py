"""The ``h5mdtool`` command line: a click group (:mod:`.main`) and one module per command.

Each command module only parses options, calls the library API and prints its summary;
options shared by several commands live in :mod:`.options`.

May import: every other subpackage (the top layer).
"""

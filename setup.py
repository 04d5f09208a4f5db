"""Build of h5mdtool's one C extension (metadata and dependencies are in setup.cfg).

``h5mdtool.formats._xtcframe`` decodes XTC frames with every read checked against the
frame's bounds (docs/convert.md, "Reading XTC"); ``pip install -e .`` (tools/install.sh)
compiles it, which needs a C compiler and the Python headers.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("h5mdtool.formats._xtcframe", ["h5mdtool/formats/_xtcframe.c"],
                             extra_compile_args=["-O2", "-std=c99"])])

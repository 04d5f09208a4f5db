"""The public API: `import h5mdtool` exposes exactly the names docs/api.md documents, each with
its signature as the code has it, and loads none of the heavy libraries."""

import inspect
import os
import re
import subprocess
import sys

import h5mdtool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "api.md")


def documented():
    """``{name: signature text or None}`` of the ``### `name` `` sections of docs/api.md."""
    text = open(DOC).read()
    sections = re.split(r"^### `([^`]+)`$", text, flags=re.M)[1:]
    found = {}
    for name, body in zip(sections[::2], sections[1::2]):
        signature = re.search(rf"```python\nh5mdtool\.{re.escape(name)}(\(.*\))\n```", body)
        found[name] = signature.group(1) if signature else None
    return found


def test_public_names_are_exactly_the_documented_ones():
    names = documented()
    classes = set(re.findall(r"^\| `(\w+)` \|", open(DOC).read(), flags=re.M))
    public = set(h5mdtool.__all__) - {"__version__"}
    assert set(names) | classes == public
    assert not set(names) & classes
    assert "`__version__`" in open(DOC).read()
    for name in classes:
        assert issubclass(getattr(h5mdtool, name), Exception)


def test_every_signature_is_the_codes():
    for name, signature in documented().items():
        assert signature == str(inspect.signature(getattr(h5mdtool, name))), name


def test_every_public_function_has_a_docstring_summary():
    for name in set(h5mdtool.__all__) - {"__version__"}:
        doc = inspect.getdoc(getattr(h5mdtool, name))
        assert doc and doc.splitlines()[0].strip(), name


def test_import_exposes_only_the_api_and_loads_nothing_heavy():
    code = ("import sys, h5mdtool; heavy = [m for m in ('h5py', 'MDAnalysis', 'mpi4py', 'numpy') if m in sys.modules]; "
            "import h5mdtool.cli.main, h5mdtool.formats; print(heavy, dir(h5mdtool) == sorted(h5mdtool.__all__))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.stdout.split("\n")[0] == "[] True", done.stdout + done.stderr

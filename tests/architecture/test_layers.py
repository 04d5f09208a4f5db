"""The package's layers: imports go down (cli -> commands -> formats/h5md -> parallel), never up,
and no module imports itself back through others.

The graph is built from the source with :mod:`ast`, counting imports inside functions as
well: a lazy import still ties the two modules together.
"""

import ast
import os

import pytest

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "h5mdtool")

#: Subpackages from the bottom layer up; a module may import its own subpackage and those
#: listed before it.
LAYERS = ["parallel", "h5md", "formats", "mdanalysis", "conversion", "subfiles", "check", "bench", "cli"]
#: What a module may take from the package root (the root's lazy public API is for users).
ROOT_NAMES = {"__version__"}


def _modules():
    """Module name -> source path, for every Python module and C extension (``.c``) of the package."""
    modules = {}
    for directory, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".c"):
                parts = ["h5mdtool"] + os.path.relpath(os.path.join(directory, name), PACKAGE_DIR)[:-2].split(os.sep)
                modules[".".join(parts)] = None
            elif name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = ["h5mdtool"] + os.path.relpath(path, PACKAGE_DIR)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = path
    return modules


def _imports(name, path, modules):
    """(imported module, names taken from it, line) for every h5mdtool import in *path*."""
    package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "h5mdtool":
                    yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "h5mdtool":
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in modules:
                    yield submodule, (), node.lineno
                else:
                    yield target, (alias.name,), node.lineno


def _graph():
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        if path is None:
            continue
        graph[name] = [(target, names, line) for target, names, line in _imports(name, path, modules)
                       if target != name]
    return modules, graph


def _layer(module):
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_subpackage_has_a_layer():
    subpackages = {entry for entry in os.listdir(PACKAGE_DIR)
                   if os.path.isfile(os.path.join(PACKAGE_DIR, entry, "__init__.py"))}
    assert subpackages <= set(LAYERS), f"subpackages without a layer: {sorted(subpackages - set(LAYERS))}"


def test_top_level_holds_only_the_package_entry_points():
    entries = {entry for entry in os.listdir(PACKAGE_DIR) if entry.endswith(".py")}
    assert entries == {"__init__.py", "__main__.py"}


def test_every_import_names_a_module_that_exists():
    modules, graph = _graph()
    missing = [f"{module}:{line} imports {target}" for module, imports in graph.items()
               for target, _, line in imports if target not in modules]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def test_imports_go_down_the_layers():
    modules, graph = _graph()
    upward = []
    for module, imports in graph.items():
        layer = _layer(module)
        for target, names, line in imports:
            if target == "h5mdtool":
                if module != "h5mdtool.__main__" and set(names) - ROOT_NAMES:
                    upward.append(f"{module}:{line} takes {sorted(set(names) - ROOT_NAMES)} from the package root")
                continue
            if layer is None or _layer(target) is None:
                continue
            if _layer(target) > layer:
                upward.append(f"{module}:{line} imports {target}")
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_no_import_cycles():
    modules, graph = _graph()
    edges = {module: sorted({target for target, _, _ in imports if target in graph and target != "h5mdtool"})
             for module, imports in graph.items()}
    cycles = []
    state = {}

    def visit(module, stack):
        state[module] = "open"
        stack.append(module)
        for target in edges[module]:
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("name", ["h5py", "MDAnalysis", "mpi4py", "click", "tqdm"])
def test_importing_the_package_stays_light(name):
    import subprocess
    import sys

    code = f"import h5mdtool, sys; print(any(m == {name!r} or m.startswith({name!r} + '.') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False", f"import h5mdtool imports {name}"

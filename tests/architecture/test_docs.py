"""The documentation points only at what the repository holds.

Every relative link of README.md and docs/*.md resolves (file and heading anchor), every
repository path they name exists (a ``file.py::test_name`` names a test that exists), and
no document, docstring or help text refers to notes or papers kept outside the repository:
publications are cited by authors, title, venue and DOI (docs/references.md).
"""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md"] + sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "docs", "*.md")))
#: Top-level entries a path in the docs may start with.
TOP_LEVEL = ("h5mdtool", "docs", "tests", "benchmarks", "tools", "examples")
TOP_FILES = ("README.md", "Makefile", "setup.py", "setup.cfg", "pyproject.toml")
#: Paths the docs name that exist only after a command ran (make bench's inputs and results).
GENERATED = ("benchmarks/results/", "benchmarks/data/")
#: Paths inside other packages, named as such (``MDAnalysis/coordinates/TRJ.py``).
EXTERNAL = ("MDAnalysis/", "MDAnalysisTests/")
#: A repository path: a top-level directory followed by path characters, or a top-level
#: file; not part of a longer path (``/abs/docs/x`` or ``.venv/...``).
PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(TOP_LEVEL) + r")/[\w./*-]*|"
                  + "|".join(re.escape(name) for name in TOP_FILES) + r")(?:::(\w+))?")
#: A path to a source or document file, wherever it starts (``formats/netcdf3.py``).
SOURCE_PATH = re.compile(r"(?<![\w./~-])([\w-]+(?:/[\w.-]+)+\.(?:py|md|c|sh))\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: Words that send readers outside the repository (split so this file does not match).
FORBIDDEN = [re.compile(pattern, re.IGNORECASE) for pattern in (
    r"DESIGN" r"\.md", r"shared" r"/papers", r"\bpapers?\s+0\d\d\b", r"\bpapers?\s+\d{3}\s+and\s+\d{3}\b",
)]


def _read(relative):
    with open(os.path.join(ROOT, relative), encoding="utf-8") as handle:
        return handle.read()


def _slug(heading):
    """GitHub's anchor of a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(relative):
    """Every heading anchor of a Markdown file (GitHub numbers repeated ones -1, -2...)."""
    anchors, seen, in_code = set(), {}, False
    for line in _read(relative).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _missing_paths(relative):
    """The repository paths named in *relative* that do not exist."""
    missing = []
    text = _read(relative)
    for match in PATH.finditer(text):
        path, test = match.group(1).rstrip(".,;:"), match.group(2)
        if (path.rstrip("/") + "/").startswith(GENERATED):
            continue
        if "*" in path:
            if not glob.glob(os.path.join(ROOT, path)):
                missing.append(path)
            continue
        full = os.path.join(ROOT, path)
        if not os.path.exists(full):
            missing.append(path)
        elif test and not re.search(rf"^\s*def {test}\(", _read(path), re.MULTILINE):
            missing.append(f"{path}::{test}")
    for match in SOURCE_PATH.finditer(text):
        path = match.group(1)
        if path.startswith(GENERATED + EXTERNAL):
            continue
        # docs/architecture.md names modules relative to the package (``formats/base.py``)
        if not any(os.path.exists(os.path.join(ROOT, base, path)) for base in ("", "h5mdtool")):
            missing.append(path)
    return sorted(set(missing))


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    """Every relative link names an existing file, and its #anchor a heading of it."""
    broken = []
    for target in LINK.findall(_read(doc)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(os.path.join(ROOT, linked)):
            broken.append(target)
        elif anchor and linked.endswith(".md") and anchor not in _anchors(linked):
            broken.append(target)
    assert broken == [], f"{doc}: links to nothing: {broken}"


@pytest.mark.parametrize("doc", DOCS)
def test_repository_paths_exist(doc):
    """Every file or directory of the repository a document names exists."""
    missing = _missing_paths(doc)
    assert missing == [], f"{doc} names paths the repository does not hold: {missing}"


#: Texts besides the documents that point users at files: the Makefile's help, the
#: commands' help, the examples and tools.
POINTING_TEXTS = ["Makefile"] + sorted(
    os.path.relpath(path, ROOT) for pattern in ("h5mdtool/cli/*.py", "examples/*", "tools/*")
    for path in glob.glob(os.path.join(ROOT, pattern)) if os.path.isfile(path))


@pytest.mark.parametrize("text", POINTING_TEXTS)
def test_help_and_tools_name_existing_paths(text):
    """Every file or directory of the repository the Makefile, a command's help, an example or a
    tool names exists (``make help`` named a benchmarks/README.md the repository never held)."""
    missing = _missing_paths(text)
    assert missing == [], f"{text} names paths the repository does not hold: {missing}"


def _repository_texts():
    """README, docs, and every Python, shell and Makefile text of the repository but this file."""
    patterns = ["README.md", "Makefile", "docs/*.md", "examples/*", "tools/*", "benchmarks/*.py", "benchmarks/*.md",
                "h5mdtool/**/*.py", "h5mdtool/**/*.c", "tests/**/*.py", "tests/**/*.md", "setup.py", "setup.cfg"]
    this = os.path.abspath(__file__)
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            if os.path.isfile(path) and os.path.abspath(path) != this:
                yield os.path.relpath(path, ROOT)


def test_nothing_outside_the_repository_is_cited():
    """No text refers to design notes or a papers folder outside the repository, or to papers by number."""
    found = []
    for relative in _repository_texts():
        for number, line in enumerate(_read(relative).splitlines(), 1):
            if any(pattern.search(line) for pattern in FORBIDDEN):
                found.append(f"{relative}:{number}: {line.strip()[:100]}")
    assert found == [], "cite publications as docs/references.md does:\n" + "\n".join(found)


def test_docs_named_by_the_package_exist():
    """Help texts and messages that send users to docs/*.md send them to a file that exists."""
    missing = set()
    for path in glob.glob(os.path.join(ROOT, "h5mdtool", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as handle:
            for name in re.findall(r"docs/[\w-]+\.md", handle.read()):
                if not os.path.exists(os.path.join(ROOT, name)):
                    missing.add(f"{os.path.relpath(path, ROOT)}: {name}")
    assert missing == set()


#: What makes a user document read as a developer's diary rather than state the program.
DIARY = [re.compile(pattern, re.IGNORECASE) for pattern in (
    r"\bissues?\s+#?\d+", r"\bcommit\s+[0-9a-f]{7,40}\b", r"\bon\s+[0-9a-f]{7,40}\b", r"\bthis branch\b",
    r"\bload average\s+\d", r"\bthis machine\b", r"\b20\d\d-\d\d-\d\d\b(?!T)",
)]


@pytest.mark.parametrize("doc", DOCS)
def test_docs_state_the_program_not_its_history(doc):
    """No issue numbers, commit hashes, branches or dated runs on a particular machine."""
    found = [f"{number}: {line.strip()[:100]}" for number, line in enumerate(_read(doc).splitlines(), 1)
             if any(pattern.search(line) for pattern in DIARY) and "GROMACS issue" not in line]
    assert found == [], f"{doc}:\n" + "\n".join(found)


@pytest.mark.parametrize("script", sorted(glob.glob(os.path.join(ROOT, "examples", "*.sh"))))
def test_job_scripts_use_the_installers_environment(script):
    """The Slurm examples activate the ./.venv that make install creates in the clone."""
    with open(script, encoding="utf-8") as handle:
        text = handle.read()
    assert re.search(r"^source \S*/\.venv/bin/activate", text, re.MULTILINE), script
    assert "venvs/" not in text

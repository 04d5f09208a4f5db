"""validate --against: every changed value is a difference, NaN and inf included (issue 15).

A small TRR (positions, velocities, forces, a periodic box), an XTC and the AdK DCD are
converted; then one value of one field at one frame is changed in the copy (or in the
source) and the comparison must name exactly that frame and field, with and without a
tolerance, serially and on 2 and 3 ranks (tests marked ``mpi``).
"""

import os
import shutil

import h5py
import numpy as np
import pytest

from h5mdtool import convert, validate
from h5mdtool.check.compare import compare_with_source

TRAJ = "particles/trajectory"
N_ATOMS = 40
VALUES = {"changed": None, "nan": np.nan, "inf": np.inf, "-inf": -np.inf}


def _frames(n_frames, seed=7):
    rng = np.random.default_rng(seed)
    positions = rng.uniform(0.5, 4.5, (n_frames, N_ATOMS, 3)).astype(np.float32)
    velocities = rng.normal(0.0, 0.5, (n_frames, N_ATOMS, 3)).astype(np.float32)
    forces = rng.normal(0.0, 100.0, (n_frames, N_ATOMS, 3)).astype(np.float32)
    return positions, velocities, forces


def write_trr(path, n_frames, poison=None, edge=5.0):
    """A TRR of *n_frames* frames with x, v, f and a cubic box of *edge* nm; *poison* =
    (field, frame, value) changes one entry."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    positions, velocities, forces = _frames(n_frames)
    box = np.diag([edge] * 3).astype(np.float32)
    data = {"positions": positions, "velocities": velocities, "forces": forces}
    if poison:
        field, frame, value = poison
        data[field][frame, 3, 1] = value
    with TRRFile(path, "w") as handle:
        for frame in range(n_frames):
            handle.write(data["positions"][frame], data["velocities"][frame], data["forces"][frame], box,
                         10 * frame, 0.5 * frame, 0.0, N_ATOMS)


def write_xtc(path, n_frames):
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    positions = _frames(n_frames)[0]
    box = np.diag([5.0, 5.0, 5.0]).astype(np.float32)
    with XTCFile(path, "w") as handle:
        for frame in range(n_frames):
            handle.write(positions[frame], box, 10 * frame, 0.5 * frame)


@pytest.fixture(scope="module")
def sources(comm, session_dir, adk):
    """TRR (12 frames), XTC (12 frames), DCD (AdK, 98 frames) and their H5MD copies."""
    directory = os.path.join(session_dir, "compare-sources")
    paths = {"TRR": os.path.join(directory, "src.trr"), "XTC": os.path.join(directory, "src.xtc"), "DCD": adk[1]}
    if comm.rank == 0:
        os.makedirs(directory)
        write_trr(paths["TRR"], 12)
        write_xtc(paths["XTC"], 12)
    comm.Barrier()
    copies = {}
    for fmt, source in paths.items():
        copies[fmt] = os.path.join(directory, f"copy-{fmt}.h5md")
        convert(source, copies[fmt], comm=comm, progress=False)
    comm.Barrier()
    return paths, copies


def _dataset_path(field):
    return {"positions": f"{TRAJ}/position/value", "velocities": f"{TRAJ}/velocity/value",
            "forces": f"{TRAJ}/force/value", "box": f"{TRAJ}/box/edges/value",
            "time": f"{TRAJ}/position/time", "step": f"{TRAJ}/position/step"}[field]


def _mutate(path, field, frame, kind):
    with h5py.File(path, "r+") as f:
        dataset = f[_dataset_path(field)]
        index = (frame,) if field in ("time", "step") else (frame, 1, 1) if field == "box" else (frame, 3, 1)
        old = dataset[index]
        if kind == "changed":
            new = old + (1 if field == "step" else 1e-2 * max(1.0, abs(float(old))))
        else:
            new = VALUES[kind]
        dataset[index] = new


def _cases():
    cases = []
    for fmt, fields in (("TRR", ("positions", "velocities", "forces", "box", "time", "step")),
                        ("XTC", ("positions", "box", "time", "step")), ("DCD", ("positions", "time", "step"))):
        for field in fields:
            for kind in (("changed",) if field == "step" else tuple(VALUES)):
                cases.append((fmt, field, kind))
    return cases


@pytest.mark.mpi
@pytest.mark.parametrize("fmt,field,kind", _cases(), ids=["-".join(c) for c in _cases()])
def test_against_reports_every_changed_value_at_its_frame(comm, shared_tmp, sources, fmt, field, kind):
    """Regression (issue 15): NaN and inf were accepted with a tolerance, and for DCD without one."""
    paths, copies = sources
    path = os.path.join(shared_tmp, "mutated.h5md")
    n_frames = 98 if fmt == "DCD" else 12
    frame = n_frames - 2  # on the last rank
    if comm.rank == 0:
        shutil.copy(copies[fmt], path)
        _mutate(path, field, frame, kind)
    comm.Barrier()
    differs = "box" if field == "box" else field
    for tolerance in (None, 0.5):
        result = compare_with_source([path], [paths[fmt]], comm=comm, tolerance=tolerance)
        found = [(d["frame"], d["differs"]) for d in result["differing"]]
        if tolerance and kind == "changed" and field not in ("step", "time"):
            assert found == [], (tolerance, result)  # within the tolerance
            continue
        assert found == [(frame, [differs])], (tolerance, result)
        assert result["n_differing"] == 1
    if kind not in ("changed", "nan"):
        return  # the whole command once per field and kind of change (each run starts a reader process under MPI)
    report = validate([path], comm=comm, against=[paths[fmt]], tolerance=0.5 if kind != "changed" else None)
    assert report.exit_code == 1
    against = [f for f in report.files[0].errors if f.rule == "AGAINST002"]
    assert len(against) == 1 and f"frame {frame}: " in against[0].message


def _nudge(path, field, index, change):
    with h5py.File(path, "r+") as f:
        dataset = f[_dataset_path(field)]
        old = dataset[index]
        dataset[index] = old + 1e-5 if change == "1e-5" else np.nextafter(old, np.inf, dtype=dataset.dtype)


@pytest.mark.parametrize("change", ["ulp", "1e-5"])
@pytest.mark.parametrize("fmt,field", [("TRR", "positions"), ("TRR", "velocities"), ("TRR", "forces"),
                                       ("TRR", "box"), ("XTC", "positions"), ("XTC", "box")])
def test_against_float32_sources_compare_exactly(tmp_path, sources, fmt, field, change):
    """Any change of a value copied from a float32 source in the file's units is a difference,
    the box included."""
    paths, copies = sources
    path = str(tmp_path / "nudged.h5md")
    shutil.copy(copies[fmt], path)
    _nudge(path, field, (5, 0, 0) if field == "box" else (5, 3, 1), change)
    result = compare_with_source([path], [paths[fmt]])
    assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(5, [field])]


@pytest.mark.parametrize("change", ["ulp", "1e-5"])
@pytest.mark.parametrize("source", ["solvated", "15 nm box"])
def test_against_trr_box_edge_changed_slightly(tmp_path, solvated, source, change):
    """Regression: a box edge changed by 1e-5 nm (within 1e-6 of a 15 nm edge), or by one unit
    in the last place, passed --against a TRR, though float32 sources compare exactly."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    trr = solvated["TRR"] if source == "solvated" else str(tmp_path / "big.trr")
    if source != "solvated":
        write_trr(trr, 6, edge=15.0)
    with TRRFile(trr) as handle:
        boxes = np.array([frame.box for frame in handle])
    edge = tuple(int(i) for i in np.unravel_index(np.argmax(boxes[3]), boxes[3].shape))
    path = str(tmp_path / "copy.h5md")
    convert(trr, path, progress=False)
    assert compare_with_source([path], [trr])["n_differing"] == 0
    _nudge(path, "box", (3,) + edge, change)
    with h5py.File(path, "r") as f:
        assert f[_dataset_path("box")][(3,) + edge] != boxes[(3,) + edge]
    result = compare_with_source([path], [trr])
    assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(3, ["box"])]


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["nan", "inf"])
@pytest.mark.parametrize("field", ["positions", "velocities", "forces"])
def test_against_reports_nonfinite_source_values(comm, shared_tmp, sources, field, kind):
    """Regression (issue 15): a NaN or inf on the source's side is a difference too."""
    paths, copies = sources
    source = os.path.join(shared_tmp, "poisoned.trr")
    if comm.rank == 0:
        write_trr(source, 12, poison=(field, 5, VALUES[kind]))
    comm.Barrier()
    for tolerance in (None, 1.0):
        result = compare_with_source([copies["TRR"]], [source], comm=comm, tolerance=tolerance)
        assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(5, [field])]
        assert "not finite" in result["differing"][0]["reason"]


@pytest.mark.mpi
def test_against_nan_on_both_sides_is_a_difference(comm, shared_tmp):
    """A faithful copy of a source holding NaN must not pass as 'equal to the source'."""
    source = os.path.join(shared_tmp, "nan.trr")
    copy = os.path.join(shared_tmp, "nan.h5md")
    clean = os.path.join(shared_tmp, "clean.trr")
    if comm.rank == 0:
        write_trr(clean, 12)
        write_trr(source, 12, poison=("positions", 8, np.nan))
    comm.Barrier()
    convert(clean, copy, comm=comm, progress=False)  # convert refuses NaN: poison the copy by hand
    comm.Barrier()
    if comm.rank == 0:
        _mutate(copy, "positions", 8, "nan")
    comm.Barrier()
    result = compare_with_source([copy], [source], comm=comm, tolerance=0.1)
    assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(8, ["positions"])]


@pytest.mark.mpi
@pytest.mark.parametrize("frame", [0, 299, 300, 599])
def test_against_600_frames_in_small_blocks(comm, shared_tmp, frame):
    """600 frames read in blocks of 7 frames per rank: a NaN is found wherever it sits."""
    source = os.path.join(shared_tmp, "long.trr")
    copy = os.path.join(shared_tmp, "long.h5md")
    if comm.rank == 0:
        write_trr(source, 600)
    comm.Barrier()
    convert(source, copy, comm=comm, progress=False)
    comm.Barrier()
    if comm.rank == 0:
        _mutate(copy, "positions", frame, "nan")
    comm.Barrier()
    frame_bytes = N_ATOMS * 12 * 3 * 2
    for tolerance in (None, 0.01):
        result = compare_with_source([copy], [source], comm=comm, tolerance=tolerance, block_bytes=7 * frame_bytes)
        assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(frame, ["positions"])]
    report = validate([copy], comm=comm, against=[source], tolerance=0.01)
    assert report.exit_code == 1 and {f.rule for f in report.files[0].errors} == {"AGAINST002", "DATA002"}


def test_against_h5md_without_time(tmp_path, sources):
    """Regression (issue 16): a valid H5MD without time differed from its source at every frame."""
    paths, copies = sources
    path = str(tmp_path / "notime.h5md")
    shutil.copy(copies["TRR"], path)
    with h5py.File(path, "r+") as f:
        for element in ("position", "velocity", "force", "box/edges"):
            del f[f"{TRAJ}/{element}/time"]
    result = compare_with_source([path], [paths["TRR"]])
    assert result["n_differing"] == 0 and result["time_compared"] is False
    report = validate([path], against=[paths["TRR"]])
    assert not [f for f in report.files[0].findings if f.rule.startswith("AGAINST")]
    # MDAnalysis 2.11's H5MDReader raises KeyError for a file without time: still an error
    assert {f.rule for f in report.files[0].errors} == {"MDA003"}
    with h5py.File(path, "r+") as f:
        f[f"{TRAJ}/position/step"][4] += 1
    result = compare_with_source([path], [paths["TRR"]])
    assert [(d["frame"], d["differs"]) for d in result["differing"]] == [(4, ["step"])]


@pytest.mark.parametrize("steps", ["constant", "reset"])
def test_against_parts_with_constant_or_reset_steps(tmp_path, steps):
    """Regression (issue 16): byte-exact XTC parts whose steps are constant or restart were 'not comparable'."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    positions = _frames(12)[0]
    box = np.diag([5.0, 5.0, 5.0]).astype(np.float32)
    numbers = np.zeros(12, int) if steps == "constant" else np.arange(12) % 5
    source = str(tmp_path / "source.xtc")
    with XTCFile(source, "w") as handle:
        for frame in range(12):
            handle.write(positions[frame], box, int(numbers[frame]), float(numbers[frame]))
    parts = []
    for number, (start, stop) in enumerate([(0, 4), (4, 8), (8, 12)]):
        parts.append(str(tmp_path / f"part-{number}.xtc"))
        with XTCFile(parts[-1], "w") as handle:
            for frame in range(start, stop):
                handle.write(positions[frame], box, int(numbers[frame]), float(numbers[frame]))
    result = compare_with_source(parts, [source])
    assert result["compared_frames"] == 12 and result["n_differing"] == 0
    swapped = compare_with_source([parts[1], parts[0], parts[2]], [source])
    assert [d["frame"] for d in swapped["differing"]] == list(range(8))


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    """The xvf TRR's protein converted with its TPR (ids stored), and that file's C-alphas."""
    from MDAnalysisTests.datafiles import TPR_xvf, TRR_xvf

    directory = tmp_path_factory.mktemp("selected")
    protein, calpha = str(directory / "protein.h5md"), str(directory / "calpha.h5md")
    convert(TRR_xvf, protein, topology=TPR_xvf, select="protein", progress=False)
    convert(protein, calpha, select="name CA", progress=False)
    return TRR_xvf, protein, calpha


@pytest.mark.mpi
def test_against_compares_a_selection_of_atoms_by_their_stored_ids(comm, shared_tmp, selected):
    """A file converted from a selection of atoms is compared with the source's atoms of the
    ids it stores, also when its source was such a file itself (regression: AGAINST001,
    'N atoms, the source has M', for every file converted with --select)."""
    trr, protein, calpha = selected
    for path, source in ((protein, trr), (calpha, protein), (calpha, trr)):
        report = validate([path], comm=comm, against=[source])
        assert report.exit_code == 0, [f.message for f in report.files[0].errors]
        comparison = report.files[0].comparison
        assert comparison["atoms_by_id"] and comparison["compared_frames"] == 3 and comparison["n_differing"] == 0
    changed = os.path.join(shared_tmp, "calpha-changed.h5md")
    if comm.rank == 0:
        shutil.copy(calpha, changed)
        with h5py.File(changed, "r+") as f:
            f["particles/trajectory/position/value"][2, 7, 1] += 0.001
    comm.Barrier()
    report = validate([changed], comm=comm, against=[trr])
    against = [f for f in report.files[0].errors if f.rule == "AGAINST002"]
    assert len(against) == 1 and "frame 2: " in against[0].message


def test_against_a_selection_without_matching_ids_is_refused(tmp_path, selected):
    trr, protein, _ = selected
    for name, change in (("outside", lambda ids: ids + 10**9), ("none", None)):
        path = str(tmp_path / f"{name}.h5md")
        shutil.copy(protein, path)
        with h5py.File(path, "r+") as f:
            ids = f["particles/trajectory/id"][()]
            del f["particles/trajectory/id"]
            if change is not None:
                f["particles/trajectory/id"] = change(ids)
        report = validate([path], against=[trr])
        rules = [f.rule for f in report.files[0].errors]
        assert rules == ["AGAINST001"] and not report.files[0].comparison["atoms_by_id"], rules


@pytest.mark.mpi
def test_against_parts_of_a_selection_need_the_same_ids_in_every_part(comm, shared_tmp, selected):
    """Parts split from a file holding a selection are compared by their stored ids; a part
    storing other ids than the first makes the comparison by id impossible on every rank
    (each rank checks its share of the parts)."""
    from h5mdtool import split

    trr, protein, _ = selected
    outdir = os.path.join(shared_tmp, "protein-parts")
    split([protein], outdir, 3, comm=comm, format="h5md", progress=False)
    parts = sorted(os.path.join(outdir, name) for name in os.listdir(outdir) if name.endswith(".h5md"))
    assert len(parts) == 3
    report = validate([outdir], comm=comm, against=[trr])
    assert report.exit_code == 0, [f.message for f in report.files[0].errors]
    comparison = report.files[0].comparison
    assert comparison["atoms_by_id"] and comparison["compared_frames"] == 3 and comparison["n_differing"] == 0
    comm.Barrier()
    if comm.rank == 0:
        with h5py.File(parts[2], "r+") as f:
            ids = f["particles/trajectory/id"][()]
            f["particles/trajectory/id"][...] = ids[::-1]
    comm.Barrier()
    report = validate([outdir], comm=comm, against=[trr], checksums=False)  # the part changed since the split
    rules = [f.rule for f in report.files[0].errors]
    assert rules == ["AGAINST001"] and not report.files[0].comparison["atoms_by_id"], rules

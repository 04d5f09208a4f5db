"""Data sanity rules DATA001-DATA006 (issue 15): a plain validate catches garbage data."""

import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from h5mdtool import convert
from h5mdtool.cli.main import cli
from h5mdtool.check.h5access import storage
from h5mdtool.check.sanity import Extremes, block_plan, frame_ranges
from h5mdtool.check.validate import validate_file

TRAJ = "particles/trajectory"
POSITION = f"{TRAJ}/position/value"
EDGES = f"{TRAJ}/box/edges/value"


@pytest.fixture(scope="module")
def good(tmp_path_factory, solvated):
    """4 frames of the solvated XTC (periodic box), as convert writes it."""
    path = str(tmp_path_factory.mktemp("sanity") / "good.h5md")
    convert(solvated["XTC"], path, progress=False, stop=4)
    return path


@pytest.fixture(scope="module")
def open_box(tmp_path_factory, adk):
    """10 frames of the AdK DCD (no box)."""
    path = str(tmp_path_factory.mktemp("sanity") / "adk.h5md")
    convert(adk[1], path, progress=False, stop=10)
    return path


def changed(tmp_path, source, change, name="bad.h5md"):
    path = str(tmp_path / name)
    shutil.copy(source, path)
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def found(path, rule, profile="all"):
    return [(f.path, f.message) for f in validate_file(path, profile).findings if f.rule == rule]


def test_clean_files_have_no_data_findings(good, open_box):
    for path in (good, open_box):
        assert not [f for f in validate_file(path).findings if f.rule.startswith("DATA")]


def test_zeroed_file_fails_validate(tmp_path, good):
    """Regression (issue 15): a file whose coordinates are all 0.0 was called valid."""
    path = changed(tmp_path, good, lambda f: f[POSITION].__setitem__(np.s_[:], 0.0))
    assert found(path, "DATA001") == [(f"/{POSITION}", "every position is 0.0 at frames 0-3 (4 of 4 frames): data never written or lost")]
    for profile in ("all", "h5md", "mdanalysis"):
        result = CliRunner().invoke(cli, ["validate", path, "--profile", profile])
        assert result.exit_code == 1 and "DATA001" in result.output, result.output


def test_single_chunk_bug_file_fails_validate(tmp_path, open_box):
    """HDF5 1.10.8's trap (a dataset in one chunk written with no chunk cache and fill time never) reads as zeros."""
    with h5py.File(open_box, "r") as f:
        data = f[POSITION][:]
        attributes = dict(f[POSITION].attrs)
    path = str(tmp_path / "single.h5md")
    shutil.copy(open_box, path)
    with h5py.File(path, "r+", rdcc_nbytes=0) as f:
        del f[POSITION]
        dataset = f.create_dataset(POSITION, shape=data.shape, dtype="f4", chunks=data.shape, fill_time="never")
        dataset[:] = data
        dataset.attrs.update(attributes)
    with h5py.File(path, "r") as f:
        if np.any(f[POSITION][:]):
            pytest.skip("this HDF5 does not have the single-chunk bug")
    report = validate_file(path)
    assert {f.rule for f in report.errors} & {"DATA001", "DATA006"}
    assert CliRunner().invoke(cli, ["validate", path]).exit_code == 1


def test_some_zero_frames_are_named(tmp_path, good):
    def zero(f):
        f[POSITION][1] = 0.0
        f[POSITION][3] = -0.0

    assert found(changed(tmp_path, good, zero), "DATA001")[0][1].startswith("every position is 0.0 at frames 1, 3 (2 of 4 frames)")


def test_one_atom_at_the_origin_is_fine(tmp_path):
    path = str(tmp_path / "one.h5md")
    with h5py.File(path, "w") as f:
        f.create_dataset(POSITION, data=np.zeros((3, 1, 3), np.float32))
        f[f"{TRAJ}/position/step"] = np.arange(3)
    assert found(path, "DATA001") == []


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("element", ["position", "velocity", "force"])
def test_nonfinite_values(tmp_path, solvated, element, value):
    path = str(tmp_path / "trr.h5md")
    convert(solvated["TRR"], path, progress=False, stop=3)
    with h5py.File(path, "r+") as f:
        if element == "force":
            f[f"{TRAJ}/force/value"] = np.ones((3, 47681, 3), np.float32)
            f[f"{TRAJ}/force/step"] = f[f"{TRAJ}/position/step"]
        f[f"{TRAJ}/{element}/value"][2, 47680, 2] = value
    assert found(path, "DATA002") == [(f"/{TRAJ}/{element}/value", f"{element} values are NaN or inf at frame 2 (1 of 3 frames)")]


def test_nonfinite_box_and_time(tmp_path, good):
    def poison(f):
        f[EDGES][0, 2, 2] = np.inf
        f[f"{TRAJ}/position/time"][3] = np.nan

    path = changed(tmp_path, good, poison)
    assert sorted(found(path, "DATA002")) == [(f"/{EDGES}", "box edges are NaN or inf at frame 0 (1 of 4 frames)"),
                                              (f"/{TRAJ}/position/time", "time is NaN or inf at frame 3 (1 of 4 frames)")]


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("profile", ["h5md", "mdanalysis", "all"])
def test_nonfinite_observables(tmp_path, good, value, profile):
    """Regression: NaN inside an /observables value passed validate."""
    def observables(f):
        step = f[f"{TRAJ}/position/step"]
        energy = f.create_group("observables/energy")
        energy["value"] = np.array([1.0, 2.0, value, 4.0])
        energy["step"] = step
        pressure = f.create_group("observables/thermo/pressure")
        pressure.create_dataset("value", data=np.ones((4, 3, 3)), chunks=(1, 3, 3))
        pressure["value"][1, 2, 0] = value
        pressure["value"][3, 0, 1] = value
        pressure["step"] = step
        f.create_group("observables/count")["value"] = np.array([1, 2, 3, 4])  # integers: never NaN
        f["observables/count/step"] = step
        f["observables/reference_temperature"] = np.array([300.0, value])  # time-independent

    path = changed(tmp_path, good, observables)
    assert sorted(found(path, "DATA002", profile)) == [
        ("/observables/energy/value", "observable energy values are NaN or inf at frame 2 (1 of 4 frames)"),
        ("/observables/reference_temperature", "observable reference_temperature is NaN or inf"),
        ("/observables/thermo/pressure/value", "observable pressure values are NaN or inf at frames 1, 3 (2 of 4 frames)"),
    ]
    clean = changed(tmp_path, good, lambda f: f.create_group("observables/energy").update(
        value=np.arange(4.0), step=f[f"{TRAJ}/position/step"]), "clean.h5md")
    assert found(clean, "DATA002", profile) == []


@pytest.mark.parametrize("lengths,flagged", [(101, True), (-100.5, True), (99, False), (-99, False)])
def test_far_outside_the_box(tmp_path, good, lengths, flagged):
    """A frame moved by more than 100 box lengths (in x) is flagged; unwrapped drift below that is not."""
    def shift(f):
        length = f[EDGES][2, 0, 0]  # a = (length, 0, 0): x is the fractional coordinate along a
        positions = f[POSITION][2]
        x = positions[:, 0]
        positions[:, 0] = x - x.min() + (1 + lengths) * length if lengths > 0 else x - x.max() + lengths * length
        f[POSITION][2] = positions

    result = found(changed(tmp_path, good, shift), "DATA003")
    assert result == ([(f"/{POSITION}", "all atoms lie more than 100 box lengths outside the box at frame 2 (1 of 4 frames)")]
                      if flagged else [])


def test_far_outside_uses_units_and_periodic_dimensions(tmp_path, good):
    def angstrom_positions(f):
        f[POSITION][...] = f[POSITION][...] * 10.0
        f[POSITION].attrs["unit"] = "Angstrom"
        f[POSITION][1, :, 1] += 500.0 * 10.0 * f[EDGES][1, 1, 1]

    assert [m for _, m in found(changed(tmp_path, good, angstrom_positions), "DATA003")] == [
        "all atoms lie more than 100 box lengths outside the box at frame 1 (1 of 4 frames)"]

    def open_in_z(f, axis):
        f[f"{TRAJ}/box"].attrs["boundary"] = np.array(["periodic", "periodic", "none"], dtype=h5py.string_dtype())
        f[EDGES][...] = np.diag([8.0, 8.0, 8.0])
        f[POSITION][1, :, axis] += 500.0 * 8.0

    assert found(changed(tmp_path, good, lambda f: open_in_z(f, 2), "open.h5md"), "DATA003") == []
    assert len(found(changed(tmp_path, good, lambda f: open_in_z(f, 1), "open.h5md"), "DATA003")) == 1


def test_far_outside_a_triclinic_box(tmp_path, good):
    def triclinic(f):
        edges = f[EDGES][:]
        edges[:, 1, 0] = 0.5 * edges[:, 1, 1]  # b leans over a
        f[EDGES][...] = edges
        positions = f[POSITION][0]
        f[POSITION][0] = positions + 200.0 * edges[0, 1]  # 200 lengths along b
    assert [m for _, m in found(changed(tmp_path, good, triclinic), "DATA003")] == [
        "all atoms lie more than 100 box lengths outside the box at frame 0 (1 of 4 frames)"]


def test_steps_and_times_backwards(tmp_path, good):
    def backwards(f):
        f[f"{TRAJ}/position/step"][2] = -1
        time = f[f"{TRAJ}/position/time"]
        time[1], time[2] = time[2], time[1]

    path = changed(tmp_path, good, backwards)
    assert sorted(found(path, "DATA004")) == [(f"/{TRAJ}/position/step", "step goes backwards at frame 2 (1 of 4 frames)"),
                                              (f"/{TRAJ}/position/time", "time goes backwards at frame 2 (1 of 4 frames)")]
    for profile in ("h5md", "mdanalysis"):
        assert len(found(path, "DATA004", profile)) == 2


def test_zero_volume_box(tmp_path, good):
    def flat(f):
        edges = f[EDGES][:]
        edges[1, 2, 2] = 0.0  # a zero edge
        edges[3, 2] = edges[3, 0] + edges[3, 1]  # c in the plane of a and b
        f[EDGES][...] = edges

    assert found(changed(tmp_path, good, flat), "DATA005") == [(f"/{EDGES}", "the periodic box has zero volume at frames 1, 3 (2 of 4 frames)")]

    def open_z(f):  # a zero edge along a dimension that is not periodic is no box at all there
        f[EDGES][1, 2, 2] = 0.0
        f[f"{TRAJ}/box"].attrs["boundary"] = np.array(["periodic", "periodic", "none"], dtype=h5py.string_dtype())

    assert found(changed(tmp_path, good, open_z, "open.h5md"), "DATA005") == []

    def no_box(f):  # all edges 0: the XTC/TRR way of saying "this frame has no box"
        f[EDGES][2] = 0.0

    assert found(changed(tmp_path, good, no_box, "nobox.h5md"), "DATA005") == []


def test_fixed_and_vector_boxes(tmp_path, open_box):
    def fixed_box(f):
        box = f[f"{TRAJ}/box"]
        box.attrs["boundary"] = np.array(["periodic"] * 3, dtype=h5py.string_dtype())
        box["edges"] = np.array([8.0, 0.0, 8.0], np.float32)
        f[POSITION][4] += 1000 * 8.0

    path = changed(tmp_path, open_box, fixed_box)
    assert found(path, "DATA005") == [(f"/{TRAJ}/box/edges", "the periodic box has zero volume at the fixed box")]

    def vector_box(f):
        box = f[f"{TRAJ}/box"]
        box.attrs["boundary"] = np.array(["periodic"] * 3, dtype=h5py.string_dtype())
        edges = box.create_group("edges")
        edges["value"] = np.full((10, 3), 8.0, np.float32)
        edges["value"].attrs["unit"] = "nm"
        edges["step"] = f[f"{TRAJ}/position/step"]
        edges["time"] = f[f"{TRAJ}/position/time"]
        f[POSITION][4] += 1000 * 8.0

    assert [m for _, m in found(changed(tmp_path, open_box, vector_box, "vector.h5md"), "DATA003")] == [
        "all atoms lie more than 100 box lengths outside the box at frame 4 (1 of 10 frames)"]


def test_declared_but_never_stored(tmp_path, good):
    """DATA006: a writer that stopped early (stored prefix) and a file with holes."""
    def prefix(f):
        data = f[POSITION][:2]
        attributes = dict(f[POSITION].attrs)
        del f[POSITION]
        dataset = f.create_dataset(POSITION, shape=(4, 47681, 3), dtype="f4", chunks=(1, 47681, 3))
        dataset[:2] = data
        dataset.attrs.update(attributes)

    path = changed(tmp_path, good, prefix)
    assert found(path, "DATA006") == [(f"/{POSITION}", "position values: 4 rows declared, only rows 0-1 stored; rows 2-3 were never written (readers get the fill value)")]
    assert found(path, "DATA001") == []  # the unstored frames are not read

    def holes(f):
        prefix(f)
        f[POSITION][3] = f[POSITION][0]

    assert "not a written prefix" in found(changed(tmp_path, good, holes, "holes.h5md"), "DATA006")[0][1]


def test_storage_facts(tmp_path):
    path = str(tmp_path / "storage.h5")
    with h5py.File(path, "w") as f:
        full = f.create_dataset("full", data=np.ones((10, 4, 3)), chunks=(3, 4, 3))
        part = f.create_dataset("part", shape=(10, 4, 3), dtype="f4", chunks=(3, 2, 3))
        part[:5] = 1
        empty = f.create_dataset("empty", shape=(2**40,), dtype="f8", chunks=(4096,), maxshape=(None,))
        contiguous = f.create_dataset("contiguous", shape=(100,), dtype="f8")
        (tmp_path / "raw.bin").write_bytes(b"\0" * 80)
        external = f.create_dataset("external", shape=(10,), dtype="f8", external=[(str(tmp_path / "raw.bin"), 0, 80)])
        assert storage(full) == {"layout": "chunked", "external": False, "declared_chunks": 4, "stored_chunks": 4,
                                 "stored_bytes": full.id.get_storage_size(), "complete": True, "stored_rows": 10}
        assert storage(part)["stored_rows"] == 6 and storage(part)["stored_chunks"] == 4  # two rows of two chunks
        assert storage(empty)["stored_rows"] == 0 and storage(empty)["declared_chunks"] == 2**28
        assert storage(contiguous)["stored_rows"] == 0
        assert storage(external)["external"] is True


@pytest.mark.parametrize("chunks", [None, (1, 100, 3), (7, 100, 3), (16, 30, 1), (50, 100, 3)])
def test_extremes_in_bounded_blocks(tmp_path, chunks):
    """Per-frame extremes from blocks of whole chunks (slabs of atoms when a chunk row is too big)."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=(50, 100, 3)).astype(np.float32)
    data[17, 99, 2] = np.nan
    data[33, 0, 0] = np.inf
    path = str(tmp_path / "blocks.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=data, chunks=chunks)
    budget = 4000  # bytes: fewer than one row of chunks for the larger chunk shapes
    with h5py.File(path, "r") as f:
        dataset = f["v"]
        blocks = list(block_plan(dataset.shape, dataset.chunks, 4, 50, budget))
        if chunks:
            assert all(a % chunks[0] == 0 and (b == 50 or b % chunks[0] == 0) and c % chunks[1] == 0 for a, b, c, _ in blocks)
        firsts, mins, maxs = zip(*Extremes(dataset, 50, budget).blocks())
    mins, maxs = np.concatenate(mins), np.concatenate(maxs)
    assert list(firsts) == sorted(set(firsts)) and len(mins) == 50
    np.testing.assert_array_equal(mins, data.min(axis=1))
    np.testing.assert_array_equal(maxs, data.max(axis=1))


def test_frame_ranges():
    assert frame_ranges([7]) == "frame 7"
    assert frame_ranges([0, 1, 2, 5, 7, 8]) == "frames 0-2, 5, 7-8"
    assert frame_ranges(range(10), 98) == "frames 0-9, ..."

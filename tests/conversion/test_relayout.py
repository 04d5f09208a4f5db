"""H5MD input to convert (relayout): rechunk and recompress, carrying everything else over."""

import os

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError
from h5mdtool.h5md.writer import read_provenance


@pytest.fixture(scope="session")
def foreign():
    from MDAnalysisTests.datafiles import H5MD_xvf, TPR_xvf

    return TPR_xvf, H5MD_xvf


def make_auto_chunked(path, frames_angstrom):
    """An H5MD file as pyh5md or plain h5py write it: auto chunks, Angstrom and fs, extras."""
    n_frames, n_atoms, _ = frames_angstrom.shape
    string = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        root = f.create_group("h5md")
        root.attrs["version"] = np.array([1, 1])
        root.create_group("author").attrs["name"] = "Someone Else"
        creator = root.create_group("creator")
        creator.attrs["name"], creator.attrs["version"] = "pyh5md", "1.0"
        traj = f.create_group("particles/trajectory")
        box = traj.create_group("box")
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = np.array(["periodic"] * 3, dtype=string)
        position = traj.create_group("position")
        position.create_dataset("value", data=frames_angstrom, chunks=True, maxshape=(None, n_atoms, 3))
        position["value"].attrs["unit"] = "Angstrom"
        position.create_dataset("step", data=np.arange(n_frames) * 100, maxshape=(None,), chunks=True)
        position.create_dataset("time", data=np.arange(n_frames) * 2000.0, maxshape=(None,), chunks=True)
        position["time"].attrs["unit"] = "fs"
        edges = box.create_group("edges")
        edges.create_dataset("value", data=np.tile(np.diag([80.0, 81.0, 82.0]), (n_frames, 1, 1)))
        edges["value"].attrs["unit"] = "Angstrom"
        edges["step"], edges["time"] = position["step"], position["time"]
        traj.create_dataset("species", data=np.arange(n_atoms) % 5)
        f.create_dataset("particles/solvent/position/value", data=np.zeros((n_frames, 4, 3)))
        f.create_dataset("connectivity/bonds", data=np.array([[0, 1], [1, 2]]))
        f.create_dataset("observables/energy/value", data=np.linspace(-1, 1, n_frames))
        f.create_group("parameters/simulation").attrs["thermostat"] = "v-rescale"
    return path


@pytest.mark.mpi
def test_relayout_foreign_file(comm, shared_tmp, foreign):
    topology, source = foreign
    output = os.path.join(shared_tmp, "relayout.h5md")
    summary = convert(source, output, comm=comm, compression="gzip", chunk_frames="auto", progress=False)
    assert summary["fields"] == ["positions", "velocities", "forces"]
    comm.Barrier()
    a, b = mda.Universe(topology, source), mda.Universe(topology, output)
    for x, y in zip(a.trajectory, b.trajectory):
        np.testing.assert_array_equal(y.positions, x.positions)
        np.testing.assert_array_equal(y.velocities, x.velocities)
        np.testing.assert_array_equal(y.forces, x.forces)
        np.testing.assert_allclose(y.dimensions, x.dimensions)
        assert y.time == x.time and y.data["step"] == x.data["step"]
        assert y.data["lambda"] == x.data["lambda"]  # observables carried over
    with h5py.File(source, "r") as f, h5py.File(output, "r") as g:
        np.testing.assert_array_equal(g["observables/lambda/value"][:], f["observables/lambda/value"][:])
        assert g["h5md/author"].attrs["name"] == f["h5md/author"].attrs["name"]
        assert g["h5md/creator"].attrs["name"] == b"h5mdtool"
        record = read_provenance(g)
    assert record["relayout"]["source_creator"]["name"] == "MDAnalysis"
    assert "/observables/lambda" in record["relayout"]["copied"]


@pytest.mark.mpi
def test_relayout_auto_chunked(comm, shared_tmp, adk_frames):
    source = os.path.join(shared_tmp, "auto.h5md")
    angstrom = adk_frames[:30] * 10
    if comm.rank == 0:
        make_auto_chunked(source, angstrom)
    comm.Barrier()
    with h5py.File(source, "r") as f:
        assert f["particles/trajectory/position/value"].chunks[0] > 1  # frames share chunks
    output = os.path.join(shared_tmp, "rechunked.h5md")
    # h5py lists 'solvent' first, and that is the group MDAnalysis (and h5mdtool by default) read
    with pytest.raises(InputError, match="solvent.*--group"):
        convert(source, output, comm=comm, progress=False)
    convert(source, output, comm=comm, progress=False, group="trajectory")
    comm.Barrier()
    with h5py.File(output, "r") as g:
        value = g["particles/trajectory/position/value"]
        assert value.chunks == (1, 3341, 3) and value.attrs["unit"] == "nm"
        np.testing.assert_allclose(value[:], angstrom / 10, rtol=2.5e-7)
        np.testing.assert_array_equal(g["particles/trajectory/position/step"][:], np.arange(30) * 100)
        np.testing.assert_allclose(g["particles/trajectory/position/time"][:], np.arange(30) * 2.0)  # fs -> ps
        np.testing.assert_allclose(g["particles/trajectory/box/edges/value"][0], np.diag([8.0, 8.1, 8.2]), rtol=1e-6)
        np.testing.assert_array_equal(g["particles/trajectory/species"][:], np.arange(3341) % 5)
        assert g["particles/solvent/position/value"].shape == (30, 4, 3)
        np.testing.assert_array_equal(g["connectivity/bonds"][:], [[0, 1], [1, 2]])
        assert g["observables/energy/value"].shape == (30,)
        assert g["parameters/simulation"].attrs["thermostat"] == "v-rescale"
        assert g["h5md/author"].attrs["name"] == "Someone Else"
    copy = mda.Universe(output)
    np.testing.assert_allclose(copy.trajectory[29].positions, angstrom[29], rtol=3e-7, atol=1e-5)


def test_relayout_with_selection_leaves_out_mismatching_objects(tmp_path, adk_frames):
    """Issue 11 defect 7: a frame selection keeps per-particle data; objects without steps are left out."""
    source = make_auto_chunked(str(tmp_path / "auto.h5md"), adk_frames[:10] * 10)
    output = str(tmp_path / "every_other.h5md")
    summary = convert(source, output, step=2, progress=False, group="trajectory")
    assert summary["n_frames"] == 5
    skipped = " ".join(summary["relayout"]["skipped"])
    assert "/observables/energy" in skipped and "solvent" in skipped and "species" not in skipped
    with h5py.File(output, "r") as g:
        assert "observables" not in g and "connectivity" in g
        np.testing.assert_array_equal(g["particles/trajectory/species"][:], np.arange(3341) % 5)
        np.testing.assert_array_equal(g["particles/trajectory/position/step"][:], [0, 200, 400, 600, 800])


def test_h5md_input_errors(tmp_path):
    bad = tmp_path / "bad.h5md"
    with h5py.File(bad, "w") as f:
        f.create_group("particles/trajectory/velocity")
    with pytest.raises(Exception, match="has no value dataset"):
        convert(str(bad), str(tmp_path / "o.h5md"), progress=False)
    text = tmp_path / "text.h5md"
    text.write_text("not hdf5")
    with pytest.raises(Exception, match="not a readable H5MD file"):
        convert(str(text), str(tmp_path / "o.h5md"), progress=False)


def test_other_particle_group_without_box_gets_one(tmp_path, adk):
    """Found by make fuzz (case 629): a second particle group whose box group is empty (pyh5md)
    lost it when carried over, and the output failed validate (H5MD010). An empty box keeps
    its attributes; a group without any box gets an open one."""
    from h5mdtool import split, validate

    source = str(tmp_path / "two_groups.h5md")
    convert(adk[1], source, stop=6, progress=False)
    with h5py.File(source, "r+") as f:
        water = f.create_group("particles/water/position")
        water["value"] = np.ones((6, 2, 3), np.float32)
        water["step"] = f["particles/trajectory/position/step"][()]
        water["time"] = f["particles/trajectory/position/time"][()]
        ions = f.create_group("particles/ions")
        ions.create_group("box").attrs.update({"dimension": np.int32(3), "boundary": np.array([b"periodic"] * 3)})
        ions.create_group("position")["value"] = np.zeros((6, 1, 3), np.float32) + 2.0
        ions["position/step"] = f["particles/trajectory/position/step"][()]
    output = str(tmp_path / "out.h5md")
    convert(source, output, progress=False)
    with h5py.File(output, "r") as f:
        box = f["particles/water/box"]
        assert int(box.attrs["dimension"]) == 3 and [b.decode() for b in box.attrs["boundary"]] == ["none"] * 3
        assert np.array_equal(f["particles/water/position/value"][()], np.ones((6, 2, 3), np.float32))
        assert [b.decode() for b in f["particles/ions/box"].attrs["boundary"]] == ["periodic"] * 3
    assert "H5MD010" not in {f.rule for r in validate(output).files for f in r.findings}
    split(source, str(tmp_path / "parts"), 2, format="h5md", progress=False)
    report = validate(str(tmp_path / "parts" / "manifest.json"))
    assert "H5MD010" not in {f.rule for r in report.files for f in r.findings}


def _series(dataset, length):
    """Values of an explicit step/time dataset, or of a fixed one (offset + increment x row)."""
    if dataset.shape == ():
        return dataset.attrs.get("offset", 0) + dataset[()] * np.arange(length)
    return dataset[()]


@pytest.mark.parametrize("position_steps, options, storage", [
    ([0, 10, 20, 30, 40, 50, 60, 70], {"start": 1, "step": 2}, "fixed"),  # rows 1, 3, 5, 7: a stride
    ([0, 10, 20, 30, 40, 50, 60, 70], {"start": 5, "stop": 6}, "fixed"),  # one row
    ([0, 10, 30, 40, 60, 70, 80, 90], {"start": 1}, "explicit"),  # rows 1, 3, 4, 6, ...: no stride
])
def test_fixed_step_of_a_carried_over_element_follows_the_kept_frames(tmp_path, adk, position_steps, options, storage):
    """make fuzz case 665: an observable stored with a fixed step and time (scalar increment +
    offset) kept its offset when frames were selected, so its kept values were labelled with
    the steps of the first rows. The kept rows now keep their own steps and times: a fixed
    series at a regular stride (offset of the first kept row, increment x stride), else
    explicit values."""
    source = str(tmp_path / "fixed.h5md")
    convert(adk[1], source, stop=8, progress=False)
    with h5py.File(source, "r+") as f:
        position = f["particles/trajectory/position"]
        del position["step"]
        position["step"] = np.array(position_steps, np.int64)
        energy = f.create_group("observables/energy")
        energy["value"] = np.arange(10, dtype=np.float64) * 1.5  # at steps 0, 10, ..., 90
        energy["step"] = np.int64(10)
        energy["step"].attrs["offset"] = np.int64(0)
        energy["time"] = 0.02
        energy["time"].attrs["offset"] = 0.0
        energy["time"].attrs["unit"] = "ps"
    output = str(tmp_path / "out.h5md")
    convert(source, output, progress=False, **options)
    with h5py.File(output, "r") as f:
        kept_steps = f["particles/trajectory/position/step"][()]
        energy = f["observables/energy"]
        n = energy["value"].shape[0]
        assert (energy["step"].shape == ()) == (storage == "fixed")
        steps = _series(energy["step"], n)
        np.testing.assert_array_equal(steps, kept_steps)
        np.testing.assert_allclose(_series(energy["time"], n), steps * 0.002)
        np.testing.assert_array_equal(energy["value"][()], steps // 10 * 1.5)


def _attributes(handle):
    """Every group's and dataset's attributes in an HDF5 file: {path: {name: value as text}}."""
    found = {}

    def visit(name, obj):
        found[name] = {key: repr(np.asarray(value).tolist()) for key, value in obj.attrs.items()}

    handle.visititems(visit)
    return found


@pytest.mark.parametrize("group", [None, "trajectory", "solvent"])
def test_copied_groups_keep_every_attribute(tmp_path, adk, group):
    """Relayout of a file with several particle groups: the groups only copied lost their box
    ``dimension`` and ``boundary`` (validate then found H5MD010/H5MD011 the input did not
    have) and every other group attribute, with and without --group; /parameters lost its
    own attributes in convert and split; box edges lost the hard links to their position's
    step and time (H5MD032). Every attribute and those links are kept."""
    from h5mdtool import split, validate

    source = str(tmp_path / "groups.h5md")
    convert(adk[1], source, stop=6, progress=False)
    with h5py.File(source, "r+") as f:
        steps, times = f["particles/trajectory/position/step"][()], f["particles/trajectory/position/time"][()]
        f["particles/trajectory"].attrs["note"] = "protein"
        solvent = f.create_group("particles/solvent")
        solvent.attrs["note"] = np.bytes_("water and ions")
        box = solvent.create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = np.array([b"periodic", b"periodic", b"none"])
        box.attrs["comment"] = "tilted"
        edges = box.create_group("edges")
        edges.attrs["kind"] = np.int16(7)
        edges["value"] = np.tile(np.diag([5.0, 6.0, 7.0]).astype(np.float32), (6, 1, 1))
        edges["value"].attrs["unit"] = "nm"
        position = solvent.create_group("position")
        position.attrs["sampled"] = "every frame"
        position["value"] = np.ones((6, 2, 3), np.float32)
        position["value"].attrs["unit"] = "nm"
        position["step"], position["time"] = steps, times
        position["time"].attrs["unit"] = "ps"
        edges["step"], edges["time"] = position["step"], position["time"]  # hard links, as H5MD asks
        f["parameters"].attrs["thermostat"] = "v-rescale"
        f["parameters"].attrs["temperature"] = np.float64(300.0)
        f.create_group("parameters/simulation").attrs["integrator"] = "md"
    with h5py.File(source, "r") as f:
        before = _attributes(f)
    rules = {f.rule for r in validate(source).files for f in r.findings}
    output = str(tmp_path / "out.h5md")
    convert(source, output, progress=False, compression="gzip", group=group)
    split(source, str(tmp_path / "parts"), 2, format="h5md", progress=False)
    outputs = [output] + [str(tmp_path / "parts" / name) for name in sorted(os.listdir(tmp_path / "parts"))
                          if name.endswith(".h5md")]
    for path in outputs:
        with h5py.File(path, "r") as f:
            after = _attributes(f)
        kept = ["parameters", "parameters/simulation"]
        if group != "solvent" or path != output:
            kept += [p for p in before if p.startswith("particles/solvent")]
        else:  # solvent is rewritten as particles/trajectory; the source's trajectory is left out
            assert "particles/solvent" not in after
            kept += [p for p in before if p.startswith("particles/solvent")
                     and not p.startswith(("particles/solvent/box", "particles/solvent/position"))]
        for name in kept:
            rewritten = group == "solvent" and path == output
            target = name.replace("particles/solvent", "particles/trajectory") if rewritten else name
            missing = {key: value for key, value in before[name].items()
                       if key != "json" and after.get(target, {}).get(key) != value}
            assert not missing, (path, name, missing)
        assert not {f.rule for r in validate(path).files for f in r.findings} - rules, path
        if group != "solvent" or path != output:
            with h5py.File(path, "r") as f:
                for name in ("step", "time"):
                    assert f[f"particles/solvent/box/edges/{name}"].id == f[f"particles/solvent/position/{name}"].id

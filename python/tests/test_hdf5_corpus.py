"""Valid HDF5 files written by h5py, as beamline software writes them: every kind of dataset,
link and attribute h5py produces must open (``ctforge info`` exit 0 listing each object,
``ctforge.describe``), and NXtomo scans must be found wherever their entry sits."""
import pathlib

import numpy as np
import pytest

import ctforge

h5py = pytest.importorskip("h5py", reason="h5py is in the test requirements (Makefile)")


def _every_kind(f: "h5py.File", tmp: pathlib.Path) -> None:
    e = f.create_group("entry")
    e.attrs["NX_class"] = "NXentry"
    e["duration"] = np.int64(5)                    # scalars, as in nearly every NeXus file
    e["energy"] = 53.0
    e["flag"] = True                                # h5py bool: an enum
    e["title"] = "dendrite"                         # variable-length UTF-8 string
    e["title_bytes"] = np.bytes_(b"dendrite")       # fixed-length ASCII
    e["names"] = np.array([b"a", b"bc"])            # fixed-length string array
    e.create_dataset("vlen_names", data=["alpha", "beta"], dtype=h5py.string_dtype())
    e["empty"] = np.zeros((0, 4, 5), np.float32)
    e.create_dataset("null", data=h5py.Empty("f4"))
    e["complex"] = np.array([1 + 2j, 3 - 1j])
    e["table"] = np.array([(1.5, 2), (2.5, 3)], dtype=[("x", "f8"), ("n", "i4")])
    ragged = e.create_dataset("ragged", (2,), dtype=h5py.vlen_dtype(np.int32))
    ragged[0] = [1, 2]
    ragged[1] = [3, 4, 5]
    e["ref"] = e.ref
    refs = e.create_dataset("refs", (2,), dtype=h5py.ref_dtype)
    refs[0] = e["energy"].ref
    regions = e.create_dataset("region", (1,), dtype=h5py.regionref_dtype)
    regions[0] = e["empty"].regionref[0:0]
    e["big_endian"] = np.arange(6, dtype=">f4").reshape(2, 3)
    e.create_dataset("chunked", data=np.arange(100, dtype=np.uint16).reshape(10, 10),
                     chunks=(3, 3), compression="gzip", shuffle=True, fletcher32=True)
    e.create_dataset("scaled", data=np.arange(12, dtype=np.float64), scaleoffset=2)
    e.create_dataset("lzf", data=np.arange(12, dtype=np.int16), compression="lzf")
    e["soft"] = h5py.SoftLink("/entry/energy")
    e["dangling"] = h5py.SoftLink("/nowhere")
    e["external"] = h5py.ExternalLink("other.h5", "/x")
    e["missing_external"] = h5py.ExternalLink("missing.h5", "/x")
    e["hard"] = e["energy"]
    e.attrs["string_attr"] = "mm"
    e.attrs["bytes_attr"] = np.bytes_(b"mm")
    e.attrs["int_attr"] = np.int64(3)
    e.attrs["array_attr"] = np.arange(6.0).reshape(2, 3)
    e.attrs["empty_attr"] = h5py.Empty("f8")
    e.attrs["string_array_attr"] = ["a", "b"]
    e.attrs["compound_attr"] = np.array([(1.5, 2)], dtype=[("x", "f8"), ("n", "i4")])
    e.attrs["bool_attr"] = np.bool_(True)
    f["named_type"] = np.dtype("f8")
    layout = h5py.VirtualLayout(shape=(2,), dtype="f4")
    layout[:] = h5py.VirtualSource("other.h5", "/x", shape=(2,))
    e.create_virtual_dataset("virtual", layout, fillvalue=0)
    with h5py.File(tmp / "other.h5", "w") as o:
        o["x"] = np.array([4.0, 5.0], np.float32)


def _write_nxtomo(path: pathlib.Path, nested: bool, np_views: int = 7) -> np.ndarray:
    """An NXtomo scan (darks, flats, projections by image_key) under /entry/tomo (an
    NXsubentry) or /scan_1 (an NXentry not named entry*), with an unrelated entry first."""
    rows, cols = 3, 5
    rng = np.random.default_rng(3)
    trans = rng.uniform(0.2, 0.9, (np_views, rows, cols))
    dark, flat = 12.0, 1012.0
    frames = np.concatenate([np.full((1, rows, cols), dark), np.full((2, rows, cols), flat),
                             dark + (flat - dark) * trans]).astype(np.float32)
    keys = np.array([2, 1, 1] + [0] * np_views, np.int8)
    with h5py.File(path, "w") as f:
        decoy = f.create_group("entry")
        decoy.attrs["NX_class"] = "NXentry"
        decoy["data/data"] = np.ones((1, 2, 2), np.float32)
        decoy["start_time"] = "2026-12-03T10:00:00"
        e = decoy.create_group("tomo") if nested else f.create_group("scan_1")
        e.attrs["NX_class"] = "NXsubentry" if nested else "NXentry"
        e["definition"] = "NXtomo"
        det = e.create_group("instrument/detector")
        det.attrs["NX_class"] = "NXdetector"
        det["data"] = frames
        det["image_key"] = keys
        det["x_pixel_size"] = 6.5
        det["x_pixel_size"].attrs["units"] = "um"
        det["count_time"] = 0.1
        sample = e.create_group("sample")
        sample.attrs["NX_class"] = "NXsample"
        angles = np.concatenate([[0, 0, 0], np.linspace(0, 180, np_views, endpoint=False)])
        sample["rotation_angle"] = angles
        sample["rotation_angle"].attrs["units"] = "degree"
        sample["name"] = "dendrite"
        d = e.create_group("data")
        d.attrs["NX_class"] = "NXdata"
        d["data"] = h5py.SoftLink(det.name + "/data")
        d["rotation_angle"] = sample["rotation_angle"]
    return -np.log(trans)


def test_every_kind_of_valid_file_opens(tmp_path, cli):
    path = tmp_path / "every.h5"
    with h5py.File(path, "w") as f:
        _every_kind(f, tmp_path)
    r = cli("info", path)
    names = []
    with h5py.File(path, "r") as f:
        f.visit_links(names.append)  # every link: hard, soft, external
    assert len(names) >= 27  # every kind written above
    for n in names:
        assert "/" + n in r.stdout, (n, r.stdout)
    assert "/entry/duration" in r.stdout and "int64 scalar" in r.stdout
    assert "soft link -> /nowhere" in r.stdout
    assert "external link -> missing.h5:/x" in r.stdout
    assert "/entry/duration" in ctforge.info(path)["description"]


@pytest.mark.parametrize("nested", [True, False])
def test_nxtomo_found_by_definition(tmp_path, nested):
    path = tmp_path / "scan.nxs"
    expected = _write_nxtomo(path, nested)
    p, g = ctforge.read_projections(path)
    np.testing.assert_allclose(p, expected, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(np.degrees(g.angles), np.linspace(0, 180, 7, endpoint=False),
                               atol=1e-12)
    assert g.pixel_size[0] == pytest.approx(0.0065)


def test_datasets_named_by_keyword(tmp_path):
    path = tmp_path / "any.h5"
    with h5py.File(path, "w") as f:
        f["m/frames"] = np.full((4, 2, 3), 100.0, np.float32)
        f["m/white"] = np.full((2, 3), 200.0, np.float32)
        f["m/dark"] = np.zeros((1, 2, 3), np.float32)
        f["m/theta"] = np.array([0.0, 45.0, 90.0, 135.0])
        f["m/comment"] = "no NeXus here"
    with pytest.raises(ctforge.Error, match="--data-path"):
        ctforge.read_projections(path)
    p, g = ctforge.read_projections(path, data_path="/m/frames", flat_path="/m/white",
                                    dark_path="/m/dark", angles_path="/m/theta")
    np.testing.assert_allclose(p, np.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(np.degrees(g.angles), [0, 45, 90, 135], atol=1e-12)

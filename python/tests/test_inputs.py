"""Sinograms, .npy, .mat and angle lists as inputs of ctforge.read_projections, written with
numpy, scipy and h5py (the writers users have) and read back bit for bit."""
import numpy as np
import pytest

import ctforge

V, C = 12, 9


def sinogram(dtype=np.float32):
    v, c = np.mgrid[0:V, 0:C]
    return (v * 7 + c * 0.25 + 1).astype(dtype)  # exact in float32, not symmetric


def angle_file(tmp_path, lines, name="angles.txt"):
    p = tmp_path / name
    p.write_text("# theta\n" + "\n".join(lines) + "\n")
    return p


def degrees(n=V):
    return [f"{180.0 * k / n:.6f}" for k in range(n)]


@pytest.mark.parametrize("order, dtype", [("C", "<f4"), ("F", "<f4"), ("C", ">f4"), ("F", ">f8"),
                                          ("C", "<u2"), ("C", "<i2")])
def test_npy_sinogram_layouts_bit_for_bit(tmp_path, order, dtype):
    s = sinogram()
    a = np.array(s, dtype=dtype, order=order)
    np.save(tmp_path / "s.npy", a)
    p, g = ctforge.read_projections(tmp_path / "s.npy", angles=angle_file(tmp_path, degrees()),
                                    mode="line-integrals")
    assert p.shape == (V, 1, C)
    np.testing.assert_array_equal(p[:, 0, :], a.astype(np.float32))  # integers: truncated
    assert g.rows == 1 and g.cols == C


def test_npy_stack_and_refusals(tmp_path):
    stack = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) / 8
    np.save(tmp_path / "stack.npy", stack)
    p, g = ctforge.read_projections(tmp_path / "stack.npy",
                                    angles=angle_file(tmp_path, ["0", "60", "120"]))
    np.testing.assert_array_equal(p, stack)
    np.save(tmp_path / "four.npy", np.zeros((1, 1, 2, 2), np.float32))
    with pytest.raises(ctforge.Error, match="four.npy"):
        ctforge.read_projections(tmp_path / "four.npy", angles=angle_file(tmp_path, ["0"]))
    np.save(tmp_path / "complex.npy", np.zeros((2, 2), np.complex64))
    with pytest.raises(ctforge.Error, match="complex"):
        ctforge.read_projections(tmp_path / "complex.npy", angles=angle_file(tmp_path, ["0", "1"]))
    np.save(tmp_path / "object.npy", np.array([[None, 1]], dtype=object), allow_pickle=True)
    with pytest.raises(ctforge.Error, match="object"):
        ctforge.read_projections(tmp_path / "object.npy", angles=angle_file(tmp_path, ["0"]))


def test_mat_v5_from_scipy(tmp_path):
    scipy_io = pytest.importorskip("scipy.io")
    s = sinogram(np.float64)
    scipy_io.savemat(tmp_path / "s.mat", {"sino": s})
    p, _ = ctforge.read_projections(tmp_path / "s.mat", angles=angle_file(tmp_path, degrees()))
    np.testing.assert_array_equal(p[:, 0, :], s.astype(np.float32))
    scipy_io.savemat(tmp_path / "two.mat", {"sino": s, "dark": s[:2]})
    with pytest.raises(ctforge.Error, match="data-path"):
        ctforge.read_projections(tmp_path / "two.mat", angles=angle_file(tmp_path, degrees()))


def test_mat_v73_transposed_layout(tmp_path):
    h5py = pytest.importorskip("h5py")
    s = sinogram(np.float64)
    path = tmp_path / "s73.mat"
    # MATLAB -v7.3: a 512-byte user block with the MAT header, arrays stored column-major, so a
    # views x cols matrix is an HDF5 dataset of shape (cols, views), with MATLAB_class.
    with h5py.File(path, "w", userblock_size=512) as f:
        d = f.create_dataset("sino", data=s.T)
        d.attrs["MATLAB_class"] = np.bytes_("double")
    with open(path, "r+b") as f:
        f.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: ctforge test".ljust(116))
    p, _ = ctforge.read_projections(path, angles=angle_file(tmp_path, degrees()))
    assert p.shape == (V, 1, C)
    np.testing.assert_array_equal(p[:, 0, :], s.astype(np.float32))
    # Negative control: the stored bytes taken in C order as views x cols (what a reader
    # ignoring MATLAB's layout gets) are another array.
    assert not np.array_equal(np.ascontiguousarray(s.T).reshape(V, C), p[:, 0, :])


def test_keyed_angle_list_normalises_like_by_hand(tmp_path):
    rng = np.random.default_rng(3)
    keys = [2, 2, 1, 0, 0, 0, 0, 1, 3]
    frames = np.empty((len(keys), 3, 4), np.float32)
    for i, k in enumerate(keys):
        frames[i] = {2: 10.0, 1: 1000.0, 3: 5.0}.get(k, 0.0) + rng.integers(0, 50, (3, 4))
        if k == 0:
            frames[i] = 300 + rng.integers(0, 400, (3, 4))
    np.save(tmp_path / "frames.npy", frames)
    lines, n = [], 0
    for k in keys:
        lines.append(f"{45.0 * n if k == 0 else 0.0}, {k}")
        n += k == 0
    p, g = ctforge.read_projections(tmp_path / "frames.npy",
                                    angles=angle_file(tmp_path, lines))
    flat = frames[[2, 7]].astype(np.float64).mean(0)
    dark = frames[[0, 1]].astype(np.float64).mean(0)
    want = -np.log((frames[3:7] - dark) / (flat - dark))
    np.testing.assert_allclose(p, want, rtol=0, atol=1e-5)  # float output of a double formula
    np.testing.assert_allclose(np.degrees(g.angles), [0, 45, 90, 135], atol=1e-9)


def test_open_beam_and_bad_lists(tmp_path):
    s = np.full((4, 10), 2000, np.uint16)
    s[:, 3:7] = [[500 + 10 * v + c for c in range(4)] for v in range(4)]
    s[:, :2] += np.arange(4, dtype=np.uint16)[:, None]
    np.save(tmp_path / "s.npy", s)
    angles = angle_file(tmp_path, ["0", "45", "90", "135"])
    p, _ = ctforge.read_projections(tmp_path / "s.npy", angles=angles,
                                    open_beam_cols=[(0, 2), (8, 10)])
    i0 = s[:, [0, 1, 8, 9]].astype(np.float64).mean(1, keepdims=True)
    np.testing.assert_allclose(p[:, 0, :], -np.log(s / i0), atol=1e-6)
    with pytest.raises(ctforge.Error, match=r"bad\.txt: line 3"):
        ctforge.read_projections(tmp_path / "s.npy",
                                 angles=angle_file(tmp_path, ["0", "x"], "bad.txt"))
    with pytest.raises(ctforge.Error, match=r"key7\.txt: line 3"):
        ctforge.read_projections(tmp_path / "s.npy",
                                 angles=angle_file(tmp_path, ["0 0", "1 7"], "key7.txt"))
    with pytest.raises(ctforge.Error, match="angle_unit"):
        ctforge.read_projections(tmp_path / "s.npy", angles=angles, angle_unit="grad")


def test_tiff_sinogram_from_the_cli_writer(tmp_path, cli):
    s = sinogram() / 100
    # One view of V rows x C cols, written as a TIFF image by `ctforge convert`.
    one = ctforge.Geometry.parallel(cols=C, rows=V, pixel_size=1.0, angles=[0.0])
    ctforge.write_projections(tmp_path / "img.h5", s[None], one)
    cli("convert", tmp_path / "img.h5", tmp_path / "tif")
    tif = tmp_path / "tif" / "proj_00000.tif"
    angles = angle_file(tmp_path, degrees())
    auto, g = ctforge.read_projections(tif, angles=angles)  # V lines = V image rows: a sinogram
    forced, _ = ctforge.read_projections(tif, angles=angles, sinogram=True)
    np.testing.assert_array_equal(auto[:, 0, :], s)
    np.testing.assert_array_equal(forced, auto)
    assert ctforge.read_projection_geometry(tif, angles=angles).rows == 1
    with pytest.raises(ctforge.UsageError, match="sinogram"):
        ctforge.read_projections(tmp_path / "tif", angles=angles, sinogram=True)


def test_mat_3d_stacks_in_matlab_index_order(tmp_path):
    scipy_io = pytest.importorskip("scipy.io")
    h5py = pytest.importorskip("h5py")
    stack = (np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) * 0.5 + 1)
    angles = angle_file(tmp_path, ["0", "60", "120"])
    scipy_io.savemat(tmp_path / "v5.mat", {"proj": stack})  # MATLAB size 3 x 4 x 5
    p5, _ = ctforge.read_projections(tmp_path / "v5.mat", angles=angles)
    np.testing.assert_array_equal(p5, stack)
    with h5py.File(tmp_path / "v73.mat", "w", userblock_size=512) as f:
        f.create_dataset("proj", data=stack.T).attrs["MATLAB_class"] = np.bytes_("single")
    p73, _ = ctforge.read_projections(tmp_path / "v73.mat", angles=angles)
    np.testing.assert_array_equal(p73, stack)

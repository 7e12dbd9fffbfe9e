"""ctforge.ProjectorPair and the linear_operator built on it: the pair's products are
forward_project and back_project(matched=True) (or the voxel-driven back_project) bit for bit
on the CPU, repeated calls agree, shapes are checked, and the CUDA pair (where a device is
usable) agrees with the CPU one and allocates nothing after construction."""
import numpy as np
import pytest

import ctforge


def scan():
    g = ctforge.Geometry.cone(cols=24, rows=16, pixel_size=1.0, sid=80, sdd=150, angles=15)
    grid = ctforge.VolumeGeometry(10, 12, 12, (1.0, 1.0, 1.0))
    return g, grid


def test_every_projector_takes_the_same_default_grid():
    # A volume on the default grid (reconstruct's) projects back onto its data with the
    # projectors' defaults: forward_project, back_project and ProjectorPair agree on the grid.
    g = ctforge.Geometry.cone(cols=24, rows=16, pixel_size=1.0, sid=80, sdd=150, angles=15)
    grid = ctforge.default_grid(g)
    assert grid.spacing[0] != 1.0  # else the unit-voxel grid would pass too (control)
    x = np.random.default_rng(4).uniform(0, 1, grid.shape).astype(np.float32)
    A = ctforge.ProjectorPair(g, backend="cpu", threads=2)
    ax = ctforge.forward_project(x, g, backend="cpu", threads=2)
    np.testing.assert_array_equal(ax, A.apply(x))
    np.testing.assert_array_equal(ax, ctforge.forward_project(x, g, grid, backend="cpu",
                                                              threads=2))
    unit = ctforge.VolumeGeometry(*grid.shape, (1.0, 1.0, 1.0))
    assert np.abs(ctforge.forward_project(x, g, unit, backend="cpu") - ax).max() > 0.1 * ax.max()
    # Another shape: the default grid's field of view with that many voxels.
    small = np.ones((8, 6, 6), np.float32)
    want = ctforge.default_grid(g, shape=(8, 6, 6))
    np.testing.assert_array_equal(ctforge.forward_project(small, g, backend="cpu"),
                                  ctforge.forward_project(small, g, want, backend="cpu"))


def test_pair_is_forward_project_and_its_transpose_on_the_cpu():
    g, grid = scan()
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, grid.shape).astype(np.float32)
    y = rng.uniform(-1, 1, g.projection_shape).astype(np.float32)
    A = ctforge.ProjectorPair(g, grid, backend="cpu", threads=2)
    assert A.backend == "cpu" and A.matched
    assert A.volume_shape == tuple(grid.shape) and A.projection_shape == tuple(g.projection_shape)
    ax = A.apply(x)
    assert ax.dtype == np.float32 and ax.shape == tuple(g.projection_shape)
    np.testing.assert_array_equal(ax, ctforge.forward_project(x, g, grid, backend="cpu",
                                                              threads=2))
    np.testing.assert_array_equal(A.apply_adjoint(y),
                                  ctforge.back_project(y, g, grid, backend="cpu", threads=2,
                                                       matched=True))
    np.testing.assert_array_equal(A.apply(x), ax)  # repeated calls: the same floats
    B = ctforge.ProjectorPair(g, grid, backend="cpu", threads=2, matched=False)
    np.testing.assert_array_equal(B.apply_adjoint(y),
                                  ctforge.back_project(y, g, grid, backend="cpu", threads=2))
    # float64 input is converted once, as everywhere in the package
    np.testing.assert_array_equal(A.apply(x.astype(np.float64)), ax)
    assert A.stats()["apply_calls"] == 3 and A.stats()["adjoint_calls"] == 1


def test_pair_checks_shapes():
    g, grid = scan()
    A = ctforge.ProjectorPair(g, grid, backend="cpu")
    with pytest.raises(ctforge.UsageError, match="does not match the grid"):
        A.apply(np.zeros((10, 12, 11), np.float32))
    with pytest.raises(ctforge.UsageError, match="does not match the geometry"):
        A.apply_adjoint(np.zeros((14, 16, 24), np.float32))
    with pytest.raises(ctforge.UsageError, match="3 dimensions"):
        A.apply(np.zeros(1440, np.float32))


def test_linear_operator_is_built_on_the_pair():
    g, grid = scan()
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, grid.shape).astype(np.float32)
    y = rng.uniform(-1, 1, g.projection_shape).astype(np.float32)
    A = ctforge.linear_operator(g, grid, threads=2, backend="cpu")
    assert A.projector_pair.backend == "cpu"
    np.testing.assert_array_equal(A @ x.ravel(), ctforge.forward_project(
        x, g, grid, backend="cpu", threads=2).ravel())
    np.testing.assert_array_equal(A.T @ y.ravel(), ctforge.back_project(
        y, g, grid, backend="cpu", threads=2, matched=True).ravel())
    assert A.projector_pair.stats()["apply_calls"] == 1


@pytest.mark.skipif(ctforge.backend_for("auto")[0] != "cuda", reason="no usable CUDA device")
def test_cuda_pair_matches_the_cpu_and_keeps_its_resources():
    g, grid = scan()
    rng = np.random.default_rng(9)
    x = rng.uniform(0, 1, grid.shape).astype(np.float32)
    y = rng.uniform(0, 1, g.projection_shape).astype(np.float32)
    for matched in (True, False):
        gpu = ctforge.ProjectorPair(g, grid, backend="cuda", matched=matched)
        cpu = ctforge.ProjectorPair(g, grid, backend="cpu", matched=matched)
        before = gpu.stats()["allocations"]
        for a, b in ((gpu.apply(x), cpu.apply(x)),
                     (gpu.apply_adjoint(y), cpu.apply_adjoint(y))):
            # mean absolute error within 1e-5 of the peak (same float code, FMA and the
            # order of atomic / per-view sums apart)
            assert np.abs(a - b).mean() <= 1e-5 * np.abs(b).max()
        s = gpu.stats()
        assert s["allocations"] == before
        assert s["bytes_uploaded"] == x.nbytes + y.nbytes


def test_pair_writes_into_out():
    # out=: the product lands in the caller's array (a batch's slice), the same floats as a new
    # array; a wrong shape, a read-only array or an overlap with the input are refused.
    g, grid = scan()
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 1, grid.shape).astype(np.float32)
    y = rng.uniform(-1, 1, g.projection_shape).astype(np.float32)
    A = ctforge.ProjectorPair(g, grid, backend="cpu", threads=2)
    batch = np.full((2,) + tuple(g.projection_shape), np.nan, np.float32)
    assert A.apply(x, batch[1]) is not None
    np.testing.assert_array_equal(batch[1], A.apply(x))
    assert np.isnan(batch[0]).all()
    vol = np.empty(grid.shape, np.float32)
    got = A.apply_adjoint(y, out=vol)
    assert np.shares_memory(got, vol)
    np.testing.assert_array_equal(vol, A.apply_adjoint(y))
    with pytest.raises(ctforge.UsageError, match="is not the result's"):
        A.apply(x, np.empty((15, 16, 23), np.float32))
    ro = np.empty(g.projection_shape, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ctforge.UsageError, match="read-only"):
        A.apply(x, ro)
    square = ctforge.ProjectorPair(ctforge.Geometry.parallel(4, 4, 1.0, 4),
                                   ctforge.VolumeGeometry(4, 4, 4, (1.0, 1.0, 1.0)), backend="cpu")
    same = np.ones((4, 4, 4), np.float32)
    with pytest.raises(ctforge.UsageError, match="overlap"):
        square.apply(same, same)
    with pytest.raises(ctforge.UsageError, match="C-contiguous float32"):
        A.apply(x, np.empty(g.projection_shape, np.float64))  # never a converted copy

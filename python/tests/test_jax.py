"""ctforge.jax: the forward projector and the matched back-projection as custom_vjp functions
through pure_callback. Gradients against finite differences (check_grads) and against the
library's operators called directly (a voxel-driven VJP as the failing control); jit, grad and
vmap (both vmap methods) give what the operators give."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install ctforge[jax])")

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import ctforge  # noqa: E402
import ctforge.jax as cj  # noqa: E402
from dl_problems import (FAMILIES, FBP_FAMILIES, fbp_problem, problem,  # noqa: E402
                         relative_difference)

# check_grads' step and tolerances: as test_torch.py's gradcheck (float32 rounding of outputs
# up to ~11, a few ulps ~3e-6, divided by 2 x 0.5 for a linear operator's exact central
# difference; ATOL 1e-5).
EPS, ATOL, RTOL = 0.5, 1e-5, 1e-4


@pytest.fixture
def x64():
    """float64 arrays for the finite differences (JAX's default is float32)."""
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


def rand(shape, seed, dtype=np.float32):
    return jnp.asarray(np.random.default_rng(seed).uniform(0, 1, shape).astype(dtype))


@pytest.mark.parametrize("family", FAMILIES)
def test_check_grads(family, x64):
    # Reverse mode to second order (the VJPs are the operators, themselves differentiable);
    # forward mode does not exist for custom_vjp functions.
    g, grid = problem(family)
    P = cj.Projector(g, grid, threads=1)
    x = rand((2,) + tuple(grid.shape), 1, np.float64)
    y = rand(tuple(g.projection_shape), 2, np.float64)
    check_grads(P.forward, (x,), order=2, modes=["rev"], eps=EPS, atol=ATOL, rtol=RTOL)
    check_grads(P.adjoint, (y,), order=2, modes=["rev"], eps=EPS, atol=ATOL, rtol=RTOL)


def voxel_backward(g, grid):
    """Negative control: the forward projection with the voxel-driven back-projector as VJP."""
    pair = ctforge.ProjectorPair(g, grid, backend="cpu", threads=1, matched=False)
    ps, vs = tuple(g.projection_shape), tuple(grid.shape)

    @jax.custom_vjp
    def f(x):
        return jax.pure_callback(lambda v: pair.apply(np.asarray(v)),
                                 jax.ShapeDtypeStruct(ps, jnp.float32), x)

    def bwd(_, ct):
        return (jax.pure_callback(lambda p: pair.apply_adjoint(np.asarray(p)),
                                  jax.ShapeDtypeStruct(vs, jnp.float32), ct),)

    f.defvjp(lambda x: (f(x), None), bwd)
    return f


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_of_inner_product_is_the_matched_back_projection(family):
    # d<A x, y>/dx = A^T y under jit, against back_project(y, matched=True) called directly
    # (1e-6 relative: the same float32 scatter); d<x, A^T y>/dy = A x; the voxel-driven VJP
    # misses by far more.
    g, grid = problem(family)
    P = cj.Projector(g, grid)
    x, y = rand(tuple(grid.shape), 3), rand(tuple(g.projection_shape), 4)
    want_x = ctforge.back_project(np.asarray(y), g, grid, backend="cpu", matched=True)
    want_y = ctforge.forward_project(np.asarray(x), g, grid, backend="cpu")
    got_x = jax.jit(jax.grad(lambda v: jnp.vdot(P.forward(v), y)))(x)
    got_y = jax.jit(jax.grad(lambda p: jnp.vdot(P.adjoint(p), x)))(y)
    assert relative_difference(got_x, want_x) <= 1e-6
    assert relative_difference(got_y, want_y) <= 1e-6
    f = voxel_backward(g, grid)
    assert relative_difference(jax.grad(lambda v: jnp.vdot(f(v), y))(x), want_x) > 1e-3


def test_check_grads_catches_an_inexact_transpose(x64):
    g, grid = problem("cone")
    f = voxel_backward(g, grid)
    x = rand(tuple(grid.shape), 5, np.float64)
    with pytest.raises(AssertionError):
        check_grads(lambda v: f(v.astype(jnp.float32)).astype(jnp.float64), (x,), order=1,
                    modes=["rev"], eps=EPS, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("vmap_method", ["expand_dims", "sequential"])
def test_vmap_jit_and_batches(vmap_method):
    g, grid = problem("cone_vec")
    P = cj.Projector(g, grid, threads=1, vmap_method=vmap_method)
    xs = rand((3,) + tuple(grid.shape), 6)
    want = np.stack([ctforge.forward_project(np.asarray(v), g, grid, backend="cpu")
                     for v in xs])
    np.testing.assert_array_equal(jax.vmap(P.forward)(xs), want)
    np.testing.assert_array_equal(jax.jit(jax.vmap(P.forward))(xs), want)
    np.testing.assert_array_equal(P.forward(xs), want)  # leading axes are a batch as well
    np.testing.assert_array_equal(jax.vmap(jax.vmap(P.forward))(xs[None]), want[None])
    # per-example gradients: vmap of grad
    ys = rand((3,) + tuple(g.projection_shape), 7)
    grads = jax.jit(jax.vmap(jax.grad(lambda v, y: jnp.vdot(P.forward(v), y))))(xs, ys)
    for b in range(3):
        np.testing.assert_array_equal(grads[b], ctforge.back_project(
            np.asarray(ys[b]), g, grid, backend="cpu", threads=1, matched=True))


def test_shapes_and_options_are_checked():
    g, grid = problem("parallel")
    P = cj.Projector(g, grid)
    with pytest.raises(ctforge.UsageError, match=r"volume: expected shape \[..., 5, 9, 7\]"):
        P.forward(jnp.zeros((5, 9, 8)))
    with pytest.raises(ctforge.UsageError, match="floating-point"):
        P.adjoint(jnp.zeros(g.projection_shape, jnp.int32))
    with pytest.raises(ctforge.UsageError, match="vmap_method"):
        cj.Projector(g, grid, vmap_method="auto")


# ---- FDK / FBP (tolerances: test_torch.py's FBP section) --------------------------------------


@pytest.mark.parametrize("family", FBP_FAMILIES)
def test_fbp_check_grads(family, x64):
    g, grid, algo = fbp_problem(family)
    R = cj.FBP(g, grid, algorithm=algo, threads=1)
    p = rand((2,) + tuple(g.projection_shape), 31, np.float64)
    v = rand(tuple(grid.shape), 32, np.float64)
    check_grads(R.fbp, (p,), order=2, modes=["rev"], eps=EPS, atol=ATOL, rtol=RTOL)
    check_grads(R.adjoint, (v,), order=1, modes=["rev"], eps=EPS, atol=ATOL, rtol=RTOL)


def forward_projector_backward(g, grid, algo):
    """Negative control: FBP with the Joseph forward projector as its VJP."""
    ps, vs = tuple(g.projection_shape), tuple(grid.shape)

    @jax.custom_vjp
    def f(p):
        return jax.pure_callback(
            lambda q: ctforge.fbp_apply(np.asarray(q), g, grid, algorithm=algo, threads=1),
            jax.ShapeDtypeStruct(vs, jnp.float32), p)

    def bwd(_, ct):
        return (jax.pure_callback(
            lambda v: ctforge.forward_project(np.asarray(v), g, grid, backend="cpu", threads=1),
            jax.ShapeDtypeStruct(ps, jnp.float32), ct),)

    f.defvjp(lambda p: (f(p), None), bwd)
    return f


@pytest.mark.parametrize("family", FBP_FAMILIES)
def test_gradient_of_inner_product_is_the_fbp_adjoint(family):
    # d<R p, v>/dp = R^T v under jit, against ctforge.fbp_adjoint(v) (1e-6 relative: the same
    # computation); d<R^T v, p>/dv = R p; the forward projector as VJP misses by far more.
    g, grid, algo = fbp_problem(family)
    R = cj.FBP(g, grid, algorithm=algo)
    p, v = rand(tuple(g.projection_shape), 33), rand(tuple(grid.shape), 34)
    want_p = ctforge.fbp_adjoint(np.asarray(v), g, grid, algorithm=algo)
    want_v = ctforge.fbp_apply(np.asarray(p), g, grid, algorithm=algo)
    assert relative_difference(jax.jit(jax.grad(lambda q: jnp.vdot(R.fbp(q), v)))(p),
                               want_p) <= 1e-6
    assert relative_difference(jax.jit(jax.grad(lambda w: jnp.vdot(R.adjoint(w), p)))(v),
                               want_v) <= 1e-6
    f = forward_projector_backward(g, grid, algo)
    assert relative_difference(jax.grad(lambda q: jnp.vdot(f(q), v))(p), want_p) > 1e-1


def test_fbp_check_grads_catches_the_forward_projector(x64):
    g, grid, algo = fbp_problem("fan")
    f = forward_projector_backward(g, grid, algo)
    p = rand(tuple(g.projection_shape), 35, np.float64)
    with pytest.raises(AssertionError):
        check_grads(lambda q: f(q.astype(jnp.float32)).astype(jnp.float64), (p,), order=1,
                    modes=["rev"], eps=EPS, atol=ATOL, rtol=RTOL)


def test_fbp_vmap_and_batches():
    g, grid, algo = fbp_problem("parallel")
    R = cj.FBP(g, grid, algorithm=algo, threads=1)
    ps = rand((3,) + tuple(g.projection_shape), 36)
    want = np.stack([ctforge.reconstruct(np.asarray(q), g, grid, algorithm=algo,
                                         backend="cpu", threads=1) for q in ps])
    np.testing.assert_array_equal(jax.jit(jax.vmap(R.fbp))(ps), want)
    np.testing.assert_array_equal(R(ps), want)

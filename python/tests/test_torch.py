"""ctforge.torch: the forward projector and the matched back-projection as autograd operators.
Their gradients are checked against finite differences (gradcheck) and against the library's
matched back-projection / forward projection called directly, with a voxel-driven backward as
the negative control; batches, in-place reading and the operator kept per module."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install ctforge[torch])")

import ctforge  # noqa: E402
import ctforge.torch as ct  # noqa: E402
from ctforge import _core  # noqa: E402
from dl_problems import (FAMILIES, FBP_FAMILIES, fbp_problem, problem,  # noqa: E402
                         relative_difference)

# gradcheck's tolerances. The operators compute in float32 whatever the input's dtype, so the
# float64 finite differences see float32 rounding of the outputs: a few ulps of |A x| <= ~11
# (the longest ray sum of these problems for values in [0, 1]), i.e. ~3e-6. The operators are
# linear, so a central difference is exact for any step; a step of 0.5 divides that rounding by
# 2 * 0.5 = 1 instead of the default 2e-6 (which would make it ~1). ATOL = 1e-5 leaves a margin
# of about 3 over the rounding (1e-6 fails, measured), far below the Jacobian's entries
# (~0.1-1.4 mm of path per voxel), so a wrong entry cannot hide in it.
EPS, ATOL, RTOL = 0.5, 1e-5, 1e-4


def rand(shape, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("family", FAMILIES)
def test_gradcheck_forward_and_back_projection(family):
    g, grid = problem(family)
    fp = ct.ForwardProjection(g, grid, threads=1)
    bp = ct.BackProjection(g, grid, threads=1)
    x = rand((2,) + tuple(grid.shape), 1).requires_grad_()  # a batch of two volumes
    y = rand(tuple(g.projection_shape), 2).requires_grad_()  # one stack, no batch axis
    assert torch.autograd.gradcheck(fp, (x,), eps=EPS, atol=ATOL, rtol=RTOL)
    assert torch.autograd.gradcheck(bp, (y,), eps=EPS, atol=ATOL, rtol=RTOL)


def test_second_derivatives():
    # The backward passes are the operators themselves, so they are differentiable too.
    g, grid = problem("cone")
    fp = ct.ForwardProjection(g, grid, threads=1)
    x = rand(tuple(grid.shape), 3).requires_grad_()
    assert torch.autograd.gradgradcheck(fp, (x,), eps=EPS, atol=ATOL, rtol=RTOL)
    assert torch.autograd.gradgradcheck(fp.adjoint, (fp(x).detach().requires_grad_(),),
                                         eps=EPS, atol=ATOL, rtol=RTOL)


class VoxelBackward(torch.autograd.Function):
    """Negative control: the forward projection with the voxel-driven back-projector as its
    "gradient" (the transpose only up to the interpolation models)."""

    @staticmethod
    def forward(ctx, x, g, grid):
        ctx.g, ctx.grid = g, grid
        return torch.from_numpy(ctforge.forward_project(x.detach().numpy(), g, grid,
                                                        backend="cpu", threads=1))

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(ctforge.back_project(grad.contiguous().numpy(), ctx.g, ctx.grid,
                                                     backend="cpu", threads=1)), None, None


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_of_inner_product_is_the_matched_back_projection(family):
    # d<A x, y>/dx = A^T y: autograd's answer against back_project(y, matched=True) called
    # directly, to 1e-6 relative (the same float32 scatter; only the thread count's summation
    # order may differ); and d<x, A^T y>/dy = A x. The voxel-driven backward (control) misses by
    # far more than the tolerance.
    g, grid = problem(family)
    x = rand(tuple(grid.shape), 4, torch.float32).requires_grad_()
    y = rand(tuple(g.projection_shape), 5, torch.float32).requires_grad_()
    want_x = ctforge.back_project(y.detach().numpy(), g, grid, backend="cpu", matched=True)
    want_y = ctforge.forward_project(x.detach().numpy(), g, grid, backend="cpu")
    (ct.ForwardProjection(g, grid)(x) * y.detach()).sum().backward()
    assert relative_difference(x.grad, want_x) <= 1e-6
    (ct.BackProjection(g, grid)(y) * x.detach()).sum().backward()
    assert relative_difference(y.grad, want_y) <= 1e-6
    x.grad = None
    (VoxelBackward.apply(x, g, grid) * y.detach()).sum().backward()
    assert relative_difference(x.grad, want_x) > 1e-3


def test_gradcheck_catches_an_inexact_transpose():
    g, grid = problem("cone")
    x = rand(tuple(grid.shape), 6, torch.float32).double().requires_grad_()

    def f(v):
        return VoxelBackward.apply(v.float(), g, grid).double()

    assert not torch.autograd.gradcheck(f, (x,), eps=EPS, atol=ATOL, rtol=RTOL,
                                        raise_exception=False)


def test_batches_and_dtypes():
    g, grid = problem("cone_vec")
    fp = ct.ForwardProjection(g, grid, threads=1)
    x = rand((3,) + tuple(grid.shape), 7, torch.float32)
    y = fp(x)
    assert y.shape == (3,) + tuple(g.projection_shape) and y.dtype == torch.float32
    for b in range(3):
        np.testing.assert_array_equal(y[b].numpy(), ctforge.forward_project(
            x[b].numpy(), g, grid, backend="cpu"))
        np.testing.assert_array_equal(fp(x[b]).numpy(), y[b].numpy())  # no batch axis
    y64 = fp(x.double())  # computed in float32, returned in the input's dtype
    assert y64.dtype == torch.float64
    np.testing.assert_array_equal(y64.numpy(), y.double().numpy())
    z = fp.adjoint(y.transpose(2, 3).contiguous().transpose(2, 3))  # not C order: converted
    # (the same thread count: the matched scatter's sums are per thread)
    np.testing.assert_array_equal(z.numpy(), ct.BackProjection(g, grid, threads=1)(y).numpy())
    with pytest.raises(ctforge.UsageError, match=r"volume: expected shape \[batch, 5, 9, 7\]"):
        fp(torch.zeros(5, 9, 8))
    with pytest.raises(ctforge.UsageError, match="floating-point"):
        fp(torch.zeros(5, 9, 7, dtype=torch.int32))


class Recorder:
    """Stands in for a pair's _core object, recording the addresses each call reads and
    writes."""

    def __init__(self, core):
        self.core, self.calls = core, []

    def __getattr__(self, name):
        return getattr(self.core, name)

    def apply(self, v, out):
        self.calls.append((_core._data_address(v), _core._data_address(out)))
        return self.core.apply(v, out)

    def apply_adjoint(self, p, out):
        self.calls.append((_core._data_address(p), _core._data_address(out)))
        return self.core.apply_adjoint(p, out)


def test_cpu_tensors_are_read_and_written_in_place():
    g, grid = problem("cone")
    fp = ct.ForwardProjection(g, grid, threads=1)
    rec = fp.pair._pair = Recorder(fp.pair._pair)
    x = rand((2,) + tuple(grid.shape), 8, torch.float32).requires_grad_()
    y = fp(x)
    step_x, step_y = x[0].numel() * 4, y[0].numel() * 4  # bytes per batch item
    assert rec.calls == [(x.data_ptr(), y.data_ptr()),
                         (x.data_ptr() + step_x, y.data_ptr() + step_y)]
    # backward: the incoming gradient (a C-order float32 tensor) is read in place too
    w = rand(tuple(y.shape), 9, torch.float32)
    rec.calls.clear()
    y.backward(w)
    assert [c[0] for c in rec.calls] == [w.data_ptr(), w.data_ptr() + step_y]
    assert [c[1] for c in rec.calls] == [x.grad.data_ptr(), x.grad.data_ptr() + step_x]
    # the control: a float64 input is converted, so ctforge reads another buffer
    rec.calls.clear()
    x64 = x.detach().double()
    fp(x64)
    assert rec.calls[0][0] != x64.data_ptr()


def test_one_pair_per_module_for_every_call():
    g, grid = problem("parallel")
    fp = ct.ForwardProjection(g, grid)
    pair = fp.pair
    x = rand(tuple(grid.shape), 10, torch.float32).requires_grad_()
    for _ in range(3):
        fp(x).sum().backward()
    assert fp.pair is pair and fp.adjoint.pair is pair
    assert pair.stats()["apply_calls"] == 3 and pair.stats()["adjoint_calls"] == 3
    with pytest.raises(ctforge.UsageError, match="matched=True"):
        ct.forward_project(x, ctforge.ProjectorPair(g, grid, backend="cpu", matched=False))
    np.testing.assert_array_equal(ct.forward_project(x, pair).detach().numpy(),
                                  fp(x).detach().numpy())


@pytest.mark.skipif(not torch.cuda.is_available() or ctforge.backend_for()[0] != "cuda",
                    reason="no usable CUDA device")
def test_cuda_tensors_come_back_on_their_device():
    g, grid = problem("cone")
    fp = ct.ForwardProjection(g, grid)
    x = rand(tuple(grid.shape), 11, torch.float32)
    y = fp(x.cuda())
    assert y.device.type == "cuda"
    np.testing.assert_array_equal(y.cpu().numpy(), fp(x).numpy())


# ---- FDK / FBP as a layer -------------------------------------------------------------------
# gradcheck's tolerances for FBP: the projectors' (the operator is linear, so the central
# difference is exact for any step). FBP's outputs for inputs in [0, 1] stay below 0.6 on these
# problems (measured), so their float32 rounding is below 1e-7 and ATOL 1e-5 is ample for it;
# the control (the forward projector as backward) is off by ~30 times the true gradient's norm
# (measured), so it fails gradcheck and the 1e-1 bound below by far.


@pytest.mark.parametrize("family", FBP_FAMILIES)
def test_gradcheck_fbp_and_its_adjoint(family):
    g, grid, algo = fbp_problem(family)
    R = ct.FBP(g, grid, algorithm=algo, threads=1)
    p = rand((2,) + tuple(g.projection_shape), 21).requires_grad_()  # a batch of two stacks
    v = rand(tuple(grid.shape), 22).requires_grad_()
    assert torch.autograd.gradcheck(R, (p,), eps=EPS, atol=ATOL, rtol=RTOL)
    assert torch.autograd.gradcheck(R.adjoint, (v,), eps=EPS, atol=ATOL, rtol=RTOL)


def test_fbp_second_derivatives():
    g, grid, algo = fbp_problem("cone_displaced")
    R = ct.FBP(g, grid, algorithm=algo, threads=1)
    p = rand(tuple(g.projection_shape), 23).requires_grad_()
    assert torch.autograd.gradgradcheck(R, (p,), eps=EPS, atol=ATOL, rtol=RTOL)


class ForwardProjectorBackward(torch.autograd.Function):
    """Negative control: FBP with the Joseph forward projector (the matched back-projector's
    transpose, which maps volumes to projections too) as its "gradient"."""

    @staticmethod
    def forward(ctx, p, g, grid, algo):
        ctx.g, ctx.grid = g, grid
        return torch.from_numpy(ctforge.fbp_apply(p.detach().numpy(), g, grid, algorithm=algo,
                                                  threads=1))

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(ctforge.forward_project(grad.contiguous().numpy(), ctx.g,
                                                        ctx.grid, backend="cpu",
                                                        threads=1)), None, None, None


@pytest.mark.parametrize("family", FBP_FAMILIES)
def test_gradient_of_inner_product_is_the_fbp_adjoint(family):
    # d<R p, v>/dp = R^T v: autograd's answer against ctforge.fbp_adjoint(v) called directly,
    # to 1e-6 relative (the same computation); d<R^T v, p>/dv = R p. The forward projector as
    # backward (control) misses by far more; so does it in gradcheck.
    g, grid, algo = fbp_problem(family)
    p = rand(tuple(g.projection_shape), 24, torch.float32).requires_grad_()
    v = rand(tuple(grid.shape), 25, torch.float32).requires_grad_()
    want_p = ctforge.fbp_adjoint(v.detach().numpy(), g, grid, algorithm=algo)
    want_v = ctforge.fbp_apply(p.detach().numpy(), g, grid, algorithm=algo)
    R = ct.FBP(g, grid, algorithm=algo)
    (R(p) * v.detach()).sum().backward()
    assert relative_difference(p.grad, want_p) <= 1e-6
    (R.adjoint(v) * p.detach()).sum().backward()
    assert relative_difference(v.grad, want_v) <= 1e-6
    p.grad = None
    (ForwardProjectorBackward.apply(p, g, grid, algo) * v.detach()).sum().backward()
    assert relative_difference(p.grad, want_p) > 1e-1
    p64 = p.detach().double().requires_grad_()
    assert not torch.autograd.gradcheck(
        lambda q: ForwardProjectorBackward.apply(q.float(), g, grid, algo).double(), (p64,),
        eps=EPS, atol=ATOL, rtol=RTOL, raise_exception=False)


def test_fbp_is_reconstruct_with_batches_and_options():
    g, grid, algo = fbp_problem("cone")
    R = ct.FBP(g, grid, algorithm=algo, filter="hann", cutoff=0.7, threads=2)
    p = rand((3,) + tuple(g.projection_shape), 26, torch.float32)
    v = R(p)
    assert v.shape == (3,) + tuple(grid.shape) and v.dtype == torch.float32
    for b in range(3):
        np.testing.assert_array_equal(v[b].numpy(), ctforge.reconstruct(
            p[b].numpy(), g, grid, algorithm=algo, filter="hann", cutoff=0.7, backend="cpu",
            threads=2))
    assert R.adjoint.op is R.op and R.adjoint.adjoint.op is R.op
    with pytest.raises(ctforge.UsageError, match=r"projections: expected shape \[batch, 7, 5, 11\]"):
        R(torch.zeros(7, 5, 10))
    # A vector geometry: reconstruct's own resampling, in the layer too.
    vec = fbp_problem("cone_vec")[0]
    pv = rand(tuple(vec.projection_shape), 27, torch.float32)
    np.testing.assert_array_equal(ct.FBP(vec, grid, algorithm="fdk", threads=2)(pv).numpy(),
                                  ctforge.reconstruct(pv.numpy(), vec, grid, algorithm="fdk",
                                                      backend="cpu", threads=2))
    with pytest.raises(ctforge.UsageError, match="helical"):
        hel = ctforge.Geometry.helical(11, 5, 2.0, 30.0, 60.0, np.linspace(0, 12, 40),
                                       pitch_mm_per_turn=6.0)
        ct.FBP(hel, grid, algorithm="fdk")(torch.zeros(tuple(hel.projection_shape)))

"""ctforge.torch: the Joseph forward projector and its exact transpose as PyTorch autograd
operators and layers (``pip install ctforge[torch]``).

* :class:`ForwardProjection` (``nn.Module``): volumes ``[batch, z, y, x]`` or ``[z, y, x]`` to
  projections ``[batch, view, row, col]`` or ``[view, row, col]``; its backward is the matched
  back-projection (``ctforge.back_project(..., matched=True)``, the exact transpose).
* :class:`BackProjection` (``nn.Module``): the matched back-projection, projections to volumes;
  its backward is the forward projection.
* :func:`forward_project` / :func:`back_project`: the same as functions of a
  :class:`ctforge.ProjectorPair` (matched), for code that keeps its own operator.
* :class:`FBP` (``nn.Module``): FDK / FBP as a linear layer R, projections
  ``[batch, view, row, col]`` to volumes ``[batch, z, y, x]`` (exactly
  ``ctforge.reconstruct(..., algorithm="fdk"/"fbp")`` on the CPU); its backward is the exact
  adjoint R^T (``ctforge.fbp_adjoint``, the transposed chain of weighting, filtering and
  back-projection), and :class:`FBPAdjoint` / :func:`fbp` as above, on a
  :class:`ctforge.FBPOperator` (one per module, ``module.op``).

Each backward is itself built from these operators, so higher derivatives (``create_graph``,
``gradgradcheck``) work too. The operators compute in float32: float32 CPU tensors in C order
are read in place and the results are written straight into the returned tensor (no copy
either way); other dtypes are converted once and the result comes back in the input's dtype;
CUDA tensors are copied to the host and the result back to their device (the GPU zero-copy path
is not done yet). One :class:`ctforge.ProjectorPair` is kept per module (``module.pair``) and
used for every call, forward and backward.

Threads: ``threads=None`` (default) takes ``torch.get_num_threads()`` when the module is made,
so that ``torch.set_num_threads`` sets both libraries' thread counts (see docs/python.md, "Deep
learning", for OpenMP runtimes and wait policies).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

try:
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("ctforge.torch needs PyTorch: pip install ctforge[torch] "
                      "(or pip install torch)") from e

import ctforge

__all__ = ["ForwardProjection", "BackProjection", "ForwardProjectionFunction",
           "BackProjectionFunction", "forward_project", "back_project", "projector_pair",
           "FBP", "FBPAdjoint", "FBPFunction", "FBPAdjointFunction", "fbp"]


def projector_pair(geometry: Any, grid: Any = None, *, threads: Optional[int] = None,
                   backend: str = "cpu") -> ctforge.ProjectorPair:
    """The matched :class:`ctforge.ProjectorPair` the modules keep: ``grid`` as
    :class:`ctforge.ProjectorPair` takes it (default :func:`ctforge.default_grid`);
    ``threads=None``: ``torch.get_num_threads()``."""
    n = torch.get_num_threads() if threads is None else int(threads)
    return ctforge.ProjectorPair(geometry, grid, backend=backend, threads=n, matched=True)


def _apply(pair: Any, x: torch.Tensor, adjoint: bool) -> torch.Tensor:
    """``pair.apply`` (or ``apply_adjoint``) of each item of ``x`` ([batch, *shape] or
    [*shape]), written into one new float32 tensor, returned in x's dtype and device. ``pair``:
    a :class:`ctforge.ProjectorPair` or :class:`ctforge.FBPOperator` (for which ``apply`` maps
    projections to volumes)."""
    fbp = isinstance(pair, ctforge.FBPOperator)
    to_volume = adjoint != fbp
    in_shape = pair.projection_shape if to_volume else pair.volume_shape
    out_shape = pair.volume_shape if to_volume else pair.projection_shape
    what = "projections" if to_volume else "volume"
    if x.dim() not in (3, 4) or tuple(x.shape[-3:]) != tuple(in_shape):
        raise ctforge.UsageError(f"{what}: expected shape [batch, {', '.join(map(str, in_shape))}]"
                                 f" or without batch, got {list(x.shape)}")
    if not x.dtype.is_floating_point:
        raise ctforge.UsageError(f"{what}: expected a floating-point tensor, got {x.dtype}")
    host = x.detach().to(device="cpu", dtype=torch.float32).contiguous()  # no copy if already so
    batch = host.reshape((-1,) + tuple(in_shape))
    out = torch.empty((batch.shape[0],) + tuple(out_shape), dtype=torch.float32)
    src, dst = batch.numpy(), out.numpy()
    run = pair.apply_adjoint if adjoint else pair.apply
    for b in range(src.shape[0]):
        run(src[b], dst[b])
    out = out.reshape(tuple(x.shape[:-3]) + tuple(out_shape))
    return out.to(device=x.device, dtype=x.dtype)


class ForwardProjectionFunction(torch.autograd.Function):
    """``ForwardProjectionFunction.apply(volume, pair)``: forward projection; backward: the
    matched back-projection of the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, volume: torch.Tensor, pair: ctforge.ProjectorPair) -> torch.Tensor:
        """The forward projection of ``volume`` with ``pair``; keeps ``pair`` for backward."""
        ctx.pair = pair
        return _apply(pair, volume, adjoint=False)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        """The matched back-projection of ``grad``; no gradient for ``pair``."""
        return BackProjectionFunction.apply(grad, ctx.pair), None


class BackProjectionFunction(torch.autograd.Function):
    """``BackProjectionFunction.apply(projections, pair)``: matched back-projection; backward:
    the forward projection of the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, projections: torch.Tensor,
                pair: ctforge.ProjectorPair) -> torch.Tensor:
        """The matched back-projection of ``projections``; keeps ``pair`` for backward."""
        ctx.pair = pair
        return _apply(pair, projections, adjoint=True)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        """The forward projection of ``grad``; no gradient for ``pair``."""
        return ForwardProjectionFunction.apply(grad, ctx.pair), None


def _require_matched(pair: ctforge.ProjectorPair) -> ctforge.ProjectorPair:
    if not isinstance(pair, ctforge.ProjectorPair) or not pair.matched:
        raise ctforge.UsageError("pair: expected a ctforge.ProjectorPair with matched=True (the "
                                 "gradient needs the exact transpose)")
    return pair


def forward_project(volume: torch.Tensor, pair: ctforge.ProjectorPair) -> torch.Tensor:
    """Differentiable forward projection of ``volume`` ([batch,] z, y, x) with ``pair``."""
    return ForwardProjectionFunction.apply(volume, _require_matched(pair))


def back_project(projections: torch.Tensor, pair: ctforge.ProjectorPair) -> torch.Tensor:
    """Differentiable matched back-projection of ``projections`` ([batch,] view, row, col)."""
    return BackProjectionFunction.apply(projections, _require_matched(pair))


class _PairModule(nn.Module):
    def __init__(self, geometry: Any, grid: Any = None, *, threads: Optional[int] = None,
                 backend: str = "cpu", pair: Optional[ctforge.ProjectorPair] = None) -> None:
        super().__init__()
        self.pair = _require_matched(pair) if pair is not None else projector_pair(
            geometry, grid, threads=threads, backend=backend)

    @property
    def volume_shape(self) -> Tuple[int, int, int]:
        return self.pair.volume_shape

    @property
    def projection_shape(self) -> Tuple[int, int, int]:
        return self.pair.projection_shape

    def extra_repr(self) -> str:
        return (f"volume_shape={self.volume_shape}, projection_shape={self.projection_shape}, "
                f"backend={self.pair.backend!r}")


class ForwardProjection(_PairModule):
    """Forward projection layer for ``geometry`` on ``grid`` (default
    :func:`ctforge.default_grid`): ``[batch, z, y, x]`` (or ``[z, y, x]``) volumes to
    ``[batch, view, row, col]`` line integrals (mm x density). No parameters; ``threads``,
    ``backend`` as :class:`ctforge.ProjectorPair` takes them (default "cpu"); ``pair``: use
    this matched pair instead of making one. :attr:`adjoint` is the matched back-projection
    sharing the pair."""

    def forward(self, volume: torch.Tensor) -> torch.Tensor:
        return ForwardProjectionFunction.apply(volume, self.pair)

    @property
    def adjoint(self) -> "BackProjection":
        return BackProjection(None, pair=self.pair)


class BackProjection(_PairModule):
    """Matched back-projection layer (the exact transpose of :class:`ForwardProjection`):
    ``[batch, view, row, col]`` (or ``[view, row, col]``) to ``[batch, z, y, x]``; arguments as
    :class:`ForwardProjection`. It is not a reconstruction (no filter, no weights)."""

    def forward(self, projections: torch.Tensor) -> torch.Tensor:
        return BackProjectionFunction.apply(projections, self.pair)

    @property
    def adjoint(self) -> ForwardProjection:
        return ForwardProjection(None, pair=self.pair)


class FBPFunction(torch.autograd.Function):
    """``FBPFunction.apply(projections, op)``: FDK / FBP (``op``: a
    :class:`ctforge.FBPOperator`); backward: its exact adjoint of the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, projections: torch.Tensor, op: ctforge.FBPOperator) -> torch.Tensor:
        """FDK / FBP of ``projections`` with ``op``; keeps ``op`` for backward."""
        ctx.op = op
        return _apply(op, projections, adjoint=False)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        """The adjoint of FDK / FBP applied to ``grad``; no gradient for ``op``."""
        return FBPAdjointFunction.apply(grad, ctx.op), None


class FBPAdjointFunction(torch.autograd.Function):
    """``FBPAdjointFunction.apply(volume, op)``: the adjoint of FDK / FBP; backward: FDK / FBP
    of the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, volume: torch.Tensor, op: ctforge.FBPOperator) -> torch.Tensor:
        """The adjoint of FDK / FBP applied to ``volume``; keeps ``op`` for backward."""
        ctx.op = op
        return _apply(op, volume, adjoint=True)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        """FDK / FBP of ``grad``; no gradient for ``op``."""
        return FBPFunction.apply(grad, ctx.op), None


def fbp(projections: torch.Tensor, op: ctforge.FBPOperator) -> torch.Tensor:
    """Differentiable FDK / FBP of ``projections`` ([batch,] view, row, col) with ``op``."""
    if not isinstance(op, ctforge.FBPOperator):
        raise ctforge.UsageError("op: expected a ctforge.FBPOperator")
    return FBPFunction.apply(projections, op)


class _FBPModule(nn.Module):
    def __init__(self, geometry: Any, grid: Any = None, *, algorithm: Optional[str] = None,
                 filter: str = "ram-lak", cutoff: float = 1.0, displaced_detector: str = "auto",
                 offset_transition: float = 16.0, threads: Optional[int] = None,
                 op: Optional[ctforge.FBPOperator] = None) -> None:
        super().__init__()
        if op is not None:
            if not isinstance(op, ctforge.FBPOperator):
                raise ctforge.UsageError("op: expected a ctforge.FBPOperator")
            self.op = op
        else:
            n = torch.get_num_threads() if threads is None else int(threads)
            self.op = ctforge.FBPOperator(geometry, grid, algorithm=algorithm, filter=filter,
                                          cutoff=cutoff, displaced_detector=displaced_detector,
                                          offset_transition=offset_transition, threads=n)

    @property
    def volume_shape(self) -> Tuple[int, int, int]:
        return self.op.volume_shape

    @property
    def projection_shape(self) -> Tuple[int, int, int]:
        return self.op.projection_shape

    def extra_repr(self) -> str:
        return (f"volume_shape={self.volume_shape}, projection_shape={self.projection_shape}, "
                f"algorithm={self.op.options['algorithm']!r}, "
                f"filter={self.op.options['filter']!r}")


class FBP(_FBPModule):
    """FDK / FBP layer for a circular or circular-orbit vector ``geometry`` on ``grid`` (default
    :func:`ctforge.default_grid`): ``[batch, view, row, col]`` (or ``[view, row, col]``)
    projections to ``[batch, z, y, x]`` volumes, what ``ctforge.reconstruct`` computes with the
    same options (``algorithm`` "fdk" / "fbp", ``filter``, ``cutoff``, ``displaced_detector``,
    ``offset_transition``) on the CPU. Its backward is the exact adjoint (the gradient of
    ``<FBP(p), v>`` is ``ctforge.fbp_adjoint(v)``). No parameters; ``threads=None``:
    ``torch.get_num_threads()``; ``op``: use this :class:`ctforge.FBPOperator`.
    :attr:`adjoint` is the adjoint layer sharing the operator."""

    def forward(self, projections: torch.Tensor) -> torch.Tensor:
        return FBPFunction.apply(projections, self.op)

    @property
    def adjoint(self) -> "FBPAdjoint":
        return FBPAdjoint(None, op=self.op)


class FBPAdjoint(_FBPModule):
    """The adjoint of :class:`FBP`: ``[batch, z, y, x]`` volumes to ``[batch, view, row, col]``
    projections; arguments as :class:`FBP`."""

    def forward(self, volume: torch.Tensor) -> torch.Tensor:
        return FBPAdjointFunction.apply(volume, self.op)

    @property
    def adjoint(self) -> FBP:
        return FBP(None, op=self.op)

"""ctforge.jax: the Joseph forward projector and its exact transpose as JAX functions with
custom gradients (``pip install ctforge[jax]``).

``P = ctforge.jax.Projector(geometry, grid)`` gives ``P.forward`` (volumes ``[..., z, y, x]`` to
projections ``[..., view, row, col]``) and ``P.adjoint`` (the matched back-projection, the
exact transpose), each a ``jax.custom_vjp`` function whose VJP is the other one, so that
``jax.grad``, ``jax.vjp`` and higher reverse-mode derivatives work; forward mode (``jax.jvp``,
``jax.jacfwd``) does not (custom_vjp). Both run on the host through ``jax.pure_callback``
(the first step: an XLA FFI custom call, which would avoid the callback's copies and run on the
GPU, is the goal), so they can be used under ``jax.jit``. Leading axes are a batch: the
callback loops over them with one :class:`ctforge.ProjectorPair` kept by the Projector.
``jax.vmap`` hands the whole batch to one callback (``vmap_method="expand_dims"``, default) or
calls it once per item (``"sequential"``). The operators compute in float32; float64 inputs
(``jax_enable_x64``) are converted and the result is returned in the input's dtype.

``R = ctforge.jax.FBP(geometry, grid, algorithm="fdk")`` gives FDK / FBP as a linear map in
the same way: ``R.fbp`` (projections ``[..., view, row, col]`` to volumes ``[..., z, y, x]``,
what ``ctforge.reconstruct`` computes on the CPU) and ``R.adjoint`` (its exact adjoint,
``ctforge.fbp_adjoint``), each the other's VJP.
"""

from __future__ import annotations

from typing import Any, Callable, Tuple

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("ctforge.jax needs JAX: pip install ctforge[jax] (or pip install jax)") from e

import numpy as np

import ctforge

__all__ = ["Projector", "FBP"]

_VMAP_METHODS = ("expand_dims", "sequential", "broadcast_all")


def _host(run: Callable, in_shape: Tuple[int, ...], out_shape: Tuple[int, ...]) -> Callable:
    """The callback: ``run(item, out)`` on each item of ``x`` ([..., *in_shape]), writing into
    one float32 array, returned in x's dtype."""

    def callback(x: Any) -> np.ndarray:
        x = np.asarray(x)
        lead = x.shape[:len(x.shape) - len(in_shape)]
        items = np.ascontiguousarray(x, dtype=np.float32).reshape((-1,) + in_shape)
        out = np.empty((items.shape[0],) + out_shape, np.float32)
        for b in range(items.shape[0]):
            run(items[b], out[b])
        return out.reshape(lead + out_shape).astype(x.dtype, copy=False)

    return callback


class _LinearPair:
    """Two custom_vjp functions, ``forward`` and ``adjoint``, each the other's VJP, running
    ``run_forward`` / ``run_adjoint`` (item, out) on the host."""

    def _build(self, run_forward: Callable, run_adjoint: Callable, in_shape: Tuple[int, ...],
               out_shape: Tuple[int, ...], in_what: str, out_what: str,
               vmap_method: str) -> Tuple[Any, Any]:
        if vmap_method not in _VMAP_METHODS:
            raise ctforge.UsageError(f"vmap_method: expected one of {', '.join(_VMAP_METHODS)} "
                                     f"(got {vmap_method!r})")
        self.vmap_method = vmap_method
        fwd = self._operator(_host(run_forward, in_shape, out_shape), in_shape, out_shape,
                             in_what)
        adj = self._operator(_host(run_adjoint, out_shape, in_shape), out_shape, in_shape,
                             out_what)
        fwd.defvjp(lambda x: (fwd(x), None), lambda _, g: (adj(g),))
        adj.defvjp(lambda y: (adj(y), None), lambda _, g: (fwd(g),))
        return fwd, adj

    def _operator(self, callback: Callable, in_shape: Tuple[int, ...],
                  out_shape: Tuple[int, ...], what: str) -> Any:
        method = self.vmap_method

        @jax.custom_vjp
        def op(x: Any) -> Any:
            if x.ndim < 3 or tuple(x.shape[-3:]) != in_shape:
                raise ctforge.UsageError(f"{what}: expected shape [..., "
                                         f"{', '.join(map(str, in_shape))}], got {list(x.shape)}")
            if not jnp.issubdtype(x.dtype, jnp.floating):
                raise ctforge.UsageError(f"{what}: expected floating-point values, got {x.dtype}")
            result = jax.ShapeDtypeStruct(tuple(x.shape[:-3]) + out_shape, x.dtype)
            return jax.pure_callback(callback, result, x, vmap_method=method)

        return op


class Projector(_LinearPair):
    """The forward projector for ``geometry`` on ``grid`` (as :class:`ctforge.ProjectorPair`
    takes them; default :func:`ctforge.default_grid`) and its matched adjoint as JAX
    functions: ``forward(volume)`` and ``adjoint(projections)``, each with the other as its
    VJP. ``threads`` (0: all cores), ``backend`` (default "cpu") go to the pair;
    ``vmap_method`` to ``jax.pure_callback``."""

    def __init__(self, geometry: Any, grid: Any = None, *, threads: int = 0,
                 backend: str = "cpu", vmap_method: str = "expand_dims") -> None:
        self.pair = ctforge.ProjectorPair(geometry, grid, backend=backend, threads=int(threads),
                                          matched=True)
        vs, ps = tuple(self.pair.volume_shape), tuple(self.pair.projection_shape)
        self.forward, self.adjoint = self._build(self.pair.apply, self.pair.apply_adjoint, vs,
                                                 ps, "volume", "projections", vmap_method)

    @property
    def volume_shape(self) -> Tuple[int, int, int]:
        return self.pair.volume_shape

    @property
    def projection_shape(self) -> Tuple[int, int, int]:
        return self.pair.projection_shape

    def __repr__(self) -> str:
        return (f"ctforge.jax.Projector(volume_shape={self.volume_shape}, "
                f"projection_shape={self.projection_shape}, vmap_method={self.vmap_method!r})")


class FBP(_LinearPair):
    """FDK / FBP for a circular (or circular-orbit vector) ``geometry`` on ``grid`` (default
    :func:`ctforge.default_grid`) as JAX functions: ``fbp(projections)`` (``[..., view, row, col]`` to ``[..., z, y, x]``,
    what ``ctforge.reconstruct`` computes on the CPU with the same ``algorithm``, ``filter``,
    ``cutoff``, ``displaced_detector`` and ``offset_transition``) and ``adjoint(volume)`` (its
    exact adjoint, ``ctforge.fbp_adjoint``), each the other's VJP. One
    :class:`ctforge.FBPOperator` (``self.op``) serves every call; ``threads``: 0, all cores."""

    def __init__(self, geometry: Any, grid: Any = None, *, algorithm: Any = None,
                 filter: str = "ram-lak", cutoff: float = 1.0, displaced_detector: str = "auto",
                 offset_transition: float = 16.0, threads: int = 0,
                 vmap_method: str = "expand_dims") -> None:
        self.op = ctforge.FBPOperator(geometry, grid, algorithm=algorithm, filter=filter,
                                      cutoff=cutoff, displaced_detector=displaced_detector,
                                      offset_transition=offset_transition, threads=int(threads))
        vs, ps = tuple(self.op.volume_shape), tuple(self.op.projection_shape)
        self.fbp, self.adjoint = self._build(self.op.apply, self.op.apply_adjoint, ps, vs,
                                             "projections", "volume", vmap_method)

    def __call__(self, projections: Any) -> Any:
        return self.fbp(projections)

    @property
    def volume_shape(self) -> Tuple[int, int, int]:
        return self.op.volume_shape

    @property
    def projection_shape(self) -> Tuple[int, int, int]:
        return self.op.projection_shape

    def __repr__(self) -> str:
        return (f"ctforge.jax.FBP(volume_shape={self.volume_shape}, "
                f"projection_shape={self.projection_shape}, "
                f"algorithm={self.op.options['algorithm']!r}, vmap_method={self.vmap_method!r})")

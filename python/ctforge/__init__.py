"""ctforge: CT reconstruction and simulation on the CPU and CUDA GPUs.

Arrays are numpy float32 in C order with the axes of the files:

* volumes ``[z][y][x]`` (shape ``(nz, ny, nx)``), described by a :class:`VolumeGeometry`
  whose ``spacing`` and ``origin`` are in mm and in x, y, z order (origin = centre of voxel
  (0, 0, 0));
* projections ``[view][row][col]`` (shape ``geometry.projection_shape``), line integrals
  (unitless: attenuation in 1/mm times mm) unless a reader says otherwise.

Distances are in mm and angles in radians (geometry JSON files store degrees). C-contiguous
float32 inputs are read in place, without a copy; other dtypes and layouts are converted once.
Any object with ``__dlpack__`` on the CPU (NumPy, PyTorch CPU tensors, ...) is accepted the same
way. Results are numpy arrays that own the C++ buffer (no copy), and ``np.from_dlpack`` /
``torch.from_dlpack`` take them without a copy either. With the CUDA backend, ``reconstruct``
also takes projections in GPU memory (CuPy arrays, PyTorch CUDA tensors, :class:`DeviceArray`:
anything with ``__dlpack__`` on a CUDA device), copied on the device only, and
``out="device"`` leaves the volume there as a :class:`DeviceArray` (``cupy.from_dlpack`` /
``torch.from_dlpack`` take it without a copy).

Every compute call releases the GIL; a reconstruction can be interrupted with Ctrl-C
(KeyboardInterrupt), which stops it after the batch, slab or iteration in progress.
Errors: :class:`UsageError` (a ``ValueError``: bad arguments, the command line's exit
status 2) and :class:`Error` (a ``RuntimeError``: files, devices; exit status 1), with the
command line's messages.
"""

from __future__ import annotations

import json as _json
import numbers as _numbers
import os as _os
import sys as _sys
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._core import DeviceArray, Error, Geometry as _Geometry, Phantom, UsageError, VolumeGeometry

__version__: str = _core.__version__
cuda_compiled: bool = _core.cuda_compiled

__all__ = [
    "Error", "UsageError", "Geometry", "VolumeGeometry", "Phantom", "__version__",
    "shepp_logan", "phantom", "project_analytic", "voxelize", "add_poisson_noise",
    "forward_project", "back_project", "reconstruct", "fbp_apply", "fbp_adjoint", "FBPOperator", "default_grid", "default_algorithm",
    "estimate_center_of_rotation", "find_center", "center_montage", "CenterEstimate",
    "read_projections", "read_projection_geometry",
    "write_projections", "read_volume",
    "write_volume", "write_preview", "info", "compare", "backend_for", "last_gpu_call",
    "DeviceArray", "to_device", "linear_operator",
]
__all__ += ["ProjectorPair"]  # persistent projector pair (see ProjectorPair below)
__all__ += ["remove_stripes", "remove_zingers", "preprocess_options"]  # cleaning raw scans
__all__ += ["retrieve_phase", "phase_row_margin"]  # phase retrieval (below)
__all__ += ["correct_beam_hardening", "fit_linearisation",  # beam hardening (below)
            "fit_water_precorrection"]

PathLike = Union[str, "_os.PathLike[str]"]


# ---- arrays ------------------------------------------------------------------------------

_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged


def _dlpack_device(x: Any) -> Optional[Tuple[int, int]]:
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack__"):
        return None
    if not hasattr(x, "__dlpack_device__"):
        return (1, 0)
    t, i = x.__dlpack_device__()
    return int(t), int(i)


def _device_capsule(x: Any) -> Any:
    """DLPack capsule of an array in CUDA memory (the producer orders its pending work before
    the legacy default stream, which the call then waits for)."""
    try:
        return x.__dlpack__(stream=1)
    except TypeError:
        return x.__dlpack__()


def _as_float32(x: Any, ndim: int, what: str) -> np.ndarray:
    """C-contiguous float32 ndarray sharing memory with ``x`` when it already is one."""
    device = _dlpack_device(x)
    if device is not None:
        if device[0] in _DLPACK_CUDA:
            raise UsageError(
                f"{what}: arrays in GPU memory (DLPack device type {device[0]}) are taken by "
                "reconstruct only; copy them to the host first (e.g. .get() / .cpu())")
        if device[0] not in (1, 3):  # kDLCPU, kDLCUDAHost
            raise UsageError(f"{what}: DLPack device type {device[0]} is not supported")
        x = np.from_dlpack(x)
    a = np.asarray(x)
    if a.ndim != ndim:
        raise UsageError(f"{what}: expected {ndim} dimensions, got {a.ndim} (shape {a.shape})")
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
            raise UsageError(f"{what}: expected real numbers, got dtype {a.dtype}")
        a = np.ascontiguousarray(a, dtype=np.float32)
    return a


def _pair(value: Union[float, Sequence[float]], what: str) -> Tuple[float, float]:
    if np.ndim(value) == 0:
        return float(value), float(value)  # type: ignore[arg-type]
    v = [float(x) for x in value]  # type: ignore[union-attr]
    if len(v) != 2:
        raise UsageError(f"{what}: expected one number or two (u, v), got {len(v)}")
    return v[0], v[1]


def _triple(value: Any, what: str, cast=float) -> Optional[Tuple[Any, Any, Any]]:
    if value is None:
        return None
    if np.ndim(value) == 0:
        return (cast(value),) * 3
    v = [cast(x) for x in value]
    if len(v) != 3:
        raise UsageError(f"{what}: expected one value or three, got {len(v)}")
    return v[0], v[1], v[2]


def _angles(angles: Any) -> list:
    if np.ndim(angles) == 0:
        n = int(angles)
        if n < 1 or n != angles:
            raise UsageError(f"angles: a view count must be a positive integer (got {angles})")
        return list(np.arange(n) * (2 * np.pi / n))
    return [float(a) for a in np.asarray(angles, dtype=np.float64).ravel()]


def _offsets(x: Any) -> list:
    if x is None:
        return []
    return [float(v) for v in np.atleast_1d(np.asarray(x, dtype=np.float64)).ravel()]


# ---- geometry ----------------------------------------------------------------------------

class Geometry:
    """Acquisition geometry (see docs/geometry.md): a detector of ``cols`` x ``rows``
    pixels and one set of vectors per view. Build one with :meth:`cone`, :meth:`parallel`,
    :meth:`cone_vec`, :meth:`parallel_vec`, :meth:`from_json`, :meth:`from_rtk_xml` or
    :meth:`from_astra`. Read-only; compare with ``==``."""

    __slots__ = ("_g",)

    def __init__(self, core: _Geometry):
        if not isinstance(core, _Geometry):
            raise TypeError("use Geometry.cone(...), .parallel(...), .cone_vec(...) or .from_json(...)")
        self._g = core

    @staticmethod
    def cone(cols: int, rows: int, pixel_size: Union[float, Sequence[float]], sid: float,
             sdd: float, angles: Any, offset_u: Any = None, offset_v: Any = None,
             detector_shape: str = "flat") -> "Geometry":
        """Circular cone beam (rows = 1: fan beam). ``pixel_size`` in mm (one value or (u, v));
        ``sid``/``sdd`` source-to-isocentre / source-to-detector distances in mm; ``angles`` in
        radians (an array, or a view count for a full circle); detector offsets in mm (one
        value or one per view). ``detector_shape="cylindrical"``: a curved detector of radius
        ``sdd`` centred on the source, columns ``pixel_size`` apart along the arc
        (docs/geometry.md)."""
        du, dv = _pair(pixel_size, "pixel_size")
        return Geometry(_core.make_cone(int(cols), int(rows), du, dv, float(sid), float(sdd),
                                        _angles(angles), _offsets(offset_u), _offsets(offset_v),
                                        str(detector_shape)))

    @staticmethod
    def helical(cols: int, rows: int, pixel_size: Union[float, Sequence[float]], sid: float,
                sdd: float, angles: Any, *, pitch_mm_per_turn: Optional[float] = None,
                pitch_factor: Optional[float] = None, z_start: float = 0.0,
                offset_u: float = 0.0, offset_v: float = 0.0,
                detector_shape: str = "flat") -> "Geometry":
        """Helical cone beam: the circular cone's orbit (units as in :meth:`cone`; ``angles``
        strictly monotonic, radians, several turns) while the source and detector move along
        z by ``pitch_mm_per_turn`` per turn (its sign: the direction), or by ``pitch_factor``
        times the detector's height at the isocentre (rows x pixel_v x sid / sdd); the first
        view's source at height ``z_start`` (mm). One detector offset (mm) for all views.
        :func:`reconstruct` runs "helical-fbp" on it by default (docs/guide/helical.md)."""
        du, dv = _pair(pixel_size, "pixel_size")
        if (pitch_mm_per_turn is None) == (pitch_factor is None):
            raise UsageError("helical: give pitch_mm_per_turn or pitch_factor (one of them)")
        feed = (float(pitch_mm_per_turn) if pitch_mm_per_turn is not None else
                float(pitch_factor) * int(rows) * abs(dv) * float(sid) / float(sdd))
        return Geometry(_core.make_helical(int(cols), int(rows), du, dv, float(sid), float(sdd),
                                           _angles(angles), feed, float(z_start),
                                           float(offset_u), float(offset_v),
                                           str(detector_shape)))

    @staticmethod
    def parallel(cols: int, rows: int, pixel_size: Union[float, Sequence[float]], angles: Any,
                 offset_u: Any = None, offset_v: Any = None) -> "Geometry":
        """Circular parallel beam; units as in :meth:`cone`."""
        du, dv = _pair(pixel_size, "pixel_size")
        return Geometry(_core.make_parallel(int(cols), int(rows), du, dv, _angles(angles),
                                            _offsets(offset_u), _offsets(offset_v)))

    @staticmethod
    def cone_vec(cols: int, rows: int, vectors: Any) -> "Geometry":
        """Cone beam with per-view vectors: an (n, 12) array of source, detector centre, u
        (step between columns) and v (step between rows), in mm (ASTRA's cone_vec rows)."""
        return Geometry(_core.make_vec("cone", int(cols), int(rows), np.asarray(vectors, np.float64)))

    @staticmethod
    def parallel_vec(cols: int, rows: int, vectors: Any) -> "Geometry":
        """Parallel beam with per-view vectors: ray direction, detector centre, u, v."""
        return Geometry(_core.make_vec("parallel", int(cols), int(rows), np.asarray(vectors, np.float64)))

    @staticmethod
    def from_json(source: Union[str, PathLike, dict]) -> "Geometry":
        """From geometry JSON text, a dict, or a path to a .json file."""
        if isinstance(source, dict):
            return Geometry(_core.geometry_from_json(_json.dumps(source)))
        text = _os.fspath(source)
        if text.lstrip().startswith("{"):
            return Geometry(_core.geometry_from_json(text))
        return Geometry(_core.load_geometry(text))

    @staticmethod
    def from_rtk_xml(source: Union[str, PathLike], cols: int, rows: int,
                     pixel_size: Union[float, Sequence[float]]) -> "Geometry":
        """From RTK geometry XML (text or path) for a detector of cols x rows pixels."""
        du, dv = _pair(pixel_size, "pixel_size")
        text = _os.fspath(source)
        if not text.lstrip().startswith("<"):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        return Geometry(_core.geometry_from_rtk_xml(text, int(cols), int(rows), du, dv))

    @staticmethod
    def from_astra(beam: str, cols: int, rows: int, vectors: Any) -> "Geometry":
        """From ASTRA cone_vec (beam="cone") or parallel3d_vec (beam="parallel") rows."""
        return Geometry(_core.geometry_from_astra(beam, int(cols), int(rows),
                                                  np.asarray(vectors, np.float64)))

    def to_json(self) -> str:
        """Geometry JSON that :meth:`from_json` reads back into an identical geometry."""
        return self._g.to_json()

    def to_astra(self) -> np.ndarray:
        """(n, 12) ASTRA vector rows (cone_vec / parallel3d_vec)."""
        return self._g.to_astra()

    def to_rtk_xml(self) -> str:
        """RTK ThreeDCircularGeometry XML (with each projection's matrix)."""
        return self._g.to_rtk_xml()

    def projection_matrices(self) -> np.ndarray:
        """(n, 3, 4) matrices: [p0, p1, p2] = M [x, y, z, 1]; col = p0/p2, row = p1/p2."""
        return self._g.projection_matrices()

    def with_center_of_rotation(self, col: float) -> "Geometry":
        """Copy with the detector shifted so the rotation axis projects onto column ``col``."""
        return Geometry(self._g.with_center_of_rotation(float(col)))

    type = property(lambda self: self._g.type,
                    doc='"cone", "parallel", "helical", "cone_vec" or "parallel_vec"')
    beam = property(lambda self: self._g.beam, doc='"cone" or "parallel"')
    cols = property(lambda self: self._g.cols, doc="detector columns")
    rows = property(lambda self: self._g.rows, doc="detector rows (1: fan beam / 2D)")
    pixel_size = property(lambda self: self._g.pixel_size, doc="pixel pitch (u, v) in mm")
    view_count = property(lambda self: self._g.view_count, doc="number of views")
    detector_shape = property(lambda self: self._g.detector_shape,
                              doc='"flat" or "cylindrical" (curved detector of radius sdd)')
    projection_shape = property(lambda self: self._g.projection_shape, doc="(views, rows, cols)")
    views = property(lambda self: self._g.vectors,
                     doc="(n, 12) per-view vectors: source (or ray), detector centre, u, v (mm)")
    angles = property(lambda self: self._g.angles,
                      doc="view angles (radians); None for vector geometries")
    sid = property(lambda self: self._g.sid,
                   doc="source-to-isocentre distance (mm); circular cone and helical only")
    sdd = property(lambda self: self._g.sdd,
                   doc="source-to-detector distance (mm); circular cone and helical only")
    pitch_mm_per_turn = property(lambda self: self._g.pitch_mm_per_turn,
                                 doc="helical: table feed per turn (mm); None otherwise")
    z_start = property(lambda self: self._g.z_start,
                       doc="helical: the first view's source height (mm); None otherwise")

    def helical_coverage(self) -> dict:
        """Helical scans: pitch_factor, the source's z range (source_z_min / _max, mm) and the
        heights the rows see on the axis for half a turn or more (full_z_min / _max, mm; min >
        max when none): what ``ctforge info`` prints and the default grid covers."""
        return self._g.helical_coverage()
    offset_u = property(lambda self: self._g.offset_u, doc="detector offsets along u per view (mm)")
    offset_v = property(lambda self: self._g.offset_v, doc="detector offsets along v per view (mm)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Geometry) and self._g == other._g

    def __repr__(self) -> str:
        return repr(self._g)


def _core_geometry(g: Any) -> _Geometry:
    if isinstance(g, Geometry):
        return g._g
    if isinstance(g, (str, dict)) or hasattr(g, "__fspath__"):
        return Geometry.from_json(g)._g
    raise UsageError("geometry: expected a ctforge.Geometry, geometry JSON or a path to one")


def default_grid(geometry: Any, shape: Optional[Sequence[int]] = None,
                 spacing: Any = None, origin: Any = None) -> VolumeGeometry:
    """The grid ``ctforge recon`` uses: ``shape`` (nz, ny, nx) in voxels, ``spacing`` (x, y, z)
    in mm (one value: isotropic) and ``origin`` (x, y, z) in mm, each defaulting as the
    command line's --size-xyz / --spacing / --origin (docs/guide/reconstruct.md, "The volume
    grid")."""
    s = None if shape is None else tuple(int(v) for v in shape)
    if s is not None and len(s) != 3:
        raise UsageError(f"shape: expected (nz, ny, nx), got {shape}")
    return _core.default_grid(_core_geometry(geometry), s, _triple(spacing, "spacing"),
                              _triple(origin, "origin"))


def _grid(grid: Any, geometry: _Geometry) -> VolumeGeometry:
    if grid is None:
        return _core.default_grid(geometry, None, None, None)
    if isinstance(grid, VolumeGeometry):
        return grid
    if isinstance(grid, dict):
        return _core.default_grid(geometry, grid.get("shape"), _triple(grid.get("spacing"), "spacing"),
                                  _triple(grid.get("origin"), "origin"))
    raise UsageError("grid: expected a ctforge.VolumeGeometry, a dict(shape=, spacing=, origin=) or None")


def _volume_grid(volume: np.ndarray, grid: Any,
                 geometry: Optional[_Geometry] = None) -> VolumeGeometry:
    if isinstance(grid, VolumeGeometry):
        return grid
    if grid is None:
        nz, ny, nx = volume.shape
        if geometry is None:  # a file's grid: unit voxels centred on the origin
            return VolumeGeometry(nz, ny, nx, (1.0, 1.0, 1.0))
        # The grid reconstruct / back_project / ProjectorPair take by default, with the volume's
        # shape: the same grid for a volume of the default shape.
        return _core.default_grid(geometry, (nz, ny, nx), None, None)
    if isinstance(grid, dict):
        nz, ny, nx = volume.shape
        if geometry is not None:  # what is not given: as default_grid chooses it
            return _core.default_grid(geometry, (nz, ny, nx),
                                      _triple(grid.get("spacing"), "spacing"),
                                      _triple(grid.get("origin"), "origin"))
        return VolumeGeometry(nz, ny, nx, _triple(grid.get("spacing", 1.0), "spacing"),
                              _triple(grid.get("origin"), "origin"))
    raise UsageError("grid: expected a ctforge.VolumeGeometry, a dict(spacing=, origin=) or None")


def default_algorithm(geometry: Any) -> str:
    """"fdk", "fbp" or "sirt": what ``reconstruct`` runs when no algorithm is given."""
    return _core.default_algorithm(_core_geometry(geometry))


# ---- phantoms ----------------------------------------------------------------------------

def shepp_logan(size_mm: float = 128.0) -> Phantom:
    """3D Shepp-Logan phantom scaled to the cube [-size/2, size/2]^3 (mm); densities in 1/mm
    (brain 0.02, skull 0.1)."""
    return _core.shepp_logan(float(size_mm))


def phantom(source: Union[str, PathLike, dict, Sequence[dict]]) -> Phantom:
    """Ellipsoid phantom from a dict ``{"ellipsoids": [...]}``, a list of ellipsoid dicts
    (``center``, ``semi_axes`` in mm, ``rotation_deg`` about +z, ``density`` in 1/mm), JSON text
    or a path to a JSON file."""
    if isinstance(source, (list, tuple)):
        return _core.phantom_from_json(_json.dumps({"ellipsoids": list(source)}))
    if isinstance(source, dict):
        return _core.phantom_from_json(_json.dumps(source))
    text = _os.fspath(source)
    if text.lstrip().startswith("{"):
        return _core.phantom_from_json(text)
    with open(text, encoding="utf-8") as f:
        return _core.phantom_from_json(f.read(), text)


def project_analytic(phantom: Phantom, geometry: Any, threads: int = 0) -> np.ndarray:
    """Exact line integrals of an ellipsoid phantom, one ray through each pixel centre:
    float32 (views, rows, cols)."""
    return _core.project_analytic(phantom, _core_geometry(geometry), int(threads))


def voxelize(phantom: Phantom, grid: VolumeGeometry, supersample: int = 4,
             threads: int = 0) -> np.ndarray:
    """Mean density (1/mm) of the phantom over each voxel of ``grid`` (supersample^3 points
    per voxel): float32 (nz, ny, nx)."""
    return _core.voxelize(phantom, grid, int(supersample), int(threads))


def add_poisson_noise(projections: Any, i0: float = 1e5, sigma: float = 0.0,
                      seed: int = 1) -> np.ndarray:
    """New array: each line integral p becomes -log(N / i0), N ~ Poisson(i0 exp(-p)) plus
    Gaussian electronic noise of ``sigma`` photons; counts <= 0 are clamped to 0.5 photon.
    Same seed, same noise (whatever the thread count): ``ctforge simulate --noise-i0``."""
    out, _ = _core.add_noise(_as_float32(projections, 3, "projections"), float(i0),
                             float(sigma), int(seed))
    return out


# ---- operators ---------------------------------------------------------------------------

def _memory(limit: Any, name: str = "gpu_memory_limit") -> int:
    """A byte count from an integer or a string such as "512M" or "8G" (K, M, G: powers of
    1024); None or 0: no limit (0)."""
    if limit is None or limit == 0:
        return 0
    if isinstance(limit, str):
        text = limit.strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        number = text[:-1] if scale > 1 else text
        try:
            value = int(number) * scale
        except ValueError:
            raise UsageError(f"{name}: '{limit}' is not a byte count (e.g. 2G)") from None
    else:
        value = int(limit)
    if value <= 0:
        raise UsageError(f"{name}: must be a positive byte count (got {limit})")
    return value


def _context(backend: str, device: int, threads: int, gpu_memory_limit: Any,
             gpu_interpolation: str) -> dict:
    """The keyword options of the execution context (where and how a call runs)."""
    return {"backend": backend, "device": int(device), "threads": int(threads),
            "gpu_memory_limit": _memory(gpu_memory_limit), "gpu_interpolation": gpu_interpolation}


def forward_project(volume: Any, geometry: Any, grid: Any = None, *, backend: str = "auto",
                    device: int = 0, threads: int = 0, gpu_memory_limit: Any = None,
                    gpu_interpolation: str = "exact") -> np.ndarray:
    """Joseph forward projection of ``volume`` (nz, ny, nx) on ``grid`` (default: the grid of
    :func:`default_grid` with the volume's shape, as :func:`reconstruct`, :func:`back_project`
    and :class:`ProjectorPair` take it, so that a reconstruction projects back onto its data):
    float32 (views, rows, cols), in mm x density. A dict ``grid`` gives ``spacing`` (x, y, z)
    and ``origin`` in mm for the volume's shape. ``backend``: "auto" (CUDA when a device is
    usable), "cpu" or "cuda"."""
    v = _as_float32(volume, 3, "volume")
    g = _core_geometry(geometry)
    return _core.forward_project(v, _volume_grid(v, grid, g), g,
                                 **_context(backend, device, threads, gpu_memory_limit,
                                            gpu_interpolation))


def back_project(projections: Any, geometry: Any, grid: Any = None, *, backend: str = "auto",
                 device: int = 0, threads: int = 0, gpu_memory_limit: Any = None,
                 gpu_interpolation: str = "exact", reference: bool = False,
                 matched: bool = False) -> np.ndarray:
    """Unweighted voxel-driven back-projection (sum over views of the bilinearly interpolated
    values) onto ``grid`` (default: :func:`default_grid`): float32 (nz, ny, nx).
    ``matched=True``: the exact transpose of :func:`forward_project` instead (ray-driven, CPU),
    so that ``<forward_project(x), y> == <x, back_project(y, matched=True)>`` up to float
    rounding, as CGLS and other gradient methods need."""
    g = _core_geometry(geometry)
    return _core.back_project(_as_float32(projections, 3, "projections"), g, _grid(grid, g),
                              reference=bool(reference), matched=bool(matched),
                              **_context(backend, device, threads, gpu_memory_limit,
                                         gpu_interpolation))


# ---- persistent projector pair ------------------------------------------------------------

def _output(out: Any) -> Optional[np.ndarray]:
    """``out`` as an ndarray sharing its memory (never a converted copy: the result must land
    in the caller's buffer); None stays None."""
    if out is None or isinstance(out, np.ndarray):
        return out
    device = _dlpack_device(out)
    if device is None or device[0] not in (1, 3):
        raise UsageError("out: expected a numpy array or a CPU array with __dlpack__")
    return np.from_dlpack(out)


class ProjectorPair:
    """The Joseph forward projector and its adjoint for one geometry and grid (default:
    :func:`default_grid`), kept for repeated use: on CUDA the volume texture, the projection
    buffers and the per-view geometry stay on the device between calls (one upload and one
    download per call, no allocation after construction); on the CPU each call runs
    :func:`forward_project` / :func:`back_project`.

    ``apply(volume)``: float32 (views, rows, cols) line integrals in mm x density of a
    (nz, ny, nx) volume. ``apply_adjoint(projections)``: float32 (nz, ny, nx);
    ``matched=True`` (default) the exact transpose of ``apply`` (``back_project(...,
    matched=True)``), ``matched=False`` the voxel-driven back-projector. ``backend``: "auto"
    (CUDA when a device is usable), "cpu" or "cuda". The GIL is released during each call;
    calls on one object must not overlap (use one object per thread)."""

    def __init__(self, geometry: Any, grid: Any = None, *, backend: str = "auto", device: int = 0,
                 threads: int = 0, gpu_memory_limit: Any = None, gpu_interpolation: str = "exact",
                 matched: bool = True) -> None:
        g = _core_geometry(geometry)
        self._pair = _core.ProjectorPair(g, _grid(grid, g), matched=bool(matched),
                                         **_context(backend, device, threads, gpu_memory_limit,
                                                    gpu_interpolation))

    def apply(self, volume: Any, out: Any = None) -> np.ndarray:
        """Forward projection of ``volume`` (nz, ny, nx): float32 (views, rows, cols).
        ``out``: a writeable C-contiguous float32 array of that shape (numpy, or a CPU tensor
        through DLPack) to write the result into instead of a new array; returned."""
        return self._pair.apply(_as_float32(volume, 3, "volume"), _output(out))

    def apply_adjoint(self, projections: Any, out: Any = None) -> np.ndarray:
        """The adjoint of :meth:`apply` on ``projections`` (views, rows, cols): float32
        (nz, ny, nx); ``out`` as in :meth:`apply`."""
        return self._pair.apply_adjoint(_as_float32(projections, 3, "projections"), _output(out))

    @property
    def backend(self) -> str:
        """"cpu" or "cuda": where the pair runs."""
        return self._pair.backend

    @property
    def matched(self) -> bool:
        return self._pair.matched

    @property
    def volume_shape(self) -> Tuple[int, int, int]:
        return tuple(self._pair.volume_shape)

    @property
    def projection_shape(self) -> Tuple[int, int, int]:
        return tuple(self._pair.projection_shape)

    def stats(self) -> dict:
        """Calls so far, and on CUDA the device allocations and bytes moved (allocations stay
        constant after construction)."""
        return self._pair.stats()

    def __repr__(self) -> str:
        return (f"ProjectorPair(volume_shape={self.volume_shape}, "
                f"projection_shape={self.projection_shape}, backend={self.backend!r}, "
                f"matched={self.matched})")


class FBPOperator:
    """FDK / FBP as a linear operator R for one geometry, grid and set of options, with its
    exact adjoint: ``apply(projections)`` is :func:`fbp_apply` (what :func:`reconstruct`
    computes on the CPU), ``apply_adjoint(volume)`` is :func:`fbp_adjoint`. Options as there
    (``algorithm`` default :func:`default_algorithm`: "fdk" or "fbp"); the operator behind
    :class:`ctforge.torch.FBP` and :func:`ctforge.jax.fbp`."""

    def __init__(self, geometry: Any, grid: Any = None, *, algorithm: Optional[str] = None,
                 filter: str = "ram-lak", cutoff: float = 1.0, displaced_detector: str = "auto",
                 offset_transition: float = 16.0, threads: int = 0) -> None:
        self._g = _core_geometry(geometry)
        self._grid = _grid(grid, self._g)
        self.options = _fbp_options(self._g, algorithm, filter, cutoff, displaced_detector,
                                    offset_transition, threads)
        if self.options["algorithm"].lower() not in ("fdk", "fbp"):
            raise UsageError(f"algorithm: FBPOperator needs fdk or fbp "
                             f"(got {self.options['algorithm']!r})")

    @staticmethod
    def _into(result: np.ndarray, out: Any) -> np.ndarray:
        if out is None:
            return result
        dst = _output(out)
        if tuple(dst.shape) != tuple(result.shape):
            raise UsageError(f"out: shape {tuple(dst.shape)} is not the result's "
                             f"{tuple(result.shape)}")
        np.copyto(dst, result)
        return dst

    def apply(self, projections: Any, out: Any = None) -> np.ndarray:
        """R projections: float32 (nz, ny, nx); ``out``: an array to write it into."""
        return self._into(_core.fbp_apply(_as_float32(projections, 3, "projections"), self._g,
                                          self._grid, **self.options), out)

    def apply_adjoint(self, volume: Any, out: Any = None) -> np.ndarray:
        """R^T volume: float32 (views, rows, cols); ``out`` as in :meth:`apply`."""
        return self._into(_core.fbp_adjoint(_as_float32(volume, 3, "volume"), self._g,
                                            self._grid, **self.options), out)

    @property
    def volume_shape(self) -> Tuple[int, int, int]:
        return tuple(self._grid.shape)

    @property
    def projection_shape(self) -> Tuple[int, int, int]:
        return tuple(self._g.projection_shape)

    def __repr__(self) -> str:
        return (f"FBPOperator(volume_shape={self.volume_shape}, "
                f"projection_shape={self.projection_shape}, "
                f"algorithm={self.options['algorithm']!r}, filter={self.options['filter']!r})")


def linear_operator(geometry: Any, grid: Any = None, *, threads: int = 0, backend: str = "auto",
                    device: int = 0, gpu_memory_limit: Any = None, matched: bool = True) -> Any:
    """The projector pair as a ``scipy.sparse.linalg.LinearOperator`` of shape (rays, voxels):
    ``A @ x`` is :func:`forward_project` of the volume ``x`` (flattened ``(nz, ny, nx)``) and
    ``A.T @ y`` its exact transpose (``back_project(..., matched=True)``) of the flattened
    projections, so that scipy's ``lsqr``, ``lsmr`` or ``cg`` on ``A.T A`` can be used
    (float32). Built on a :class:`ProjectorPair`: ``backend`` "auto" (default: CUDA when a
    device is usable), "cpu" or "cuda" (on CUDA the pair's device resources are kept between
    products); ``matched=False`` takes
    the voxel-driven back-projector as ``A.T`` (not an exact transpose). Needs scipy."""
    try:
        from scipy.sparse.linalg import LinearOperator
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise UsageError("linear_operator needs scipy (pip install scipy)") from e
    pair = ProjectorPair(geometry, grid, backend=backend, device=device, threads=threads,
                         gpu_memory_limit=gpu_memory_limit, matched=matched)
    vshape, pshape = pair.volume_shape, pair.projection_shape

    def matvec(x):
        return pair.apply(np.asarray(x).reshape(vshape)).ravel()

    def rmatvec(y):
        return pair.apply_adjoint(np.asarray(y).reshape(pshape)).ravel()

    n_rays, n_vox = int(np.prod(pshape)), int(np.prod(vshape))
    op = LinearOperator((n_rays, n_vox), matvec=matvec, rmatvec=rmatvec, dtype=np.float32)
    op.projector_pair = pair
    return op


_ALGORITHMS = ("fdk", "fbp", "helical-fbp", "sirt", "os-sart", "cgls", "fista-tv", "osem")
_OPTION_TABLE: list = []


def _option_table() -> list:
    """The library's table of algorithm-specific options (dicts: name, flag, algorithms, needs,
    help), read once."""
    if not _OPTION_TABLE:
        _OPTION_TABLE.extend(_core.recon_option_table())
    return _OPTION_TABLE


def _given_options(function: Callable, values: dict, defaults: Optional[dict] = None) -> list:
    """The names of the table's options that ``values`` (a call's arguments) gives other than
    ``function``'s defaults (``defaults`` overrides some), in the table's order."""
    import inspect
    params = inspect.signature(function).parameters
    given = []
    for entry in _option_table():
        name = entry["name"]
        if name not in params or name not in values:
            continue
        default = (defaults or {}).get(name, params[name].default)
        value = values[name]
        if value is None and default is not None:
            continue
        if (value is not None) if default is None else bool(value != default):
            given.append(name)
    return given


def _require_options_apply(function: Callable, values: dict, algorithm: str,
                           defaults: Optional[dict] = None) -> None:
    """UsageError naming the first option given (other than its default) that does not apply
    to ``algorithm``."""
    for name in _given_options(function, values, defaults):
        _core.require_option_applies(name, algorithm)


class _ProgressBar:
    """progress=True: a one-line bar on stderr."""

    def __init__(self) -> None:
        self.last = -1

    def __call__(self, fraction: float) -> None:
        percent = int(fraction * 100)
        if percent != self.last:
            self.last = percent
            filled = percent * 30 // 100
            _sys.stderr.write(f"\rctforge: reconstructing [{'#' * filled}{' ' * (30 - filled)}] {percent:3d}%")
            if percent >= 100:
                _sys.stderr.write("\n")
            _sys.stderr.flush()


def _fbp_options(geometry: _Geometry, algorithm: Optional[str], filter: str, cutoff: float,
                 displaced_detector: str, offset_transition: float,
                 threads: int) -> dict:
    if isinstance(threads, bool) or not isinstance(threads, _numbers.Integral):
        raise UsageError(f"threads: expected an integer (got {threads!r})")
    algo = algorithm if algorithm is not None else _core.default_algorithm(geometry)
    return dict(algorithm=algo, filter=filter, cutoff=float(cutoff),
                displaced_detector=str(displaced_detector),
                offset_transition=float(offset_transition), threads=int(threads), backend="cpu")


def fbp_apply(projections: Any, geometry: Any, grid: Any = None, *,
              algorithm: Optional[str] = None, filter: str = "ram-lak", cutoff: float = 1.0,
              displaced_detector: str = "auto", offset_transition: float = 16.0,
              threads: int = 0) -> np.ndarray:
    """FDK / FBP as a linear operator R: exactly :func:`reconstruct` with these options on the
    CPU (the same floats), for circular "cone" (``algorithm="fdk"``) and "parallel" ("fbp")
    geometries, flat or cylindrical detectors, and vector geometries with a circular orbit
    (resampled onto their circular equivalent's detectors, as reconstruct does; the adjoint
    includes the resampling's transpose). Helical scans are refused. Projections (views, rows, cols) to a float32 volume
    (nz, ny, nx) on ``grid`` (default :func:`default_grid`). See :func:`fbp_adjoint`."""
    g = _core_geometry(geometry)
    opts = _fbp_options(g, algorithm, filter, cutoff, displaced_detector, offset_transition,
                        threads)
    return _core.fbp_apply(_as_float32(projections, 3, "projections"), g, _grid(grid, g),
                           **opts)


def fbp_adjoint(volume: Any, geometry: Any, grid: Any = None, *,
                algorithm: Optional[str] = None, filter: str = "ram-lak", cutoff: float = 1.0,
                displaced_detector: str = "auto", offset_transition: float = 16.0,
                threads: int = 0) -> np.ndarray:
    """The exact adjoint R^T of :func:`fbp_apply` with the same options: a volume (nz, ny, nx)
    on ``grid`` (default: :func:`default_grid` with the volume's shape) to float32 projections
    (views, rows, cols), built as the transposed chain of FDK / FBP (splat of each voxel into
    the four pixels of its bilinear read with the back-projection's weight, the ramp filter,
    which is symmetric, the pre-weights, the crop of a displaced detector's padding), so that
    ``<fbp_apply(p), v> == <p, fbp_adjoint(v)>`` up to float rounding. CPU, deterministic."""
    v = _as_float32(volume, 3, "volume")
    g = _core_geometry(geometry)
    opts = _fbp_options(g, algorithm, filter, cutoff, displaced_detector, offset_transition,
                        threads)
    return _core.fbp_adjoint(v, g, _volume_grid(v, grid, g), **opts)


def reconstruct(projections: Any, geometry: Any, grid: Any = None, *,
                algorithm: Optional[str] = None, filter: str = "ram-lak", cutoff: float = 1.0,
                iterations: int = 50, relaxation: float = 1.0, nonnegative: bool = False,
                backend: str = "auto", device: int = 0, threads: int = 0,
                gpu_memory_limit: Any = None, memory_limit: Any = None,
                gpu_interpolation: str = "exact", reference: bool = False,
                progress: Union[None, bool, Callable[[float], None]] = None,
                out: str = "host", checkpoint_dir: Optional[PathLike] = None,
                unit_planes: int = 0, checkpoint_every: int = 0,
                checkpoint_seconds: float = 30.0, subsets: int = 10,
                tv_weight: Optional[float] = None, tv_iterations: int = 20,
                backprojector: str = "auto", tolerance: float = 0.0, initial: Any = None,
                return_log: bool = False, displaced_detector: str = "auto",
                offset_transition: float = 16.0, helical_q: float = 0.7) -> Any:
    """Reconstructs a volume (nz, ny, nx) on ``grid`` from line integrals (views, rows, cols):
    what ``ctforge recon`` does, with the same options (docs/cli.md).

    ``algorithm``: "fdk" (circular cone / fan beam), "fbp" (parallel beam), "helical-fbp"
    (helical cone beam, :meth:`Geometry.helical`; ``helical_q`` in [0, 1): the share of the
    detector's height where a ray weighs fully, docs/guide/helical.md), or an iterative
    method for any geometry: "sirt" (robust, slow), "os-sart" (SIRT per ordered subset of
    views: fast first iterations), "cgls" (least squares, fastest on consistent data),
    "fista-tv" (least squares plus total variation: sparse-view, limited-angle, noisy scans)
    or "osem" (Poisson likelihood: low-count data, non-negative; negative data and start
    values count as 0); default
    :func:`default_algorithm`. ``filter``: ram-lak, shepp-logan, cosine, hamming or hann, with
    ``cutoff`` in (0, 1] of Nyquist. ``displaced_detector`` (FDK / FBP): "auto" (displaced-
    detector weights when the detector reaches more than a pixel further to one side of the
    rotation axis than to the other), "on" or "off" (the 1/2 weights of a centred detector;
    truncates the ring beyond the narrow side, with a warning); ``offset_transition``: width
    in detector pixels (>= 1) of the ramps at the ends of the overlap, 1/2 between (clamped to
    the overlap's width: Wang's ramp across it). A displaced detector on a short scan (under
    360 deg) measures the lines beyond the overlap's radius only in part: it reconstructs and
    issues a UserWarning with that radius, the arc and the fraction of those lines measured.

    Iterative methods: ``iterations`` (OS-SART / OSEM: passes over all subsets);
    ``relaxation`` in (0, 2) (SIRT, OS-SART); ``nonnegative`` (SIRT, OS-SART, FISTA-TV);
    ``subsets`` (OS-SART, OSEM; >= 1, clamped to the view count); ``tv_weight`` (FISTA-TV,
    required, > 0, in units of the volume's values: typically 1e-4 to 1e-3 of the object's
    peak value) and ``tv_iterations`` (inner steps of the TV prox); ``backprojector``: "auto",
    "voxel" or "matched" (CGLS and FISTA-TV need matched); ``tolerance``: stop once the
    relative update falls below it (CGLS: the relative gradient), 0 = off; ``initial``: a
    warm-start volume (nz, ny, nx) on ``grid``. ``return_log=True`` returns ``(volume, log)``,
    ``log`` a list of dicts (iteration, residual = ``|Ax - p| / |p|``, objective, relative_update,
    seconds, stop_criterion = what ``tolerance`` compares), one per iteration. ``progress``:
    True for a bar on stderr, or a callable receiving the fraction done (called with the GIL,
    between batches). Ctrl-C raises
    KeyboardInterrupt after the batch in progress.

    ``projections`` may lie in GPU memory (any ``__dlpack__`` object on a CUDA device: CuPy,
    PyTorch, :class:`DeviceArray`) for FDK / FBP on the CUDA backend; ``out="device"`` returns
    the volume as a :class:`DeviceArray` in GPU memory (the volume must fit there whole).

    ``checkpoint_dir``: a resumable run (as ``ctforge recon --checkpoint-dir``): FDK / FBP slab
    by slab (``unit_planes`` z-planes per unit; default about 16 M voxels), the iterative
    methods with their state saved every ``checkpoint_every`` iterations and/or
    ``checkpoint_seconds``; after a
    crash, a killed kernel or Ctrl-C the same call skips what is recorded there (the same
    projections, geometry, grid and options; the directory refuses other ones) and returns the
    bit-identical result. The units are removed once it is returned. Options that do not apply
    to the method (given other than their defaults) raise UsageError naming them and the
    methods they apply to.

    Where and how it runs: ``backend`` "auto" (CUDA when a device is usable), "cpu" or "cuda";
    ``device`` (CUDA ordinal); ``threads`` (0: all cores); ``gpu_memory_limit`` and
    ``memory_limit`` (host): bytes, or a string such as "512M" or "8G" (None: no limit beyond
    the free GPU memory / this machine's memory). FDK / FBP check their estimate of the host
    memory they hold at their peak against ``memory_limit`` before allocating: a UsageError
    naming the sizes when it does not fit (as ``ctforge recon --memory-limit``);
    ``gpu_interpolation``: "exact" or "hardware" (texture unit: faster, ~1e-4 of the peak
    off)."""
    options = dict(locals())
    g = _core_geometry(geometry)
    vg = _grid(grid, g)
    algo = algorithm if algorithm is not None else _core.default_algorithm(g)
    callback = _ProgressBar() if progress is True else (progress or None)
    if callback is not None and not callable(callback):
        raise UsageError("progress: expected True, False, None or a callable(fraction)")
    if out not in ("host", "device"):
        raise UsageError(f"out: expected 'host' or 'device' (got {out!r})")
    where = _dlpack_device(projections)
    if where is not None and where[0] in _DLPACK_CUDA:
        data = _device_capsule(projections)
    else:
        data = _as_float32(projections, 3, "projections")
    if tv_weight is None:
        tv_weight = 0.0
    init = None
    if initial is not None:
        init = _as_float32(initial, 3, "initial")
    method = algo.lower().replace("_", "-")
    iterative = method not in ("fdk", "fbp", "helical-fbp")
    # Options given (other than their defaults) for a method they do not apply to: refused,
    # as the command line refuses them (the library's table decides).
    given = _given_options(reconstruct, options, {"tv_weight": 0.0})
    if method in _ALGORITHMS:  # an unknown name is refused below, naming the algorithm
        for name in given:
            _core.require_option_applies(name, method)
    for name, value in (("iterations", iterations), ("subsets", subsets),
                        ("tv_iterations", tv_iterations), ("threads", threads),
                        ("unit_planes", unit_planes), ("checkpoint_every", checkpoint_every)):
        if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
            raise UsageError(f"{name}: expected an integer (got {value!r})")
    for entry in _option_table():
        if entry["name"] in given and entry["needs"] and options.get(entry["needs"]) is None:
            raise UsageError(f"{entry['name']}: needs {entry['needs']}")
    if (method in ("fdk", "fbp") and str(displaced_detector).lower() == "off"
            and _core.detector_is_displaced(g)):
        import warnings
        warnings.warn("displaced_detector='off': this detector reaches further to one side of "
                      "the rotation axis than to the other; with the weights of a centred "
                      "detector the ring beyond the narrow side is reconstructed wrong "
                      "(truncation artefacts)", stacklevel=2)
    if method in ("fdk", "fbp"):
        # A displaced detector on a short scan: the ring beyond the overlap lacks data (empty
        # when there is nothing to say, or when the reconstruction refuses the input below).
        note = _core.displaced_short_scan_warning(g, algo, str(displaced_detector),
                                                  float(offset_transition))
        if note:
            import warnings
            warnings.warn(note, stacklevel=2)
    record = "{}"
    if checkpoint_dir is not None:
        if not isinstance(data, np.ndarray):
            raise UsageError("checkpoint_dir: projections in GPU memory are not supported")
        import hashlib
        digest = hashlib.blake2b(data.view(np.uint8), digest_size=16).hexdigest()
        fields = {
            "data": {"shape": list(data.shape), "blake2b": digest},
            "geometry": _json.loads(g.to_json()),
            "grid": {"shape": list(vg.shape), "spacing_mm": list(vg.spacing),
                     "origin_mm": list(vg.origin)},
            "algorithm": algo, "filter": filter, "cutoff": float(cutoff), "backend": backend,
            "displaced_detector": str(displaced_detector),
            "offset_transition": float(offset_transition),
            "gpu_interpolation": gpu_interpolation, "reference": bool(reference)}
        if method == "helical-fbp":  # recorded only there, so that older directories resume
            fields["helical_q"] = float(helical_q)
        record = _json.dumps(fields)
    return _core.reconstruct(
        data, g, vg, algorithm=algo, filter=filter, cutoff=float(cutoff),
        iterations=int(iterations), relaxation=float(relaxation), nonnegative=bool(nonnegative),
        memory_limit=_memory(memory_limit, "memory_limit"), reference=bool(reference),
        progress=callback, out_device=out == "device",
        checkpoint_dir=_os.fspath(checkpoint_dir) if checkpoint_dir is not None else "",
        unit_planes=int(unit_planes), checkpoint_every=int(checkpoint_every),
        checkpoint_seconds=float(checkpoint_seconds), run_record=record, subsets=int(subsets),
        tv_weight=float(tv_weight), tv_iterations=int(tv_iterations),
        backprojector=str(backprojector), tolerance=float(tolerance), initial=init,
        return_log=bool(return_log), displaced_detector=str(displaced_detector),
        offset_transition=float(offset_transition), helical_q=float(helical_q),
        **_context(backend, device, threads, gpu_memory_limit, gpu_interpolation))


def to_device(array: Any, device: int = 0) -> DeviceArray:
    """Copies a float32 array into the memory of CUDA device ``device`` (CUDA backend only):
    a :class:`DeviceArray` that ``reconstruct`` reads on the device, and CuPy / PyTorch take
    through DLPack. ``DeviceArray.to_numpy()`` copies it back."""
    a = np.ascontiguousarray(np.asarray(array), dtype=np.float32)
    return _core.to_device(a, int(device))


def estimate_center_of_rotation(projections: Any, geometry: Any) -> float:
    """Detector column (0-based, sub-pixel) the rotation axis projects onto, from the data
    (``ctforge recon --center-of-rotation auto``)."""
    return _core.estimate_center_of_rotation(_as_float32(projections, 3, "projections"),
                                             _core_geometry(geometry))


class CenterEstimate:
    """Result of :func:`find_center`: ``column`` (0-based detector column of the rotation axis),
    ``confidence`` (0 .. 1; below ``CenterEstimate.LOW``, check with :func:`center_montage`),
    ``method`` ("fourier": Vo's method; "registration": opposite views), ``registration_column``
    (the opposite-view registration's answer, for comparison), ``candidates`` / ``metric`` (the
    coarse search; lower metric is better). Unpacks as ``column, confidence = find_center(...)``."""

    LOW: float = 0.5  # ctforge::low_center_confidence

    __slots__ = ("column", "confidence", "method", "registration_column", "candidates", "metric")

    def __init__(self, column, confidence, method, registration_column, candidates, metric):
        self.column = float(column)
        self.confidence = float(confidence)
        self.method = str(method)
        self.registration_column = float(registration_column)
        self.candidates = np.asarray(candidates)
        self.metric = np.asarray(metric)

    def __iter__(self):
        return iter((self.column, self.confidence))

    def __repr__(self) -> str:
        return (f"CenterEstimate(column={self.column:.3f}, confidence={self.confidence:.3f}, "
                f"method={self.method!r}, registration_column={self.registration_column:.3f})")


def _center_input(projections_or_file: Any, geometry: Any, band_of: Callable, read: dict):
    """(projections, core geometry, first row read) from an array and a geometry, or from a
    file (only the rows band_of(rows) = (r0, r1) are read)."""
    if isinstance(projections_or_file, (str, bytes)) or hasattr(projections_or_file, "__fspath__"):
        g = read_projection_geometry(projections_or_file, geometry=geometry, **read)
        r0, r1 = band_of(_core_geometry(g).rows)
        p, g = read_projections(projections_or_file, geometry=geometry, band=(r0, r1), **read)
        return p, _core_geometry(g), r0
    if geometry is None:
        raise UsageError("geometry: required with a projection array")
    return _as_float32(projections_or_file, 3, "projections"), _core_geometry(geometry), 0


def find_center(projections_or_file: Any, geometry: Any = None, *, row: Optional[int] = None,
                min_column: Optional[float] = None, max_column: Optional[float] = None,
                wedge_ratio: float = 0.5, **read: Any) -> CenterEstimate:
    """Rotation-axis column with a confidence figure (``ctforge center``): Vo's Fourier-space
    method for parallel beams covering 180 deg or more (robust to objects wider than the field
    of view and to rings), the opposite-view registration otherwise (fan / cone beams). A
    parallel scan over 360 deg whose axis lies outside the middle half of the detector (a half
    acquisition) gets :func:`find_center_360`'s estimate over the whole width instead (method
    ``"half-acquisition"``).

    ``projections_or_file``: an array (views, rows, cols) with its ``geometry``, or a file any
    reader takes (``geometry`` then overrides the file's; further keywords go to
    :func:`read_projections`, e.g. ``flat=``, ``pixel_size=``). ``row``: the detector row
    searched (default: up to 4 rows spread over the detector; from a file, up to 32 middle
    rows are read). ``min_column`` / ``max_column``: the search range (default: the middle
    half of the detector). ``wedge_ratio``: Vo's double-wedge radius, a fraction of half the
    width."""
    def band(rows: int):
        if row is not None:
            return int(row), int(row) + 1
        mid, half = rows // 2, min(16, (rows + 1) // 2)
        return max(0, mid - half), min(rows, mid + half)
    p, g, r0 = _center_input(projections_or_file, geometry, band, read)
    r = -1 if row is None else int(row) - r0
    nan = float("nan")
    return CenterEstimate(*_core.find_center_of_rotation(
        p, g, r, nan if min_column is None else float(min_column),
        nan if max_column is None else float(max_column), float(wedge_ratio)))


def center_montage(projections_or_file: Any, columns: Any, geometry: Any = None, *,
                   row: Optional[int] = None, size: int = 0, threads: int = 0,
                   output: Optional[PathLike] = None, **read: Any) -> np.ndarray:
    """One reconstructed slice (FBP, or FDK for fan / cone beams) of detector ``row`` (default
    the middle row) per candidate axis column in ``columns`` (at most 200): float32 array
    (candidates, size, size) on a grid covering the field of view (``size`` 0: min(cols, 512)).
    ``output``: also write them as a labelled PNG montage (``ctforge center --range``). Input as
    for :func:`find_center`."""
    cols = [float(c) for c in np.atleast_1d(np.asarray(columns, dtype=np.float64))]
    is_file = isinstance(projections_or_file, (str, bytes)) or hasattr(projections_or_file,
                                                                        "__fspath__")
    reach = 0  # parallel beams: the row alone; fan / cone beams: the rows within 16 of it
    if is_file:
        g0 = read_projection_geometry(projections_or_file, geometry=geometry, **read)
        reach = 0 if _core_geometry(g0).beam == "parallel" else 16
    target = {}

    def band(rows: int):
        r = rows // 2 if row is None else int(row)
        if not 0 <= r < rows:
            raise UsageError(f"row: {r} is off the detector (rows 0 .. {rows - 1})")
        target["row"] = r
        return max(0, r - reach), min(rows, r + reach + 1)
    p, g, r0 = _center_input(projections_or_file, geometry, band, read)
    r = target["row"] - r0 if is_file else (g.rows // 2 if row is None else int(row))
    slices = _core.center_candidates(p, g, int(r), cols, int(size), int(threads))
    if output is not None:
        _core.write_center_montage(_os.fspath(output), slices, cols)
    return slices


def backend_for(backend: str = "auto", device: int = 0) -> Tuple[str, str]:
    """("cpu" or "cuda", reason for falling back to the CPU or "") for this machine."""
    return _core.resolve_backend(backend, int(device))


def last_gpu_call(kind: str = "reconstruction") -> str:
    """How this thread's last GPU call of ``kind`` ("reconstruction" or "forward_projection")
    ran: batches, slabs, device time per stage. Empty before the first."""
    return _core.describe_last_gpu_call(kind)


# ---- files -------------------------------------------------------------------------------

def _range(r: Any, what: str) -> Tuple[int, int]:
    if r is None:
        return (0, -1)
    if isinstance(r, slice):
        if r.step not in (None, 1):
            raise UsageError(f"{what}: only contiguous ranges (step 1) are supported")
        first = 0 if r.start is None else int(r.start)
        return (first, -1 if r.stop is None else int(r.stop) - first)
    first, count = r
    return (int(first), int(count))


def read_projections(path: PathLike, *, flat: Optional[PathLike] = None,
                     dark: Optional[PathLike] = None, geometry: Optional[PathLike] = None,
                     views: Any = None, rows: Any = None, cols: Any = None, bin_rows: int = 1,
                     bin_cols: int = 1, pixel_size: float = 1.0, mode: str = "auto",
                     min_transmission: float = 1e-4, transpose: bool = False,
                     flip_u: bool = False, flip_v: bool = False,
                     angles: Optional[PathLike] = None, angle_unit: str = "deg",
                     sinogram: bool = False, open_beam_cols: Any = None,
                     band: Optional[Tuple[int, int]] = None, return_info: bool = False,
                     data_path: Optional[str] = None, flat_path: Optional[str] = None,
                     dark_path: Optional[str] = None, angles_path: Optional[str] = None,
                     **steps: Any):
    """Projections from any file ``ctforge recon`` reads (ctforge HDF5, DataExchange, NXtomo,
    TIFF stacks, DICOM-CT-PD directories), as line integrals: ``(array (views, rows, cols), Geometry)``, plus a dict
    (format, warnings, clamped pixels) with ``return_info=True``.

    ``views`` / ``rows`` / ``cols``: a ``slice(first, stop)`` or ``(first, count)`` in the
    file's indexing; ``flat`` / ``dark`` replace the file's fields; ``geometry``: geometry JSON
    (required for TIFF stacks); ``mode``: "auto", "raw" or "line-integrals"; ``pixel_size``
    (mm) when the file does not record it; detector flips as --transpose/--flip-u/--flip-v.

    Also ``.npy`` (2D: a sinogram, 3D: views x rows x cols) and MATLAB ``.mat`` files (v5 and
    v7.3; 2D variables are sinograms), and a single 2D TIFF image as a sinogram (``sinogram=True``,
    automatic when ``angles`` has as many lines as the image rows); a sinogram reads as
    ``(views, 1, cols)``. ``angles``: an angle-list text file (one angle per line in
    ``angle_unit`` "deg" or "rad"; an optional second column of image keys, 0 projection,
    1 flat, 2 dark, 3 invalid, one line per stored frame) that builds a parallel-beam geometry
    instead of ``geometry``. ``open_beam_cols``: ``[(first, stop), ...]`` stored columns that see
    no object, normalising each view and row by their mean instead of a flat field.

    ``band=(r0, r1)``: only rows ``r0 .. r1 - 1`` of the result (after selection, binning and
    flips), read from the file alone (HDF5 hyperslabs, TIFF scan lines): the same values, bit
    for bit, as those rows of the whole read, with the geometry of that band of the detector.

    ``data_path`` / ``flat_path`` / ``dark_path`` / ``angles_path``: datasets of an HDF5 file
    (any layout; NXtomo entries are otherwise found by their definition wherever they are, and
    DataExchange files by /exchange), as ``--data-path`` ... on the command line.

    ``steps``: the cleaning steps, applied after normalisation with the names of
    :func:`preprocess_options` (the command line's ``--zingers``, ``--ring-size``, ...):
    ``zingers=0.3, zinger_size=3, zinger_views=1, rings="all", ring_size=21, ...``, and
    ``threads``. With ``band`` the rows of margin the steps need are read too, so a band equals
    those rows of the whole cleaned read bit for bit.

    ``s3://`` URLs: HDF5 files are read in place by ranged requests; other files and
    directories (a TIFF stack, Zarr projections: every object under the URL's prefix), and
    ``flat`` / ``dark`` / ``geometry`` / ``angles`` files, are downloaded into a temporary
    directory first."""
    with _ObjectInputs() as objects:
        path, flat, dark, geometry, angles = map(objects.local,
                                                 (path, flat, dark, geometry, angles))
        p, g, inf = _core.read_projections(
            _os.fspath(path), band=None if band is None else (int(band[0]), int(band[1])),
            **_read_args(flat, dark, geometry, views, rows, cols, bin_rows, bin_cols, pixel_size,
                         mode, min_transmission, transpose, flip_u, flip_v),
            **_input_args(angles, angle_unit, sinogram, open_beam_cols),
            **_dataset_args(data_path, flat_path, dark_path, angles_path),
            **{k: v for k, v in steps.items() if v is not None})
    return (p, Geometry(g), inf) if return_info else (p, Geometry(g))


class _ObjectInputs:
    """Local paths for ``s3://`` inputs that are not read in place (all but HDF5 files, which
    are read by ranged requests): each downloaded (the object, or every object under the URL's
    prefix: a TIFF stack, a Zarr array) into one temporary directory, removed when the block
    ends."""

    def __init__(self) -> None:
        self._dir: Any = None

    def __enter__(self) -> "_ObjectInputs":
        return self

    def local(self, path: Any) -> Any:
        try:
            p = _os.fspath(path)
        except TypeError:
            return path
        if not (isinstance(p, str) and p.lower().startswith("s3://")) or \
                p.lower().endswith(_HDF5_SUFFIXES):
            return path
        import tempfile
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="ctforge-objects-")
        d = _os.path.join(self._dir.name, str(len(_os.listdir(self._dir.name))))
        _os.mkdir(d)
        return _core.download_object(p, d)

    def __exit__(self, *exc: Any) -> None:
        if self._dir is not None:
            self._dir.cleanup()


def preprocess_options() -> List[dict]:
    """The cleaning steps' options that :func:`read_projections` and
    :func:`ctforge.distributed.reconstruct` take as keywords, as the command line's
    Preprocessing group lists them: dicts of name, flag, type, step (the option that turns the
    step on), methods (the ``rings`` methods it applies to; "" for all) and help."""
    return list(_core.preprocess_option_table())


def _dataset_args(data_path, flat_path, dark_path, angles_path) -> dict:
    return {"data_path": data_path or "", "flat_path": flat_path or "",
            "dark_path": dark_path or "", "angles_path": angles_path or ""}


def _read_args(flat, dark, geometry, views, rows, cols, bin_rows, bin_cols, pixel_size,
               mode, min_transmission, transpose, flip_u, flip_v) -> dict:
    return {"flat": _os.fspath(flat) if flat else "", "dark": _os.fspath(dark) if dark else "",
            "geometry": _os.fspath(geometry) if geometry else "",
            "views": _range(views, "views"), "rows": _range(rows, "rows"),
            "cols": _range(cols, "cols"), "bin_rows": int(bin_rows), "bin_cols": int(bin_cols),
            "pixel_size": float(pixel_size), "mode": mode,
            "min_transmission": float(min_transmission), "transpose": bool(transpose),
            "flip_u": bool(flip_u), "flip_v": bool(flip_v)}


def _input_args(angles, angle_unit, sinogram, open_beam_cols) -> dict:
    ranges = [] if open_beam_cols is None else [(int(a), int(b)) for a, b in open_beam_cols]
    return {"angles": _os.fspath(angles) if angles else "", "angle_unit": str(angle_unit),
            "sinogram": bool(sinogram), "open_beam_cols": ranges}


def read_projection_geometry(path: PathLike, *, flat: Optional[PathLike] = None,
                             dark: Optional[PathLike] = None, geometry: Optional[PathLike] = None,
                             views: Any = None, rows: Any = None, cols: Any = None,
                             bin_rows: int = 1, bin_cols: int = 1, pixel_size: float = 1.0,
                             mode: str = "auto", min_transmission: float = 1e-4,
                             transpose: bool = False, flip_u: bool = False,
                             flip_v: bool = False, angles: Optional[PathLike] = None,
                             angle_unit: str = "deg", sinogram: bool = False,
                             open_beam_cols: Any = None, data_path: Optional[str] = None,
                             flat_path: Optional[str] = None, dark_path: Optional[str] = None,
                             angles_path: Optional[str] = None, **steps: Any) -> "Geometry":
    """The geometry :func:`read_projections` returns with the same options, without reading the
    projections (one pixel is read): for planning work on files larger than memory. The
    cleaning steps' keywords (:func:`preprocess_options`) are accepted and checked by name:
    they change values, not the geometry."""
    with _ObjectInputs() as objects:
        path, flat, dark, geometry, angles = map(objects.local,
                                                 (path, flat, dark, geometry, angles))
        _, g, _ = _core.read_projections(
            _os.fspath(path), geometry_only=True,
            **_read_args(flat, dark, geometry, views, rows, cols, bin_rows, bin_cols, pixel_size,
                         mode, min_transmission, transpose, flip_u, flip_v),
            **_input_args(angles, angle_unit, sinogram, open_beam_cols),
            **_dataset_args(data_path, flat_path, dark_path, angles_path),
            **{k: v for k, v in steps.items() if v is not None})
    return Geometry(g)


# s3:// URLs that name one file of a format the library reads and writes
# (ctforge.zarr_volumes.FILE_SUFFIXES; other s3:// URLs are Zarr arrays, read and written in
# place by ctforge.zarr_volumes).
_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".nx", ".nxs")


def _object_file(path: Any, suffixes: Optional[Tuple[str, ...]] = None) -> bool:
    from . import zarr_volumes
    try:
        p = _os.fspath(path)
    except TypeError:
        return False
    return (isinstance(p, str) and p.lower().startswith("s3://")
            and p.lower().endswith(suffixes or zarr_volumes.FILE_SUFFIXES))


class _ObjectOutput:
    """A local path in a temporary directory for an output at an s3:// URL, stored there (with
    any data file written beside it, first) when the block ends without an exception; the
    directory is removed either way."""

    def __init__(self, url: str):
        self.url = url

    def __enter__(self) -> str:
        import tempfile
        self._dir = tempfile.TemporaryDirectory(prefix="ctforge-objects-")
        self.local = _os.path.join(self._dir.name, _core.object_name(self.url))
        return self.local

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is None:
                prefix = self.url[:len(self.url) - len(_core.object_name(self.url))]
                for name in sorted(_os.listdir(self._dir.name)):  # a header's data file first
                    if _os.path.join(self._dir.name, name) != self.local:
                        _core.upload_object(_os.path.join(self._dir.name, name), prefix + name)
                _core.upload_object(self.local, self.url)
        finally:
            self._dir.cleanup()


def _output_path(path: PathLike) -> Any:
    """A context giving the local path to write ``path`` to (itself, unless an s3:// URL)."""
    import contextlib
    p = _os.fspath(path)
    return _ObjectOutput(p) if _object_file(p) else contextlib.nullcontext(p)


def write_projections(path: PathLike, projections: Any, geometry: Any) -> None:
    """ctforge HDF5 projection file (/projections and /geometry), written atomically; at an
    ``s3://`` URL, written locally and then stored as one object."""
    p = _as_float32(projections, 3, "projections")
    with _output_path(path) as local:
        _core.write_projections(local, p, _core_geometry(geometry))


def read_volume(path: PathLike, *, mu_water: Optional[float] = None) -> Tuple[np.ndarray, VolumeGeometry]:
    """``(array (nz, ny, nx), VolumeGeometry)`` from HDF5, MetaImage, NRRD, NIfTI, a DICOM
    series (directory or file) or Zarr (a path ending in ``.zarr`` or an ``s3://`` URL:
    :func:`ctforge.zarr_volumes.read_zarr_volume`). DICOM values are HU unless ``mu_water``
    (1/mm) converts them to attenuation. A local ``.zarr`` is read by ctforge's own Zarr reader
    when zarr-python is not installed. An ``s3://`` URL ending in one of those files' extensions
    (``.h5``, ``.mha``, ``.nii.gz``, ...) is that file: HDF5 read in place by ranged requests,
    the others downloaded into a temporary directory first."""
    if _object_file(path):
        with _ObjectInputs() as objects:
            return _core.read_volume(_os.fspath(objects.local(path)), mu_water)
    if _zarr_in_python(path):
        from . import zarr_volumes
        return zarr_volumes.read_zarr_volume(path)
    return _core.read_volume(_os.fspath(path), mu_water)


def _zarr_in_python(path: Any) -> bool:
    """Whether ``path`` is Zarr for :mod:`ctforge.zarr_volumes` (zarr-python): every ``s3://``
    URL, and local arrays where zarr-python is installed (else the C++ library reads and writes
    them, in the same layout)."""
    from . import zarr_volumes
    if not zarr_volumes.is_zarr_url(path):
        return False
    if _os.fspath(path).lower().startswith("s3://"):
        return True
    import importlib.util
    return importlib.util.find_spec("zarr") is not None


def write_volume(path: PathLike, volume: Any, grid: Any = None, *, mu_water: float = 0.0192,
                 values_are_hu: bool = False, compress: bool = True,
                 series_description: str = "ctforge reconstruction") -> None:
    """Writes a volume, format from the path (.h5, .mha/.mhd, .nrrd/.nhdr, .nii/.nii.gz, a
    directory or .dcm for DICOM, .zarr or an ``s3://`` URL for Zarr v3:
    :mod:`ctforge.zarr_volumes`), atomically; spacing and origin from ``grid``. An ``s3://``
    URL ending in one of those files' extensions (``.h5``, ``.mha``, ``.nii.gz``, ...) is
    written locally in that format and then stored as one object (with a header's data file
    beside it)."""
    v = _as_float32(volume, 3, "volume")
    if _zarr_in_python(path):
        from . import zarr_volumes
        zarr_volumes.write_volume(path, v, _volume_grid(v, grid), compress=bool(compress))
        return
    with _output_path(path) as local:
        _core.write_volume(local, v, _volume_grid(v, grid), float(mu_water), bool(values_are_hu),
                           bool(compress), series_description)


def write_preview(path: PathLike, volume: Any, grid: Any = None, lo: float = 0.0,
                  hi: float = 0.0) -> None:
    """PNG of the three central slices (``ctforge recon --preview``); lo == hi: automatic window.
    An ``s3://`` URL is written locally and then stored as one object."""
    v = _as_float32(volume, 3, "volume")
    with _output_path(path) as local:
        _core.write_preview_png(local, v, _volume_grid(v, grid), float(lo), float(hi))


def info(path: PathLike) -> dict:
    """What a file holds: ``kind`` ("projections", "volume" or "geometry"), ``format`` and the
    ``description`` ``ctforge info`` prints."""
    p = _os.fspath(path)
    kind = _core.content_kind(p)
    out = {"path": p, "kind": kind}
    if kind == "projections":
        try:
            out["format"] = _core.projection_format(p)
        except Error:
            # An HDF5 file holding no scan ctforge recognises: the description lists its tree
            # (and --data-path / data_path= name the frames of a scan in any layout).
            out["format"] = "hdf5"
    elif kind == "volume":
        out["format"] = _core.volume_format(p)
    else:
        out["format"] = "geometry"
    out["description"] = _core.describe(p) if kind != "geometry" else ""
    return out


# ---- metrics -----------------------------------------------------------------------------

def compare(a: Any, b: Any, peak: Optional[float] = None) -> dict:
    """Image-quality figures of ``a`` against reference ``b`` (same shape), as ``ctforge
    compare``: ``mae``, ``rmse``, ``psnr`` (dB; peak = range of ``b`` unless given; None when
    ``b`` is constant), ``peak`` and ``correlation``."""
    x = np.ascontiguousarray(np.asarray(a), dtype=np.float32)
    y = np.ascontiguousarray(np.asarray(b), dtype=np.float32)
    return _core.compare(x, y, None if peak is None else float(peak))


def _projections_copy(array: Any, what: str) -> np.ndarray:
    """A float32 C-contiguous copy of a sinogram (views, cols) or projections (views, rows,
    cols): the cleaning steps change it in place and return it, the caller's array stays."""
    a = np.array(array, dtype=np.float32, order="C", copy=True)
    if a.ndim not in (2, 3):
        raise UsageError(f"{what}: expected a sinogram (views, cols) or projections "
                         f"(views, rows, cols), got {a.ndim} dimensions")
    return a


def remove_stripes(array: Any, *, method: str = "sorting", size: int = 21,
                   sigma: Optional[float] = None, la_size: int = 51, snr: float = 3.0,
                   drop_ratio: float = 0.1, norm: bool = True, level: int = 0,
                   wname: str = "db5", pad: bool = True, alpha: float = 1.5, nblock: int = 0,
                   threads: int = 0) -> np.ndarray:
    """Stripe (ring) removal on each detector row's sinogram: ``array`` is a sinogram (views,
    cols) or projections (views, rows, cols) of line integrals; returns a cleaned float32 copy.

    Vo et al. 2018's methods, parameters as the paper and algotom name them (results agree with
    algotom's): "sorting" (algorithm 3: full and partial stripes; median window ``size`` across
    columns), "filtering" (algorithm 2: sorting on the low-pass part along the views, Gaussian
    ``sigma``, default 3), "large" (algorithm 5: large stripes, window ``la_size``, detection
    ratio ``snr``, ``drop_ratio``, ``norm``), "dead" (algorithm 6: unresponsive columns
    interpolated, then "large"), "all" (dead, large, then sorting with ``size``: algotom's and
    tomopy's remove_all_stripe).

    "fourier_wavelet" or "fw" (Münch et al. 2009, tomopy's remove_stripe_fw): ``level`` wavelet
    levels (0: ceil(log2(max(views, cols)))), wavelet ``wname`` ("haar", "db1" ... "db10"),
    damping width ``sigma`` in Fourier samples along the views (default 2), views zero-padded
    by 1/8 when ``pad``. "titarenko" or "ti" (tomopy's remove_stripe_ti): damping factor
    ``alpha``, ``nblock`` blocks of views corrected apart (0: one). Both agree with tomopy's
    published outputs. The GIL is released."""
    a = _projections_copy(array, "remove_stripes")
    fw = method in ("fw", "fourier_wavelet")
    _core.remove_stripes(a, method=method, size=size,
                         sigma=3.0 if fw or sigma is None else sigma,
                         fw_sigma=sigma if fw and sigma is not None else 2.0,
                         la_size=la_size, snr=snr, drop_ratio=drop_ratio, norm=norm,
                         level=level, wname=wname, pad=pad, alpha=alpha, nblock=nblock,
                         threads=threads)
    return a


def remove_zingers(array: Any, *, threshold: float, size: int = 3, views: int = 1,
                   threads: int = 0, return_count: bool = False):
    """Zinger (outlier) removal: each value at least ``threshold`` above the median of its
    neighbourhood (``size`` x ``size`` pixels of its view times ``views`` neighbouring views,
    both odd; mirrored borders as scipy.ndimage's "reflect") is replaced by that median
    (tomopy's remove_outlier rule); every other value is returned bit-identical. ``array``:
    projections (views, rows, cols) or a sinogram (views, cols), raw counts or line integrals
    (``threshold`` in their units). Returns a float32 copy, and with ``return_count=True`` also
    the number of values replaced. A 2-D array is one image (a projection or a sinogram): its
    window is ``size`` x ``size`` and ``views`` must be 1. The GIL is released."""
    a = _projections_copy(array, "remove_zingers")
    if a.ndim == 2 and views != 1:
        raise UsageError("views: a 2-D array is one image; views must be 1")
    n = _core.remove_zingers(a, threshold=threshold, size=size, views=views, threads=threads)
    return (a, int(n)) if return_count else a


def _phase_keywords(energy_kev: float, distance_mm: float, pixel_size_mm: Any,
                    delta_beta: float, method: str) -> dict:
    """The options shared by retrieve_phase and phase_row_margin; ``pixel_size_mm`` is one
    pitch or (along the columns u, along the rows v)."""
    kw = dict(method=method, energy_kev=float(energy_kev), distance_mm=float(distance_mm),
              delta_beta=float(delta_beta))
    if np.ndim(pixel_size_mm) == 0:
        kw["pixel_size_mm"] = float(pixel_size_mm)
    else:
        u, v = (float(x) for x in pixel_size_mm)
        kw.update(pixel_u_mm=u, pixel_v_mm=v)
    return kw


def retrieve_phase(array: Any, *, energy_kev: float, distance_mm: float, pixel_size_mm: Any,
                   delta_beta: float, method: str = "paganin", padding: Any = None,
                   threads: int = 0) -> np.ndarray:
    """Single-material phase retrieval for propagation-based phase contrast, on each view of
    ``array`` (views, rows, cols) or one image (rows, cols) of line integrals -ln(I / I0).
    ``method``: "paganin" (Paganin et al., J. Microsc. 206, 33 (2002): the transmission's
    spectrum times ``1 / (1 + pi lambda R (delta/beta) |f|^2)``, f in cycles per mm) or
    "generalized" (Paganin et al. 2020: ``|2 pi f|^2`` replaced per axis by
    ``2 (1 - cos(2 pi f W)) / W^2``). ``energy_kev`` (lambda = h c / E), ``distance_mm`` (sample to detector),
    ``pixel_size_mm`` (one pitch or (u, v)), ``delta_beta`` (> 0). ``padding``: rows and
    columns added each side with the edge values before the FFT (an int, (rows, cols), or None
    for the filter's own margin). Returns a float32 copy of -ln of the filtered transmission:
    mu * thickness (mu = 4 pi beta / lambda), which reconstructs to mu. The GIL is released."""
    a = _projections_copy(array, "retrieve_phase")
    if padding is None:
        pad_rows = pad_cols = -1
    elif np.ndim(padding) == 0:
        pad_rows = pad_cols = int(padding)
    else:
        pad_rows, pad_cols = (int(x) for x in padding)
    _core.retrieve_phase(a, pad_rows=pad_rows, pad_cols=pad_cols, threads=threads,
                         **_phase_keywords(energy_kev, distance_mm, pixel_size_mm, delta_beta,
                                           method))
    return a


def phase_row_margin(*, energy_kev: float, distance_mm: float, pixel_size_mm: Any,
                     delta_beta: float, method: str = "paganin", tolerance: float = 1e-5) -> int:
    """Extra detector rows each side of a band of rows so that retrieve_phase on the widened
    band (clipped to the detector) gives the band's rows within ``tolerance`` times the largest
    transmission of the whole-view result (in transmission; in -ln units divided by the
    filtered transmission). From the filter's decay length sqrt(c) / (2 pi) rows, c = pi lambda
    R (delta/beta) / pitch_v^2."""
    return int(_core.phase_row_margin(
        tolerance=float(tolerance),
        **_phase_keywords(energy_kev, distance_mm, pixel_size_mm, delta_beta, method)))


def correct_beam_hardening(array: Any, coefficients: Sequence[float], *,
                           threads: int = 0) -> np.ndarray:
    """Beam-hardening correction: every line integral p of ``array`` (projections (views, rows,
    cols), a sinogram or one image) becomes ``sum_k coefficients[k] * p**k`` (coefficients in
    increasing order of power, RTK's water precorrection convention: usually c0 = 0, c1 near
    1), evaluated in double, returned as a float32 copy. ``[0, 1]`` returns the values
    bit-identical. The coefficients come from :func:`fit_linearisation` (spectrum and material)
    or :func:`fit_water_precorrection` (a calibration scan). UsageError naming
    ``coefficients`` for an empty list or a non-finite coefficient; Error naming view, row and
    column when a result does not fit a float. The GIL is released."""
    a = _projections_copy(array, "correct_beam_hardening")
    c = [float(x) for x in np.asarray(coefficients, dtype=np.float64).ravel()]
    _core.correct_beam_hardening(a, c, int(threads))
    return a


def fit_linearisation(weights: Sequence[float], mu_per_mm: Sequence[float], *,
                      max_thickness_mm: float, degree: int = 3,
                      samples: int = 256) -> List[float]:
    """Coefficients c0..c_degree (c0 = 0) for :func:`correct_beam_hardening` that linearise one
    material: for thicknesses t_i = i max_thickness_mm / samples (i = 1..samples) the
    polychromatic line integral P(t) = -ln(sum w exp(-mu t) / sum w) is mapped, by the least-
    squares polynomial, to mu_ref t, mu_ref = sum w mu / sum w the spectrum-weighted mean
    attenuation (P's slope at t = 0, so c1 is near 1). ``weights``: the detected signal per
    energy bin (fluence times detector response), >= 0; ``mu_per_mm``: the material's linear
    attenuation at each bin's energy in 1/mm (NIST's mu/rho in cm^2/g times the density in
    g/cm^3, divided by 10); ``max_thickness_mm``: the longest path through the material (mm);
    ``degree`` in [1, 10]."""
    return _core.fit_linearisation([float(x) for x in weights], [float(x) for x in mu_per_mm],
                                   degree=degree, max_thickness_mm=float(max_thickness_mm),
                                   samples=samples)


def fit_water_precorrection(projections: Any, geometry: Any, grid: Any = None, *,
                            degree: int = 3, threshold: float = 0.5, margin: int = 2,
                            algorithm: Optional[str] = None, filter: str = "ram-lak",
                            cutoff: float = 1.0, displaced_detector: str = "auto",
                            offset_transition: float = 16.0, backend: str = "auto",
                            device: int = 0, threads: int = 0, gpu_memory_limit: Any = None,
                            memory_limit: Any = None,
                            gpu_interpolation: str = "exact") -> List[float]:
    """Empirical cupping correction (Kachelriess et al., Med. Phys. 33, 1269 (2006)) from a
    calibration scan of a homogeneous object (line integrals (views, rows, cols)): returns
    coefficients c0..c_degree (c0 = 0) for :func:`correct_beam_hardening`. The basis images
    f_k = reconstruct(p**k), k = 1..degree, are reconstructed on ``grid`` (as
    :func:`reconstruct` takes it) with FDK / FBP and the given reconstruction options; the
    object is f_1 above ``threshold`` times its maximum, eroded by ``margin`` voxels (x, y),
    the air the voxels farther than ``margin`` from it; the least-squares combination of the
    f_k is fitted to 1 inside and 0 in the air, then scaled so that the corrected mean inside
    equals the uncorrected one. The GIL is released."""
    g = _core_geometry(geometry)
    vg = _grid(grid, g)
    data = _as_float32(projections, 3, "projections")
    algo = algorithm if algorithm is not None else _core.default_algorithm(g)
    return _core.fit_water_precorrection(
        data, g, vg, degree=degree, threshold=float(threshold), margin=margin, algorithm=algo,
        filter=filter, cutoff=float(cutoff), displaced_detector=str(displaced_detector),
        offset_transition=float(offset_transition),
        memory_limit=_memory(memory_limit, "memory_limit"),
        **_context(backend, device, threads, gpu_memory_limit, gpu_interpolation))
# ---- 360-degree scans with an offset axis -------------------------------------------------------

__all__ += ["stitch_360", "find_center_360", "Center360"]


def _scan_360(array: Any, what: str) -> Tuple[np.ndarray, bool]:
    """(float32 C-contiguous (views, rows, cols) array, whether the input was a 2-D sinogram)."""
    a = np.ascontiguousarray(np.asarray(array), dtype=np.float32)
    if a.ndim == 2:
        return a[:, None, :], True
    if a.ndim != 3:
        raise UsageError(f"{what}: expected a sinogram (views, cols) or projections "
                         f"(views, rows, cols), got {a.ndim} dimensions")
    return a, False


def stitch_360(array: Any, *, center: float, blend: Optional[float] = None,
               angles: Any = None, threads: int = 0) -> np.ndarray:
    """A 360-degree parallel-beam scan with the rotation axis near one detector edge (half
    acquisition) as a 180-degree scan of about twice the width: view v (angle t) and view
    v + views/2 (t + 180 deg, mirrored about the axis) joined at the axis, with a linear blend
    of ``blend`` pixels (default: the whole overlap, 2 x the axis's distance to the near edge)
    centred on it. ``array``: a sinogram (views, cols) or projections (views, rows, cols), line
    integrals; ``center``: the axis's detector column (0-based, sub-pixel; see
    :func:`find_center_360`); ``angles`` (radians, one per view, optional): checked for the
    pairing, and needed for an odd view count (a last view at 360 deg, dropped). Returns
    (views/2, [rows,] W) float32 with the axis on the middle column (W - 1) / 2: reconstruct it
    with ``Geometry.parallel(W, rows, pixel_size, angles[:views // 2])`` (no offset). The GIL is
    released."""
    a, sino = _scan_360(array, "stitch_360")
    out = _core.stitch_360(a, center=float(center),
                           blend=float("inf") if blend is None else float(blend),
                           angles=None if angles is None else [float(x) for x in np.ravel(angles)],
                           threads=int(threads))
    return out[:, 0, :] if sino else out


class Center360:
    """Result of :func:`find_center_360`: ``column`` (0-based detector column of the rotation
    axis), ``side`` ("left": the axis near column 0; "right": near the last column),
    ``overlap`` (columns both half-turns see: 2 x the axis's distance to the near edge + 1),
    ``confidence`` (0 .. 1), ``candidates`` / ``metric`` (the coarse search; lower is better).
    Unpacks as ``column, side, confidence = find_center_360(...)``."""

    __slots__ = ("column", "side", "overlap", "confidence", "candidates", "metric")

    def __init__(self, column, side, overlap, confidence, candidates, metric):
        self.column = float(column)
        self.side = str(side)
        self.overlap = float(overlap)
        self.confidence = float(confidence)
        self.candidates = np.asarray(candidates)
        self.metric = np.asarray(metric)

    def __iter__(self):
        return iter((self.column, self.side, self.confidence))

    def __repr__(self) -> str:
        return (f"Center360(column={self.column:.3f}, side={self.side!r}, "
                f"overlap={self.overlap:.3f}, confidence={self.confidence:.3f})")


def find_center_360(array: Any, *, row: Optional[int] = None, min_overlap: int = 16,
                    threads: int = 0) -> Center360:
    """Rotation axis of a 360-degree offset-axis scan (a sinogram (views, cols) or projections
    (views, rows, cols); view v paired with v + views // 2): the column where the second
    half-turn's views, mirrored about it, correlate best with the first half's over the columns
    both cover (at least ``min_overlap``); coarse search at half-pixel steps, then a parabola.
    ``row``: the detector row compared (default: up to 4 rows spread over the detector)."""
    a, _ = _scan_360(array, "find_center_360")
    return Center360(*_core.find_center_360(a, row=-1 if row is None else int(row),
                                            min_overlap=int(min_overlap), threads=int(threads)))

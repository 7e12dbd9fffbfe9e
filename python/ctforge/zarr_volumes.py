"""Zarr v3 volumes, in a local directory (``path.zarr``) or in object storage
(``s3://bucket/key.zarr``), written by many processes at once.

A volume is one float32 array of shape ``(nz, ny, nx)`` (axes ``z:y:x``) cut into **shards of
whole z-planes**: ``(planes_per_unit, ny, nx)``, one shard per slab unit of a run. Each shard is
one object (one file, one S3 key), so processes that each write their own units never write the
same object and need no coordinator nor locks; a write of a shard replaces it whole (a rename
locally, one PUT on S3), so a killed writer leaves either the old or the new shard, and a retry
of its unit simply writes it again. Inside a shard every plane is a chunk of its own, compressed
with Blosc (zstd, byte shuffle): planes read one at a time, and the zeros outside the field of
view cost almost nothing.

The protocol::

    create_zarr_volume(url, grid, planes_per_unit)    # once: metadata, ctforge_complete false
    write_zarr_planes(url, k0, planes)                # any process, any order, k0 on a shard
    finish_zarr_volume(url)                           # once, after all: checks every shard is
                                                      # there, then sets ctforge_complete true
    read_zarr_volume(url)                             # refuses a volume not finished

Attributes (like ctforge's HDF5 volumes): ``spacing_mm`` and ``origin_mm`` in x, y, z order
(origin: centre of voxel (0, 0, 0)), ``axes`` ``"z:y:x"``, ``creator`` ``"ctforge <version>"``
and ``ctforge_complete``, set to true last: on S3, where nothing can be renamed, it is the
commit. ``ctforge.write_volume`` / ``ctforge.read_volume`` use this module for paths ending in
``.zarr`` and for ``s3://`` URLs.

S3: the endpoint and credentials come from the usual environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` or
``AWS_DEFAULT_REGION``; also ``~/.aws`` profiles and instance roles) through s3fs;
``storage_options`` (s3fs.S3FileSystem's keywords, e.g. ``endpoint_url``, ``key``, ``secret``,
``anon``) overrides them. Needs ``pip install 'ctforge[zarr]'`` (zarr>=3 and s3fs).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import os
import shutil
import socket
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

import ctforge

__all__ = ["create_zarr_volume", "resume_zarr_volume", "write_zarr_planes", "read_zarr_planes",
           "finish_zarr_volume", "read_zarr_volume", "zarr_units", "is_zarr_url",
           "staged_volume"]

UrlLike = Union[str, "os.PathLike[str]"]

_COMPLETE = "ctforge_complete"
_INCOMPLETE = "incomplete: written by a run that did not finish (ctforge_complete is not true)"


# ---- URLs and stores -------------------------------------------------------------------------

def _url(url: UrlLike) -> str:
    u = os.fspath(url)
    if not isinstance(u, str) or not u:
        raise ctforge.UsageError(f"zarr volume: expected a path or an s3:// URL, got {url!r}")
    return u


def _is_s3(u: str) -> bool:
    return u.lower().startswith("s3://")


# The extensions of the files ctforge reads and writes: an s3:// URL ending in one names such a
# file (one object), not a Zarr array.
FILE_SUFFIXES = (".h5", ".hdf5", ".hdf", ".nx", ".nxs", ".mha", ".mhd", ".nrrd", ".nhdr",
                 ".nii", ".nii.gz", ".dcm", ".png")


def is_zarr_url(url: Any) -> bool:
    """True for what this module reads and writes: an ``s3://`` URL that does not end in
    another format's file extension (FILE_SUFFIXES), a path ending in ``.zarr`` or inside one
    (an array in a group: ``scan.zarr/recon``), or a directory holding Zarr metadata."""
    try:
        u = os.fspath(url)
    except TypeError:
        return False
    if not isinstance(u, str):
        return False
    if _is_s3(u) and u.lower().endswith(FILE_SUFFIXES):
        return False
    if _is_s3(u) or any(p.lower().endswith(".zarr") for p in u.replace("\\", "/").split("/")):
        return True
    return os.path.isdir(u) and _is_zarr_dir(u)


def _zarr():
    """zarr, imported on first use (``import ctforge`` does not need it)."""
    try:
        import zarr
    except ImportError as e:
        raise ImportError("ctforge: .zarr volumes need zarr>=3: pip install ctforge[zarr] "
                          "(zarr and s3fs)") from e
    if int(zarr.__version__.split(".")[0]) < 3:
        raise ImportError(f"ctforge: .zarr volumes need zarr>=3 (zarr {zarr.__version__} is "
                          "installed): pip install ctforge[zarr]")
    return zarr


def _store(u: str, storage_options: Optional[Dict[str, Any]]) -> Tuple[Any, Optional[dict]]:
    """(what zarr opens, its storage_options) for a local path or an s3:// URL."""
    if "://" in u and not _is_s3(u):
        raise ctforge.UsageError(f"{u}: only local paths and s3:// URLs are supported")
    if not _is_s3(u):
        if storage_options:
            raise ctforge.UsageError(f"{u}: storage_options apply to s3:// URLs only")
        return u, None
    try:
        import s3fs  # noqa: F401
    except ImportError as e:
        raise ImportError("ctforge: s3:// volumes need s3fs: pip install ctforge[zarr] "
                          "(zarr and s3fs)") from e
    opts = dict(storage_options or {})
    # botocore reads AWS_ENDPOINT_URL itself in recent versions; passed on for older ones.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in opts:
        opts["endpoint_url"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and "region_name" not in opts.get("client_kwargs", {}):
        opts["client_kwargs"] = dict(opts.get("client_kwargs", {}), region_name=region)
    return u, opts


def _open(u: str, mode: str, storage_options: Optional[dict]):
    zarr = _zarr()
    target, opts = _store(u, storage_options)
    try:
        # Every shard is stored, zeros included: zarr leaves out chunks equal to the fill value
        # by default, and a unit of empty planes (outside the object) would then never appear,
        # so finish_zarr_volume would take it for a unit never written.
        with zarr.config.set({"array.write_empty_chunks": mode != "r"}):
            return zarr.open_array(target, mode=mode, storage_options=opts)
    except FileNotFoundError as e:
        raise ctforge.Error(f"{u}: no Zarr array there ({e})") from e
    except Exception as e:
        if type(e).__name__ in ("ArrayNotFoundError", "NodeTypeValidationError",
                                "ContainsGroupError", "GroupNotFoundError"):
            raise ctforge.Error(f"{u}: no Zarr array there (a group, or nothing: give the "
                                f"array's own path) ({e})") from e
        raise


def _planes(k0: int, k1: int) -> str:
    return f"plane {k0}" if k1 - k0 == 1 else f"planes {k0}..{k1 - 1}"


def zarr_units(nz: int, planes_per_unit: int) -> List[Tuple[int, int]]:
    """The shards' plane ranges ``[(k0, k1), ...]``: ``planes_per_unit`` planes each, the last
    one shorter when ``nz`` is not a multiple. The units writers may write apart."""
    if nz < 1 or planes_per_unit < 1:
        raise ctforge.UsageError(f"zarr units: nz ({nz}) and planes_per_unit "
                                 f"({planes_per_unit}) must be positive")
    return [(k, min(k + planes_per_unit, nz)) for k in range(0, nz, planes_per_unit)]


def _check_finite(u: str, k0: int, planes: np.ndarray) -> None:
    bad = ~np.isfinite(planes)
    if bad.any():
        z, y, x = (int(i) for i in np.argwhere(bad)[0])
        raise ctforge.UsageError(
            f"{u}: {int(bad.sum())} non-finite value(s) in {_planes(k0, k0 + planes.shape[0])}, "
            f"the first {planes[z, y, x]} at voxel (z, y, x) = ({k0 + z}, {y}, {x}); not written")


# ---- the protocol ----------------------------------------------------------------------------

def create_zarr_volume(url: UrlLike, grid: ctforge.VolumeGeometry, planes_per_unit: int, *,
                       storage_options: Optional[Dict[str, Any]] = None,
                       compress: bool = True, run: Optional[str] = None) -> List[Tuple[int, int]]:
    """Creates the array of ``grid`` at ``url`` (replacing whatever array or group was there):
    float32, shape ``(nz, ny, nx)``, shards of ``planes_per_unit`` whole planes (chunks of one
    plane inside), the attributes of the module docstring with ``ctforge_complete`` false. No
    data is written. Returns the units :func:`write_zarr_planes` takes (:func:`zarr_units`).
    ``compress``: Blosc zstd with byte shuffle, else no codec. ``run``: the fingerprint of the
    run writing it, kept as ``ctforge_run`` (:func:`resume_zarr_volume`)."""
    u = _url(url)
    if not isinstance(grid, ctforge.VolumeGeometry):
        raise ctforge.UsageError(f"{u}: grid: expected a ctforge.VolumeGeometry, got "
                                 f"{type(grid).__name__}")
    nz, ny, nx = grid.shape
    p = int(planes_per_unit)
    if p != planes_per_unit or p < 1:
        raise ctforge.UsageError(f"{u}: planes_per_unit must be a positive integer (got "
                                 f"{planes_per_unit})")
    p = min(p, nz)
    zarr = _zarr()
    target, opts = _store(u, storage_options)
    if compress:
        from zarr.codecs import BloscCodec
        compressors: Any = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=4)
    else:
        compressors = None
    attributes = {
        "spacing_mm": [float(s) for s in grid.spacing],
        "origin_mm": [float(o) for o in grid.origin],
        "axes": "z:y:x",
        "creator": f"ctforge {ctforge.__version__}",
        _COMPLETE: False,
    }
    if run is not None:
        attributes["ctforge_run"] = str(run)
    zarr.create_array(target, shape=(nz, ny, nx), shards=(p, ny, nx), chunks=(1, ny, nx),
                      dtype="float32", fill_value=0.0, compressors=compressors,
                      zarr_format=3, dimension_names=("z", "y", "x"), attributes=attributes,
                      overwrite=True, storage_options=opts)
    return zarr_units(nz, p)


def resume_zarr_volume(url: UrlLike, grid: ctforge.VolumeGeometry, planes_per_unit: int,
                       run: str, *, storage_options: Optional[Dict[str, Any]] = None
                       ) -> Tuple[List[Tuple[int, int]], bool]:
    """The unfinished array of run ``run`` at ``url``, kept with the shards it holds (a run
    started again after its client died), or a new one (:func:`create_zarr_volume`). Returns
    (units, whether it was kept)."""
    u = _url(url)
    try:
        arr = _open(u, "r", storage_options)
        nz, ny, nx = grid.shape
        p = min(int(planes_per_unit), nz)
        keep = (arr.attrs.get("ctforge_run") == run and not arr.attrs.get(_COMPLETE) and
                tuple(arr.shape) == (nz, ny, nx) and tuple(arr.shards or ()) == (p, ny, nx))
    except ctforge.Error:
        keep = False
    if keep:
        return zarr_units(grid.shape[0], min(int(planes_per_unit), grid.shape[0])), True
    return create_zarr_volume(u, grid, planes_per_unit, storage_options=storage_options,
                              run=run), False


def read_zarr_planes(url: UrlLike, k0: int, k1: int, *,
                     storage_options: Optional[Dict[str, Any]] = None) -> np.ndarray:
    """Planes [k0, k1) of the array as they are stored now, finished or not (what a unit
    wrote; zeros where nothing was)."""
    arr = _open(_url(url), "r", storage_options)
    return np.ascontiguousarray(arr[int(k0):int(k1)], dtype=np.float32)


def write_zarr_planes(url: UrlLike, k0: int, planes: Any, *,
                      storage_options: Optional[Dict[str, Any]] = None) -> None:
    """Writes ``planes`` (``(n, ny, nx)``, or one plane ``(ny, nx)``) as planes
    ``[k0, k0 + n)`` of the array :func:`create_zarr_volume` made. ``k0`` must start a shard
    and ``n`` cover whole shards (the last, shorter shard included): two writers in one shard
    would each replace the whole shard and one of them would lose its planes, so anything else
    is refused (UsageError), as are non-finite values (naming the first voxel). Safe to run in
    many processes at once for different shards, and to repeat (a retried unit)."""
    u = _url(url)
    a = np.asarray(planes)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3 or a.dtype.kind not in "fiub":
        raise ctforge.UsageError(f"{u}: planes: expected real numbers of shape (n, ny, nx), got "
                                 f"{a.dtype} of shape {a.shape}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    arr = _open(u, "r+", storage_options)
    nz, ny, nx = arr.shape
    k0 = int(k0)
    n = a.shape[0]
    if a.shape[1:] != (ny, nx) or n == 0:
        raise ctforge.UsageError(f"{u}: planes of shape {a.shape} do not fit the volume's "
                                 f"planes ({ny}, {nx})")
    if k0 < 0 or k0 + n > nz:
        raise ctforge.UsageError(f"{u}: {_planes(k0, k0 + n)} are outside the volume's "
                                 f"planes 0..{nz - 1}")
    shard = (arr.shards or arr.chunks)[0]
    k1 = k0 + n
    if k0 % shard or (k1 % shard and k1 != nz):
        raise ctforge.UsageError(
            f"{u}: {_planes(k0, k1)} do not cover whole shards of {shard} planes (a write must "
            f"start at a multiple of {shard} and end at one or at the volume's end, {nz}): "
            "two writers in one shard would lose planes")
    _check_finite(u, k0, a)
    arr[k0:k1] = a


def _missing_shards(arr) -> List[Tuple[int, int]]:
    """The plane ranges of the shards that have no object (listing the array's keys once)."""
    from zarr.core.sync import sync

    nz = arr.shape[0]
    shard = (arr.shards or arr.chunks)[0]
    store, prefix = arr.store_path.store, arr.store_path.path

    async def keys():
        return {k async for k in store.list_prefix(prefix)}

    have = sync(keys())
    base = prefix.rstrip("/") + "/" if prefix else ""
    missing = []
    for i, (k0, k1) in enumerate(zarr_units(nz, shard)):
        if base + arr.metadata.encode_chunk_key((i, 0, 0)) not in have:
            missing.append((k0, k1))
    return missing


def finish_zarr_volume(url: UrlLike, *,
                       storage_options: Optional[Dict[str, Any]] = None) -> None:
    """Checks that every shard was written (one listing of the array's keys), then sets
    ``ctforge_complete`` true: the volume's commit. Missing shards: ctforge.Error naming their
    planes, and the volume stays incomplete."""
    u = _url(url)
    arr = _open(u, "r+", storage_options)
    missing = _missing_shards(arr)
    if missing:
        shown = ", ".join(_planes(a, b) for a, b in missing[:8])
        more = f" and {len(missing) - 8} more shards" if len(missing) > 8 else ""
        raise ctforge.Error(f"{u}: {len(missing)} shard(s) never written: {shown}{more}; "
                            "the volume stays incomplete")
    arr.update_attributes({_COMPLETE: True})


def _triplet(u: str, attrs: dict, name: str, default):
    if name not in attrs:
        return default
    v = attrs[name]
    try:
        t = tuple(float(x) for x in v)
    except (TypeError, ValueError):
        t = ()
    if len(t) != 3 or not all(math.isfinite(x) for x in t):
        raise ctforge.Error(f"{u}: attribute {name} must be three finite numbers (x, y, z), "
                            f"got {v!r}")
    return t


def read_zarr_volume(url: UrlLike, *, storage_options: Optional[Dict[str, Any]] = None
                     ) -> Tuple[np.ndarray, ctforge.VolumeGeometry]:
    """``(array (nz, ny, nx) float32, VolumeGeometry)``. A ctforge volume whose
    ``ctforge_complete`` is not true is refused (ctforge.Error: incomplete, written by a run that
    did not finish). Arrays written by other tools (Zarr v3 or v2, any real dtype, converted to
    float32) are read too: without ``spacing_mm`` the spacing is 1 mm, without ``origin_mm`` the
    grid is centred on (0, 0, 0) (origin = -(n - 1) / 2 * spacing per axis), as
    ``ctforge.VolumeGeometry(nz, ny, nx, spacing)`` and the HDF5 reader do. Non-finite values
    are refused, naming the first voxel."""
    u = _url(url)
    arr = _open(u, "r", storage_options)
    attrs = dict(arr.attrs)
    if _COMPLETE in attrs and attrs[_COMPLETE] is not True:
        raise ctforge.Error(f"{u}: {_INCOMPLETE}")
    if arr.ndim != 3:
        raise ctforge.Error(f"{u}: a volume has 3 dimensions [z][y][x], this array has "
                            f"{arr.ndim} (shape {arr.shape})")
    if np.dtype(arr.dtype).kind not in "fiub":
        raise ctforge.Error(f"{u}: expected real numbers, the array holds {arr.dtype}")
    nz, ny, nx = (int(n) for n in arr.shape)
    spacing = _triplet(u, attrs, "spacing_mm", (1.0, 1.0, 1.0))
    if not all(s > 0 for s in spacing):
        raise ctforge.Error(f"{u}: attribute spacing_mm must be positive, got {spacing}")
    origin = _triplet(u, attrs, "origin_mm", None)
    grid = (ctforge.VolumeGeometry(nz, ny, nx, spacing) if origin is None
            else ctforge.VolumeGeometry(nz, ny, nx, spacing, origin))
    v = np.ascontiguousarray(arr[...], dtype=np.float32)
    bad = ~np.isfinite(v)
    if bad.any():
        z, y, x = (int(i) for i in np.argwhere(bad)[0])
        raise ctforge.Error(f"{u}: {int(bad.sum())} non-finite value(s), the first {v[z, y, x]} "
                            f"at voxel (z, y, x) = ({z}, {y}, {x})")
    return v, grid


# ---- ctforge.write_volume: the whole volume at once --------------------------------------------

def _host_tag() -> str:
    """The host's name, with the pid namespace (as the C++ writers' temporaries: containers
    sharing a host name number their processes apart)."""
    name = "".join(c for c in socket.gethostname() if c.isalnum() or c in "-_.")[:64] or "host"
    try:
        name += f"_{os.stat('/proc/self/ns/pid').st_ino:x}"
    except OSError:
        pass
    return name


def _exchange(a: str, b: str) -> bool:
    """Swaps two directory entries in one step (Linux renameat2 RENAME_EXCHANGE); False where
    the system or file system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _is_zarr_dir(path: str) -> bool:
    return any(os.path.exists(os.path.join(path, n)) for n in ("zarr.json", ".zarray", ".zgroup"))


def write_volume(url: UrlLike, volume: np.ndarray, grid: ctforge.VolumeGeometry, *,
                 compress: bool = True, planes_per_shard: Optional[int] = None,
                 storage_options: Optional[Dict[str, Any]] = None) -> None:
    """The whole volume: create, write, finish. A local path is written into a temporary
    sibling ``.<name>.<host>-<pid>.part.zarr`` and then put in place (exchanged with an earlier
    array there, which is removed afterwards): an interrupted write leaves no partial output and
    never destroys an earlier one. On S3 the ``ctforge_complete`` attribute is the commit.
    ``planes_per_shard`` defaults to about 64 MiB of planes per shard."""
    u = _url(url)
    volume = np.ascontiguousarray(volume, dtype=np.float32)
    if volume.ndim != 3 or tuple(volume.shape) != tuple(grid.shape):
        raise ctforge.UsageError(f"{u}: volume of shape {volume.shape} does not match the grid's "
                                 f"{tuple(grid.shape)}")
    nz, ny, nx = volume.shape
    p = planes_per_shard or max(1, min(nz, (64 << 20) // max(1, 4 * ny * nx)))
    _check_finite(u, 0, volume)

    with staged_volume(u) as target:
        create_zarr_volume(target, grid, p, storage_options=storage_options, compress=compress)
        _open(target, "r+", storage_options)[...] = volume  # one writer: all shards at once
        finish_zarr_volume(target, storage_options=storage_options)


def _remove_orphans(parent: str, stem: str) -> None:
    """Temporaries ``.<stem>.<host>-<pid>.part.zarr`` that killed writers of this host and pid
    namespace left (SIGKILL: no handler ran), their process being gone. Another host's are left
    alone whatever their age: a distributed run's array is staged there for the whole run."""
    head, tail = f".{stem}.{_host_tag()}-", ".part.zarr"
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for n in names:
        pid = n[len(head):-len(tail)]
        if not (n.startswith(head) and n.endswith(tail) and pid.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, n), ignore_errors=True)
        except OSError:
            pass


@contextlib.contextmanager
def staged_volume(url: UrlLike) -> Iterator[str]:
    """Where to build the volume ``url`` names: for a local path a temporary sibling
    ``.<name>.<host>-<pid>.part.zarr``, put in place when the block ends without an exception
    (exchanged with an earlier array there, which is then removed) and removed otherwise; an
    ``s3://`` URL itself (nothing can be renamed there: ``finish_zarr_volume`` is the commit).
    An existing file or directory that is not a Zarr array or group is refused (UsageError)."""
    u = _url(url)
    if _is_s3(u):
        yield u
        return
    final = os.path.abspath(u.rstrip("/") or u)
    parent, name = os.path.split(final)
    stem = name[:-len(".zarr")] if name.lower().endswith(".zarr") else name
    if os.path.lexists(final) and not (os.path.isdir(final) and _is_zarr_dir(final)):
        raise ctforge.UsageError(f"{u}: exists and is not a Zarr array or group; not replaced")
    _remove_orphans(parent, stem)
    tmp = os.path.join(parent, f".{stem}.{_host_tag()}-{os.getpid()}.part.zarr")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        yield tmp
        if not os.path.lexists(final):
            os.rename(tmp, final)
        elif _exchange(tmp, final):
            shutil.rmtree(tmp)  # now the earlier array
        else:  # two renames: in between the earlier array waits under a hidden name
            old = os.path.join(parent, f".{stem}.{_host_tag()}-{os.getpid()}.old.zarr")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

"""ctforge.distributed: one reconstruction or simulation over the workers of a Dask cluster.

Any ``dask.distributed.Client`` will do: a ``LocalCluster`` on one machine, dask-jobqueue on a
batch system, dask-kubernetes, or a scheduler started by hand (``dask scheduler`` and one
``dask worker tcp://HOST:8786 --nworkers 1 --nthreads 1`` per GPU, each with its own
``CUDA_VISIBLE_DEVICES``). Inputs, the checkpoint directory and the output must lie on a file
system that the client and every worker see under the same path (NFS, Lustre, EFS, Filestore,
a FUSE mount of an object store with POSIX renames).

* :func:`reconstruct` with FDK / FBP cuts the grid into slabs of z-planes (work units). Each
  unit is one task: the worker reads only the detector rows its slab projects onto from the
  input file, reconstructs the slab and records it in the checkpoint directory atomically
  (data, then a marker with its range, the run's fingerprint, the version and a checksum), and
  then writes its planes into a ``.h5`` or Zarr output itself (other formats are assembled by
  the client). A worker that dies (a reclaimed spot
  instance) has its units run again elsewhere by Dask; a client that dies is simply started
  again with the same arguments, and only the units missing from the directory are computed.
  The volume is bit-identical to ``ctforge.reconstruct(..., checkpoint_dir=..., unit_planes=N)``
  in one process, and to the units of ``ctforge recon --checkpoint-dir`` / ``--memory-limit``.
* :func:`reconstruct` with an iterative method (SIRT, OS-SART, CGLS, FISTA-TV, OSEM) runs the
  library's method (``ctforge::reconstruct_partitioned``) with the views partitioned over the
  workers: each worker keeps its views and its share of the method's projection-sized
  vectors, and runs the projector pair and the steps on them; the parts' back-projections are
  summed on the workers, so the client sends and receives one volume per projection whatever
  the worker count. Equal to the one-process method within 1e-5 of the peak; the state is
  saved every ``checkpoint_every`` iterations in the library's format, and a lost worker or a
  killed client resumes from it.
* :func:`simulate` projects a phantom in units of views, one task each, recorded the same way.

The command line front end is ``python -m ctforge.distributed recon|simulate ...`` (also
installed as ``ctforge-distributed``), with ``--scheduler tcp://HOST:PORT`` or ``--local N``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import ctforge
from . import _core, zarr_volumes

__all__ = ["reconstruct", "simulate", "main"]

PathLike = ctforge.PathLike

# Options of ctforge.read_projections that a distributed run passes through to its workers.
_CLEANING = tuple(e["name"] for e in ctforge.preprocess_options())
_READ_OPTIONS = ("flat", "dark", "geometry", "views", "rows", "cols", "bin_rows", "bin_cols",
                 "pixel_size", "mode", "min_transmission", "transpose", "flip_u", "flip_v",
                 "angles", "angle_unit", "sinogram", "open_beam_cols") + _CLEANING


def _dask():
    try:
        import distributed
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ctforge.UsageError(
            "ctforge.distributed needs Dask: pip install 'ctforge[distributed]' (dask and "
            "distributed)") from e
    return distributed


# ---- files on the shared file system -------------------------------------------------------

def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot flush a directory
    finally:
        os.close(fd)


def _write_atomically(path: str, data: bytes) -> None:
    """``data`` under a unique temporary name beside ``path``, flushed, then renamed over it."""
    d, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(d, f".{name}.{socket.gethostname()}-{os.getpid()}.part")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)


def _checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _record_array(dir: str, stem: str, array: np.ndarray, marker: dict) -> None:
    """``stem.f32`` (the floats) and then ``stem.json`` (marker + checksum), each atomically."""
    data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
    _write_atomically(os.path.join(dir, stem + ".f32"), data)
    marker = dict(marker, ctforge=ctforge.__version__, checksum=_checksum(data))
    _write_atomically(os.path.join(dir, stem + ".json"), json.dumps(marker).encode())


def _read_recorded(dir: str, stem: str, run: str, count: int) -> Tuple[Optional[dict], Any]:
    """(marker, floats) of a recorded array of run ``run``, or (None, reason)."""
    try:
        with open(os.path.join(dir, stem + ".json"), "rb") as f:
            marker = json.loads(f.read())
    except (OSError, ValueError):
        return None, "no marker"
    if not isinstance(marker, dict) or marker.get("run") != run:
        return None, "marker of another run"
    try:
        with open(os.path.join(dir, stem + ".f32"), "rb") as f:
            data = f.read()
    except OSError:
        return None, "data file missing"
    if len(data) != 4 * count:
        return None, "data file of the wrong size"
    if marker.get("checksum") != _checksum(data):
        return None, "checksum mismatch (corrupted data)"
    return marker, np.frombuffer(data, dtype=np.float32).copy()


def _open_run(dir: str, record: dict) -> str:
    """Creates ``dir`` and checks (or writes) its run.json; returns the run's fingerprint."""
    os.makedirs(dir, exist_ok=True)
    text = json.dumps(record, sort_keys=True)
    path = os.path.join(dir, "run.json")
    try:
        with open(path, encoding="utf-8") as f:
            there = json.load(f)
    except (OSError, ValueError):
        there = None
    if there is not None:
        _require_same_run(dir, there, record)
    else:
        _write_atomically(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _require_same_run(dir: str, there: Any, record: dict) -> None:
    """UsageError naming the keys that differ when ``dir`` holds another run's record."""
    if there == json.loads(json.dumps(record, sort_keys=True)):
        return
    diff = "; ".join(f"{k} ({json.dumps(there.get(k))} there, {json.dumps(v)} here)"
                     for k, v in record.items() if there.get(k) != v) or "the run record differs"
    raise ctforge.UsageError(f"checkpoint_dir {dir}: holds units of another run: {diff}. Use "
                             "another directory, or empty this one to start over")


def _remove_run(dir: str, prefixes: Sequence[str], remove_dir: bool) -> None:
    """The run's files, and the temporaries of writers killed while recording (a lost worker)."""
    for name in os.listdir(dir):
        partial = name.startswith(tuple("." + p for p in prefixes)) and ".part" in name
        if partial or name == "run.json" or (name.startswith(tuple(prefixes))
                                             and name.endswith((".f32", ".json"))):
            try:
                os.unlink(os.path.join(dir, name))
            except OSError:
                pass
    if remove_dir:
        shutil.rmtree(dir, ignore_errors=True)


def _file_identity(path: Optional[PathLike]) -> Any:
    if not path:
        return None
    if "://" in os.fspath(path):
        return os.fspath(path)
    p = os.path.abspath(os.fspath(path))
    try:
        st = os.stat(p)
    except OSError:
        return p
    return [p, st.st_size, st.st_mtime_ns]


def _default_dir(output: str, kind: str) -> str:
    d, name = os.path.split(os.path.abspath(output))
    return os.path.join(d, f".{name}.{kind}")


def _checkpoint_dir(checkpoint_dir: Optional[PathLike], output: str) -> str:
    """The units' directory: ``checkpoint_dir``, or ``.<output>.units/`` beside a local output
    (an ``s3://`` output has no side: the directory must be given)."""
    if checkpoint_dir:
        text = os.fspath(checkpoint_dir)
        return text.rstrip("/") if text.startswith("s3://") else os.path.abspath(text)
    if "://" in output:
        raise ctforge.UsageError(f"checkpoint_dir: needed for the output {output} (a directory "
                                 "every worker and the client share, where the units are "
                                 "recorded)")
    return _default_dir(output, "units")


# ---- what a worker does --------------------------------------------------------------------

def _where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _device(options: dict) -> str:
    """What a task computes on: "cpu" or "cuda:<ordinal>" (the backend option resolved)."""
    try:
        where, _ = _core.resolve_backend(options.get("backend", "auto"),
                                         int(options.get("device", 0)))
    except ctforge.Error:
        return options.get("backend", "auto")
    return f"cuda:{int(options.get('device', 0))}" if where == "cuda" else where


def _grid(spec: dict) -> ctforge.VolumeGeometry:
    nz, ny, nx = spec["shape"]
    return ctforge.VolumeGeometry(nz, ny, nx, spec["spacing"], spec["origin"])


def _unit_band(input: str, read: dict, views: int, r0: int, r1: int, v0: int,
               v1: int) -> np.ndarray:
    """Rows r0..r1 - 1 of views v0..v1 - 1 of what read_projections(input, **read) reads. With
    cleaning steps every view's rows are read and cleaned (steps such as ring removal need them
    all), then the unit's views kept."""
    if (v0, v1) == (0, views) or any(read.get(k) is not None for k in _CLEANING):
        band, _ = ctforge.read_projections(input, band=(r0, r1), **read)
        return band[v0:v1]
    first, _ = ctforge._range(read.get("views"), "views")
    band, _ = ctforge.read_projections(input, band=(r0, r1),
                                       **dict(read, views=(first + v0, v1 - v0)))
    return band


def _slab_unit_task(spec: dict, unit: int) -> dict:
    """One FDK / FBP unit: reads its rows of the input, reconstructs and records its slab
    (nothing when a complete record is there already: a task run again after its worker died
    just after recording)."""
    t0 = time.perf_counter()
    g = ctforge.Geometry.from_json(spec["geometry"])
    run = _core.SlabRun(g._g, _grid(spec["grid"]), spec["dir"], spec["planes"], spec["record"])
    done, _ = run.is_recorded(unit)
    k0, k1, r0, r1, v0, v1 = run.units[unit]
    bytes_read = bytes_written = 0
    if not done:
        band = _unit_band(spec["input"], spec["read"], g.view_count, r0, r1, v0, v1)
        bytes_read = int(band.nbytes)
        o = spec["options"]
        run.compute_unit(unit, band, **o)
        bytes_written = 4 * (k1 - k0) * int(np.prod(spec["grid"]["shape"][1:]))
    result = {"unit": unit, "computed": not done, "seconds": time.perf_counter() - t0,
              "worker": _where(), "device": _device(spec["options"]),
              "bytes_read": bytes_read, "bytes_written": bytes_written}
    zarr, part = spec.get("zarr"), spec.get("part")
    if zarr is not None or part is not None:
        # The worker writes its planes into the output itself (read back from its record, so
        # that what is written is what checks out): only this small dict goes to the client.
        grid = _grid(spec["grid"])
        planes = run.read_unit(unit, grid)
        if zarr is not None:
            zarr_volumes.write_zarr_planes(zarr, k0, planes)
        else:
            _core.write_volume_part(part["file"], part["offset"], grid, k0, planes)
        result["written"] = [k0, k1]
        result["bytes_written"] += int(planes.nbytes)
    return result


# Per worker process: the parts of a partitioned iterative run that it holds (its views'
# projections and its share of every projection-sized vector of the method), by (session,
# part). A session is one attempt of a run: a part lost with its worker is loaded again by the
# next attempt, which resumes from the state saved in the checkpoint directory.
_VIEW_PARTS: Dict[Tuple[str, int], Any] = {}


# Per worker process: the last step each part held there has run, by (session, part). Steps
# change the part's buffers, so a step must never run twice: Dask recomputes a result lost with
# a worker by running the steps it came from again, and those are refused (PartLost), which
# ends the attempt (the next resumes from the saved state).
_STEPS_DONE: Dict[Tuple[str, int], int] = {}


class PartLost(ctforge.Error):
    """A worker holding a part of a partitioned run left (or was restarted): the run resumes
    from its saved state on the workers there are."""


def _part_load(spec: dict, k: int, after: Any = None) -> dict:
    """Reads part k's views (with the cleaning steps, as each unit does) into a
    ``_core.ViewPart`` that this worker keeps for the session."""
    t0 = time.perf_counter()
    g = ctforge.Geometry.from_json(spec["geometry"])
    a, b = spec["parts"][k]
    p = np.ascontiguousarray(_unit_band(spec["input"], spec["read"], g.view_count, 0, g.rows, a,
                                        b), dtype=np.float32)
    o = spec["options"]
    planes = spec.get("planes")
    part = _core.ViewPart(g._g, _grid(spec["grid"]), a, b, p, spec["subsets"],
                          backend=o["backend"], device=o["device"], threads=o["threads"],
                          planes=tuple(planes[k]) if planes else None)
    for old in [key for key in _VIEW_PARTS if key[0] != spec["session"]]:
        del _VIEW_PARTS[old]  # parts of earlier sessions
    for old in [key for key in _STEPS_DONE if key[0] != spec["session"]]:
        del _STEPS_DONE[old]
    _VIEW_PARTS[(spec["session"], k)] = part
    return {"part": k, "views": [a, b], "worker": _where(), "device": _device(o),
            "bytes_read": int(p.nbytes),
            "seconds": time.perf_counter() - t0}


def _drop_parts(session: str) -> int:
    """(On every worker, client.run) frees the parts of ``session``; returns how many."""
    keys = [key for key in _VIEW_PARTS if key[0] == session]
    for key in keys:
        del _VIEW_PARTS[key]
    for key in [key for key in _STEPS_DONE if key[0] == session]:
        del _STEPS_DONE[key]
    return len(keys)


def _step_once(fn, spec: dict, k: int, seq: int, *args: Any) -> Any:
    """Step number ``seq`` of part k: fn(spec, k, *args), unless the part has run it already
    (a recomputation after a worker left: PartLost)."""
    key = (spec["session"], k)
    done = _STEPS_DONE.get(key, -1)
    if seq <= done:
        a, b = spec["parts"][k]
        raise PartLost(f"a worker left: a result it held was being recomputed from step {seq} "
                       f"of views {a}..{b - 1}, which have run step {done} since")
    _STEPS_DONE[key] = seq
    return fn(spec, k, *args)


def _part(spec: dict, k: int):
    part = _VIEW_PARTS.get((spec["session"], k))
    if part is None:
        a, b = spec["parts"][k]
        raise PartLost(f"views {a}..{b - 1}: not held by worker {_where()} (restarted?)")
    return part


def _part_step(spec: dict, k: int, name: str, args: tuple, after: Any = None) -> Any:
    """Step ``name`` of part k (``after``: the part's previous step, so that they run in
    order)."""
    part = _part(spec, k)
    if name == "back":
        return part.back(*args, _grid(spec["grid"]))
    return getattr(part, name)(*args)


def _part_forward(spec: dict, k: int, x: np.ndarray, id: int, subset: int,
                  after: Any = None) -> None:
    _part(spec, k).forward(x, id, subset)


def _part_upload(spec: dict, k: int, share: np.ndarray, id: int, after: Any = None) -> None:
    _part(spec, k).upload(share, id)


def _part_forward_slabs(spec: dict, k: int, slabs: List[np.ndarray], id: int, subset: int,
                        after: Any = None) -> None:
    """Forward projection by part k of a volume the parts hold: its slabs, gathered here."""
    _part(spec, k).forward(np.concatenate(slabs), id, subset)


def _part_tv_prox(spec: dict, k: int, slabs: List[np.ndarray], weight: float, iterations: int,
                  nonnegative: bool, after: Any = None) -> np.ndarray:
    """tv_prox of a volume the parts hold, on part k (its slabs gathered here)."""
    return _part(spec, k).tv_prox(np.concatenate(slabs), weight, iterations, nonnegative)


def _part_total_variation(spec: dict, k: int, slabs: List[np.ndarray],
                          after: Any = None) -> float:
    return float(_part(spec, k).total_variation(np.concatenate(slabs)))


def _part_write_result(spec: dict, k: int, x: int, part: dict, after: Any = None) -> int:
    """Part k writes its planes of the result (volume buffer x) into the output: at their
    offset of the ``.h5`` file the client reserved (``part["file"]``, write_volume_part), or as
    their shards of the Zarr array it created (``part["zarr"]``); both refuse non-finite values.
    Returns the bytes written."""
    z0, z1 = spec["planes"][k]
    if z1 <= z0:
        return 0
    grid = _grid(spec["grid"])
    planes = _part(spec, k).download(x).reshape(z1 - z0, grid.shape[1], grid.shape[2])
    if "zarr" in part:
        zarr_volumes.write_zarr_planes(part["zarr"], z0, planes)
    else:
        _core.write_volume_part(part["file"], part["offset"], grid, z0, planes)
    return int(planes.nbytes)


class _ZarrResult:
    """A Zarr output the parts of an iterative run write (a local ``.zarr`` under a temporary
    name, or ``s3://``): one shard per plane, so that each part writes whole shards of its own.
    commit() completes the array (and puts a local one in place); close() before that abandons
    it (a local temporary is removed; an ``s3://`` array stays incomplete, which readers
    refuse)."""

    def __init__(self, url: str, grid):
        self._stage = zarr_volumes.staged_volume(url)
        self.target = self._stage.__enter__()
        self._open = True
        try:
            zarr_volumes.create_zarr_volume(self.target, grid, 1)
        except BaseException:
            self.close()
            raise

    def commit(self) -> None:
        zarr_volumes.finish_zarr_volume(self.target)
        self._open = False
        self._stage.__exit__(None, None, None)

    def close(self) -> None:
        if self._open:
            self._open = False
            e = ctforge.Error("abandoned")
            self._stage.__exit__(type(e), e, None)


def _planes(volume: np.ndarray, a: int, b: int) -> np.ndarray:
    """Values [a, b) of a flattened volume: one part's planes (a copy, so that the whole
    volume can be freed)."""
    return np.array(volume.reshape(-1)[a:b], dtype=np.float32)


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One step of the pairwise sum of the parts' back-projections (float32, as the library's
    pairwise_sum)."""
    return a + b


def _view_subset(g: ctforge.Geometry, a: int, b: int) -> ctforge.Geometry:
    """Views a .. b-1 of ``g`` (circular geometries stay circular)."""
    def part(values):
        v = list(values)
        return v[a:b] if len(v) == g.view_count else v
    if g.type == "cone":
        return ctforge.Geometry.cone(g.cols, g.rows, g.pixel_size, g.sid, g.sdd, g.angles[a:b],
                                     part(g.offset_u), part(g.offset_v))
    if g.type == "parallel":
        return ctforge.Geometry.parallel(g.cols, g.rows, g.pixel_size, g.angles[a:b],
                                         part(g.offset_u), part(g.offset_v))
    maker = ctforge.Geometry.cone_vec if g.beam == "cone" else ctforge.Geometry.parallel_vec
    return maker(g.cols, g.rows, g.views[a:b])


def _phantom(spec: Any) -> ctforge.Phantom:
    if isinstance(spec, dict) and "shepp_logan" in spec:
        return ctforge.shepp_logan(spec["shepp_logan"])
    return ctforge.phantom(spec)


def _views_unit_task(spec: dict, a: int, b: int) -> dict:
    """Views a .. b-1 of a simulation: exact line integrals, recorded as views_<a>_<b>."""
    t0 = time.perf_counter()
    stem = f"views_{a:06d}_{b:06d}"
    g = ctforge.Geometry.from_json(spec["geometry"])
    count = (b - a) * g.rows * g.cols
    marker, _ = _read_recorded(spec["dir"], stem, spec["run"], count)
    if marker is None:
        p = ctforge.project_analytic(_phantom(spec["phantom"]), _view_subset(g, a, b),
                                     threads=spec["threads"])
        _record_array(spec["dir"], stem, p, {"views": [a, b], "run": spec["run"]})
    return {"unit": stem, "computed": marker is None, "seconds": time.perf_counter() - t0,
            "worker": _where()}


# ---- the client ----------------------------------------------------------------------------

def _gather(client, futures: List[Any], progress: Optional[Callable[[float], None]],
            what: str) -> List[dict]:
    """Results of ``futures`` as they complete; a failed unit names itself and its worker."""
    distributed = _dask()
    results = []
    total = max(1, len(futures))
    try:
        for future in distributed.as_completed(futures):
            try:
                results.append(dict(future.result(), key=future.key))
            except distributed.KilledWorker as e:
                raise ctforge.Error(
                    f"{what}: task {future.key} killed {e.args[1] if len(e.args) > 1 else 'workers'} "
                    "repeatedly (out of memory, or a crash); what is complete is kept: run the "
                    "same call again") from e
            if progress:
                progress(len(results) / total)
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    try:  # how often each task was under way on a worker that died (run again elsewhere)
        retries = client.run_on_scheduler(_suspicious_counts, [f.key for f in futures])
    except Exception:  # an older or remote scheduler without the counts: not reported
        retries = {}
    for r in results:
        r["retries"] = retries.get(str(r.pop("key")))
    return results


def _suspicious_counts(keys, dask_scheduler=None) -> dict:
    """(On the scheduler) each task's count of workers that died while running it."""
    out = {}
    for k in keys:
        ts = dask_scheduler.tasks.get(k)
        if ts is not None:
            out[str(k)] = int(getattr(ts, "suspicious", 0))
    return out


def _report_path(output: str) -> str:
    """The run report's name: ``<output>.report.json`` beside the output (in the same bucket for
    an ``s3://`` output)."""
    output = output.rstrip("/")
    return (output if "://" in output else os.path.abspath(output)) + ".report.json"


def _write_report(output: str, report: dict) -> str:
    """The run report (JSON) beside the output, written atomically: a local file under a
    temporary name, flushed and renamed; on S3 one PUT (an object appears whole)."""
    path = _report_path(output)
    data = (json.dumps(report, indent=1, default=str) + "\n").encode()
    if "://" in path:
        _object_fs(path).pipe_file(path, data)
    else:
        _write_atomically(path, data)
    return path


def _unit_report(units: Sequence[Sequence[int]], results: List[dict]) -> List[dict]:
    """One entry per unit, in z order: its planes, whether it was computed or reused, where and
    on what, how long, how often it was run again after its worker died, the bytes read and
    written."""
    by_unit = {r["unit"]: r for r in results}
    out = []
    for i, (k0, k1, r0, r1, v0, v1) in enumerate(units):
        r = by_unit.get(i, {})
        out.append({"unit": i, "planes": [k0, k1], "rows": [r0, r1], "views": [v0, v1],
                    "computed": r.get("computed"), "worker": r.get("worker"),
                    "device": r.get("device"), "seconds": r.get("seconds"),
                    "retries": r.get("retries"), "bytes_read": r.get("bytes_read"),
                    "bytes_written": r.get("bytes_written")})
    return out


def _totals(entries: List[dict]) -> dict:
    workers: Dict[str, dict] = {}
    for e in entries:
        if e.get("worker"):
            w = workers.setdefault(e["worker"], {"units": 0, "seconds": 0.0, "device": e["device"]})
            w["units"] += 1
            w["seconds"] += e.get("seconds") or 0.0
    return {"bytes_read": sum(e.get("bytes_read") or 0 for e in entries),
            "bytes_written": sum(e.get("bytes_written") or 0 for e in entries),
            "retries": sum(e.get("retries") or 0 for e in entries),
            "workers": workers}


def _summary(kind: str, output: str, units: int, results: List[dict], t0: float,
             **extra: Any) -> dict:
    computed = [r for r in results if r["computed"]]
    out = {"output": output if "://" in output else os.path.abspath(output), "kind": kind,
           "units": units,
           # What the tasks sent the client (pickled results): metadata only when the workers
           # write the output.
           "bytes_to_client": sum(len(pickle.dumps(r)) for r in results),
           "computed": len(computed), "reused": units - len(computed),
           "workers": sorted({r["worker"] for r in computed}),
           "unit_seconds": sum(r["seconds"] for r in computed),
           "seconds": time.perf_counter() - t0}
    out.update(extra)
    return out


def reconstruct(client: Any, input: PathLike, output: PathLike, *,
                checkpoint_dir: Optional[PathLike] = None, unit_planes: int = 0,
                grid: Any = None, shape: Optional[Sequence[int]] = None, spacing: Any = None,
                origin: Any = None, algorithm: Optional[str] = None, filter: str = "ram-lak",
                cutoff: float = 1.0, iterations: int = 50, relaxation: float = 1.0,
                nonnegative: bool = False, subsets: int = 10,
                tv_weight: Optional[float] = None, tv_iterations: int = 20,
                backprojector: str = "auto", tolerance: float = 0.0,
                parts: Optional[int] = None,
                checkpoint_every: int = 5, center_of_rotation: Any = None,
                backend: str = "auto", device: int = 0, threads: int = 0,
                gpu_interpolation: str = "exact", keep_units: bool = False,
                report: bool = True,
                progress: Optional[Callable[[float], None]] = None,
                displaced_detector: str = "auto", offset_transition: float = 16.0,
                helical_q: float = 0.7, **read: Any) -> dict:
    """Reconstructs projection file ``input`` into volume file ``output`` on the workers of
    Dask ``client``; returns a summary (units, how many were computed and reused, the workers,
    seconds).

    ``input``: any file :func:`ctforge.read_projections` reads, with its keyword options
    (``flat=``, ``dark=``, ``geometry=``, ``bin_rows=``, ``flip_v=``, ...) and its cleaning
    steps (``zingers=``, ``rings=``, ...: :func:`ctforge.preprocess_options`), which each unit
    applies to its band of rows with the margin they need. The grid is
    ``grid`` (a :class:`ctforge.VolumeGeometry`) or ``default_grid(geometry, shape, spacing,
    origin)``; ``algorithm``, ``filter``, ``cutoff``, ``iterations``, ``relaxation``,
    ``nonnegative``, ``backend``, ``threads``, ``displaced_detector``, ``offset_transition``,
    ``helical_q`` as in :func:`ctforge.reconstruct` (helical scans: "helical-fbp" by default,
    each unit reading every row of every view);
    ``center_of_rotation``: a detector column or "auto" (estimated from 32 central rows).

    ``checkpoint_dir`` (shared by all workers; default ``.<output>.units/`` beside the output)
    records the units; ``unit_planes`` z-planes per FDK / FBP unit (0: about 16 M voxels).
    Iterative methods (``subsets``, ``tv_weight``, ``tv_iterations``, ``backprojector``,
    ``tolerance`` as in :func:`ctforge.reconstruct`): ``parts`` view partitions (default: one
    per worker), the state saved every ``checkpoint_every`` iterations (into ``checkpoint_dir``,
    which may be an ``s3://`` prefix: each saved slot is copied there, and a client started
    again anywhere resumes from it). The units are removed once the output is written, unless
    ``keep_units``. FDK / FBP ``.h5`` outputs are written by the workers, each unit's planes at
    their offset of the file the client reserved under a temporary name (which must be on the
    file system the workers share, like ``checkpoint_dir``); the client renames it once every
    unit checks out, and no volume data passes through it. Zarr outputs (a local ``.zarr``
    directory, or ``s3://bucket/key.zarr`` with the endpoint and credentials from the ``AWS_*``
    environment variables) get one shard per unit, each written by its worker, and
    ``ctforge_complete`` set last (:mod:`ctforge.zarr_volumes`). Other formats, and the
    iterative methods' volume, are written by the client.

    ``report``: once the output is in place, a run report ``<output>.report.json`` is written
    beside it (atomically): every unit (or view part) with the worker and device that computed
    it, its seconds, how often it ran again after its worker died, the bytes it read and wrote,
    and the totals per worker (its path is the summary's ``report``)."""
    arguments = dict(locals())
    t0 = time.perf_counter()
    _dask()
    input = os.fspath(input)
    if "://" not in input:  # (s3://bucket/key.h5: each unit reads its rows by ranged GETs)
        input = os.path.abspath(input)
    output = os.fspath(output)
    unknown = set(read) - set(_READ_OPTIONS)
    if unknown:
        raise ctforge.UsageError(f"reconstruct: unknown option(s) {', '.join(sorted(unknown))}")
    streamed = _local_h5(output)  # (an s3:// file: the client writes and stores it)
    zarr = zarr_volumes.is_zarr_url(output)  # (what ctforge.write_volume writes as Zarr)
    g = ctforge.read_projection_geometry(input, **read)
    if isinstance(center_of_rotation, str) and center_of_rotation == "auto":
        mid, half = g.rows // 2, min(16, (g.rows + 1) // 2)
        p, gb = ctforge.read_projections(input, band=(max(0, mid - half), min(g.rows, mid + half)),
                                         **read)
        center_of_rotation = ctforge.estimate_center_of_rotation(p, gb)
        del p
    if center_of_rotation is not None:
        center_of_rotation = float(center_of_rotation)
        g = g.with_center_of_rotation(center_of_rotation)
    if grid is None:
        s = None if shape is None else tuple(int(v) for v in shape)
        grid = _core.default_grid(g._g, s, ctforge._triple(spacing, "spacing"),
                                  ctforge._triple(origin, "origin"),
                                  whole_in_memory=not (streamed or zarr))
    algo = algorithm or ctforge.default_algorithm(g)
    if algo not in ("fdk", "fbp", "helical-fbp") + _METHODS:
        raise ctforge.UsageError(f"algorithm: expected fdk, fbp, helical-fbp, "
                                 f"{', '.join(_METHODS)} (got {algo!r})")
    # Options given (other than their defaults) that do not apply to the method: refused, as
    # ctforge.reconstruct and the command line refuse them (the library's table decides).
    ctforge._require_options_apply(reconstruct, arguments, algo)
    options = {"algorithm": algo, "filter": filter, "cutoff": float(cutoff), "backend": backend,
               "device": int(device), "threads": int(threads),
               "gpu_interpolation": gpu_interpolation,
               "displaced_detector": str(displaced_detector),
               "offset_transition": float(offset_transition)}
    if algo == "helical-fbp":  # (recorded only there: older directories resume)
        options["helical_q"] = float(helical_q)
    read_record = {k: (list(ctforge._range(v, k)) if k in ("views", "rows", "cols") else
                       _file_identity(v) if k in ("flat", "dark", "geometry", "angles") else
                       [list(r) for r in (v or [])] if k == "open_beam_cols" else v)
                   for k, v in sorted(read.items())}
    record = {"input": _file_identity(input), "read": read_record,
              "geometry": json.loads(g.to_json()),
              "grid": {"shape": list(grid.shape), "spacing_mm": list(grid.spacing),
                       "origin_mm": list(grid.origin)}}
    record.update({k: v for k, v in options.items() if k not in ("device", "threads")})
    grid_spec = {"shape": list(grid.shape), "spacing": list(grid.spacing),
                 "origin": list(grid.origin)}
    dir = _checkpoint_dir(checkpoint_dir, output)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if dir.startswith("s3://") and algo not in _METHODS and not (zarr and
                                                                  output.startswith("s3://")):
        raise ctforge.UsageError(
            f"checkpoint_dir {dir}: an s3:// directory records the FDK / FBP units of an s3:// "
            "Zarr output (each unit's shard there, and its marker here); for other outputs give "
            "a directory the workers and the client share")
    if algo in _METHODS:
        method = {"iterations": int(iterations), "relaxation": float(relaxation),
                  "nonnegative": bool(nonnegative), "subsets": int(subsets),
                  "tv_weight": tv_weight, "tv_iterations": int(tv_iterations),
                  "backprojector": backprojector, "tolerance": float(tolerance)}
        summary = _iterative(client, input, output, g, grid, grid_spec, record, options, read,
                             dir, checkpoint_dir is None and not keep_units, keep_units, method,
                             parts, checkpoint_every, progress, t0)
        if report:
            summary["report"] = _write_report(output, dict(
                _report_head(summary, input, started), parts=summary.pop("part_report"),
                attempts=summary["attempts"], notes=summary["notes"],
                bytes_to_workers=summary["bytes_to_workers"],
                bytes_from_workers=summary["bytes_from_workers"], iterations=summary["log"]))
        else:
            summary.pop("part_report")
        return summary

    record_text = json.dumps(record, sort_keys=True)
    spec = {"input": input, "read": read, "geometry": g.to_json(), "grid": grid_spec, "dir": dir,
            "planes": int(unit_planes), "record": record_text, "options": options}
    extra: Dict[str, Any] = {}
    if dir.startswith("s3://"):
        units = _core.plan_slab_units(g._g, grid, int(unit_planes))
        results, extra["markers"] = _object_store_units(client, units, spec, output, grid,
                                                        record, progress, input, keep_units)
    else:
        run = _core.SlabRun(g._g, grid, dir, int(unit_planes), record_text)
        units = run.units
        if zarr:
            results = _workers_write_zarr(client, run, spec, output, grid, progress, input)
        elif streamed:
            results = _workers_write_h5(client, run, spec, output, grid, progress, input)
        else:
            results = _client_assembles(client, run, spec, output, grid, progress, input)
        if not keep_units:
            _remove_run(dir, ("slab_",), remove_dir=checkpoint_dir is None)
    summary = _summary(algo, output, len(units), results, t0,
                       unit_planes=units[0][1] - units[0][0],
                       output_writes="workers" if streamed or zarr else "client", **extra)
    if report:
        entries = _unit_report(units, results)
        summary["report"] = _write_report(output, dict(
            _report_head(summary, input, started), units=entries, totals=_totals(entries),
            bytes_to_client=summary["bytes_to_client"]))
    return summary


def _report_head(summary: dict, input: str, started: str) -> dict:
    return {"ctforge": ctforge.__version__, "kind": summary["kind"], "input": input,
            "output": summary["output"], "client": _where(), "started": started,
            "seconds": summary["seconds"]}


# ---- units recorded in object storage ----------------------------------------------------------
# With an s3:// checkpoint directory (and an s3:// Zarr output) nothing needs a shared file
# system: a unit's record is its shard in the output plus a marker object in the directory
# (its planes, the run's fingerprint and the planes' checksum), written after the shard was
# read back. Markers are written once (If-None-Match: *) where the store honours it, which a
# probe finds out at the start; elsewhere each under a unique key, found by listing.

def _object_fs(url: str):
    import s3fs
    _, opts = zarr_volumes._store(url, None)
    return s3fs.S3FileSystem(**(opts or {}))


def _put_once(fs, key: str, data: bytes, write_once: bool) -> bool:
    """``data`` at ``key``; with ``write_once`` only if nothing is there (False then)."""
    try:
        fs.pipe_file(key, data, **({"IfNoneMatch": "*"} if write_once else {}))
        return True
    except FileExistsError:
        return False


def _probe_write_once(fs, dir: str) -> bool:
    """Whether the store refuses a second create of one key (If-None-Match: *)."""
    key = f"{dir}/.probe-{uuid.uuid4().hex}"
    try:
        try:
            fs.pipe_file(key, b"1", IfNoneMatch="*")
        except FileExistsError:
            return True
        except Exception:  # the header itself refused: no conditional writes
            return False
        try:
            fs.pipe_file(key, b"2", IfNoneMatch="*")
            return False
        except FileExistsError:
            return True
        except Exception:
            return False
    finally:
        try:
            fs.rm_file(key)
        except Exception:
            pass


def _object_open_run(fs, dir: str, record: dict, write_once: bool) -> str:
    """Writes (once) or checks ``dir``/run.json; returns the run's fingerprint."""
    text = json.dumps(record, sort_keys=True)
    key = f"{dir}/run.json"
    fs.invalidate_cache()
    if not fs.exists(key):
        _put_once(fs, key, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(),
                  write_once)
    there = json.loads(fs.cat_file(key))
    _require_same_run(dir, there, record)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _marker_stem(dir: str, k0: int, k1: int) -> str:
    return f"{dir}/slab_{k0:06d}_{k1:06d}"


def _run_markers(fs, pattern: str, run: str) -> List[Tuple[str, dict]]:
    """(key, marker) of every marker of run ``run`` whose key matches ``pattern`` (one
    listing, fresh: not from s3fs's cache)."""
    fs.invalidate_cache()
    found = []
    for key in sorted(fs.glob(pattern)):
        try:
            m = json.loads(fs.cat_file(key))
        except (OSError, ValueError):
            continue
        if isinstance(m, dict) and m.get("run") == run and isinstance(m.get("planes"), list):
            found.append((key, m))
    return found


def _object_markers(fs, dir: str, run: str) -> Tuple[Dict[Tuple[int, int], dict], List[str]]:
    """The markers of run ``run`` in ``dir`` by planes, and every marker key of the run (a
    unit recomputed under unique keys has several)."""
    found = _run_markers(fs, f"{dir}/slab_*.json", run)
    out: Dict[Tuple[int, int], dict] = {}
    for _, m in found:
        out.setdefault((int(m["planes"][0]), int(m["planes"][1])), m)
    return out, [key for key, _ in found]


def _object_unit_task(spec: dict, unit: int) -> dict:
    """One unit recorded in object storage: nothing when its marker is there and its shard
    checks out; else computed, its shard written and read back, then its marker written."""
    t0 = time.perf_counter()
    k0, k1, r0, r1, v0, v1 = spec["units"][unit]
    dir, run, target = spec["dir"], spec["run"], spec["zarr"]
    fs = _object_fs(dir)
    result = {"unit": unit, "worker": _where(), "device": _device(spec["options"]),
              "bytes_read": 0, "bytes_written": 0}
    checksums = {m.get("checksum") for _, m in
                 _run_markers(fs, _marker_stem(dir, k0, k1) + "*.json", run)}
    if checksums:
        there = zarr_volumes.read_zarr_planes(target, k0, k1)
        if _checksum(there.tobytes()) in checksums:
            return dict(result, computed=False, seconds=time.perf_counter() - t0,
                        bytes_read=int(there.nbytes))
    g = ctforge.Geometry.from_json(spec["geometry"])
    grid = _grid(spec["grid"])
    band = _unit_band(spec["input"], spec["read"], g.view_count, r0, r1, v0, v1)
    planes = _core.reconstruct_unit(band, g._g, grid, [k0, k1, r0, r1, v0, v1],
                                    **spec["options"])
    zarr_volumes.write_zarr_planes(target, k0, planes)
    digest = _checksum(planes.tobytes())
    back = zarr_volumes.read_zarr_planes(target, k0, k1)
    if _checksum(back.tobytes()) != digest:
        raise ctforge.Error(f"{target}: planes {k0}..{k1 - 1} read back differ from those "
                            "written; not recorded")
    name = _marker_stem(dir, k0, k1) + (".json" if spec["write_once"] else
                                          f".{uuid.uuid4().hex}.json")
    marker = {"run": run, "planes": [k0, k1], "checksum": digest, "ctforge": ctforge.__version__}
    _put_once(fs, name, json.dumps(marker).encode(), spec["write_once"])
    return dict(result, computed=True, seconds=time.perf_counter() - t0,
                bytes_read=int(band.nbytes), bytes_written=int(planes.nbytes), written=[k0, k1])


def _object_store_units(client, units, spec: dict, output: str, grid, record: dict, progress,
                        input: str, keep_units: bool) -> Tuple[List[dict], str]:
    """FDK / FBP units recorded in an s3:// checkpoint directory, their shards written into an
    s3:// Zarr output by the workers; the array is finished once every unit's marker is there.
    Returns the results and how markers are written ("If-None-Match" or "unique keys")."""
    dir = spec["dir"]
    fs = _object_fs(dir)
    write_once = _probe_write_once(fs, dir)
    run = _object_open_run(fs, dir, record, write_once)
    planes = units[0][1] - units[0][0]
    if [(u[0], u[1]) for u in units] != zarr_volumes.zarr_units(grid.shape[0], planes):
        raise ctforge.Error(f"reconstruct {output}: the units' planes are not the shards of "
                            f"{planes} planes")
    zarr_volumes.resume_zarr_volume(output, grid, planes, run)
    ospec = dict(spec, units=[list(u) for u in units], run=run, zarr=output,
                 write_once=write_once)
    nonce = uuid.uuid4().hex[:8]
    futures = [client.submit(_object_unit_task, ospec, i, key=f"ctforge-objslab-{run}-{i}-{nonce}")
               for i in range(len(units))]
    results = _gather(client, futures, progress, f"reconstruct {input}")
    markers, keys = _object_markers(fs, dir, run)
    missing = [(u[0], u[1]) for u in units if (u[0], u[1]) not in markers]
    if missing:
        raise ctforge.Error(f"reconstruct {input}: no marker in {dir} for planes "
                            f"{missing[0][0]}..{missing[0][1] - 1} ({len(missing)} unit(s)) after "
                            "their tasks ended; run the same call again")
    zarr_volumes.finish_zarr_volume(output)
    if not keep_units:
        fs.rm(keys + [f"{dir}/run.json"])
    return results, "If-None-Match" if write_once else "unique keys"


def _unit_futures(client, run, spec: dict, units: Sequence[int]) -> List[Any]:
    nonce = uuid.uuid4().hex[:8]  # a call's tasks never alias an earlier call's results
    return [client.submit(_slab_unit_task, spec, i,
                          key=f"ctforge-slab-{run.fingerprint}-{i}-{nonce}") for i in units]


def _require_recorded(run, input: str) -> None:
    """Every unit's record checks out, once the workers have written its planes into the
    output: otherwise the output is not committed (ctforge.Error naming the unit)."""
    for i in range(len(run.units)):
        done, why = run.is_recorded(i)
        if not done:
            raise ctforge.Error(f"reconstruct {input}: unit {i} does not check out after its "
                                f"planes were written ({why}); run the same call again")


def _workers_write_h5(client, run, spec: dict, output: str, grid, progress, input: str):
    """A ``.h5`` output on the file system the workers share: the client reserves the file
    under its temporary name, every unit's task (computing it, or reading its record) writes its
    planes at their offset, and the client renames the file once every unit's record checks out
    and its planes are written. No volume data passes through the client."""
    # (An absolute name: the workers' working directories are not the client's.)
    writer = _core.VolumeFileWriter(os.path.abspath(output), grid)
    try:
        part_spec = dict(spec, part={"file": writer.temporary_path,
                                     "offset": int(writer.data_offset)})
        futures = _unit_futures(client, run, part_spec, range(len(run.units)))
        results = _gather(client, futures, progress, f"reconstruct {input}")
        for r in results:
            k0, k1 = r["written"]
            writer.mark_written(k0, k1 - k0)
        _require_recorded(run, input)
        writer.commit()
    finally:
        writer.close()
    return results


def _workers_write_zarr(client, run, spec: dict, output: str, grid, progress, input: str):
    """A Zarr output (a local ``.zarr`` directory, or ``s3://...``) with one shard per unit: the
    client creates the array (for a local path under a temporary name), every unit's task
    writes its shard, and the client sets ``ctforge_complete`` once every shard is there and
    every unit's record checks out (then puts a local array in place). No volume data passes
    through the client."""
    units = run.units
    planes = units[0][1] - units[0][0]
    expected = zarr_volumes.zarr_units(grid.shape[0], planes)
    if [(u[0], u[1]) for u in units] != expected:  # (units are planned that way: a safeguard)
        raise ctforge.Error(f"reconstruct {output}: the units' planes {[u[:2] for u in units]} "
                            f"are not the shards of {planes} planes")
    with zarr_volumes.staged_volume(output) as target:
        zarr_volumes.create_zarr_volume(target, grid, planes)
        futures = _unit_futures(client, run, dict(spec, zarr=target), range(len(units)))
        results = _gather(client, futures, progress, f"reconstruct {input}")
        _require_recorded(run, input)
        zarr_volumes.finish_zarr_volume(target)
    return results


def _client_assembles(client, run, spec: dict, output: str, grid, progress, input: str):
    """Formats other than ``.h5``: the units are computed on the workers, then read by the
    client and written as one volume (which must fit in its memory)."""
    todo = [i for i in range(len(run.units)) if not run.is_recorded(i)[0]]
    results = _gather(client, _unit_futures(client, run, spec, todo), progress,
                      f"reconstruct {input}")
    volume = np.empty(grid.shape, dtype=np.float32)
    for i, (k0, k1, *_) in enumerate(run.units):
        volume[k0:k1] = run.read_unit(i, grid)
    ctforge.write_volume(output, volume, grid)
    return results


class _DaskViewParts:
    """The parts of a partitioned iterative run on the workers of a Dask cluster: what
    ``_core.reconstruct_partitioned`` calls (ctforge::view_parts). Part k lives on one worker;
    its steps are chained (each task waits for the part's previous one) and run there.

    With ``spec["planes"]`` the parts hold the volumes too, part k the planes ``planes[k]`` of
    each (``holds_volumes``): the client then never holds a volume but for the result and one
    array of a state being saved. Per forward projection every part gathers the volume's slabs
    from its peers; per back-projection the parts' volumes are added pairwise on the workers and
    each part takes its planes of the sum; TV steps gather the volume on part 0. Without it, the
    iterate goes from the client to the workers once per forward projection (scattered to one
    worker; the others fetch it from their peers) and one sum per back-projection comes back.
    Reductions are one number per part."""

    def __init__(self, client, spec: dict, workers: Sequence[str]):
        self.client, self.spec = client, spec
        self.holds_volumes = bool(spec.get("planes"))
        self.plane_size = int(np.prod(spec["grid"]["shape"][1:])) if self.holds_volumes else 0
        n = len(spec["parts"])
        self.where = [workers[k % len(workers)] for k in range(n)]
        self.bytes_to_workers = self.bytes_from_workers = 0
        self.last: List[Any] = [None] * n
        self.steps = [-1] * n
        loads = [self._submit(k, _part_load) for k in range(n)]
        self.loaded = self._wait(loads)

    def _submit(self, k: int, fn, *args) -> Any:
        """Part k's next step, fn(spec, k, *args, previous step), on its worker."""
        self.steps[k] += 1
        f = self.client.submit(_step_once, fn, self.spec, k, self.steps[k], *args, self.last[k],
                               workers=[self.where[k]], allow_other_workers=False, pure=False)
        self.last[k] = f
        return f

    def _each(self, name: str, *args) -> List[Any]:
        return [self._submit(k, _part_step, name, args) for k in range(len(self.where))]

    def _wait(self, futures: List[Any]) -> List[Any]:
        """Their results; PartLost when a part's worker leaves meanwhile or lost its part."""
        self._settle(futures)
        return [self._result(f) for f in futures]

    def _settle(self, futures: List[Any]) -> None:
        """Waits until they are done; PartLost when a part's worker leaves meanwhile."""
        distributed = _dask()
        while True:
            try:
                distributed.wait(futures, timeout=2)
                break
            except (distributed.TimeoutError, TimeoutError):
                self._check_workers()
            except Exception as e:  # Dask cancels the tasks bound to a worker that left
                if not any(f.status in ("cancelled", "lost") for f in futures):
                    raise
                self._check_workers()
                raise PartLost(f"a part's step was cancelled ({type(e).__name__}): its worker "
                               "left") from None

    def _result(self, f: Any) -> Any:
        """The result of a settled step; PartLost when its worker left or lost its part."""
        if f.status in ("cancelled", "lost"):
            self._check_workers()
            raise PartLost(f"a part's step was {f.status}: its worker left")
        if f.status == "error":
            e = f.exception()
            if isinstance(e, PartLost):
                raise PartLost(str(e))
            if e is None:  # it went back to pending meanwhile: its inputs died with a worker
                self._check_workers()
                raise PartLost("a part's step lost its inputs: a worker left")
            raise e
        return f.result()

    def _check_workers(self) -> None:
        """PartLost naming the first part whose worker is no longer in the cluster."""
        alive = set(self.client.scheduler_info().get("workers", {}))
        gone = [k for k, w in enumerate(self.where) if w not in alive]
        if gone:
            a, b = self.spec["parts"][gone[0]]
            raise PartLost(f"the worker holding views {a}..{b - 1} ({self.where[gone[0]]}) left")

    def create(self, id: int, subset: int) -> None:
        self._each("create", id, subset)

    def release(self, id: int) -> None:
        self._each("release", id)

    def load_data(self, id: int, subset: int, clamp: bool) -> None:
        self._each("load_data", id, subset, clamp)

    def data_norm2(self) -> float:
        return float(sum(self._wait(self._each("data_norm2"))))

    def forward(self, x: np.ndarray, id: int, subset: int) -> None:
        xf = self.client.scatter(x, hash=False)
        self.bytes_to_workers += x.nbytes
        for k in range(len(self.where)):
            self._submit(k, _part_forward, xf, id, subset)

    def back(self, id: int, subset: int, matched: bool) -> np.ndarray:
        level = self._each("back", id, subset, matched)
        while len(level) > 1:  # the library's pairwise_sum order: ((0 + 1) + (2 + 3)) + ...
            level = [self.client.submit(_add, level[i], level[i + 1], pure=False)
                     if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        (total,) = self._wait(level)
        self.bytes_from_workers += total.nbytes
        return total

    def apply(self, op: str, ids: List[int], scalars: List[float]) -> float:
        futures = self._each("apply", op, ids, scalars)
        if op in ("dot", "poisson_log_likelihood"):
            return float(sum(self._wait(futures)))
        return 0.0

    def download(self, id: int, out: np.ndarray) -> None:
        """The whole buffer into ``out``, in pieces of at most an eighth of it (so that the
        client holds little besides ``out``: a saved state is read array by array)."""
        sizes = self._wait(self._each("size_of", id))
        futures = self._each("download", id)
        self._settle(futures)
        piece = max(1, -(-out.size // 8))
        at = 0
        for k, f in enumerate(futures):
            n = int(sizes[k])
            if at + n > out.size:
                raise ctforge.Error(f"partitioned buffer {id}: more than {out.size} values")
            for a in range(0, n, piece):  # cut where the share lies
                b = min(n, a + piece)
                (values,) = self._wait([self.client.submit(_planes, f, a, b, pure=False)])
                out[at + a:at + b] = values
                del values
            futures[k] = f = None  # (the worker may free it)
            at += n
        if at != out.size:
            raise ctforge.Error(f"partitioned buffer {id}: {at} values gathered, {out.size} "
                                "expected")
        self.bytes_from_workers += out.nbytes

    def upload(self, data: np.ndarray, id: int) -> None:
        sizes = self._wait(self._each("size_of", id))
        at = 0
        for k, n in enumerate(sizes):
            # (A copy: ``data`` is valid during the call only, and a client whose workers
            # share its process keeps what it scatters by reference.)
            share = self.client.scatter(np.array(data[at:at + n], dtype=np.float32),
                                        hash=False, workers=[self.where[k]])
            self._submit(k, _part_upload, share, id)
            at += n
        self.bytes_to_workers += data.nbytes

    # -- the volumes on the parts (holds_volumes) ---------------------------------------------
    def _slabs(self, x: int) -> List[Any]:
        """Futures of every part's planes of volume buffer x (copies, taken in step order)."""
        return self._each("download", x)

    def _scatter_planes(self, whole: Any, x: int) -> None:
        """Each part takes its planes of the volume future ``whole`` into buffer x (cut where
        ``whole`` lies, so that only the planes travel)."""
        for k, (z0, z1) in enumerate(self.spec["planes"]):
            piece = self.client.submit(_planes, whole, z0 * self.plane_size,
                                       z1 * self.plane_size, pure=False)
            self._submit(k, _part_upload, piece, x)

    def forward_volume(self, x: int, y: int, subset: int) -> None:
        slabs = self._slabs(x)
        for k in range(len(self.where)):
            self._submit(k, _part_forward_slabs, slabs, y, subset)

    def back_volume(self, y: int, x: int, subset: int, matched: bool) -> None:
        level = self._each("back", y, subset, matched)
        while len(level) > 1:  # the library's pairwise_sum order: ((0 + 1) + (2 + 3)) + ...
            level = [self.client.submit(_add, level[i], level[i + 1], pure=False)
                     if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        self._scatter_planes(level[0], x)

    def tv_prox_volume(self, x: int, weight: float, iterations: int, nonnegative: bool) -> None:
        whole = self._submit(0, _part_tv_prox, self._slabs(x), weight, iterations, nonnegative)
        self._scatter_planes(whole, x)

    def total_variation_volume(self, x: int) -> float:
        (tv,) = self._wait([self._submit(0, _part_total_variation, self._slabs(x))])
        return float(tv)

    def keep_result(self, x: int) -> bool:
        """An ``.h5`` output (``spec["result"]``, on the file system the workers share) or a Zarr
        one (local or ``s3://``): each part writes its planes of the result into the file the
        client reserves under a temporary name, or into the Zarr array it creates, and
        ``self.writer`` is left to commit it. Otherwise the client receives the result."""
        path = self.spec.get("result")
        if not self.holds_volumes or not path:
            return False
        grid = _grid(self.spec["grid"])
        zarr = zarr_volumes.is_zarr_url(path)
        writer = _ZarrResult(path, grid) if zarr else _core.VolumeFileWriter(path, grid)
        try:
            part = ({"zarr": writer.target} if zarr else
                    {"file": writer.temporary_path, "offset": int(writer.data_offset)})
            self._wait([self._submit(k, _part_write_result, x, part)
                        for k in range(len(self.where))])
            for z0, z1 in self.spec["planes"]:
                if z1 > z0 and not zarr:
                    writer.mark_written(z0, z1 - z0)
        except BaseException:
            writer.close()  # (the temporary removed)
            raise
        self.writer = writer
        return True


_METHODS = ("sirt", "os-sart", "cgls", "fista-tv", "osem")
# Iterative methods keep their volumes on the workers (the client holds none while they run);
# False keeps them on the client (one volume to the workers per forward projection, one back
# per back-projection): the tests' comparison.
_VOLUMES_ON_WORKERS = True


class _ObjectStoreState:
    """An iterative run's state in an ``s3://`` checkpoint directory. The library saves it in a
    local directory of the client (its two alternating slots ``<method>_<k>.f32`` / ``.json``
    and ``run.json``); this copies what is there from the store before the run, and each slot
    to the store once the library has rewritten it (checked at every progress report: the data
    object first, its marker last, so a client killed in between leaves a slot whose checksum
    does not match, which the library then passes over for the other). A restarted client thus
    resumes from the last slot that reached the store."""

    def __init__(self, url: str, stem: str):
        import tempfile
        self.url, self.stem = url.rstrip("/"), stem
        self.fs = _object_fs(self.url)
        self.local = tempfile.mkdtemp(prefix="ctforge-state-")
        self.names = [f"{stem}_{k}{ext}" for k in (0, 1) for ext in (".f32", ".json")]
        self.names.append("run.json")
        self.pushed: Dict[str, Tuple[int, int]] = {}
        self.bytes_up = self.bytes_down = 0
        for name in self.names:
            key = f"{self.url}/{name}"
            try:
                data = self.fs.cat_file(key)
            except FileNotFoundError:
                continue
            except Exception as e:
                raise ctforge.Error(f"checkpoint_dir {self.url}: cannot read {key}: {e}") from e
            with open(os.path.join(self.local, name), "wb") as f:
                f.write(data)
            self.bytes_down += len(data)
            self.pushed[name] = self._stamp(name)

    def _stamp(self, name: str) -> Tuple[int, int]:
        try:
            st = os.stat(os.path.join(self.local, name))
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return (0, -1)

    def push(self) -> None:
        """Copies every slot (data, then marker) and run.json the library rewrote since."""
        for name in ["run.json"] + [n for n in self.names if n.endswith(".json") and
                                    n != "run.json"]:
            stamp = self._stamp(name)
            if stamp[1] < 0 or self.pushed.get(name) == stamp:
                continue
            order = [name] if name == "run.json" else [name[:-5] + ".f32", name]
            for n in order:
                path = os.path.join(self.local, n)
                try:
                    self.fs.put_file(path, f"{self.url}/{n}")
                except Exception as e:
                    raise ctforge.Error(f"checkpoint_dir {self.url}: cannot write {n}: {e}") from e
                self.bytes_up += os.path.getsize(path)
                self.pushed[n] = self._stamp(n)

    def remove(self, from_store: bool) -> None:
        if from_store:
            for name in self.names:
                try:
                    self.fs.rm_file(f"{self.url}/{name}")
                except FileNotFoundError:
                    pass
        shutil.rmtree(self.local, ignore_errors=True)


def _iterative(client, input, output, g, grid, grid_spec, record, options, read, dir,
               remove_dir, keep_units, method: dict, parts, checkpoint_every, progress,
               t0) -> dict:
    """An iterative method through the library (ctforge::reconstruct_partitioned) over view
    partitions held by the workers; its state saved in ``dir`` in the library's format every
    ``checkpoint_every`` iterations. A worker lost mid-run ends that attempt; the next one
    loads the parts on the workers there are and resumes from the saved state."""
    workers = sorted(client.scheduler_info().get("workers", {}))
    if not workers:
        raise ctforge.Error("the Dask cluster has no workers")
    if parts is None:
        parts = len(workers)
    parts = int(parts)
    if not 1 <= parts <= g.view_count:
        raise ctforge.UsageError(f"parts: must be in [1, {g.view_count}] (the views; got {parts})")
    bounds = [list(_core.part_views(g.view_count, parts, k)) for k in range(parts)]
    algo = options["algorithm"]
    lib = {k: v for k, v in dict(options, **method).items() if v is not None}
    subsets = _core.method_subsets(g._g, **{k: v for k, v in lib.items()
                                            if k in ("algorithm", "subsets")})
    notes: List[str] = []
    store = _ObjectStoreState(dir, algo.replace("-", "_")) if dir.startswith("s3://") else None
    state_dir = store.local if store else dir
    # The parts hold the volumes too (each its planes): the client holds none while it runs.
    # (A state saved with the volumes on the client continues so, bit for bit.)
    on_workers = _VOLUMES_ON_WORKERS
    if on_workers and _saved_with_volumes_on_client(state_dir):
        on_workers = False
        notes.append("the saved state was computed with the volumes on the client: this run "
                     "continues so")
    planes = ([list(_core.part_planes(int(grid.shape[0]), parts, k)) for k in range(parts)]
              if on_workers else None)
    # The partition changes the rounding of the sums: part of the run's identity.
    record = dict(record, parts=bounds)
    if planes:
        record["volume_planes"] = planes
    for k in ("filter", "cutoff", "displaced_detector", "offset_transition", "helical_q"):
        record.pop(k, None)
    # The workers write an .h5 result themselves (the file system they share, as for FDK), and
    # a Zarr one (local or s3://).
    result = None
    if planes is not None and zarr_volumes.is_zarr_url(output) and _have_zarr_python():
        result = output if "://" in output else os.path.abspath(output)
    elif planes is not None and _local_h5(output):
        result = os.path.abspath(output)
    spec = {"input": input, "read": read, "geometry": g.to_json(), "grid": grid_spec,
            "options": options, "parts": bounds, "subsets": subsets, "planes": planes,
            "result": result}
    run_options = {k: v for k, v in lib.items() if k not in ("filter", "cutoff",
                                                             "displaced_detector",
                                                             "offset_transition")}
    report_progress = progress
    if store:
        def report_progress(fraction: float) -> None:
            store.push()
            if progress:
                progress(fraction)
    writer = None
    try:
        volume, log, attempts, loaded, to_workers, from_workers, writer = _iterative_attempts(
            client, g, grid, spec, record, workers, run_options, algo, state_dir, dir,
            checkpoint_every, report_progress, notes)
        if store:
            store.push()  # (a slot saved since the last report)
    except BaseException:
        if writer is not None:  # (the result the workers wrote: its temporary removed now)
            writer.close()
        if store:  # the state stays in the store for the next run
            try:
                store.push()
            finally:
                store.remove(from_store=False)
        raise
    if writer is not None:  # the workers wrote it
        try:
            writer.commit()
        finally:
            writer.close()
    else:
        _write_result(output, volume, grid)
    del volume
    if store:
        store.remove(from_store=not keep_units)
    elif not keep_units:
        _remove_run(dir, tuple(f"{m.replace('-', '_')}_" for m in _METHODS),
                    remove_dir=remove_dir)
    resumed = next((int(m.group(1)) for m in (re.search(r"after iteration (\d+)", n)
                                               for n in notes) if m), 0)
    part_report = list(loaded)  # (the last attempt's parts; earlier ones are in the notes)
    summary = {"output": output if "://" in output else os.path.abspath(output), "kind": algo,
               "parts": parts, "part_report": part_report,
               "part_views": bounds, "iterations": int(method["iterations"]),
               "resumed_from": resumed, "attempts": attempts,
               "notes": notes, "workers": sorted({r["worker"] for r in loaded}),
               "bytes_to_workers": to_workers, "bytes_from_workers": from_workers,
               "result_written_by_workers": writer is not None,
               "log": log, "seconds": time.perf_counter() - t0}
    if store:
        summary["state_bytes_to_store"] = store.bytes_up
        summary["state_bytes_from_store"] = store.bytes_down
    return summary


def _have_zarr_python() -> bool:
    """Whether the workers can write Zarr themselves (zarr-python; without it the client
    writes a local .zarr result through the C++ library)."""
    try:
        zarr_volumes._zarr()
        return True
    except ImportError:
        return False


def _saved_with_volumes_on_client(state_dir: str) -> bool:
    """Whether ``state_dir`` holds a partitioned run's record from before the parts held the
    volumes (parts recorded, their planes not)."""
    try:
        with open(os.path.join(state_dir, "run.json")) as f:
            there = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(there, dict) and "parts" in there and "volume_planes" not in there


def _local_h5(output: str) -> bool:
    """Whether ``output`` is a local ``.h5`` file (written plane by plane)."""
    return "://" not in output and output.lower().endswith((".h5", ".hdf5"))


def _write_result(output: str, volume: np.ndarray, grid) -> None:
    """The result of an iterative run into ``output``: an ``.h5`` file slab by slab (nothing
    but the result in memory), other formats as ctforge.write_volume writes them."""
    if not _local_h5(output):
        ctforge.write_volume(output, volume, grid)
        return
    writer = _core.VolumeFileWriter(os.path.abspath(output), grid)
    try:
        step = max(1, (1 << 22) // max(1, volume[0].size))  # about 16 MB a slab
        for k0 in range(0, volume.shape[0], step):
            writer.write_planes(k0, volume[k0:k0 + step])
        writer.commit()
    finally:
        writer.close()


def _iterative_attempts(client, g, grid, spec, record, workers, run_options, algo, state_dir,
                        dir, checkpoint_every, progress, notes):
    """Attempts of the partitioned run until one completes: (volume, log, attempts, the last
    attempt's parts, bytes to and from the workers, and the output's writer when the workers
    wrote the result (the volume is then None))."""
    attempts, loaded, writer = 0, [], None
    to_workers = from_workers = 0
    while True:
        attempts += 1
        spec["session"] = uuid.uuid4().hex
        vp = None
        try:
            vp = _DaskViewParts(client, spec, workers)
            loaded = vp.loaded
            volume, log = _core.reconstruct_partitioned(
                vp, g._g, grid, checkpoint_dir=state_dir, checkpoint_every=int(checkpoint_every),
                checkpoint_seconds=0.0, run_record=json.dumps(record, sort_keys=True),
                progress=progress, note=notes.append, **run_options)
            if volume is None:
                writer = vp.writer
            break
        except PartLost as e:
            if attempts > 5:
                raise ctforge.Error(f"{algo}: {e}; gave up after {attempts} attempts (the state "
                                    f"saved so far is kept in {dir})") from e
            notes.append(f"{e}; resuming from the saved state")
            workers = sorted(client.scheduler_info().get("workers", {}))
            while not workers:
                time.sleep(1)
                workers = sorted(client.scheduler_info().get("workers", {}))
        finally:
            if vp is not None:
                to_workers += vp.bytes_to_workers
                from_workers += vp.bytes_from_workers
                vp.last = []  # (the parts' pending steps released)
            try:  # the workers free the session's parts (projections and buffers)
                client.run(_drop_parts, spec["session"])
            except Exception:
                pass  # a worker gone meanwhile holds nothing any more
    return volume, log, attempts, loaded, to_workers, from_workers, writer


def simulate(client: Any, phantom: Any, geometry: Any, output: PathLike, *,
             phantom_size: float = 128.0, views_per_unit: int = 0,
             noise_i0: Optional[float] = None, noise_sigma: float = 0.0, seed: int = 1,
             checkpoint_dir: Optional[PathLike] = None, threads: int = 0,
             keep_units: bool = False,
             progress: Optional[Callable[[float], None]] = None) -> dict:
    """Exact line integrals of an analytic ``phantom`` ("shepp-logan", scaled to
    ``phantom_size`` mm, or ellipsoids as a dict, list, JSON text or file) for ``geometry``,
    computed in units of ``views_per_unit`` views (0: about 16 M pixels each) on the workers
    of ``client`` and written to the ctforge HDF5 projection file ``output``; Poisson noise
    (``noise_i0`` photons, ``noise_sigma``, ``seed``) is drawn on the client as
    ``ctforge simulate --noise-i0`` does. The projections equal
    ``ctforge.project_analytic(phantom, geometry)`` bit for bit. Units are recorded in
    ``checkpoint_dir`` (default ``.<output>.units/``) like :func:`reconstruct`'s."""
    t0 = time.perf_counter()
    _dask()
    output = os.fspath(output)
    g = geometry if isinstance(geometry, ctforge.Geometry) else ctforge.Geometry.from_json(geometry)
    if isinstance(phantom, str) and phantom == "shepp-logan":
        phantom_spec: Any = {"shepp_logan": float(phantom_size)}
    elif isinstance(phantom, (dict, list)):
        phantom_spec = phantom
    elif isinstance(phantom, (str, os.PathLike)):
        text = os.fspath(phantom)
        if not text.lstrip().startswith("{"):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        phantom_spec = json.loads(text)
    else:
        raise ctforge.UsageError("phantom: expected 'shepp-logan', a dict, a list, JSON text or a "
                                 "path to a phantom JSON file")
    _phantom(phantom_spec)  # refuses an invalid phantom here, not on the workers
    per = int(views_per_unit) or max(1, (1 << 24) // max(1, g.rows * g.cols))
    if per < 1:
        raise ctforge.UsageError(f"views_per_unit: must be >= 1 (got {views_per_unit})")
    dir = _checkpoint_dir(checkpoint_dir, output)
    record = {"phantom": phantom_spec, "geometry": json.loads(g.to_json()),
              "views_per_unit": per, "ctforge": ctforge.__version__}
    run = _open_run(dir, record)
    spec = {"geometry": g.to_json(), "phantom": phantom_spec, "dir": dir, "run": run,
            "threads": int(threads)}
    units = [(a, min(g.view_count, a + per)) for a in range(0, g.view_count, per)]
    nonce = uuid.uuid4().hex[:8]
    futures = [client.submit(_views_unit_task, spec, a, b, key=f"ctforge-views-{run}-{a}-{nonce}")
               for a, b in units]
    results = _gather(client, futures, progress, "simulate")
    proj = np.empty(g.projection_shape, dtype=np.float32)
    for a, b in units:
        marker, data = _read_recorded(dir, f"views_{a:06d}_{b:06d}", run, (b - a) * g.rows * g.cols)
        if marker is None:
            raise ctforge.Error(f"{dir}: views {a}..{b - 1} are not recorded: {data}")
        proj[a:b] = data.reshape(b - a, g.rows, g.cols)
    if noise_i0 is not None:
        proj = ctforge.add_poisson_noise(proj, i0=noise_i0, sigma=noise_sigma, seed=seed)
    ctforge.write_projections(output, proj, g)
    if not keep_units:
        _remove_run(dir, ("views_",), remove_dir=checkpoint_dir is None)
    return _summary("simulate", output, len(units), results, t0, views_per_unit=per)


# ---- command line --------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m ctforge.distributed",
        description="Reconstruct or simulate over the workers of a Dask cluster (files on a "
                    "file system every worker shares). Run the same command again after an "
                    "interruption: complete units are kept.")
    sub = ap.add_subparsers(dest="command", required=True)

    def cluster(p):
        g = p.add_mutually_exclusive_group(required=True)
        g.add_argument("--scheduler", metavar="ADDRESS",
                       help="Dask scheduler to connect to (tcp://HOST:8786, or a scheduler JSON file)")
        g.add_argument("--local", type=int, metavar="N",
                       help="start a local cluster of N worker processes (one thread each)")
        p.add_argument("--checkpoint-dir", metavar="DIR",
                       help="shared directory for the units (default: .<output>.units/ beside it)")
        p.add_argument("--keep-units", action="store_true", help="keep the units afterwards")
        p.add_argument("--threads", type=int, default=0, help="CPU threads per task (0 = all)")
        p.add_argument("--quiet", action="store_true", help="print nothing but errors")

    r = sub.add_parser("recon", help="FDK / FBP / helical FBP slab by slab, or an iterative "
                                    "method with the views partitioned over the workers")
    r.add_argument("input", help="projections (ctforge / DataExchange / NXtomo HDF5, TIFF stack)")
    r.add_argument("-o", "--output", required=True, help="output volume (.h5, .zarr or s3://.../x.zarr: written by the workers; "
                        "other formats assembled in the client's memory)")
    cluster(r)
    r.add_argument("--algorithm", choices=("fdk", "fbp", "helical-fbp") + _METHODS)
    r.add_argument("--unit-planes", type=int, default=0, metavar="N")
    r.add_argument("--size", type=int, metavar="N")
    r.add_argument("--size-xyz", metavar="X,Y,Z")
    r.add_argument("--spacing", metavar="MM[,MM,MM]")
    r.add_argument("--origin", metavar="X,Y,Z")
    r.add_argument("--filter", default="ram-lak")
    r.add_argument("--cutoff", type=float, default=1.0)
    r.add_argument("--displaced-detector", default="auto", choices=("auto", "on", "off"))
    r.add_argument("--offset-transition", type=float, default=16.0, metavar="PIXELS")
    r.add_argument("--helical-q", type=float, default=0.7, metavar="Q")
    r.add_argument("--iterations", type=int, default=50)
    r.add_argument("--relaxation", type=float, default=1.0)
    r.add_argument("--nonnegative", action="store_true")
    r.add_argument("--subsets", type=int, default=10, help="OS-SART / OSEM: ordered subsets")
    r.add_argument("--tv-weight", type=float, help="FISTA-TV: the TV weight")
    r.add_argument("--tv-iterations", type=int, default=20)
    r.add_argument("--backprojector", default="auto", choices=("auto", "voxel", "matched"))
    r.add_argument("--tolerance", type=float, default=0.0)
    r.add_argument("--no-report", action="store_true",
                   help="write no run report (<output>.report.json) beside the output")
    r.add_argument("--parts", type=int,
                   help="iterative methods: view partitions (default: one per worker)")
    r.add_argument("--checkpoint-every", type=int, default=5, metavar="N")
    r.add_argument("--geometry", help="geometry JSON of the whole stored scan")
    r.add_argument("--flat")
    r.add_argument("--dark")
    r.add_argument("--bin", type=int, default=1)
    r.add_argument("--pixel-size", type=float, default=1.0)
    r.add_argument("--transpose", action="store_true")
    r.add_argument("--flip-u", action="store_true")
    r.add_argument("--flip-v", action="store_true")
    r.add_argument("--center-of-rotation", metavar="COL|auto")
    r.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    r.add_argument("--gpu-interpolation", default="exact", choices=("exact", "hardware"))

    s = sub.add_parser("simulate", help="exact projections of an analytic phantom, views in units")
    s.add_argument("--phantom", required=True, help="shepp-logan or a phantom JSON file")
    s.add_argument("--phantom-size", type=float, default=128.0)
    s.add_argument("--geometry", required=True)
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--views-per-unit", type=int, default=0, metavar="N")
    s.add_argument("--noise-i0", type=float)
    s.add_argument("--noise-sigma", type=float, default=0.0)
    s.add_argument("--seed", type=int, default=1)
    cluster(s)
    return ap


def _numbers(text: Optional[str], option: str, counts: Sequence[int], cast=float):
    if text is None:
        return None
    try:
        v = [cast(x) for x in text.split(",")]
    except ValueError:
        raise ctforge.UsageError(f"{option}: '{text}' is not a list of numbers") from None
    if len(v) not in counts:
        raise ctforge.UsageError(f"{option}: expected {' or '.join(map(str, counts))} values, got {len(v)}")
    return v


def _run(args: argparse.Namespace) -> dict:
    distributed = _dask()
    cluster = None
    if args.local is not None:
        if args.local < 1:
            raise ctforge.UsageError(f"--local: must be >= 1 (got {args.local})")
        cluster = distributed.LocalCluster(n_workers=args.local, threads_per_worker=1,
                                           processes=True, dashboard_address=None)
        client = distributed.Client(cluster)
    else:
        client = distributed.Client(args.scheduler)
    bar = None if args.quiet or not sys.stderr.isatty() else ctforge._ProgressBar()
    try:
        if args.command == "simulate":
            phantom = "shepp-logan" if args.phantom == "shepp-logan" else args.phantom
            return simulate(client, phantom, ctforge.Geometry.from_json(args.geometry),
                            args.output, phantom_size=args.phantom_size,
                            views_per_unit=args.views_per_unit, noise_i0=args.noise_i0,
                            noise_sigma=args.noise_sigma, seed=args.seed,
                            checkpoint_dir=args.checkpoint_dir, threads=args.threads,
                            keep_units=args.keep_units, progress=bar)
        shape = None
        if args.size is not None:
            g = ctforge.read_projection_geometry(args.input, geometry=args.geometry,
                                                 pixel_size=args.pixel_size)
            shape = (1 if g.rows == 1 else args.size, args.size, args.size)
        elif args.size_xyz is not None:
            x, y, z = _numbers(args.size_xyz, "--size-xyz", (3,), int)
            shape = (z, y, x)
        cor = args.center_of_rotation
        if cor is not None and cor != "auto":
            cor = _numbers(cor, "--center-of-rotation", (1,))[0]
        summary = reconstruct(
            client, args.input, args.output, checkpoint_dir=args.checkpoint_dir,
            unit_planes=args.unit_planes, shape=shape,
            spacing=_numbers(args.spacing, "--spacing", (1, 3)),
            origin=_numbers(args.origin, "--origin", (3,)), algorithm=args.algorithm,
            filter=args.filter, cutoff=args.cutoff,
            displaced_detector=args.displaced_detector, offset_transition=args.offset_transition,
            helical_q=args.helical_q, iterations=args.iterations,
            relaxation=args.relaxation, nonnegative=args.nonnegative, subsets=args.subsets,
            tv_weight=args.tv_weight, tv_iterations=args.tv_iterations,
            backprojector=args.backprojector, tolerance=args.tolerance, parts=args.parts,
            report=not args.no_report,
            checkpoint_every=args.checkpoint_every, center_of_rotation=cor,
            backend=args.backend, threads=args.threads, gpu_interpolation=args.gpu_interpolation,
            keep_units=args.keep_units, progress=bar, geometry=args.geometry, flat=args.flat,
            dark=args.dark, bin_rows=args.bin, bin_cols=args.bin, pixel_size=args.pixel_size,
            transpose=args.transpose, flip_u=args.flip_u, flip_v=args.flip_v)
        return summary
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)

    stopped_by = [signal.SIGINT]

    def stop(signum, frame):  # SIGTERM (a reclaimed instance): units recorded so far stay
        stopped_by[0] = signum
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    try:
        summary = _run(args)
    except ctforge.UsageError as e:
        print(f"ctforge: error: {e}", file=sys.stderr)
        return 2
    except ctforge.Error as e:
        print(f"ctforge: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"ctforge: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        name = "SIGTERM" if stopped_by[0] == signal.SIGTERM else "SIGINT"
        print(f"ctforge: stopped by {name}; complete units are kept: run the same command again "
              "to finish", file=sys.stderr)
        return 128 + int(stopped_by[0])
    if not args.quiet:
        workers = len(summary.get("workers", [])) or summary.get("parts", 0)
        done = (f"{summary['computed']} of {summary['units']} units computed "
                f"({summary['reused']} reused)") if "units" in summary else \
            f"{summary['iterations']} iterations over {summary['parts']} view partitions"
        report = f"; report {summary['report']}" if summary.get("report") else ""
        print(f"ctforge: {args.command}: wrote {summary['output']}: {done} on {workers} "
              f"worker(s), {summary['seconds']:.2f} s{report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # Run as `python -m ctforge.distributed`: the tasks must name this module's functions as
    # ctforge.distributed.*, not __main__.* (pickled by value, each task with its own copy of
    # the workers' registry of view parts).
    from ctforge import distributed as _module
    sys.exit(_module.main())

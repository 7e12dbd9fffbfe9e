"""ctforge against RTK and ASTRA on the same problems in one run (make bench-peers).

For each problem the projections are exact line integrals of the 3D Shepp-Logan phantom
(ctforge.project_analytic) and the truth is its voxelization; every tool gets the same data
(geometry through ctforge's RTK XML export and ASTRA vector export), the tools are run in
turns (ctforge, RTK, ASTRA, ctforge, ...) --repeat times, and for each tool the median, min
and max wall time of the computation itself (data already in memory) are reported with the
throughput (GUPS: voxel updates per view, 1e9/s), the ratio against ctforge and the accuracy
against the analytic truth (MAE, PSNR in the field of view, correlation), so that no tool wins
by computing something else. Agreement between tools (correlation with ctforge's result) is
checked as well.

Peers: RTK (itk-rtk, CPU: FDK, Joseph forward projection, voxel back-projection, SART run as
SIRT) and ASTRA (astra-toolbox: its CPU algorithms are 2D: FBP; the 3D ones need CUDA). With a
CUDA device, ctforge's CUDA backend and ASTRA's CUDA algorithms run too, and the GPU speedup is
given against one CPU thread and against all threads.

Writes --out/peers.json (every figure, the machine), peers.md (the table) and peers_time.png
(time per tool per problem, log scale); prints the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ctforge
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_machine import cpu_model  # noqa: E402

PHANTOM_MM = 100.0  # the Shepp-Logan phantom's cube


# ---- problems ------------------------------------------------------------------------------

def cone(cols, rows, views, sid=500.0, sdd=1000.0):
    pitch = 1.6 * PHANTOM_MM * sdd / sid / cols  # the phantom's cube fits with a margin
    return ctforge.Geometry.cone(cols=cols, rows=rows, pixel_size=pitch, sid=sid, sdd=sdd,
                                 angles=views)


PROBLEMS = {
    # name: kind, geometry maker, grid (nz, ny, nx), extra
    "fdk-128": ("fdk", lambda: cone(128, 128, 180), (128, 128, 128), {}),
    "fdk-256": ("fdk", lambda: cone(512, 512, 360), (256, 256, 256), {}),
    "backproject-256": ("backproject", lambda: cone(256, 256, 180), (256, 256, 256), {}),
    "forward-128": ("forward", lambda: cone(128, 128, 180), (128, 128, 128), {}),
    "forward-256": ("forward", lambda: cone(256, 256, 180), (256, 256, 256), {}),
    "fbp2d-512": ("fbp2d", lambda: ctforge.Geometry.parallel(
        cols=768, rows=1, pixel_size=PHANTOM_MM * 1.2 / 768, angles=np.linspace(
            0, np.pi, 720, endpoint=False)), (1, 512, 512), {}),
    "sirt-64": ("sirt", lambda: cone(96, 96, 90), (64, 64, 64), {"iterations": 20}),
}
QUICK = {"fdk-128", "backproject-256", "forward-128", "fbp2d-512", "sirt-64"}


def grid_for(g, shape):
    """The grid covering the phantom's cube (2D: one plane of the thickness of a voxel)."""
    nz, ny, nx = shape
    s = PHANTOM_MM * 1.1 / nx
    return ctforge.VolumeGeometry(nz, ny, nx, (s, s, s))


def fov_mask(grid):
    """Voxels inside the cylinder every view sees (90% of the grid's half width) and away
    from the cone's unsampled top and bottom planes (middle 80%)."""
    nz, ny, nx = grid.shape
    y, x = np.mgrid[:ny, :nx]
    r = np.hypot(x - (nx - 1) / 2, y - (ny - 1) / 2) <= 0.45 * nx
    z = np.abs(np.arange(nz) - (nz - 1) / 2) <= max(0.4 * nz, 0.5)
    return z[:, None, None] & r[None]


def metrics(out, truth, mask=None):
    a = out if mask is None else out[mask]
    b = truth if mask is None else truth[mask]
    peak = float(b.max() - b.min()) or 1.0
    err = a.astype(np.float64) - b
    mae = float(np.abs(err).mean())
    rmse = float(np.sqrt((err ** 2).mean()))
    return {"mae": mae, "psnr": 20 * np.log10(peak / rmse) if rmse > 0 else float("inf"),
            "correlation": float(np.corrcoef(a.ravel(), b.ravel())[0, 1])}


# ---- tools ---------------------------------------------------------------------------------

class Ctforge:
    name = "ctforge"

    def __init__(self, threads, backend="cpu"):
        self.threads, self.backend = threads, backend
        if backend == "cuda":
            self.name = "ctforge-cuda"

    def supports(self, kind):
        return True

    def run(self, kind, g, grid, data, extra):
        kw = dict(backend=self.backend, threads=self.threads)
        if kind in ("fdk", "fbp2d"):
            return ctforge.reconstruct(data, g, grid, **kw)
        if kind == "backproject":
            return ctforge.back_project(data, g, grid, **kw)
        if kind == "forward":
            return ctforge.forward_project(data, g, grid, **kw)
        if kind == "sirt":
            return ctforge.reconstruct(data, g, grid, algorithm="sirt",
                                       iterations=extra["iterations"], **kw)
        raise ValueError(kind)


class Rtk:
    """RTK through its Python wheel. Frames: RTK's world (X, Y, Z) is ours (x, z, -y), so a
    volume [z][y][x] is RTK's [Z][Y][X] = [-y][z][x]; projections are the same array."""
    name = "rtk"

    def __init__(self, threads):
        import itk
        from itk import RTK as rtk
        self.itk, self.rtk = itk, rtk
        itk.MultiThreaderBase.SetGlobalDefaultNumberOfThreads(threads)
        self.F3 = itk.Image[itk.F, 3]
        self.version = getattr(rtk, "__version__", None) or _version("itk-rtk")

    def supports(self, kind):
        return kind in ("fdk", "backproject", "forward", "sirt")

    def geometry(self, g):
        path = os.path.join(tempfile.mkdtemp(prefix="ctforge_peers_"), "g.xml")
        with open(path, "w") as f:
            f.write(g.to_rtk_xml())
        r = self.rtk.ThreeDCircularProjectionGeometryXMLFileReader.New()
        r.SetFilename(path)
        r.GenerateOutputInformation()
        return r.GetOutputObject()

    def projections(self, p, g):
        img = self.itk.image_from_array(np.ascontiguousarray(p, np.float32))
        du, dv = g.pixel_size
        img.SetSpacing([du, dv, 1.0])
        img.SetOrigin([-(g.cols - 1) / 2 * du, -(g.rows - 1) / 2 * dv, 0.0])
        return img

    def volume(self, grid, vol=None):
        nz, ny, nx = grid.shape
        sx, sy, sz = grid.spacing
        ox, oy, oz = grid.origin
        arr = np.zeros((ny, nz, nx), np.float32) if vol is None else \
            np.ascontiguousarray(vol.transpose(1, 0, 2)[::-1], np.float32)
        img = self.itk.image_from_array(arr)
        img.SetSpacing([sx, sz, sy])
        img.SetOrigin([ox, oz, -(oy + (ny - 1) * sy)])
        return img

    def from_volume(self, img):
        a = self.itk.array_from_image(img)
        return np.ascontiguousarray(a[::-1].transpose(1, 0, 2))

    def prepare(self, kind, g, grid, data):
        """Inputs in RTK's types, made before the clock starts."""
        geo = self.geometry(g)
        if kind == "forward":
            return geo, self.volume(grid, data), self.projections(np.zeros(g.projection_shape,
                                                                           np.float32), g)
        return geo, self.volume(grid), self.projections(data, g)

    def run(self, kind, g, grid, prepared, extra):
        geo, vol, proj = prepared
        rtk, F3 = self.rtk, self.F3
        if kind == "fdk":
            f = rtk.FDKConeBeamReconstructionFilter[F3].New()
            f.SetInput(0, vol)
            f.SetInput(1, proj)
        elif kind == "backproject":
            f = rtk.BackProjectionImageFilter[F3, F3].New()
            f.SetInput(0, vol)
            f.SetInput(1, proj)
        elif kind == "forward":
            f = rtk.JosephForwardProjectionImageFilter[F3, F3].New()
            f.SetInput(0, proj)
            f.SetInput(1, vol)
        elif kind == "sirt":
            f = rtk.SARTConeBeamReconstructionFilter[F3, F3].New()
            f.SetInput(0, vol)
            f.SetInput(1, proj)
            f.SetNumberOfIterations(extra["iterations"])
            f.SetNumberOfProjectionsPerSubset(g.view_count)  # all views at once: SIRT
            f.SetLambda(1.0)
        else:
            raise ValueError(kind)
        f.SetGeometry(geo)
        t0 = time.perf_counter()
        f.Update()
        seconds = time.perf_counter() - t0
        out = f.GetOutput()
        if kind == "forward":
            return np.ascontiguousarray(self.itk.array_from_image(out)), seconds
        return self.from_volume(out), seconds


class Astra:
    """ASTRA through its wheel: 2D FBP on the CPU (its 3D algorithms need CUDA). The 2D
    volume's rows run along -y (row 0 at the top)."""
    name = "astra"

    def __init__(self, cuda=False):
        import astra
        self.astra = astra
        self.cuda = cuda
        self.version = astra.__version__
        if cuda:
            self.name = "astra-cuda"

    def supports(self, kind):
        return kind == "fbp2d" or (self.cuda and kind in ("fdk", "forward", "backproject"))

    def prepare(self, kind, g, grid, data):
        a = self.astra
        nz, ny, nx = grid.shape
        sx, sy, _ = grid.spacing
        if kind == "fbp2d":
            # ASTRA's "parallel" at angle t has u = (cos t, sin t) * width, ours too, and rays
            # along (sin t, -cos t), ours reversed (the same lines). Its FBP takes no vectors.
            pg = a.create_proj_geom("parallel", g.pixel_size[0], g.cols, np.asarray(g.angles))
            vg = a.create_vol_geom(ny, nx, -nx * sx / 2, nx * sx / 2, -ny * sy / 2, ny * sy / 2)
            sino = a.data2d.create("-sino", pg, np.ascontiguousarray(data[:, 0, :]))
            rec = a.data2d.create("-vol", vg, 0)
            pid = a.create_projector("linear", pg, vg)
            cfg = a.astra_dict("FBP")
            cfg.update(ProjectorId=pid, ProjectionDataId=sino, ReconstructionDataId=rec)
            cfg["option"] = {"FilterType": "ram-lak"}
            return a.algorithm.create(cfg), rec, (sino, rec, pid)
        raise ValueError(kind)

    def run(self, kind, g, grid, prepared, extra):
        alg, rec, handles = prepared
        t0 = time.perf_counter()
        self.astra.algorithm.run(alg)
        seconds = time.perf_counter() - t0
        out = self.astra.data2d.get(rec)[::-1][None].astype(np.float32)  # rows: -y -> +y
        return np.ascontiguousarray(out), seconds

    def release(self, prepared):
        alg, _, (sino, rec, pid) = prepared
        self.astra.algorithm.delete(alg)
        self.astra.data2d.delete([sino, rec])
        self.astra.projector.delete(pid)


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


# ---- the run -------------------------------------------------------------------------------

def run_problem(name, tools, repeat, threads, log):
    kind, make_geometry, shape, extra = PROBLEMS[name]
    g = make_geometry()
    grid = grid_for(g, shape)
    phantom = ctforge.shepp_logan(PHANTOM_MM)
    t0 = time.perf_counter()
    exact = ctforge.project_analytic(phantom, g, threads=threads)
    truth = ctforge.voxelize(phantom, grid, supersample=2, threads=threads)
    log(f"{name}: {kind}, grid {shape[::-1]} (x, y, z), {g.view_count} views of "
        f"{g.cols} x {g.rows}; data made in {time.perf_counter() - t0:.1f} s")
    data = truth if kind == "forward" else exact
    nz, ny, nx = shape
    updates = float(nx) * ny * nz * g.view_count * (extra.get("iterations", 1) * 2
                                                   if kind == "sirt" else 1)
    mask = None if kind == "forward" else fov_mask(grid)
    reference = exact if kind == "forward" else truth
    runnable = [t for t in tools if t.supports(kind)]
    times = {t.name: [] for t in runnable}
    outputs = {}
    for _ in range(repeat):
        for t in runnable:
            if isinstance(t, Ctforge):
                t0 = time.perf_counter()
                out = t.run(kind, g, grid, data, extra)
                seconds = time.perf_counter() - t0
            else:
                # Fresh inputs in the peer's types for every run, before its clock starts (ITK
                # pipelines release their inputs' buffers).
                prepared = t.prepare(kind, g, grid, data)
                out, seconds = t.run(kind, g, grid, prepared, extra)
                if hasattr(t, "release"):
                    t.release(prepared)
            times[t.name].append(seconds)
            outputs[t.name] = out
    results = {}
    base = outputs.get("ctforge")
    for t in runnable:
        out = outputs[t.name]
        if kind == "backproject":  # no truth: agreement with ctforge only
            acc = {}
        else:
            acc = metrics(out, reference, mask)
        if base is not None and t.name != "ctforge":
            acc["correlation_with_ctforge"] = float(np.corrcoef(out.ravel(), base.ravel())[0, 1])
        ts = times[t.name]
        med = statistics.median(ts)
        results[t.name] = dict(acc, median_s=med, min_s=min(ts), max_s=max(ts), runs=len(ts),
                               gups=updates / med / 1e9)
    if "ctforge" in results:
        for r in results.values():
            r["vs_ctforge"] = r["median_s"] / results["ctforge"]["median_s"]
    return {"kind": kind, "grid_xyz": list(shape[::-1]), "views": g.view_count,
            "detector": [g.cols, g.rows], "updates": updates, "tools": results}


def table(report):
    lines = ["| problem | tool | median s (min-max) | GUPS | time / ctforge | MAE | PSNR dB | "
             "corr. truth | corr. ctforge |", "|---|---|---|---|---|---|---|---|---|"]
    for name, prob in report["problems"].items():
        for tool, r in prob["tools"].items():
            def f(key, fmt):
                return fmt.format(r[key]) if key in r else "-"
            lines.append(
                f"| {name} | {tool} | {r['median_s']:.2f} ({r['min_s']:.2f}-{r['max_s']:.2f}) | "
                f"{r['gups']:.3f} | {f('vs_ctforge', '{:.2f}x')} | {f('mae', '{:.2e}')} | "
                f"{f('psnr', '{:.2f}')} | {f('correlation', '{:.4f}')} | "
                f"{f('correlation_with_ctforge', '{:.4f}')} |")
    return "\n".join(lines)


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(report["problems"])
    tools = sorted({t for p in report["problems"].values() for t in p["tools"]},
                   key=lambda t: (not t.startswith("ctforge"), t))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 4))
    width = 0.8 / max(1, len(tools))
    for i, tool in enumerate(tools):
        xs, ys, lo, hi = [], [], [], []
        for j, n in enumerate(names):
            r = report["problems"][n]["tools"].get(tool)
            if r:
                xs.append(j + (i - (len(tools) - 1) / 2) * width)
                ys.append(r["median_s"])
                lo.append(r["median_s"] - r["min_s"])
                hi.append(r["max_s"] - r["median_s"])
        ax.bar(xs, ys, width, yerr=[lo, hi], label=tool, capsize=2)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("wall time, s (median, min-max)")
    m = report["machine"]
    ax.set_title(f"{m['cpu']}, {m['threads']} threads, {report['date']}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else "GPU"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "GPU"


def plot_speedup(report, path):
    """GPU speedup of ctforge's CUDA backend per problem, against one CPU thread and against
    all of them (never only the flattering one)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names, one, all_threads = [], [], []
    for n, p in report["problems"].items():
        t = p["tools"]
        if "ctforge-cuda" in t and "ctforge" in t and "ctforge-1-thread" in t:
            names.append(n)
            gpu = t["ctforge-cuda"]["median_s"]
            one.append(t["ctforge-1-thread"]["median_s"] / gpu)
            all_threads.append(t["ctforge"]["median_s"] / gpu)
    if not names:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 4))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], one, 0.4, label="vs 1 CPU thread")
    ax.bar([x + 0.2 for x in xs], all_threads, 0.4,
           label=f"vs {report['machine']['threads']} CPU threads")
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("speedup of ctforge-cuda (wall time ratio)")
    m = report["machine"]
    ax.set_title(f"{m['cpu']}, {m.get('gpu_name', 'GPU')}, {report['date']}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(PROBLEMS),
                    help="comma-separated: " + ", ".join(PROBLEMS))
    ap.add_argument("--quick", action="store_true", help="the small problems only")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    names = [n for n in args.problems.split(",") if not args.quick or n in QUICK]
    unknown = set(names) - set(PROBLEMS)
    if unknown:
        ap.error(f"unknown problem(s): {', '.join(sorted(unknown))}")

    def log(*a):
        print(*a, file=sys.stderr, flush=True)
    tools = [Ctforge(args.threads)]
    versions = {"ctforge": ctforge.__version__}
    for maker in (lambda: Rtk(args.threads), lambda: Astra()):
        try:
            t = maker()
            tools.append(t)
            versions[t.name] = t.version
        except ImportError as e:
            log(f"note: {e}; that peer is left out (make bench-peers installs it)")
    gpu = ctforge.backend_for("auto")[0] == "cuda"
    if gpu:  # GPU speedups against one CPU thread as well as against all of them
        single = Ctforge(1)
        single.name = "ctforge-1-thread"
        tools += [single, Ctforge(args.threads, backend="cuda")]
        try:
            import astra
            if astra.use_cuda():
                tools.append(Astra(cuda=True))
        except ImportError:
            pass
    report = {"date": time.strftime("%Y-%m-%d"), "versions": versions,
              "machine": {"cpu": cpu_model(), "threads": args.threads,
                          "cores": os.cpu_count(), "gpu": gpu, "gpu_name": gpu_name() if gpu else None,
                          "python": sys.version.split()[0]},
              "repeat": args.repeat, "problems": {}}
    t0 = time.perf_counter()
    for name in names:
        report["problems"][name] = run_problem(name, tools, args.repeat, args.threads, log)
        log(table({"problems": {name: report["problems"][name]}}).splitlines()[-1])
    report["seconds"] = time.perf_counter() - t0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(report, f, indent=1)
    md = (f"{report['date']}, {report['machine']['cpu']}, {args.threads} threads, "
          f"median of {args.repeat}; versions {versions}\n\n" + table(report) + "\n")
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(md)
    plot(report, os.path.join(args.out, "peers_time.png"))
    if gpu and plot_speedup(report, os.path.join(args.out, "peers_gpu_speedup.png")):
        log(f"wrote {args.out}/peers_gpu_speedup.png")
    print(md)
    log(f"bench-peers: {report['seconds']:.0f} s; wrote {args.out}/peers.json, peers.md, "
        "peers_time.png")


if __name__ == "__main__":
    main()

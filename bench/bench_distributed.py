"""Scaling and overhead of resumable and distributed FDK (make bench-distributed).

On one problem (default: 256^3 voxels from 360 views of 256 x 256, a cone beam), measures
  * the one-shot reconstruction (ctforge.reconstruct, all threads);
  * the slab-wise one in the same process (checkpoint_dir: units recorded on disk) and its
    overhead against the one-shot;
  * ctforge.distributed.reconstruct on LocalClusters of 1, 2 and 3 worker processes (strong
    scaling: speedup and efficiency against the 1-worker cluster, and against the one-shot);
  * on each cluster: the bytes the tasks send the client (metadata only when the workers
    write the output), FDK into a Zarr array against the .h5 output, and distributed CGLS
    with one view part per worker: seconds per iteration and the bytes the client sends and
    receives per iteration (one volume each way, whatever the worker count);
  * recovery from a killed worker: CGLS on the largest cluster with a worker SIGKILLed after
    its first saved state, against the same run undisturbed;
  * lost work after SIGTERM: `ctforge recon --checkpoint-dir` stopped once a few units are
    recorded: the time from the signal to the exit, and the units recorded before and after
    the signal (work lost = what was under way and is not recorded).
Each timing is the median of --repeat runs (min and max shown). Prints a Markdown table and
writes every figure with the machine to --json.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ctforge
from bench_machine import cpu_model
from ctforge import distributed as cd


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}, out


def sigterm_lost_work(cli, path, size, planes, workdir, after_units=3):
    """Stops `ctforge recon --checkpoint-dir` with SIGTERM once `after_units` units are recorded."""
    ck = os.path.join(workdir, "ck_term")
    cmd = [cli, "recon", path, "-o", os.path.join(workdir, "term.h5"), "--size", str(size),
           "--backend", "cpu", "--unit-planes", str(planes), "--checkpoint-dir", ck, "--quiet"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)

    def units():
        try:
            return sum(n.startswith("slab_") and n.endswith(".json") for n in os.listdir(ck))
        except OSError:
            return 0
    while units() < after_units and proc.poll() is None:
        time.sleep(0.005)
    at_signal = units()
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    stop_s = time.perf_counter() - t0
    recorded = units()
    return {"exit_status": proc.returncode, "stop_seconds": stop_s,
            "units_at_signal": at_signal, "units_recorded_after_stop": recorded,
            "message": err.strip().splitlines()[-1] if err.strip() else ""}


def cgls_run(client, path, grid, parts, threads, iterations, work, **kw):
    """Distributed CGLS over `parts` view parts: seconds per iteration (from the per-iteration
    log, the setup excluded) and the client's bytes per iteration."""
    t0 = time.perf_counter()
    s = cd.reconstruct(client, path, os.path.join(work, f"cgls{parts}.h5"), grid=grid,
                       algorithm="cgls", iterations=iterations, parts=parts, backend="cpu",
                       threads=threads, **kw)
    log = s["log"]
    per_it = (log[-1]["seconds"] - log[0]["seconds"]) / max(1, len(log) - 1) \
        if len(log) > 1 else float("nan")
    return {"parts": parts, "iterations": iterations, "seconds": time.perf_counter() - t0,
            "seconds_per_iteration": per_it,
            "bytes_to_workers_per_iteration": s["bytes_to_workers"] / iterations,
            "bytes_from_workers_per_iteration": s["bytes_from_workers"] / iterations,
            "result_written_by_workers": s.get("result_written_by_workers", False),
            "attempts": s["attempts"]}


def killed_worker_recovery(client, path, grid, parts, threads, iterations, work, undisturbed):
    """CGLS with its state saved every iteration; a worker SIGKILLed once the first state is
    saved. Returns the run's seconds, the attempts and the extra time against `undisturbed`."""
    import threading
    ck = os.path.join(work, "ck_cgls_kill")
    result = {}
    pids = client.run(os.getpid)
    th = threading.Thread(target=lambda: result.update(cgls_run(
        client, path, grid, parts, threads, iterations, work, checkpoint_dir=ck,
        checkpoint_every=1)))
    th.start()
    while not os.path.exists(os.path.join(ck, "cgls_0.json")) and th.is_alive():
        time.sleep(0.01)
    killed = th.is_alive()
    if killed:
        os.kill(sorted(pids.values())[-1], signal.SIGKILL)
    th.join()
    if not result:
        return None
    result["worker_killed"] = killed
    result["extra_seconds"] = result["seconds"] - undisturbed["seconds"]
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256, help="voxels along each axis")
    ap.add_argument("--views", type=int, default=360)
    ap.add_argument("--detector", type=int, default=256, help="detector cols = rows")
    ap.add_argument("--unit-planes", type=int, default=16)
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cgls-iterations", type=int, default=4)
    ap.add_argument("--cli", default="build/apps/ctforge", help="the ctforge command line")
    ap.add_argument("--json", default="bench-out/distributed.json")
    args = ap.parse_args()
    import distributed

    cores = os.cpu_count() or 1
    n = args.size
    g = ctforge.Geometry.cone(cols=args.detector, rows=args.detector, pixel_size=1.0, sid=500,
                              sdd=1000, angles=args.views)
    grid = ctforge.default_grid(g, (n, n, n))
    updates = float(n) ** 3 * args.views
    work = tempfile.mkdtemp(prefix="ctforge_bench_dist_")
    path = os.path.join(work, "p.h5")
    t0 = time.perf_counter()
    ctforge.write_projections(path, ctforge.project_analytic(ctforge.shepp_logan(100), g), g)
    print(f"problem: {n}^3 voxels from {args.views} views of {args.detector}^2 "
          f"(simulated in {time.perf_counter() - t0:.1f} s); {cores} cores; {cpu_model()}",
          file=sys.stderr)
    p, gf = ctforge.read_projections(path)

    rows = []
    one_shot, ref = timed(lambda: ctforge.reconstruct(p, gf, grid, backend="cpu"), args.repeat)
    rows.append(("one-shot, 1 process", f"{cores} threads", one_shot))
    ck = os.path.join(work, "ck")

    def slabwise():
        return ctforge.reconstruct(p, gf, grid, backend="cpu", checkpoint_dir=ck,
                                   unit_planes=args.unit_planes)
    slab, vol = timed(slabwise, args.repeat)
    rows.append(("slab-wise (checkpointed), 1 process", f"{cores} threads", slab))
    slab["mae_vs_one_shot"] = float(np.abs(vol - ref).mean())

    scaling, recovery = {}, None
    for w in [int(x) for x in args.workers.split(",")]:
        threads = max(1, cores // w)
        cluster = distributed.LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=40)
        client = distributed.Client(cluster)
        try:
            out = os.path.join(work, f"d{w}.h5")
            t, summary = timed(lambda: cd.reconstruct(client, path, out, grid=grid,
                                                      unit_planes=args.unit_planes,
                                                      backend="cpu", threads=threads),
                               args.repeat)
            zout = os.path.join(work, f"d{w}.zarr")
            tz, zsummary = timed(lambda: cd.reconstruct(client, path, zout, grid=grid,
                                                        unit_planes=args.unit_planes,
                                                        backend="cpu", threads=threads),
                                 args.repeat)
            tz["identical_to_h5"] = bool(np.array_equal(ctforge.read_volume(zout)[0],
                                                        ctforge.read_volume(out)[0]))
            tz["bytes_to_client"] = zsummary["bytes_to_client"]
            cg = cgls_run(client, path, grid, w, threads, args.cgls_iterations, work)
            if w == max(int(x) for x in args.workers.split(",")) and w > 1:
                recovery = killed_worker_recovery(client, path, grid, w, threads,
                                                  args.cgls_iterations, work, cg)
        finally:
            client.close()
            cluster.close()
        t["identical_to_slab_wise"] = bool(np.array_equal(ctforge.read_volume(out)[0], vol))
        t["units"] = summary["units"]
        t["bytes_to_client"] = summary["bytes_to_client"]
        t["zarr"] = tz
        t["cgls"] = cg
        scaling[w] = t
        rows.append((f"distributed, {w} worker{'s' if w > 1 else ''}"
                     f"{'' if t['identical_to_slab_wise'] else ' (DIFFERS from slab-wise)'}",
                     f"{threads} thread{'s' if threads > 1 else ''} each", t))

    lost = sigterm_lost_work(args.cli, path, n, args.unit_planes, work) \
        if os.path.exists(args.cli) else None

    print("\n| run | threads | median s (min-max) | GUPS | vs one-shot |")
    print("|---|---|---|---|---|")
    for name, threads, t in rows:
        print(f"| {name} | {threads} | {t['median_s']:.2f} ({t['min_s']:.2f}-{t['max_s']:.2f}) "
              f"| {updates / t['median_s'] / 1e9:.3f} | {one_shot['median_s'] / t['median_s']:.2f}x |")
    base = scaling.get(1)
    if base:
        print("\nstrong scaling (against 1 worker): " + ", ".join(
            f"{w} workers {base['median_s'] / t['median_s']:.2f}x "
            f"(efficiency {base['median_s'] / t['median_s'] / w:.0%})" for w, t in scaling.items()))
    print(f"slab-wise overhead against one-shot: "
          f"{(slab['median_s'] / one_shot['median_s'] - 1) * 100:+.1f}% "
          f"(MAE {slab['mae_vs_one_shot']:.2e})")
    print("\n| workers | bytes to client, FDK .h5 / .zarr | FDK .zarr s (vs .h5) | CGLS s per "
          "iteration | CGLS client bytes per iteration (out / in) |")
    print("|---|---|---|---|---|")
    for w, t in scaling.items():
        z, c = t["zarr"], t["cgls"]
        print(f"| {w} | {t['bytes_to_client']} / {z['bytes_to_client']} | "
              f"{z['median_s']:.2f} ({t['median_s'] / z['median_s']:.2f}x"
              f"{'' if z['identical_to_h5'] else ', DIFFERS'}) | "
              f"{c['seconds_per_iteration']:.2f} | {c['bytes_to_workers_per_iteration']:.0f} / "
              f"{c['bytes_from_workers_per_iteration']:.0f} |")
    if recovery:
        print(f"CGLS with a worker killed after the first saved state: {recovery['seconds']:.2f} s "
              f"in {recovery['attempts']} attempts, {recovery['extra_seconds']:+.2f} s against "
              "the undisturbed run")
    if lost:
        print(f"SIGTERM after {lost['units_at_signal']} units: exit {lost['exit_status']} after "
              f"{lost['stop_seconds']:.2f} s, {lost['units_recorded_after_stop']} units recorded "
              f"(lost: the unit under way only)")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"problem": {"voxels": [n, n, n], "views": args.views,
                               "detector": [args.detector, args.detector],
                               "unit_planes": args.unit_planes},
                   "machine": {"cpu": cpu_model(), "cores": cores, "python": sys.version},
                   "ctforge": ctforge.__version__, "date": time.strftime("%Y-%m-%d"),
                   "one_shot": one_shot, "slab_wise": slab, "distributed": scaling,
                   "killed_worker_recovery": recovery,
                   "sigterm": lost}, f, indent=1)
    print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()

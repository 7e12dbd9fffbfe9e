"""CPU FDK end to end against its back-projection alone (make bench-recon-cli).

On one cone-beam problem (default: 256^3 voxels from 360 views of 512 x 512, the size of the
peers benchmark's large FDK), written by `ctforge simulate` as a user's file would be, measures
in turns (median of --repeat, min and max shown):
  * the back-projection alone: ctforge.back_project on the projections in memory (the
    vectorised voxel-driven loop FDK runs, without weights or filtering);
  * FDK in memory: ctforge.reconstruct (pre-weighting, ramp filter, back-projection);
  * `ctforge recon FILE -o OUT.h5` end to end as a separate process: reading and decompressing
    the file, FDK, compressing and writing the volume; the split the command reports.
The ratio end to end / back-projection alone is the overhead of everything around the
back-projection. Prints a Markdown table and writes every figure with the machine to --json.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import ctforge
from bench_machine import cpu_model, write_json


def stats(times):
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "runs": len(times)}


SPLIT = re.compile(r"read ([0-9.]+) s, reconstruct ([0-9.]+) s, write ([0-9.]+) s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default="build/apps/ctforge")
    ap.add_argument("--size", type=int, default=256, help="volume edge (voxels)")
    ap.add_argument("--views", type=int, default=360)
    ap.add_argument("--det", type=int, default=512, help="detector edge (pixels)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default="bench-out/recon_cli.json")
    args = ap.parse_args()

    def log(*a):
        print(*a, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="ctforge_bench_cli_") as tmp:
        # SID 500 mm, SDD 1000 mm; the detector's field of view at the isocentre is 160 mm.
        pitch = 320.0 / args.det
        g = ctforge.Geometry.cone(args.det, args.det, pitch, 500.0, 1000.0, args.views)
        geom = os.path.join(tmp, "geometry.json")
        with open(geom, "w") as f:
            f.write(g.to_json())
        proj_file = os.path.join(tmp, "projections.h5")
        log(f"simulating {args.views} x {args.det}^2 projections ...")
        subprocess.run([args.cli, "simulate", "--phantom", "shepp-logan", "--phantom-size", "150",
                        "--geometry", geom, "-o", proj_file, "--quiet"], check=True)
        proj, g = ctforge.read_projections(proj_file)
        grid = ctforge.default_grid(g, shape=(args.size,) * 3)
        out = os.path.join(tmp, "volume.h5")
        cmd = [args.cli, "recon", proj_file, "-o", out, "--size", str(args.size),
               "--threads", str(args.threads), "--backend", "cpu"]
        bp, fdk, cli, split = [], [], [], []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            ctforge.back_project(proj, g, grid, backend="cpu", threads=args.threads)
            bp.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ctforge.reconstruct(proj, g, grid, algorithm="fdk", backend="cpu",
                                threads=args.threads)
            fdk.append(time.perf_counter() - t0)
            if os.path.exists(out):
                os.remove(out)
            t0 = time.perf_counter()
            r = subprocess.run(cmd, check=True, capture_output=True, text=True)
            cli.append(time.perf_counter() - t0)
            m = SPLIT.search(r.stderr + r.stdout)
            split.append([float(x) for x in m.groups()] if m else [float("nan")] * 3)
            log(f"run {i + 1}: back-projection {bp[-1]:.2f} s, FDK {fdk[-1]:.2f} s, "
                f"ctforge recon {cli[-1]:.2f} s")
        file_mb = os.path.getsize(proj_file) / 2**20
        raw_mb = proj.nbytes / 2**20
    med = [statistics.median(c) for c in zip(*split)]
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu": cpu_model(), "threads": args.threads, "cores": os.cpu_count()},
        "problem": {"grid": [args.size] * 3, "views": args.views, "detector": [args.det] * 2,
                    "file_mib": file_mb, "projections_mib": raw_mb},
        "back_projection": stats(bp), "fdk_in_memory": stats(fdk), "cli": stats(cli),
        "cli_split_median_s": {"read": med[0], "reconstruct": med[1], "write": med[2]},
        "cli_over_back_projection": statistics.median(cli) / statistics.median(bp),
        "fdk_over_back_projection": statistics.median(fdk) / statistics.median(bp),
        "read_mib_per_s": raw_mb / med[0] if med[0] > 0 else None,
        "command": " ".join(["ctforge"] + cmd[1:]),
    }
    updates = args.size ** 3 * args.views

    def row(name, s):
        return (f"| {name} | {s['median_s']:.2f} ({s['min_s']:.2f}-{s['max_s']:.2f}) | "
                f"{updates / s['median_s'] / 1e9:.2f} | "
                f"{s['median_s'] / report['back_projection']['median_s']:.2f}x |")
    print(f"{report['date']}, {report['machine']['cpu']}, {args.threads} threads; "
          f"{args.size}^3 from {args.views} x {args.det}^2 ({raw_mb:.0f} MiB of projections, "
          f"{file_mb:.0f} MiB compressed)\n")
    print("| run | seconds, median (min-max) | GUPS | / back-projection |\n|---|---|---|---|")
    print(row("back-projection alone", report["back_projection"]))
    print(row("FDK in memory", report["fdk_in_memory"]))
    print(row("`ctforge recon` end to end", report["cli"]))
    print(f"\n`ctforge recon` reports read {med[0]:.2f} s ({report['read_mib_per_s']:.0f} MiB/s of "
          f"projections), reconstruct {med[1]:.2f} s, write {med[2]:.2f} s")
    write_json(args.json, report)
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()

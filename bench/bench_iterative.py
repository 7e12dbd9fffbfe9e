"""Time per iteration of every iterative algorithm (make bench-iterative).

For each problem (default: 128^3 from 120 views of 192 x 160, and 256^3 from 180 views of
384 x 320; cone beam, exact projections of the Shepp-Logan phantom) and algorithm, runs
ctforge.reconstruct with a few and with more iterations on the same data and takes the slope:
(t(n2) - t(n1)) / (n2 - n1) is the time of one iteration without the set-up (weights, step
sizes), which is reported separately as t(n1) - n1 * slope. Median of --repeat (min and max of
the slope shown), on every backend available (CPU; CUDA when a device is present). Prints a
Markdown table and writes every figure with the machine to --json.
"""
import argparse
import os
import statistics
import sys
import time

import ctforge
from bench_machine import cpu_model, write_json

PROBLEMS = {
    "64": dict(size=64, views=60, cols=96, rows=80),  # quick check
    "128": dict(size=128, views=120, cols=192, rows=160),
    "256": dict(size=256, views=180, cols=384, rows=320),
}
# Per-algorithm options (CGLS and FISTA-TV use the matched back-projector by default).
ALGORITHMS = {
    "sirt": {},
    "os-sart": {"subsets": 10},
    "cgls": {},
    "fista-tv": {"tv_weight": 1e-4},
    "osem": {"subsets": 10},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="128", help="comma-separated: " + ", ".join(PROBLEMS))
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--iterations", default="2,6", help="n1,n2 (the slope between them)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default="bench-out/iterative.json")
    args = ap.parse_args()
    n1, n2 = (int(x) for x in args.iterations.split(","))
    backends = ["cpu"] + (["cuda"] if ctforge.backend_for("auto")[0] == "cuda" else [])

    def log(*a):
        print(*a, file=sys.stderr, flush=True)
    results = []
    for pname in args.problems.split(","):
        p = PROBLEMS[pname]
        g = ctforge.Geometry.cone(p["cols"], p["rows"], 1.0, 600.0, 1200.0, p["views"])
        grid = ctforge.default_grid(g, shape=(p["size"],) * 3)
        proj = ctforge.project_analytic(ctforge.shepp_logan(0.9 * min(grid.shape) *
                                                            min(grid.spacing)), g)
        for algo in args.algorithms.split(","):
            for backend in backends:
                slopes, setups = [], []
                for _ in range(args.repeat):
                    t = {}
                    for n in (n1, n2):
                        t0 = time.perf_counter()
                        ctforge.reconstruct(proj, g, grid, algorithm=algo, iterations=n,
                                            backend=backend, threads=args.threads,
                                            **ALGORITHMS[algo])
                        t[n] = time.perf_counter() - t0
                    slope = (t[n2] - t[n1]) / (n2 - n1)
                    slopes.append(slope)
                    setups.append(t[n1] - n1 * slope)
                r = {"problem": pname, "algorithm": algo, "backend": backend,
                     "iteration_s": statistics.median(slopes), "min_s": min(slopes),
                     "max_s": max(slopes), "setup_s": statistics.median(setups),
                     "grid": [p["size"]] * 3, "views": p["views"],
                     "detector": [p["cols"], p["rows"]]}
                results.append(r)
                log(f"{pname} {algo} {backend}: {r['iteration_s']:.3f} s per iteration")
    report = {"date": time.strftime("%Y-%m-%d"),
              "machine": {"cpu": cpu_model(), "threads": args.threads, "cores": os.cpu_count(),
                          "backends": backends},
              "iterations": [n1, n2], "repeat": args.repeat, "results": results}
    print(f"{report['date']}, {report['machine']['cpu']}, {args.threads} threads\n")
    print("| problem | algorithm | backend | s per iteration (min-max) | set-up s |")
    print("|---|---|---|---|---|")
    for r in results:
        p = PROBLEMS[r["problem"]]
        print(f"| {p['size']}³ ← {p['views']} × {p['cols']}×{p['rows']} | {r['algorithm']} | "
              f"{r['backend']} | {r['iteration_s']:.3f} ({r['min_s']:.3f}-{r['max_s']:.3f}) | "
              f"{r['setup_s']:.2f} |")
    write_json(args.json, report)
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()

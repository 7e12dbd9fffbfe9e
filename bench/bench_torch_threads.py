"""Time of small ctforge calls next to PyTorch's thread pool (python bench/bench_torch_threads.py).

A deep-learning loop alternates PyTorch operations (which run on PyTorch's OpenMP pool) with
ctforge calls (which run on ctforge's). Each scenario runs in a fresh interpreter and times
--calls forward projections and matched back-projections of a --size^3 volume from --views
views (parallel beam, --size x --size detector), median per call, each call preceded by a small
PyTorch operation when the scenario says so:

* ``numpy``: ctforge alone (torch not imported);
* ``import``: torch imported, no torch work between the calls;
* ``interleaved``: a 256 x 256 matmul and an elementwise op on a 1M tensor before each call,
  PyTorch at its default thread count;
* ``interleaved-torch1``: the same with ``torch.set_num_threads(1)``;
* ``interleaved-threads1``: the same, ctforge called with ``threads=1``;
* ``module``: ctforge.torch.ForwardProjection / BackProjection (the layers' own thread
  choice) interleaved with the same PyTorch work.

Environment variables (OMP_WAIT_POLICY, GOMP_SPINCOUNT, OMP_NUM_THREADS) are passed through, so
``OMP_WAIT_POLICY=passive python bench/bench_torch_threads.py`` shows their effect. Prints one
line per scenario and which OpenMP runtimes the process has loaded.
"""
import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import numpy as np
scenario, size, views, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
uses_torch = scenario != "numpy"
if uses_torch:
    import torch
import ctforge
g = ctforge.Geometry.parallel(size, size, 1.0, views)
grid = ctforge.VolumeGeometry(size, size, size, (1.0, 1.0, 1.0))
x = np.random.default_rng(0).uniform(0, 1, (size, size, size)).astype(np.float32)
threads = 1 if scenario == "interleaved-threads1" else 0
if scenario == "interleaved-torch1":
    torch.set_num_threads(1)
if scenario == "module":
    import ctforge.torch as ct
    fp, bp = ct.ForwardProjection(g, grid), ct.BackProjection(g, grid)
    tx = torch.from_numpy(x)
    forward = lambda: fp(tx)
    adjoint = lambda y: bp(y)
else:
    pair = ctforge.ProjectorPair(g, grid, backend="cpu", threads=threads)
    forward = lambda: pair.apply(x)
    adjoint = lambda y: pair.apply_adjoint(y)
if scenario.startswith("interleaved") or scenario == "module":
    a = torch.rand(256, 256)
    b = torch.rand(1 << 20)
    def torch_work():
        (a @ a).sum()
        torch.sin(b).sum()
else:
    torch_work = lambda: None
y = forward()
adjoint(y)
tf, tb = [], []
for _ in range(calls):
    torch_work()
    t0 = time.perf_counter(); y = forward(); tf.append(time.perf_counter() - t0)
    torch_work()
    t0 = time.perf_counter(); adjoint(y); tb.append(time.perf_counter() - t0)
runtimes = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if "omp" in line.rsplit("/", 1)[-1]})
info = {"forward_ms": 1e3 * statistics.median(tf), "adjoint_ms": 1e3 * statistics.median(tb),
        "runtimes": runtimes}
if uses_torch:
    info["torch_threads"] = torch.get_num_threads()
print(json.dumps(info))
"""

SCENARIOS = ["numpy", "import", "interleaved", "interleaved-torch1", "interleaved-threads1",
             "module"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--views", type=int, default=32)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args()
    for scenario in args.scenarios.split(","):
        r = subprocess.run([sys.executable, "-c", CHILD, scenario, str(args.size),
                            str(args.views), str(args.calls)], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{scenario:22s} failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        info = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{scenario:22s} forward {info['forward_ms']:8.2f} ms  adjoint "
              f"{info['adjoint_ms']:8.2f} ms  torch threads {info.get('torch_threads', '-')}  "
              f"OpenMP: {', '.join(info['runtimes'])}")


if __name__ == "__main__":
    main()

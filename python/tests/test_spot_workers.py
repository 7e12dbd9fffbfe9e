"""Spot-fleet settings with real `dask scheduler` / `dask worker` processes (started and
stopped here, on 127.0.0.1): a worker sent SIGTERM (the spot notice) leaves within the notice
(30 s) after finishing or handing back its unit, and one retired by `--lifetime` leaves while
units remain; each run completes with the volume bit-identical to the one-process units, and
the run report accounts for every unit. The scheduler runs with `allowed-failures` raised, as
docs/guide/large-runs.md recommends for spot fleets."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ctforge

distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")
from ctforge import distributed as cd  # noqa: E402

DASK = os.path.join(os.path.dirname(sys.executable), "dask")
GRID = (32, 48, 48)
ENV = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="10",
           DASK_DISTRIBUTED__WORKER__DAEMON="False")


@pytest.fixture
def scheduler(tmp_path):
    if not os.path.exists(DASK):
        pytest.skip(f"the dask command line is not installed ({DASK})")
    file = tmp_path / "scheduler.json"
    proc = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                             "--no-dashboard", "--scheduler-file", str(file)],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not file.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert file.exists(), "the scheduler did not start"
    yield file
    proc.terminate()
    proc.wait(30)


def worker(scheduler_file, *extra):
    return subprocess.Popen([DASK, "worker", "--scheduler-file", str(scheduler_file),
                             "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                             "--host", "127.0.0.1", *extra],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def scan(tmp_path):
    g = ctforge.Geometry.cone(cols=48, rows=40, pixel_size=1.0, sid=200, sdd=400, angles=120)
    p = ctforge.project_analytic(ctforge.shepp_logan(40), g)
    path = tmp_path / "p.h5"
    ctforge.write_projections(path, p, g)
    return path, g, p


def recorded(ck):
    try:
        return sum(n.startswith("slab_") and n.endswith(".json") for n in os.listdir(ck))
    except OSError:
        return 0


def reference(scan, tmp_path, shape=GRID):
    p, g = ctforge.read_projections(scan[0])
    grid = ctforge.default_grid(g, shape)
    return ctforge.reconstruct(p, g, grid, checkpoint_dir=tmp_path / "one", threads=1,
                               unit_planes=1)


def run_in_thread(client, scan, tmp_path, out, shape=GRID):
    result, failure = {}, []

    def go():
        try:
            result.update(cd.reconstruct(client, scan[0], out, shape=shape, unit_planes=1,
                                         threads=1, checkpoint_dir=tmp_path / "ck",
                                         keep_units=True))
            result["ended"] = time.time()
        except BaseException as e:  # reported by the caller
            failure.append(e)
    t = threading.Thread(target=go)
    t.start()
    return t, result, failure


def test_sigterm_worker_leaves_within_the_notice(scheduler, scan, tmp_path):
    a, b = worker(scheduler), worker(scheduler)
    client = distributed.Client(scheduler_file=str(scheduler))
    try:
        client.wait_for_workers(2, timeout=60)
        t, result, failure = run_in_thread(client, scan, tmp_path, tmp_path / "v.h5")
        deadline = time.time() + 60
        while recorded(tmp_path / "ck") < 3 and time.time() < deadline:
            time.sleep(0.005)
        at_signal = recorded(tmp_path / "ck")
        t0 = time.time()
        a.send_signal(signal.SIGTERM)
        a.wait(60)
        left_after = time.time() - t0
        t.join(180)
        assert not failure, failure
        assert 3 <= at_signal < 32, "the run ended before the signal"
        assert left_after < 30, f"the worker took {left_after:.1f} s to leave"
        assert result["units"] == 32 and recorded(tmp_path / "ck") == 32
        assert np.array_equal(ctforge.read_volume(tmp_path / "v.h5")[0],
                              reference(scan, tmp_path))
        report = json.loads((tmp_path / "v.h5.report.json").read_text())
        assert sum(w["units"] for w in report["totals"]["workers"].values()) == 32
        print(f"[ metric ] SIGTERM: worker gone after {left_after:.2f} s, "
              f"{at_signal} of 32 units recorded at the signal")
    finally:
        client.close()
        for w in (a, b):
            if w.poll() is None:
                w.terminate()
                w.wait(30)


def test_lifetime_retires_a_worker_mid_run(scheduler, tmp_path):
    """`dask worker --lifetime`: the worker retires gracefully while the run goes on (it leaves
    the scheduler with units still to compute), and the volume is bit-identical."""
    g = ctforge.Geometry.cone(cols=64, rows=48, pixel_size=1.0, sid=200, sdd=400, angles=720)
    path = tmp_path / "long.h5"
    ctforge.write_projections(path, ctforge.project_analytic(ctforge.shepp_logan(40), g), g)
    scan = (path, g, None)
    shape = (96, 96, 96)
    b = worker(scheduler)
    client = distributed.Client(scheduler_file=str(scheduler))
    a = None
    try:
        client.wait_for_workers(1, timeout=60)
        a = worker(scheduler, "--no-nanny", "--lifetime", "2s")
        client.wait_for_workers(2, timeout=60)
        addr = next(w for w, pid in client.run(os.getpid).items() if pid == a.pid)
        t, result, failure = run_in_thread(client, scan, tmp_path, tmp_path / "v.h5", shape)
        deadline = time.time() + 60
        while addr in client.scheduler_info()["workers"] and time.time() < deadline:
            time.sleep(0.01)
        left_with = recorded(tmp_path / "ck")
        t.join(300)
        assert not failure, failure
        assert left_with < 96, "the run ended before the worker's lifetime"
        assert result["units"] == 96
        report = json.loads((tmp_path / "v.h5.report.json").read_text())
        assert sum(u["worker"] is not None for u in report["units"]) == 96
        assert np.array_equal(ctforge.read_volume(tmp_path / "v.h5")[0],
                              reference(scan, tmp_path, shape))
        print(f"[ metric ] --lifetime 2s: the worker left with {left_with} of 96 units recorded")
    finally:
        client.close()
        for w in (a, b):
            if w is not None and w.poll() is None:
                w.terminate()
                w.wait(30)

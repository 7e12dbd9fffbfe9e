"""ctforge.distributed on a LocalCluster of worker processes: FDK slab units equal the
one-process result bit for bit, also when a worker is killed mid-run and when the client is
killed and started again (only the missing units are computed); every iterative method over
view partitions equals the one-process method and resumes bit for bit after a killed client or
worker; simulate equals project_analytic; the command line front end."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ctforge

distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")
from ctforge import distributed as cd  # noqa: E402

GRID = (32, 48, 48)  # (nz, ny, nx)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    d = tmp_path_factory.mktemp("distributed")
    g = ctforge.Geometry.cone(cols=48, rows=40, pixel_size=1.0, sid=200, sdd=400, angles=120)
    p = ctforge.project_analytic(ctforge.shepp_logan(40), g)
    path = d / "p.h5"
    ctforge.write_projections(path, p, g)
    return d, path, g, p


def recorded_units(dir):
    return sorted(n for n in os.listdir(dir) if n.startswith("slab_") and n.endswith(".json"))


def kill_client_after_3_units(script, ck, env=None):
    """Runs the client `script` (32 units of one plane), SIGKILLs it once 3 units are recorded
    in `ck` and returns how many are recorded once the tasks already running have ended."""
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL,
                            env=dict(os.environ, **(env or {})))
    deadline = time.time() + 60
    while (not ck.exists() or len(recorded_units(ck)) < 3) and time.time() < deadline:
        assert proc.poll() is None, "the client ended before it could be killed"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)  # tasks already running when the client died may still record their unit
    recorded = len(recorded_units(ck))
    assert 3 <= recorded < 32
    return recorded


def one_process(scan, unit_planes, tmp_path, **kw):
    """The same units in this process: ctforge.reconstruct(checkpoint_dir=...) on the file."""
    p, g = ctforge.read_projections(scan[1])
    grid = ctforge.default_grid(g, GRID)
    return ctforge.reconstruct(p, g, grid, checkpoint_dir=tmp_path / "one", threads=1,
                               unit_planes=unit_planes, **kw), grid


def test_fdk_units_equal_one_process_bit_for_bit(client, scan, tmp_path):
    _, path, g, p = scan
    out = tmp_path / "v.h5"
    summary = cd.reconstruct(client, path, out, shape=GRID, unit_planes=4, threads=1)
    assert summary["units"] == 8 and summary["computed"] == 8 and summary["reused"] == 0
    vol, grid = ctforge.read_volume(out)
    ref, ref_grid = one_process(scan, 4, tmp_path)
    assert np.array_equal(vol, ref)
    assert grid.spacing == ref_grid.spacing and grid.origin == ref_grid.origin
    # ... and the one-shot volume up to float rounding (a misplaced slab or a missing row of
    # the band would be >= 1e-3 of the peak).
    whole = ctforge.reconstruct(p, g, ref_grid, threads=1)
    assert np.abs(vol - whole).mean() < 1e-6 * np.abs(whole).max()
    # The default unit directory is gone once the output holds the units.
    assert not any(n.startswith(".v.h5") for n in os.listdir(tmp_path))
    # Another output format goes through the client's memory.
    cd.reconstruct(client, path, tmp_path / "v.mha", shape=GRID, unit_planes=4, threads=1)
    assert np.array_equal(ctforge.read_volume(tmp_path / "v.mha")[0], ref)


def test_zarr_projections_as_input(client, scan, tmp_path, cli):
    """Projections in a local .zarr (ctforge convert writes their geometry with them) are
    read by the units band by band, as an HDF5 file is: FDK and CGLS from it equal the runs
    from the HDF5 file bit for bit."""
    _, path, g, p = scan
    cli("convert", path, tmp_path / "p.zarr", "--quiet")
    for algo, kw in (("fdk", dict(unit_planes=4)), ("cgls", dict(iterations=3, parts=2))):
        a = cd.reconstruct(client, path, tmp_path / f"{algo}-h5.h5", algorithm=algo,
                           shape=GRID, threads=1, **kw)
        b = cd.reconstruct(client, tmp_path / "p.zarr", tmp_path / f"{algo}-zarr.h5",
                           algorithm=algo, shape=GRID, threads=1, **kw)
        assert a["kind"] == b["kind"] == algo
        assert np.array_equal(ctforge.read_volume(tmp_path / f"{algo}-h5.h5")[0],
                              ctforge.read_volume(tmp_path / f"{algo}-zarr.h5")[0]), algo


def test_workers_write_the_h5_output_and_only_metadata_reaches_the_client(client, scan, tmp_path,
                                                                          monkeypatch):
    """An .h5 output is written by the workers into the file the client reserved: what each
    task sends back is a small dict (no planes), the volume equals the client-assembled one bit
    for bit, and a unit's late duplicate write (a worker cut off and back after the rename)
    fails on the temporary name without touching the output."""
    import pickle
    _, path, g, p = scan
    gathered, specs = [], []
    real_gather, real_futures = cd._gather, cd._unit_futures
    monkeypatch.setattr(cd, "_gather", lambda *a: gathered.extend(real_gather(*a)) or gathered)
    monkeypatch.setattr(cd, "_unit_futures",
                        lambda c, run, spec, units: specs.append(spec) or
                        real_futures(c, run, spec, units))
    out = tmp_path / "w.h5"
    summary = cd.reconstruct(client, path, out, shape=GRID, unit_planes=3, threads=1,
                             checkpoint_dir=tmp_path / "ck", keep_units=True)
    assert summary["output_writes"] == "workers" and summary["units"] == 11
    assert sorted(r["unit"] for r in gathered) == list(range(11))
    sizes = [len(pickle.dumps(r)) for r in gathered]
    assert max(sizes) < 1024, sizes
    print(f"[ metric ] bytes per task result: at most {max(sizes)}")
    vol, grid = ctforge.read_volume(out)
    # The same units assembled by the client (another format goes through its memory).
    cd.reconstruct(client, path, tmp_path / "c.mha", shape=GRID, unit_planes=3, threads=1,
                   checkpoint_dir=tmp_path / "ck", keep_units=True)
    assert np.array_equal(vol, ctforge.read_volume(tmp_path / "c.mha")[0])
    ref, ref_grid = one_process(scan, 3, tmp_path)
    assert np.array_equal(vol, ref) and grid.origin == ref_grid.origin
    # The run report beside the output: every unit, where it ran, its bytes; the totals.
    report = json.loads(pathlib.Path(summary["report"]).read_text())
    assert summary["report"] == str(out) + ".report.json"
    assert [u["planes"] for u in report["units"]] == [[k, min(k + 3, 32)] for k in range(0, 32, 3)]
    assert all(u["computed"] and u["device"] == "cpu" and u["retries"] == 0 and
               u["worker"] in summary["workers"] for u in report["units"])
    plane = 4 * GRID[1] * GRID[2]
    # Each unit wrote its record and its planes into the output: twice its planes' bytes.
    assert report["totals"]["bytes_written"] == 2 * 32 * plane
    assert report["totals"]["bytes_read"] == sum(u["bytes_read"] for u in report["units"]) > 0
    assert sum(w["units"] for w in report["totals"]["workers"].values()) == 11
    assert report["bytes_to_client"] == summary["bytes_to_client"] == sum(sizes)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".w.h5.report")]  # no temporary
    # Everything recorded already: the workers write the planes from the records (no unit is
    # computed) into a fresh output.
    gathered.clear()
    again = cd.reconstruct(client, path, tmp_path / "again.h5", shape=GRID, unit_planes=3,
                           threads=1, checkpoint_dir=tmp_path / "ck", keep_units=True)
    assert again["computed"] == 0 and again["reused"] == 11 and len(gathered) == 11
    assert np.array_equal(ctforge.read_volume(tmp_path / "again.h5")[0], ref)
    before = out.read_bytes()
    late = specs[0]
    with pytest.raises(ctforge.Error, match=re.escape(os.path.basename(late["part"]["file"]))):
        cd._slab_unit_task(late, 0)
    assert out.read_bytes() == before
    assert not [n for n in os.listdir(tmp_path) if ".part" in n]


def test_zarr_output_local_one_shard_per_unit_written_by_the_workers(client, scan, tmp_path):
    """A local .zarr output: one shard per unit, each written by its worker, the volume equal
    to the one-process units bit for bit; an earlier array of that name is replaced whole only
    once the run is complete, and no temporary is left."""
    zarr = pytest.importorskip("zarr", minversion="3", reason="zarr>=3 is not installed")
    _, path, _, _ = scan
    out = tmp_path / "v.zarr"
    ctforge.write_volume(out, np.ones(GRID, np.float32), ctforge.default_grid(scan[2], GRID))
    summary = cd.reconstruct(client, path, out, shape=GRID, unit_planes=3, threads=1,
                             checkpoint_dir=tmp_path / "ck")
    assert summary["output_writes"] == "workers" and summary["units"] == 11
    vol, grid = ctforge.read_volume(out)
    ref, ref_grid = one_process(scan, 3, tmp_path)
    assert np.array_equal(vol, ref) and grid.origin == ref_grid.origin
    arr = zarr.open_array(str(out), mode="r")
    assert arr.shards == (3, GRID[1], GRID[2]) and arr.attrs["ctforge_complete"] is True
    assert sorted(n for n in os.listdir(tmp_path) if n != "ck") == [
        "one", "v.zarr", "v.zarr.report.json"]


def test_zarr_output_on_s3_and_a_killed_client(client, scan, tmp_path, moto_endpoint,
                                               monkeypatch):
    """FDK to s3://bucket/vol.zarr (a moto test server on 127.0.0.1) over the cluster: bit for
    bit the one-process volume. A client SIGKILLed mid-run leaves the array unfinished (read
    refuses it); run again it computes only the missing units, and every shard is there."""
    pytest.importorskip("zarr", minversion="3", reason="zarr>=3 is not installed")
    import boto3
    env = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client.run(lambda: os.environ.update(env))  # the workers, started before this test
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="recon")
    _, path, _, _ = scan
    ck = tmp_path / "ck"
    url = "s3://recon/run/vol.zarr"
    script = textwrap.dedent(f"""
        import distributed, ctforge.distributed as cd
        client = distributed.Client({client.scheduler.address!r})
        cd.reconstruct(client, {str(path)!r}, {url!r}, shape={GRID!r}, unit_planes=1,
                       threads=1, checkpoint_dir={str(ck)!r})
    """)
    recorded = kill_client_after_3_units(script, ck, env)
    with pytest.raises(ctforge.Error, match="incomplete"):
        ctforge.read_volume(url)
    with pytest.raises(ctforge.UsageError, match="checkpoint_dir: needed"):
        cd.reconstruct(client, path, url, shape=GRID, unit_planes=1, threads=1)
    summary = cd.reconstruct(client, path, url, shape=GRID, unit_planes=1, threads=1,
                             checkpoint_dir=ck)
    assert summary["reused"] == recorded and summary["computed"] == 32 - recorded
    assert summary["output"] == url and summary["output_writes"] == "workers"
    vol, _ = ctforge.read_volume(url)
    ref, _ = one_process(scan, 1, tmp_path)
    assert np.array_equal(vol, ref)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="recon")["Contents"]]
    assert sorted(k for k in keys if "/c/" in k) == [f"run/vol.zarr/c/{i}/0/0" for i in
                                                      sorted(range(32), key=str)]


def test_helical_units_equal_one_process_and_one_shot(client, tmp_path):
    rows, dv = 8, 1.5
    feed = rows * dv * 300 / 600  # pitch factor 1
    g = ctforge.Geometry.helical(64, rows, 1.5, 300, 600, np.deg2rad(np.arange(720) * 3.0),
                                 pitch_factor=1.0, z_start=-3 * feed,
                                 detector_shape="cylindrical")
    p = ctforge.project_analytic(ctforge.shepp_logan(40), g)
    path = tmp_path / "h.h5"
    ctforge.write_projections(path, p, g)
    shape = (30, 48, 48)
    summary = cd.reconstruct(client, path, tmp_path / "v.h5", shape=shape, unit_planes=3,
                             threads=1)
    assert summary["units"] == 10 and summary["computed"] == 10
    vol, grid = ctforge.read_volume(tmp_path / "v.h5")
    ref = ctforge.reconstruct(p, g, grid, checkpoint_dir=tmp_path / "one", threads=1,
                              unit_planes=3)
    assert np.array_equal(vol, ref)
    # Units sum a voxel's views in other batches than one whole run: float rounding only.
    whole = ctforge.reconstruct(p, g, grid, threads=1)
    assert ctforge.default_algorithm(g) == "helical-fbp"
    assert np.abs(vol - whole).max() <= 1e-5 * np.abs(whole).max()


def test_cleaning_steps_reach_the_units(client, scan, tmp_path):
    """Each unit cleans its band of rows with the margin the steps need: the volume equals the
    one-process units of the scan cleaned whole (read_projections with the same steps), bit
    for bit; without the steps it does not (the negative control)."""
    _, _, g, p = scan
    dirty = p.copy()
    dirty.reshape(-1)[::97] += 3.0
    dirty[:, :, 20] += 0.3
    path = tmp_path / "dirty.h5"
    ctforge.write_projections(path, dirty, g)
    steps = {"zingers": 1.0, "zinger_size": 5, "rings": "sorting", "ring_size": 5}
    cd.reconstruct(client, path, tmp_path / "v.h5", shape=GRID, unit_planes=4, threads=1,
                   **steps)
    vol, _ = ctforge.read_volume(tmp_path / "v.h5")
    cleaned, _ = ctforge.read_projections(path, **steps)
    grid = ctforge.default_grid(g, GRID)
    ref = ctforge.reconstruct(cleaned, g, grid, checkpoint_dir=tmp_path / "one", threads=1,
                              unit_planes=4)
    assert np.array_equal(vol, ref)
    plain = ctforge.reconstruct(dirty, g, grid, checkpoint_dir=tmp_path / "two", threads=1,
                                unit_planes=4)
    assert np.abs(vol - plain).max() > 1e-2 * np.abs(ref).max()


def test_displaced_detector_options_reach_the_units(client, scan, tmp_path):
    """displaced_detector / offset_transition reach every unit: the one-process result with
    the same options bit for bit (not the default one); refused for SIRT."""
    _, path, g, p = scan
    kw = {"displaced_detector": "on", "offset_transition": 4.0}
    cd.reconstruct(client, path, tmp_path / "v.h5", shape=GRID, unit_planes=8, threads=1, **kw)
    vol, _ = ctforge.read_volume(tmp_path / "v.h5")
    ref, grid = one_process(scan, 8, tmp_path, **kw)
    assert np.array_equal(vol, ref)
    assert not np.array_equal(vol, ctforge.reconstruct(p, g, grid, threads=1))
    with pytest.raises(ctforge.UsageError, match="displaced_detector: does not apply"):
        cd.reconstruct(client, path, tmp_path / "s.h5", shape=GRID, algorithm="sirt",
                       displaced_detector="off")


def test_options_that_do_not_apply_are_refused_before_any_work(client, scan, tmp_path):
    # The library's table decides, as for ctforge.reconstruct: options given other than their
    # defaults for a method they do not apply to are refused, naming where they apply.
    _, path, _, _ = scan
    for algo, kw, message in (
            ("fdk", dict(iterations=3), "iterations: does not apply to algorithm fdk (only to "
                                        "sirt, os-sart, cgls, fista-tv, osem)"),
            ("fdk", dict(checkpoint_every=2), "checkpoint_every: does not apply to algorithm fdk"),
            ("sirt", dict(filter="hann"), "filter: does not apply to algorithm sirt (only to "
                                          "fdk, fbp, helical-fbp)"),
            ("fdk", dict(helical_q=0.5), "helical_q: does not apply to algorithm fdk (only to "
                                         "helical-fbp)"),
            ("sirt", dict(unit_planes=4), "unit_planes: does not apply to algorithm sirt")):
        out = tmp_path / f"{algo}.h5"
        with pytest.raises(ctforge.UsageError, match=re.escape(message)):
            cd.reconstruct(client, path, out, shape=GRID, algorithm=algo, **kw)
        assert not out.exists()


def test_worker_killed_mid_run_result_complete_and_identical(client, scan, tmp_path):
    _, path, g, p = scan
    ck = tmp_path / "ck"
    out = tmp_path / "killed.h5"
    result, failure = {}, []

    def run():
        try:
            result.update(cd.reconstruct(client, path, out, shape=GRID, unit_planes=1, threads=1,
                                         checkpoint_dir=ck, keep_units=True))
        except BaseException as e:  # reported below
            failure.append(e)

    pids = client.run(os.getpid)
    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 60
    while (not ck.exists() or len(recorded_units(ck)) < 2) and time.time() < deadline:
        time.sleep(0.002)
    at_kill = len(recorded_units(ck))
    victim = sorted(pids.values())[0]
    os.kill(victim, signal.SIGKILL)
    t.join(120)
    assert not failure, failure
    assert 2 <= at_kill < 32, "the worker was killed after the run had ended"
    assert result["units"] == 32
    assert len(recorded_units(ck)) == 32
    vol, _ = ctforge.read_volume(out)
    ref, _ = one_process(scan, 1, tmp_path)
    assert np.array_equal(vol, ref)
    # The report shows the failure: the units under way on the killed worker ran again.
    report = json.loads((tmp_path / "killed.h5.report.json").read_text())
    assert report["totals"]["retries"] >= 1
    client.wait_for_workers(2, timeout=60)  # the nanny has replaced the lost worker


def test_killed_client_started_again_computes_only_missing_units(client, scan, tmp_path):
    _, path, g, p = scan
    ck = tmp_path / "ck"
    out = tmp_path / "again.h5"
    script = textwrap.dedent(f"""
        import distributed, ctforge.distributed as cd
        client = distributed.Client({client.scheduler.address!r})
        cd.reconstruct(client, {str(path)!r}, {str(out)!r}, shape={GRID!r}, unit_planes=1,
                       threads=1, checkpoint_dir={str(ck)!r})
    """)
    recorded = kill_client_after_3_units(script, ck)
    assert not out.exists()
    summary = cd.reconstruct(client, path, out, shape=GRID, unit_planes=1, threads=1,
                             checkpoint_dir=ck)
    assert summary["reused"] == recorded
    assert summary["computed"] == 32 - recorded
    ref, _ = one_process(scan, 1, tmp_path)
    assert np.array_equal(ctforge.read_volume(out)[0], ref)
    # The output the killed client had reserved (its process is gone) was removed by the next.
    assert not [n for n in os.listdir(tmp_path) if ".part" in n]


def test_checkpoint_dir_of_another_run_is_refused(client, scan, tmp_path):
    _, path, _, _ = scan
    ck = tmp_path / "ck"
    cd.reconstruct(client, path, tmp_path / "a.h5", shape=GRID, unit_planes=8, threads=1,
                   checkpoint_dir=ck, keep_units=True)
    with pytest.raises(ctforge.UsageError, match="filter.*hann"):
        cd.reconstruct(client, path, tmp_path / "b.h5", shape=GRID, unit_planes=8, threads=1,
                       checkpoint_dir=ck, filter="hann")
    assert not (tmp_path / "b.h5").exists()
    with pytest.raises(ctforge.UsageError, match="bin_row"):
        cd.reconstruct(client, path, tmp_path / "c.h5", bin_row=2)


METHODS = [("sirt", dict(nonnegative=True)), ("os-sart", dict(subsets=4)), ("cgls", {}),
           ("fista-tv", dict(tv_weight=1e-3)), ("osem", dict(subsets=4))]


@pytest.mark.parametrize("algo,extra", METHODS, ids=[m for m, _ in METHODS])
def test_iterative_methods_over_view_partitions_equal_one_process(client, scan, tmp_path, algo,
                                                                   extra):
    """The library's own method (reconstruct_partitioned) with its views over 3 parts on the
    workers: within 1e-5 of the peak of ctforge.reconstruct (the parts' back-projections and
    dot products are summed in another order); one iteration less is far outside."""
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    kw = dict(extra, iterations=6, threads=1)
    out = tmp_path / f"{algo}.h5"
    summary = cd.reconstruct(client, path, out, algorithm=algo, grid=grid, parts=3, **kw)
    assert summary["parts"] == 3 and summary["kind"] == algo
    assert [b - a for a, b in summary["part_views"]] == [40, 40, 40]
    vol, _ = ctforge.read_volume(out)
    ref = ctforge.reconstruct(p, g, grid, algorithm=algo, **kw)
    peak = np.abs(ref).max()
    assert np.abs(vol - ref).max() <= 1e-5 * peak
    ref5 = ctforge.reconstruct(p, g, grid, algorithm=algo, **dict(kw, iterations=5))
    assert np.abs(vol - ref5).max() > 1e-3 * peak
    assert not (tmp_path / f".{algo}.h5.units").exists()  # the saved states are removed
    report = json.loads((tmp_path / f"{algo}.h5.report.json").read_text())
    assert [p["views"] for p in report["parts"]] == summary["part_views"]
    assert report["attempts"] == 1 and len(report["iterations"]) == 6
    assert sum(p["bytes_read"] for p in report["parts"]) == p.nbytes
    # The workers hold no part once the run is over.
    assert sum(client.run(lambda: len(cd._VIEW_PARTS)).values()) == 0


def test_no_volume_passes_through_the_client_while_iterating(client, scan, tmp_path,
                                                             monkeypatch):
    """The parts hold the volumes (each its planes): whatever the number of parts and
    iterations, the client sends no volume and receives none; the workers write an .h5 result
    themselves, and the client receives the result of other formats only. Control: with the
    volumes on the client, one goes each way per iteration (the parts' back-projections still
    added on the workers); both give the same volume within 1e-5 of its peak."""
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    volume_bytes = 4 * int(np.prod(grid.shape))
    runs = {n: cd.reconstruct(client, path, tmp_path / f"c{n}.h5", algorithm="cgls", grid=grid,
                              parts=n, iterations=4, threads=1) for n in (1, 2, 5)}
    for n, s in runs.items():
        assert s["bytes_from_workers"] == 0, n
        assert s["bytes_to_workers"] == 0, n
        assert s["result_written_by_workers"], n
    mha = cd.reconstruct(client, path, tmp_path / "c5.mha", algorithm="cgls", grid=grid,
                         parts=5, iterations=4, threads=1)
    assert mha["bytes_from_workers"] == volume_bytes and not mha["result_written_by_workers"]
    assert np.array_equal(ctforge.read_volume(tmp_path / "c5.mha")[0],
                          ctforge.read_volume(tmp_path / "c5.h5")[0])
    if cd._have_zarr_python():  # a .zarr result: one shard per plane, each part its own
        z = cd.reconstruct(client, path, tmp_path / "c5.zarr", algorithm="cgls", grid=grid,
                           parts=5, iterations=4, threads=1)
        assert z["bytes_from_workers"] == 0 and z["result_written_by_workers"]
        assert np.array_equal(ctforge.read_volume(tmp_path / "c5.zarr")[0],
                              ctforge.read_volume(tmp_path / "c5.h5")[0])
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # (no temporary)
    monkeypatch.setattr(cd, "_VOLUMES_ON_WORKERS", False)
    here = cd.reconstruct(client, path, tmp_path / "here.h5", algorithm="cgls", grid=grid,
                          parts=5, iterations=4, threads=1)
    # CGLS: A^T p once, then one back-projection and one forward projection per iteration.
    assert here["bytes_from_workers"] == (1 + 4) * volume_bytes
    assert here["bytes_to_workers"] == 4 * volume_bytes
    a = ctforge.read_volume(tmp_path / "c5.h5")[0]
    b = ctforge.read_volume(tmp_path / "here.h5")[0]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()


@pytest.mark.parametrize("algo,extra", [METHODS[0], METHODS[2]], ids=["sirt", "cgls"])
def test_iterative_state_resumed_bit_for_bit(client, scan, tmp_path, algo, extra):
    """The state is saved in the library's format (the one ctforge recon --checkpoint-dir
    writes); 6 iterations kept, then continued to 10: identical to the uninterrupted run. CGLS
    keeps its residual (projection-sized, gathered from the parts and sent back to them)."""
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    kw = dict(extra, iterations=10, threads=1, parts=3)
    whole = cd.reconstruct(client, path, tmp_path / "w.h5", algorithm=algo, grid=grid, **kw)
    assert whole["resumed_from"] == 0
    ck = tmp_path / "ck"
    cd.reconstruct(client, path, tmp_path / "s6.h5", algorithm=algo, grid=grid,
                   checkpoint_dir=ck, checkpoint_every=2, keep_units=True,
                   **dict(kw, iterations=6))
    stem = algo.replace("-", "_")
    assert {f"{stem}_0.json", f"{stem}_1.json", "run.json"} <= set(os.listdir(ck))
    # Fewer iterations than the kept state (4): refused rather than started over.
    with pytest.raises(ctforge.UsageError, match="after 4 iterations, more than the 3 asked"):
        cd.reconstruct(client, path, tmp_path / "s3.h5", algorithm=algo, grid=grid,
                       checkpoint_dir=ck, checkpoint_every=2, **dict(kw, iterations=3))
    assert not (tmp_path / "s3.h5").exists()
    # Another partition is another run: refused, naming it.
    with pytest.raises(ctforge.UsageError, match="parts"):
        cd.reconstruct(client, path, tmp_path / "p2.h5", algorithm=algo, grid=grid,
                       checkpoint_dir=ck, keep_units=True, **dict(kw, parts=2))
    again = cd.reconstruct(client, path, tmp_path / "s10.h5", algorithm=algo, grid=grid,
                           checkpoint_dir=ck, checkpoint_every=2, **kw)
    assert again["resumed_from"] == 4
    assert np.array_equal(ctforge.read_volume(tmp_path / "s10.h5")[0],
                          ctforge.read_volume(tmp_path / "w.h5")[0])
    assert not ck.exists() or not os.listdir(ck)  # the states are removed once it is written


def test_killed_client_iterative_resumes_bit_for_bit(client, scan, tmp_path):
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    ck = tmp_path / "ck"
    kw = dict(iterations=40, threads=1, parts=2, checkpoint_every=1)
    script = textwrap.dedent(f"""
        import distributed, ctforge, ctforge.distributed as cd
        client = distributed.Client({client.scheduler.address!r})
        grid = ctforge.VolumeGeometry(*{tuple(grid.shape)!r}, {tuple(grid.spacing)!r},
                                      {tuple(grid.origin)!r})
        cd.reconstruct(client, {str(path)!r}, {str(tmp_path / "k.h5")!r}, algorithm="cgls",
                       grid=grid, checkpoint_dir={str(ck)!r}, **{kw!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120

    def saved():
        its = []
        for s in (0, 1):
            try:
                its.append(json.loads((ck / f"cgls_{s}.json").read_text())["iterations"])
            except (OSError, ValueError, KeyError):
                pass
        return max(its, default=0)

    while saved() < 3 and time.time() < deadline:
        assert proc.poll() is None, "the client ended before it could be killed"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = saved()
    assert 3 <= at_kill < 40
    assert not (tmp_path / "k.h5").exists()
    again = cd.reconstruct(client, path, tmp_path / "k.h5", algorithm="cgls", grid=grid,
                           checkpoint_dir=ck, **kw)
    assert again["resumed_from"] >= at_kill
    whole = cd.reconstruct(client, path, tmp_path / "w.h5", algorithm="cgls", grid=grid,
                           **dict(kw, checkpoint_every=0))
    assert np.array_equal(ctforge.read_volume(tmp_path / "k.h5")[0],
                          ctforge.read_volume(tmp_path / "w.h5")[0])


def test_worker_killed_during_an_iterative_run(tmp_path, scan):
    """A worker holding parts is SIGKILLed mid-run: the attempt ends, the parts are loaded on
    the workers there are (the nanny's replacement included) and the run resumes from the saved
    state; the result is bit-identical to an uninterrupted run with the same parts."""
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    cluster = distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                                       dashboard_address=None, worker_dashboard_address=None,
                                       silence_logs=50)
    c = distributed.Client(cluster)
    try:
        kw = dict(iterations=60, threads=1, parts=3, algorithm="sirt", grid=grid)
        whole = cd.reconstruct(c, path, tmp_path / "w.h5", **kw)
        ck = tmp_path / "ck"
        result, failure = {}, []

        def run():
            try:
                result.update(cd.reconstruct(c, path, tmp_path / "k.h5", checkpoint_dir=ck,
                                             checkpoint_every=1, **kw))
            except BaseException as e:  # reported below
                failure.append(e)

        pids = c.run(os.getpid)
        t = threading.Thread(target=run)
        t.start()
        deadline = time.time() + 60
        while not (ck / "sirt_1.json").exists() and time.time() < deadline:
            time.sleep(0.005)
        os.kill(sorted(pids.values())[1], signal.SIGKILL)
        t.join(180)
        assert not failure, failure
        assert result["attempts"] >= 2, "the worker was killed after the run had ended"
        assert any("left" in n for n in result["notes"]), result["notes"]
        assert result["resumed_from"] >= 2
        report = json.loads((tmp_path / "k.h5.report.json").read_text())
        assert report["attempts"] == result["attempts"] and report["notes"] == result["notes"]
        assert np.array_equal(ctforge.read_volume(tmp_path / "k.h5")[0],
                              ctforge.read_volume(tmp_path / "w.h5")[0])
        assert whole["attempts"] == 1
    finally:
        c.close()
        cluster.close()


def test_simulate_equals_project_analytic(client, scan, tmp_path):
    _, _, g, p = scan
    out = tmp_path / "sim.h5"
    summary = cd.simulate(client, "shepp-logan", g, out, phantom_size=40, views_per_unit=17,
                          threads=1)
    assert summary["units"] == 8  # 120 views in chunks of 17
    q, g2 = ctforge.read_projections(out)
    assert np.array_equal(q, p)
    assert np.allclose(g2.views, g.views, rtol=0, atol=1e-9)
    cd.simulate(client, "shepp-logan", g, tmp_path / "noisy.h5", phantom_size=40,
                views_per_unit=50, noise_i0=1e4, seed=3, threads=1)
    noisy, _ = ctforge.read_projections(tmp_path / "noisy.h5")
    assert np.array_equal(noisy, ctforge.add_poisson_noise(p, i0=1e4, seed=3))
    with pytest.raises(ctforge.UsageError):
        cd.simulate(client, [{"center": [0, 0, 0]}], g, tmp_path / "bad.h5")


def run_front_end(args, cwd):
    return subprocess.run([sys.executable, "-m", "ctforge.distributed", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_command_line_front_end(client, scan, tmp_path):
    _, path, g, p = scan
    r = run_front_end(["recon", str(path), "-o", "cli.h5", "--scheduler",
                       client.scheduler.address, "--size-xyz", "48,48,32", "--unit-planes", "4",
                       "--threads", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "8 of 8 units computed" in r.stderr
    assert f"report {tmp_path / 'cli.h5.report.json'}" in r.stderr
    assert len(json.loads((tmp_path / "cli.h5.report.json").read_text())["units"]) == 8
    ref, _ = one_process(scan, 4, tmp_path)
    assert np.array_equal(ctforge.read_volume(tmp_path / "cli.h5")[0], ref)
    # An iterative method from the command line, without a report.
    r = run_front_end(["recon", str(path), "-o", "os.h5", "--scheduler",
                       client.scheduler.address, "--size-xyz", "24,24,16", "--algorithm",
                       "os-sart", "--subsets", "4", "--iterations", "3", "--threads", "1",
                       "--no-report"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 iterations over 2 view partitions" in r.stderr
    assert (tmp_path / "os.h5").exists() and not (tmp_path / "os.h5.report.json").exists()
    # Usage errors: exit 2 naming the option; nothing written.
    r = run_front_end(["recon", str(path), "-o", "x.h5", "--scheduler", client.scheduler.address,
                       "--size-xyz", "48,48"], tmp_path)
    assert r.returncode == 2 and "--size-xyz" in r.stderr
    r = run_front_end(["recon", "missing.h5", "-o", "x.h5", "--scheduler",
                       client.scheduler.address], tmp_path)
    assert r.returncode == 1 and "missing.h5" in r.stderr
    assert not (tmp_path / "x.h5").exists()


def test_iterative_state_in_an_s3_checkpoint_dir(client, scan, tmp_path, moto_endpoint,
                                                 monkeypatch):
    """An iterative run's state in an s3:// checkpoint directory (a moto test server on
    127.0.0.1): the library's slots reach the store as they are saved; a client that fails
    mid-run (its local copy gone) and a later run with more iterations resume from what is in
    the store, bit-identical to the uninterrupted run, and the finished run removes the
    state."""
    import boto3
    env = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="state")
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    kw = dict(algorithm="cgls", grid=grid, threads=1, parts=2, checkpoint_every=2)
    whole = cd.reconstruct(client, path, tmp_path / "w.h5", iterations=10,
                           **dict(kw, checkpoint_every=0))
    ck = "s3://state/runs/ck"

    def keys():
        r = s3.list_objects_v2(Bucket="state", Prefix="runs/ck/")
        return sorted(o["Key"].rsplit("/", 1)[1] for o in r.get("Contents", []))

    calls = []

    def fail_after_7(fraction):
        calls.append(fraction)
        if len(calls) == 7:
            raise RuntimeError("the client dies")

    with pytest.raises(RuntimeError, match="client dies"):
        cd.reconstruct(client, path, tmp_path / "k.h5", iterations=10, checkpoint_dir=ck,
                       progress=fail_after_7, **kw)
    assert {"cgls_0.f32", "cgls_0.json", "cgls_1.f32", "cgls_1.json", "run.json"} <= set(keys())
    assert not (tmp_path / "k.h5").exists()
    again = cd.reconstruct(client, path, tmp_path / "k.h5", iterations=10, checkpoint_dir=ck,
                           keep_units=True, **kw)
    assert again["resumed_from"] >= 4 and again["state_bytes_from_store"] > 0
    assert np.array_equal(ctforge.read_volume(tmp_path / "k.h5")[0],
                          ctforge.read_volume(tmp_path / "w.h5")[0])
    assert whole["resumed_from"] == 0
    # Kept (keep_units): continued to 12 iterations from the store, then removed from it.
    more = cd.reconstruct(client, path, tmp_path / "m.h5", iterations=12, checkpoint_dir=ck, **kw)
    assert more["resumed_from"] >= 8
    assert keys() == []
    # From and to object storage: the result written into s3:// by the workers (each part its
    # planes' shards), the client holding no volume.
    client.run(lambda: os.environ.update(env))  # (the workers, started before this test)
    url = "s3://state/out/it.zarr"
    s = cd.reconstruct(client, path, url, iterations=10, checkpoint_dir=ck,
                       **dict(kw, checkpoint_every=0))
    assert s["result_written_by_workers"] and s["bytes_from_workers"] == 0
    assert np.array_equal(ctforge.read_volume(url)[0], ctforge.read_volume(tmp_path / "w.h5")[0])
    assert keys() == []
    ref = cd.reconstruct(client, path, tmp_path / "r.h5", iterations=12,
                         **dict(kw, checkpoint_every=0))
    assert ref["resumed_from"] == 0
    assert np.array_equal(ctforge.read_volume(tmp_path / "m.h5")[0],
                          ctforge.read_volume(tmp_path / "r.h5")[0])
    # The workers wrote an .h5 result, then copying the state to the store fails: the reserved
    # temporary is removed at once, and no output appears.
    attempts = cd._iterative_attempts

    def then_the_store_fails(*a, **k):
        out = attempts(*a, **k)

        def push(self):
            raise OSError("the store cannot be reached")
        monkeypatch.setattr(cd._ObjectStoreState, "push", push)
        return out
    monkeypatch.setattr(cd, "_iterative_attempts", then_the_store_fails)
    # (The traceback is kept, as a notebook keeps the last one: it holds the run's frames.)
    with pytest.raises(OSError, match="cannot be reached") as failed:
        cd.reconstruct(client, path, tmp_path / "f.h5", iterations=4, checkpoint_dir=ck, **kw)
    assert failed.traceback and not (tmp_path / "f.h5").exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".f.")] == []


_CLIENT_PEAK = r"""
import json, sys
import ctforge, distributed
import ctforge.distributed as cd

def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))

address, path, out, ck, parts, on_workers = sys.argv[1:]
cd._VOLUMES_ON_WORKERS = on_workers == "1"
c = distributed.Client(address)
kw = dict(algorithm="cgls", iterations=4, threads=1, parts=int(parts), checkpoint_every=1,
          report=False)
cd.reconstruct(c, path, out + ".warm.h5", shape=(8, 16, 16), **kw)  # (the code paths loaded)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) from here
base = status("VmRSS:")
cd.reconstruct(c, path, out, shape=(64, 256, 256), checkpoint_dir=ck, **kw)
print(json.dumps({"growth": status("VmHWM:") - base}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"),
                    reason="needs Linux /proc/self/clear_refs to measure the client's peak memory")
def test_client_peak_memory_stays_below_two_volumes(client, scan, tmp_path):
    """The client of a distributed CGLS run (its state saved every iteration) holds at most the
    result and one saved array at a time: its peak memory grows by less than two volumes, for 2
    and 6 parts. Control: with the volumes on the client (x, d and A^T r, the state copied to
    save it) it grows by more than three."""
    _, path, g, p = scan
    volume_bytes = 4 * 64 * 256 * 256
    address = client.scheduler.address
    # Large blocks mapped and returned one by one, so that a freed volume is not counted again.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")

    def growth(parts, on_workers, name):
        out = subprocess.run(
            [sys.executable, "-c", _CLIENT_PEAK, address, str(path), str(tmp_path / f"{name}.h5"),
             str(tmp_path / f"{name}.ck"), str(parts), "1" if on_workers else "0"],
            capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])["growth"] / volume_bytes

    held = {n: growth(n, True, f"held{n}") for n in (2, 6)}
    here = growth(2, False, "here")
    print(f"client peak growth in volumes: {held} on the workers, {here:.2f} on the client")
    assert all(v < 2.0 for v in held.values()), held
    assert here > 3.0, here
    a = ctforge.read_volume(tmp_path / "held2.h5")[0]
    b = ctforge.read_volume(tmp_path / "here.h5")[0]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()


def test_a_part_step_never_runs_twice():
    """Dask recomputes a result lost with a worker by running its tasks again; a part's step
    changes its buffers, so a second run of one is refused (PartLost: the attempt resumes from
    the saved state) rather than applied twice."""
    spec = {"session": "step-test", "parts": [[0, 4]]}
    calls = []
    step = lambda spec, k, value: calls.append(value)  # noqa: E731
    cd._step_once(step, spec, 0, 0, "load")
    cd._step_once(step, spec, 0, 1, "axpby")
    with pytest.raises(cd.PartLost, match="worker left.*step 1 of views 0..3"):
        cd._step_once(step, spec, 0, 1, "axpby again")
    assert calls == ["load", "axpby"]
    cd._drop_parts("step-test")  # a new session of the same name starts afresh
    cd._step_once(step, spec, 0, 0, "load")
    assert calls == ["load", "axpby", "load"]


def test_resumed_with_workers_in_the_client_process(scan, tmp_path):
    """Workers in the client's own process keep what it scatters by reference: the saved state
    uploaded on resume must not be read after the call that uploaded it (the library frees it).
    CGLS (a volume and the projection-sized residual) resumed from 6 to 10 iterations equals
    the uninterrupted run."""
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    c = distributed.Client(processes=False, n_workers=2, threads_per_worker=1,
                           dashboard_address=None)
    try:
        kw = dict(algorithm="cgls", grid=grid, iterations=10, threads=1, parts=3)
        cd.reconstruct(c, path, tmp_path / "w.h5", **kw)
        ck = tmp_path / "ck"
        cd.reconstruct(c, path, tmp_path / "s6.h5", checkpoint_dir=ck, checkpoint_every=2,
                       keep_units=True, **dict(kw, iterations=6))
        again = cd.reconstruct(c, path, tmp_path / "s10.h5", checkpoint_dir=ck,
                               checkpoint_every=2, **kw)
    finally:
        c.close()
    assert again["resumed_from"] == 4
    assert np.array_equal(ctforge.read_volume(tmp_path / "s10.h5")[0],
                          ctforge.read_volume(tmp_path / "w.h5")[0])


def test_a_state_saved_with_the_volumes_on_the_client_continues(client, scan, tmp_path,
                                                                monkeypatch):
    """A checkpoint directory from before the parts held the volumes (no planes in its record)
    is continued with the volumes on the client, bit for bit, with a note."""
    _, path, g, p = scan
    grid = ctforge.default_grid(g, (16, 24, 24))
    kw = dict(algorithm="sirt", grid=grid, iterations=8, threads=1, parts=2)
    ck = tmp_path / "ck"
    monkeypatch.setattr(cd, "_VOLUMES_ON_WORKERS", False)
    whole = cd.reconstruct(client, path, tmp_path / "w.h5", **kw)
    cd.reconstruct(client, path, tmp_path / "s4.h5", checkpoint_dir=ck, checkpoint_every=2,
                   keep_units=True, **dict(kw, iterations=4))
    monkeypatch.setattr(cd, "_VOLUMES_ON_WORKERS", True)
    again = cd.reconstruct(client, path, tmp_path / "s8.h5", checkpoint_dir=ck,
                           checkpoint_every=2, **kw)
    assert again["resumed_from"] == 2
    assert any("volumes on the client" in n for n in again["notes"]), again["notes"]
    assert np.array_equal(ctforge.read_volume(tmp_path / "s8.h5")[0],
                          ctforge.read_volume(tmp_path / "w.h5")[0])
    assert whole["bytes_to_workers"] > 0

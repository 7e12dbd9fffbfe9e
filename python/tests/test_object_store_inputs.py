"""Projection files read straight from S3 (s3://bucket/key, a moto test server on 127.0.0.1
started by the fixture): HDF5 through the read-only S3 driver by ranged GETs, in Python, on the
command line, and by the units of a distributed run that writes its volume back to S3. Each
read equals the local file's bit for bit; a missing object, a bad URL and temporary credentials
the driver cannot send are refused naming the URL."""
import os
import subprocess

import numpy as np
import pytest

import ctforge

boto3 = pytest.importorskip("boto3", reason="boto3 is not installed")


@pytest.fixture
def s3(moto_endpoint, monkeypatch):
    env = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"scans-{os.getpid()}-{np.random.randint(1 << 30)}"
    client.create_bucket(Bucket=bucket)
    return client, bucket, env


@pytest.fixture
def scan(tmp_path):
    g = ctforge.Geometry.cone(cols=37, rows=21, pixel_size=1.0, sid=200, sdd=400, angles=45)
    p = ctforge.project_analytic(ctforge.shepp_logan(30), g)
    path = tmp_path / "p.h5"
    ctforge.write_projections(path, p, g)
    return path, g, p


def test_projections_read_from_s3_equal_the_local_file(s3, scan):
    client, bucket, _ = s3
    path, g, p = scan
    client.upload_file(str(path), bucket, "raw/scan 1.h5")  # a key with a space
    url = f"s3://{bucket}/raw/scan 1.h5"
    q, gq = ctforge.read_projections(url)
    assert np.array_equal(q, p)
    assert gq.to_json() == ctforge.read_projections(path)[1].to_json()
    band, _ = ctforge.read_projections(url, band=(5, 12))
    assert np.array_equal(band, p[:, 5:12])
    assert ctforge.read_projection_geometry(url).view_count == 45


def test_s3_errors_name_the_url(s3, scan, monkeypatch):
    client, bucket, _ = s3
    path, _, _ = scan
    with pytest.raises(ctforge.Error, match=f"s3://{bucket}/nothing.h5: cannot open it"):
        ctforge.read_projections(f"s3://{bucket}/nothing.h5")
    with pytest.raises(ctforge.UsageError, match="expected s3://bucket/key"):
        ctforge.read_projections("s3://only-a-bucket")
    client.upload_file(str(path), bucket, "p.h5")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "temporary")
    with pytest.raises(ctforge.UsageError, match="AWS_SESSION_TOKEN"):
        ctforge.read_projections(f"s3://{bucket}/p.h5")


def test_command_line_reconstructs_from_s3(s3, scan, tmp_path):
    client, bucket, env = s3
    path, _, _ = scan
    client.upload_file(str(path), bucket, "p.h5")
    cli = os.environ.get("CTFORGE_CLI", "build/apps/ctforge")
    if not os.path.exists(cli):
        pytest.skip(f"the command line is not built ({cli})")
    run_env = dict(os.environ, **env)
    args = ["recon", "--size", "24", "--backend", "cpu", "--quiet"]
    r = subprocess.run([cli, *args, f"s3://{bucket}/p.h5", "-o", str(tmp_path / "s3.h5")],
                       env=run_env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([cli, *args, str(path), "-o", str(tmp_path / "local.h5")], env=run_env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(ctforge.read_volume(tmp_path / "s3.h5")[0],
                          ctforge.read_volume(tmp_path / "local.h5")[0])
    r = subprocess.run([cli, *args, f"s3://{bucket}/missing.h5", "-o", str(tmp_path / "m.h5")],
                       env=run_env, capture_output=True, text=True)
    assert r.returncode == 1
    assert f"s3://{bucket}/missing.h5: cannot open it" in r.stderr
    assert not (tmp_path / "m.h5").exists()


def test_distributed_from_s3_to_s3(s3, scan, tmp_path):
    """The units read their rows from s3://.../p.h5 and write their shards into
    s3://.../vol.zarr: nothing but the geometry and metadata reach the client."""
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")
    pytest.importorskip("zarr", minversion="3", reason="zarr>=3 is not installed")
    from ctforge import distributed as cd
    client_s3, bucket, env = s3
    path, g, p = scan
    client_s3.upload_file(str(path), bucket, "p.h5")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    c = distributed.Client(cluster)
    try:
        c.run(lambda: os.environ.update(env))
        grid = ctforge.default_grid(g, (12, 24, 24))
        url = f"s3://{bucket}/out/vol.zarr"
        s = cd.reconstruct(c, f"s3://{bucket}/p.h5", url, grid=grid, unit_planes=3, threads=1,
                           checkpoint_dir=tmp_path / "ck")
        assert s["output"] == url and s["output_writes"] == "workers" and s["units"] == 4
        assert s["bytes_to_client"] < 1024 * s["units"]
        ref = ctforge.reconstruct(p, g, grid, threads=1, checkpoint_dir=tmp_path / "one",
                                  unit_planes=3)
        assert np.array_equal(ctforge.read_volume(url)[0], ref)
        # An iterative method over view parts read from S3 too.
        it = cd.reconstruct(c, f"s3://{bucket}/p.h5", tmp_path / "cgls.h5", grid=grid,
                            algorithm="cgls", iterations=3, threads=1, parts=2)
        assert it["attempts"] == 1
        ref_it = ctforge.reconstruct(p, g, grid, algorithm="cgls", iterations=3, threads=1)
        vol = ctforge.read_volume(tmp_path / "cgls.h5")[0]
        assert np.abs(vol - ref_it).max() <= 1e-5 * np.abs(ref_it).max()
        # An s3:// URL naming an .h5 file: that file, one object (the client writes it).
        h5 = f"s3://{bucket}/out/vol.h5"
        s = cd.reconstruct(c, f"s3://{bucket}/p.h5", h5, grid=grid, unit_planes=3, threads=1,
                           checkpoint_dir=tmp_path / "ck_h5")
        assert s["output_writes"] == "client"
        client_s3.download_file(bucket, "out/vol.h5", str(tmp_path / "back.h5"))
        assert np.array_equal(ctforge.read_volume(tmp_path / "back.h5")[0], ref)
        assert np.array_equal(ctforge.read_volume(h5)[0], ref)  # (HDF5 read in place)
    finally:
        c.close()
        cluster.close()


def _dask_with_env(env, n=2):
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")
    pytest.importorskip("zarr", minversion="3", reason="zarr>=3 is not installed")
    cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    c = distributed.Client(cluster)
    c.run(lambda: os.environ.update(env))
    return cluster, c


@pytest.mark.parametrize("write_once", [True, False], ids=["if_none_match", "unique_keys"])
def test_units_recorded_in_s3_without_a_shared_file_system(s3, scan, tmp_path, write_once,
                                                           monkeypatch):
    """checkpoint_dir=s3://...: a unit's record is its shard in the s3:// Zarr output plus a
    marker object (its checksum), written once where the store honours If-None-Match (moto
    does; the probe finds it) or under a unique key where it does not (forced here). The
    volume equals the one-process units bit for bit; an unfinished array is resumed computing
    only the units without a valid marker (a marker whose shard no longer checks out is not
    trusted); the markers go once the array is finished."""
    from ctforge import distributed as cd
    from ctforge import zarr_volumes as zv
    client_s3, bucket, env = s3
    path, g, p = scan
    client_s3.upload_file(str(path), bucket, "p.h5")
    if not write_once:
        monkeypatch.setattr(cd, "_probe_write_once", lambda fs, d: False)
    else:
        assert cd._probe_write_once(cd._object_fs(f"s3://{bucket}/x"), f"s3://{bucket}/x")
    cluster, c = _dask_with_env(env)
    try:
        grid = ctforge.default_grid(g, (12, 24, 24))
        url, ck = f"s3://{bucket}/vol.zarr", f"s3://{bucket}/units"
        kw = dict(grid=grid, unit_planes=3, threads=1, checkpoint_dir=ck)
        ref = ctforge.reconstruct(p, g, grid, threads=1, checkpoint_dir=tmp_path / "one",
                                  unit_planes=3)
        s = cd.reconstruct(c, f"s3://{bucket}/p.h5", url, keep_units=True, **kw)
        assert s["markers"] == ("If-None-Match" if write_once else "unique keys")
        assert s["computed"] == 4 and s["reused"] == 0
        assert np.array_equal(ctforge.read_volume(url)[0], ref)
        keys = sorted(o["Key"] for o in client_s3.list_objects_v2(
            Bucket=bucket, Prefix="units/")["Contents"])
        assert len([k for k in keys if k.startswith("units/slab_")]) == 4
        assert all(k.count(".") == (1 if write_once else 2) for k in keys
                   if k.startswith("units/slab_"))
        # As a killed client leaves it: the array unfinished, two units' shards gone, one of
        # them with its marker (a shard that does not check out is not trusted).
        arr_meta = client_s3.get_object(Bucket=bucket, Key="vol.zarr/zarr.json")["Body"].read()
        import json
        meta = json.loads(arr_meta)
        meta["attributes"]["ctforge_complete"] = False
        client_s3.put_object(Bucket=bucket, Key="vol.zarr/zarr.json",
                             Body=json.dumps(meta).encode())
        client_s3.delete_object(Bucket=bucket, Key="vol.zarr/c/1/0/0")
        client_s3.delete_object(Bucket=bucket, Key="vol.zarr/c/3/0/0")
        marker3 = [k for k in keys if k.startswith("units/slab_000009_000012")]
        client_s3.delete_object(Bucket=bucket, Key=marker3[0])
        with pytest.raises(ctforge.Error, match="incomplete"):
            ctforge.read_volume(url)
        again = cd.reconstruct(c, f"s3://{bucket}/p.h5", url, **kw)
        assert again["computed"] == 2 and again["reused"] == 2
        assert np.array_equal(ctforge.read_volume(url)[0], ref)
        left = client_s3.list_objects_v2(Bucket=bucket, Prefix="units/").get("Contents", [])
        assert not left  # markers and run record removed once the array is finished
        report = json.loads(client_s3.get_object(Bucket=bucket, Key="vol.zarr.report.json")
                            ["Body"].read())
        assert [u["computed"] for u in report["units"]] == [False, True, False, True]
        # Refused: an s3:// directory for the FDK units of an .h5 output (the iterative
        # methods keep their state there: test_distributed.py).
        with pytest.raises(ctforge.UsageError, match="s3:// Zarr output"):
            cd.reconstruct(c, f"s3://{bucket}/p.h5", tmp_path / "v.h5", **kw)
        assert zv.read_zarr_planes(url, 0, 3).shape == (3, 24, 24)
    finally:
        c.close()
        cluster.close()


def test_a_real_dataexchange_scan_read_from_s3(s3, data_dir):
    """data/dxchange/tooth.h5 (a real DataExchange scan with flats and darks, see
    data/README.md) read from S3 equals the local read, values and geometry."""
    client, bucket, _ = s3
    local = data_dir / "dxchange" / "tooth.h5"
    if not local.exists():
        pytest.skip(f"{local} is not in this checkout")
    client.upload_file(str(local), bucket, "tooth.h5")
    a, ga = ctforge.read_projections(local)
    b, gb = ctforge.read_projections(f"s3://{bucket}/tooth.h5")
    assert a.shape == (181, 2, 640) and np.array_equal(a, b)
    assert ga.to_json() == gb.to_json()

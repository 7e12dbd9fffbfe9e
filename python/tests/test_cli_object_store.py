"""The command line reading and writing s3:// URLs (apps/object_paths.cpp, src/io/s3_client.cpp).

The store is moto's S3 server (a test server: objects in its memory) started by the fixture in
a process of its own on 127.0.0.1, with request signatures checked: the first requests create a
user and its access key, every later request must carry a valid AWS Signature Version 4 of that
key (a wrong secret is the negative control). Each output stored at a URL equals, bit for bit,
the same command's output written to a local path; each input read from a URL gives the result
of the local file."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ctforge

boto3 = pytest.importorskip("boto3", reason="boto3 is not installed")
pytest.importorskip("moto.server", reason="moto[server] is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
# (absolute: the tests run the command line in their own directories)
CLI = pathlib.Path(os.environ.get("CTFORGE_CLI", ROOT / "build" / "apps" / "ctforge")).absolute()

_SERVER = r"""
import os, sys, time
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"   # the user, its policy and its key
from moto.server import ThreadedMotoServer
import boto3
s = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
s.start()
host, port = s.get_host_and_port()
ep = f"http://{host}:{port}"
iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam.create_user(UserName="ctforge-tests")
iam.put_user_policy(UserName="ctforge-tests", PolicyName="all", PolicyDocument=
    '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}')
k = iam.create_access_key(UserName="ctforge-tests")["AccessKey"]
print(ep, k["AccessKeyId"], k["SecretAccessKey"], flush=True)
sys.stdin.read()   # until the test session closes the pipe
s.stop()
"""


@pytest.fixture(scope="module")
def store():
    """(endpoint, key id, secret) of a signature-checking moto server, stopped after the module."""
    if not CLI.exists():
        pytest.skip(f"the ctforge command line is not built ({CLI}); set CTFORGE_CLI")
    p = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    if len(line) != 3:
        p.kill()
        pytest.fail("the moto server did not start")
    yield tuple(line)
    p.stdin.close()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()


@pytest.fixture
def s3(store, tmp_path):
    """A fresh bucket; the environment the command line needs; a run() of the command line with
    TMPDIR in the test's directory (so that a staging directory left behind is seen)."""
    ep, key, secret = store
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k != "CTFORGE_S3_PART_SIZE"}
    env.update(AWS_ENDPOINT_URL=ep, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
               AWS_REGION="us-east-1", TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    client = boto3.client("s3", endpoint_url=ep, region_name="us-east-1",
                          aws_access_key_id=key, aws_secret_access_key=secret)
    bucket = f"b{np.random.randint(1 << 30)}"
    client.create_bucket(Bucket=bucket)

    def run(*args, extra=None, expect=0):
        r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                           env={**env, **(extra or {})}, cwd=tmp_path)
        assert r.returncode == expect, f"ctforge {' '.join(map(str, args))} -> {r.returncode}\n{r.stderr}"
        return r

    class S3:
        pass

    s = S3()
    s.client, s.bucket, s.env, s.run, s.tmp = client, bucket, env, run, tmp_path
    s.url = lambda key: f"s3://{bucket}/{key}"
    s.get = lambda key: client.get_object(Bucket=bucket, Key=key)["Body"].read()
    s.keys = lambda prefix="": sorted(o["Key"] for o in client.list_objects_v2(
        Bucket=bucket, Prefix=prefix).get("Contents", []))
    yield s
    assert list((tmp_path / "tmp").iterdir()) == [], "a staging directory was left behind"


@pytest.fixture
def scan(tmp_path):
    g = ctforge.Geometry.cone(cols=41, rows=23, pixel_size=1.5, sid=300, sdd=600, angles=60)
    (tmp_path / "g.json").write_text(g.to_json())
    return tmp_path / "g.json"


def test_simulate_and_recon_to_and_from_s3_equal_local_runs(s3, scan):
    """ctforge simulate -o s3://.../p.h5; ctforge recon s3://.../p.h5 -o s3://.../vol.zarr,
    .h5 and .mha, with a preview: every stored object equals the local run's file."""
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", s3.url("run/p.h5"), "--quiet")
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", "p.h5", "--quiet")
    p_local = ctforge.read_projections(s3.tmp / "p.h5")[0]
    (s3.tmp / "back.h5").write_bytes(s3.get("run/p.h5"))
    assert np.array_equal(ctforge.read_projections(s3.tmp / "back.h5")[0], p_local)

    for name in ("vol.h5", "vol.mha"):
        r = s3.run("recon", s3.url("run/p.h5"), "-o", s3.url(f"run/{name}"), "--size", 31,
                   "--preview", s3.url(f"run/{name}.png"))
        assert f"wrote {s3.url('run/' + name)}" in r.stderr  # messages name the URL, not the stage
        s3.run("recon", "p.h5", "-o", name, "--size", 31, "--preview", f"{name}.png", "--quiet")
        if name.endswith(".h5"):
            a = ctforge.read_volume(s3.tmp / name)[0]
            (s3.tmp / "back.h5").write_bytes(s3.get(f"run/{name}"))
            assert np.array_equal(ctforge.read_volume(s3.tmp / "back.h5")[0], a)
        else:
            assert s3.get(f"run/{name}") == (s3.tmp / name).read_bytes()
        assert s3.get(f"run/{name}.png") == (s3.tmp / f"{name}.png").read_bytes()

    # A detached header: its data file is stored beside it, and read back with it.
    s3.run("recon", s3.url("run/p.h5"), "-o", s3.url("run/vol.mhd"), "--size", 31, "--quiet")
    s3.run("recon", "p.h5", "-o", "vol.mhd", "--size", 31, "--quiet")
    local = sorted(p.name for p in s3.tmp.glob("vol.*raw"))
    assert len(local) == 1 and s3.keys("run/vol.") == sorted(
        ["run/vol.h5", "run/vol.h5.png", "run/vol.mha", "run/vol.mha.png", "run/vol.mhd",
         "run/" + local[0]])
    assert s3.get("run/" + local[0]) == (s3.tmp / local[0]).read_bytes()
    r = s3.run("compare", s3.url("run/vol.mhd"), "vol.h5")
    assert "RMSE: 0\n" in r.stdout, r.stdout

    s3.run("recon", s3.url("run/p.h5"), "-o", s3.url("run/vol.zarr"), "--size", 31, "--quiet")
    keys = s3.keys("run/vol.zarr/")
    assert "run/vol.zarr/zarr.json" in keys and len(keys) >= 2
    meta = json.loads(s3.get("run/vol.zarr/zarr.json"))
    assert meta["attributes"]["ctforge_complete"] is True
    # Read back by the command line (the prefix downloaded) and compared with the local .h5.
    r = s3.run("compare", s3.url("run/vol.zarr"), "vol.h5")
    assert "RMSE: 0\n" in r.stdout, r.stdout
    r = s3.run("info", s3.url("run/vol.zarr"))
    assert r.stdout.startswith(s3.url("run/vol.zarr") + ": Zarr v3 array"), r.stdout


def test_zarr_projections_from_s3_reconstruct_like_the_local_file(s3, scan, tmp_path):
    """convert to s3://.../proj.zarr, then recon from it (every object under the prefix is
    downloaded): the same volume as from the local .h5."""
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", "p.h5", "--quiet")
    s3.run("convert", "p.h5", s3.url("in/proj.zarr"), "--quiet")
    assert s3.keys("in/proj.zarr/")
    s3.run("recon", s3.url("in/proj.zarr"), "-o", "from_s3.h5", "--size", 27, "--quiet")
    s3.run("recon", "p.h5", "-o", "local.h5", "--size", 27, "--quiet")
    assert np.array_equal(ctforge.read_volume(tmp_path / "from_s3.h5")[0],
                          ctforge.read_volume(tmp_path / "local.h5")[0])


def test_large_output_goes_up_in_parts(s3, scan, tmp_path):
    """A 6.6 MB volume with parts of 5 MiB (the store's smallest): a multipart upload whose
    object equals the local file, and no unfinished upload left in the bucket."""
    part = {"CTFORGE_S3_PART_SIZE": str(5 << 20)}
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", "p.h5", "--quiet")
    s3.run("recon", "p.h5", "-o", s3.url("big.mha"), "--size", 118, "--quiet", extra=part)
    s3.run("recon", "p.h5", "-o", "big.mha", "--size", 118, "--quiet")
    local = (tmp_path / "big.mha").read_bytes()
    assert len(local) > (5 << 20)
    head = s3.client.head_object(Bucket=s3.bucket, Key="big.mha")
    assert head["ETag"].strip('"').endswith("-2"), head["ETag"]  # two parts
    assert s3.get("big.mha") == local
    assert not s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    r = s3.run("recon", "p.h5", "-o", s3.url("x.h5"), "--size", 9, "--quiet",
               extra={"CTFORGE_S3_PART_SIZE": "1000"}, expect=2)
    assert "CTFORGE_S3_PART_SIZE" in r.stderr and "5 MiB" in r.stderr
    assert "x.h5" not in s3.keys()


def test_a_wrong_secret_is_refused_by_the_store_and_nothing_is_stored(s3, scan):
    """The negative control of the signatures: the same request signed with another secret is
    refused (HTTP 403 SignatureDoesNotMatch, naming the URL), exit 1, no object, no stage."""
    s3.run("simulate", "--phantom", "shepp-logan", "--geometry", scan, "-o", "p.h5", "--quiet")
    r = s3.run("recon", "p.h5", "-o", s3.url("vol.h5"), "--size", 9, "--quiet",
               extra={"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, expect=1)
    assert s3.url("vol.h5") in r.stderr and "403 SignatureDoesNotMatch" in r.stderr, r.stderr
    assert s3.keys() == []
    r = s3.run("recon", "p.h5", "-o", s3.url("vol.h5"), "--size", 9, "--quiet",
               extra={"AWS_SECRET_ACCESS_KEY": "", "AWS_ACCESS_KEY_ID": ""}, expect=1)
    assert "unsigned" in r.stderr, r.stderr
    r = s3.run("recon", "p.h5", "-o", f"s3://no-such-bucket-{os.getpid()}/v.h5", "--size", 9,
               "--quiet", expect=1)
    assert "NoSuchBucket" in r.stderr, r.stderr


def test_failed_or_interrupted_runs_keep_the_earlier_object(s3, scan):
    """An earlier output stays as it was when a run fails (a missing input) or is stopped by
    SIGTERM (exit 143); neither leaves a staging directory (the fixture checks)."""
    s3.run("simulate", "--phantom", "shepp-logan", "--geometry", scan, "-o", "p.h5", "--quiet")
    s3.client.put_object(Bucket=s3.bucket, Key="vol.h5", Body=b"earlier")
    r = s3.run("recon", s3.url("missing.h5"), "-o", s3.url("vol.h5"), "--quiet", expect=1)
    assert s3.url("missing.h5") in r.stderr
    r = s3.run("recon", s3.url("missing.tif"), "-o", s3.url("vol.h5"), "--quiet", expect=1)
    assert "no such object" in r.stderr and s3.url("missing.tif") in r.stderr, r.stderr
    assert s3.get("vol.h5") == b"earlier"

    # The input downloaded (a Zarr array: directories 4 levels deep in the stage), SIGTERM
    # as soon as it is there, and again 3 s into the iterations.
    s3.run("convert", "p.h5", s3.url("proj.zarr"), "--quiet")
    for wait in (0.0, 3.0):
        p = subprocess.Popen([str(CLI), "recon", s3.url("proj.zarr"), "-o", s3.url("vol.h5"),
                              "--algorithm", "sirt", "--iterations", "100000", "--size", "64",
                              "--quiet"], env=s3.env, cwd=s3.tmp, stderr=subprocess.PIPE,
                             text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not list((s3.tmp / "tmp").glob("*/in-0/proj.zarr/zarr.json")):
            time.sleep(0.01)
        time.sleep(wait)
        p.send_signal(signal.SIGTERM)
        # 143: the run stopped at its next iteration; -15: the signal came before the run had
        # started, and the handler that removes partial outputs let it end the process.
        assert p.wait(timeout=60) in (143, -signal.SIGTERM), p.stderr.read()
        assert list((s3.tmp / "tmp").iterdir()) == [], f"stage left after SIGTERM at +{wait} s"
    assert s3.get("vol.h5") == b"earlier"


def test_urls_refused_where_they_cannot_work(s3, scan):
    """An output naming its input's URL, and --checkpoint-dir at a URL: usage errors (exit 2)
    naming the options, before anything runs."""
    s3.run("simulate", "--phantom", "shepp-logan", "--geometry", scan, "-o", s3.url("p.h5"),
           "--quiet")
    r = s3.run("convert", s3.url("p.h5"), s3.url("p.h5"), expect=2)
    assert "replace the input" in r.stderr, r.stderr
    assert s3.keys() == ["p.h5"]
    r = s3.run("recon", s3.url("p.h5"), "-o", s3.url("v.png"), "--preview", s3.url("v.png"),
               expect=2)
    assert "--output and --preview: both name" in r.stderr, r.stderr
    r = s3.run("recon", "p.h5", "-o", "v.h5", "--checkpoint-dir", s3.url("ck"), expect=2)
    assert "--checkpoint-dir" in r.stderr and "local path" in r.stderr, r.stderr
    r = s3.run("recon", "p.h5", "-o", "s3://bucket-only", expect=2)
    assert "s3://bucket/key" in r.stderr, r.stderr


class _Recorder:
    """A minimal S3 stand-in on 127.0.0.1 (unsigned requests): stores PUT bodies, answers HEAD
    with their sizes and listings with their keys, records every request, and answers 503 to the PUTs of keys `failing`
    names (the store failing mid-upload)."""

    def __init__(self, failing=()):
        import http.server
        import threading
        rec = self
        self.objects, self.log, self.failing = {}, [], tuple(failing)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self, status, body=b""):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_PUT(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                rec.log.append(("PUT", self.path, body))
                if any(f in self.path for f in rec.failing):
                    return self._answer(503, b"<Error><Code>SlowDown</Code></Error>")
                rec.objects[self.path] = body
                self._answer(200)

            def do_GET(self):  # ListObjectsV2 only
                from urllib.parse import parse_qs, urlsplit
                u = urlsplit(self.path)
                rec.log.append(("GET", self.path, b""))
                prefix = u.path + "/" + parse_qs(u.query).get("prefix", [""])[0]
                keys = "".join(f"<Contents><Key>{k.split('/', 2)[2]}</Key></Contents>"
                               for k in sorted(rec.objects) if k.startswith(prefix))
                self._answer(200, ("<ListBucketResult><IsTruncated>false</IsTruncated>"
                                   f"{keys}</ListBucketResult>").encode())

            def do_HEAD(self):
                rec.log.append(("HEAD", self.path, b""))
                if self.path not in rec.objects:
                    return self._answer(404)
                self.send_response(200)
                self.send_header("Content-Length", str(len(rec.objects[self.path])))
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("failing", [(), ("/c/0/",)])
def test_a_zarr_output_is_marked_incomplete_until_its_last_object(tmp_path, scan, failing):
    """The order of the requests: zarr.json marked incomplete first, every shard, then
    zarr.json marked complete. When the store fails a shard (503, tried five times), the run
    fails naming it and the array stays marked incomplete."""
    if not CLI.exists():
        pytest.skip(f"the ctforge command line is not built ({CLI})")
    store = _Recorder(failing)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT_URL=store.endpoint, TMPDIR=str(tmp_path))
        subprocess.run([str(CLI), "simulate", "--phantom", "shepp-logan", "--geometry", scan,
                        "-o", tmp_path / "p.h5", "--quiet"], check=True, env=env)
        r = subprocess.run([str(CLI), "recon", tmp_path / "p.h5", "-o", "s3://b/v.zarr",
                            "--size", "40", "--quiet"],
                           capture_output=True, text=True, env=env)
    finally:
        store.close()
    puts = [(path, body) for method, path, body in store.log if method == "PUT"]
    first_path, first_body = puts[0]
    assert first_path == "/b/v.zarr/zarr.json"
    assert json.loads(first_body)["attributes"]["ctforge_complete"] is False
    shards = [p for p, _ in puts if "/c/" in p]
    if not failing:
        assert r.returncode == 0, r.stderr
        assert shards == ["/b/v.zarr/c/0/0/0"]  # 40 planes of 40 x 40: one shard
        last_path, last_body = puts[-1]
        assert last_path == "/b/v.zarr/zarr.json"
        assert json.loads(last_body)["attributes"]["ctforge_complete"] is True
        assert all(puts.index((p, b)) < len(puts) - 1 for p, b in puts if "/c/" in p)
    else:
        assert r.returncode == 1 and "s3://b/v.zarr/c/0/0/0" in r.stderr and "503" in r.stderr
        assert len(shards) == 5  # tried five times
        stored = json.loads(store.objects["/b/v.zarr/zarr.json"])
        assert stored["attributes"]["ctforge_complete"] is False
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ctforge-objects")] == []


@pytest.mark.parametrize("name", ["v.h5", "v.mha", "v.mhd", "v.nii.gz", "v.nrrd"])
def test_python_files_at_s3_urls_round_trip(s3, monkeypatch, name):
    """ctforge.write_volume / read_volume / write_projections / write_preview at s3:// URLs that
    name a file: that format as one object (a header's data file beside it), read back equal;
    a URL without a file extension is still a Zarr array (ctforge.zarr_volumes)."""
    for k, v in s3.env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    grid = ctforge.VolumeGeometry(3, 5, 7, (0.5, 0.75, 1.25), (1.0, -2.0, 3.0))
    vol = np.random.default_rng(1).random((3, 5, 7), dtype=np.float32)
    ctforge.write_volume(s3.url(name), vol, grid)
    back, g = ctforge.read_volume(s3.url(name))
    assert np.array_equal(back, vol)
    assert np.allclose(g.spacing, grid.spacing) and np.allclose(g.origin, grid.origin)
    keys = s3.keys("v.")
    assert s3.url(name)[len(f"s3://{s3.bucket}/"):] in keys
    if name.endswith(".mhd"):
        assert len(keys) == 2, keys  # the header and its data file
    if name == "v.h5":
        geom = ctforge.Geometry.parallel(cols=9, rows=2, pixel_size=1.0, angles=4)
        proj = np.random.default_rng(2).random((4, 2, 9), dtype=np.float32)
        ctforge.write_projections(s3.url("p.h5"), proj, geom)
        p, _ = ctforge.read_projections(s3.url("p.h5"))
        assert np.array_equal(p, proj)
        ctforge.write_preview(s3.url("v.png"), vol, grid)
        assert s3.get("v.png").startswith(b"\x89PNG")
        with pytest.raises(ctforge.Error, match="no such object"):
            ctforge.read_volume(s3.url("missing.mha"))


def test_python_reads_projections_that_are_not_hdf5_from_s3(s3, scan, monkeypatch, tmp_path):
    """ctforge.read_projections / read_projection_geometry of a TIFF stack and of Zarr
    projections at s3:// URLs (downloaded, with the geometry file): the local files' values;
    the downloads' temporary directory is removed."""
    import tempfile
    for k, v in s3.env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    monkeypatch.setattr(tempfile, "tempdir", str(s3.tmp / "tmp"))
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", "p.h5", "--quiet")
    s3.run("convert", "p.h5", s3.url("stack/"), "--quiet")
    s3.run("convert", "p.h5", s3.url("proj.zarr"), "--quiet")
    s3.run("convert", "p.h5", "stack/", "--quiet")
    local, g = ctforge.read_projections(tmp_path / "stack",
                                        geometry=tmp_path / "stack" / "geometry.json")
    p, g3 = ctforge.read_projections(s3.url("stack"), geometry=s3.url("stack/geometry.json"))
    assert np.array_equal(p, local) and g3.to_json() == g.to_json()
    assert ctforge.read_projection_geometry(
        s3.url("stack"), geometry=s3.url("stack/geometry.json")).to_json() == g.to_json()
    z, _ = ctforge.read_projections(s3.url("proj.zarr"))
    assert np.array_equal(z, ctforge.read_projections(tmp_path / "p.h5")[0])
    assert list((s3.tmp / "tmp").iterdir()) == []


def test_unit_shares_with_urls_lose_nothing(s3, scan, tmp_path):
    """--checkpoint-dir --unit-share with s3:// input and output: every share names the same
    run (a downloaded input is identified by its URL, not by where it was staged), the share
    that records the last unit stores the output before it removes the units, and when storing
    fails the units stay, so that the same command finishes without computing them again."""
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", "p.h5", "--quiet")
    s3.run("convert", "p.h5", s3.url("proj.zarr"), "--quiet")
    common = ["--size", "24", "--checkpoint-dir", "ck", "--unit-planes", "8"]
    s3.run("recon", s3.url("proj.zarr"), "-o", s3.url("a.h5"), *common, "--unit-share", "0/2")
    r = s3.run("recon", s3.url("proj.zarr"), "-o", s3.url("a.h5"), *common, "--unit-share", "1/2")
    assert "wrote " + s3.url("a.h5") in r.stderr, r.stderr
    s3.run("recon", "p.h5", "-o", "a.h5", "--size", "24", "--checkpoint-dir", "ckl",
           "--unit-planes", "8", "--quiet")  # the same units, in one process
    (tmp_path / "back.h5").write_bytes(s3.get("a.h5"))
    assert np.array_equal(ctforge.read_volume(tmp_path / "back.h5")[0],
                          ctforge.read_volume(tmp_path / "a.h5")[0])
    assert json.loads((tmp_path / "ck" / "assembled.json").read_text())["output"][0] == s3.url("a.h5")

    common[common.index("ck")] = "ck2"
    s3.run("recon", "p.h5", "-o", s3.url("b.h5"), *common, "--unit-share", "0/2")
    r = s3.run("recon", "p.h5", "-o", s3.url("b.h5"), *common, "--unit-share", "1/2",
               extra={"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, expect=1)
    assert "SignatureDoesNotMatch" in r.stderr
    assert len(list((tmp_path / "ck2").glob("slab_*.json"))) == 3  # 24 planes in units of 8
    r = s3.run("recon", "p.h5", "-o", s3.url("b.h5"), *common, "--unit-share", "1/2")
    assert "0 recorded already" not in r.stderr and "wrote " + s3.url("b.h5") in r.stderr, r.stderr
    (tmp_path / "back.h5").write_bytes(s3.get("b.h5"))
    assert np.array_equal(ctforge.read_volume(tmp_path / "back.h5")[0],
                          ctforge.read_volume(tmp_path / "a.h5")[0])


def test_directories_replace_earlier_ones_and_folder_markers_are_skipped(s3, scan, tmp_path):
    """A TIFF stack stored where a longer one was: the earlier stack's extra objects are
    removed (else they would read as part of it). A folder-marker key (`stack/`, made by some
    tools) is skipped when the stack is read and left in place."""
    s3.run("simulate", "--phantom", "shepp-logan", "--phantom-size", 60, "--geometry", scan,
           "-o", "p.h5", "--quiet")
    s3.client.put_object(Bucket=s3.bucket, Key="stack/", Body=b"")
    s3.run("convert", "p.h5", s3.url("stack/"), "--quiet")
    assert len(s3.keys("stack/")) == 60 + 2  # the views, geometry.json, the marker
    s3.run("convert", "p.h5", s3.url("stack/"), "--views", "0:40", "--quiet")
    assert len(s3.keys("stack/")) == 40 + 2
    r = s3.run("info", s3.url("stack/"))
    assert "views 40" in r.stdout and r.stdout.startswith(s3.url("stack")), r.stdout
    s3.run("convert", "p.h5", "local/", "--views", "0:40", "--quiet")
    s3.run("convert", s3.url("stack"), "a.h5", "--geometry", s3.url("stack/geometry.json"),
           "--quiet")
    s3.run("convert", "local/", "b.h5", "--geometry", "local/geometry.json", "--quiet")
    assert np.array_equal(ctforge.read_projections(tmp_path / "a.h5")[0],
                          ctforge.read_projections(tmp_path / "b.h5")[0])


def test_write_only_credentials_store_outputs_unchecked(s3, scan, store):
    """Credentials that may put objects but not read them (a common upload-only role): the
    output is stored and the run succeeds; its size check is skipped (the store refuses it)."""
    ep, key, secret = store
    iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1",
                       aws_access_key_id=key, aws_secret_access_key=secret)
    name = f"writer{np.random.randint(1 << 30)}"
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="put", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": "*"}]}))
    k = iam.create_access_key(UserName=name)["AccessKey"]
    s3.run("simulate", "--phantom", "shepp-logan", "--geometry", scan, "-o", "p.h5", "--quiet")
    s3.run("recon", "p.h5", "-o", s3.url("wo.h5"), "--size", 9, "--quiet",
           extra={"AWS_ACCESS_KEY_ID": k["AccessKeyId"],
                  "AWS_SECRET_ACCESS_KEY": k["SecretAccessKey"]})
    s3.run("recon", "p.h5", "-o", "wo.h5", "--size", 9, "--quiet")
    (s3.tmp / "back.h5").write_bytes(s3.get("wo.h5"))
    assert np.array_equal(ctforge.read_volume(s3.tmp / "back.h5")[0],
                          ctforge.read_volume(s3.tmp / "wo.h5")[0])

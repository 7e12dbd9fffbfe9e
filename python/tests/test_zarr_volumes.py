"""ctforge.zarr_volumes: Zarr v3 volumes in shards of whole slab units, local and on S3 (a moto
server on 127.0.0.1, started by the tests). Round trips are bit for bit with the geometry;
processes writing their own units at once give the one-shot volume; two writers in one shard
lose planes (why writes must be shard-aligned, and are refused otherwise); unfinished volumes
and missing shards are refused; arrays written by zarr itself read with the documented
defaults."""
import multiprocessing
import os
import subprocess

import numpy as np
import pytest

import ctforge

zarr = pytest.importorskip("zarr", minversion="3", reason="zarr>=3 is not installed")
from ctforge import zarr_volumes as zv  # noqa: E402

SHAPES = [(7, 5, 3), (1, 4, 6), (13, 9, 11)]


def volume(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def grid_of(shape):
    return ctforge.VolumeGeometry(*shape, (0.5, 0.75, 1.25), (-3.0, 2.5, 10.0))


# ---- S3: the local moto server (conftest.moto_endpoint) -----------------------------------------

@pytest.fixture
def s3(moto_endpoint, monkeypatch, request):
    """A fresh bucket on the local moto server; AWS_* point at it (and are inherited by the
    processes the tests start)."""
    import boto3
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = "ctforge-" + request.node.name.lower().replace("_", "-").replace("[", "-")[:40]
    bucket = "".join(c for c in bucket if c.isalnum() or c == "-").strip("-")
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    return bucket, client


def keys(client, bucket):
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))


# ---- local round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_local(tmp_path, shape):
    v, g = volume(shape), grid_of(shape)
    path = tmp_path / "vol.zarr"
    ctforge.write_volume(path, v, g)
    w, h = ctforge.read_volume(path)
    assert w.dtype == np.float32 and w.shape == shape
    assert np.array_equal(w.view(np.uint32), v.view(np.uint32))  # bit for bit
    assert h == g and h.spacing == g.spacing and h.origin == g.origin
    attrs = zarr.open_array(str(path), mode="r").attrs
    assert attrs["spacing_mm"] == list(g.spacing) and attrs["origin_mm"] == list(g.origin)
    assert attrs["axes"] == "z:y:x" and attrs["creator"] == f"ctforge {ctforge.__version__}"
    assert attrs["ctforge_complete"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["vol.zarr"]  # no temporaries left


def test_write_volume_replaces_an_earlier_array_and_a_failed_write_keeps_it(tmp_path):
    path = tmp_path / "vol.zarr"
    first, second = volume((6, 4, 5), 1), volume((3, 2, 2), 2)
    ctforge.write_volume(path, first)
    ctforge.write_volume(path, second)
    assert np.array_equal(ctforge.read_volume(path)[0], second)
    bad = second.copy()
    bad[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"\(2, 1, 0\)"):
        ctforge.write_volume(path, bad)
    assert np.array_equal(ctforge.read_volume(path)[0], second)
    assert [p.name for p in tmp_path.iterdir()] == ["vol.zarr"]
    (tmp_path / "other.zarr").write_text("not zarr")
    with pytest.raises(ValueError, match="not a Zarr array"):
        ctforge.write_volume(tmp_path / "other.zarr", second)
    assert (tmp_path / "other.zarr").read_text() == "not zarr"


def test_shards_are_whole_units_and_each_unit_one_object(tmp_path):
    path = str(tmp_path / "vol.zarr")
    shape = (13, 9, 11)
    units = zv.create_zarr_volume(path, grid_of(shape), 4)
    assert units == [(0, 4), (4, 8), (8, 12), (12, 13)]
    a = zarr.open_array(path, mode="r")
    assert a.shards == (4, 9, 11) and a.chunks == (1, 9, 11) and a.dtype == np.float32
    assert a.attrs["ctforge_complete"] is False
    v = volume(shape)
    for k0, k1 in units:
        zv.write_zarr_planes(path, k0, v[k0:k1])
    shards = sorted(os.listdir(tmp_path / "vol.zarr" / "c"))
    assert shards == ["0", "1", "2", "3"]
    zv.finish_zarr_volume(path)
    assert np.array_equal(zv.read_zarr_volume(path)[0], v)


def test_units_of_zeros_are_stored_and_the_volume_finishes(tmp_path):
    """A unit whose planes are all 0 (outside the object: the ends of a long grid) is stored
    like any other: zarr leaves chunks equal to the fill value out by default, and such a unit
    would then count as never written (what bench-distributed ran into at 256^3)."""
    path = str(tmp_path / "vol.zarr")
    shape = (12, 5, 7)
    units = zv.create_zarr_volume(path, grid_of(shape), 4)
    v = volume(shape)
    v[:4] = 0
    v[8:] = 0
    for k0, k1 in units:
        zv.write_zarr_planes(path, k0, v[k0:k1])
    assert sorted(os.listdir(tmp_path / "vol.zarr" / "c")) == ["0", "1", "2"]
    zv.finish_zarr_volume(path)
    assert np.array_equal(zv.read_zarr_volume(path)[0], v)
    # And a volume of zeros written in one piece.
    ctforge.write_volume(tmp_path / "zeros.zarr", np.zeros(shape, np.float32), grid_of(shape))
    assert np.array_equal(ctforge.read_volume(tmp_path / "zeros.zarr")[0], np.zeros(shape))


# ---- refusals ----------------------------------------------------------------------------------

def test_misaligned_and_non_finite_writes_are_refused(tmp_path):
    path = str(tmp_path / "vol.zarr")
    shape = (10, 3, 4)
    zv.create_zarr_volume(path, grid_of(shape), 4)
    v = volume(shape)
    with pytest.raises(ctforge.UsageError, match=r"vol\.zarr: planes 2\.\.5 .*whole shards of 4"):
        zv.write_zarr_planes(path, 2, v[2:6])
    with pytest.raises(ctforge.UsageError, match=r"planes 4\.\.5 .*whole shards"):
        zv.write_zarr_planes(path, 4, v[4:6])  # starts on a shard, ends inside it
    with pytest.raises(ctforge.UsageError, match="outside"):
        zv.write_zarr_planes(path, 8, v[0:4])
    zv.write_zarr_planes(path, 8, v[8:10])  # the last, shorter shard is whole
    bad = v[0:4].copy()
    bad[3, 2, 1] = np.inf
    with pytest.raises(ctforge.UsageError, match=r"inf at voxel \(z, y, x\) = \(7, 2, 1\)"):
        zv.write_zarr_planes(path, 4, bad)
    assert not os.path.exists(tmp_path / "vol.zarr" / "c" / "1")  # nothing written


def test_unfinished_volume_is_refused_and_finish_names_missing_planes(tmp_path):
    path = str(tmp_path / "vol.zarr")
    shape = (10, 3, 4)
    zv.create_zarr_volume(path, grid_of(shape), 3)
    v = volume(shape)
    zv.write_zarr_planes(path, 0, v[0:3])
    zv.write_zarr_planes(path, 6, v[6:9])
    for read in (zv.read_zarr_volume, ctforge.read_volume):
        with pytest.raises(ctforge.Error, match="incomplete: written by a run that did not finish"):
            read(path)
    with pytest.raises(ctforge.Error, match=r"2 shard\(s\) never written: planes 3\.\.5, plane 9"):
        zv.finish_zarr_volume(path)
    assert zarr.open_array(path, mode="r").attrs["ctforge_complete"] is False
    zv.write_zarr_planes(path, 3, v[3:6])
    zv.write_zarr_planes(path, 9, v[9:10])
    zv.finish_zarr_volume(path)
    assert np.array_equal(ctforge.read_volume(path)[0], v)


def test_foreign_arrays_read_with_the_documented_defaults(tmp_path):
    # Written by zarr itself, no ctforge attributes: spacing 1 mm, grid centred (the default of
    # VolumeGeometry); v3 and v2, other dtypes converted.
    for fmt, dtype in ((3, "float32"), (2, "float64"), (3, "uint16")):
        path = str(tmp_path / f"plain{fmt}{dtype}.zarr")
        data = (np.arange(5 * 6 * 7).reshape(5, 6, 7) % 17).astype(dtype)
        a = zarr.create_array(path, shape=data.shape, chunks=(2, 6, 7), dtype=dtype,
                              zarr_format=fmt)
        a[...] = data
        v, g = ctforge.read_volume(path)
        assert v.dtype == np.float32 and np.array_equal(v, data.astype(np.float32))
        assert g == ctforge.VolumeGeometry(5, 6, 7, (1.0, 1.0, 1.0))
        assert g.spacing == (1.0, 1.0, 1.0) and g.origin == (-3.0, -2.5, -2.0)
    path = str(tmp_path / "attrs.zarr")
    a = zarr.create_array(path, shape=(2, 2, 2), dtype="float32",
                          attributes={"spacing_mm": [2, 3, 4]})
    a[...] = 1
    assert ctforge.read_volume(path)[1].origin == (-1.0, -1.5, -2.0)
    grp = zarr.open_group(str(tmp_path / "group.zarr"), mode="w")
    grp.create_array("v", shape=(2, 2, 2), dtype="float32")
    with pytest.raises(ctforge.Error, match="no Zarr array there"):
        ctforge.read_volume(tmp_path / "group.zarr")
    assert ctforge.read_volume(tmp_path / "group.zarr" / "v")[0].shape == (2, 2, 2)


# ---- concurrent writers ------------------------------------------------------------------------

def _write_units(url, units, seed, shape, barrier):
    v = volume(shape, seed)
    barrier.wait()  # all writers start together
    for k0, k1 in units:
        zv.write_zarr_planes(url, k0, v[k0:k1])


def concurrent_write(url, shape, planes, writers):
    ctx = multiprocessing.get_context("spawn")
    units = zv.create_zarr_volume(url, grid_of(shape), planes)
    barrier = ctx.Barrier(writers)
    procs = [ctx.Process(target=_write_units, args=(url, units[i::writers], 5, shape, barrier))
             for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * writers
    zv.finish_zarr_volume(url)


def test_concurrent_writers_local_equal_one_shot(tmp_path):
    shape = (29, 17, 19)
    concurrent_write(str(tmp_path / "many.zarr"), shape, 2, 4)
    ctforge.write_volume(tmp_path / "one.zarr", volume(shape, 5), grid_of(shape))
    many, g_many = ctforge.read_volume(tmp_path / "many.zarr")
    one, g_one = ctforge.read_volume(tmp_path / "one.zarr")
    assert np.array_equal(many.view(np.uint32), one.view(np.uint32)) and g_many == g_one
    assert np.array_equal(many, volume(shape, 5))


def _one_plane_of_a_shared_shard(path, k, shape, barrier):
    from zarr.storage import LocalStore, WrapperStore

    class Store(WrapperStore):
        """The first read of a shard waits at a barrier: both writers have read the shard
        before either writes it back."""
        waited = False

        async def get(self, key, prototype, byte_range=None):
            value = await super().get(key, prototype, byte_range)
            if key.startswith("c/") and not Store.waited:
                Store.waited = True
                barrier.wait()
            return value

    a = zarr.open_array(Store(LocalStore(path)), mode="r+")
    a[k] = volume(shape, 9)[k]  # zarr itself: no alignment check


def test_two_writers_in_one_shard_lose_planes(tmp_path):
    # Why writes must cover whole shards: a shard is one object, written whole. Two processes
    # each writing a plane of one shard read it, merge their plane and write it back; with both
    # reads before either write (a barrier), the second write drops the first one's plane.
    path = str(tmp_path / "shared.zarr")
    shape = (4, 3, 5)
    zv.create_zarr_volume(path, grid_of(shape), 4)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_one_plane_of_a_shared_shard, args=(path, k, shape, barrier))
             for k in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    a = zarr.open_array(path, mode="r")[...]
    want = volume(shape, 9)
    kept = [np.array_equal(a[k], want[k]) for k in (0, 1)]
    lost = [not a[k].any() for k in (0, 1)]
    assert sorted(kept) == [False, True] and sorted(lost) == [False, True], (kept, lost)
    with pytest.raises(ctforge.UsageError, match="whole shards"):
        zv.write_zarr_planes(path, 1, want[1:2])  # what the module refuses


# ---- S3 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_s3(s3, shape):
    bucket, client = s3
    url = f"s3://{bucket}/vol.zarr"
    v, g = volume(shape, 3), grid_of(shape)
    ctforge.write_volume(url, v, g)
    w, h = ctforge.read_volume(url)
    assert np.array_equal(w.view(np.uint32), v.view(np.uint32)) and h == g
    assert "vol.zarr/zarr.json" in keys(client, bucket)


def test_s3_unfinished_refused_and_storage_options_override(s3, monkeypatch):
    bucket, client = s3
    url = f"s3://{bucket}/part.zarr"
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    opts = {"endpoint_url": endpoint}
    shape = (5, 2, 3)
    zv.create_zarr_volume(url, grid_of(shape), 2, storage_options=opts)
    zv.write_zarr_planes(url, 0, volume(shape)[0:2], storage_options=opts)
    with pytest.raises(ctforge.Error, match="incomplete"):
        zv.read_zarr_volume(url, storage_options=opts)
    with pytest.raises(ctforge.Error, match=r"planes 2\.\.3, plane 4"):
        zv.finish_zarr_volume(url, storage_options=opts)
    assert sorted(k for k in keys(client, bucket) if "/c/" in k) == ["part.zarr/c/0/0/0"]


def test_concurrent_writers_s3_equal_one_shot(s3, tmp_path):
    bucket, client = s3
    shape = (21, 8, 9)
    url = f"s3://{bucket}/many.zarr"
    concurrent_write(url, shape, 3, 3)
    many, g = ctforge.read_volume(url)
    ctforge.write_volume(tmp_path / "one.zarr", volume(shape, 5), grid_of(shape))
    one, g_one = ctforge.read_volume(tmp_path / "one.zarr")
    assert np.array_equal(many.view(np.uint32), one.view(np.uint32)) and g == g_one
    assert len([k for k in keys(client, bucket) if k.startswith("many.zarr/c/")]) == 7


def test_zarr_is_optional():
    # `import ctforge` does not import zarr; without it an s3:// URL names the extra, and a
    # local .zarr is the C++ library's (here: an error naming the missing array).
    import subprocess
    import sys
    code = ("import sys, ctforge; assert 'zarr' not in sys.modules\n"
            "sys.modules['zarr'] = None\n"
            "try:\n    ctforge.read_volume('s3://bucket/x.zarr')\nexcept ImportError as e:\n"
            "    print(e)\n"
            "try:\n    ctforge.read_volume('x.zarr')\nexcept ctforge.Error as e:\n"
            "    print('local:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install ctforge[zarr]" in r.stdout, r.stdout + r.stderr
    assert "local: x.zarr: no such Zarr array" in r.stdout, r.stdout + r.stderr


def test_staging_left_by_a_killed_writer_is_removed(tmp_path):
    """A local write first removes the staging directories this host's killed writers of that
    name left (their process is gone); another host's are kept, whatever their age (a
    distributed run stages its array there for the whole run)."""
    child = subprocess.Popen(["true"])  # (a process that has ended: its pid is gone)
    child.wait()
    dead = tmp_path / f".vol.{zv._host_tag()}-{child.pid}.part.zarr"
    foreign = tmp_path / ".vol.pod-7-12.part.zarr"
    for d in (dead, foreign):
        d.mkdir()
        (d / "zarr.json").write_text("{}")
    os.utime(foreign, (0, 0))
    shape = (3, 4, 5)
    ctforge.write_volume(tmp_path / "vol.zarr", volume(shape), grid_of(shape))
    assert not dead.exists()
    assert foreign.exists()

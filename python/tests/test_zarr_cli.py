"""The command line's own Zarr reader and writer (src/io/zarr*.cpp, no Zarr library) against
zarr-python, the reference implementation: arrays zarr-python writes with every codec and layout
the C++ reader claims (v3: bytes of either endianness, transpose, sharding with the index at
either end, blosc, zstd, gzip, crc32c, the v2 key encoding, missing chunks; v2: blosc, zstd,
zlib, gzip, C and F order, both separators; every real dtype and bool) are converted by
``ctforge convert`` to HDF5 and must equal the array exactly (float32 holds every value used);
what ``ctforge convert`` writes is read by zarr-python and by ``ctforge.read_volume`` with its
values, spacing and origin; a foreign array of projections reconstructs exactly as the same
values in a .npy file do."""
import json

import numpy as np
import pytest

import ctforge

zarr = pytest.importorskip("zarr", reason="zarr-python is not installed (pip install ctforge[zarr])")
from zarr import codecs as zc  # noqa: E402
from numcodecs import Blosc, GZip, Zlib, Zstd  # noqa: E402

SHAPE = (7, 9, 11)  # no chunk shape below divides it: edge chunks everywhere


def values(dtype, shape=SHAPE):
    n = int(np.prod(shape))
    i = np.arange(n).reshape(shape)
    if dtype == "bool":
        return (i % 3 == 0)
    if np.dtype(dtype).kind == "u":
        return (i % 200).astype(dtype)
    if np.dtype(dtype).kind == "i":
        return ((i % 200) - 100).astype(dtype)
    return (np.sin(0.37 * i) * 100).astype(dtype).astype(dtype)


V3 = {
    "plain-f32": dict(dtype="float32", chunks=(3, 4, 5), compressors=None),
    "zstd-f64": dict(dtype="float64", chunks=(2, 9, 11), compressors=zc.ZstdCodec(level=5)),
    "gzip-i16-big": dict(dtype="int16", chunks=(3, 4, 5), compressors=zc.GzipCodec(level=6),
                         serializer=zc.BytesCodec(endian="big")),
    "blosc-lz4-bitshuffle-u16": dict(dtype="uint16", chunks=(4, 4, 4),
                                     compressors=zc.BloscCodec(cname="lz4", shuffle="bitshuffle")),
    "sharded-index-start-u8": dict(
        dtype="uint8", chunks=(4, 9, 11),
        serializer=zc.ShardingCodec(chunk_shape=(2, 3, 11), codecs=[zc.BytesCodec(), zc.ZstdCodec()],
                                    index_location="start"),
        compressors=None),
    "sharded-default-f32": dict(dtype="float32", chunks=(2, 3, 11), shards=(4, 9, 11)),
    "sharded-crc32c-inner-i32": dict(
        dtype="int32", chunks=(3, 9, 11),
        serializer=zc.ShardingCodec(chunk_shape=(1, 9, 11),
                                    codecs=[zc.BytesCodec(endian="big"), zc.Crc32cCodec()])),
    "sharded-index-bytes-only-f32": dict(
        dtype="float32", chunks=(7, 9, 11),
        serializer=zc.ShardingCodec(chunk_shape=(1, 3, 11), codecs=[zc.BytesCodec(), zc.GzipCodec()],
                                    index_codecs=[zc.BytesCodec()])),
    "transpose-f32": dict(dtype="float32", chunks=(3, 4, 5), filters=[zc.TransposeCodec(order=(2, 0, 1))],
                          compressors=zc.ZstdCodec()),
    "v2-keys-i8": dict(dtype="int8", chunks=(3, 4, 5), chunk_key_encoding={"name": "v2", "separator": "."}),
    "bool": dict(dtype="bool", chunks=(3, 4, 5)),
    "f16": dict(dtype="float16", chunks=(3, 4, 5)),
    "u64": dict(dtype="uint64", chunks=(7, 9, 11)),
}

V2 = {
    "v2-blosc-zstd-f32": dict(dtype="<f4", chunks=(3, 4, 5), compressors=Blosc(cname="zstd", clevel=3)),
    "v2-zlib-i32-F": dict(dtype="<i4", chunks=(3, 4, 5), compressors=Zlib(level=4), order="F"),
    "v2-gzip-slash-u16": dict(dtype="<u2", chunks=(3, 4, 5), compressors=GZip(),
                              chunk_key_encoding={"name": "v2", "separator": "/"}),
    "v2-zstd-bigendian-f8": dict(dtype=">f8", chunks=(7, 5, 5), compressors=Zstd(level=1)),
    "v2-raw-u1": dict(dtype="|u1", chunks=(3, 4, 5), compressors=None),
}


def convert_and_read(cli, tmp_path, src):
    out = tmp_path / (src.name.replace(".zarr", "") + ".h5")
    cli("convert", src, out, "--quiet")
    v, grid = ctforge.read_volume(out)
    return v, grid


@pytest.mark.parametrize("case", sorted(V3))
def test_zarr_python_v3_arrays_read_exactly(cli, tmp_path, case):
    kw = dict(V3[case])
    data = values(kw["dtype"])
    path = tmp_path / f"{case}.zarr"
    a = zarr.create_array(str(path), shape=SHAPE, zarr_format=3, **kw)
    a[...] = data
    v, grid = convert_and_read(cli, tmp_path, path)
    assert np.array_equal(v, data.astype(np.float32)), case
    assert grid.spacing == (1.0, 1.0, 1.0)  # no attributes: 1 mm, centred
    assert grid.origin == (-5.0, -4.0, -3.0)


@pytest.mark.parametrize("case", sorted(V2))
def test_zarr_python_v2_arrays_read_exactly(cli, tmp_path, case):
    kw = dict(V2[case])
    data = values(np.dtype(kw["dtype"]).newbyteorder("=").name)
    path = tmp_path / f"{case}.zarr"
    a = zarr.create_array(str(path), shape=SHAPE, zarr_format=2, **kw)
    a[...] = data
    assert (path / ".zarray").exists()
    v, _ = convert_and_read(cli, tmp_path, path)
    assert np.array_equal(v, data.astype(np.float32)), case


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_chunks_never_written_read_as_the_fill_value(cli, tmp_path, zarr_format):
    path = tmp_path / "sparse.zarr"
    a = zarr.create_array(str(path), shape=SHAPE, dtype="float32", chunks=(3, 4, 5),
                          fill_value=-7.5, zarr_format=zarr_format)
    a[3:6, 0:4, 5:10] = 2.25  # one chunk; every other one stays unwritten
    expected = np.full(SHAPE, -7.5, np.float32)
    expected[3:6, 0:4, 5:10] = 2.25
    v, _ = convert_and_read(cli, tmp_path, path)
    assert np.array_equal(v, expected)


def test_what_the_cli_writes_is_read_by_zarr_python(cli, tmp_path):
    grid = ctforge.VolumeGeometry(13, 6, 5, (0.5, 0.75, 1.25), (1.0, -2.0, 3.5))
    vol = values("float32", (13, 6, 5))
    ctforge.write_volume(tmp_path / "v.h5", vol, grid)
    cli("convert", tmp_path / "v.h5", tmp_path / "v.zarr", "--quiet")
    a = zarr.open_array(str(tmp_path / "v.zarr"), mode="r")
    assert np.array_equal(a[...], vol)
    assert a.attrs["spacing_mm"] == [0.5, 0.75, 1.25]
    assert a.attrs["origin_mm"] == [1.0, -2.0, 3.5]
    assert a.attrs["ctforge_complete"] is True
    assert tuple(a.shards) == (13, 6, 5) and tuple(a.chunks) == (1, 6, 5)
    back, g = ctforge.read_volume(tmp_path / "v.zarr")  # the Python package's reader
    assert np.array_equal(back, vol) and g.spacing == grid.spacing and g.origin == grid.origin


def test_a_streamed_volume_with_a_shorter_last_shard_is_read_by_zarr_python(cli, tmp_path):
    # Slab units of 3 planes into .zarr: shards of 3, 3 and 1 planes, each written as its unit
    # came; zarr-python reads what ctforge.read_volume (the HDF5 copy) holds.
    g = ctforge.Geometry.cone(cols=32, rows=9, pixel_size=2.0, sid=500, sdd=1000, angles=30)
    ctforge.write_projections(tmp_path / "p.h5", ctforge.project_analytic(
        ctforge.shepp_logan(30), g), g)
    grid = ["--size-xyz", "21,20,7", "--spacing", "1.5", "--backend", "cpu", "--quiet",
            "--unit-planes", "3"]
    cli("recon", tmp_path / "p.h5", "-o", tmp_path / "s.zarr", "--checkpoint-dir",
        tmp_path / "ck1", *grid)
    cli("recon", tmp_path / "p.h5", "-o", tmp_path / "s.h5", "--checkpoint-dir",
        tmp_path / "ck2", *grid)
    a = zarr.open_array(str(tmp_path / "s.zarr"), mode="r")
    assert tuple(a.shards) == (3, 20, 21)
    ref, _ = ctforge.read_volume(tmp_path / "s.h5")
    assert np.abs(ref).max() > 0 and np.array_equal(a[...], ref)


def test_the_python_writers_volume_is_read_by_the_cli(cli, tmp_path):
    from ctforge import zarr_volumes as zv

    grid = ctforge.VolumeGeometry(9, 8, 7, (1.0, 2.0, 3.0))
    vol = values("float32", (9, 8, 7))
    zv.write_volume(tmp_path / "py.zarr", vol, grid, planes_per_shard=4)
    v, g = convert_and_read(cli, tmp_path, tmp_path / "py.zarr")
    assert np.array_equal(v, vol) and g.spacing == grid.spacing and g.origin == grid.origin
    r = cli("info", tmp_path / "py.zarr")
    assert "ctforge volume" in r.stdout and "sharding_indexed" in r.stdout


def test_foreign_zarr_projections_reconstruct_as_the_same_npy(cli, tmp_path):
    g = ctforge.Geometry.cone(cols=40, rows=12, pixel_size=1.5, sid=300, sdd=600, angles=48)
    p = np.asarray(ctforge.project_analytic(ctforge.shepp_logan(30), g), dtype=np.float32)
    (tmp_path / "g.json").write_text(g.to_json())
    np.save(tmp_path / "p.npy", p)
    zarr.create_array(str(tmp_path / "p.zarr"), shape=p.shape, dtype="float32",
                      chunks=(5, 12, 40), compressors=zc.ZstdCodec())[...] = p
    grid = ["--size-xyz", "20,20,8", "--spacing", "1.5", "--backend", "cpu", "--quiet",
            "--geometry", tmp_path / "g.json"]
    cli("recon", tmp_path / "p.npy", "-o", tmp_path / "a.h5", *grid)
    cli("recon", tmp_path / "p.zarr", "-o", tmp_path / "b.h5", *grid)
    a, _ = ctforge.read_volume(tmp_path / "a.h5")
    b, _ = ctforge.read_volume(tmp_path / "b.h5")
    assert np.abs(a).max() > 0 and np.array_equal(a, b)
    # Without a geometry the array is refused with the way out named.
    r = cli("recon", tmp_path / "p.zarr", "-o", tmp_path / "c.h5", *grid[:-2], check=False)
    assert r.returncode == 2 and "--geometry" in r.stderr and "p.zarr" in r.stderr
    # Projections written by the CLI carry their geometry: no --geometry needed.
    cli("convert", tmp_path / "p.zarr", tmp_path / "q.zarr", "--geometry", tmp_path / "g.json",
        "--quiet")
    q = zarr.open_array(str(tmp_path / "q.zarr"), mode="r")
    assert np.array_equal(q[...], p) and q.attrs["ctforge_geometry"]["type"] == "cone"
    cli("recon", tmp_path / "q.zarr", "-o", tmp_path / "d.h5", *grid[:-2])
    d, _ = ctforge.read_volume(tmp_path / "d.h5")
    assert np.array_equal(a, d)
    assert json.loads(json.dumps(q.attrs["ctforge_geometry"]))["detector"]["cols"] == 40


def test_without_zarr_python_the_package_uses_its_own_reader(tmp_path, monkeypatch):
    # `pip install ctforge` without the [zarr] extra: local .zarr volumes go through the C++
    # library (the same layout); zarr-python, here, checks what it wrote.
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "zarr" else real(name, *a))
    grid = ctforge.VolumeGeometry(6, 5, 4, (0.5, 1.0, 2.0), (1.0, 2.0, 3.0))
    vol = values("float32", (6, 5, 4))
    ctforge.write_volume(tmp_path / "v.zarr", vol, grid)
    a = zarr.open_array(str(tmp_path / "v.zarr"), mode="r")
    assert np.array_equal(a[...], vol) and a.attrs["creator"].startswith("ctforge")
    back, g = ctforge.read_volume(tmp_path / "v.zarr")
    assert np.array_equal(back, vol) and g.spacing == grid.spacing and g.origin == grid.origin

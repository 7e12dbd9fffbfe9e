"""The C++ Zarr reader (src/io/zarr*.cpp) on Zarr v2 arrays written by earlier zarr-python
versions: zarr-python's own format-compatibility corpus (data/zarr/zarr_python_v2_fixture, a
subset, MIT licence: data/README.md). Every numeric array (int8 to uint64, float16 to float64,
bool; 1, 2 and 3 dimensions; C and F order; uncompressed, zlib, bz2 and four Blosc settings;
both key separators) must read exactly as zarr-python 3, the reference implementation, reads it
(as float32: both round to nearest). What the reader does not take (strings, 4 dimensions) is
refused naming the metadata file and its field; a corrupted chunk is an error naming it."""
import shutil

import numpy as np
import pytest

import ctforge
from ctforge import _core

zarr = pytest.importorskip("zarr", reason="zarr-python is not installed (pip install ctforge[zarr])")

FIXTURE = "zarr/zarr_python_v2_fixture"


def arrays(data_dir):
    root = data_dir / FIXTURE
    return sorted(p.parent for p in root.rglob(".zarray"))


def test_the_corpus_is_there(data_dir):
    found = arrays(data_dir)
    assert len(found) == 51, [str(p) for p in found]


def test_every_numeric_array_reads_as_zarr_python_reads_it(data_dir):
    checked, codecs = 0, set()
    for p in arrays(data_dir):
        ref = zarr.open_array(str(p), mode="r")[...]
        if ref.dtype.kind not in "iufb" or ref.ndim > 3:
            continue
        got = _core.read_zarr_array(str(p))
        assert got.shape == ref.shape, p
        assert np.array_equal(got, ref.astype(np.float32), equal_nan=True), p  # (NaN, inf too)
        assert got.any() or not ref.any(), p  # (not all zeros unless the data are)
        meta = zarr.open_array(str(p), mode="r").metadata
        codecs.add(getattr(meta, "compressor", None).__class__.__name__)
        checked += 1
    assert checked == 48  # (51: two arrays of strings and one of 4 dimensions besides)
    assert {"NoneType", "Zlib", "BZ2", "Blosc"} <= codecs, codecs


def test_three_dimensional_arrays_are_volumes(data_dir):
    """The 3-d arrays (C and F order) read as volumes through ctforge.read_volume, the same
    values as the generic reader."""
    root = data_dir / FIXTURE / "test_format_compatibility"
    for name in ("array_20/compressor_1", "array_21/compressor_6"):
        v, grid = ctforge.read_volume(root / name)
        ref = zarr.open_array(str(root / name), mode="r")[...]
        assert v.shape == ref.shape and np.array_equal(v, ref.astype(np.float32)), name


@pytest.mark.parametrize("name,field", [("array_14/compressor_0", "'dtype'"),
                                        ("array_15/compressor_0", "'dtype'"),
                                        ("array_22/compressor_0", "'shape'")])
def test_what_is_not_read_is_refused_naming_the_field(data_dir, name, field):
    p = data_dir / FIXTURE / "test_format_compatibility" / name
    with pytest.raises(ctforge.Error, match=rf"{name}/\.zarray: field {field}"):
        _core.read_zarr_array(str(p))


@pytest.mark.parametrize("compressor", ["compressor_1", "compressor_2"])
def test_a_corrupted_chunk_is_an_error_naming_it(data_dir, tmp_path, compressor):
    """Negative control: chunk 1 of the float32 array with two bytes of its compressed stream
    flipped is refused naming the chunk, never read as other numbers (zlib and bz2 streams carry
    checksums; Blosc's in Zarr v2 carry none, so zarr-python and ctforge alike cannot tell)."""
    src = data_dir / FIXTURE / "test_format_compatibility" / "array_9" / compressor
    dst = tmp_path / "a.zarr"
    shutil.copytree(src, dst)
    chunk = dst / "1"
    b = bytearray(chunk.read_bytes())
    for at in (len(b) // 2, len(b) // 2 + 1):
        b[at] ^= 0xFF
    chunk.write_bytes(bytes(b))
    with pytest.raises(ctforge.Error, match=r"a\.zarr/1"):
        _core.read_zarr_array(str(dst))

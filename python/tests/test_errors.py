"""Error types and messages: UsageError (ValueError) and Error (RuntimeError), with the
command line's words."""
import numpy as np
import pytest

import ctforge


def cli_message(r):
    lines = [l for l in r.stderr.splitlines() if l.startswith("ctforge: error: ")]
    assert lines, r.stderr
    return lines[0][len("ctforge: error: "):]


def test_hierarchy():
    assert issubclass(ctforge.UsageError, ValueError)
    assert issubclass(ctforge.UsageError, ctforge.Error)
    assert issubclass(ctforge.Error, RuntimeError)
    assert not issubclass(ctforge.Error, ValueError)


@pytest.fixture
def proj_file(tmp_path, small_cone):
    p = ctforge.project_analytic(ctforge.shepp_logan(30), small_cone)
    path = tmp_path / "p.h5"
    ctforge.write_projections(path, p, small_cone)
    return path


@pytest.mark.parametrize("args,kw", [
    (("--filter", "gauss"), {"filter": "gauss"}),
    (("--algorithm", "art"), {"algorithm": "art"}),
    (("--cutoff", "1.5"), {"cutoff": 1.5}),
    (("--algorithm", "sirt", "--relaxation", "2.5"), {"algorithm": "sirt", "relaxation": 2.5}),
    (("--algorithm", "sirt", "--iterations", "0"), {"algorithm": "sirt", "iterations": 0}),
    (("--algorithm", "fbp"), {"algorithm": "fbp"}),
    (("--backend", "opencl"), {"backend": "opencl"}),
])
def test_usage_errors_carry_the_cli_message(cli, tmp_path, proj_file, args, kw):
    r = cli("recon", proj_file, "-o", tmp_path / "v.h5", *args, check=False)
    assert r.returncode == 2
    p, g = ctforge.read_projections(proj_file)
    with pytest.raises(ctforge.UsageError) as e:
        ctforge.reconstruct(p, g, **kw)
    assert str(e.value) == cli_message(r)


def test_runtime_errors_name_the_file(cli, tmp_path):
    missing = tmp_path / "nope.h5"
    r = cli("recon", missing, "-o", tmp_path / "v.h5", check=False)
    assert r.returncode in (1, 2)
    with pytest.raises(ctforge.Error) as e:
        ctforge.read_projections(missing)
    assert str(missing) in str(e.value)
    (tmp_path / "junk.h5").write_bytes(b"not an HDF5 file at all")
    with pytest.raises(ctforge.Error, match="junk.h5"):
        ctforge.read_volume(tmp_path / "junk.h5")


def test_shape_mismatch_and_bad_arrays(small_cone):
    p = np.zeros((45, 21, 36), np.float32)  # one column short
    with pytest.raises(ctforge.UsageError, match="geometry"):
        ctforge.reconstruct(p, small_cone)
    with pytest.raises(ctforge.UsageError, match="3 dimensions"):
        ctforge.reconstruct(np.zeros((21, 37), np.float32), small_cone)
    with pytest.raises(ctforge.UsageError, match="real numbers"):
        ctforge.reconstruct(np.zeros((45, 21, 37), np.complex64), small_cone)
    bad = np.zeros(small_cone.projection_shape, np.float32)
    bad[3, 4, 5] = np.nan
    with pytest.raises(ctforge.UsageError, match="non-finite|NaN|not finite"):
        ctforge.reconstruct(bad, small_cone, backend="cpu")


def test_nothing_is_written_when_a_write_fails(tmp_path):
    vol = np.zeros((2, 3, 4), np.float32)
    vol[1, 1, 1] = np.inf
    target = tmp_path / "v.h5"
    with pytest.raises(ctforge.Error):
        ctforge.write_volume(target, vol)
    assert list(tmp_path.iterdir()) == []
    good = np.ones((2, 3, 4), np.float32)
    ctforge.write_volume(target, good)
    with pytest.raises(ctforge.Error):
        ctforge.write_volume(target, vol)  # the earlier output survives a failed rewrite
    assert np.array_equal(ctforge.read_volume(target)[0], good)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.h5"]

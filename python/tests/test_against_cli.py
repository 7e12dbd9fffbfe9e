"""Every API function against the command line on the same inputs: bit-identical arrays."""
import json

import numpy as np
import pytest

import ctforge


@pytest.fixture
def simulated(cli, tmp_path, small_cone, geometry_file):
    path = tmp_path / "proj.h5"
    cli("simulate", "--phantom", "shepp-logan", "--phantom-size", "30", "--geometry",
        geometry_file, "-o", path, "--noise-i0", "2e4", "--seed", "7", "--quiet")
    return path


def test_simulate_with_noise(simulated, small_cone):
    p = ctforge.project_analytic(ctforge.shepp_logan(30), small_cone)
    noisy = ctforge.add_poisson_noise(p, i0=2e4, seed=7)
    from_cli, g = ctforge.read_projections(simulated)
    assert g == small_cone
    assert noisy.dtype == np.float32 and noisy.shape == small_cone.projection_shape
    assert np.array_equal(noisy, from_cli)
    assert not np.array_equal(noisy, ctforge.add_poisson_noise(p, i0=2e4, seed=8))  # control
    assert not np.array_equal(noisy, p)  # add_poisson_noise returns a new array


def test_truth_voxelization(cli, tmp_path, small_cone, geometry_file):
    truth = tmp_path / "truth.h5"
    cli("simulate", "--phantom", "shepp-logan", "--phantom-size", "30", "--geometry",
        geometry_file, "-o", tmp_path / "p.h5", "--truth", truth, "--size-xyz", "11,9,7",
        "--supersample", "3", "--quiet")
    ref, grid = ctforge.read_volume(truth)
    assert grid == ctforge.default_grid(small_cone, shape=(7, 9, 11))
    mine = ctforge.voxelize(ctforge.shepp_logan(30), grid, supersample=3)
    assert np.array_equal(mine, ref)


@pytest.mark.parametrize("args,kw", [
    ((), {}),
    (("--filter", "hann", "--cutoff", "0.7"), {"filter": "hann", "cutoff": 0.7}),
    (("--algorithm", "sirt", "--iterations", "4", "--nonnegative"),
     {"algorithm": "sirt", "iterations": 4, "nonnegative": True}),
    (("--size-xyz", "13,11,9", "--spacing", "0.8"), {"grid": {"shape": (9, 11, 13), "spacing": 0.8}}),
])
def test_reconstruct(cli, simulated, tmp_path, args, kw):
    out = tmp_path / "vol.h5"
    cli("recon", simulated, "-o", out, "--backend", "cpu", "--quiet", *args)
    ref, grid = ctforge.read_volume(out)
    p, g = ctforge.read_projections(simulated)
    kw = dict(kw)
    if "grid" in kw:
        kw["grid"] = ctforge.default_grid(g, **kw["grid"])
    vol = ctforge.reconstruct(p, g, backend="cpu", **kw)
    assert vol.shape == grid.shape
    assert np.array_equal(vol, ref)


def test_forward_and_back_projection_of_a_real_volume(cli, tmp_path, data_dir):
    head, grid = ctforge.read_volume(data_dir / "metaimage" / "head.mha")
    g = ctforge.Geometry.cone(48, 40, 6.0, sid=600, sdd=1100, angles=24)
    gpath = tmp_path / "g.json"
    gpath.write_text(g.to_json())
    out = tmp_path / "p.h5"
    cli("simulate", "--phantom", data_dir / "metaimage" / "head.mha", "--phantom-scale",
        "1e-5", "--geometry", gpath, "-o", out, "--backend", "cpu", "--quiet")
    ref, _ = ctforge.read_projections(out)
    # The CLI centres a volume phantom on the isocentre and scales its values.
    centred = ctforge.VolumeGeometry(*grid.shape, grid.spacing)
    scaled = (head.astype(np.float64) * 1e-5).astype(np.float32)  # the CLI scales in double
    mine = ctforge.forward_project(scaled, g, centred, backend="cpu")
    assert np.array_equal(mine, ref)
    bp = ctforge.back_project(mine, g, centred, backend="cpu")
    assert bp.shape == head.shape and np.isfinite(bp).all() and bp.max() > 0


def test_real_synchrotron_scan_with_selection_and_binning(cli, tmp_path, data_dir):
    src = data_dir / "dxchange" / "tooth.h5"
    out = tmp_path / "tooth.h5"
    cli("convert", src, out, "--views", "10:150", "--cols", "40:560", "--bin", "2", "--quiet")
    ref, g_ref = ctforge.read_projections(out)
    p, g, inf = ctforge.read_projections(src, views=slice(10, 160), cols=(40, 560), bin_rows=2,
                                         bin_cols=2, return_info=True)
    assert inf["format"] == "dxchange"
    assert p.shape == (150, 1, 280) and g.type == "parallel" and g == g_ref
    assert np.array_equal(p, ref)
    full, g_full = ctforge.read_projections(src, cols=(40, 560), bin_rows=2, bin_cols=2)
    vol = ctforge.reconstruct(full, g_full, backend="cpu")  # all 181 views: 180 deg
    assert vol.shape == (1, 280, 280) and np.isfinite(vol).all()


def test_compare_matches_the_command_line(cli, tmp_path):
    rng = np.random.default_rng(3)
    a = rng.random((4, 5, 6), dtype=np.float32)
    b = a + np.float32(0.01) * rng.standard_normal((4, 5, 6)).astype(np.float32)
    ctforge.write_volume(tmp_path / "a.h5", a)
    ctforge.write_volume(tmp_path / "b.h5", b)
    text = cli("compare", tmp_path / "a.h5", tmp_path / "b.h5").stdout
    m = ctforge.compare(a, b)
    figures = {line.split(":")[0]: line.split(":")[1].split()[0] for line in text.splitlines()
               if ":" in line}
    assert float(figures["MAE"]) == pytest.approx(m["mae"], rel=1e-5)
    assert float(figures["RMSE"]) == pytest.approx(m["rmse"], rel=1e-5)
    assert float(figures["PSNR"]) == pytest.approx(m["psnr"], abs=0.006)
    assert m["correlation"] > 0.99
    assert ctforge.compare(a, a)["mae"] == 0.0
    assert ctforge.compare(a, np.ones_like(a))["psnr"] is None  # constant reference


def test_cli_reads_what_python_writes(cli, tmp_path, small_cone):
    p = ctforge.project_analytic(ctforge.shepp_logan(30), small_cone)
    ctforge.write_projections(tmp_path / "p.h5", p, small_cone)
    cli("recon", tmp_path / "p.h5", "-o", tmp_path / "v.h5", "--backend", "cpu", "--quiet")
    ref, grid = ctforge.read_volume(tmp_path / "v.h5")
    assert np.array_equal(ctforge.reconstruct(p, small_cone, backend="cpu"), ref)
    described = ctforge.info(tmp_path / "p.h5")
    assert described["kind"] == "projections" and described["format"] == "ctforge"
    assert "45" in described["description"]

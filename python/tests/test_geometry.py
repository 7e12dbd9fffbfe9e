"""Geometry, grids and interchange: the Python objects are the C++ ones, JSON round trips are
exact and the default grid is the command line's."""
import math

import numpy as np
import pytest

import ctforge


def test_cone_views_follow_the_documented_convention(small_cone):
    g = small_cone
    assert g.type == "cone" and g.beam == "cone"
    assert g.projection_shape == (45, 21, 37)
    assert g.pixel_size == (1.0, 1.2)
    v = g.views
    assert v.shape == (45, 12)
    t = g.angles[7]
    # source = (SID sin t, -SID cos t, 0); detector centre = -(SDD - SID)(sin t, -cos t, 0)
    np.testing.assert_allclose(v[7, 0:3], [200 * math.sin(t), -200 * math.cos(t), 0], atol=1e-9)
    np.testing.assert_allclose(v[7, 3:6], [-200 * math.sin(t), 200 * math.cos(t), 0], atol=1e-9)
    np.testing.assert_allclose(v[7, 6:9], [math.cos(t), math.sin(t), 0], atol=1e-12)
    np.testing.assert_allclose(v[7, 9:12], [0, 0, 1.2], atol=1e-12)


def test_view_count_means_a_full_circle():
    g = ctforge.Geometry.parallel(16, 1, 0.5, 8)
    np.testing.assert_allclose(g.angles, np.arange(8) * np.pi / 4)
    assert g.sid is None and g.type == "parallel"


def test_json_round_trip_is_exact(small_cone, tmp_path):
    again = ctforge.Geometry.from_json(small_cone.to_json())
    assert again == small_cone and again.to_json() == small_cone.to_json()
    # JSON stores degrees: the vectors recomputed from them agree to rounding.
    np.testing.assert_allclose(again.views, small_cone.views, rtol=0, atol=1e-12)
    path = tmp_path / "g.json"
    path.write_text(small_cone.to_json())
    assert ctforge.Geometry.from_json(path) == small_cone
    assert ctforge.Geometry.from_json(str(path)) == small_cone


def test_vector_geometry_from_views_is_the_same_scan(small_cone):
    vec = ctforge.Geometry.cone_vec(small_cone.cols, small_cone.rows, small_cone.views)
    assert vec.type == "cone_vec" and vec.angles is None
    np.testing.assert_allclose(vec.projection_matrices(), small_cone.projection_matrices(),
                               rtol=1e-12, atol=1e-9)


def test_astra_and_rtk_round_trips(small_cone):
    rows = small_cone.to_astra()
    back = ctforge.Geometry.from_astra("cone", small_cone.cols, small_cone.rows, rows)
    np.testing.assert_allclose(back.views, small_cone.views, atol=1e-12)
    rtk = ctforge.Geometry.from_rtk_xml(small_cone.to_rtk_xml(), small_cone.cols,
                                        small_cone.rows, small_cone.pixel_size)
    assert rtk.type == "cone"
    np.testing.assert_allclose(rtk.views, small_cone.views, atol=1e-9)


def test_invalid_geometry_is_a_usage_error_naming_the_field():
    with pytest.raises(ctforge.UsageError, match="source_to_detector"):
        ctforge.Geometry.cone(8, 8, 1.0, sid=500, sdd=400, angles=4)
    with pytest.raises(ValueError, match="vectors"):
        ctforge.Geometry.cone_vec(8, 8, np.zeros((3, 11)))
    with pytest.raises(ctforge.UsageError, match="angles"):
        ctforge.Geometry.cone(8, 8, 1.0, 100, 200, angles=0)


def test_default_grid_is_the_command_lines(cli, tmp_path, small_cone, geometry_file):
    ph = tmp_path / "p.h5"
    cli("simulate", "--phantom", "shepp-logan", "--phantom-size", "30", "--geometry",
        geometry_file, "-o", ph, "--quiet")
    for extra, kw in [((), {}), (("--size-xyz", "9,7,5"), {"shape": (5, 7, 9)}),
                      (("--size-xyz", "9,7,5", "--spacing", "0.3,0.4,0.5", "--origin", "1,2,3"),
                       {"shape": (5, 7, 9), "spacing": (0.3, 0.4, 0.5), "origin": (1, 2, 3)})]:
        out = tmp_path / "v.h5"
        cli("recon", ph, "-o", out, "--backend", "cpu", "--quiet", *extra)
        _, grid = ctforge.read_volume(out)
        assert grid == ctforge.default_grid(small_cone, **kw), extra


def test_volume_geometry():
    vg = ctforge.VolumeGeometry(3, 4, 5, (0.5, 1.0, 2.0))
    assert vg.shape == (3, 4, 5) and (vg.nx, vg.ny, vg.nz) == (5, 4, 3)
    assert vg.spacing == (0.5, 1.0, 2.0)
    np.testing.assert_allclose(vg.origin, [-1.0, -1.5, -2.0])  # centred: -(n - 1) / 2 * spacing
    with pytest.raises(ctforge.UsageError):
        ctforge.VolumeGeometry(0, 4, 5, (1, 1, 1))


def test_interchange_matches_ctforge_convert(cli, tmp_path, geometry_file):
    g = ctforge.Geometry.from_json(geometry_file)  # what the CLI reads
    cli("convert", geometry_file, tmp_path / "g.xml", "--quiet")
    assert (tmp_path / "g.xml").read_text() == g.to_rtk_xml()
    cli("convert", geometry_file, tmp_path / "g.txt", "--quiet")
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "g.txt"), g.to_astra())
    cli("convert", tmp_path / "g.xml", tmp_path / "back.json", "--detector", "37,21",
        "--pixel", "1,1.2", "--quiet")
    from_cli = ctforge.Geometry.from_json(tmp_path / "back.json")
    mine = ctforge.Geometry.from_rtk_xml(tmp_path / "g.xml", 37, 21, (1.0, 1.2))
    assert mine == from_cli


def test_cylindrical_detector_round_trip_and_reconstruction():
    """A curved detector (radius SDD about the source) travels through JSON and reconstructs as
    well as a flat one from its own projections; read as flat it does not (negative control)."""
    angles = np.linspace(0, 2 * np.pi, 180, endpoint=False)
    kw = dict(cols=96, rows=1, pixel_size=2.0, sid=200, sdd=400, angles=angles)  # 96 mm field
    curved = ctforge.Geometry.cone(**kw, detector_shape="cylindrical")
    flat = ctforge.Geometry.cone(**kw)
    assert curved.detector_shape == "cylindrical" and flat.detector_shape == "flat"
    back = ctforge.Geometry.from_json(curved.to_json())
    assert back.detector_shape == "cylindrical"
    assert np.allclose(back.views, curved.views, rtol=0, atol=1e-9)
    with pytest.raises(ctforge.UsageError, match="shape"):
        ctforge.Geometry.cone(**kw, detector_shape="spherical")
    phantom = ctforge.shepp_logan(80)
    grid = ctforge.default_grid(flat, (1, 96, 96))
    truth = ctforge.voxelize(phantom, grid)
    psnr = {}
    for name, g in (("curved", curved), ("flat", flat)):
        vol = ctforge.reconstruct(ctforge.project_analytic(phantom, g), g, grid)
        psnr[name] = ctforge.compare(vol, truth)["psnr"]
    wrong = ctforge.reconstruct(ctforge.project_analytic(phantom, curved), flat, grid)
    assert psnr["curved"] > psnr["flat"] - 1.0
    # 13.5 degrees of half fan: curved read as flat loses 3.6 dB here (29.5 -> 25.8 dB)
    assert ctforge.compare(wrong, truth)["psnr"] < psnr["curved"] - 2.0

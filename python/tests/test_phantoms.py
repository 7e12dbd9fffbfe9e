"""Phantoms from dicts and JSON, exact projections and voxelization."""
import json

import numpy as np
import pytest

import ctforge


def test_sphere_line_integrals_are_exact():
    # A sphere of radius 10 mm and density 0.02/mm: a ray at distance s from its centre
    # crosses 2 sqrt(100 - s^2) mm of it.
    ph = ctforge.phantom([{"center": [0, 0, 0], "semi_axes": [10, 10, 10], "density": 0.02}])
    g = ctforge.Geometry.parallel(cols=41, rows=1, pixel_size=0.5, angles=[0.0, 1.0])
    p = ctforge.project_analytic(ph, g)
    s = (np.arange(41) - 20) * 0.5
    expected = 0.02 * 2 * np.sqrt(np.clip(100 - s ** 2, 0, None))
    np.testing.assert_allclose(p[0, 0], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(p[1, 0], expected, rtol=1e-6, atol=1e-7)  # rotation invariant


def test_dict_json_text_and_file_give_the_same_phantom(tmp_path):
    spec = {"ellipsoids": [
        {"center": [1, -2, 0.5], "semi_axes": [6, 3, 4], "rotation_deg": 30, "density": 0.01},
        {"center": [0, 0, 0], "semi_axes": [2, 2, 2], "density": 0.05}]}
    (tmp_path / "ph.json").write_text(json.dumps(spec))
    a = ctforge.phantom(spec)
    assert a.ellipsoid_count == 2
    for other in (ctforge.phantom(json.dumps(spec)), ctforge.phantom(tmp_path / "ph.json"),
                  ctforge.phantom(spec["ellipsoids"]), ctforge.phantom(a.to_json())):
        assert other.to_json() == a.to_json()
    with pytest.raises(ctforge.UsageError, match="semi_axes"):
        ctforge.phantom([{"center": [0, 0, 0], "semi_axes": [1, -1, 1], "density": 1}])


def test_voxelization_conserves_mass():
    ph = ctforge.shepp_logan(64)
    grid = ctforge.VolumeGeometry(33, 34, 35, (2.0, 2.0, 2.0))
    vol = ctforge.voxelize(ph, grid, supersample=4)
    assert vol.shape == (33, 34, 35)
    # Integral of the phantom (1/mm * mm^3) = sum of ellipsoid volumes x densities.
    e = json.loads(ph.to_json())["ellipsoids"]
    exact = sum(4 / 3 * np.pi * np.prod(x["semi_axes"]) * x["density"] for x in e)
    assert vol.sum(dtype=np.float64) * 8.0 == pytest.approx(exact, rel=0.01)

"""Helical scans from Python: Geometry.helical, its coverage, the default grid and algorithm,
helical-fbp against the phantom and the options that do not apply."""
import numpy as np
import pytest

import ctforge

SID, SDD = 300.0, 600.0


def helix(pitch_factor=1.0, shape="cylindrical", turns=7.0):
    rows, dv = 16, 1.0
    feed = pitch_factor * rows * dv * SID / SDD
    views = int(turns * 360)
    angles = np.deg2rad(np.arange(views) * 1.0)
    return ctforge.Geometry.helical(128, rows, 1.0, SID, SDD, angles, pitch_factor=pitch_factor,
                                    z_start=-0.5 * turns * feed, detector_shape=shape)


def test_helical_geometry_properties_and_json():
    g = helix(pitch_factor=1.25)
    assert g.type == "helical" and g.detector_shape == "cylindrical"
    assert g.sid == SID and g.sdd == SDD
    assert g.pitch_mm_per_turn == pytest.approx(1.25 * 16 * 1.0 * SID / SDD)
    cov = g.helical_coverage()
    assert cov["pitch_factor"] == pytest.approx(1.25)
    assert cov["source_z_min"] == pytest.approx(g.z_start)
    # The source climbs the feed per turn: the last view's height from the first's.
    span = (g.view_count - 1) / 360 * g.pitch_mm_per_turn
    assert cov["source_z_max"] == pytest.approx(g.z_start + span)
    assert cov["source_z_min"] < cov["full_z_min"] < cov["full_z_max"] < cov["source_z_max"]
    back = ctforge.Geometry.from_json(g.to_json())
    assert back.type == "helical"
    np.testing.assert_allclose(back.views, g.views, atol=1e-6)
    # The per-view vectors: source on the helix.
    z = g.views[:, 2]
    np.testing.assert_allclose(np.diff(z), g.pitch_mm_per_turn / 360, rtol=1e-9)


def test_helical_refusals():
    with pytest.raises(ctforge.UsageError, match="pitch_mm_per_turn or pitch_factor"):
        ctforge.Geometry.helical(64, 8, 1.0, SID, SDD, np.linspace(0, 20, 100))
    with pytest.raises(ctforge.UsageError, match="angles_deg"):
        ctforge.Geometry.helical(64, 8, 1.0, SID, SDD, [0.0, 0.1, 0.05], pitch_factor=1)
    g = helix(pitch_factor=1.0)
    p = np.zeros(g.projection_shape, np.float32)
    with pytest.raises(ctforge.UsageError, match="helical_q"):
        ctforge.reconstruct(p, g, algorithm="sirt", helical_q=0.5)
    with pytest.raises(ctforge.UsageError, match="helical"):
        ctforge.reconstruct(p, g, algorithm="fdk")
    # A gap in the helix (30 views missing) is named with the views on either side.
    angles = np.deg2rad(np.delete(np.arange(1440) * 1.0, np.arange(700, 730)))
    gap = ctforge.Geometry.helical(128, 16, 1.0, SID, SDD, angles, pitch_factor=1.0)
    with pytest.raises(ctforge.UsageError, match="gap of 31 deg between views 699 and 700"):
        ctforge.reconstruct(np.zeros(gap.projection_shape, np.float32), gap,
                            ctforge.VolumeGeometry(4, 8, 8, (1.0, 1.0, 1.0), None))
    # A pitch the rows cannot cover for half a turn, with the numbers.
    wide = helix(pitch_factor=2.5)
    with pytest.raises(ctforge.UsageError, match="pitch factor 2.5"):
        ctforge.reconstruct(np.zeros(wide.projection_shape, np.float32), wide,
                            ctforge.VolumeGeometry(4, 8, 8, (1.0, 1.0, 1.0), None))


def test_helical_fbp_is_the_default_and_matches_the_phantom():
    g = helix(pitch_factor=1.0, turns=5.0)
    assert ctforge.default_algorithm(g) == "helical-fbp"
    ph = ctforge.shepp_logan(56.0)
    p = ctforge.project_analytic(ph, g)
    cov = g.helical_coverage()
    fine = ctforge.default_grid(g)  # 0.5 mm voxels: the rows' pitch at the isocentre
    assert fine.spacing[2] == pytest.approx(0.5)
    assert fine.origin[2] == pytest.approx(cov["full_z_min"], abs=0.5)
    # Coarser voxels over the same heights (about the C++ tests' 0.875 mm).
    grid = ctforge.default_grid(g, shape=(25, 64, 64))
    z0 = grid.origin[2]
    z1 = z0 + (grid.shape[0] - 1) * grid.spacing[2]
    assert cov["full_z_min"] - 1e-6 <= z0 and z1 <= cov["full_z_max"] + 1e-6
    vol = ctforge.reconstruct(p, g, grid, threads=2)
    truth = ctforge.voxelize(ph, grid)
    # Inside a cylinder of 27 mm about the axis (the phantom's body), the criterion of the
    # C++ accuracy tests (32-35 dB there): MAE < 0.0015, PSNR (peak 0.1) > 26 dB.
    zz, yy, xx = np.meshgrid(*[np.arange(n) for n in grid.shape], indexing="ij")
    x = grid.origin[0] + xx * grid.spacing[0]
    y = grid.origin[1] + yy * grid.spacing[1]
    inside = x * x + y * y <= 27.0 ** 2
    err = vol[inside] - truth[inside]
    psnr = 10 * np.log10(0.1 ** 2 / np.mean(err ** 2))
    assert np.mean(np.abs(err)) < 0.0015
    assert psnr > 26

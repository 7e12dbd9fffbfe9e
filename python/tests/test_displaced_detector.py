"""Displaced-detector weighting from Python: reconstruct(displaced_detector=..., offset_transition=...)
as ``ctforge recon --displaced-detector / --offset-transition``: auto weights a 5.5-pixel offset
as displaced (the same as on), off uses a centred detector's weights and warns, a transition
wider than the overlap is clamped to it, iterative methods and bad values are refused naming
the option."""
import warnings

import numpy as np
import pytest

import ctforge


@pytest.fixture(scope="module")
def scan():
    # 41 pixels of 1 mm displaced by 5.5 pixels: the overlap spans 2 x 14.5 = 29 pixels.
    g = ctforge.Geometry.parallel(cols=41, rows=1, pixel_size=1.0, angles=90, offset_u=5.5)
    grid = ctforge.VolumeGeometry(1, 41, 41, (1.0, 1.0, 1.0))
    p = ctforge.project_analytic(ctforge.shepp_logan(30), g)
    return g, grid, p


def test_modes_and_transition(scan):
    g, grid, p = scan
    rec = lambda **kw: ctforge.reconstruct(p, g, grid, algorithm="fbp", backend="cpu", **kw)
    default = rec()
    assert np.isfinite(default).all()
    np.testing.assert_array_equal(rec(displaced_detector="on"), default)
    np.testing.assert_array_equal(rec(displaced_detector="auto", offset_transition=16), default)
    with pytest.warns(UserWarning, match="displaced_detector='off'"):
        off = rec(displaced_detector="off")
    assert np.abs(off - default).max() > 1e-3 * np.abs(default).max()
    # Clamped to the overlap's width: 29 pixels and anything wider give Wang's ramp. Weights
    # that sum to 1 give the same volume from consistent data: noise tells them apart.
    noisy = p + np.random.default_rng(5).normal(0, 0.05, p.shape).astype(np.float32)
    rec = lambda **kw: ctforge.reconstruct(noisy, g, grid, algorithm="fbp", backend="cpu", **kw)
    wang = rec(offset_transition=1000)
    np.testing.assert_array_equal(rec(offset_transition=29), wang)
    assert np.abs(wang - rec()).max() > 1e-2 * np.abs(default).max()
    # A centred detector does not warn under off.
    centred = ctforge.Geometry.parallel(cols=41, rows=1, pixel_size=1.0, angles=90)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctforge.reconstruct(ctforge.project_analytic(ctforge.shepp_logan(30), centred), centred,
                            grid, algorithm="fbp", backend="cpu", displaced_detector="off")


def test_refusals_name_the_option(scan):
    g, grid, p = scan
    for kw in ({"displaced_detector": "off"}, {"offset_transition": 8}):
        name = next(iter(kw))
        with pytest.raises(ctforge.UsageError, match=f"{name}: does not apply"):
            ctforge.reconstruct(p, g, grid, algorithm="sirt", iterations=1, backend="cpu", **kw)
    with pytest.raises(ctforge.UsageError, match="displaced-detector"):
        ctforge.reconstruct(p, g, grid, algorithm="fbp", backend="cpu", displaced_detector="maybe")
    for bad in (0.5, -2.0, float("nan")):
        with pytest.raises(ctforge.UsageError, match="offset-transition"):
            ctforge.reconstruct(p, g, grid, algorithm="fbp", backend="cpu", offset_transition=bad)


def test_real_360_neutron_scan_small_offset_costs_no_noise(data_dir):
    """The user's case on the real data: a 360-degree neutron sinogram (503 columns) whose axis
    sits 5.7 columns off the detector middle. The default weights (1/2 over the overlap, 16-px
    ramps at its ends) give the background noise of uniform 1/2 weights; Wang's ramp across the
    whole overlap (the old weighting, here offset_transition=1000) is far noisier."""
    ndi = pytest.importorskip("scipy.ndimage")
    path = data_dir / "sinograms" / "sarepy" / "sinogram_360_neutron_image.tif"
    p, g = ctforge.read_projections(path, sinogram=True, angles="0:360:459",
                                    open_beam_cols=[(0, 15), (488, 503)], mode="raw")
    g = g.with_center_of_rotation(245.28)  # ctforge.find_center; algotom 245.75
    with pytest.warns(UserWarning, match="displaced_detector='off'"):
        uniform = ctforge.reconstruct(p, g, algorithm="fbp", displaced_detector="off")[0]
    default = ctforge.reconstruct(p, g, algorithm="fbp")[0]
    wang = ctforge.reconstruct(p, g, algorithm="fbp", offset_transition=1000)[0]
    n = uniform.shape[0]
    y, x = np.mgrid[:n, :n]
    r = np.hypot(x - (n - 1) / 2, y - (n - 1) / 2)
    background = (r < 0.45 * n) & (np.abs(ndi.gaussian_filter(uniform, 4)) < 0.002)
    assert background.mean() > 0.4  # most of the field is sample holder-free background
    s_uniform, s_default, s_wang = (v[background].std() for v in (uniform, default, wang))
    # Measured: default / uniform = 0.999998, Wang / uniform = 1.50.
    assert abs(s_default / s_uniform - 1) < 0.01, (s_default, s_uniform)
    assert s_wang / s_uniform > 1.2, (s_wang, s_uniform)


def test_short_scan_warns_with_the_numbers():
    """A displaced detector on a short scan reconstructs with a UserWarning giving the radius
    beyond which the lines are measured once per turn and the fraction of them measured; a
    displaced full scan and a centred short scan do not warn. 41 pixels of 1 mm moved 5.5 mm:
    the overlap reaches 20 - 5.5 = 14.5 mm from the axis, the wide side 25.5 mm."""
    grid = ctforge.VolumeGeometry(1, 41, 41, (1.0, 1.0, 1.0))
    arc = np.deg2rad(np.arange(100) * 2.0)  # 200 deg

    def run(angles, offset):
        g = ctforge.Geometry.parallel(cols=41, rows=1, pixel_size=1.0, angles=angles,
                                      offset_u=offset)
        p = ctforge.project_analytic(ctforge.shepp_logan(30), g)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rec = ctforge.reconstruct(p, g, grid, algorithm="fbp", backend="cpu")
        assert np.isfinite(rec).all()
        return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]

    short = run(arc, 5.5)
    assert len(short) == 1, short
    for text in ("displaced by 5.50 mm", "covers 200.0 deg", "farther than 14.5 mm",
                 "field's edge at 25.5 mm", "measures 56% of those lines"):
        assert text in short[0], short[0]
    assert run(180, 5.5) == []
    assert run(arc, 0.0) == []

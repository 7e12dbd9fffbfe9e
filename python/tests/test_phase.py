"""Phase retrieval (ctforge.retrieve_phase) against the papers' formulas evaluated here with
numpy float64 FFTs, and on a simulated propagation-based phase-contrast image (a sphere's exit
wave propagated by the Fresnel propagator)."""
import numpy as np
import pytest

import ctforge

HC_EV_MM = 1.23984198e-3  # h c in eV mm


def _fft_size(n):
    """The smallest 2^a 3^b 5^c 7^d >= n (the padded size the library documents)."""
    m = max(n, 1)
    while True:
        r = m
        for f in (2, 3, 5, 7):
            while r % f == 0:
                r //= f
        if r == 1:
            return m
        m += 1


def _reference(p, energy_kev, distance_mm, pitch_u, pitch_v, delta_beta, method, pad_rows,
               pad_cols):
    """-ln of the filtered transmission of each view, float64: the view padded with its edge
    values to the documented FFT size (ceil(extra / 2) after the data, the rest before), the
    2-D DFT, the paper's filter, the inverse, cropped."""
    lam = HC_EV_MM / (energy_kev * 1e3)  # mm
    views, rows, cols = p.shape
    nr, nc = _fft_size(rows + 2 * pad_rows), _fft_size(cols + 2 * pad_cols)
    er, ec = nr - rows, nc - cols
    top, left = er - (er + 1) // 2, ec - (ec + 1) // 2
    fv = np.fft.fftfreq(nr, d=pitch_v)[:, None]  # cycles per mm
    fu = np.fft.fftfreq(nc, d=pitch_u)[None, :]
    if method == "paganin":  # Paganin et al. 2002, eq. (the single-material filter)
        h = 1.0 / (1.0 + np.pi * lam * distance_mm * delta_beta * (fu ** 2 + fv ** 2))
    else:  # Paganin et al. 2020: 1 - (2 delta R / (mu W^2)) (cos(W kx) + cos(W ky) - 2)
        # per axis, mu = 4 pi beta / lambda, k = 2 pi f.
        coef = 2.0 * delta_beta * distance_mm * lam / (4.0 * np.pi)  # 2 delta R / mu
        h = 1.0 / (1.0 - coef * ((np.cos(pitch_u * 2 * np.pi * fu) - 1) / pitch_u ** 2 +
                                 (np.cos(pitch_v * 2 * np.pi * fv) - 1) / pitch_v ** 2))
    out = np.empty(p.shape)
    for v in range(views):
        t = np.pad(np.exp(-p[v].astype(np.float64)), ((top, er - top), (left, ec - left)),
                   mode="edge")
        f = np.real(np.fft.ifft2(np.fft.fft2(t) * h))
        out[v] = -np.log(f[top:top + rows, left:left + cols])
    return out


def _structured(views, rows, cols, seed=5):
    """Line integrals in [0, ~1]: blobs, a bar and noise (every frequency present)."""
    rng = np.random.default_rng(seed)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    p = np.zeros((views, rows, cols))
    for v in range(views):
        for k in range(3):
            d2 = (r - rows * (0.2 + 0.3 * k)) ** 2 + (c - cols * (0.3 + 0.25 * k + 0.05 * v)) ** 2
            p[v] += 0.6 * np.exp(-d2 / (2 * 4.0 + 0.05 * rows * cols))
        p[v][:, cols // 2: cols // 2 + 2] += 0.3
    p += rng.uniform(0, 0.1, p.shape)
    return p.astype(np.float32)


OPTS = dict(energy_kev=20.0, distance_mm=100.0, delta_beta=500.0)


@pytest.mark.parametrize("method", ["paganin", "generalized"])
@pytest.mark.parametrize("shape,pad,pitch", [
    ((2, 1, 17), (0, 0), 0.005),          # one row, no padding
    ((1, 13, 31), (3, 5), 0.005),         # odd sizes
    ((3, 20, 9), (7, 0), (0.004, 0.007)),  # separate pitches (u, v)
    ((1, 48, 40), (24, 24), 0.003),
])
def test_matches_paper_formula(method, shape, pad, pitch):
    p = _structured(*shape)
    pu, pv = (pitch, pitch) if np.ndim(pitch) == 0 else pitch
    ours = ctforge.retrieve_phase(p, pixel_size_mm=pitch, method=method, padding=pad, **OPTS)
    ref = _reference(p, OPTS["energy_kev"], OPTS["distance_mm"], pu, pv, OPTS["delta_beta"],
                     method, *pad)
    assert ours.dtype == np.float32 and ours.shape == p.shape
    # float32 exp, FFT (relative error ~ eps log2 N, eps = 6e-8) and log: the filtered
    # transmission (>= 0.35 here) within ~2e-6 of float64's, the output within 2e-6 / 0.35;
    # 1e-5 allows for that with a margin and is far below the filters' own effect (checked).
    assert np.abs(ours - ref).max() < 1e-5
    assert np.abs(ref - p).max() > 1e-2


def test_generalized_differs_from_paganin_near_the_pixel_scale():
    # The two filters agree to second order in f; a bar of 2 pixels has content near Nyquist,
    # where the generalised filter passes more (less blur).
    p = _structured(1, 30, 40)
    a = ctforge.retrieve_phase(p, pixel_size_mm=0.005, method="paganin", padding=8, **OPTS)
    b = ctforge.retrieve_phase(p, pixel_size_mm=0.005, method="generalized", padding=8, **OPTS)
    assert np.abs(a - b).max() > 1e-3
    assert np.abs(b - p).std() < np.abs(a - p).std()


def test_automatic_padding_is_the_edge_extended_filter():
    # padding=None uses the filter's own margin (tolerance 1e-6 of the transmission): the same
    # result as a reference padded three times as far, within float32 rounding.
    p = _structured(1, 25, 33)
    m = ctforge.phase_row_margin(pixel_size_mm=0.005, tolerance=1e-6, **OPTS)
    ours = ctforge.retrieve_phase(p, pixel_size_mm=0.005, **OPTS)
    ref = _reference(p, OPTS["energy_kev"], OPTS["distance_mm"], 0.005, 0.005,
                     OPTS["delta_beta"], "paganin", 3 * m, 3 * m)
    assert np.abs(ours - ref).max() < 1e-5
    # the negative control: no padding wraps the opposite edge around
    bare = ctforge.retrieve_phase(p, pixel_size_mm=0.005, padding=0, **OPTS)
    assert np.abs(bare - ref).max() > 1e-3


def _fresnel_sphere(n, radius_px, pitch_mm, energy_kev, distance_mm, delta, beta):
    """Intensity behind a sphere (projected thickness t, 4x supersampled and averaged per
    pixel), the exit wave exp(-i k (delta - i beta) t) propagated over distance_mm by the
    Fresnel propagator exp(-i pi lambda R |f|^2) on a periodic grid (free space all around).
    Returns (-ln I, t in mm)."""
    lam = HC_EV_MM / (energy_kev * 1e3)
    s = 4
    x = (np.arange(n * s) + 0.5) / s - n / 2
    r2 = x[:, None] ** 2 + x[None, :] ** 2
    t_fine = 2 * np.sqrt(np.clip(radius_px ** 2 - r2, 0, None)) * pitch_mm
    t = t_fine.reshape(n, s, n, s).mean(axis=(1, 3))
    k = 2 * np.pi / lam
    exit_wave = np.exp(-1j * k * delta * t - k * beta * t)
    f = np.fft.fftfreq(n, d=pitch_mm)
    prop = np.exp(-1j * np.pi * lam * distance_mm * (f[:, None] ** 2 + f[None, :] ** 2))
    intensity = np.abs(np.fft.ifft2(np.fft.fft2(exit_wave) * prop)) ** 2
    return -np.log(intensity), t


@pytest.mark.parametrize("method", ["paganin", "generalized"])
def test_propagated_sphere_fringes_removed_thickness_recovered(method):
    energy, dist, pitch = 20.0, 50.0, 0.001       # keV, mm, mm (1 um pixels)
    delta, beta = 6e-7, 4e-10                      # a plastic at 20 keV: delta/beta = 1500
    p, t = _fresnel_sphere(192, 40, pitch, energy, dist, delta, beta)
    lam = HC_EV_MM / (energy * 1e3)
    mu = 4 * np.pi * beta / lam                    # per mm
    true = mu * t
    peak = true.max()
    inside, outside = t > 0, t == 0
    # Raw: edge fringes far beyond the attenuation (bright outside, dark inside the edge).
    assert p[outside].min() < -0.5 * peak
    assert (p - true).max() > 0.5 * peak
    out = ctforge.retrieve_phase(p.astype(np.float32), energy_kev=energy, distance_mm=dist,
                                 pixel_size_mm=pitch, delta_beta=delta / beta, method=method)
    # Retrieved (float64 evaluation of the formulas here: Paganin 3.8 %, generalised 3.4 % at
    # the rim, 0.25 % in the core, -0.8 % / -1.3 % outside; the raw fringes are 50 times the
    # peak): no overshoot beyond 3 % of the peak, mu t within 5 % of its peak everywhere (the
    # TIE's own error at the steep rim, sampled on 1-um pixels) and within 1 % in the
    # interior (5 pixels in from the rim), the thickness at the centre within 1 %.
    err = out - true
    assert out[outside].min() > -0.03 * peak
    assert np.abs(err).max() < 0.05 * peak
    x = np.arange(192) + 0.5 - 96
    core = (x[:, None] ** 2 + x[None, :] ** 2) < 35 ** 2
    assert np.abs(err[core]).max() < 0.01 * peak
    thickness = out / mu                            # the Paganin thickness, mm
    assert abs(thickness.max() - 2 * 40 * pitch) < 0.01 * 2 * 40 * pitch


def test_band_with_margin_equals_whole_view():
    p = _structured(2, 200, 21)
    whole = ctforge.retrieve_phase(p, pixel_size_mm=0.005, **OPTS)
    peak = whole.max()
    # The margin bounds the filtered transmission's change by tolerance * max exp(-p) (<= 1
    # here); in -ln units that is divided by the filtered transmission, >= exp(-peak).
    tol = 1e-5 * peak * np.exp(-peak)
    m = ctforge.phase_row_margin(pixel_size_mm=0.005, tolerance=tol, **OPTS)
    assert 10 < m < 80  # the bands below are then neither the whole view nor margin-free
    for r0, r1 in [(90, 110), (0, 12), (188, 200)]:
        a, b = max(0, r0 - m), min(200, r1 + m)
        band = ctforge.retrieve_phase(p[:, a:b], pixel_size_mm=0.005, **OPTS)
        assert np.abs(band[:, r0 - a:r1 - a] - whole[:, r0:r1]).max() < 1e-5 * peak
    bare = ctforge.retrieve_phase(p[:, 90:110], pixel_size_mm=0.005, **OPTS)
    assert np.abs(bare - whole[:, 90:110]).max() > 1e-3 * peak


@pytest.mark.parametrize("bad,name", [
    (dict(energy_kev=0), "energy_kev"), (dict(distance_mm=-1), "distance_mm"),
    (dict(pixel_size_mm=0), "pixel_size_mm"), (dict(delta_beta=0), "delta_beta"),
    (dict(method="tie"), "phase method"), (dict(padding=-3), "pad_rows"),
    (dict(padding=(0, -2)), "pad_cols"), (dict(pixel_size_mm=(0.01, -1)), "pixel_v_mm"),
])
def test_bad_options_named(bad, name):
    kw = dict(energy_kev=20.0, distance_mm=100.0, pixel_size_mm=0.005, delta_beta=500.0)
    kw.update(bad)
    with pytest.raises(ctforge.UsageError, match=name):
        ctforge.retrieve_phase(np.zeros((2, 3, 4), np.float32), **kw)


def test_unloggable_view_named():
    p = np.zeros((3, 4, 5), np.float32)
    p[1] = 200.0  # exp(-200) underflows to 0 in float32
    with pytest.raises(ctforge.Error, match="view 1"):
        ctforge.retrieve_phase(p, pixel_size_mm=0.005, **OPTS)

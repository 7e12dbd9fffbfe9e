"""Zinger and stripe removal against independent implementations: algotom (the authors of Vo et
al. 2018) for the stripe methods, scipy.ndimage's median filter with tomopy's rule for zingers."""
import numpy as np
import pytest

import ctforge

algotom_removal = pytest.importorskip("algotom.prep.removal")
ndi = pytest.importorskip("scipy.ndimage")


def _noisy(views, cols, width, seed):
    """Broad or narrow traces with float64 noise: no two values of a column are equal (the
    sort-based methods then leave no choice of order to the sort)."""
    rng = np.random.default_rng(seed)
    v = np.arange(views)[:, None]
    c = np.arange(cols)[None, :]
    a = np.pi * v / views
    x = c - 0.5 * (cols - 1)
    s = 0.2 + 0 * x * a
    for k in (1, 2, 3):
        d = (x - 0.25 * cols * np.cos(a + k) / k) / (width * cols + 1.0)
        s = s + np.exp(-0.5 * d * d)
    return (s + rng.normal(0, 0.01, s.shape)).astype(np.float32)


def _sinogram(views=120, cols=101, seed=3):
    """A smooth sinogram (three sinusoid traces) with stripes and a little noise."""
    s = _noisy(views, cols, 0.2, seed)
    s[:, 30] += np.float32(0.3)
    s[: views // 2, 70] -= np.float32(0.2)
    return s


@pytest.mark.parametrize("size", [11, 21])
def test_sorting_matches_algotom(size):
    sino = _sinogram()
    ours = ctforge.remove_stripes(sino, method="sorting", size=size)
    ref = algotom_removal.remove_stripe_based_sorting(sino, size=size)
    # The same sort and median: equal values (no ties in noisy data); float32 vs float64 output.
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)
    assert not np.array_equal(ours, sino)  # the step did something


@pytest.mark.parametrize("sigma,size", [(3, 21), (5, 11)])
def test_filtering_matches_algotom(sigma, size):
    sino = _sinogram(views=151, cols=97)
    ours = ctforge.remove_stripes(sino, method="filtering", sigma=sigma, size=size)
    ref = algotom_removal.remove_stripe_based_filtering(sino, sigma=sigma, size=size)
    # Single- against double-precision FFTs of the columns: 1e-4 of the data range.
    tol = 1e-4 * float(sino.max() - sino.min())
    np.testing.assert_allclose(ours, ref, rtol=0, atol=tol)


def test_stack_is_every_rows_sinogram():
    stack = np.stack([_sinogram(seed=s) for s in range(3)], axis=1)  # [views][rows][cols]
    ours = ctforge.remove_stripes(stack, method="sorting", size=11)
    for r in range(3):
        ref = algotom_removal.remove_stripe_based_sorting(stack[:, r, :], size=11)
        np.testing.assert_allclose(ours[:, r, :], ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("size,views", [(3, 1), (5, 3)])
def test_zingers_match_median_rule(size, views):
    rng = np.random.default_rng(5)
    p = rng.normal(1.0, 0.05, (9, 12, 31)).astype(np.float32)
    hits = rng.choice(p.size, 20, replace=False)
    p.flat[hits] += 3.0
    ours, replaced = ctforge.remove_zingers(p, threshold=0.5, size=size, views=views,
                                           return_count=True)
    med = ndi.median_filter(p, size=(views, size, size), mode="reflect")
    ref = np.where(p.astype(np.float64) - med >= 0.5, med, p)
    np.testing.assert_array_equal(ours, ref)
    assert replaced == int(np.count_nonzero(ours != p))
    assert replaced >= 19  # the injected ones (a neighbour of another may also exceed)


def test_bad_options_name_themselves():
    sino = _sinogram()
    with pytest.raises(ctforge.UsageError, match="--rings|method"):
        ctforge.remove_stripes(sino, method="rings")
    with pytest.raises(ctforge.UsageError, match="zinger threshold"):
        ctforge.remove_zingers(sino[None], threshold=0)



@pytest.mark.parametrize("seed", [0, 2])
def test_large_dead_all_match_algotom(seed):
    sino = _noisy(120, 101, 0.08, seed)
    sino[:, 30] = 0.5                  # a dead column
    sino[:, 60:65] *= np.float32(1.3)  # a large stripe
    for c in range(sino.shape[1]):  # no ties but the dead column's
        assert c == 30 or len(np.unique(sino[:, c])) == sino.shape[0]
    cases = [("large", algotom_removal.remove_large_stripe(sino, 3.0, 51), {}),
             ("dead", algotom_removal.remove_dead_stripe(sino, 3.0, 51), {}),
             ("all", algotom_removal.remove_all_stripe(sino, 3.0, 51, 21), {"size": 21})]
    for method, ref, kw in cases:
        ours = ctforge.remove_stripes(sino, method=method, snr=3.0, la_size=51, **kw)
        # Single- against double-precision division and interpolation: 1e-6 of the range.
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6 * float(np.ptp(sino)),
                                   err_msg=method)

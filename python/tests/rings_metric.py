"""A ring-artefact measure of a reconstructed slice: rings are circles about the rotation axis,
so they survive averaging over the polar angle while the object's features mostly do not."""
import numpy as np
from scipy import ndimage


def radial_profile(image, centre=None, radius=None, step=0.5, angles=720):
    """Mean of ``image`` (ny, nx) over the polar angle at radii 0, step, ... radius (pixels)
    about ``centre`` (x, y; default the image centre, where the reconstruction puts the
    rotation axis), by bilinear interpolation."""
    ny, nx = image.shape
    cx, cy = ((nx - 1) / 2, (ny - 1) / 2) if centre is None else centre
    if radius is None:
        radius = min(cx, cy, nx - 1 - cx, ny - 1 - cy)
    r = np.arange(0, radius + step / 2, step)
    t = np.linspace(0, 2 * np.pi, angles, endpoint=False)
    x = cx + r[:, None] * np.cos(t)[None, :]
    y = cy + r[:, None] * np.sin(t)[None, :]
    polar = ndimage.map_coordinates(image.astype(np.float64), [y, x], order=1, mode="nearest")
    return r, polar.mean(axis=1)


def ring_power(image, radius, step=0.5, window_px=5.0, inner_px=3.0, exclude=(),
               exclude_px=4.0):
    """Mean square of the radial profile's high-pass residue (the profile minus its running
    median over ``window_px`` pixels of radius) for inner_px < r <= radius: the power of
    features a few pixels wide that are constant along circles about the axis, i.e. rings. The
    innermost pixels are left out (few distinct samples there), and so are radii within
    ``exclude_px`` of each radius in ``exclude``."""
    r, prof = radial_profile(image, radius=radius, step=step)
    size = int(round(window_px / step)) | 1
    residue = prof - ndimage.median_filter(prof, size=size, mode="nearest")
    keep = r > inner_px
    for e in exclude:
        keep &= np.abs(r - e) > exclude_px
    return float(np.mean(residue[keep] ** 2))

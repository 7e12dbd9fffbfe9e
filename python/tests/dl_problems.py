"""Small problems for the deep-learning operators' tests (test_torch.py, test_jax.py): odd
volume and detector sizes, four irregular views, one per geometry family."""
import numpy as np

import ctforge

ANGLES = [0.1, 0.9, 1.7, 2.6]  # radians, irregular so that no two views are mirror images
FAMILIES = ["parallel", "fan", "cone", "cone_vec", "cylindrical"]


def problem(family):
    """(geometry, grid) of ``family``: volumes (5, 9, 7) voxels of 1 mm ((1, 9, 7) for the fan
    beam), detectors of 11 columns and 7 rows (1 for the fan beam)."""
    grid = ctforge.VolumeGeometry(5, 9, 7, (1.0, 1.0, 1.0))
    cone = dict(pixel_size=2.0, sid=30.0, sdd=60.0, angles=ANGLES)  # magnification 2
    if family == "parallel":
        return ctforge.Geometry.parallel(11, 7, 1.0, ANGLES), grid
    if family == "fan":
        return (ctforge.Geometry.cone(11, 1, **cone),
                ctforge.VolumeGeometry(1, 9, 7, (1.0, 1.0, 1.0)))
    if family == "cone":
        return ctforge.Geometry.cone(11, 7, **cone), grid
    if family == "cylindrical":
        return ctforge.Geometry.cone(11, 7, detector_shape="cylindrical", **cone), grid
    if family == "cone_vec":
        # the circular scan with the source raised 1.5 mm and the detector rolled 0.1 rad
        v = np.array(ctforge.Geometry.cone(11, 7, **cone).views, dtype=np.float64)
        v[:, 2] += 1.5
        u, w = v[:, 6:9].copy(), v[:, 9:12].copy()
        c, s = np.cos(0.1), np.sin(0.1)
        v[:, 6:9], v[:, 9:12] = c * u + s * w, c * w - s * u
        return ctforge.Geometry.cone_vec(11, 7, v), grid
    raise ValueError(family)


def relative_difference(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))

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


# FDK / FBP (ctforge.torch.FBP, ctforge.jax.FBP): circular scans of 7 irregular views over a
# full turn (a short scan of 4 views would not cover 180 deg + the fan angle), with the
# displaced (half-fan) detector that reconstruct pads on its narrow side.
FBP_FAMILIES = ["parallel", "fan", "cone", "cylindrical", "cone_displaced", "cone_vec"]
FBP_ANGLES = [0.1, 0.9, 1.8, 2.7, 3.5, 4.6, 5.5]


def fbp_problem(family):
    """(geometry, grid, algorithm) of ``family``: volumes (3, 9, 7) voxels of 1 mm ((1, 9, 7)
    for the fan beam), detectors of 11 columns and 5 rows (1 for the fan beam)."""
    grid = ctforge.VolumeGeometry(3, 9, 7, (1.0, 1.0, 1.0))
    cone = dict(pixel_size=2.0, sid=30.0, sdd=60.0, angles=FBP_ANGLES)
    if family == "parallel":
        return ctforge.Geometry.parallel(11, 5, 1.0, FBP_ANGLES), grid, "fbp"
    if family == "fan":
        return (ctforge.Geometry.cone(11, 1, **cone),
                ctforge.VolumeGeometry(1, 9, 7, (1.0, 1.0, 1.0)), "fdk")
    if family == "cone":
        return ctforge.Geometry.cone(11, 5, **cone), grid, "fdk"
    if family == "cylindrical":
        return ctforge.Geometry.cone(11, 5, detector_shape="cylindrical", **cone), grid, "fdk"
    if family == "cone_displaced":
        return ctforge.Geometry.cone(11, 5, offset_u=5.0, **cone), grid, "fdk"
    if family == "cone_vec":
        # the circular scan with its detector rolled 0.1 rad: FDK resamples it onto its circular
        # equivalent's detectors (bicubic), and the adjoint splats it back
        v = np.array(ctforge.Geometry.cone(11, 5, **cone).views, dtype=np.float64)
        u, w = v[:, 6:9].copy(), v[:, 9:12].copy()
        c, s = np.cos(0.1), np.sin(0.1)
        v[:, 6:9], v[:, 9:12] = c * u + s * w, c * w - s * u
        return ctforge.Geometry.cone_vec(11, 5, v), grid, "fdk"
    raise ValueError(family)

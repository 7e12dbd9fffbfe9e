// Cylindrical (curved) detector arithmetic shared by the CPU paths and the CUDA kernels.
//
// A cylindrical detector of a circular cone-beam view (geometry::shape ==
// detector_shape::cylindrical) is described by the same view vectors as a flat one, read as the
// tangent frame at the detector's centre pixel:
//   * the cylinder's axis runs through the source s along v (the rotation axis);
//   * its radius R is the in-plane distance from the source to detector_center (= SDD);
//   * n = in-plane unit vector from s towards detector_center, t = u / |u| the unit tangent there;
//   * columns are equally spaced in arc length: column offset sc (pixels from the centre) sits
//     at the fan angle gamma = sc |u| / R from n, towards t; rows are flat along v.
// Pixel (sc, sr) centre (offsets from the centre pixel, in pixels):
//   s + R (cos gamma n + sin gamma t) + (hc + sr |v|) v_hat,   hc = (detector_center - s).v_hat
// A world point x maps (cyl_map) with a = t.(x - s) / R, b = v_hat.(x - s) / |v|,
// c = n.(x - s) / R and l = sqrt(a^2 + c^2) (the in-plane distance to the source over R) to
//   col = col0 + col_scale atan2(a, c),   row = row0 + b / l
// with col_scale = R / |u|, col0 = (cols - 1) / 2, row0 = (rows - 1) / 2 - hc / |v|.
// l plays the role of the flat detector's depth fraction w: 1 on the detector, 0 at the source,
// and the curved FDK back-projection weight is 1 / l^2 (Kak & Slaney's 1 / L^2, equiangular
// fan beam, with (SID/SDD)^2 folded into the pre-weights as for the flat detector).
// Curved detectors exist for circular orbits only (v along z, t and n in the xy-plane), so a
// and c depend on (x, y) only and b on z only: the mapping packs into 12 floats, the size of a
// projection matrix, which lets the CUDA back-projector keep them in the same constant memory.
#pragma once

#include <array>

#include "math/geometry.hpp"
#include "math/hd.hpp"

namespace ctforge::kernels {

/// World position (mm) of the pixel at (sc, sr) pixels from the centre pixel of a cylindrical
/// detector given by its view vectors (source s, detector centre d, steps u and v; see the file
/// comment). Double precision: set-up arithmetic of rays (CPU and CUDA forward projectors).
CTFORGE_HD void cylinder_pixel_center(const double s[3], const double d[3], const double u[3],
                                      const double v[3], double sc, double sr, double out[3]) {
  const double vn = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
  const double un = sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
  double vh[3], e[3], rc[3];
  for (int a = 0; a < 3; ++a) {
    vh[a] = v[a] / vn;
    e[a] = d[a] - s[a];
  }
  const double hc = e[0] * vh[0] + e[1] * vh[1] + e[2] * vh[2];
  for (int a = 0; a < 3; ++a) rc[a] = e[a] - hc * vh[a];
  const double r = sqrt(rc[0] * rc[0] + rc[1] * rc[1] + rc[2] * rc[2]);
  const double gamma = sc * un / r;
  const double cg = cos(gamma), sg = sin(gamma);
  const double h = hc + sr * vn;
  for (int a = 0; a < 3; ++a) out[a] = s[a] + cg * rc[a] + sg * r * u[a] / un + h * vh[a];
}

/// Per-view cylindrical mapping in float (trivially copyable; see the file comment):
///   m[0..2]: a = m0 x + m1 y + m2      m[3..5]: c = m3 x + m4 y + m5
///   m[6..7]: b = m6 z + m7             m[8]: row0   m[9]: col0   m[10]: col_scale   m[11]: 0
struct cyl_map {
  float m[12];
};

/// The part of the mapping that depends on (x, y) only: column, 1 / l (l floored at 1e-6) and
/// l itself (0 at or behind the source plane, c <= 0). The CPU back-projector computes it once
/// per voxel column and view and reuses it for every z (cyl_row_of).
struct cyl_column {
  float col, inv_l, l;
};
CTFORGE_HD cyl_column cyl_column_of(const cyl_map& P, float x, float y) {
  const float* m = P.m;
  const float a = m[0] * x + m[1] * y + m[2];
  const float c = m[3] * x + m[4] * y + m[5];
  const float l = sqrtf(a * a + c * c);
  return {m[9] + m[10] * atan2f(a, c), 1.0f / (l > 1e-6f ? l : 1e-6f), c > 0.0f ? l : 0.0f};
}
/// The row of height z for a voxel column's 1 / l.
CTFORGE_HD float cyl_row_of(const cyl_map& P, float z, float inv_l) {
  return P.m[8] + (P.m[6] * z + P.m[7]) * inv_l;
}
/// FDK distance weight 1 / l^2 of a voxel column (l floored at 1e-6; 0 where l = 0).
CTFORGE_HD float cyl_fdk_weight(const cyl_column& q) {
  const float l = q.l > 1e-6f ? q.l : 1e-6f;
  return q.l > 1e-6f ? 1.0f / (l * l) : 0.0f;
}

/// Detector coordinates of a world point (mm) on a cylindrical detector: col, row and the
/// in-plane distance fraction l (w of detector_point; 1 on the detector, 0 at the source);
/// w = 0 at or behind the source plane (c <= 0).
CTFORGE_HD detector_point project_point(const cyl_map& P, float x, float y, float z) {
  const cyl_column q = cyl_column_of(P, x, y);
  return {q.col, cyl_row_of(P, z, q.inv_l), q.l};
}

/// The cyl_map of a view in double precision (the same layout), e.g. to shift rows (m[8]) for a
/// slab before rounding to float.
using cyl_map_d = std::array<double, 12>;

}  // namespace ctforge::kernels

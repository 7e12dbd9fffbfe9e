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
#pragma once

#include <vector>

#include "kernels/geometry.cuh"
#include "kernels/hd.cuh"

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

/// Per-view cylindrical mapping in float for back-projection (trivially copyable; see the file
/// comment): m rows give a, b, c of the point (x, y, z, 1).
struct cyl_map {
  float m[12];
  float col0, col_scale, row0;
};

/// Detector coordinates of a world point (mm) on a cylindrical detector: col, row and the
/// in-plane distance fraction l (w of detector_point; 1 on the detector, 0 at the source).
CTFORGE_HD detector_point project_point(const cyl_map& P, float x, float y, float z) {
  const float* m = P.m;
  const float a = m[0] * x + m[1] * y + m[2] * z + m[3];
  const float b = m[4] * x + m[5] * y + m[6] * z + m[7];
  const float c = m[8] * x + m[9] * y + m[10] * z + m[11];
  const float l = sqrtf(a * a + c * c);
  const float li = 1.0f / (l > 1e-6f ? l : 1e-6f);
  return {P.col0 + P.col_scale * atan2f(a, c), P.row0 + b * li, c > 0.0f ? l : 0.0f};
}

/// Host helper: float mappings of every view of a cylindrical-detector geometry, computed from
/// ctforge::cylinder_frame_of in double (usage_error for a flat detector).
std::vector<cyl_map> cylinder_maps(const ctforge::geometry& g);

}  // namespace ctforge::kernels

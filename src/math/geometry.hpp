// Projection of world points onto the detector with a per-view 3x4 matrix, shared by host and
// device. The matrices are computed once on the host in double precision
// (ctforge::compute_projection_matrix) and handed to kernels as floats
// (kernels::float_matrices, src/core/projection_maps.hpp).
#pragma once

#include "math/hd.hpp"

namespace ctforge::kernels {

/// Row-major 3x4 projection matrix in float: [p0 p1 p2] = M [x y z 1], col = p0/p2, row = p1/p2.
struct proj_matrix {
  float m[12];
};

/// Detector coordinates of a world point (mm): pixel indices (col, row) and depth fraction w
/// (cone: 1 on the detector plane, 0 at the source; parallel: 1).
struct detector_point {
  float col, row, w;
};

CTFORGE_HD detector_point project_point(const proj_matrix& P, float x, float y, float z) {
  const float* m = P.m;
  const float p0 = m[0] * x + m[1] * y + m[2] * z + m[3];
  const float p1 = m[4] * x + m[5] * y + m[6] * z + m[7];
  const float p2 = m[8] * x + m[9] * y + m[10] * z + m[11];
  const float inv = 1.0f / p2;
  return {p0 * inv, p1 * inv, p2};
}

}  // namespace ctforge::kernels

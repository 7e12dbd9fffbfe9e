// Projection pre-weighting for FDK (cone / fan beam) and FBP (parallel beam), shared by the
// CPU path and the CUDA kernel. Applied to the line integrals before ramp filtering:
//   weight = view_scale * cosine(a, b) * parker(beta, gamma)
// with a, b the detector coordinates (mm) relative to the principal point (the foot of the
// perpendicular from the source), gamma = atan(a / SDD) the fan angle of the column.
#pragma once

#include "kernels/hd.cuh"

namespace ctforge::kernels {

inline constexpr float k_pi_f = 3.14159265358979323846f;

/// Geometry-wide constants (trivially copyable; passed to kernels by value).
struct preweight_params {
  int cols, rows;
  float du, dv;        ///< pixel pitch (mm)
  float sdd;           ///< source-to-detector distance (mm); 0 for parallel beam
  float c0, r0;        ///< (cols - 1) / 2, (rows - 1) / 2
  float parker_delta;  ///< Parker over-scan half-angle (rad): weights for a scan range of
                       ///< pi + 2 delta; negative = full scan (no Parker weights)
  float gamma_sign;    ///< +1 when angles increase along the scan, -1 when they decrease
};

/// Per-view constants.
struct preweight_view {
  float beta;      ///< angle from the first view along the scan direction (rad, >= 0)
  float offset_u;  ///< detector offset along u (mm)
  float offset_v;  ///< detector offset along v (mm)
  float scale;     ///< angular weight of the view (rad) x redundancy (1/2 for full scans)
                   ///< x (SID/SDD)^2 for cone beam (the FDK distance weight's constant part)
};

/// Parker weight of the ray at fan angle gamma (rad) in a short scan of pi + 2 delta.
/// In ctforge's convention the conjugate of ray (beta, gamma) is (beta + pi - 2 gamma, -gamma),
/// so weights over each redundant pair sum to 1. gamma = 0 gives the parallel-beam weights.
CTFORGE_HD float parker_weight(float beta, float gamma, float delta) {
  const float q = k_pi_f / 4.0f;
  if (beta < 0.0f) return 0.0f;
  if (beta <= 2.0f * (delta + gamma)) {
    const float d = delta + gamma;
    if (d <= 0.0f) return 0.0f;
    const float s = sinf(q * beta / d);
    return s * s;
  }
  if (beta <= k_pi_f + 2.0f * gamma) return 1.0f;
  if (beta <= k_pi_f + 2.0f * delta) {
    const float d = delta - gamma;
    if (d <= 0.0f) return 0.0f;
    const float s = sinf(q * (k_pi_f + 2.0f * delta - beta) / d);
    return s * s;
  }
  return 0.0f;
}

/// Pre-weight of pixel (col, row) of one view.
CTFORGE_HD float preweight(const preweight_params& p, const preweight_view& v, int col, int row) {
  const float a = (static_cast<float>(col) - p.c0) * p.du + v.offset_u;
  const float b = (static_cast<float>(row) - p.r0) * p.dv + v.offset_v;
  float w = v.scale;
  float gamma = 0.0f;
  if (p.sdd > 0.0f) {
    w *= p.sdd / sqrtf(p.sdd * p.sdd + a * a + b * b);
    gamma = p.gamma_sign * atanf(a / p.sdd);
  }
  if (p.parker_delta >= 0.0f) w *= parker_weight(v.beta, gamma, p.parker_delta);
  return w;
}

}  // namespace ctforge::kernels

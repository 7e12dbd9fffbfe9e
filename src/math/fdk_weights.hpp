// Projection pre-weighting for FDK (cone / fan beam) and FBP (parallel beam), shared by the
// CPU path and the CUDA kernel. Applied to the line integrals before ramp filtering:
//   weight = view_scale * cosine(a, b) * redundancy(beta, a)
// with a, b the detector coordinates (mm) relative to the principal point (the foot of the
// perpendicular from the source), gamma = atan(a / SDD) the fan angle of the column.
// Cylindrical (curved) detectors: a is the arc length (mm) from the central ray, so the fan
// angle gamma = a / SDD is linear in the column, and cosine(a, b) = cos(gamma) SDD /
// sqrt(SDD^2 + b^2): the cosine between the ray and the central ray, as for the flat detector
// (Kak & Slaney's D cos(gamma) for equiangular fan data, extended to rows as in curved FDK).
//
// Redundancy: every line through the object is measured by the ray (beta, gamma) and by its
// conjugate (beta + pi - 2 gamma, -gamma), i.e. at detector coordinate -a on another view, and
// the weights of the measurements of one line must sum to 1:
//  * centred detector, full scan: 1/2 each (folded into view_scale);
//  * centred detector, short scan: Parker's weights (parker_weight);
//  * displaced (half-fan) detector, full scan: displaced_weight: 1/2 in the overlap |a| <= m
//    that both sides of the detector cover, 1 beyond it on the wide side, where the conjugate
//    is not on the detector, 0 beyond -m, with smooth ramps of width t (transition_mm) at both
//    ends of the overlap; t = 2m is Wang's ramp across the whole overlap;
//  * displaced detector, short scan: the normalised weights A(beta) W(a) / sum over the
//    measurements of that line of A W, with A a smooth window over the scan (scan_window) and
//    W the same displaced_weight: the measurements of one line sum to 1, a line measured once
//    gets 1.
#pragma once

#include "math/hd.hpp"

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
  /// Displaced (half-fan) detector: half-width (mm) of the overlap |a| <= m that both sides of
  /// the detector cover on every view; 0 = centred detector (no displaced weighting).
  float overlap_mm;
  /// Displaced detector: width (mm) of the ramps at the ends of the overlap, in (0, 2 m];
  /// 0 or more than 2 m: 2 m (Wang's ramp across the whole overlap).
  float transition_mm;
  float wide_sign;   ///< +1 when the detector extends further along +a than along -a, else -1
  float scan_range;  ///< covered arc (rad); the window of displaced short scans
  int curved;        ///< 1: cylindrical detector (a = arc length, gamma = a / SDD)
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

/// Smooth step of width w > 0 centred on 0: 0 for y <= -w/2, sin^2(pi/4 (2y/w + 1)) inside,
/// 1 for y >= w/2; its slope is 0 at both ends.
CTFORGE_HD float smooth_step(float y, float w) {
  const float h = 0.5f * w;
  if (y <= -h) return 0.0f;
  if (y >= h) return 1.0f;
  const float s = sinf(0.25f * k_pi_f * (y / h + 1.0f));
  return s * s;
}

/// Displaced-detector weight of detector coordinate x (mm, positive towards the wide side) for
/// an overlap of half-width m > 0 and transition width t (mm; clamped to (0, 2m], 0 = 2m):
///   W(x) = (S(x - c) + S(x + c)) / 2,  c = m - t/2,  S = smooth_step of width t.
/// For t <= m: 0 for x <= -m, a ramp to 1/2 over [-m, -m + t], 1/2 on |x| <= m - t (where
/// both measurements of a line count equally, the least noise), a ramp to 1 over [m - t, m],
/// 1 beyond (the wide side's unmatched columns). For t = 2m, c = 0 and W is Wang's ramp
/// sin^2(pi/4 (x/m + 1)) across the whole overlap; in between the two ramps merge. W is
/// continuous with a continuous slope everywhere. Conjugate rays: W(x) + W(-x) = 1 exactly in
/// float arithmetic: hi = W(|x|) is in [1/2, 1], and 1 - hi is exact (Sterbenz).
CTFORGE_HD float displaced_weight(float x, float m, float t) {
  if (!(t > 0.0f) || t > 2.0f * m) t = 2.0f * m;
  if (x == 0.0f) return 0.5f;
  const float ax = x > 0.0f ? x : -x;
  if (ax >= m) return x > 0.0f ? 1.0f : 0.0f;
  const float c = m - 0.5f * t;
  float hi = 0.5f * (smooth_step(ax - c, t) + smooth_step(ax + c, t));
  hi = hi < 0.5f ? 0.5f : (hi > 1.0f ? 1.0f : hi);
  return x > 0.0f ? hi : 1.0f - hi;
}

/// Smooth window over a short scan covering [0, range] (rad): sin^2 ramps of width 2 eps at
/// both ends, 1 between, 0 outside.
CTFORGE_HD float scan_window(float beta, float range, float eps) {
  if (beta <= 0.0f || beta >= range) return 0.0f;
  const float q = k_pi_f / 4.0f;
  if (beta < 2.0f * eps) {
    const float s = sinf(q * beta / eps);
    return s * s;
  }
  if (beta > range - 2.0f * eps) {
    const float s = sinf(q * (range - beta) / eps);
    return s * s;
  }
  return 1.0f;
}

/// Redundancy weight of the ray (beta, a) of a displaced detector (p.overlap_mm > 0); see the
/// file comment. gamma = fan angle of the column (0 for parallel beam).
CTFORGE_HD float displaced_redundancy(const preweight_params& p, float beta, float a, float gamma) {
  const float x = p.wide_sign * a;
  const float self = displaced_weight(x, p.overlap_mm, p.transition_mm);
  if (p.parker_delta < 0.0f) return self;  // full scan: the conjugate is always measured
  const float eps = p.parker_delta > 0.0f ? p.parker_delta : 1e-3f;
  const float mine = scan_window(beta, p.scan_range, eps) * self;
  const float conj = displaced_weight(-x, p.overlap_mm, p.transition_mm) *
                     (scan_window(beta + k_pi_f - 2.0f * gamma, p.scan_range, eps) +
                      scan_window(beta - k_pi_f - 2.0f * gamma, p.scan_range, eps));
  const float sum = mine + conj;
  return sum > 0.0f ? mine / sum : 0.0f;
}

/// Pre-weight of pixel (col, row) of one view.
CTFORGE_HD float preweight(const preweight_params& p, const preweight_view& v, int col, int row) {
  const float a = (static_cast<float>(col) - p.c0) * p.du + v.offset_u;
  const float b = (static_cast<float>(row) - p.r0) * p.dv + v.offset_v;
  float w = v.scale;
  // The fan angle only matters to the redundancy weights (an atanf per pixel otherwise).
  const bool redundancy = p.overlap_mm > 0.0f || p.parker_delta >= 0.0f;
  float gamma = 0.0f;
  if (p.sdd > 0.0f && p.curved) {
    const float g = a / p.sdd;
    w *= cosf(g) * p.sdd / sqrtf(p.sdd * p.sdd + b * b);
    gamma = p.gamma_sign * g;
  } else if (p.sdd > 0.0f) {
    w *= p.sdd / sqrtf(p.sdd * p.sdd + a * a + b * b);
    if (redundancy) gamma = p.gamma_sign * atanf(a / p.sdd);
  }
  if (p.overlap_mm > 0.0f)
    w *= displaced_redundancy(p, v.beta, a, gamma);
  else if (p.parker_delta >= 0.0f)
    w *= parker_weight(v.beta, gamma, p.parker_delta);
  return w;
}

}  // namespace ctforge::kernels

// Helical weighted filtered back-projection (WFBP) arithmetic shared by the CPU loop and the
// CUDA kernels (src/recon/helical.cpp, src/cuda/helical.cu).
//
// The method is Stierstorfer et al.'s WFBP (Phys. Med. Biol. 49 (2004) 2209), for flat and
// cylindrical detectors:
//  1. Every detector pixel is multiplied by the cosine of its ray's cone angle.
//  2. Each detector row is rebinned from fan to parallel rays ("cone-parallel" data): the
//     parallel view at angle theta samples, for each ray distance t from the axis, the fan ray
//     of fan angle gamma = asin(t / R) from the source at beta = theta + gamma (R = SID);
//     linear interpolation between the two nearest views and columns.
//  3. The rebinned rows are ramp filtered along t (parallel-beam kernel, pitch dt).
//  4. A voxel at (x, y, z) reads each parallel view at t = x cos theta + y sin theta and the
//     row where its ray from the source at beta hits the detector; the sample is weighted by
//     W(q) / sum_k W(q_k), where q is that row's position between the outermost pixel centres
//     (-1 .. 1 about the detector's centre row), W the window below, and the sum runs over the
//     measurements of the same line: the parallel views theta + k pi (k integer), within the
//     scan, whose rays through the voxel come from the sources at theta + k pi + (-1)^k gamma.
//     The weights of one line's measurements thus sum to 1; a view contributes its angular
//     weight (radians), so f(x) = integral over theta in [0, pi) of the filtered data.
// Conventions: source at (R sin beta, -R cos beta, z_s(beta)), z_s linear in beta (kappa mm per
// radian); ray direction of parallel angle theta (-sin theta, cos theta, 0), its distance from the
// axis t along (cos theta, sin theta, 0); fan angle gamma towards +u, so t = R sin gamma.
#pragma once

#include <cstdint>

#include "math/hd.hpp"

namespace ctforge::kernels {

inline constexpr float k_helical_pi = 3.14159265358979323846f;

/// Scan-wide constants (trivially copyable; passed to kernels by value).
struct helical_params {
  float sid;       ///< R, source to axis (mm)
  float sdd;       ///< source to detector (mm)
  float kappa;     ///< source height per radian of angle along the scan's angles (mm / rad)
  float half_h;    ///< half the detector's height between the outermost pixel centres (mm)
  float offset_v;  ///< detector offset along z (mm): the centre row's height over the source
  float dv;        ///< row pitch (mm, signed: negative when rows run along -z)
  float r0;        ///< (rows - 1) / 2
  float q;         ///< WFBP window: full weight for |q| <= Q, in [0, 1)
  float dt;        ///< rebinned column pitch (mm at the axis, > 0)
  float tc0;       ///< rebinned column index of t = 0
  float du;        ///< fan detector column pitch (mm, signed; arc length when curved)
  float c0;        ///< (cols - 1) / 2 of the fan detector
  float offset_u;  ///< fan detector offset along u (mm; arc length when curved)
  int curved;      ///< 1: cylindrical detector
};

/// Constants of one parallel view.
struct helical_view {
  float cos_t, sin_t;  ///< cos and sin of the view's angle theta
  float z;             ///< source height at beta = theta (mm)
  float lo, hi;  ///< the scan's angles relative to theta: [beta_min - theta, beta_max - theta]
  float scale;   ///< angular weight of the view (rad)
};

/// The WFBP window: 1 for |q| <= Q, cos^2 falling to 0 at |q| = 1, 0 beyond.
CTFORGE_HD float wfbp_window(float q, float Q) {
  const float a = q < 0.0f ? -q : q;
  if (a <= Q) return 1.0f;
  if (a >= 1.0f) return 0.0f;
  const float c = cosf(0.5f * k_helical_pi * (a - Q) / (1.0f - Q));
  return c * c;
}

/// Fan-detector position of the rebinned ray at distance t from the axis: the fan column
/// (fractional, pixel centres at integers), the fan angle gamma (rad) and the cosine of the
/// in-plane ray to the detector against its cone angle (the factor of step 1 without the row).
struct fan_ray {
  float col, gamma, u;  ///< u: flat: the column's position on the detector (mm); curved: 0
  bool inside;          ///< |t| < R
};
CTFORGE_HD fan_ray fan_ray_of(const helical_params& P, float t) {
  fan_ray r{0.0f, 0.0f, 0.0f, false};
  if (!(t > -P.sid && t < P.sid)) return r;
  r.gamma = asinf(t / P.sid);
  if (P.curved) {
    r.col = (P.sdd * r.gamma - P.offset_u) / P.du + P.c0;
  } else {
    r.u = P.sdd * tanf(r.gamma);
    r.col = (r.u - P.offset_u) / P.du + P.c0;
  }
  r.inside = true;
  return r;
}

/// Step 1's cone-angle cosine of the ray to detector position u (flat; 0 when curved) at the
/// height v (mm) over the source plane: flat sqrt(D^2 + u^2) / sqrt(D^2 + u^2 + v^2), curved
/// D / sqrt(D^2 + v^2), D = SDD.
CTFORGE_HD float cone_cosine(const helical_params& P, float u, float v) {
  const float in_plane = P.sdd * P.sdd + (P.curved ? 0.0f : u * u);
  return sqrtf(in_plane / (in_plane + v * v));
}

/// Where a rebinned ray (parallel view j, rebinned column c) reads the fan data: between views
/// `view` and `view + 1` with weight `a` on the second, at fan column `col`; `u` feeds the
/// cone-angle cosine (cone_cosine). view < 0: the ray's source lies outside the scan (the
/// rebinned value is 0).
struct rebin_tap {
  std::int32_t view;
  float a, col, u;
};

/// Linear interpolation along row `r` of fan view `view` ([rows][cols] at `p`) at column `col`,
/// zeros beyond the detector's columns.
CTFORGE_HD float fan_row_sample(const float* p, std::int64_t cols, float col) {
  const float fc = floor_f(col);
  const std::int64_t c0 = static_cast<std::int64_t>(fc);
  const float w = col - fc;
  const float a = c0 >= 0 && c0 < cols ? p[c0] : 0.0f;
  const float b = c0 + 1 >= 0 && c0 + 1 < cols ? p[c0 + 1] : 0.0f;
  return (1.0f - w) * a + w * b;
}

/// Steps 1-2 for one rebinned sample: the fan data `fan` ([views][rows][cols], view 0 of it
/// being fan view `first`) read through tap `t` on row `r` (height v over the source plane, mm),
/// times the cone-angle cosine.
CTFORGE_HD float rebinned_value(const helical_params& P, const rebin_tap& t, const float* fan,
                                std::int64_t first, std::int64_t rows, std::int64_t cols,
                                std::int64_t r, float v) {
  if (t.view < 0 || !(t.col > -1.0f && t.col < static_cast<float>(cols))) return 0.0f;
  const float* p0 = fan + ((t.view - first) * rows + r) * cols;
  float value = (1.0f - t.a) * fan_row_sample(p0, cols, t.col);
  if (t.a > 0.0f) value += t.a * fan_row_sample(p0 + rows * cols, cols, t.col);
  return value * cone_cosine(P, t.u, v);
}

/// Bilinear sample at (col, row) of a [rows][cols] image whose rows lie `pitch` floats apart,
/// zeros outside (kernels::sample_bilinear_border's semantics).
CTFORGE_HD float sample_pitched(const float* img, int cols, int rows, int pitch, float col,
                                float row) {
  if (!(col > -1.0f && col < static_cast<float>(cols) && row > -1.0f &&
        row < static_cast<float>(rows)))
    return 0.0f;
  const float fc = floor_f(col), fr = floor_f(row);
  const int c0 = static_cast<int>(fc), r0 = static_cast<int>(fr);
  const float ac = col - fc, ar = row - fr;
  auto px = [&](int c, int r) -> float {
    return (c >= 0 && c < cols && r >= 0 && r < rows)
               ? img[static_cast<std::int64_t>(r) * pitch + c]
               : 0.0f;
  };
  return (1.0f - ar) * ((1.0f - ac) * px(c0, r0) + ac * px(c0 + 1, r0)) +
         ar * ((1.0f - ac) * px(c0, r0 + 1) + ac * px(c0 + 1, r0 + 1));
}

/// The parallel ray of view V through the voxel column at (x, y): what every height z of the
/// column shares. Family f = 0 holds the measurements theta + k pi with k even (the direct one
/// k = 0 among them), f = 1 those with k odd (the conjugate side). Measurement k = f + 2 m of
/// family f reads the row at q = qa z + qb - qc m (q: -1 .. 1 between the outermost pixel
/// centres), and exists for m_lo <= m <= m_hi (within the scan).
struct helical_ray {
  float col;                  ///< rebinned column of the ray
  float qa[2], qb[2], qc[2];  ///< per family: q = qa z + qb - qc m
  float inv_qc[2];            ///< 1 / qc (0 when qc = 0: a helix without feed)
  float m_lo[2], m_hi[2];     ///< per family: the measurements within the scan
  bool valid;                 ///< the direct measurement exists (|t| < R, within the scan)
};
CTFORGE_HD helical_ray helical_ray_of(const helical_params& P, const helical_view& V, float x,
                                      float y) {
  helical_ray r{};
  r.valid = false;
  const float t = x * V.cos_t + y * V.sin_t;
  if (!(t > -P.sid && t < P.sid)) return r;
  const float gamma = asinf(t / P.sid), cg = cosf(gamma);
  const float d = -x * V.sin_t + y * V.cos_t;  // along the ray, from its foot
  const float s = P.curved ? P.sdd : P.sdd / cg;
  const float l[2] = {P.sid * cg + d, P.sid * cg - d};
  if (!(l[0] > 1e-6f) || !(l[1] > 1e-6f)) return r;
  r.col = t / P.dt + P.tc0;
  const float two_pi = 2.0f * k_helical_pi, step = two_pi * P.kappa;
  const float b_base[2] = {gamma, k_helical_pi - gamma};  // angle of measurement k = f
  for (int f = 0; f < 2; ++f) {
    // Row height over the source plane v = (z - z_base - step m) s / l; q = (v - off_v) / h.
    const float inv_a = s / l[f], z_base = V.z + P.kappa * b_base[f];
    r.qa[f] = inv_a / P.half_h;
    r.qb[f] = -(z_base * inv_a + P.offset_v) / P.half_h;
    r.qc[f] = step * inv_a / P.half_h;
    r.inv_qc[f] = r.qc[f] != 0.0f ? 1.0f / r.qc[f] : 0.0f;
    r.m_lo[f] = ceilf((V.lo - b_base[f]) / two_pi);
    r.m_hi[f] = floor_f((V.hi - b_base[f]) / two_pi);
  }
  r.valid = b_base[0] >= V.lo && b_base[0] <= V.hi;
  return r;
}

/// Range [lo, hi] of the heights z where the direct measurement of ray r lies on the rows.
struct z_range {
  float lo, hi;
};
CTFORGE_HD z_range helical_z_range(const helical_ray& r) {
  return {(-1.0f - r.qb[0]) / r.qa[0], (1.0f - r.qb[0]) / r.qa[0]};
}

/// Sum of the window over family f's measurements of the line through height z.
CTFORGE_HD float family_window_sum(const helical_params& P, const helical_ray& r, int f, float z) {
  const float qz = r.qa[f] * z + r.qb[f];
  float m_lo = r.m_lo[f], m_hi = r.m_hi[f];
  if (r.inv_qc[f] != 0.0f) {  // and on the rows: |qz - qc m| < 1
    const float e0 = (qz - 1.0f) * r.inv_qc[f], e1 = (qz + 1.0f) * r.inv_qc[f];
    m_lo = max_f(m_lo, ceilf(min_f(e0, e1)));
    m_hi = min_f(m_hi, floor_f(max_f(e0, e1)));
  }
  float sum = 0.0f;
  for (float m = m_lo; m <= m_hi; m += 1.0f) sum += wfbp_window(qz - r.qc[f] * m, P.q);
  return sum;
}

/// Where the voxel at height z reads view V along ray r (rebinned row; the column is r.col),
/// and its weight: the view's angular weight times W(q) / sum of W over the line's
/// measurements; weight 0 where the voxel is not on the rows.
struct helical_sample {
  float row, weight;
};
CTFORGE_HD helical_sample helical_sample_of(const helical_params& P, const helical_view& V,
                                            const helical_ray& r, float z) {
  const float q = r.qa[0] * z + r.qb[0];
  const float w0 = wfbp_window(q, P.q);
  const float row = q * P.half_h / P.dv + P.r0;
  if (!r.valid || w0 == 0.0f) return {row, 0.0f};
  float sum = family_window_sum(P, r, 0, z) + family_window_sum(P, r, 1, z);
  sum = max_f(sum, w0);  // the direct measurement is one of the terms (rounding at the edges)
  return {row, V.scale * w0 / sum};
}

/// One view's contribution to the voxel at height z on ray r: the filtered rebinned view `img`
/// (rows x cols_t, rows `pitch` floats apart) sampled where the voxel reads it, weighted.
CTFORGE_HD float helical_contribution(const helical_params& P, const helical_view& V,
                                      const helical_ray& r, float z, const float* img, int cols_t,
                                      int rows, int pitch) {
  const helical_sample q = helical_sample_of(P, V, r, z);
  if (q.weight == 0.0f) return 0.0f;
  return q.weight * sample_pitched(img, cols_t, rows, pitch, r.col, q.row);
}

}  // namespace ctforge::kernels

// Per-voxel back-projection arithmetic shared by the CUDA kernel (which samples through a
// layered texture with hardware bilinear filtering and border addressing) and the CPU paths
// (which sample through the software samplers below, with identical border-zero semantics).
#pragma once

#include "math/cylinder.hpp"
#include "math/geometry.hpp"
#include "math/hd.hpp"

namespace ctforge::kernels {

/// How each view's sample is weighted during back-projection.
enum class bp_weighting : int {
  none = 0,  ///< plain (unmatched) back-projection: sum of samples
  fdk = 1,   ///< FDK distance weight 1/w^2 (w = depth fraction); (SID/SDD)^2 is folded into
             ///< the projection pre-weighting
};

/// The four taps of a bilinear read at (col, row) of a [rows][cols] image with pixel centres at
/// integers: pixels (c0 .. c0 + 1, r0 .. r0 + 1), weights (1 - ac, ac) along columns and
/// (1 - ar, ar) along rows. `inside` is false where the read is 0 whatever the image holds
/// (outside (-1, cols) x (-1, rows), NaN coordinates); taps outside the image read zeros.
/// Shared by the sampler below and its transpose, splat_bilinear_border.
struct bilinear_taps {
  int c0, r0;
  float ac, ar;
  bool inside;
};

CTFORGE_HD bilinear_taps bilinear_taps_of(int cols, int rows, float col, float row) {
  bilinear_taps t{0, 0, 0.0f, 0.0f, false};
  if (!(col > -1.0f && col < static_cast<float>(cols) && row > -1.0f &&
        row < static_cast<float>(rows)))
    return t;
  const float fc = floor_f(col), fr = floor_f(row);
  t.c0 = static_cast<int>(fc);
  t.r0 = static_cast<int>(fr);
  t.ac = col - fc;
  t.ar = row - fr;
  t.inside = true;
  return t;
}

/// Bilinear sample of a [rows][cols] image at (col, row) with pixel centres at integers and
/// zeros outside the image (the semantics of a CUDA texture in border mode, read at
/// (col + 0.5, row + 0.5)). Reference version with explicit bounds checks.
CTFORGE_HD float sample_bilinear_border(const float* img, int cols, int rows, float col,
                                        float row) {
  const bilinear_taps t = bilinear_taps_of(cols, rows, col, row);
  if (!t.inside) return 0.0f;
  const int c0 = t.c0, r0 = t.r0;
  const float ac = t.ac, ar = t.ar;
  auto px = [&](int c, int r) -> float {
    return (c >= 0 && c < cols && r >= 0 && r < rows) ? img[r * cols + c] : 0.0f;
  };
  return (1.0f - ar) * ((1.0f - ac) * px(c0, r0) + ac * px(c0 + 1, r0)) +
         ar * ((1.0f - ac) * px(c0, r0 + 1) + ac * px(c0 + 1, r0 + 1));
}

/// The transpose of sample_bilinear_border: adds value x (the tap's weight) to each of the four
/// pixels that read at (col, row) takes, skipping taps outside the image (the zeros the sampler
/// reads there). sample_bilinear_padded reads the same taps with the same weights, so this is
/// the transpose of both samplers. `img` accumulates in T (float or double).
template <class T>
CTFORGE_HD void splat_bilinear_border(T* img, int cols, int rows, float col, float row,
                                      T value) {
  const bilinear_taps t = bilinear_taps_of(cols, rows, col, row);
  if (!t.inside) return;
  const T ac = t.ac, ar = t.ar;
  const T w[4] = {(1 - ar) * (1 - ac), (1 - ar) * ac, ar * (1 - ac), ar * ac};
  for (int k = 0; k < 4; ++k) {
    const int c = t.c0 + (k & 1), r = t.r0 + (k >> 1);
    if (c >= 0 && c < cols && r >= 0 && r < rows) img[r * cols + c] += w[k] * value;
  }
}

/// A projection stored with a zero border: `pitch` = cols + 3 floats per row, `rows + 3` rows,
/// pixel (0, 0) at element (1, 1). Branch-free bilinear sampling: coordinates are clamped to
/// [-1, cols] x [-1, rows], where every tap outside the image reads a zero, which reproduces
/// border-mode semantics exactly and lets the compiler vectorise the voxel loop.
struct padded_view {
  const float* data;  ///< element (-1, -1) of the padded image
  int cols, rows, pitch;
};

/// Number of floats of a padded copy of a rows x cols projection.
CTFORGE_HD std::int64_t padded_size(int cols, int rows) {
  return static_cast<std::int64_t>(cols + 3) * (rows + 3);
}

CTFORGE_HD float sample_bilinear_padded(const padded_view& p, float col, float row) {
  col = clamp_f(col, -1.0f, static_cast<float>(p.cols));
  row = clamp_f(row, -1.0f, static_cast<float>(p.rows));
  const float fc = floor_f(col), fr = floor_f(row);
  const int c0 = static_cast<int>(fc) + 1, r0 = static_cast<int>(fr) + 1;
  const float ac = col - fc, ar = row - fr;
  // 32-bit offsets within one padded view (< 2^31 floats for any detector): g++ vectorises
  // the CPU voxel loop into AVX2 gathers only with int indices of this array form.
  const int ia = r0 * p.pitch + c0, ib = ia + p.pitch;
  const float* d = p.data;
  return (1.0f - ar) * ((1.0f - ac) * d[ia] + ac * d[ia + 1]) +
         ar * ((1.0f - ac) * d[ib] + ac * d[ib + 1]);
}

/// Where the voxel at world position (x, y, z) mm reads one view, and with what weight: the
/// detector position (col, row) in pixels and the weight (FDK: 1/w^2, w the depth fraction;
/// none: 1), 0 for voxels at or behind the source plane (w <= 1e-6, cone beam).
struct bp_point {
  float col, row, weight;
};

template <bp_weighting W>
CTFORGE_HD bp_point bp_point_of(const proj_matrix& P, float x, float y, float z) {
  const float* m = P.m;
  const float p0 = m[0] * x + m[1] * y + m[2] * z + m[3];
  const float p1 = m[4] * x + m[5] * y + m[6] * z + m[7];
  const float p2 = m[8] * x + m[9] * y + m[10] * z + m[11];
  const float w = p2 > 1e-6f ? p2 : 1e-6f;
  const float inv = 1.0f / w;
  const float weight = (W == bp_weighting::fdk) ? inv * inv : 1.0f;
  return {p0 * inv, p1 * inv, p2 > 1e-6f ? weight : 0.0f};
}

/// Contribution of one view to the voxel at world position (x, y, z) mm: the sample at
/// bp_point_of's position times its weight. `sample(col, row)` returns the bilinearly
/// interpolated projection value. Voxels at or behind the source plane receive nothing.
template <bp_weighting W, class Sampler>
CTFORGE_HD float bp_contribution(const proj_matrix& P, float x, float y, float z,
                                 const Sampler& sample) {
  const bp_point q = bp_point_of<W>(P, x, y, z);
  const float s = sample(q.col, q.row);
  return q.weight != 0.0f ? s * q.weight : 0.0f;
}

/// Contribution of one view of a cylindrical detector (math/cylinder.hpp) to the voxel at
/// height z (mm) of the voxel column whose (x, y) gave `q` (cyl_column_of: computed once for
/// every z of the column): the curved mapping, and with bp_weighting::fdk the weight 1 / l^2
/// (l = the voxel's in-plane distance from the source over SDD; Kak & Slaney's 1 / L^2 for
/// equiangular fan-beam data). Voxels at or behind the source plane receive nothing.
template <bp_weighting W>
CTFORGE_HD bp_point bp_point_cyl(const cyl_map& P, const cyl_column& q, float z) {
  const float weight = (W == bp_weighting::fdk) ? cyl_fdk_weight(q) : 1.0f;
  return {q.col, cyl_row_of(P, z, q.inv_l), q.l > 1e-6f ? weight : 0.0f};
}

template <bp_weighting W, class Sampler>
CTFORGE_HD float bp_contribution_cyl(const cyl_map& P, const cyl_column& q, float z,
                                     const Sampler& sample) {
  const bp_point p = bp_point_cyl<W>(P, q, z);
  const float s = sample(p.col, p.row);
  return p.weight != 0.0f ? s * p.weight : 0.0f;
}

/// The same for the voxel at (x, y, z) mm.
template <bp_weighting W, class Sampler>
CTFORGE_HD float bp_contribution(const cyl_map& P, float x, float y, float z,
                                 const Sampler& sample) {
  const cyl_column q = cyl_column_of(P, x, y);
  return bp_contribution_cyl<W>(P, q, z, sample);
}

}  // namespace ctforge::kernels

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

/// Bilinear sample of a [rows][cols] image at (col, row) with pixel centres at integers and
/// zeros outside the image (the semantics of a CUDA texture in border mode, read at
/// (col + 0.5, row + 0.5)). Reference version with explicit bounds checks.
CTFORGE_HD float sample_bilinear_border(const float* img, int cols, int rows, float col,
                                        float row) {
  if (!(col > -1.0f && col < static_cast<float>(cols) && row > -1.0f &&
        row < static_cast<float>(rows)))
    return 0.0f;
  const float fc = floor_f(col), fr = floor_f(row);
  const int c0 = static_cast<int>(fc), r0 = static_cast<int>(fr);
  const float ac = col - fc, ar = row - fr;
  auto px = [&](int c, int r) -> float {
    return (c >= 0 && c < cols && r >= 0 && r < rows) ? img[r * cols + c] : 0.0f;
  };
  return (1.0f - ar) * ((1.0f - ac) * px(c0, r0) + ac * px(c0 + 1, r0)) +
         ar * ((1.0f - ac) * px(c0, r0 + 1) + ac * px(c0 + 1, r0 + 1));
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

/// Contribution of one view to the voxel at world position (x, y, z) mm.
/// `sample(col, row)` returns the bilinearly interpolated projection value.
/// Voxels at or behind the source plane (w <= 0, cone beam) receive nothing.
template <bp_weighting W, class Sampler>
CTFORGE_HD float bp_contribution(const proj_matrix& P, float x, float y, float z,
                                 const Sampler& sample) {
  const float* m = P.m;
  const float p0 = m[0] * x + m[1] * y + m[2] * z + m[3];
  const float p1 = m[4] * x + m[5] * y + m[6] * z + m[7];
  const float p2 = m[8] * x + m[9] * y + m[10] * z + m[11];
  const float w = p2 > 1e-6f ? p2 : 1e-6f;
  const float inv = 1.0f / w;
  const float s = sample(p0 * inv, p1 * inv);
  const float weight = (W == bp_weighting::fdk) ? inv * inv : 1.0f;
  return p2 > 1e-6f ? s * weight : 0.0f;
}

/// Contribution of one view of a cylindrical detector (math/cylinder.hpp) to the voxel at
/// height z (mm) of the voxel column whose (x, y) gave `q` (cyl_column_of: computed once for
/// every z of the column): the curved mapping, and with bp_weighting::fdk the weight 1 / l^2
/// (l = the voxel's in-plane distance from the source over SDD; Kak & Slaney's 1 / L^2 for
/// equiangular fan-beam data). Voxels at or behind the source plane receive nothing.
template <bp_weighting W, class Sampler>
CTFORGE_HD float bp_contribution_cyl(const cyl_map& P, const cyl_column& q, float z,
                                     const Sampler& sample) {
  const float s = sample(q.col, cyl_row_of(P, z, q.inv_l));
  const float weight = (W == bp_weighting::fdk) ? cyl_fdk_weight(q) : 1.0f;
  return q.l > 1e-6f ? s * weight : 0.0f;
}

/// The same for the voxel at (x, y, z) mm.
template <bp_weighting W, class Sampler>
CTFORGE_HD float bp_contribution(const cyl_map& P, float x, float y, float z,
                                 const Sampler& sample) {
  const cyl_column q = cyl_column_of(P, x, y);
  return bp_contribution_cyl<W>(P, q, z, sample);
}

}  // namespace ctforge::kernels

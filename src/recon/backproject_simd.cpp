// The flat-detector loops of the CPU back-projection written with SIMD intrinsics
// (detail::backproject_simd, declared in recon/backproject_simd.hpp; callers go through
// detail::backproject, recon/backproject.hpp). Each kernel is compiled for its instruction set
// through a target attribute, whatever the library's -march, and runs only where
// detail::cpu_simd_level() allows it (recon/cpu_simd.hpp).
#include "recon/backproject_simd.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/volume.hpp"
#include "math/backproject.hpp"
#include "math/geometry.hpp"
#include "recon/cpu_simd.hpp"

#if defined(CTFORGE_SIMD_X86)
// GCC 12 reports the "undefined" upper halves of its own AVX-512 intrinsics (casts, conversions)
// as maybe uninitialised (GCC bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace ctforge {

// ---- fast back-projection ------------------------------------------------------------------
//
// Same computation as kernels::bp_contribution with kernels::sample_bilinear_padded (clamp of
// the detector coordinates to [-1, cols] x [-1, rows] of a zero-bordered view, bilinear taps,
// weight 1/w^2 or 1, nothing for p2 <= 1e-6; rounding differs by a few ulp: fused multiply-adds,
// 1/w by reciprocal estimate + Newton step), written with AVX2 intrinsics and organised for the
// cache (fdk tests compare it with the double-precision reference path):
//  * voxels whose projection misses the detector (contribution exactly 0) are skipped;
//  * views in batches of ~6 MiB that stay in the last-level cache while all voxels visit them;
//  * task = a block of up to k_block_rows consecutive y rows at one z; for each view the
//    rows of a block project onto nearly the same detector rows, so the view's footprint stays
//    in L1/L2 while the block is processed;
//  * per row and view, two phases: first the tap offsets and weights of all voxels (pure
//    arithmetic), then the loads: the load addresses are known early, so the loads of many
//    voxels overlap instead of each waiting behind its own division and rounding chain;
//  * the two horizontal taps of a row are adjacent floats and are read as one 64-bit load;
//  * shared-z (untilted circular orbits: p0 and p2 independent of z in every view): the column,
//    1/p2 and weight of a voxel column are computed once for a block of 16 z-planes, only the
//    detector row per plane (backproject_planes_avx2, and backproject_planes_avx512 with 16
//    lanes where the CPU has AVX-512).
// The OpenMP loops (backproject_blocked*) are compiled for the library's target and call the
// kernels once per row (or row of 16 planes) and view.
namespace {

#if defined(CTFORGE_SIMD_X86)

constexpr std::int64_t k_block_rows = 32;
constexpr std::int64_t k_view_batch_bytes = std::int64_t{6} << 20;  // 6 MiB of views per batch

struct row_scratch {
  std::vector<std::int32_t> idx;  // offset of tap (c0, r0) in the padded view
  std::vector<float> ac, ar, wt;  // column / row fractions, view weight (0: behind the source)
  // Shared between the z-planes of a column block (backproject_planes_avx2): the offset of column
  // c0 in row 0, 1 / max(p2, eps), and the row numerator p1 without its z term.
  std::vector<std::int32_t> col_off;
  std::vector<float> inv, p1;
  explicit row_scratch(std::int64_t nx)
      : idx(static_cast<std::size_t>(nx)),
        ac(static_cast<std::size_t>(nx)),
        ar(static_cast<std::size_t>(nx)),
        wt(static_cast<std::size_t>(nx)),
        col_off(static_cast<std::size_t>(nx)),
        inv(static_cast<std::size_t>(nx)),
        p1(static_cast<std::size_t>(nx)) {}
};

// 64-bit loads of the tap pairs at base + a and base + b: [base[a], base[a+1], base[b], base[b+1]].
CTFORGE_AVX2_INLINE __m128 load_pairs(const float* base, std::int32_t a, std::int32_t b) {
  const __m128 lo = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(base + a)));
  return _mm_loadh_pi(lo, reinterpret_cast<const __m64*>(base + b));
}

// 1 / max(p2, eps): reciprocal estimate + one Newton step (relative error ~1e-7, a few ulp;
// measured ~15 % faster than vdivps here). two: 2.0f in every lane.
CTFORGE_AVX2_INLINE __m256 inverse_depth(__m256 p2, __m256 eps, __m256 two) {
  const __m256 wc = _mm256_max_ps(p2, eps);
  const __m256 r0 = _mm256_rcp_ps(wc);
  return _mm256_mul_ps(r0, _mm256_fnmadd_ps(wc, r0, two));
}

// Voxels i of the row (x0 + i dx, y, z) that can receive a non-zero contribution: in front of
// the source (p2 > 1e-6) and projecting strictly inside (-1, cols) x (-1, rows), where a
// bilinear tap can touch the image (outside it every tap reads the zero border). Each condition
// is linear in x once multiplied by p2 > 0. Solved in double and widened by 2 voxels on each
// side, so rounding can never drop a voxel that the exact loop would give a non-zero value.
// With_rows = false: the detector-row conditions are left out (a range for every z at once when
// p0 and p2 do not depend on z).
inline void contributing_range(const kernels::proj_matrix& P, float x0, float dx, float y, float z,
                               int cols, int rows, int nx, int& lo, int& hi,
                               bool with_rows = true) {
  const float* m = P.m;
  const double a0 = double(m[1]) * y + double(m[2]) * z + m[3];
  const double a1 = double(m[5]) * y + double(m[6]) * z + m[7];
  const double a2 = double(m[9]) * y + double(m[10]) * z + m[11];
  double xlo = -std::numeric_limits<double>::infinity(),
         xhi = std::numeric_limits<double>::infinity();
  bool empty = false;
  const auto half_line = [&](double a, double b) {  // a x + b > 0
    if (a > 0)
      xlo = std::max(xlo, -b / a);
    else if (a < 0)
      xhi = std::min(xhi, -b / a);
    else if (!(b > 0))
      empty = true;
  };
  const double c = cols, r = rows;
  half_line(double(m[0]) + m[8], a0 + a2);  // col > -1
  half_line(c * m[8] - m[0], c * a2 - a0);  // col < cols
  if (with_rows) {
    half_line(double(m[4]) + m[8], a1 + a2);  // row > -1
    half_line(r * m[8] - m[4], r * a2 - a1);  // row < rows
  }
  half_line(m[8], a2 - 1e-6);  // p2 > 1e-6
  if (empty || !(xlo < xhi)) {
    lo = hi = 0;
    return;
  }
  const double ilo = std::floor((xlo - x0) / dx) - 2, ihi = std::ceil((xhi - x0) / dx) + 3;
  lo = static_cast<int>(std::clamp(ilo, 0.0, static_cast<double>(nx)));
  hi = static_cast<int>(std::clamp(ihi, 0.0, static_cast<double>(nx)));
  if (lo > hi) lo = hi;
}

// Phase 2 of a row: for voxels [vb, ve) (multiples of 8 apart), the taps at s.idx, bilinear
// interpolation with s.ac / s.ar, times s.wt, added to acc.
CTFORGE_AVX2_INLINE void accumulate_taps(const kernels::padded_view& pv, const row_scratch& s,
                                         int vb, int ve, float* __restrict acc) {
  const float* top = pv.data;
  const float* bottom = pv.data + pv.pitch;
  for (int i = vb; i < ve; i += 8) {
    const std::int32_t* o = s.idx.data() + i;
    // t0 = [v0 pair, v1 pair | v4 pair, v5 pair], t1 = [v2, v3 | v6, v7]
    const __m256 t0 = _mm256_insertf128_ps(_mm256_castps128_ps256(load_pairs(top, o[0], o[1])),
                                           load_pairs(top, o[4], o[5]), 1);
    const __m256 t1 = _mm256_insertf128_ps(_mm256_castps128_ps256(load_pairs(top, o[2], o[3])),
                                           load_pairs(top, o[6], o[7]), 1);
    const __m256 b0 = _mm256_insertf128_ps(_mm256_castps128_ps256(load_pairs(bottom, o[0], o[1])),
                                           load_pairs(bottom, o[4], o[5]), 1);
    const __m256 b1 = _mm256_insertf128_ps(_mm256_castps128_ps256(load_pairs(bottom, o[2], o[3])),
                                           load_pairs(bottom, o[6], o[7]), 1);
    const __m256 t00 = _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));  // left taps, v0..v7
    const __m256 t01 = _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));  // right taps
    const __m256 t10 = _mm256_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 t11 = _mm256_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m256 ac = _mm256_loadu_ps(s.ac.data() + i), ar = _mm256_loadu_ps(s.ar.data() + i);
    const __m256 one_ac = _mm256_sub_ps(_mm256_set1_ps(1.0f), ac);
    const __m256 one_ar = _mm256_sub_ps(_mm256_set1_ps(1.0f), ar);
    // (1 - ar) ((1 - ac) t00 + ac t01) + ar ((1 - ac) t10 + ac t11), as in sample_bilinear_padded
    const __m256 up = _mm256_fmadd_ps(ac, t01, _mm256_mul_ps(one_ac, t00));
    const __m256 down = _mm256_fmadd_ps(ac, t11, _mm256_mul_ps(one_ac, t10));
    const __m256 v = _mm256_fmadd_ps(ar, down, _mm256_mul_ps(one_ar, up));
    _mm256_storeu_ps(
        acc + i, _mm256_fmadd_ps(v, _mm256_loadu_ps(s.wt.data() + i), _mm256_loadu_ps(acc + i)));
  }
}

// The tail [from, to) of a row, past its vector part: the shared scalar code.
template <kernels::bp_weighting W>
void scalar_tail(const kernels::padded_view& pv, const kernels::proj_matrix& P, float x0, float dx,
                 float y, float z, int from, int to, float* acc) {
  const auto sample = [&pv](float c, float r) { return kernels::sample_bilinear_padded(pv, c, r); };
  for (int i = from; i < to; ++i)
    acc[i] += kernels::bp_contribution<W>(P, x0 + static_cast<float>(i) * dx, y, z, sample);
}

// acc[i] += contribution of view (pv, P) to voxel (x0 + i dx, y, z), i in [0, nx). Voxels that
// project outside the detector (contribution exactly 0) are skipped.
template <kernels::bp_weighting W>
CTFORGE_TARGET_AVX2 void backproject_row_avx2(const kernels::padded_view& pv,
                                              const kernels::proj_matrix& P, float x0, float dx,
                                              float y, float z, int nx, float* __restrict acc,
                                              row_scratch& s) {
  const float* m = P.m;
  int lo, hi;
  contributing_range(P, x0, dx, y, z, pv.cols, pv.rows, nx, lo, hi);
  if (lo >= hi) return;
  const int vb = lo & ~7;                // vector part [vb, ve) on the same 8-lane grid
  const int ve = vb + ((hi - vb) & ~7);  // as the unclipped loop; scalar tail [ve, hi)
  // Phase 1: detector coordinates -> tap offsets and weights.
  {
    const __m256 a0 = _mm256_set1_ps(m[1] * y + m[2] * z + m[3]);
    const __m256 a1 = _mm256_set1_ps(m[5] * y + m[6] * z + m[7]);
    const __m256 a2 = _mm256_set1_ps(m[9] * y + m[10] * z + m[11]);
    const __m256 m0 = _mm256_set1_ps(m[0]), m4 = _mm256_set1_ps(m[4]), m8 = _mm256_set1_ps(m[8]);
    const __m256 vdx = _mm256_set1_ps(dx), vx0 = _mm256_set1_ps(x0);
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 eps = _mm256_set1_ps(1e-6f), one = _mm256_set1_ps(1.0f),
                 minus1 = _mm256_set1_ps(-1.0f);
    const __m256 two = _mm256_set1_ps(2.0f);
    const __m256 cmax = _mm256_set1_ps(static_cast<float>(pv.cols));
    const __m256 rmax = _mm256_set1_ps(static_cast<float>(pv.rows));
    const __m256i pitch = _mm256_set1_epi32(pv.pitch), base = _mm256_set1_epi32(pv.pitch + 1);
    for (int i = vb; i < ve; i += 8) {
      const __m256 x =
          _mm256_fmadd_ps(_mm256_add_ps(_mm256_set1_ps(static_cast<float>(i)), lane), vdx, vx0);
      const __m256 p0 = _mm256_fmadd_ps(m0, x, a0);
      const __m256 p1 = _mm256_fmadd_ps(m4, x, a1);
      const __m256 p2 = _mm256_fmadd_ps(m8, x, a2);
      const __m256 inv = inverse_depth(p2, eps, two);
      const __m256 col = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(p0, inv), minus1), cmax);
      const __m256 row = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(p1, inv), minus1), rmax);
      const __m256 fc = _mm256_floor_ps(col), fr = _mm256_floor_ps(row);
      const __m256i off =
          _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(_mm256_cvttps_epi32(fr), pitch),
                                            _mm256_cvttps_epi32(fc)),
                           base);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.idx.data() + i), off);
      _mm256_storeu_ps(s.ac.data() + i, _mm256_sub_ps(col, fc));
      _mm256_storeu_ps(s.ar.data() + i, _mm256_sub_ps(row, fr));
      const __m256 in_front = _mm256_cmp_ps(p2, eps, _CMP_GT_OQ);
      const __m256 w = W == kernels::bp_weighting::fdk ? _mm256_mul_ps(inv, inv) : one;
      _mm256_storeu_ps(s.wt.data() + i, _mm256_and_ps(w, in_front));
    }
  }
  accumulate_taps(pv, s, vb, ve, acc);
  scalar_tail<W>(pv, P, x0, dx, y, z, ve, hi, acc);
}

// The rows (x0 + i dx, y, zs[q]), q in [0, nz), of a column block, for a view whose p0 and p2 do
// not depend on z (m[2] = m[10] = 0: an untilted circular orbit): the detector column, its
// fraction, 1 / p2 and the weight of each voxel are computed once for all the planes
// (phase A), and per plane only the row (phase B), then phase 2 as backproject_row_avx2's.
// acc[q][i] += the contribution to voxel i of plane q. Same values as backproject_row_avx2 up
// to the rounding of the row numerator (a few ulp: its z term is added last).
template <kernels::bp_weighting W>
CTFORGE_TARGET_AVX2 void backproject_planes_avx2(const kernels::padded_view& pv,
                                                 const kernels::proj_matrix& P, float x0, float dx,
                                                 float y, const float* zs, int nz, int nx,
                                                 float* const* acc, row_scratch& s) {
  const float* m = P.m;
  int lo0, hi0;
  contributing_range(P, x0, dx, y, 0.0f, pv.cols, pv.rows, nx, lo0, hi0, /*with_rows=*/false);
  if (lo0 >= hi0) return;
  const int vb0 = lo0 & ~7;
  const int ve0 = vb0 + ((hi0 - vb0) & ~7);
  // Phase A: what does not depend on z.
  {
    const __m256 a0 = _mm256_set1_ps(m[1] * y + m[3]);
    const __m256 a1 = _mm256_set1_ps(m[5] * y + m[7]);
    const __m256 a2 = _mm256_set1_ps(m[9] * y + m[11]);
    const __m256 m0 = _mm256_set1_ps(m[0]), m4 = _mm256_set1_ps(m[4]), m8 = _mm256_set1_ps(m[8]);
    const __m256 vdx = _mm256_set1_ps(dx), vx0 = _mm256_set1_ps(x0);
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 eps = _mm256_set1_ps(1e-6f), one = _mm256_set1_ps(1.0f),
                 minus1 = _mm256_set1_ps(-1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 cmax = _mm256_set1_ps(static_cast<float>(pv.cols));
    const __m256i base = _mm256_set1_epi32(pv.pitch + 1);
    for (int i = vb0; i < ve0; i += 8) {
      const __m256 x =
          _mm256_fmadd_ps(_mm256_add_ps(_mm256_set1_ps(static_cast<float>(i)), lane), vdx, vx0);
      const __m256 p0 = _mm256_fmadd_ps(m0, x, a0);
      const __m256 p2 = _mm256_fmadd_ps(m8, x, a2);
      const __m256 inv = inverse_depth(p2, eps, two);
      const __m256 col = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(p0, inv), minus1), cmax);
      const __m256 fc = _mm256_floor_ps(col);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.col_off.data() + i),
                          _mm256_add_epi32(_mm256_cvttps_epi32(fc), base));
      _mm256_storeu_ps(s.ac.data() + i, _mm256_sub_ps(col, fc));
      _mm256_storeu_ps(s.inv.data() + i, inv);
      _mm256_storeu_ps(s.p1.data() + i, _mm256_fmadd_ps(m4, x, a1));
      const __m256 in_front = _mm256_cmp_ps(p2, eps, _CMP_GT_OQ);
      const __m256 w = W == kernels::bp_weighting::fdk ? _mm256_mul_ps(inv, inv) : one;
      _mm256_storeu_ps(s.wt.data() + i, _mm256_and_ps(w, in_front));
    }
  }
  const __m256 minus1 = _mm256_set1_ps(-1.0f);
  const __m256 rmax = _mm256_set1_ps(static_cast<float>(pv.rows));
  const __m256i pitch = _mm256_set1_epi32(pv.pitch);
  for (int q = 0; q < nz; ++q) {
    const float z = zs[q];
    int lo, hi;
    contributing_range(P, x0, dx, y, z, pv.cols, pv.rows, nx, lo, hi);
    if (lo >= hi) continue;
    // A subset of [lo0, hi0) on the same 8-lane grid, so phase A covers its vector part.
    const int vb = lo & ~7;
    const int ve = vb + ((hi - vb) & ~7);
    // Phase B: the row of each voxel in this plane.
    const __m256 cz = _mm256_set1_ps(m[6] * z);
    for (int i = vb; i < ve; i += 8) {
      const __m256 p1 = _mm256_add_ps(_mm256_loadu_ps(s.p1.data() + i), cz);
      const __m256 row = _mm256_min_ps(
          _mm256_max_ps(_mm256_mul_ps(p1, _mm256_loadu_ps(s.inv.data() + i)), minus1), rmax);
      const __m256 fr = _mm256_floor_ps(row);
      const __m256i col_off =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.col_off.data() + i));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(s.idx.data() + i),
          _mm256_add_epi32(_mm256_mullo_epi32(_mm256_cvttps_epi32(fr), pitch), col_off));
      _mm256_storeu_ps(s.ar.data() + i, _mm256_sub_ps(row, fr));
    }
    accumulate_taps(pv, s, vb, ve, acc[q]);
    scalar_tail<W>(pv, P, x0, dx, y, z, ve, hi, acc[q]);
  }
}

// ---- AVX-512: backproject_planes_avx2 with 16 lanes ------------------------------------------
// The same steps as the AVX2 code above, lane for lane; 1/p2 by rcp14 + a Newton step (the AVX2
// code's rcp has 12 bits), so its values differ from the AVX2 path's by a few ulp.

// inverse_depth with 16 lanes.
CTFORGE_AVX512_INLINE __m512 inverse_depth_avx512(__m512 p2, __m512 eps, __m512 two) {
  const __m512 wc = _mm512_max_ps(p2, eps);
  const __m512 r0 = _mm512_rcp14_ps(wc);
  return _mm512_mul_ps(r0, _mm512_fnmadd_ps(wc, r0, two));
}

// The tap pairs of voxels o[k], o[k + 1] (block 0), o[k + 4], o[k + 5] (block 1), o[k + 8],
// o[k + 9], o[k + 12], o[k + 13]: accumulate_taps' t0 (k = 0) and t1 (k = 2), twice as wide.
CTFORGE_AVX512_INLINE __m512 load_pair_blocks(const float* base, const std::int32_t* o, int k) {
  const __m256 lo = _mm256_insertf128_ps(_mm256_castps128_ps256(load_pairs(base, o[k], o[k + 1])),
                                         load_pairs(base, o[k + 4], o[k + 5]), 1);
  const __m256 hi =
      _mm256_insertf128_ps(_mm256_castps128_ps256(load_pairs(base, o[k + 8], o[k + 9])),
                           load_pairs(base, o[k + 12], o[k + 13]), 1);
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

// accumulate_taps with 16 lanes: voxels [vb, ve), multiples of 16 apart.
CTFORGE_AVX512_INLINE void accumulate_taps_avx512(const kernels::padded_view& pv,
                                                  const row_scratch& s, int vb, int ve,
                                                  float* __restrict acc) {
  const float* top = pv.data;
  const float* bottom = pv.data + pv.pitch;
  for (int i = vb; i < ve; i += 16) {
    const std::int32_t* o = s.idx.data() + i;
    const __m512 t0 = load_pair_blocks(top, o, 0), t1 = load_pair_blocks(top, o, 2);
    const __m512 b0 = load_pair_blocks(bottom, o, 0), b1 = load_pair_blocks(bottom, o, 2);
    const __m512 t00 = _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));  // left taps
    const __m512 t01 = _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));  // right taps
    const __m512 t10 = _mm512_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 t11 = _mm512_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 ac = _mm512_loadu_ps(s.ac.data() + i), ar = _mm512_loadu_ps(s.ar.data() + i);
    const __m512 one_ac = _mm512_sub_ps(_mm512_set1_ps(1.0f), ac);
    const __m512 one_ar = _mm512_sub_ps(_mm512_set1_ps(1.0f), ar);
    const __m512 up = _mm512_fmadd_ps(ac, t01, _mm512_mul_ps(one_ac, t00));
    const __m512 down = _mm512_fmadd_ps(ac, t11, _mm512_mul_ps(one_ac, t10));
    const __m512 v = _mm512_fmadd_ps(ar, down, _mm512_mul_ps(one_ar, up));
    _mm512_storeu_ps(
        acc + i, _mm512_fmadd_ps(v, _mm512_loadu_ps(s.wt.data() + i), _mm512_loadu_ps(acc + i)));
  }
}

// backproject_planes_avx2 with 16 lanes.
template <kernels::bp_weighting W>
CTFORGE_TARGET_AVX512 void backproject_planes_avx512(const kernels::padded_view& pv,
                                                     const kernels::proj_matrix& P, float x0,
                                                     float dx, float y, const float* zs, int nz,
                                                     int nx, float* const* acc, row_scratch& s) {
  const float* m = P.m;
  int lo0, hi0;
  contributing_range(P, x0, dx, y, 0.0f, pv.cols, pv.rows, nx, lo0, hi0, /*with_rows=*/false);
  if (lo0 >= hi0) return;
  const int vb0 = lo0 & ~15;
  const int ve0 = vb0 + ((hi0 - vb0) & ~15);
  // Phase A: what does not depend on z.
  {
    const __m512 a0 = _mm512_set1_ps(m[1] * y + m[3]);
    const __m512 a1 = _mm512_set1_ps(m[5] * y + m[7]);
    const __m512 a2 = _mm512_set1_ps(m[9] * y + m[11]);
    const __m512 m0 = _mm512_set1_ps(m[0]), m4 = _mm512_set1_ps(m[4]), m8 = _mm512_set1_ps(m[8]);
    const __m512 vdx = _mm512_set1_ps(dx), vx0 = _mm512_set1_ps(x0);
    const __m512 lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 eps = _mm512_set1_ps(1e-6f), one = _mm512_set1_ps(1.0f),
                 minus1 = _mm512_set1_ps(-1.0f), two = _mm512_set1_ps(2.0f);
    const __m512 cmax = _mm512_set1_ps(static_cast<float>(pv.cols));
    const __m512i base = _mm512_set1_epi32(pv.pitch + 1);
    for (int i = vb0; i < ve0; i += 16) {
      const __m512 x =
          _mm512_fmadd_ps(_mm512_add_ps(_mm512_set1_ps(static_cast<float>(i)), lane), vdx, vx0);
      const __m512 p0 = _mm512_fmadd_ps(m0, x, a0);
      const __m512 p2 = _mm512_fmadd_ps(m8, x, a2);
      const __m512 inv = inverse_depth_avx512(p2, eps, two);
      const __m512 col = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(p0, inv), minus1), cmax);
      const __m512 fc = _mm512_roundscale_ps(col, _MM_FROUND_FLOOR);
      _mm512_storeu_si512(s.col_off.data() + i, _mm512_add_epi32(_mm512_cvttps_epi32(fc), base));
      _mm512_storeu_ps(s.ac.data() + i, _mm512_sub_ps(col, fc));
      _mm512_storeu_ps(s.inv.data() + i, inv);
      _mm512_storeu_ps(s.p1.data() + i, _mm512_fmadd_ps(m4, x, a1));
      const __mmask16 in_front = _mm512_cmp_ps_mask(p2, eps, _CMP_GT_OQ);
      const __m512 w = W == kernels::bp_weighting::fdk ? _mm512_mul_ps(inv, inv) : one;
      _mm512_storeu_ps(s.wt.data() + i, _mm512_maskz_mov_ps(in_front, w));
    }
  }
  const __m512 minus1 = _mm512_set1_ps(-1.0f);
  const __m512 rmax = _mm512_set1_ps(static_cast<float>(pv.rows));
  const __m512i pitch = _mm512_set1_epi32(pv.pitch);
  for (int q = 0; q < nz; ++q) {
    const float z = zs[q];
    int lo, hi;
    contributing_range(P, x0, dx, y, z, pv.cols, pv.rows, nx, lo, hi);
    if (lo >= hi) continue;
    // A subset of [lo0, hi0) on the same 16-lane grid, so phase A covers its vector part.
    const int vb = lo & ~15;
    const int ve = vb + ((hi - vb) & ~15);
    // Phase B: the row of each voxel in this plane.
    const __m512 cz = _mm512_set1_ps(m[6] * z);
    for (int i = vb; i < ve; i += 16) {
      const __m512 p1 = _mm512_add_ps(_mm512_loadu_ps(s.p1.data() + i), cz);
      const __m512 row = _mm512_min_ps(
          _mm512_max_ps(_mm512_mul_ps(p1, _mm512_loadu_ps(s.inv.data() + i)), minus1), rmax);
      const __m512 fr = _mm512_roundscale_ps(row, _MM_FROUND_FLOOR);
      const __m512i col_off = _mm512_loadu_si512(s.col_off.data() + i);
      _mm512_storeu_si512(
          s.idx.data() + i,
          _mm512_add_epi32(_mm512_mullo_epi32(_mm512_cvttps_epi32(fr), pitch), col_off));
      _mm512_storeu_ps(s.ar.data() + i, _mm512_sub_ps(row, fr));
    }
    accumulate_taps_avx512(pv, s, vb, ve, acc[q]);
    scalar_tail<W>(pv, P, x0, dx, y, z, ve, hi, acc[q]);
  }
}

// The kernel of the shared-z loop: backproject_planes_avx2<W> or backproject_planes_avx512<W>.
using planes_kernel = void (*)(const kernels::padded_view&, const kernels::proj_matrix&, float,
                               float, float, const float*, int, int, float* const*, row_scratch&);

// Views per batch: as many as fit in k_view_batch_bytes (at least one). The views are taken in
// batches small enough to stay in the last-level cache while every block of the volume visits
// them: the taps of off-mid-plane slices are scattered over many detector rows, and fetching
// them from DRAM for every block was the bottleneck.
std::int64_t views_per_batch(const detail::padded_projections& proj) {
  const std::int64_t view_bytes = proj.view_stride * static_cast<std::int64_t>(sizeof(float));
  return std::clamp<std::int64_t>(k_view_batch_bytes / std::max<std::int64_t>(view_bytes, 1), 1,
                                  std::max<std::int64_t>(proj.views, 1));
}

/// The shared-z loop, for views whose p0 and p2 do not depend on z: task = a block of up
/// to k_z_planes planes x `block` rows, each row's planes through `planes`.
template <kernels::bp_weighting W>
void backproject_blocked_z(const detail::padded_projections& proj, const kernels::proj_matrix* mats,
                           const volume_geometry& vg, float* out, int nt, planes_kernel planes) {
  constexpr std::int64_t k_z_planes = 16;
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  const std::int64_t batch = views_per_batch(proj);
  const std::int64_t z_blocks = (nz + k_z_planes - 1) / k_z_planes;
  const std::int64_t block = std::clamp<std::int64_t>(ny * z_blocks / (4 * nt), 1, k_block_rows);
  const std::int64_t blocks_per_slab = (ny + block - 1) / block;
  const std::int64_t units = z_blocks * blocks_per_slab;
  const float x0 = static_cast<float>(vg.origin_mm[0]), dx = static_cast<float>(vg.spacing_mm[0]);
#pragma omp parallel num_threads(nt)
  {
    row_scratch scratch(nx);
    float zs[k_z_planes];
    float* acc[k_z_planes];
    for (std::int64_t v0 = 0; v0 < proj.views; v0 += batch) {
      const std::int64_t v1 = std::min(proj.views, v0 + batch);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t u = 0; u < units; ++u) {
        const std::int64_t k0 = (u / blocks_per_slab) * k_z_planes;
        const std::int64_t j0 = (u % blocks_per_slab) * block;
        const std::int64_t rows = std::min(block, ny - j0);
        const int n_planes = static_cast<int>(std::min(k_z_planes, nz - k0));
        for (int q = 0; q < n_planes; ++q)
          zs[q] =
              static_cast<float>(vg.origin_mm[2] + static_cast<double>(k0 + q) * vg.spacing_mm[2]);
        for (std::int64_t v = v0; v < v1; ++v) {
          const kernels::padded_view pv = proj.view(v);
          for (std::int64_t b = 0; b < rows; ++b) {
            const std::int64_t j = j0 + b;
            const float y =
                static_cast<float>(vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1]);
            for (int q = 0; q < n_planes; ++q) acc[q] = out + ((k0 + q) * ny + j) * nx;
            planes(pv, mats[v], x0, dx, y, zs, n_planes, static_cast<int>(nx), acc, scratch);
          }
        }
      }  // implicit barrier: the next batch adds to the same voxels
    }
  }
}

/// The per-plane loop: task = a block of rows at one z, each row through
/// backproject_row_avx2.
template <kernels::bp_weighting W>
void backproject_blocked(const detail::padded_projections& proj, const kernels::proj_matrix* mats,
                         const volume_geometry& vg, float* out, int nt) {
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  // Blocks of up to k_block_rows rows; smaller when that would leave threads idle.
  const std::int64_t block = std::clamp<std::int64_t>(ny * nz / (4 * nt), 1, k_block_rows);
  const std::int64_t blocks_per_slice = (ny + block - 1) / block;
  const std::int64_t units = nz * blocks_per_slice;
  const std::int64_t batch = views_per_batch(proj);
  const float x0 = static_cast<float>(vg.origin_mm[0]), dx = static_cast<float>(vg.spacing_mm[0]);
#pragma omp parallel num_threads(nt)
  {
    row_scratch scratch(nx);
    for (std::int64_t v0 = 0; v0 < proj.views; v0 += batch) {
      const std::int64_t v1 = std::min(proj.views, v0 + batch);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t u = 0; u < units; ++u) {
        const std::int64_t k = u / blocks_per_slice, j0 = (u % blocks_per_slice) * block;
        const std::int64_t rows = std::min(block, ny - j0);
        const float z =
            static_cast<float>(vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2]);
        for (std::int64_t v = v0; v < v1; ++v) {
          const kernels::padded_view pv = proj.view(v);
          for (std::int64_t b = 0; b < rows; ++b) {
            const float y = static_cast<float>(vg.origin_mm[1] +
                                               static_cast<double>(j0 + b) * vg.spacing_mm[1]);
            backproject_row_avx2<W>(pv, mats[v], x0, dx, y, z, static_cast<int>(nx),
                                    out + (k * ny + j0 + b) * nx, scratch);
          }
        }
      }  // implicit barrier: the next batch adds to the same voxels
    }
  }
}

template <kernels::bp_weighting W>
void backproject_simd_weighted(const detail::padded_projections& proj,
                               const kernels::proj_matrix* mats, const volume_geometry& vg,
                               float* out, int threads, bool shared_z, detail::simd_level level) {
  CTFORGE_EXPECTS(vg.nx < (std::int64_t{1} << 30), "back-projection: nx too large");
  const int nt = detail::resolve_threads(threads);
  if (!shared_z)
    backproject_blocked<W>(proj, mats, vg, out, nt);
  else if (level == detail::simd_level::avx512)
    backproject_blocked_z<W>(proj, mats, vg, out, nt, &backproject_planes_avx512<W>);
  else
    backproject_blocked_z<W>(proj, mats, vg, out, nt, &backproject_planes_avx2<W>);
}

#endif  // CTFORGE_SIMD_X86

}  // namespace

void detail::backproject_simd(const padded_projections& proj, const kernels::proj_matrix* mats,
                              const volume_geometry& vg, bool distance_weighting, float* out,
                              int threads, bool shared_z, simd_level level) {
  CTFORGE_EXPECTS(level != simd_level::none && level <= cpu_simd_supported(),
                  fmt::format("back-projection: the {} loop needs a CPU that has it (this one: {})",
                              to_string(level), to_string(cpu_simd_supported())));
#if defined(CTFORGE_SIMD_X86)
  if (distance_weighting)
    backproject_simd_weighted<kernels::bp_weighting::fdk>(proj, mats, vg, out, threads, shared_z,
                                                          level);
  else
    backproject_simd_weighted<kernels::bp_weighting::none>(proj, mats, vg, out, threads, shared_z,
                                                           level);
#else
  (void)proj, (void)mats, (void)vg, (void)distance_weighting, (void)out, (void)threads,
      (void)shared_z;
#endif
}

}  // namespace ctforge

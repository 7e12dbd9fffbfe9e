// The portable voxel-driven CPU back-projection loops, and the zero-bordered projections every
// fast loop reads. detail::backproject (recon/backproject.hpp) runs them where the CPU has no
// SIMD level the intrinsics loops are written for (recon/cpu_simd.hpp), or is told not to use
// one (CTFORGE_SIMD=scalar), and for cylindrical detectors (backproject_cpu_curved).
//
// The per-voxel arithmetic is the one the CUDA kernel runs (kernels::bp_contribution with a
// bilinear, border-zero detector sampler); only the loop order is CPU specific: OpenMP over
// (z, y) rows of voxels, every view accumulated into a row buffer whose inner loop over x the
// compiler vectorises for the library's -march (CTFORGE_CPU_ARCH).
// The loops ADD to `out`, so views may be processed in batches (pass a padded stack and the
// matrices of the batch only).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/volume.hpp"
#include "math/backproject.hpp"
#include "math/geometry.hpp"

namespace ctforge::detail {

/// All views of a projection stack, each copied into a zero-bordered image (see
/// kernels::padded_view): pitch = cols + 3, rows + 3 rows, pixel (0, 0) at element (1, 1).
struct padded_projections {
  int cols = 0, rows = 0;
  std::int64_t views = 0;
  std::int64_t view_stride = 0;  ///< floats per padded view = kernels::padded_size(cols, rows)
  std::vector<float> data;       ///< views * view_stride floats

  kernels::padded_view view(std::int64_t i) const {
    return {data.data() + i * view_stride, cols, rows, cols + 3};
  }
};

/// Padded copy of `n_views` views of `n_rows` x `n_cols` floats stored [view][row][col]
/// (src null: zero images, for a caller that fills the interiors itself).
inline padded_projections make_padded_projections(const float* src, std::int64_t n_views,
                                                  std::int64_t n_rows, std::int64_t n_cols) {
  // sample_bilinear_padded addresses a padded view with 32-bit offsets.
  CTFORGE_EXPECTS(n_views >= 0 && n_rows >= 1 && n_cols >= 1 &&
                      (n_rows + 3) * (n_cols + 3) < (std::int64_t{1} << 31),
                  "back-projection: projection size out of range");
  padded_projections p;
  p.cols = static_cast<int>(n_cols);
  p.rows = static_cast<int>(n_rows);
  p.views = n_views;
  p.view_stride = kernels::padded_size(p.cols, p.rows);
  p.data.assign(static_cast<std::size_t>(n_views * p.view_stride), 0.0f);
  const std::int64_t pitch = n_cols + 3;
  if (src == nullptr) return p;
  for (std::int64_t v = 0; v < n_views; ++v)
    for (std::int64_t r = 0; r < n_rows; ++r)
      std::memcpy(p.data.data() + v * p.view_stride + (r + 1) * pitch + 1,
                  src + (v * n_rows + r) * n_cols,
                  static_cast<std::size_t>(n_cols) * sizeof(float));
  return p;
}

inline padded_projections make_padded_projections(const projection_view& proj) {
  return make_padded_projections(proj.data.data(), proj.views, proj.rows, proj.cols);
}

/// Back-projects every view of `proj` into one row of voxels (fixed y index j, z index k):
/// acc[i] += sum over views of bp_contribution<W> at voxel (i, j, k), for i in [0, vg.nx).
/// `mats` holds proj.views float projection matrices (kernels::float_matrices).
/// `Map` is kernels::proj_matrix (flat detectors) or kernels::cyl_map (cylindrical).
template <kernels::bp_weighting W, class Map = kernels::proj_matrix>
inline void backproject_row(const padded_projections& proj, const Map* mats,
                            const volume_geometry& vg, std::int64_t j, std::int64_t k,
                            float* __restrict acc) {
  const float x0 = static_cast<float>(vg.origin_mm[0]);
  const float dx = static_cast<float>(vg.spacing_mm[0]);
  const float y = static_cast<float>(vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1]);
  const float z = static_cast<float>(vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2]);
  const int nx = static_cast<int>(vg.nx);
  for (std::int64_t v = 0; v < proj.views; ++v) {
    const kernels::padded_view pv = proj.view(v);
    const Map P = mats[v];
    const auto sample = [&pv](float c, float r) {
      return kernels::sample_bilinear_padded(pv, c, r);
    };
#pragma omp simd
    for (int i = 0; i < nx; ++i) {
      const float x = x0 + static_cast<float>(i) * dx;
      acc[i] += kernels::bp_contribution<W>(P, x, y, z, sample);
    }
  }
}

/// Back-projects all views of `proj` into the z-slices [z_begin, z_end) of `out`, a full
/// volume of geometry `vg` stored [z][y][x]; the result is ADDED to `out`.
/// `mats` holds proj.views float matrices. OpenMP over (z, y) rows; threads = 0: all cores.
/// Must not be called from inside an OpenMP parallel region that expects it to stay serial.
template <kernels::bp_weighting W, class Map = kernels::proj_matrix>
inline void backproject_cpu(const padded_projections& proj, const Map* mats,
                            const volume_geometry& vg, float* out, std::int64_t z_begin,
                            std::int64_t z_end, int threads = 0) {
  CTFORGE_EXPECTS(z_begin >= 0 && z_begin <= z_end && z_end <= vg.nz,
                  "back-projection: z range out of the volume");
  CTFORGE_EXPECTS(vg.nx < (std::int64_t{1} << 31), "back-projection: nx too large");
  const std::int64_t ny = vg.ny, nx = vg.nx;
  const std::int64_t n_rows = (z_end - z_begin) * ny;
  if (n_rows == 0) return;
  const int nt = resolve_threads(threads);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> acc(static_cast<std::size_t>(nx));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t row = 0; row < n_rows; ++row) {
      const std::int64_t k = z_begin + row / ny, j = row % ny;
      std::fill(acc.begin(), acc.end(), 0.0f);
      backproject_row<W, Map>(proj, mats, vg, j, k, acc.data());
      float* dst = out + (k * ny + j) * nx;
      for (std::int64_t i = 0; i < nx; ++i) dst[i] += acc[i];
    }
  }
}

/// backproject_cpu for a cylindrical detector (kernels::cyl_map per view), all of `out` (ADDED
/// to): a view's column, 1 / l and weight depend on (x, y) only, so each (y, view) computes them
/// once per x (kernels::cyl_column_of, the atan2 and sqrt) and every z plane reuses them through
/// kernels::bp_contribution_cyl; the per-voxel arithmetic is the CUDA kernel's. OpenMP over y.
template <kernels::bp_weighting W>
inline void backproject_cpu_curved(const padded_projections& proj, const kernels::cyl_map* maps,
                                   const volume_geometry& vg, float* out, int threads = 0) {
  CTFORGE_EXPECTS(vg.nx < (std::int64_t{1} << 31), "back-projection: nx too large");
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  const int nt = resolve_threads(threads);
  const float x0 = static_cast<float>(vg.origin_mm[0]);
  const float dx = static_cast<float>(vg.spacing_mm[0]);
#pragma omp parallel num_threads(nt)
  {
    std::vector<kernels::cyl_column> cols(static_cast<std::size_t>(nx));
    std::vector<float> acc(static_cast<std::size_t>(nx * nz));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t j = 0; j < ny; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float y =
          static_cast<float>(vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1]);
      for (std::int64_t v = 0; v < proj.views; ++v) {
        const kernels::padded_view pv = proj.view(v);
        const kernels::cyl_map P = maps[v];
        const auto sample = [&pv](float c, float r) {
          return kernels::sample_bilinear_padded(pv, c, r);
        };
        for (std::int64_t i = 0; i < nx; ++i)
          cols[static_cast<std::size_t>(i)] =
              kernels::cyl_column_of(P, x0 + static_cast<float>(i) * dx, y);
        for (std::int64_t k = 0; k < nz; ++k) {
          const float z =
              static_cast<float>(vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2]);
          float* __restrict a = acc.data() + k * nx;
          const kernels::cyl_column* c = cols.data();
#pragma omp simd
          for (std::int64_t i = 0; i < nx; ++i)
            a[i] += kernels::bp_contribution_cyl<W>(P, c[i], z, sample);
        }
      }
      for (std::int64_t k = 0; k < nz; ++k) {
        float* dst = out + (k * ny + j) * nx;
        const float* a = acc.data() + k * nx;
        for (std::int64_t i = 0; i < nx; ++i) dst[i] += a[i];
      }
    }
  }
}

}  // namespace ctforge::detail

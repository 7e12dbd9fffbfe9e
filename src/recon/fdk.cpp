// FDK (circular cone / fan beam) and FBP (circular parallel beam) on the CPU (the dispatcher
// ctforge::reconstruct is in src/recon/reconstruct.cpp, the fast back-projection loop in
// src/recon/backproject_filtered.cpp).
//
// Algorithm (Feldkamp, Davis & Kress 1984; Kak & Slaney ch. 3): with the pre-weights of
// recon/fdk_setup.hpp (angular weight x redundancy x (SID/SDD)^2 x cosine x Parker),
//   f(x) = sum_views  1/w(x)^2 * [ (p * preweight) (*) h ](col(x), row(x))
// where (*) is the row-wise ramp filter built for the virtual-detector pitch du SID/SDD and
// w = depth fraction of x (projection matrix, 1 on the detector): (SID/SDD)^2 / w^2 = SID^2/L^2,
// L the distance from the source along the central ray. Parallel beam: no cosine or distance
// weight, pitch du. A uniform object therefore comes out at its density (tests check this).
#include "recon/fdk.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/parallel_copy.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "math/backproject.hpp"
#include "math/geometry.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/fdk_geometry.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/filter.hpp"

namespace ctforge {

namespace {

void report(const recon_options& opt, double f) {
  if (opt.progress) opt.progress(std::clamp(f, 0.0, 1.0));
  opt.cancel.throw_if_requested();
}

// Share of the run time taken by pre-weighting and filtering (for the progress callback).
constexpr double k_filter_share = 0.05;

// Plain reference back-projection: double matrices, double accumulation, the bounds-checked
// border-zero sampler. Adds the result to `out`. Progress per z-slab.
void backproject_reference(const projection_view& proj, const geometry& g,
                           const volume_geometry& vg, bool distance_weighting, volume& out,
                           int threads, const recon_options& opt) {
  // Cylindrical detectors: no matrices; project_to_detector in double instead (w = l).
  const std::vector<projection_matrix> mats =
      g.curved() ? std::vector<projection_matrix>{} : compute_projection_matrices(g);
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  const int cols = static_cast<int>(proj.cols), rows = static_cast<int>(proj.rows);
  const std::int64_t slabs = std::min<std::int64_t>(nz, 16);
  for (std::int64_t s = 0; s < slabs; ++s) {
    const std::int64_t k0 = nz * s / slabs, k1 = nz * (s + 1) / slabs;
#pragma omp parallel num_threads(threads)
    {
      std::vector<double> acc(static_cast<std::size_t>(nx));
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t row = k0 * ny; row < k1 * ny; ++row) {
        const std::int64_t k = row / ny, j = row % ny;
        std::fill(acc.begin(), acc.end(), 0.0);
        const double y = vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1];
        const double z = vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2];
        for (std::int64_t v = 0; v < proj.views; ++v) {
          const float* img = proj.view(v);
          if (g.curved()) {
            for (std::int64_t i = 0; i < nx; ++i) {
              const double x = vg.origin_mm[0] + static_cast<double>(i) * vg.spacing_mm[0];
              const detector_coords q = project_to_detector(g, v, {x, y, z});
              if (!(q.w > 1e-6)) continue;
              const float sample = kernels::sample_bilinear_border(
                  img, cols, rows, static_cast<float>(q.col), static_cast<float>(q.row));
              acc[static_cast<std::size_t>(i)] +=
                  distance_weighting ? static_cast<double>(sample) / (q.w * q.w) : sample;
            }
            continue;
          }
          const projection_matrix& m = mats[static_cast<std::size_t>(v)];
          for (std::int64_t i = 0; i < nx; ++i) {
            const double x = vg.origin_mm[0] + static_cast<double>(i) * vg.spacing_mm[0];
            const double p0 = m[0] * x + m[1] * y + m[2] * z + m[3];
            const double p1 = m[4] * x + m[5] * y + m[6] * z + m[7];
            const double p2 = m[8] * x + m[9] * y + m[10] * z + m[11];
            if (!(p2 > 1e-6)) continue;  // at or behind the source plane
            const float sample = kernels::sample_bilinear_border(
                img, cols, rows, static_cast<float>(p0 / p2), static_cast<float>(p1 / p2));
            acc[static_cast<std::size_t>(i)] +=
                distance_weighting ? static_cast<double>(sample) / (p2 * p2) : sample;
          }
        }
        float* dst = out.data.data() + (k * ny + j) * nx;
        for (std::int64_t i = 0; i < nx; ++i)
          dst[i] += static_cast<float>(acc[static_cast<std::size_t>(i)]);
      }
    }
    report(opt, k_filter_share +
                    (1 - k_filter_share) * static_cast<double>(s + 1) / static_cast<double>(slabs));
  }
}

// Fast path: views in batches (progress per batch). Each batch is pre-weighted, ramp filtered
// and copied into zero-bordered images in one pass over the input, 16 detector rows at a time
// (the rows stay in cache between the three steps, and no filtered copy of the whole stack is
// ever made), then back-projected by the shared vectorised loop (recon/backproject_cpu.hpp).
void filter_and_backproject(const projection_view& proj, const geometry& g,
                            const volume_geometry& vg, const detail::fdk_setup& setup,
                            const detail::ramp_filter& filter, volume& out, int threads,
                            const recon_options& opt) {
  const std::vector<kernels::cyl_map> maps =
      g.curved() ? kernels::cylinder_maps(g) : std::vector<kernels::cyl_map>{};
  const std::vector<kernels::proj_matrix> mats =
      g.curved() ? std::vector<kernels::proj_matrix>{} : kernels::float_matrices(g);
  const std::int64_t batches = std::min<std::int64_t>(proj.views, 8);
  const std::int64_t rows = proj.rows, cols = proj.cols, pixels = rows * cols;
  constexpr std::int64_t k_block_rows = 16;
  const std::int64_t blocks_per_view = (rows + k_block_rows - 1) / k_block_rows;
  // One zero-bordered buffer for the largest batch, reused: every batch overwrites the
  // interior of the views it holds; the borders stay zero.
  detail::padded_projections padded = detail::make_padded_projections(
      nullptr, (proj.views + batches - 1) / batches, rows, cols);
  const std::int64_t pitch = cols + 3;
  std::vector<std::vector<float>> scratch(static_cast<std::size_t>(threads));
  for (std::int64_t b = 0; b < batches; ++b) {
    const std::int64_t v0 = proj.views * b / batches, v1 = proj.views * (b + 1) / batches;
    padded.views = v1 - v0;
    const std::int64_t n_blocks = (v1 - v0) * blocks_per_view;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (std::int64_t blk = 0; blk < n_blocks; ++blk) {
      std::vector<float>& buf = scratch[static_cast<std::size_t>(omp_get_thread_num())];
      buf.resize(static_cast<std::size_t>(k_block_rows * cols));
      const std::int64_t vi = blk / blocks_per_view;
      const std::int64_t r0 = (blk % blocks_per_view) * k_block_rows;
      const std::int64_t nr = std::min(k_block_rows, rows - r0);
      const kernels::preweight_view pv = setup.views[static_cast<std::size_t>(v0 + vi)];
      const float* src = proj.data.data() + (v0 + vi) * pixels + r0 * cols;
      for (std::int64_t r = 0; r < nr; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          buf[static_cast<std::size_t>(r * cols + c)] =
              src[r * cols + c] * kernels::preweight(setup.params, pv, static_cast<int>(c),
                                                     static_cast<int>(r0 + r));
      filter.apply(buf.data(), nr, 1);
      float* dst = padded.data.data() + vi * padded.view_stride + (r0 + 1) * pitch + 1;
      for (std::int64_t r = 0; r < nr; ++r)
        std::memcpy(dst + r * pitch, buf.data() + r * cols,
                    static_cast<std::size_t>(cols) * sizeof(float));
    }
    if (g.curved())
      detail::backproject_filtered_cpu(padded, maps.data() + v0, vg, setup.distance_weighting,
                                       out.data.data(), threads);
    else
      detail::backproject_filtered_cpu(padded, mats.data() + v0, vg, setup.distance_weighting,
                                       out.data.data(), threads);
    report(opt, k_filter_share + (1 - k_filter_share) * static_cast<double>(b + 1) /
                                     static_cast<double>(batches));
  }
}

}  // namespace

volume detail::fdk_reconstruct_cpu(const projection_view& proj, const geometry& g,
                                   const volume_geometry& vg, const recon_options& opt,
                                   const detail::fdk_setup& setup) {
  const int threads = detail::resolve_threads(opt.threads);
  report(opt, 0.0);
  const detail::ramp_filter filter(proj.cols, setup.filter_pixel_mm, opt.filter, opt.cutoff,
                                   setup.filter_equiangular_rad);
  volume out(vg);
  if (!opt.reference) {
    report(opt, k_filter_share);
    filter_and_backproject(proj, g, vg, setup, filter, out, threads, opt);
    return out;
  }
  projection_stack work = to_stack(proj);
  detail::apply_preweights(setup, work, threads);
  filter.apply(work, threads);
  report(opt, k_filter_share);
  backproject_reference(work, g, vg, setup.distance_weighting, out, threads, opt);
  return out;
}

}  // namespace ctforge

// FDK (circular cone / fan beam) and FBP (circular parallel beam) on the CPU (the dispatcher
// ctforge::reconstruct is in src/recon/reconstruct.cpp, the back-projection behind
// detail::backproject in src/recon/backproject.hpp).
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
#include "math/backproject.hpp"
#include "math/geometry.hpp"
#include "recon/backproject.hpp"
#include "cuda/cuda_api.hpp"
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

// Fast path: views in batches (progress per batch). Each batch is pre-weighted, ramp filtered
// and copied into zero-bordered images in one pass over the input, 16 detector rows at a time
// (the rows stay in cache between the three steps, and no filtered copy of the whole stack is
// ever made), then back-projected by detail::backproject (its automatic strategy).
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
    detail::bp_job job;
    job.padded = &padded;
    if (g.curved())
      job.maps = maps.data() + v0;
    else
      job.mats = mats.data() + v0;
    job.grid = vg;
    job.out = out.data.data();
    job.distance_weighting = setup.distance_weighting;
    job.threads = threads;
    detail::backproject(job);
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
  const projection_view filtered = work;
  detail::bp_job job;
  job.views = &filtered;
  job.geom = &g;
  job.grid = vg;
  job.out = out.data.data();
  job.distance_weighting = setup.distance_weighting;
  job.threads = threads;
  job.progress = [&opt](double f) { report(opt, k_filter_share + (1 - k_filter_share) * f); };
  detail::backproject(job, detail::bp_strategy::reference);
  return out;
}

}  // namespace ctforge

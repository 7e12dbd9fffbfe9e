// detail::backproject (recon/backproject.hpp): checks the job and runs the strategy it asks
// for; the reference loop is here, the fast loops in recon/backproject_simd.cpp (AVX2,
// AVX-512) and recon/backproject_cpu.hpp (portable, cylindrical detectors).
#include "recon/backproject.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/enum_names.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "math/backproject.hpp"
#include "recon/backproject_simd.hpp"
#include "recon/cpu_simd.hpp"

namespace ctforge::detail {
namespace {

// The views' contributions to row (j, k) of the grid, each added in double to acc (nx values):
// double matrices (flat detector) or project_to_detector (cylindrical, w = l), the
// bounds-checked border-zero sampler, weight 1 / w^2 or 1, nothing at or behind the source.
void reference_row(const bp_job& job, const std::vector<projection_matrix>& mats, std::int64_t j,
                   std::int64_t k, std::vector<double>& acc) {
  const projection_view& proj = *job.views;
  const geometry& g = *job.geom;
  const volume_geometry& vg = job.grid;
  const int cols = static_cast<int>(proj.cols), rows = static_cast<int>(proj.rows);
  const std::int64_t nx = vg.nx;
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
            job.distance_weighting ? static_cast<double>(sample) / (q.w * q.w) : sample;
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
          job.distance_weighting ? static_cast<double>(sample) / (p2 * p2) : sample;
    }
  }
}

// The reference strategy: OpenMP over the rows of up to 16 slabs, job.progress after each.
void backproject_reference(const bp_job& job) {
  CTFORGE_EXPECTS(job.views != nullptr && job.geom != nullptr,
                  "back-projection: the reference loop needs the views and their geometry");
  const geometry& g = *job.geom;
  const volume_geometry& vg = job.grid;
  // Cylindrical detectors: no matrices; project_to_detector in double instead (w = l).
  const std::vector<projection_matrix> mats =
      g.curved() ? std::vector<projection_matrix>{} : compute_projection_matrices(g);
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  const int threads = resolve_threads(job.threads);
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
        reference_row(job, mats, j, k, acc);
        float* dst = job.out + (k * ny + j) * nx;
        for (std::int64_t i = 0; i < nx; ++i)
          dst[i] += static_cast<float>(acc[static_cast<std::size_t>(i)]);
      }
    }
    if (job.progress) job.progress(static_cast<double>(s + 1) / static_cast<double>(slabs));
  }
}

// The portable loops of recon/backproject_cpu.hpp (no SIMD level, or a cylindrical detector).
template <kernels::bp_weighting W>
void backproject_portable(const bp_job& job) {
  if (job.maps != nullptr)
    backproject_cpu_curved<W>(*job.padded, job.maps, job.grid, job.out, job.threads);
  else
    backproject_cpu<W>(*job.padded, job.mats, job.grid, job.out, 0, job.grid.nz, job.threads);
}

}  // namespace

constexpr enum_name<bp_strategy> k_strategy_names[] = {{bp_strategy::automatic, "automatic"},
                                                       {bp_strategy::reference, "reference"},
                                                       {bp_strategy::per_plane, "per-plane"},
                                                       {bp_strategy::shared_z, "shared-z"}};

const char* to_string(bp_strategy s) {
  return name_of(s, k_strategy_names, "?");
}

bool views_allow_shared_z(const kernels::proj_matrix* mats, std::int64_t views) {
  return std::all_of(mats, mats + views, [](const kernels::proj_matrix& P) {
    return P.m[2] == 0.0f && P.m[10] == 0.0f;
  });
}

void backproject(const bp_job& job, bp_strategy strategy) {
  CTFORGE_EXPECTS(job.out != nullptr, "back-projection: no output volume");
  if (strategy == bp_strategy::reference) {
    backproject_reference(job);
    return;
  }
  CTFORGE_EXPECTS(job.padded != nullptr && (job.mats != nullptr) != (job.maps != nullptr),
                  "back-projection: the fast loops need the padded views and either their "
                  "matrices or their cylinder maps");
  const padded_projections& proj = *job.padded;
  CTFORGE_EXPECTS(strategy != bp_strategy::shared_z || job.maps != nullptr ||
                      views_allow_shared_z(job.mats, proj.views),
                  "back-projection: the shared-z loop needs views whose detector column and "
                  "depth do not depend on z (an untilted circular orbit)");
  const simd_level level = cpu_simd_level();
  if (job.maps != nullptr || level == simd_level::none) {
    if (job.distance_weighting)
      backproject_portable<kernels::bp_weighting::fdk>(job);
    else
      backproject_portable<kernels::bp_weighting::none>(job);
    return;
  }
  const bool shared_z =
      strategy == bp_strategy::shared_z || (strategy == bp_strategy::automatic && job.grid.nz > 1 &&
                                            views_allow_shared_z(job.mats, proj.views));
  backproject_simd(proj, job.mats, job.grid, job.distance_weighting, job.out, job.threads, shared_z,
                   level);
}

}  // namespace ctforge::detail

// SIRT on the library's projectors: x <- x + lambda C B (R (p - A x)), see recon.hpp.
#include "recon/sirt.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/error.hpp"
#include "ctforge/projector.hpp"

namespace ctforge::detail {
namespace {

/// 1 / v where v > floor, else 0 (in place).
void invert_above(std::vector<float>& v, float floor, int threads) {
  const auto n = static_cast<std::int64_t>(v.size());
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) {
    float& x = v[static_cast<std::size_t>(i)];
    x = x > floor ? 1.0f / x : 0.0f;
  }
}

}  // namespace

void validate_sirt(const projection_view& proj, const geometry& g, const recon_options& opt) {
  require_host(proj, "SIRT");
  g.validate();
  CTFORGE_EXPECTS(opt.iterations >= 1 && opt.iterations <= 1000000,
                  fmt::format("--iterations: must be in [1, 1000000] (got {})", opt.iterations));
  CTFORGE_EXPECTS(std::isfinite(opt.relaxation) && opt.relaxation > 0 && opt.relaxation < 2,
                  fmt::format("--relaxation: must be in (0, 2) (got {})", opt.relaxation));
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("projections are {} views x {} rows x {} cols but the geometry has "
                              "{} x {} x {}",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  "projection data size does not match its dimensions");
}

volume sirt_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, backend where) {
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  projector_options po;
  po.where = where;
  po.threads = opt.threads;
  po.device = opt.device;
  po.gpu_memory_limit_bytes = opt.gpu_memory_limit_bytes;
  po.gpu_hardware_interpolation = opt.gpu_hardware_interpolation;
  const auto report = [&](double f) {
    if (opt.progress) opt.progress(f);
    opt.cancel.throw_if_requested("SIRT");
  };
  report(0.0);

  // R: inverse ray lengths through the grid (mm); a ray grazing it over less than 1/1000 of a
  // voxel gets no weight (its residual would be amplified a thousandfold).
  volume ones(vg);
  std::fill(ones.data.begin(), ones.data.end(), 1.0f);
  projection_stack row_w = forward_project(ones, g, po);
  const double min_spacing = *std::min_element(vg.spacing_mm.begin(), vg.spacing_mm.end());
  invert_above(row_w.data, static_cast<float>(1e-3 * min_spacing), threads);
  ones = volume{};
  // C: inverse number of views (bilinear weights summed) that see each voxel.
  projection_stack ones_p(proj.views, proj.rows, proj.cols);
  std::fill(ones_p.data.begin(), ones_p.data.end(), 1.0f);
  volume col_w = back_project(ones_p, g, vg, po);
  invert_above(col_w.data, 1e-3f, threads);
  ones_p = projection_stack{};

  volume x(vg);
  const sirt_checkpoint& ck = opt.sirt_state;
  CTFORGE_EXPECTS(ck.resume_iterations >= 0 && ck.resume_iterations <= opt.iterations,
                  "SIRT: the saved state holds more iterations than asked for");
  if (ck.resume_iterations > 0) {
    CTFORGE_EXPECTS(static_cast<std::int64_t>(ck.resume_x.size()) == vg.voxel_count(),
                    "SIRT: the saved iterate does not match the grid");
    std::copy(ck.resume_x.begin(), ck.resume_x.end(), x.data.begin());
  }
  auto last_save = std::chrono::steady_clock::now();
  projection_stack r(proj.views, proj.rows, proj.cols);
  // On the GPU the iterate and the weighted residual are uploaded every iteration: page-lock
  // them once so the uploads go straight from them (a no-op on the CPU or where the system
  // refuses; their storage stays in place for the whole loop).
  std::optional<pinned_host_range> pin_x, pin_r;
  if (where == backend::cuda) {
    pin_x.emplace(x.data.data(), x.data.size() * sizeof(float));
    pin_r.emplace(r.data.data(), r.data.size() * sizeof(float));
  }
  const auto n_rays = static_cast<std::int64_t>(r.data.size());
  const auto n_vox = static_cast<std::int64_t>(x.data.size());
  const auto lambda = static_cast<float>(opt.relaxation);
  for (int it = ck.resume_iterations; it < opt.iterations; ++it) {
    // r = R (p - A x); A x = 0 for the first iterate x = 0.
    if (it == 0) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (std::int64_t i = 0; i < n_rays; ++i)
        r.data[static_cast<std::size_t>(i)] =
            row_w.data[static_cast<std::size_t>(i)] * proj.data[static_cast<std::size_t>(i)];
    } else {
      const projection_stack ax = forward_project(x, g, po);
#pragma omp parallel for schedule(static) num_threads(threads)
      for (std::int64_t i = 0; i < n_rays; ++i) {
        const auto k = static_cast<std::size_t>(i);
        r.data[k] = row_w.data[k] * (proj.data[k] - ax.data[k]);
      }
    }
    // x += lambda C B r, clamped at 0 when asked.
    const volume u = back_project(r, g, vg, po);
    const bool clamp = opt.nonnegative;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t j = 0; j < n_vox; ++j) {
      const auto k = static_cast<std::size_t>(j);
      const float v = x.data[k] + lambda * col_w.data[k] * u.data[k];
      x.data[k] = clamp ? std::max(v, 0.0f) : v;
    }
    if (ck.save) {
      const auto now = std::chrono::steady_clock::now();
      const bool due =
          (ck.every > 0 && (it + 1) % ck.every == 0) ||
          (ck.seconds > 0 && std::chrono::duration<double>(now - last_save).count() >= ck.seconds) ||
          opt.cancel.requested();
      if (due && it + 1 < opt.iterations) {  // the last iterate is the result itself
        ck.save(it + 1, x.data);
        last_save = std::chrono::steady_clock::now();
      }
    }
    report(static_cast<double>(it + 1) / static_cast<double>(opt.iterations));
  }
  return x;
}

}  // namespace ctforge::detail

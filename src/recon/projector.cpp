#include "ctforge/projector.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "kernels/backproject.cuh"
#include "kernels/forward_project.cuh"
#include "kernels/geometry.cuh"
#include "recon/backproject_cpu.hpp"
#include "recon/cuda_dispatch.hpp"
#include "recon/fdk.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/forward_project_cpu.hpp"

namespace ctforge {
namespace {

int thread_count(int threads) {
  return threads > 0 ? threads : omp_get_max_threads();
}

void check_int_sizes(const volume_geometry& vg) {
  constexpr std::int64_t lim = std::int64_t{1} << 30;
  CTFORGE_EXPECTS(vg.nx < lim && vg.ny < lim && vg.nz < lim,
                  fmt::format("volume size {}x{}x{} too large", vg.nx, vg.ny, vg.nz));
}

/// Shapes, and no NaN or infinity among the voxels (a non-finite voxel would spread silently
/// into every ray through it): usage_error naming the first bad voxel.
void check_forward_inputs(const volume_view& vol, const geometry& g, int threads) {
  g.validate();
  vol.geom.validate();
  check_int_sizes(vol.geom);
  CTFORGE_EXPECTS(static_cast<std::int64_t>(vol.data.size()) == vol.geom.voxel_count(),
                  fmt::format("forward projection: volume holds {} values for {} voxels",
                              vol.data.size(), vol.geom.voxel_count()));
  const std::int64_t bad =
      detail::first_non_finite(vol.data.data(), vol.geom.voxel_count(), threads);
  if (bad >= 0) {
    const std::int64_t plane = vol.geom.nx * vol.geom.ny;
    throw usage_error(fmt::format(
        "forward projection: the volume holds a non-finite value ({}) at voxel (x {}, y {}, "
        "z {}); projections need finite values",
        vol.data[static_cast<std::size_t>(bad)], bad % vol.geom.nx, (bad % plane) / vol.geom.nx,
        bad / plane));
  }
}

/// The ray through pixel (v, r, c): point p and direction d in index coordinates (re-anchored at
/// its point nearest to the volume centre, so that the float coordinates handed to the kernel
/// body are small), the direction's length in mm and the source's parameter (cone beam: the
/// integral starts there). The forward projector and its transpose trace the same rays.
struct ray_in_grid {
  kernels::f3 p, d;
  float dir_mm, t_min;
};
struct ray_setup {
  const geometry& g;
  vec3 org, inv_sp, centre;
  bool cone;
  ray_setup(const geometry& geom, const volume_geometry& vg)
      : g(geom),
        org{vg.origin_mm[0], vg.origin_mm[1], vg.origin_mm[2]},
        inv_sp{1.0 / vg.spacing_mm[0], 1.0 / vg.spacing_mm[1], 1.0 / vg.spacing_mm[2]},
        centre(vg.voxel_center(0.5 * static_cast<double>(vg.nx - 1),
                               0.5 * static_cast<double>(vg.ny - 1),
                               0.5 * static_cast<double>(vg.nz - 1))),
        cone(geom.beam == beam_kind::cone) {}
  ray_in_grid operator()(std::int64_t v, std::int64_t r, std::int64_t c) const {
    const vec3 s = g.views[static_cast<std::size_t>(v)].source;
    const vec3 px = pixel_center(g, v, static_cast<double>(c), static_cast<double>(r));
    const vec3 dir = cone ? px - s : s;
    const double len2 = dot(dir, dir);
    const vec3 anchor = px + (dot(centre - px, dir) / len2) * dir;
    const float t_min = cone ? static_cast<float>(dot(s - anchor, dir) / len2) : -3.0e38f;
    const vec3 p{(anchor.x - org.x) * inv_sp.x, (anchor.y - org.y) * inv_sp.y,
                 (anchor.z - org.z) * inv_sp.z};
    const vec3 d{dir.x * inv_sp.x, dir.y * inv_sp.y, dir.z * inv_sp.z};
    return {{static_cast<float>(p.x), static_cast<float>(p.y), static_cast<float>(p.z)},
            {static_cast<float>(d.x), static_cast<float>(d.y), static_cast<float>(d.z)},
            static_cast<float>(std::sqrt(len2)), t_min};
  }
};

/// Projects planes [z0, z0 + nz) of `vol` (the whole volume when nz = vol.geom.nz) into `out`
/// (adding when `accumulate`) with kernels::joseph_ray_window: the per-ray set-up and body the
/// CUDA kernel runs (src/kernels/forward_project.cu), per z-slab as the GPU does when the
/// volume exceeds device memory.
void project_planes(const volume_view& vol, const geometry& g, std::int64_t z0, std::int64_t nz,
                    bool accumulate, projection_stack& out, int threads) {
  const volume_geometry& vg = vol.geom;
  // Reads the caller's planes in place (no bordered copy of the volume).
  const kernels::z_slab_sampler<kernels::border_volume_sampler> sampler{
      {vol.data.data() + z0 * vg.nx * vg.ny, static_cast<int>(vg.nx), static_cast<int>(vg.ny),
       static_cast<int>(nz)},
      static_cast<float>(z0)};
  const int nx = static_cast<int>(vg.nx), ny = static_cast<int>(vg.ny),
            nz_all = static_cast<int>(vg.nz);
  const float z_lo = static_cast<float>(z0) - 1.0f, z_hi = static_cast<float>(z0 + nz);
  const ray_setup rays(g, vg);
  const std::int64_t n_lines = g.view_count() * g.rows;
#pragma omp parallel for schedule(dynamic, 2) num_threads(thread_count(threads))
  for (std::int64_t line = 0; line < n_lines; ++line) {
    const std::int64_t v = line / g.rows, r = line % g.rows;
    for (std::int64_t c = 0; c < g.cols; ++c) {
      const ray_in_grid ray = rays(v, r, c);
      const float value = kernels::joseph_ray_window(sampler, ray.p, ray.d, nx, ny, nz_all,
                                                     ray.dir_mm, ray.t_min, z_lo, z_hi);
      if (accumulate)
        out.at(v, r, c) += value;
      else
        out.at(v, r, c) = value;
    }
  }
}

/// forward_project after check_forward_inputs.
projection_stack forward_project_checked(const volume_view& vol, const geometry& g, int threads) {
  projection_stack out(g.view_count(), g.rows, g.cols);
  project_planes(vol, g, 0, vol.geom.nz, false, out, threads);
  return out;
}

}  // namespace

projection_stack forward_project(const volume_view& vol, const geometry& g, int threads) {
  check_forward_inputs(vol, g, threads);
  return forward_project_checked(vol, g, threads);
}

namespace detail {

projection_stack forward_project_slabs(const volume_view& vol, const geometry& g, std::int64_t slab_nz,
                                       int threads) {
  check_forward_inputs(vol, g, threads);
  CTFORGE_EXPECTS(slab_nz >= 1, "forward projection: slab depth must be at least 1 plane");
  projection_stack out(g.view_count(), g.rows, g.cols);
  for (std::int64_t z0 = 0; z0 < vol.geom.nz; z0 += slab_nz)
    project_planes(vol, g, z0, std::min(slab_nz, vol.geom.nz - z0), z0 > 0, out, threads);
  return out;
}

}  // namespace detail

namespace {

/// Shapes, and no NaN or infinity among the projections: usage_error naming the first bad
/// pixel (view, row, column).
void check_back_inputs(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                       int threads) {
  require_host(proj, "back-projection");
  g.validate();
  vg.validate();
  check_int_sizes(vg);
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("back-projection: projections are {} views x {} rows x {} cols but "
                              "the geometry has {} x {} x {}",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  "back-projection: projection data size does not match its dimensions");
  CTFORGE_EXPECTS(g.cols < (1 << 30) && g.rows < (1 << 30), "back-projection: detector too large");
  detail::check_finite_values(proj, threads);
}

/// back_project after check_back_inputs.
volume back_project_checked(const projection_view& proj, const geometry& g,
                            const volume_geometry& vg, int threads, bool reference) {
  volume out(vg);
  const int nt = thread_count(threads);
  if (g.curved()) {
    // Cylindrical detector: the curved mapping (kernels::cyl_map), shared loop; `reference`
    // uses project_to_detector in double.
    const auto maps = kernels::cylinder_maps(g);
    const int cols = static_cast<int>(g.cols), rows = static_cast<int>(g.rows);
    if (!reference) {
      const auto padded = detail::make_padded_projections(proj.data.data(), proj.views,
                                                          proj.rows, proj.cols);
      detail::backproject_filtered_cpu(padded, maps.data(), vg, /*distance_weighting=*/false,
                                       out.data.data(), nt);
      return out;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (std::int64_t row = 0; row < vg.nz * vg.ny; ++row) {
      const std::int64_t k = row / vg.ny, j = row % vg.ny;
      for (std::int64_t i = 0; i < vg.nx; ++i) {
        const vec3 x = vg.voxel_center(static_cast<double>(i), static_cast<double>(j),
                                       static_cast<double>(k));
        double acc = 0;
        for (std::int64_t v = 0; v < g.view_count(); ++v) {
          const detector_coords q = project_to_detector(g, v, x);
          if (!(q.w > 1e-6)) continue;
          acc += kernels::sample_bilinear_border(proj.view(v), cols, rows,
                                                 static_cast<float>(q.col),
                                                 static_cast<float>(q.row));
        }
        out.data[static_cast<std::size_t>(row * vg.nx + i)] = static_cast<float>(acc);
      }
    }
    return out;
  }
  if (!reference) {
    const auto mats = kernels::float_matrices(g);
    // The loop FDK/FBP run (AVX2 where the library is built for it, else backproject_cpu), on
    // zero-bordered copies of at most 1/8 of the views at a time (as FDK's): the caller's
    // projections are never copied whole.
    const std::int64_t batches = std::min<std::int64_t>(proj.views, 8);
    const std::int64_t pixels = proj.rows * proj.cols;
    for (std::int64_t b = 0; b < batches; ++b) {
      const std::int64_t v0 = proj.views * b / batches, v1 = proj.views * (b + 1) / batches;
      const auto padded = detail::make_padded_projections(proj.data.data() + v0 * pixels,
                                                          v1 - v0, proj.rows, proj.cols);
      detail::backproject_filtered_cpu(padded, mats.data() + v0, vg,
                                       /*distance_weighting=*/false, out.data.data(), nt);
    }
    return out;
  }
  // Reference: double matrices and accumulation, bounds-checked bilinear sampler.
  const auto mats = compute_projection_matrices(g);
  const int cols = static_cast<int>(g.cols), rows = static_cast<int>(g.rows);
  const std::int64_t ny = vg.ny, nx = vg.nx;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (std::int64_t row = 0; row < vg.nz * ny; ++row) {
    const std::int64_t k = row / ny, j = row % ny;
    for (std::int64_t i = 0; i < nx; ++i) {
      const vec3 x =
          vg.voxel_center(static_cast<double>(i), static_cast<double>(j), static_cast<double>(k));
      double acc = 0;
      for (std::int64_t v = 0; v < g.view_count(); ++v) {
        const auto& m = mats[static_cast<std::size_t>(v)];
        const double p0 = m[0] * x.x + m[1] * x.y + m[2] * x.z + m[3];
        const double p1 = m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7];
        const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
        if (!(p2 > 1e-6)) continue;  // at or behind the source (cone beam)
        acc += kernels::sample_bilinear_border(
            proj.view(v), cols, rows, static_cast<float>(p0 / p2), static_cast<float>(p1 / p2));
      }
      out.data[static_cast<std::size_t>(row * nx + i)] = static_cast<float>(acc);
    }
  }
  return out;
}

}  // namespace

volume back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                    int threads, bool reference) {
  check_back_inputs(proj, g, vg, threads);
  return back_project_checked(proj, g, vg, threads, reference);
}

namespace {

/// Validates `opt` and says whether it selects the CUDA backend (filling *copt when it does).
bool use_cuda(const projector_options& opt, detail::cuda_options* copt) {
  detail::require_thread_count(opt.threads);
  if (resolve_backend(opt.where, nullptr, opt.device) != backend::cuda) return false;
  copt->device = opt.device;
  copt->memory_limit_bytes = opt.gpu_memory_limit_bytes;
  copt->hardware_interpolation = opt.gpu_hardware_interpolation;
  return true;
}

}  // namespace

projection_stack forward_project(const volume_view& vol, const geometry& g,
                                 const projector_options& opt) {
  check_forward_inputs(vol, g, opt.threads);  // before either backend
  detail::cuda_options copt;
  if (use_cuda(opt, &copt)) {
#if defined(CTFORGE_WITH_CUDA)
    return detail::cuda_forward_project(vol, g, copt);
#endif
  }
  return forward_project_checked(vol, g, opt.threads);
}

volume back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                    const projector_options& opt) {
  check_back_inputs(proj, g, vg, opt.threads);  // before either backend
  detail::cuda_options copt;
  if (use_cuda(opt, &copt)) {
#if defined(CTFORGE_WITH_CUDA)
    return detail::cuda_back_project(proj, g, vg, copt);
#endif
  }
  return back_project_checked(proj, g, vg, opt.threads, false);
}

volume back_project_matched(const projection_view& proj, const geometry& g,
                            const volume_geometry& vg, int threads) {
  require_host(proj, "back_project_matched");
  const int nt = thread_count(threads);
  check_back_inputs(proj, g, vg, nt);
  check_int_sizes(vg);
  const ray_setup rays(g, vg);
  const int nx = static_cast<int>(vg.nx), ny = static_cast<int>(vg.ny),
            nz = static_cast<int>(vg.nz);
  const auto n_vox = static_cast<std::size_t>(vg.voxel_count());
  // One volume per thread (the rays of a static share of the detector lines scatter into it),
  // then summed in thread order: deterministic for a given thread count.
  detail::require_memory(static_cast<std::uint64_t>(n_vox) * static_cast<std::uint64_t>(nt),
                         sizeof(float),
                         fmt::format("the matched back-projection's {} per-thread volumes", nt),
                         "use fewer threads");
  std::vector<std::vector<float>> partial(static_cast<std::size_t>(nt));
  const std::int64_t n_lines = g.view_count() * g.rows;
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    std::vector<float>& acc = partial[static_cast<std::size_t>(t)];
    acc.assign(n_vox, 0.0f);
#pragma omp for schedule(static)
    for (std::int64_t line = 0; line < n_lines; ++line) {
      const std::int64_t v = line / g.rows, r = line % g.rows;
      const float* row = proj.view(v) + r * proj.cols;
      for (std::int64_t c = 0; c < g.cols; ++c) {
        if (row[c] == 0.0f) continue;
        const ray_in_grid ray = rays(v, r, c);
        kernels::joseph_scatter(acc.data(), nx, ny, nz, ray.p, ray.d, ray.dir_mm, ray.t_min,
                                row[c]);
      }
    }
  }
  volume out(vg);
  out.data = std::move(partial[0]);
  for (std::size_t t = 1; t < partial.size(); ++t) {
    const std::vector<float>& a = partial[t];
    const auto n = static_cast<std::int64_t>(n_vox);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (std::int64_t i = 0; i < n; ++i) out.data[static_cast<std::size_t>(i)] += a[static_cast<std::size_t>(i)];
  }
  return out;
}

}  // namespace ctforge

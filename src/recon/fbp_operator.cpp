// ctforge::fbp_apply and ctforge::fbp_adjoint (include/ctforge/recon.hpp): FDK / FBP as a
// linear operator R = B_w F W (P) (S) and its exact adjoint R^T = (S^T) (P^T) W F B_w^T, where
//  * S resamples a vector geometry's projections onto the virtual detectors of its circular
//    equivalent (recon/fdk_geometry.hpp; bicubic), S^T splats each virtual pixel back with the
//    same weights (resample_adjoint); absent for circular geometries and for vector ones whose
//    virtual detectors are the real ones;
//  * P embeds the projections into a displaced detector's narrow-side padding (zero columns,
//    detail::pad_narrow_side), P^T crops them again;
//  * W multiplies every pixel by its pre-weight (kernels::preweight): diagonal, W^T = W;
//  * F ramp filters each row: zero padding to N >= 2 cols, circular convolution with the real
//    even kernel h_c (h_c[d] = h_c[N - d]; the window is real and even in frequency too) and
//    cropping to the first cols, i.e. F[n][m] = h_c[(n - m) mod N] = F[m][n]: symmetric, so
//    F^T = F (tests/recon/fbp_operator_test.cpp checks it on the filter's matrix);
//  * B_w back-projects voxel by voxel with bilinear detector reads and the FDK weight
//    (kernels::bp_point_of / bp_point_cyl); B_w^T splats each voxel's value times that weight
//    into the four pixels of its bilinear read (kernels::splat_bilinear_border).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/recon.hpp"
#include "math/backproject.hpp"
#include "recon/backproject.hpp"
#include "recon/fdk_geometry.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/filter.hpp"

namespace ctforge {
namespace {

// The options both functions accept: FDK / FBP of a circular geometry or of a vector geometry
// with a circular orbit (then R = R_c S, S resampling onto the virtual detectors), on the CPU.
void check_operator_options(const geometry& g, const recon_options& opt, const char* fn) {
  CTFORGE_EXPECTS(opt.algo == algorithm::fdk || opt.algo == algorithm::fbp,
                  fmt::format("{}: algorithm must be fdk or fbp (got {})", fn, to_string(opt.algo)));
  CTFORGE_EXPECTS(!g.helix.has_value(),
                  fmt::format("{}: a helical geometry (reconstruct it with --algorithm "
                              "helical-fbp, which has no adjoint here)",
                              fn));
  CTFORGE_EXPECTS(opt.where != backend::cuda,
                  fmt::format("{}: runs on the CPU only (backend cuda requested)", fn));
  detail::require_thread_count(opt.threads);
}

// One view of B_w^T: every voxel's value times its weight, splatted (double accumulation into
// `acc`, rows x cols) at the detector position its back-projection reads.
template <kernels::bp_weighting W>
void splat_view_flat(const volume_view& vol, const kernels::proj_matrix& P, int cols, int rows,
                     double* acc) {
  const volume_geometry& vg = vol.geom;
  const float x0 = static_cast<float>(vg.origin_mm[0]);
  const float dx = static_cast<float>(vg.spacing_mm[0]);
  for (std::int64_t k = 0; k < vg.nz; ++k) {
    const float z = static_cast<float>(vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2]);
    for (std::int64_t j = 0; j < vg.ny; ++j) {
      const float y =
          static_cast<float>(vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1]);
      const float* src = vol.data.data() + (k * vg.ny + j) * vg.nx;
      for (std::int64_t i = 0; i < vg.nx; ++i) {
        const float x = x0 + static_cast<float>(i) * dx;
        const kernels::bp_point q = kernels::bp_point_of<W>(P, x, y, z);
        if (q.weight == 0.0f || src[i] == 0.0f) continue;
        kernels::splat_bilinear_border<double>(acc, cols, rows, q.col, q.row,
                                               static_cast<double>(q.weight) * src[i]);
      }
    }
  }
}

template <kernels::bp_weighting W>
void splat_view_curved(const volume_view& vol, const kernels::cyl_map& P, int cols, int rows,
                       double* acc) {
  const volume_geometry& vg = vol.geom;
  const float x0 = static_cast<float>(vg.origin_mm[0]);
  const float dx = static_cast<float>(vg.spacing_mm[0]);
  for (std::int64_t j = 0; j < vg.ny; ++j) {
    const float y = static_cast<float>(vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1]);
    for (std::int64_t i = 0; i < vg.nx; ++i) {
      const kernels::cyl_column c = kernels::cyl_column_of(P, x0 + static_cast<float>(i) * dx, y);
      for (std::int64_t k = 0; k < vg.nz; ++k) {
        const float z =
            static_cast<float>(vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2]);
        const float v = vol.data[static_cast<std::size_t>((k * vg.ny + j) * vg.nx + i)];
        const kernels::bp_point q = kernels::bp_point_cyl<W>(P, c, z);
        if (q.weight == 0.0f || v == 0.0f) continue;
        kernels::splat_bilinear_border<double>(acc, cols, rows, q.col, q.row,
                                               static_cast<double>(q.weight) * v);
      }
    }
  }
}

}  // namespace

namespace detail {

projection_stack splat_views(const volume_view& vol, const geometry& g, bool distance_weighting,
                             int threads) {
  CTFORGE_EXPECTS(g.rows < (std::int64_t{1} << 30) && g.cols < (std::int64_t{1} << 30),
                  "splat: detector too large");
  const std::vector<kernels::cyl_map> maps =
      g.curved() ? kernels::cylinder_maps(g) : std::vector<kernels::cyl_map>{};
  const std::vector<kernels::proj_matrix> mats =
      g.curved() ? std::vector<kernels::proj_matrix>{} : kernels::float_matrices(g);
  projection_stack out(g.view_count(), g.rows, g.cols);
  const int cols = static_cast<int>(g.cols), rows = static_cast<int>(g.rows);
  const std::int64_t pixels = g.rows * g.cols;
  const int nt = resolve_threads(threads);
  // View-parallel: each view's image belongs to one thread, which adds its voxels in a fixed
  // order: no atomics, the same floats for every thread count.
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(static_cast<std::size_t>(pixels));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t v = 0; v < out.views; ++v) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const auto s = static_cast<std::size_t>(v);
      if (g.curved()) {
        if (distance_weighting)
          splat_view_curved<kernels::bp_weighting::fdk>(vol, maps[s], cols, rows, acc.data());
        else
          splat_view_curved<kernels::bp_weighting::none>(vol, maps[s], cols, rows, acc.data());
      } else if (distance_weighting) {
        splat_view_flat<kernels::bp_weighting::fdk>(vol, mats[s], cols, rows, acc.data());
      } else {
        splat_view_flat<kernels::bp_weighting::none>(vol, mats[s], cols, rows, acc.data());
      }
      float* dst = out.view(v);
      for (std::int64_t p = 0; p < pixels; ++p)
        dst[p] = static_cast<float>(acc[static_cast<std::size_t>(p)]);
    }
  }
  return out;
}

}  // namespace detail

volume fbp_apply(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                 const recon_options& opt) {
  check_operator_options(g, opt, "fbp_apply");
  recon_options used = opt;
  used.where = backend::cpu;
  used.reference = false;
  return reconstruct(proj, g, vg, used);
}

namespace {

/// R_c^T of a circular geometry g.
projection_stack circular_adjoint(const volume_view& vol, const geometry& g,
                                  const recon_options& opt, int threads) {
  // The weights and padding reconstruct uses (make_fdk_setup reads only the shape of its
  // projections here: no value check).
  projection_stack out(g.view_count(), g.rows, g.cols);
  detail::fdk_setup setup = detail::make_fdk_setup(out, g, opt, /*check_values=*/false);
  const detail::narrow_side_padding pad = detail::narrow_side_padding_for(setup, g);
  geometry geo = g;
  if (pad.columns > 0) {
    geo = detail::pad_narrow_side(g, pad);
    const projection_stack shape(geo.view_count(), geo.rows, geo.cols);
    setup = detail::make_fdk_setup(shape, geo, opt, /*check_values=*/false, &setup);
  }
  // B_w^T, then F^T = F, then W^T = W.
  projection_stack q = detail::splat_views(vol, geo, setup.distance_weighting, threads);
  const detail::ramp_filter filter(geo.cols, setup.filter_pixel_mm, opt.filter, opt.cutoff,
                                   setup.filter_equiangular_rad);
  filter.apply(q, threads);
  detail::apply_preweights(setup, q, threads);
  if (pad.columns == 0) return q;
  // P^T: drop the narrow side's padding columns.
  const std::int64_t first = pad.prepend ? pad.columns : 0;
  for (std::int64_t v = 0; v < out.views; ++v)
    for (std::int64_t r = 0; r < out.rows; ++r)
      std::memcpy(out.view(v) + r * out.cols, q.view(v) + r * q.cols + first,
                  static_cast<std::size_t>(out.cols) * sizeof(float));
  return out;
}

}  // namespace

projection_stack fbp_adjoint(const volume_view& vol, const geometry& g, const recon_options& opt) {
  const char* fn = "fbp_adjoint";
  check_operator_options(g, opt, fn);
  g.validate();
  vol.geom.validate();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(vol.data.size()) == vol.geom.voxel_count(),
                  fmt::format("{}: volume holds {} values for {} voxels", fn, vol.data.size(),
                              vol.geom.voxel_count()));
  const int threads = detail::resolve_threads(opt.threads);
  const std::string bad = detail::first_non_finite_voxel(vol.data.data(), vol.geom, threads);
  CTFORGE_EXPECTS(bad.empty(), fmt::format("{}: the volume holds a non-finite value {}", fn, bad));
  if (g.orbit) return circular_adjoint(vol, g, opt, threads);
  // A vector geometry: reconstruct computes R_c S (S: resampling onto the virtual detectors
  // of its circular equivalent, or nothing when those are the real ones); R^T = S^T R_c^T.
  const detail::circular_equivalent eq =
      detail::make_circular_equivalent(g, opt.algo == algorithm::fdk ? "fdk" : "fbp");
  projection_stack q =
      circular_adjoint(vol, eq.geom, detail::options_on_virtual_detector(eq, opt), threads);
  return eq.needs_resampling ? detail::resample_adjoint(eq, q, threads) : q;
}

}  // namespace ctforge

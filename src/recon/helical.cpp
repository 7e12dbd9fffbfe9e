// Helical weighted FBP: the set-up and the CPU path (math/helical.hpp has the method).
#include "recon/helical.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/parallel_copy.hpp"
#include "core/projection_checks.hpp"
#include "ctforge/backend.hpp"
#include "ctforge/error.hpp"
#include "math/backproject.hpp"
#include "recon/filter.hpp"

#if defined(CTFORGE_WITH_CUDA)
#include "cuda/cuda_api.hpp"
#endif

namespace ctforge::detail {

namespace {

constexpr double k_pi = 3.14159265358979323846;

void report(const recon_options& opt, double f) {
  if (opt.progress) opt.progress(std::clamp(f, 0.0, 1.0));
  opt.cancel.throw_if_requested();
}

// A step between views more than 5 times the median step is a gap: the lines that only those
// missing views measured are not measured at all.
void check_gaps(const helical_orbit& h) {
  const std::vector<double>& a = h.angles_rad;
  if (a.size() < 3) return;
  std::vector<double> steps;
  for (std::size_t i = 1; i < a.size(); ++i) steps.push_back(std::abs(a[i] - a[i - 1]));
  std::vector<double> sorted = steps;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2),
                   sorted.end());
  const double median = sorted[sorted.size() / 2];
  for (std::size_t i = 0; i < steps.size(); ++i)
    CTFORGE_EXPECTS(
        steps[i] <= 5 * median,
        fmt::format("helical-fbp: the helix has a gap of {:.3g} deg between views {} "
                    "and {} ({:.1f} times its median step of {:.3g} deg): the lines "
                    "only the missing views would measure are not measured (an "
                    "iterative method, e.g. --algorithm sirt, takes such scans)",
                    steps[i] * 180 / k_pi, i, i + 1, steps[i] / median, median * 180 / k_pi));
}

void check_input(const projection_view& proj, const geometry& g, const recon_options& opt) {
  CTFORGE_EXPECTS(g.helix.has_value(),
                  fmt::format("helical-fbp: needs a 'helical' geometry, got '{}' (other "
                              "trajectories: an iterative method, e.g. --algorithm sirt)",
                              g.type_name()));
  CTFORGE_EXPECTS(g.rows >= 2, "helical-fbp: needs at least 2 detector rows (got 1)");
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols &&
                      static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  fmt::format("helical-fbp: projections are {}x{}x{} (views x rows x cols) but the "
                              "geometry describes {}x{}x{}",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(std::isfinite(opt.helical_q) && opt.helical_q >= 0 && opt.helical_q < 1,
                  fmt::format("--helical-q: must be in [0, 1) (got {})", opt.helical_q));
  CTFORGE_EXPECTS(
      std::isfinite(opt.cutoff) && opt.cutoff > 0 && opt.cutoff <= 1,
      fmt::format("--cutoff: must be in (0, 1] (a fraction of Nyquist; got {})", opt.cutoff));
  CTFORGE_EXPECTS(!opt.reference, "--reference: there is no reference path for helical-fbp");
  check_gaps(*g.helix);
  const helical_coverage c = helical_coverage_of(g);
  const helical_orbit& h = *g.helix;
  const double seen = 2 * k_pi * static_cast<double>(g.rows - 1) * std::abs(g.pixel_v_mm) *
                      h.source_to_isocenter_mm / h.source_to_detector_mm /
                      std::max(std::abs(h.pitch_mm_per_turn), 1e-300);
  CTFORGE_EXPECTS(seen >= k_pi,
                  fmt::format("helical-fbp: pitch factor {:.3g} ({:g} mm per turn) is too large "
                              "for {} rows of {:g} mm: a point on the axis stays on the rows for "
                              "{:.0f} deg of rotation, less than the 180 deg a reconstruction "
                              "needs (at most pitch factor {:.3g})",
                              c.pitch_factor, h.pitch_mm_per_turn, g.rows, g.pixel_v_mm,
                              seen * 180 / k_pi, c.pitch_factor * seen / k_pi));
}

// Fractional index of angle b in the monotonic list a (increasing or decreasing): i + frac
// with a[i] <= b <= a[i + 1] along the scan; -1 outside the scan.
double fractional_view(const std::vector<double>& a, double b) {
  const std::size_t n = a.size();
  const double s = a.back() >= a.front() ? 1.0 : -1.0;
  const double x = s * b;
  if (x < s * a.front() || x > s * a.back()) return -1;
  std::size_t lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    (s * a[mid] <= x ? lo : hi) = mid;
  }
  if (hi == lo) return static_cast<double>(lo);
  return static_cast<double>(lo) + (x - s * a[lo]) / (s * a[hi] - s * a[lo]);
}

kernels::helical_params params_of(const geometry& g, const recon_options& opt) {
  const helical_orbit& h = *g.helix;
  kernels::helical_params p{};
  const double sid = h.source_to_isocenter_mm, sdd = h.source_to_detector_mm;
  const double s = h.angles_rad.back() >= h.angles_rad.front() ? 1.0 : -1.0;
  p.sid = static_cast<float>(sid);
  p.sdd = static_cast<float>(sdd);
  p.kappa = static_cast<float>(h.pitch_mm_per_turn * s / (2 * k_pi));
  p.half_h = static_cast<float>(0.5 * static_cast<double>(g.rows - 1) * std::abs(g.pixel_v_mm));
  p.offset_v = static_cast<float>(h.offset_v_mm);
  p.dv = static_cast<float>(g.pixel_v_mm);
  p.r0 = static_cast<float>(0.5 * static_cast<double>(g.rows - 1));
  p.q = static_cast<float>(opt.helical_q);
  p.du = static_cast<float>(g.pixel_u_mm);
  p.c0 = static_cast<float>(0.5 * static_cast<double>(g.cols - 1));
  p.offset_u = static_cast<float>(h.offset_u_mm);
  p.curved = g.curved() ? 1 : 0;
  // Rebinned columns: the pitch of the fan's centre at the axis, over the t the fan covers.
  p.dt = static_cast<float>(std::abs(g.pixel_u_mm) * sid / sdd);
  return p;
}

// t (mm) of the fan ray through fan column c.
double t_of_column(const geometry& g, double c) {
  const helical_orbit& h = *g.helix;
  const double sdd = h.source_to_detector_mm;
  const double u = (c - 0.5 * static_cast<double>(g.cols - 1)) * g.pixel_u_mm + h.offset_u_mm;
  const double gamma = g.curved() ? u / sdd : std::atan(u / sdd);
  return h.source_to_isocenter_mm * std::sin(gamma);
}

// Parallel views [first, last) whose rays reach the grid's heights: the source within the
// rows' reach of [z_min, z_max] (the rows' height at the detector times the largest depth
// ratio (R + r) / SDD, plus the source's travel over the grid's largest fan angle).
std::pair<std::int64_t, std::int64_t> views_reaching(const geometry& g, const volume_geometry& vg) {
  const helical_orbit& h = *g.helix;
  double r_max = 0;
  for (double x :
       {vg.origin_mm[0], vg.origin_mm[0] + static_cast<double>(vg.nx - 1) * vg.spacing_mm[0]})
    for (double y :
         {vg.origin_mm[1], vg.origin_mm[1] + static_cast<double>(vg.ny - 1) * vg.spacing_mm[1]})
      r_max = std::max(r_max, std::hypot(x, y));
  const double sid = h.source_to_isocenter_mm;
  const double half_h = 0.5 * static_cast<double>(g.rows - 1) * std::abs(g.pixel_v_mm);
  // The rays through a voxel at distance r from the axis come from sources at most
  // asin(r / R) of rotation from the parallel view's angle.
  const double kappa = std::abs(h.pitch_mm_per_turn) / (2 * k_pi);
  const double reach =
      (sid + r_max) / h.source_to_detector_mm * (std::abs(h.offset_v_mm) + half_h) +
      kappa * std::asin(std::min(1.0, r_max / sid)) + 1e-3;
  const double z_lo = vg.origin_mm[2] - reach;
  const double z_hi = vg.origin_mm[2] + static_cast<double>(vg.nz - 1) * vg.spacing_mm[2] + reach;
  std::int64_t first = g.view_count(), last = 0;
  for (std::int64_t j = 0; j < g.view_count(); ++j) {
    const double z = h.z_at(h.angles_rad[static_cast<std::size_t>(j)]);
    if (z < z_lo || z > z_hi) continue;
    first = std::min(first, j);
    last = j + 1;
  }
  if (last <= first) return {0, 0};
  return {first, last};
}

}  // namespace

helical_setup make_helical_setup(const projection_view& proj, const geometry& g,
                                 const volume_geometry& vg, const recon_options& opt) {
  check_input(proj, g, opt);
  helical_setup s;
  s.params = params_of(g, opt);
  const helical_orbit& h = *g.helix;
  const std::vector<double>& a = h.angles_rad;
  const double t_a = t_of_column(g, 0), t_b = t_of_column(g, static_cast<double>(g.cols - 1));
  const double dt = s.params.dt;
  const double t_min = std::min(t_a, t_b), t_max = std::max(t_a, t_b);
  s.cols_t = static_cast<std::int64_t>(std::ceil((t_max - t_min) / dt - 1e-9)) + 1;
  s.params.tc0 = static_cast<float>(-t_min / dt);
  const std::int64_t n = g.view_count();
  const double lo = std::min(a.front(), a.back()), hi = std::max(a.front(), a.back());
  s.views.resize(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) {
    const double t = a[static_cast<std::size_t>(j)];
    const std::size_t jp = static_cast<std::size_t>(std::min(j + 1, n - 1));
    const std::size_t jm = static_cast<std::size_t>(std::max<std::int64_t>(j - 1, 0));
    const double spacing = n > 1 ? std::abs(a[jp] - a[jm]) / static_cast<double>(jp - jm) : k_pi;
    s.views[static_cast<std::size_t>(j)] = {
        static_cast<float>(std::cos(t)), static_cast<float>(std::sin(t)),
        static_cast<float>(h.z_at(t)),   static_cast<float>(lo - t),
        static_cast<float>(hi - t),      static_cast<float>(spacing)};
  }
  s.taps.resize(static_cast<std::size_t>(n * s.cols_t));
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t c = 0; c < s.cols_t; ++c) {
      const double t = (static_cast<double>(c) - s.params.tc0) * dt;
      const kernels::fan_ray r = kernels::fan_ray_of(s.params, static_cast<float>(t));
      kernels::rebin_tap& tap = s.taps[static_cast<std::size_t>(j * s.cols_t + c)];
      tap = {-1, 0.0f, r.col, r.u};
      if (!r.inside) continue;
      const double f = fractional_view(
          a, a[static_cast<std::size_t>(j)] + std::asin(t / h.source_to_isocenter_mm));
      if (f < 0) continue;
      const double i0 =
          std::min(std::floor(f), static_cast<double>(std::max<std::int64_t>(n - 2, 0)));
      tap.view = static_cast<std::int32_t>(i0);
      tap.a = static_cast<float>(f - i0);
    }
  std::tie(s.view_lo, s.view_hi) = views_reaching(g, vg);
  return s;
}

std::pair<std::int64_t, std::int64_t> helical_unit_views(const geometry& g,
                                                         const volume_geometry& vg) {
  CTFORGE_EXPECTS(g.helix.has_value(), "helical_unit_views: not a helical geometry");
  const auto [first, last] = views_reaching(g, vg);
  if (last <= first) return {0, std::min<std::int64_t>(g.view_count(), 2)};
  return {std::max<std::int64_t>(0, first - 2), std::min(g.view_count(), last + 2)};
}

void rebin_views(const projection_view& proj, const helical_setup& s, std::int64_t v0,
                 std::int64_t v1, float* out, int threads) {
  const std::int64_t rows = proj.rows, cols = proj.cols, ct = s.cols_t;
  const kernels::helical_params& P = s.params;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t jr = 0; jr < (v1 - v0) * rows; ++jr) {
    const std::int64_t j = v0 + jr / rows, r = jr % rows;
    const float v = (static_cast<float>(r) - P.r0) * P.dv + P.offset_v;
    float* dst = out + ((j - v0) * rows + r) * ct;
    for (std::int64_t c = 0; c < ct; ++c)
      dst[c] = kernels::rebinned_value(P, s.taps[static_cast<std::size_t>(j * ct + c)],
                                       proj.data.data(), 0, rows, cols, r, v);
  }
}

namespace {

// Back-projects the filtered parallel views [v0, v1) (stored from `data`) into the voxel
// columns of grid rows y in [y0, y1).
void backproject_rows(const float* data, std::int64_t v0, std::int64_t v1, std::int64_t rows,
                      const helical_setup& s, const volume_geometry& vg, std::int64_t y0,
                      std::int64_t y1, float* out, int threads) {
  const std::int64_t nx = vg.nx, nz = vg.nz, ct = s.cols_t;
  const kernels::helical_params& P = s.params;
  const float oz = static_cast<float>(vg.origin_mm[2]), sz = static_cast<float>(vg.spacing_mm[2]);
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> acc(static_cast<std::size_t>(nz));
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t col = y0 * nx; col < y1 * nx; ++col) {
      const std::int64_t iy = col / nx, ix = col % nx;
      const float x =
          static_cast<float>(vg.origin_mm[0] + static_cast<double>(ix) * vg.spacing_mm[0]);
      const float y =
          static_cast<float>(vg.origin_mm[1] + static_cast<double>(iy) * vg.spacing_mm[1]);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int64_t j = v0; j < v1; ++j) {
        const kernels::helical_view& V = s.views[static_cast<std::size_t>(j)];
        const kernels::helical_ray ray = kernels::helical_ray_of(P, V, x, y);
        if (!ray.valid) continue;
        const kernels::z_range zr = kernels::helical_z_range(ray);
        const std::int64_t k0 =
            std::max<std::int64_t>(0, static_cast<std::int64_t>(std::ceil((zr.lo - oz) / sz)));
        const std::int64_t k1 = std::min<std::int64_t>(
            nz - 1, static_cast<std::int64_t>(std::floor((zr.hi - oz) / sz)));
        const float* img = data + (j - v0) * rows * ct;
        for (std::int64_t k = k0; k <= k1; ++k)
          acc[static_cast<std::size_t>(k)] += kernels::helical_contribution(
              P, V, ray, oz + static_cast<float>(k) * sz, img, static_cast<int>(ct),
              static_cast<int>(rows), static_cast<int>(ct));
      }
      for (std::int64_t k = 0; k < nz; ++k)
        out[(k * vg.ny + iy) * nx + ix] += acc[static_cast<std::size_t>(k)];
    }
  }
}

}  // namespace

volume helical_reconstruct_cpu(const projection_view& proj, const geometry& g,
                               const volume_geometry& vg, const recon_options& opt,
                               const helical_setup& s) {
  (void)g;
  const int threads = resolve_threads(opt.threads);
  report(opt, 0.0);
  volume out(vg);
  const std::int64_t rows = proj.rows, ct = s.cols_t;
  const ramp_filter filter(ct, s.params.dt, opt.filter, opt.cutoff);
  // Views in batches (bounded memory for the rebinned copy: about 64 MiB at a time).
  const std::int64_t per_view = rows * ct;
  const std::int64_t batch = std::max<std::int64_t>(1, (std::int64_t{16} << 20) / per_view);
  std::vector<float> work(static_cast<std::size_t>(
      std::min(batch, std::max<std::int64_t>(s.view_hi - s.view_lo, 1)) * per_view));
  const std::int64_t total = std::max<std::int64_t>(s.view_hi - s.view_lo, 1);
  for (std::int64_t v0 = s.view_lo; v0 < s.view_hi; v0 += batch) {
    const std::int64_t v1 = std::min(v0 + batch, s.view_hi);
    rebin_views(proj, s, v0, v1, work.data(), threads);
    filter.apply(work.data(), (v1 - v0) * rows, threads);
    const std::int64_t step = std::max<std::int64_t>(1, vg.ny / 8);
    for (std::int64_t y0 = 0; y0 < vg.ny; y0 += step) {
      backproject_rows(work.data(), v0, v1, rows, s, vg, y0, std::min(y0 + step, vg.ny),
                       out.data.data(), threads);
      report(opt, (static_cast<double>(v0 - s.view_lo) +
                   static_cast<double>(v1 - v0) * static_cast<double>(std::min(y0 + step, vg.ny)) /
                       static_cast<double>(vg.ny)) /
                      static_cast<double>(total));
    }
  }
  return out;
}

volume helical_reconstruct(const projection_view& proj, const geometry& g,
                           const volume_geometry& vg, const recon_options& opt) {
  vg.validate();
  require_host(proj, "helical-fbp");
  const helical_setup s = make_helical_setup(proj, g, vg, opt);
  check_finite_values(proj, opt.threads);
  if (resolve_backend(opt.where, nullptr, opt.device) == backend::cuda) {
#if defined(CTFORGE_WITH_CUDA)
    helical_job job;
    job.params = s.params;
    job.views = s.views;
    job.taps = s.taps;
    job.cols_t = s.cols_t;
    job.view_lo = s.view_lo;
    job.view_hi = s.view_hi;
    job.padded_len = static_cast<int>(padded_length(s.cols_t));
    job.response = ramp_response(job.padded_len, s.params.dt, opt.filter, opt.cutoff);
    return cuda_helical_reconstruct(proj, vg, job, opt);
#endif
  }
  return helical_reconstruct_cpu(proj, g, vg, opt, s);
}

}  // namespace ctforge::detail

#include "recon/fdk_setup.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "recon/filter.hpp"

namespace ctforge::detail {
namespace {

constexpr double k_pi = std::numbers::pi;

const char* algo_name(algorithm a) {
  return a == algorithm::fdk ? "fdk" : "fbp";
}

void check_geometry_for(const geometry& g, algorithm algo) {
  const std::string name = algo_name(algo);
  if (algo == algorithm::fdk) {
    CTFORGE_EXPECTS(g.beam == beam_kind::cone && g.orbit.has_value(),
                    fmt::format("{}: needs a circular 'cone' geometry (rows = 1 for fan beam), got "
                                "'{}'{}",
                                name, g.type_name(),
                                g.beam == beam_kind::parallel ? " (use --algorithm fbp)" : ""));
  } else {
    CTFORGE_EXPECTS(
        g.beam == beam_kind::parallel && g.orbit.has_value(),
        fmt::format("{}: needs a circular 'parallel' geometry, got '{}'{}", name, g.type_name(),
                    g.beam == beam_kind::cone ? " (use --algorithm fdk)" : ""));
  }
}

// The displaced-detector weighting of circular geometry `g` (s.displaced, wide_sign,
// overlap_mm, transition_mm) under opt.displaced_detector / opt.offset_transition_px.
void set_displacement(fdk_setup& s, const geometry& g, const recon_options& opt,
                      const std::string& name) {
  CTFORGE_EXPECTS(std::isfinite(opt.offset_transition_px) && opt.offset_transition_px >= 1,
                  fmt::format("--offset-transition: must be >= 1 (detector pixels; got {})",
                              opt.offset_transition_px));
  const circular_orbit& o = *g.orbit;
  const std::int64_t n = g.view_count();
  const double du_abs = std::abs(g.pixel_u_mm);
  const double c0 = 0.5 * static_cast<double>(g.cols - 1);
  const double asym = mean_detector_asymmetry_mm(g);
  s.wide_sign = asym >= 0 ? 1.0 : -1.0;
  switch (opt.displaced_detector) {
    case displaced_detector_mode::automatic:
      s.displaced = std::abs(asym) > du_abs;
      break;
    case displaced_detector_mode::on:
      s.displaced = true;
      break;
    case displaced_detector_mode::off:
      s.displaced = false;
      break;
  }
  if (!s.displaced) return;
  double m = std::numeric_limits<double>::infinity();
  std::int64_t worst = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double narrow =
        s.wide_sign > 0 ? c0 * du_abs - o.offset_u_mm[k] : c0 * du_abs + o.offset_u_mm[k];
    if (narrow < m) {
      m = narrow;
      worst = i;
    }
  }
  const auto k = static_cast<std::size_t>(worst);
  CTFORGE_EXPECTS(
      m >= du_abs,
      fmt::format("{}: the detector offset leaves no overlap for displaced-detector "
                  "weighting: on view {} the detector covers {:.3f} .. {:.3f} mm about the "
                  "ray through the rotation axis (offset {:.3f} mm, {} pixels of {:.4g} mm), "
                  "so its narrow side reaches {:.3f} mm, less than one pixel; a half-fan "
                  "scan needs the central ray at least one pixel inside the detector",
                  name, worst, -c0 * du_abs + o.offset_u_mm[k], c0 * du_abs + o.offset_u_mm[k],
                  o.offset_u_mm[k], g.cols, du_abs, m));
  s.overlap_mm = m;
  s.transition_mm = std::min(opt.offset_transition_px * du_abs, 2 * m);
}

}  // namespace

double mean_detector_asymmetry_mm(const geometry& g) {
  CTFORGE_EXPECTS(g.orbit.has_value(), "mean_detector_asymmetry_mm: needs a circular orbit");
  const circular_orbit& o = *g.orbit;
  const double c0 = 0.5 * static_cast<double>(g.cols - 1), du_abs = std::abs(g.pixel_u_mm);
  const std::int64_t n = g.view_count();
  double asym = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double off = o.offset_u_mm[static_cast<std::size_t>(i)];
    asym += (-c0 * du_abs + off) + (c0 * du_abs + off);
  }
  return n > 0 ? asym / static_cast<double>(n) : 0.0;
}

std::string displaced_short_scan_warning(const geometry& g, const recon_options& opt) {
  CTFORGE_EXPECTS(g.orbit.has_value(), "displaced_short_scan_warning: needs a circular orbit");
  const circular_orbit& o = *g.orbit;
  const std::vector<double>& a = o.angles_rad;
  if (a.size() < 2) return {};  // one view: taken as a full scan sampled once
  // The covered arc as make_fdk_setup counts it: |last - first| + the mean step.
  const double span = std::abs(a.back() - a.front());
  const double range = span + span / static_cast<double>(a.size() - 1);
  if (range >= 2 * k_pi * (1 - 1e-3)) return {};
  fdk_setup s;
  set_displacement(s, g, opt, algo_name(opt.algo));
  if (!s.displaced) return {};
  // The wide side's reach about the ray through the axis on the view where it is shortest.
  const double du_abs = std::abs(g.pixel_u_mm);
  const double c0 = 0.5 * static_cast<double>(g.cols - 1);
  double wide = std::numeric_limits<double>::infinity();
  for (double off : o.offset_u_mm) wide = std::min(wide, c0 * du_abs + s.wide_sign * off);
  if (wide - s.overlap_mm < du_abs) return {};  // no ring beyond the overlap (forced "on")
  // Distance from the axis (mm) of the ray that meets the detector x mm from the central ray.
  const bool cone = g.beam == beam_kind::cone;
  const double sid = o.source_to_isocenter_mm, sdd = o.source_to_detector_mm;
  const auto at_axis = [&](double x) {
    if (!cone) return x;
    return sid * std::sin(g.curved() ? x / sdd : std::atan(x / sdd));
  };
  const double inner = at_axis(s.overlap_mm), outer = at_axis(wide);
  return fmt::format(
      "the detector is displaced by {:.2f} mm and the scan covers {:.1f} deg, less than the "
      "full turn displaced-detector weighting needs: voxels farther than {:.1f} mm from the "
      "rotation axis (out to the field's edge at {:.1f} mm) are seen from the wide side of the "
      "detector only, which measures each line passing more than {:.1f} mm from the axis once "
      "per turn; this scan measures {:.0f}% of those lines, so that ring is reconstructed from "
      "incomplete data (streaks, wrong values). The reconstruction within {:.1f} mm of the axis "
      "is complete; acquire a full turn (360 deg) for the rest",
      0.5 * std::abs(mean_detector_asymmetry_mm(g)), rad_to_deg(range), inner, outer, inner,
      100 * range / (2 * k_pi), inner);
}

fdk_setup make_fdk_setup(const projection_view& proj, const geometry& g, const recon_options& opt,
                         bool check_values, const fdk_setup* displacement_from) {
  const std::string name = algo_name(opt.algo);
  check_geometry_for(g, opt.algo);
  g.validate();
  CTFORGE_EXPECTS(
      proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
      fmt::format("{}: projections are {}x{}x{} (views x rows x cols) but the geometry "
                  "describes {}x{}x{}",
                  name, proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  fmt::format("{}: projection data holds {} values, expected {}", name,
                              proj.data.size(), proj.size()));
  CTFORGE_EXPECTS(
      std::isfinite(opt.cutoff) && opt.cutoff > 0 && opt.cutoff <= 1,
      fmt::format("--cutoff: must be in (0, 1] (a fraction of Nyquist; got {})", opt.cutoff));
  CTFORGE_EXPECTS(g.cols < (std::int64_t{1} << 30) && g.rows < (std::int64_t{1} << 30),
                  fmt::format("{}: detector of {}x{} pixels is too large", name, g.cols, g.rows));
  if (check_values) check_finite_values(proj, opt.threads);

  const circular_orbit& o = *g.orbit;
  const bool cone = g.beam == beam_kind::cone;
  const std::int64_t n = g.view_count();
  const double sid = o.source_to_isocenter_mm, sdd = o.source_to_detector_mm;

  fdk_setup s;
  s.distance_weighting = cone;
  s.filter_pixel_mm = std::abs(cone ? g.pixel_u_mm * sid / sdd : g.pixel_u_mm);

  // --- angles: direction, covered arc, per-view angular weights -------------------------------
  const std::vector<double>& a = o.angles_rad;
  std::vector<double> beta(static_cast<std::size_t>(n), 0.0),
      dbeta(static_cast<std::size_t>(n), 0.0);
  double sign = 1;
  if (n == 1) {
    s.scan_range_rad = 2 * k_pi;
    dbeta[0] = 2 * k_pi;
  } else {
    sign = a[static_cast<std::size_t>(n - 1)] >= a[0] ? 1.0 : -1.0;
    for (std::int64_t i = 0; i + 1 < n; ++i) {
      const double step =
          sign * (a[static_cast<std::size_t>(i + 1)] - a[static_cast<std::size_t>(i)]);
      CTFORGE_EXPECTS(step > 0,
                      fmt::format("{}: geometry field 'angles_deg' must be strictly increasing or "
                                  "strictly decreasing (views {} and {}: {} deg, {} deg)",
                                  name, i, i + 1, rad_to_deg(a[static_cast<std::size_t>(i)]),
                                  rad_to_deg(a[static_cast<std::size_t>(i + 1)])));
    }
    const double span = sign * (a[static_cast<std::size_t>(n - 1)] - a[0]);
    const double mean_step = span / static_cast<double>(n - 1);
    s.scan_range_rad = span + mean_step;
    for (std::int64_t i = 0; i < n; ++i)
      beta[static_cast<std::size_t>(i)] =
          sign * (a[static_cast<std::size_t>(i)] - a[0]) + 0.5 * mean_step;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double lo = i > 0 ? beta[k] - beta[k - 1] : mean_step;
      const double hi = i + 1 < n ? beta[k + 1] - beta[k] : mean_step;
      dbeta[k] = 0.5 * (lo + hi);
    }
  }

  // --- fan angle (pixel centres of the outer columns, offsets included) -----------------------
  double fan = 0;
  if (cone) {
    const double c0 = 0.5 * static_cast<double>(g.cols - 1);
    for (std::int64_t i = 0; i < n; ++i) {
      const double off = o.offset_u_mm[static_cast<std::size_t>(i)];
      const double a_lo = -c0 * g.pixel_u_mm + off, a_hi = c0 * g.pixel_u_mm + off;
      // Curved detectors: a is an arc length, the fan angle a / SDD.
      const double g_lo = g.curved() ? a_lo / sdd : std::atan(a_lo / sdd);
      const double g_hi = g.curved() ? a_hi / sdd : std::atan(a_hi / sdd);
      fan = std::max({fan, std::abs(g_lo), std::abs(g_hi)});
    }
  }
  s.fan_half_angle_rad = fan;

  s.full_scan = s.scan_range_rad >= 2 * k_pi * (1 - 1e-3);
  double delta = -1;
  if (!s.full_scan) {
    delta = 0.5 * (s.scan_range_rad - k_pi);
    // Angles come from files in degrees with a few decimals: allow 1e-4 rad (0.006 deg) slack.
    constexpr double tol = 1e-4;
    if (cone) {
      CTFORGE_EXPECTS(
          delta >= fan - tol,
          fmt::format("{}: the scan covers {:.3f} deg, less than the 180 deg + fan angle "
                      "({:.3f} deg, from the detector width and offsets) = {:.3f} deg a "
                      "short scan needs; acquire a longer arc",
                      name, rad_to_deg(s.scan_range_rad), rad_to_deg(2 * fan),
                      rad_to_deg(k_pi + 2 * fan)));
    } else {
      CTFORGE_EXPECTS(
          delta >= -tol,
          fmt::format("{}: the scan covers {:.3f} deg; parallel-beam FBP needs at least "
                      "180 deg",
                      name, rad_to_deg(s.scan_range_rad)));
    }
    delta = std::max(delta, fan);
  }

  // --- displaced (half-fan) detector ---------------------------------------------------------
  // Extent of the pixel centres along u_hat (mm) about the principal point, per view. The
  // detector is displaced when it extends more than one pixel further to one side than to the
  // other (on average over the views), or when opt.displaced_detector says so; the overlap both
  // sides cover on every view is then weighted by kernels::displaced_redundancy.
  if (displacement_from != nullptr) {
    s.displaced = displacement_from->displaced;
    s.wide_sign = displacement_from->wide_sign;
    s.overlap_mm = displacement_from->overlap_mm;
    s.transition_mm = displacement_from->transition_mm;
  } else {
    set_displacement(s, g, opt, name);
  }
  // --- constants --------------------------------------------------------------------------------
  kernels::preweight_params& p = s.params;
  p.cols = static_cast<int>(g.cols);
  p.rows = static_cast<int>(g.rows);
  p.du = static_cast<float>(g.pixel_u_mm);
  p.dv = static_cast<float>(g.pixel_v_mm);
  p.sdd = cone ? static_cast<float>(sdd) : 0.0f;
  p.c0 = static_cast<float>(0.5 * static_cast<double>(g.cols - 1));
  p.r0 = static_cast<float>(0.5 * static_cast<double>(g.rows - 1));
  p.parker_delta = static_cast<float>(delta);
  p.gamma_sign = static_cast<float>(sign);
  p.overlap_mm = s.displaced ? static_cast<float>(s.overlap_mm) : 0.0f;
  p.transition_mm = s.displaced ? static_cast<float>(s.transition_mm) : 0.0f;
  p.wide_sign = static_cast<float>(s.wide_sign);
  p.scan_range = static_cast<float>(s.scan_range_rad);
  p.curved = g.curved() ? 1 : 0;
  if (g.curved()) s.filter_equiangular_rad = std::abs(g.pixel_u_mm) / sdd;

  // Full scans measure every line twice: 1/2 each, unless the displaced-detector weights share
  // the line between its two measurements.
  const double redundancy = s.full_scan && !s.displaced ? 0.5 : 1.0;
  const double mag2 = cone ? (sid / sdd) * (sid / sdd) : 1.0;
  s.views.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    kernels::preweight_view& v = s.views[k];
    v.beta = static_cast<float>(beta[k]);
    v.offset_u = static_cast<float>(o.offset_u_mm[k]);
    v.offset_v = static_cast<float>(o.offset_v_mm[k]);
    v.scale = static_cast<float>(dbeta[k] * redundancy * mag2);
  }
  return s;
}

narrow_side_padding narrow_side_padding_for(const fdk_setup& s, const geometry& g) {
  narrow_side_padding pad;
  if (!s.displaced || !g.orbit) return pad;
  const double du = g.pixel_u_mm, du_abs = std::abs(du);
  const double c0 = 0.5 * static_cast<double>(g.cols - 1);
  double missing = 0;  // mm the narrow side falls short of the wide side, worst view
  for (double off : g.orbit->offset_u_mm) {
    const double lo = -c0 * du_abs + off, hi = c0 * du_abs + off;
    missing = std::max(missing, s.wide_sign > 0 ? hi + lo : -(hi + lo));
  }
  pad.columns = static_cast<std::int64_t>(std::ceil(missing / du_abs - 1e-6));
  // Column index grows along +u_hat when du > 0: the narrow side (-wide_sign u_hat) is then
  // at the low indices for a wide side along +u_hat.
  pad.prepend = (du > 0) == (s.wide_sign > 0);
  return pad;
}

std::optional<padded_fdk_input> pad_for_displaced_detector(const projection_view& data,
                                                           const geometry& g,
                                                           const fdk_setup& setup,
                                                           const recon_options& opt) {
  const narrow_side_padding pad = narrow_side_padding_for(setup, g);
  if (pad.columns == 0) return std::nullopt;
  CTFORGE_EXPECTS(data.space != memory_space::cuda_device,
                  "projections in GPU memory: a displaced (half-fan) detector is padded on the "
                  "host; pass host projections");
  padded_fdk_input out{pad_narrow_side(g, pad), pad_narrow_side(data, pad, opt.threads), {}};
  out.setup = make_fdk_setup(out.proj, out.geo, opt, /*check_values=*/false, &setup);
  return out;
}

geometry pad_narrow_side(const geometry& g, const narrow_side_padding& pad) {
  geometry out = g;
  if (pad.columns <= 0) return out;
  out.cols = g.cols + pad.columns;
  const double half = 0.5 * static_cast<double>(pad.columns);
  const double sign = pad.prepend ? -1.0 : 1.0;
  for (auto& w : out.views) w.detector_center = w.detector_center + sign * half * w.u;
  if (out.orbit)
    for (double& off : out.orbit->offset_u_mm) off += sign * half * g.pixel_u_mm;
  if (out.curved()) {
    // A curved detector's centre moves along the arc: rebuild its views from the orbit.
    const circular_orbit& o = *out.orbit;
    return make_cone_geometry(out.cols, out.rows, out.pixel_u_mm, out.pixel_v_mm,
                              o.source_to_isocenter_mm, o.source_to_detector_mm, o.angles_rad,
                              o.offset_u_mm, o.offset_v_mm, out.shape);
  }
  out.validate();
  return out;
}

projection_stack pad_narrow_side(const projection_view& p, const narrow_side_padding& pad,
                                 int threads) {
  require_host(p, "padding projections");
  if (pad.columns <= 0) return to_stack(p);
  projection_stack out(p.views, p.rows, p.cols + pad.columns);
  const std::int64_t first = pad.prepend ? pad.columns : 0;
  const int nt = resolve_threads(threads);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < p.rows; ++r)
      std::copy_n(p.data.data() + (v * p.rows + r) * p.cols, p.cols,
                  out.data.data() + (v * out.rows + r) * out.cols + first);
  return out;
}

void validate_recon_input(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                          const recon_options& opt) {
  vg.validate();
  (void)make_fdk_setup(proj, g, opt);
}

void apply_preweights(const fdk_setup& s, projection_stack& proj, int threads) {
  CTFORGE_EXPECTS(proj.cols == s.params.cols && proj.rows == s.params.rows &&
                      proj.views == static_cast<std::int64_t>(s.views.size()),
                  "apply_preweights: projection shape differs from the setup");
  const int nt = resolve_threads(threads);
  const std::int64_t rows = proj.rows, cols = proj.cols;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t v = 0; v < proj.views; ++v) {
    const kernels::preweight_view pv = s.views[static_cast<std::size_t>(v)];
    float* img = proj.view(v);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        img[r * cols + c] *=
            kernels::preweight(s.params, pv, static_cast<int>(c), static_cast<int>(r));
  }
}

fdk_job make_fdk_job(const projection_view& proj, const geometry& g, const recon_options& opt,
                     const fdk_setup* setup) {
  fdk_setup made;
  if (setup != nullptr) {
    CTFORGE_EXPECTS(setup->params.cols == proj.cols && setup->params.rows == proj.rows &&
                        static_cast<std::int64_t>(setup->views.size()) == proj.views,
                    "cuda_reconstruct: the pre-weight setup does not match the projections");
  } else {
    made = make_fdk_setup(proj, g, opt, /*check_values=*/false);  // checked on the device
    setup = &made;
  }
  fdk_job job;
  job.params = setup->params;
  job.views = setup->views;
  job.padded_len = static_cast<int>(padded_length(proj.cols));
  job.response = ramp_response(job.padded_len, setup->filter_pixel_mm, opt.filter, opt.cutoff,
                               setup->filter_equiangular_rad);
  job.distance_weighting = setup->distance_weighting;
  return job;
}

#if defined(CTFORGE_WITH_CUDA)
volume cuda_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, const cuda_options& copt, const fdk_setup* setup,
                        device_array* device_out) {
  vg.validate();
  return cuda_reconstruct(proj, g, vg, make_fdk_job(proj, g, opt, setup), opt, copt, device_out);
}
#endif

}  // namespace ctforge::detail

// Stitching a 360-degree offset-axis (half-acquisition) scan into a 180-degree one:
// include/ctforge/preprocess.hpp. The per-pixel blend is kernels::stitch_weight
// (src/math/stitch.hpp).
#include "preprocess/stitch_360.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/enum_names.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/preprocess.hpp"
#include "math/stitch.hpp"
#include "preprocess/common.hpp"

namespace ctforge {

namespace {

constexpr double k_pi = std::numbers::pi;

constexpr detail::enum_name<stitch_side> k_side_names[] = {{stitch_side::left, "left"},
                                                           {stitch_side::right, "right"}};

// The views' pairing: M = views / 2 pairs (v, v + M) after dropping a repeated 360-degree view.
std::int64_t pair_count(std::int64_t views, const std::vector<double>& a) {
  CTFORGE_EXPECTS(views >= 2,
                  fmt::format("stitch_360: needs at least 2 views over 360 deg (got {})", views));
  if (a.empty()) {
    CTFORGE_EXPECTS(
        views % 2 == 0,
        fmt::format("stitch_360: {} views, an odd count: pass the view angles (angles) so that a "
                    "scan over [0, 360] deg whose last view repeats the first can be told from "
                    "an uneven one, or drop the repeated view",
                    views));
    return views / 2;
  }
  CTFORGE_EXPECTS(static_cast<std::int64_t>(a.size()) == views,
                  fmt::format("angles: {} angles for {} views", a.size(), views));
  for (double x : a) CTFORGE_EXPECTS(std::isfinite(x), "angles: must be finite");
  std::int64_t n = views;
  const double step = 2 * k_pi / static_cast<double>(views % 2 == 1 ? views - 1 : views);
  const double tol = 0.05 * step;  // a twentieth of a step: angles written with few decimals
  if (views % 2 == 1) {
    const double span = std::abs(a.back() - a.front());
    CTFORGE_EXPECTS(
        std::abs(span - 2 * k_pi) <= tol,
        fmt::format("angles: {} views, an odd count, but the last view lies {:.4f} deg from "
                    "the first, not 360 deg (a repeat of the first view, dropped); a half "
                    "acquisition needs each view's partner 180 deg on",
                    views, rad_to_deg(span)));
    n = views - 1;
  }
  const std::int64_t m = n / 2;
  for (std::int64_t v = 0; v < m; ++v) {
    const double d = std::abs(a[static_cast<std::size_t>(v + m)] - a[static_cast<std::size_t>(v)]);
    CTFORGE_EXPECTS(std::abs(d - k_pi) <= tol,
                    fmt::format("angles: view {} lies {:.4f} deg from view {}, not 180 deg: a "
                                "half acquisition pairs each view of the first half-turn with "
                                "the view half a turn later",
                                v + m, rad_to_deg(d), v));
  }
  return m;
}

}  // namespace

std::string to_string(stitch_side s) {
  return detail::name_of(s, k_side_names, "left");
}

namespace detail {

stitch_plan make_stitch_plan(std::int64_t cols, double center, double blend) {
  CTFORGE_EXPECTS(cols >= 1, "stitch_360: the detector has no columns");
  const double last = static_cast<double>(cols - 1);
  CTFORGE_EXPECTS(std::isfinite(center) && center >= 0 && center <= last,
                  fmt::format("center: the rotation axis must project onto the detector, "
                              "columns 0 .. {} (got {})",
                              cols - 1, center));
  CTFORGE_EXPECTS(!std::isnan(blend) && blend >= 0,
                  fmt::format("blend: must be >= 0 pixels (got {})", blend));
  stitch_plan s;
  s.center = center;
  s.side = center < 0.5 * static_cast<double>(cols) ? stitch_side::left : stitch_side::right;
  const double near = s.side == stitch_side::left ? center : last - center;
  const double far = last - near;
  s.blend = std::min(blend, 2 * near);
  // The output lattice: the axis on a pixel centre (odd width) or between two (even width),
  // whichever needs the smaller sub-pixel shift of the source columns.
  const double frac = center - std::floor(center);
  const bool on_pixel = frac < 0.25 || frac >= 0.75;
  // A hair of slack so that a far distance of 99.9999999 still gives 100 columns each side.
  const double d = far + 1e-9;
  s.width = on_pixel ? 2 * static_cast<std::int64_t>(std::floor(d)) + 1
                     : 2 * static_cast<std::int64_t>(std::floor(d + 0.5));
  s.x0 = -0.5 * static_cast<double>(s.width - 1);
  return s;
}

void stitch_row(const float* first, const float* second, std::int64_t cols, const stitch_plan& s,
                float* out) {
  const double sign = s.side == stitch_side::left ? 1.0 : -1.0;
  const double last = static_cast<double>(cols - 1);
  for (std::int64_t k = 0; k < s.width; ++k) {
    const double x = s.x0 + static_cast<double>(k);
    const double w = kernels::stitch_weight(sign * x, s.blend);
    double v = 0;
    // first half at detector position x: column center + x; the second half mirrored: the
    // column center - x. A weight of 0 may mean a column off the detector: never read then.
    if (w > 0) v += w * kernels::sample_linear(first, cols, std::clamp(s.center + x, 0.0, last));
    if (w < 1)
      v += (1 - w) * kernels::sample_linear(second, cols, std::clamp(s.center - x, 0.0, last));
    out[k] = static_cast<float>(v);
  }
}

}  // namespace detail

projection_stack stitch_360(const projection_view& p, const stitch_options& opt) {
  require_host(p, "stitch_360");
  const int threads = detail::thread_count(opt.threads);
  const std::int64_t m = pair_count(p.views, opt.angles_rad);
  CTFORGE_EXPECTS(!std::isnan(opt.center),
                  "center: required (the detector column of the rotation axis; "
                  "find_center_360 estimates it)");
  const detail::stitch_plan s = detail::make_stitch_plan(p.cols, opt.center, opt.blend);
  detail::require_finite(p, "stitch_360", threads);
  projection_stack out(m, p.rows, s.width);
  const std::int64_t rows = p.rows;
#pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
  for (std::int64_t v = 0; v < m; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      detail::stitch_row(p.view(v) + r * p.cols, p.view(v + m) + r * p.cols, p.cols, s,
                         out.view(v) + r * s.width);
  return out;
}

stitched_scan stitch_360(const projection_view& p, const geometry& g, stitch_options opt) {
  CTFORGE_EXPECTS(
      g.beam == beam_kind::parallel && g.orbit.has_value(),
      fmt::format("stitch_360: needs a circular 'parallel' geometry, got '{}'", g.type_name()));
  CTFORGE_EXPECTS(g.view_count() == p.views && g.rows == p.rows && g.cols == p.cols,
                  fmt::format("stitch_360: the projections are {} x {} x {} (views x rows x "
                              "cols), the geometry {} x {} x {}",
                              p.views, p.rows, p.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(opt.angles_rad.empty(),
                  "angles: the geometry gives the view angles; leave angles empty");
  const circular_orbit& o = *g.orbit;
  if (std::isnan(opt.center)) {
    const double ou = o.offset_u_mm.empty() ? 0.0 : o.offset_u_mm.front();
    for (double x : o.offset_u_mm)
      CTFORGE_EXPECTS(std::abs(x - ou) <= 1e-9 * std::max(1.0, std::abs(ou)),
                      "center: the geometry's offset_u differs between views; give the "
                      "rotation axis's column");
    opt.center = 0.5 * static_cast<double>(g.cols - 1) - ou / g.pixel_u_mm;
  }
  opt.angles_rad = o.angles_rad;
  stitched_scan r;
  r.projections = stitch_360(p, opt);
  const std::int64_t m = r.projections.views;
  const std::vector<double> angles(o.angles_rad.begin(), o.angles_rad.begin() + m);
  const std::vector<double> ov(o.offset_v_mm.begin(), o.offset_v_mm.begin() + m);
  r.geom = make_parallel_geometry(r.projections.cols, g.rows, g.pixel_u_mm, g.pixel_v_mm, angles,
                                  {0.0}, ov);
  return r;
}

}  // namespace ctforge

// Default reconstruction grid (ctforge::default_grid): the rules the command line's --size,
// --size-xyz, --spacing and --origin follow, shared with the Python module.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/recon.hpp"
#include "recon/fdk_geometry.hpp"

namespace ctforge {

double magnification(const geometry& g) {
  if (g.beam == beam_kind::parallel) return 1.0;
  if (g.orbit) return g.orbit->source_to_detector_mm / g.orbit->source_to_isocenter_mm;
  const view_vectors& w = g.views.front();
  const vec3 n = cross(w.u, w.v);
  const double sdd = std::abs(dot(w.detector_center - w.source, n));
  const double sid = std::abs(dot(vec3{} - w.source, n));
  return sid > 0 ? sdd / sid : 1.0;
}

namespace {

// Half-width (mm, on the detector) of the field a circular scan covers across the axis: the
// farthest pixel edge from the ray through the axis. A displaced (half-fan) detector covers a
// circle wider than its width (the same rule as FDK's displaced-detector weighting: the mean
// offset exceeds half a pixel); otherwise half the detector width.
double field_half_width(const geometry& g) {
  if (!g.orbit) {
    // A vector geometry with a circular orbit: the field of its virtual detectors (a half-fan
    // cone_vec scan covers the wider circle too; a transposed detector's width is its rows).
    try {
      return field_half_width(detail::make_circular_equivalent(g, "grid").geom);
    } catch (const usage_error&) {
      // not circular: the detector's width
    }
  }
  const double du = std::abs(g.pixel_u_mm), half = 0.5 * static_cast<double>(g.cols) * du;
  if (!g.orbit || g.orbit->offset_u_mm.empty()) return half;
  double mean = 0, reach = 0;
  for (double off : g.orbit->offset_u_mm) {
    mean += off;
    reach = std::max(reach, half + std::abs(off));
  }
  mean /= static_cast<double>(g.orbit->offset_u_mm.size());
  return std::abs(mean) > 0.5 * du ? reach : half;
}

// Helical scans along z: the heights the rows see on the axis for at least half a turn
// (helical_coverage_of), in slices of the rows' pitch at the isocentre unless a size or a
// spacing is given; centred on that range unless an origin is given.
void helical_z_extent(const geometry& g, const grid_request& r, std::int64_t n[3],
                      std::array<double, 3>& spacing, double& origin_z) {
  const helical_coverage c = helical_coverage_of(g);
  const double length = c.full_z_max_mm - c.full_z_min_mm;
  CTFORGE_EXPECTS(length >= 0 || (r.size && r.spacing_mm && r.origin_mm),
                  fmt::format("helical scan: no height is seen for half a turn (pitch factor "
                              "{:.3g}, source from z = {:g} to {:g} mm); give {}, {} and {} to "
                              "choose the grid",
                              c.pitch_factor, c.source_z_min_mm, c.source_z_max_mm, r.size_option,
                              r.spacing_option, r.origin_option));
  if (!r.spacing_mm) {
    if (r.size) {
      spacing[2] = length > 0 ? length / static_cast<double>(n[2]) : spacing[2];
    } else {
      spacing[2] = std::abs(g.pixel_v_mm) / magnification(g);
      n[2] = static_cast<std::int64_t>(std::floor(length / spacing[2] + 1e-9)) + 1;
    }
  } else if (!r.size) {
    n[2] = static_cast<std::int64_t>(std::floor(length / spacing[2] + 1e-9)) + 1;
  }
  origin_z =
      0.5 * (c.full_z_min_mm + c.full_z_max_mm) - 0.5 * static_cast<double>(n[2] - 1) * spacing[2];
}

}  // namespace

volume_geometry default_grid(const geometry& g, const grid_request& r) {
  g.validate();
  const double field = field_half_width(g);
  const std::int64_t n_xy = std::max<std::int64_t>(
      g.cols, static_cast<std::int64_t>(std::ceil(2 * field / std::abs(g.pixel_u_mm) - 1e-9)));
  std::int64_t n[3] = {n_xy, n_xy, g.rows};
  if (r.size) {
    for (std::size_t a = 0; a < 3; ++a) {
      CTFORGE_EXPECTS((*r.size)[a] >= 1,
                      fmt::format("{}: sizes must be positive integers (got {}, {}, {})",
                                  r.size_option, (*r.size)[0], (*r.size)[1], (*r.size)[2]));
      n[a] = (*r.size)[a];
    }
  }
  std::array<double, 3> spacing{};
  if (r.spacing_mm) {
    for (std::size_t a = 0; a < 3; ++a) {
      spacing[a] = (*r.spacing_mm)[a];
      CTFORGE_EXPECTS(std::isfinite(spacing[a]) && spacing[a] > 0,
                      fmt::format("{}: must be positive (got {})", r.spacing_option, spacing[a]));
    }
  } else if (!r.size) {
    // The pixel pitch at the isocentre; a displaced detector's wider field takes more voxels
    // of that spacing (ceil(2 field / du) of them), not other voxels.
    const double m = magnification(g);
    const double su = std::abs(g.pixel_u_mm) / m, sv = std::abs(g.pixel_v_mm) / m;
    spacing = {su, su, sv};
  } else {
    // Sizes given: the field in that many voxels.
    const double m = magnification(g);
    const double fov_u = 2 * field / m;
    const double fov_v = static_cast<double>(g.rows) * std::abs(g.pixel_v_mm) / m;
    spacing = {fov_u / static_cast<double>(n[0]), fov_u / static_cast<double>(n[1]),
               fov_v / static_cast<double>(n[2])};
  }
  double helical_origin_z = 0;
  if (g.helix) helical_z_extent(g, r, n, spacing, helical_origin_z);
  for (int a = 0; a < 3; ++a)
    CTFORGE_EXPECTS(n[a] < (std::int64_t{1} << 31),
                    fmt::format("{}: {} voxels along an axis is too many", r.size_option, n[a]));
  if (r.whole_in_memory)
    detail::require_memory(static_cast<std::uint64_t>(n[0]) * static_cast<std::uint64_t>(n[1]) *
                               static_cast<std::uint64_t>(n[2]),
                           sizeof(float),
                           fmt::format("a {} x {} x {} voxel grid", n[0], n[1], n[2]),
                           fmt::format("choose a smaller {}", r.size_option));
  volume_geometry vg = volume_geometry::centered(n[0], n[1], n[2], spacing);
  if (g.helix) vg.origin_mm[2] = helical_origin_z;
  if (r.origin_mm) {
    for (double o : *r.origin_mm)
      CTFORGE_EXPECTS(std::isfinite(o), fmt::format("{}: '{}' is not finite", r.origin_option, o));
    vg.origin_mm = *r.origin_mm;
  }
  vg.validate();
  return vg;
}

}  // namespace ctforge

// Helpers shared by bench_gpu and bench_fdk: problem definitions, synthetic projections,
// timing, and CPU-side scaling.
#pragma once

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::bench {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// A circular cone-beam problem: detector cols x rows (pixel mm), views over arc_deg,
/// volume n^3 of voxel mm centred on the isocentre.
struct cone_problem {
  std::string name;
  std::int64_t views = 0, cols = 0, rows = 0;
  double pixel_mm = 1, arc_deg = 360, sid_mm = 750, sdd_mm = 1200;
  std::int64_t n = 0;
  double voxel_mm = 1;

  geometry make_geometry() const {
    const double step = ctforge::deg_to_rad(arc_deg) / static_cast<double>(views);
    return make_cone_geometry(cols, rows, pixel_mm, pixel_mm, sid_mm, sdd_mm,
                              angle_range(0.0, step, views));
  }
  volume_geometry make_volume() const {
    return volume_geometry::centered(n, n, n, {voxel_mm, voxel_mm, voxel_mm});
  }
  /// voxels x views
  double updates() const { return static_cast<double>(n) * n * n * static_cast<double>(views); }

  /// The same scan scaled by s in every dimension (volume edge, voxel count per edge,
  /// views, detector pixels per edge): the physical sizes stay, sampling gets coarser.
  cone_problem scaled(double s) const {
    cone_problem p = *this;
    if (s >= 1) return p;
    const auto sc = [s](std::int64_t v) {
      return std::max<std::int64_t>(4, std::llround(static_cast<double>(v) * s));
    };
    p.views = sc(views);
    p.cols = sc(cols);
    p.rows = sc(rows);
    p.pixel_mm = pixel_mm * static_cast<double>(cols) / static_cast<double>(p.cols);
    p.n = sc(n);
    p.voxel_mm = voxel_mm * static_cast<double>(n) / static_cast<double>(p.n);
    p.name = name + fmt::format(" (x{:.3g})", s);
    return p;
  }
};

/// Smooth synthetic line integrals (a separable elliptic profile per view, varying slowly with
/// the view): the timings do not depend on the values, and filling 2-4 GiB stays fast.
inline projection_stack synthetic_projections(std::int64_t views, std::int64_t rows,
                                              std::int64_t cols) {
  projection_stack p(views, rows, cols);
  std::vector<float> fc(static_cast<std::size_t>(cols)), fr(static_cast<std::size_t>(rows));
  for (std::int64_t c = 0; c < cols; ++c) {
    const double u = (static_cast<double>(c) - 0.5 * static_cast<double>(cols - 1)) /
                     (0.45 * static_cast<double>(cols));
    fc[static_cast<std::size_t>(c)] = static_cast<float>(std::sqrt(std::max(0.0, 1 - u * u)));
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const double v = (static_cast<double>(r) - 0.5 * static_cast<double>(rows - 1)) /
                     (0.45 * static_cast<double>(rows));
    fr[static_cast<std::size_t>(r)] = static_cast<float>(std::sqrt(std::max(0.0, 1 - v * v)));
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t v = 0; v < views; ++v) {
    const float a =
        20.0f * (1.0f + 0.1f * static_cast<float>(std::sin(0.05 * static_cast<double>(v))));
    float* img = p.view(v);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float b = a * fr[static_cast<std::size_t>(r)];
      for (std::int64_t c = 0; c < cols; ++c)
        img[r * cols + c] = b * fc[static_cast<std::size_t>(c)];
    }
  }
  return p;
}

/// Scale (<= requested) that keeps a problem's voxels x views under `cap`, so that the CPU side
/// finishes in seconds; updates scale with s^4.
inline double cpu_scale_for(const cone_problem& full, double requested, double cap) {
  if (requested <= 0) return 0;
  const double s = std::pow(cap / full.updates(), 0.25);
  return std::min({requested, s, 1.0});
}

}  // namespace ctforge::bench

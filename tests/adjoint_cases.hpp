// Geometries, random data and comparisons shared by the tests of the projector pair (the
// matched transpose, ctforge::projector_pair on CPU and CUDA, CGLS) and of the iterative
// spaces: odd sizes, parallel beam, a tilted helical vector geometry, a single view and a
// single detector row.
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::testing {

/// n values uniform in [lo, hi), reproducible from `seed`.
inline std::vector<float> random_values(std::size_t n, unsigned seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// <a, b> accumulated in double.
inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline double norm(const std::vector<float>& a) {
  return std::sqrt(dot(a, a));
}

/// Mean absolute difference over the largest magnitude of `ref`.
inline double mae_over_peak(const std::vector<float>& got, const std::vector<float>& ref) {
  double err = 0, peak = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    err += std::abs(static_cast<double>(got[i]) - ref[i]);
    peak = std::max(peak, std::abs(static_cast<double>(ref[i])));
  }
  return peak > 0 ? err / static_cast<double>(ref.size()) / peak : err;
}

struct geometry_case {
  const char* name;
  geometry g;
  volume_geometry vg;
};

/// 7 cone-beam views on a rising circle with tilted, stretched detectors (23 x 17 pixels).
inline geometry tilted_helical_cone_vec() {
  std::vector<view_vectors> views;
  for (int i = 0; i < 7; ++i) {
    const double a = 2 * std::numbers::pi * i / 7;
    view_vectors v;
    v.source = {90 * std::sin(a), -90 * std::cos(a), 3.0 * i};
    v.detector_center = {-60 * std::sin(a), 60 * std::cos(a), 1.0 * i};
    v.u = {std::cos(a) * 1.1, std::sin(a) * 1.1, 0.1};
    v.v = {0.05, 0.0, 1.2};
    views.push_back(v);
  }
  return make_vec_geometry(beam_kind::cone, 23, 17, views);
}

/// Small cases of every kind (a few thousand voxels and pixels each).
inline std::vector<geometry_case> adjoint_cases() {
  return {
      {"cone_odd_sizes", make_cone_geometry(21, 13, 1.3, 1.1, 80, 150, angle_range(0.1, 0.7, 9)),
       volume_geometry::centered(15, 11, 9, {1.0, 1.2, 0.9})},
      {"parallel", make_parallel_geometry(19, 7, 1.0, 1.0, angle_range(0, 0.4, 8)),
       volume_geometry::centered(13, 14, 6, {1.0, 1.0, 1.0})},
      {"cone_vec_tilted_helical", tilted_helical_cone_vec(),
       volume_geometry::centered(12, 12, 10, {1, 1, 1})},
      {"single_view", make_cone_geometry(16, 12, 1.0, 1.0, 60, 120, {0.3}),
       volume_geometry::centered(10, 9, 8, {1, 1, 1})},
      {"single_row", make_cone_geometry(25, 1, 1.0, 1.0, 60, 120, angle_range(0, 0.5, 12)),
       volume_geometry::centered(14, 14, 1, {1, 1, 1})},
  };
}

}  // namespace ctforge::testing

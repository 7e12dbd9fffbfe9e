// The CPU back-projection strategies (detail::backproject, src/recon/backproject.hpp): on
// circular orbits the shared-z loop, which shares a voxel column's detector column, 1/w and
// weight between z-planes, equals the per-plane loop to float rounding, for odd sizes, plane
// counts that are not multiples of the z-block, one plane, one view, cone and parallel beams,
// with and without the FDK weight; a detector that is tilted (p0 depending on z) takes the
// per-plane loop and gives its result.
#include "recon/backproject.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/projection_maps.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "math/geometry.hpp"
#include "recon/recon_quality.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

struct bp_case {
  const char* name;
  bool cone;
  std::int64_t nx, ny, nz, views, cols, rows;
  bool weighted;
};

/// Smooth projections with a sharp ridge (so that a misplaced row or column shows).
std::vector<float> pattern(std::int64_t views, std::int64_t rows, std::int64_t cols) {
  std::vector<float> p(static_cast<std::size_t>(views * rows * cols));
  for (std::int64_t v = 0; v < views; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        p[static_cast<std::size_t>((v * rows + r) * cols + c)] =
            static_cast<float>(std::sin(0.21 * static_cast<double>(c + 3 * v)) *
                                   std::cos(0.17 * static_cast<double>(r)) +
                               (r % 7 == 3 ? 1.0 : 0.0));
  return p;
}

volume back_project(const geometry& g, const volume_geometry& vg, const std::vector<float>& p,
                    bool weighted, detail::bp_strategy strategy) {
  const auto padded = detail::make_padded_projections(p.data(), g.view_count(), g.rows, g.cols);
  const auto mats = kernels::float_matrices(g);
  volume out(vg);
  detail::backproject(detail::bp_job::flat(padded, mats.data(), vg, out.data.data(), weighted, 2),
                      strategy);
  return out;
}

using testing::max_diff_over_peak;

class BackprojectLoops : public ::testing::TestWithParam<bp_case> {};

// The two loops round the detector row differently (its z term added last): a few ulp of each
// contribution, 1e-5 of the peak over up to 90 views. A plane or row off by one differs by
// O(1) of the peak (the negative control below).
TEST_P(BackprojectLoops, SharedZMatchesPerPlane) {
  const bp_case c = GetParam();
  const auto angles = angle_range(0, 2 * pi / static_cast<double>(c.views), c.views);
  const geometry g = c.cone ? make_cone_geometry(c.cols, c.rows, 1.1, 1.3, 150, 260, angles)
                            : make_parallel_geometry(c.cols, c.rows, 0.8, 0.9, angles);
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {0.7, 0.75, 0.8});
  const auto p = pattern(c.views, c.rows, c.cols);
  const volume shared = back_project(g, vg, p, c.weighted, detail::bp_strategy::automatic);
  const volume plain = back_project(g, vg, p, c.weighted, detail::bp_strategy::per_plane);
  EXPECT_LT(max_diff_over_peak(shared, plain), 1e-5) << c.name;
  // Negative control: the same back-projection one plane higher is far off.
  if (c.nz > 1) {
    auto shifted = vg;
    shifted.origin_mm[2] += vg.spacing_mm[2];
    const volume up = back_project(g, shifted, p, c.weighted, detail::bp_strategy::automatic);
    EXPECT_GT(max_diff_over_peak(up, plain), 1e-2) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BackprojectLoops,
    ::testing::Values(bp_case{"cone_odd", true, 37, 29, 19, 45, 61, 47, true},
                      bp_case{"cone_unweighted", true, 24, 24, 16, 30, 40, 36, false},
                      bp_case{"cone_one_view", true, 21, 23, 9, 1, 33, 31, true},
                      bp_case{"cone_two_planes", true, 17, 13, 2, 20, 29, 11, true},
                      bp_case{"cone_one_plane", true, 17, 13, 1, 20, 29, 11, true},
                      bp_case{"parallel_odd", false, 31, 27, 13, 90, 47, 21, false}),
    [](const auto& info) { return std::string(info.param.name); });

// A detector tilted about its row direction: p0 / p2 depend on z, so automatic takes the
// per-plane loop and gives exactly its result.
TEST(BackprojectLoops, TiltedDetectorTakesThePerPlaneLoop) {
  std::vector<view_vectors> views;
  const double t = 0.2;  // tilt (rad): the columns lean out of the xy plane
  for (int v = 0; v < 24; ++v) {
    const double a = 2 * pi * v / 24;
    view_vectors w;
    w.source = {200 * std::cos(a), 200 * std::sin(a), 0};
    w.detector_center = {-100 * std::cos(a), -100 * std::sin(a), 0};
    // 1 mm steps: u along the tilted column direction, v = z made perpendicular to it.
    w.u = {-std::sin(a) * std::cos(t), std::cos(a) * std::cos(t), std::sin(t)};
    w.v = {-w.u.z * w.u.x, -w.u.z * w.u.y, 1 - w.u.z * w.u.z};
    const double n = std::sqrt(w.v.x * w.v.x + w.v.y * w.v.y + w.v.z * w.v.z);
    w.v = {w.v.x / n, w.v.y / n, w.v.z / n};
    views.push_back(w);
  }
  const geometry g = make_vec_geometry(beam_kind::cone, 40, 30, views);
  const auto mats = kernels::float_matrices(g);
  ASSERT_TRUE(std::any_of(mats.begin(), mats.end(),
                          [](const kernels::proj_matrix& m) { return m.m[2] != 0.0f; }));
  const auto vg = volume_geometry::centered(20, 18, 12, {1, 1, 1});
  const auto p = pattern(24, 30, 40);
  const volume a = back_project(g, vg, p, true, detail::bp_strategy::automatic);
  const volume b = back_project(g, vg, p, true, detail::bp_strategy::per_plane);
  EXPECT_EQ(a.data, b.data);
}

}  // namespace
}  // namespace ctforge

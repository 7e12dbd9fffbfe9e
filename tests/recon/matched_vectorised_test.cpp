// The matched back-projector's vectorised loop (8 rays of a detector row per AVX2 walk, taps added
// lane after lane) against its scalar loop (one ray at a time through kernels::joseph_scatter,
// the CUDA kernel's body): the geometries of the adjoint tests (odd sizes, parallel, tilted
// helical vectors, one view, one row), rays cut at a source inside the volume, groups of rays
// whose dominant axes differ, zero pixels; the adjoint identity through the vectorised pair; with
// a negative control.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

#include "adjoint_cases.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"
#include "recon/forward_project_cpu.hpp"
#include "recon/recon_quality.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

// Both loops add the same samples' taps with weights formed by the same products (value x cell
// weight x (1 - av or av) x (1 - au or au)), rounded in another order where the compiler fuses
// differently, and in another order of addition: each voxel receives at most a few hundred
// contributions here, each within a few float ulps, so the sums agree to ~1e-6 of the largest
// voxel value. A 1 % change of one pixel moves voxels by ~1e-3 of the peak (negative control).
constexpr double k_tol = 1e-5;

using testing::max_diff_over_peak;

/// Random projections in [0, 1) with every 7th pixel 0 (skipped by both loops).
projection_stack random_projections(const geometry& g, unsigned seed) {
  projection_stack p(g.view_count(), g.rows, g.cols);
  p.data = testing::random_values(p.data.size(), seed, 0.0f, 1.0f);
  for (std::size_t i = 0; i < p.data.size(); i += 7) p.data[i] = 0.0f;
  return p;
}

volume transpose(const projection_stack& p, const geometry& g, const volume_geometry& vg,
                 detail::forward_path path, int threads = 2) {
  return detail::back_project_matched_cpu(p, g, vg, threads, path);
}

std::vector<testing::geometry_case> cases() {
  std::vector<testing::geometry_case> c = testing::adjoint_cases();
  // Sources inside the volume (SID 8 mm in a 24 mm cube): rays cut at the source.
  c.push_back({"source_inside", make_cone_geometry(17, 9, 2.0, 2.0, 8, 40, angle_range(0, 0.9, 7)),
               volume_geometry::centered(20, 18, 12, {1.2, 1.2, 1.2})});
  // A wide fan and a tall detector: groups of 8 rays whose dominant axes differ.
  c.push_back({"wide_cone", make_cone_geometry(64, 40, 2.0, 2.0, 30, 60, angle_range(0.2, 0.5, 6)),
               volume_geometry::centered(19, 21, 15, {1, 1, 1})});
  return c;
}

TEST(MatchedVectorised, MatchesScalarOnEveryGeometry) {
  if (!detail::forward_project_vectorised())
    GTEST_SKIP() << "no AVX2/FMA on this CPU: both paths run the scalar loop";
  unsigned seed = 11;
  for (const auto& c : cases()) {
    const projection_stack p = random_projections(c.g, seed++);
    const volume ref = transpose(p, c.g, c.vg, detail::forward_path::scalar);
    const volume fast = transpose(p, c.g, c.vg, detail::forward_path::vectorised);
    const double d = max_diff_over_peak(fast, ref);
    EXPECT_LE(d, k_tol) << c.name;
    std::printf("    %-24s max |vectorised - scalar| / peak = %.2e\n", c.name, d);
  }
}

// <A x, y> = <x, A^T y> with A the (vectorised) forward projector and A^T the vectorised
// transpose, to float rounding: 1e-5 relative, as the scalar pair's test.
TEST(MatchedVectorised, AdjointIdentityWithTheVectorisedForward) {
  unsigned seed = 31;
  for (const auto& c : cases()) {
    volume x(c.vg);
    x.data = testing::random_values(x.data.size(), seed++);
    projection_stack y(c.g.view_count(), c.g.rows, c.g.cols);
    y.data = testing::random_values(y.data.size(), seed++);
    const projection_stack ax =
        detail::forward_project_cpu(x, c.g, 2, detail::forward_path::automatic);
    const volume aty = transpose(y, c.g, c.vg, detail::forward_path::automatic);
    const double lhs = testing::dot(ax.data, y.data), rhs = testing::dot(x.data, aty.data);
    const double scale = testing::norm(ax.data) * testing::norm(y.data);
    ASSERT_GT(scale, 0.0) << c.name;
    EXPECT_LE(std::abs(lhs - rhs) / scale, 1e-5) << c.name;
  }
}

// Any thread count: the same sums up to the order of addition (per-thread volumes added in
// thread order).
TEST(MatchedVectorised, AnyThreadCountAgrees) {
  const auto c = cases()[0];
  const projection_stack p = random_projections(c.g, 5);
  const volume one = transpose(p, c.g, c.vg, detail::forward_path::automatic, 1);
  for (int t : {2, 3, 5})
    EXPECT_LE(max_diff_over_peak(transpose(p, c.g, c.vg, detail::forward_path::automatic, t), one),
              k_tol)
        << t << " threads";
}

// The tolerance catches small errors: one pixel 1 % larger moves the back-projection by far more.
TEST(MatchedVectorised, NegativeControlCatchesSmallErrors) {
  const auto c = cases()[0];
  projection_stack p = random_projections(c.g, 9);
  const volume ref = transpose(p, c.g, c.vg, detail::forward_path::scalar);
  const std::size_t mid = static_cast<std::size_t>(
      (c.g.view_count() / 2 * c.g.rows + c.g.rows / 2) * c.g.cols + c.g.cols / 2);
  p.data[mid] = p.data[mid] * 1.01f + 0.01f;
  EXPECT_GT(max_diff_over_peak(transpose(p, c.g, c.vg, detail::forward_path::vectorised), ref),
            10 * k_tol);
}

}  // namespace
}  // namespace ctforge

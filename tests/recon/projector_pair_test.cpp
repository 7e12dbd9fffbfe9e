// ctforge::projector_pair on the CPU: apply / apply_adjoint are forward_project and
// back_project_matched (or back_project) bit for bit, written into the caller's memory; repeated
// calls give the same floats; wrong span sizes are usage errors naming the expected size; the
// matched pair passes the adjoint identity on cone, parallel, vector, one-view and one-row
// geometries. (The CUDA pair: tests/kernels/projector_pair_gpu_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"
#include "adjoint_cases.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

using testing::dot;
using testing::norm;
using testing::random_values;

projector_options cpu(int threads = 2) {
  projector_options o;
  o.where = backend::cpu;
  o.threads = threads;
  return o;
}

// The same floats as the free functions (same code, same thread count), in the caller's memory.
TEST(ProjectorPair, CpuMatchesTheFreeFunctionsBitForBit) {
  for (const auto& c : testing::adjoint_cases()) {
    projector_pair A(c.g, c.vg, cpu());
    EXPECT_EQ(A.where(), backend::cpu);
    ASSERT_EQ(A.volume_size(), c.vg.voxel_count()) << c.name;
    ASSERT_EQ(A.projection_size(), c.g.view_count() * c.g.rows * c.g.cols) << c.name;
    volume x(c.vg);
    x.data = random_values(x.data.size(), 11);
    projection_stack y(c.g.view_count(), c.g.rows, c.g.cols);
    y.data = random_values(y.data.size(), 12);

    std::vector<float> ax(static_cast<std::size_t>(A.projection_size()), -7.0f);
    A.apply(x.data, ax);
    EXPECT_EQ(ax, forward_project(x, c.g, 2).data) << c.name;
    std::vector<float> aty(static_cast<std::size_t>(A.volume_size()), -7.0f);
    A.apply_adjoint(y.data, aty);
    EXPECT_EQ(aty, back_project_matched(y, c.g, c.vg, 2).data) << c.name;

    projector_pair B(c.g, c.vg, cpu(), backprojector::voxel);
    EXPECT_EQ(B.adjoint(), backprojector::voxel);
    std::vector<float> bty(aty.size());
    B.apply_adjoint(y.data, bty);
    EXPECT_EQ(bty, back_project(y, c.g, c.vg, 2).data) << c.name;
    EXPECT_NE(bty, aty) << c.name << ": the two adjoints are different operators";
  }
}

TEST(ProjectorPair, RepeatedCallsGiveTheSameFloats) {
  const auto c = testing::adjoint_cases()[0];
  projector_pair A(c.g, c.vg, cpu());
  const std::vector<float> x = random_values(static_cast<std::size_t>(A.volume_size()), 3);
  const std::vector<float> y = random_values(static_cast<std::size_t>(A.projection_size()), 4);
  std::vector<float> p1(y.size()), p2(y.size()), v1(x.size()), v2(x.size());
  A.apply(x, p1);
  A.apply_adjoint(y, v1);
  A.apply(x, p2);
  A.apply_adjoint(y, v2);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(v1, v2);
  const projector_pair_stats s = A.stats();
  EXPECT_EQ(s.apply_calls, 2);
  EXPECT_EQ(s.adjoint_calls, 2);
  EXPECT_EQ(s.bytes_uploaded, 0);
  EXPECT_EQ(s.allocations, 0);
}

TEST(ProjectorPair, WrongSpanSizesNameTheExpectedSize) {
  const auto c = testing::adjoint_cases()[0];  // 15 x 11 x 9 voxels = 1485; 9 views x 13 x 21 = 2457 pixels
  projector_pair A(c.g, c.vg, cpu());
  std::vector<float> vol(1485), proj(2457), short_vol(1484), long_proj(2458);
  using testing::expect_error_naming;
  expect_error_naming([&] { A.apply(short_vol, proj); }, "1485", "1484");
  expect_error_naming([&] { A.apply(vol, long_proj); }, "2457", "2458");
  expect_error_naming([&] { A.apply_adjoint(long_proj, vol); }, "2457", "apply_adjoint");
  expect_error_naming([&] { A.apply_adjoint(proj, short_vol); }, "1485", "the volume");
  // usage errors (exit 2 at the command line), not runtime failures
  EXPECT_THROW(A.apply(short_vol, proj), usage_error);
  // a non-finite voxel is refused as forward_project refuses it
  vol[17] = std::nanf("");
  EXPECT_THROW(A.apply(vol, proj), usage_error);
}

// |<A x, y> - <x, A^T y>| / (|A x| |y|) <= 1e-5 (float rounding of sums over ~1e4 terms is
// ~1e-7; cgls_test.cpp's negative control shows the voxel-driven adjoint missing by > 1e-4).
TEST(ProjectorPair, AdjointIdentityOfTheMatchedPair) {
  for (const auto& c : testing::adjoint_cases()) {
    projector_pair A(c.g, c.vg, cpu());
    const std::vector<float> x = random_values(static_cast<std::size_t>(A.volume_size()), 21);
    const std::vector<float> y = random_values(static_cast<std::size_t>(A.projection_size()), 22);
    std::vector<float> ax(y.size()), aty(x.size());
    A.apply(x, ax);
    A.apply_adjoint(y, aty);
    const double scale = norm(ax) * norm(y);
    ASSERT_GT(scale, 0) << c.name;
    const double gap = std::abs(dot(ax, y) - dot(x, aty)) / scale;
    std::cout << "[ metric   ] projector_pair adjoint " << c.name << ": " << gap << "\n";
    EXPECT_LE(gap, 1e-5) << c.name;
  }
}

TEST(ProjectorPair, MovesKeepTheOperator) {
  const auto c = testing::adjoint_cases()[3];
  projector_pair A(c.g, c.vg, cpu());
  projector_pair B = std::move(A);
  const std::vector<float> x = random_values(static_cast<std::size_t>(B.volume_size()), 5);
  std::vector<float> p(static_cast<std::size_t>(B.projection_size()));
  B.apply(x, p);
  EXPECT_EQ(p, forward_project(volume_view(c.vg, x), c.g, 2).data);
}

}  // namespace
}  // namespace ctforge

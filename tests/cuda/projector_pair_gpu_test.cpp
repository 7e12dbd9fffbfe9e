// ctforge::projector_pair on CUDA: apply / apply_adjoint against the CPU pair (forward_project,
// back_project_matched, back_project) on cone, parallel, vector, one-view, one-row and curved
// geometries; the adjoint identity of the GPU's matched pair; and the persistent resources:
// no allocation after construction, one upload and one download per call.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "adjoint_cases.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"

using namespace ctforge;

namespace {

using ctforge::testing::dot;
using ctforge::testing::mae_over_peak;
using ctforge::testing::random_values;

// The GPU runs the CPU's per-ray / per-voxel float code (exact interpolation); only FMA
// contraction, the order of the matched scatter's atomic additions and of the voxel-driven
// sum over views differ (~1e-6 of the peak). 1e-5 of the peak as mean absolute error is the
// bound tests/kernels/projector_gpu_test.cpp uses; a half-voxel shift costs >= 1e-3.
constexpr double k_tol = 1e-5;

std::vector<ctforge::testing::geometry_case> cases() {
  return {
      {"cone_odd_sizes", make_cone_geometry(41, 27, 1.3, 1.1, 80, 150, angle_range(0.1, 0.3, 23)),
       volume_geometry::centered(31, 27, 19, {1.0, 1.2, 0.9})},
      {"parallel", make_parallel_geometry(39, 17, 1.0, 1.0, angle_range(0, 0.2, 18)),
       volume_geometry::centered(27, 28, 12, {1.0, 1.0, 1.0})},
      {"cone_vec_tilted_helical", ctforge::testing::tilted_helical_cone_vec(),
       volume_geometry::centered(12, 12, 10, {1, 1, 1})},
      {"single_view", make_cone_geometry(16, 12, 1.0, 1.0, 60, 120, {0.3}),
       volume_geometry::centered(10, 9, 8, {1, 1, 1})},
      {"single_row", make_cone_geometry(25, 1, 1.0, 1.0, 60, 120, angle_range(0, 0.5, 12)),
       volume_geometry::centered(14, 14, 1, {1, 1, 1})},
      {"cone_curved",
       make_cone_geometry(33, 21, 1.2, 1.2, 100, 170, angle_range(0, 0.3, 21), {}, {},
                          detector_shape::cylindrical),
       volume_geometry::centered(24, 24, 14, {1, 1, 1})},
  };
}

projector_options on(backend where) {
  projector_options o;
  o.where = where;
  o.threads = 2;
  return o;
}

class ProjectorPairGpu : public ctforge::testing::gpu_test {};

TEST_F(ProjectorPairGpu, MatchesTheCpuPair) {
  for (const auto& c : cases()) {
    for (const backprojector kind : {backprojector::matched, backprojector::voxel}) {
      const std::string what =
          std::string(c.name) + (kind == backprojector::matched ? " matched" : " voxel");
      projector_pair gpu(c.g, c.vg, on(backend::cuda), kind);
      projector_pair cpu(c.g, c.vg, on(backend::cpu), kind);
      ASSERT_EQ(gpu.where(), backend::cuda);
      const std::vector<float> x =
          random_values(static_cast<std::size_t>(cpu.volume_size()), 1, 0.0f);
      const std::vector<float> y =
          random_values(static_cast<std::size_t>(cpu.projection_size()), 2, 0.0f);
      std::vector<float> ax_g(y.size()), ax_c(y.size()), aty_g(x.size()), aty_c(x.size());
      gpu.apply(x, ax_g);
      cpu.apply(x, ax_c);
      gpu.apply_adjoint(y, aty_g);
      cpu.apply_adjoint(y, aty_c);
      const double e_fwd = mae_over_peak(ax_g, ax_c), e_adj = mae_over_peak(aty_g, aty_c);
      std::cout << "[ metric   ] " << what << ": forward " << e_fwd << ", adjoint " << e_adj
                << " (MAE / peak)\n";
      EXPECT_LE(e_fwd, k_tol) << what;
      EXPECT_LE(e_adj, k_tol) << what;
    }
  }
}

// The GPU's matched back-projector is the transpose of the GPU's forward projector: the same
// rays, samples and trilinear weights, scattered (float rounding of ~1e4-term sums: ~1e-7).
TEST_F(ProjectorPairGpu, MatchedPairPassesTheAdjointIdentity) {
  for (const auto& c : cases()) {
    projector_pair A(c.g, c.vg, on(backend::cuda));
    const std::vector<float> x = random_values(static_cast<std::size_t>(A.volume_size()), 3);
    const std::vector<float> y = random_values(static_cast<std::size_t>(A.projection_size()), 4);
    std::vector<float> ax(y.size()), aty(x.size());
    A.apply(x, ax);
    A.apply_adjoint(y, aty);
    const double scale = std::sqrt(dot(ax, ax)) * std::sqrt(dot(y, y));
    ASSERT_GT(scale, 0) << c.name;
    const double gap = std::abs(dot(ax, y) - dot(x, aty)) / scale;
    std::cout << "[ metric   ] GPU adjoint identity " << c.name << ": " << gap << "\n";
    EXPECT_LE(gap, 1e-5) << c.name;
  }
}

TEST_F(ProjectorPairGpu, AllocatesOnlyAtConstructionAndMovesOneCopyEachWay) {
  const auto c = cases()[0];
  for (const backprojector kind : {backprojector::matched, backprojector::voxel}) {
    projector_pair A(c.g, c.vg, on(backend::cuda), kind);
    const projector_pair_stats s0 = A.stats();
    EXPECT_GT(s0.allocations, 0);
    EXPECT_EQ(s0.bytes_uploaded, 0);
    const std::vector<float> x = random_values(static_cast<std::size_t>(A.volume_size()), 5);
    const std::vector<float> y = random_values(static_cast<std::size_t>(A.projection_size()), 6);
    std::vector<float> ax(y.size()), ax2(y.size()), aty(x.size());
    const auto vb = static_cast<std::int64_t>(x.size() * sizeof(float));
    const auto pb = static_cast<std::int64_t>(y.size() * sizeof(float));
    for (int i = 0; i < 3; ++i) {
      A.apply(x, i == 0 ? ax : ax2);
      A.apply_adjoint(y, aty);
    }
    const projector_pair_stats s = A.stats();
    EXPECT_EQ(s.allocations, s0.allocations);
    EXPECT_EQ(s.apply_calls, 3);
    EXPECT_EQ(s.adjoint_calls, 3);
    EXPECT_EQ(s.bytes_uploaded, 3 * (vb + pb));
    EXPECT_EQ(s.bytes_downloaded, 3 * (pb + vb));
    // The forward projector has no atomics: the same floats every call.
    EXPECT_EQ(ax, ax2);
  }
}

TEST_F(ProjectorPairGpu, RefusesWhatDoesNotFitTheMemoryLimit) {
  const auto c = cases()[0];
  projector_options o = on(backend::cuda);
  o.gpu_memory_limit_bytes = 64 << 10;  // 64 KiB: less than the volume alone
  try {
    projector_pair A(c.g, c.vg, o);
    ADD_FAILURE() << "no error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
  }
}

}  // namespace

#else

TEST(ProjectorPairGpu, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

// The run-time SIMD levels of the CPU back-projection (recon/cpu_simd.hpp, detail::backproject):
// every level's loops (portable, AVX2, AVX-512) against the double-precision reference within
// the fast-vs-reference tolerances of the FDK tests, the levels against each other, the cap
// that tests and benchmarks use, and the forward projector following the same choice.
#include "recon/backproject_simd.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "core/projection_maps.hpp"
#include "math/cylinder.hpp"
#include "math/geometry.hpp"
#include "recon/backproject.hpp"
#include "recon/cpu_simd.hpp"
#include "recon/forward_project_cpu.hpp"
#include "recon/recon_quality.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;
using detail::bp_strategy;
using detail::simd_level;
using testing::max_diff_over_peak;

/// Smooth projections with a sharp ridge every 7 rows, positive.
projection_stack pattern(const geometry& g) {
  projection_stack p(g.view_count(), g.rows, g.cols);
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < p.rows; ++r)
      for (std::int64_t c = 0; c < p.cols; ++c)
        p.data[static_cast<std::size_t>((v * p.rows + r) * p.cols + c)] =
            static_cast<float>(1.5 +
                               std::sin(0.21 * static_cast<double>(c + 3 * v)) *
                                   std::cos(0.17 * static_cast<double>(r)) +
                               (r % 7 == 3 ? 1.0 : 0.0));
  return p;
}

geometry cone() {
  return make_cone_geometry(61, 47, 1.1, 1.3, 150, 260, angle_range(0, 2 * pi / 45, 45));
}

/// Restores the default level after each test.
class CpuSimd : public ::testing::Test {
 protected:
  void TearDown() override { detail::set_cpu_simd_level(std::nullopt); }

  /// Back-projects `p` (geometry g) with `strategy` at the level capped to `cap`.
  static volume run(const geometry& g, const projection_stack& p, const volume_geometry& vg,
                    bool weighted, bp_strategy strategy, std::optional<simd_level> cap) {
    detail::set_cpu_simd_level(cap);
    volume out(vg);
    const projection_view view = p;
    const auto padded = detail::make_padded_projections(view);
    const auto mats = g.curved() ? std::vector<kernels::proj_matrix>{} : kernels::float_matrices(g);
    const auto maps = g.curved() ? kernels::cylinder_maps(g) : std::vector<kernels::cyl_map>{};
    detail::bp_job job = detail::bp_job::flat(padded, g.curved() ? nullptr : mats.data(), vg,
                                              out.data.data(), weighted, 2);
    if (g.curved()) job.maps = maps.data();
    job.views = &view;
    job.geom = &g;
    detail::backproject(job, strategy);
    detail::set_cpu_simd_level(std::nullopt);
    return out;
  }
};

/// The FDK tests' fast-vs-reference criteria: mean absolute difference below 1e-5 of the peak,
/// no voxel off by more than 1e-3 of it.
void expect_close_to_reference(const volume& fast, const volume& ref, const std::string& what) {
  const double peak = testing::peak_abs(ref.data);
  double sum = 0, worst = 0;
  for (std::size_t i = 0; i < ref.data.size(); ++i) {
    const double d = std::abs(static_cast<double>(fast.data[i]) - ref.data[i]);
    sum += d;
    worst = std::max(worst, d);
  }
  EXPECT_LT(sum / static_cast<double>(ref.data.size()), 1e-5 * peak) << what;
  EXPECT_LT(worst, 1e-3 * peak) << what;
}

TEST_F(CpuSimd, LevelIsCappedButNeverRaised) {
  const simd_level hw = detail::cpu_simd_supported();
  EXPECT_LE(detail::cpu_simd_level(), hw);
  detail::set_cpu_simd_level(simd_level::none);
  EXPECT_EQ(detail::cpu_simd_level(), simd_level::none);
  detail::set_cpu_simd_level(simd_level::avx512);
  EXPECT_LE(detail::cpu_simd_level(), hw);
  EXPECT_STREQ(detail::to_string(simd_level::none), "scalar");
  EXPECT_STREQ(detail::to_string(simd_level::avx2), "avx2");
  EXPECT_STREQ(detail::to_string(simd_level::avx512), "avx512");
}

// One choice for the whole library: the forward projector's vectorised loop follows the cap.
TEST_F(CpuSimd, ForwardProjectorFollowsTheLevel) {
  detail::set_cpu_simd_level(simd_level::none);
  EXPECT_FALSE(detail::forward_project_vectorised());
  detail::set_cpu_simd_level(std::nullopt);
  EXPECT_EQ(detail::forward_project_vectorised(), detail::cpu_simd_level() >= simd_level::avx2);
}

// Every level the CPU has, every fast strategy, flat cone (weighted), parallel (unweighted) and
// a cylindrical detector: within the fast-vs-reference tolerances of the reference loop.
TEST_F(CpuSimd, EveryLevelMatchesTheReference) {
  const geometry flat = cone();
  const geometry par = make_parallel_geometry(47, 21, 0.8, 0.9, angle_range(0, pi / 90, 90));
  const geometry curved =
      make_cone_geometry(61, 47, 1.1, 1.3, 150, 260, angle_range(0, 2 * pi / 45, 45), {}, {},
                         detector_shape::cylindrical);
  const auto vg = volume_geometry::centered(37, 29, 19, {0.7, 0.75, 0.8});
  struct geometry_case {
    const char* name;
    const geometry* g;
    bool weighted;
  };
  for (const geometry_case c :
       {geometry_case{"cone", &flat, true}, geometry_case{"parallel", &par, false},
        geometry_case{"cylindrical", &curved, true}}) {
    const projection_stack p = pattern(*c.g);
    const volume ref = run(*c.g, p, vg, c.weighted, bp_strategy::reference, std::nullopt);
    for (const simd_level level : {simd_level::none, simd_level::avx2, simd_level::avx512}) {
      if (level > detail::cpu_simd_supported()) continue;
      for (const bp_strategy s : {bp_strategy::per_plane, bp_strategy::shared_z}) {
        const volume fast = run(*c.g, p, vg, c.weighted, s, level);
        expect_close_to_reference(
            fast, ref,
            std::string(c.name) + " " + detail::to_string(level) + " " + detail::to_string(s));
      }
    }
  }
}

// The portable loop (CTFORGE_SIMD=scalar, or a CPU without AVX2) against the AVX2 loops: the
// same values up to float rounding (1e-5 of the peak, the shared-z vs per-plane criterion).
TEST_F(CpuSimd, ScalarMatchesAvx2) {
  if (detail::cpu_simd_supported() < simd_level::avx2)
    GTEST_SKIP() << "this CPU has no AVX2 + FMA: the AVX2 loops cannot run here";
  const geometry g = cone();
  const projection_stack p = pattern(g);
  const auto vg = volume_geometry::centered(37, 29, 19, {0.7, 0.75, 0.8});
  const volume scalar = run(g, p, vg, true, bp_strategy::automatic, simd_level::none);
  for (const bp_strategy s : {bp_strategy::per_plane, bp_strategy::shared_z}) {
    const volume avx2 = run(g, p, vg, true, s, simd_level::avx2);
    EXPECT_LT(max_diff_over_peak(avx2, scalar), 1e-5) << detail::to_string(s);
    EXPECT_NE(avx2.data, scalar.data) << "the levels should run different loops";
  }
  // Negative control: one plane higher is far off.
  auto up = vg;
  up.origin_mm[2] += vg.spacing_mm[2];
  EXPECT_GT(max_diff_over_peak(run(g, p, up, true, bp_strategy::automatic, simd_level::none),
                               run(g, p, vg, true, bp_strategy::automatic, simd_level::avx2)),
            1e-2);
}

// The AVX-512 shared-z loop against the AVX2 one (plane counts that are not multiples of the
// z-block, rows that are not multiples of 16 voxels, one view).
TEST_F(CpuSimd, Avx512SharedZMatchesAvx2) {
  if (detail::cpu_simd_supported() < simd_level::avx512)
    GTEST_SKIP() << "this CPU has no AVX-512F + AVX-512VL: the AVX-512 shared-z loop was not run";
  for (const std::int64_t views : {45, 1}) {
    const geometry g =
        make_cone_geometry(61, 47, 1.1, 1.3, 150, 260, angle_range(0, 2 * pi / 45, views));
    const projection_stack p = pattern(g);
    for (const auto& vg : {volume_geometry::centered(37, 29, 19, {0.7, 0.75, 0.8}),
                           volume_geometry::centered(64, 33, 40, {0.5, 0.6, 0.55})}) {
      const volume avx2 = run(g, p, vg, true, bp_strategy::shared_z, simd_level::avx2);
      const volume avx512 = run(g, p, vg, true, bp_strategy::shared_z, simd_level::avx512);
      EXPECT_LT(max_diff_over_peak(avx512, avx2), 1e-5) << views << " views, nx " << vg.nx;
    }
  }
}

// The default level is the widest the CPU has: on an AVX2 CPU without AVX-512 automatic runs
// exactly the AVX2 loops.
TEST_F(CpuSimd, DefaultIsTheWidestLevel) {
  const geometry g = cone();
  const projection_stack p = pattern(g);
  const auto vg = volume_geometry::centered(21, 17, 9, {1, 1, 1});
  const volume by_default = run(g, p, vg, true, bp_strategy::automatic, std::nullopt);
  const volume widest = run(g, p, vg, true, bp_strategy::automatic, detail::cpu_simd_supported());
  EXPECT_EQ(by_default.data, widest.data);
}

TEST_F(CpuSimd, RefusesWhatCannotRun) {
  const geometry g = cone();
  const projection_stack p = pattern(g);
  const auto vg = volume_geometry::centered(9, 9, 4, {1, 1, 1});
  const auto padded = detail::make_padded_projections(p);
  const auto mats = kernels::float_matrices(g);
  volume out(vg);
  // A level the CPU lacks (or none, which has no SIMD loop).
  EXPECT_THROW(detail::backproject_simd(padded, mats.data(), vg, true, out.data.data(), 1, true,
                                        simd_level::none),
               usage_error);
  if (detail::cpu_simd_supported() < simd_level::avx512)
    EXPECT_THROW(detail::backproject_simd(padded, mats.data(), vg, true, out.data.data(), 1, true,
                                          simd_level::avx512),
                 usage_error);
  // The reference strategy without the plain views.
  EXPECT_THROW(
      detail::backproject(detail::bp_job::flat(padded, mats.data(), vg, out.data.data(), true, 1),
                          bp_strategy::reference),
      usage_error);
}

// shared_z asked for views whose column depends on z (a tilted detector) is refused instead of
// giving wrong values.
TEST_F(CpuSimd, SharedZRefusesTiltedViews) {
  std::vector<view_vectors> views;
  for (int v = 0; v < 8; ++v) {
    const double a = 2 * pi * v / 8, t = 0.2;
    view_vectors w;
    w.source = {200 * std::cos(a), 200 * std::sin(a), 0};
    w.detector_center = {-100 * std::cos(a), -100 * std::sin(a), 0};
    w.u = {-std::sin(a) * std::cos(t), std::cos(a) * std::cos(t), std::sin(t)};
    w.v = {-w.u.z * w.u.x, -w.u.z * w.u.y, 1 - w.u.z * w.u.z};  // perpendicular to u
    const double n = std::sqrt(w.v.x * w.v.x + w.v.y * w.v.y + w.v.z * w.v.z);
    w.v = {w.v.x / n, w.v.y / n, w.v.z / n};
    views.push_back(w);
  }
  const geometry g = make_vec_geometry(beam_kind::cone, 20, 16, views);
  const projection_stack p = pattern(g);
  const auto vg = volume_geometry::centered(9, 9, 4, {1, 1, 1});
  EXPECT_THROW(run(g, p, vg, true, bp_strategy::shared_z, std::nullopt), usage_error);
}

}  // namespace
}  // namespace ctforge

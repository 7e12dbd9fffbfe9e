// The CPU forward projector's vectorised loop (8 rays of a detector row per AVX2 walk) against
// its scalar reference loop (one ray at a time through kernels::joseph_ray_window, the CUDA
// kernel's body): odd sizes, one-row / one-column detectors, one view, parallel / cone / vector /
// cylindrical geometries, rays along an axis, rays missing the volume, rays cut at a source
// inside the volume, groups of 8 rays whose dominant axes differ, z-dominant rays and slabs,
// volumes 1 voxel thick; with a negative control.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "recon/forward_project_cpu.hpp"
#include "recon/recon_quality.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

// Both loops trace the same rays (the double-precision set-up), walk the same planes
// (kernels::joseph_ray_plan) and evaluate each sample with the same float operations in the same
// order; they can differ only where the compiler fuses a multiply and an add in one loop and not
// in the other (e.g. a build without -march: the scalar loop unfused, the AVX2 one fused). Worst
// case per sample: the point p + dk s moves by 1 ulp (2e-6 voxel at coordinates below 32), which
// moves a bilinear sample by at most 2e-6 of the largest voxel value, and the blend and the sum
// round by a few 6e-8 more. Over the <= 25 planes of these volumes that is < 6e-5 of the largest
// voxel value times the step (<= 1.7 mm), against peak rays of >= 10 voxels x 1 mm: < 1e-5 of the
// peak even if every error had the same sign (typically ~1e-6). A 1 % error in one voxel moves
// rays by ~1e-4 of the peak (the negative control). Measured with GCC 12, -march=x86-64-v3: 0
// (bit-identical).
constexpr double k_tol = 1e-5;

double max_diff_over_peak(const projection_stack& fast, const projection_stack& ref) {
  return testing::max_diff_over_peak(fast.data, ref.data);
}

volume random_volume(const volume_geometry& vg, unsigned seed) {
  volume v(vg);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : v.data) x = u(gen);
  return v;
}

projection_stack project(const volume& vol, const geometry& g, detail::forward_path path,
                         int threads = 2) {
  return detail::forward_project_cpu(vol, g, threads, path);
}

/// Vectorised against scalar for one volume and geometry; returns the measured difference.
double expect_loops_agree(const volume& vol, const geometry& g, const std::string& name) {
  const projection_stack ref = project(vol, g, detail::forward_path::scalar);
  const projection_stack fast = project(vol, g, detail::forward_path::vectorised);
  const double d = max_diff_over_peak(fast, ref);
  EXPECT_LE(d, k_tol) << name;
  std::printf("    %-28s max |vectorised - scalar| / peak = %.2e\n", name.c_str(), d);
  return d;
}

/// Dominant axis of the ray through pixel (v, r, c) in index space, as joseph_ray_plan picks it
/// (ties towards x, then y).
int dominant_axis(const geometry& g, const volume_geometry& vg, std::int64_t v, std::int64_t r,
                  std::int64_t c) {
  const vec3 px = pixel_center(g, v, static_cast<double>(c), static_cast<double>(r));
  const vec3 s = g.views[static_cast<std::size_t>(v)].source;
  const vec3 d = g.beam == beam_kind::cone ? px - s : s;
  const double ax = std::abs(static_cast<float>(d.x / vg.spacing_mm[0])),
               ay = std::abs(static_cast<float>(d.y / vg.spacing_mm[1])),
               az = std::abs(static_cast<float>(d.z / vg.spacing_mm[2]));
  return (ax >= ay && ax >= az) ? 0 : (ay >= az ? 1 : 2);
}

/// Number of groups of 8 columns (starting at multiples of 8, as the vectorised loop forms
/// them) in which rays have different dominant axes.
int mixed_groups(const geometry& g, const volume_geometry& vg) {
  int mixed = 0;
  for (std::int64_t v = 0; v < g.view_count(); ++v)
    for (std::int64_t r = 0; r < g.rows; ++r)
      for (std::int64_t c0 = 0; c0 < g.cols; c0 += 8) {
        const int a = dominant_axis(g, vg, v, r, c0);
        for (std::int64_t c = c0 + 1; c < std::min(g.cols, c0 + 8); ++c)
          if (dominant_axis(g, vg, v, r, c) != a) {
            ++mixed;
            break;
          }
      }
  return mixed;
}

volume_geometry odd_grid() {
  volume_geometry vg;
  vg.nx = 23;
  vg.ny = 19;
  vg.nz = 17;
  vg.spacing_mm = {1.2, 1.1, 0.9};
  vg.origin_mm = {-12.9, -10.3, -7.7};  // off-centre
  return vg;
}

// The vectorised loop runs exactly where the CPU has AVX2 and FMA (x86-64 builds with GCC or
// Clang); elsewhere both paths are the scalar loop and the comparisons below are skipped.
TEST(ForwardVectorised, RunsWhereTheCpuHasAvx2AndFma) {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  EXPECT_EQ(detail::forward_project_vectorised(),
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
  EXPECT_FALSE(detail::forward_project_vectorised());
#endif
}

#define SKIP_WITHOUT_VECTORISED_LOOP()       \
  if (!detail::forward_project_vectorised()) \
  GTEST_SKIP() << "no AVX2/FMA on this CPU: both paths run the scalar loop"

TEST(ForwardVectorised, MatchesScalarOnConeParallelVectorAndCylindrical) {
  SKIP_WITHOUT_VECTORISED_LOOP();
  const volume_geometry vg = odd_grid();
  const volume rnd = random_volume(vg, 1);
  const volume smooth = voxelize(shepp_logan_phantom(18), vg, 2);
  const geometry cone = make_cone_geometry(37, 29, 1.3, 1.2, 60, 120,
                                           angle_range(0.1, 2 * pi / 11, 11), {1.7}, {-0.9});
  const geometry curved =
      make_cone_geometry(37, 29, 1.3, 1.2, 60, 120, angle_range(0.3, 2 * pi / 9, 9), {2.1}, {0.4},
                         detector_shape::cylindrical);
  // Angles 0, pi/4, pi/2, pi, 3 pi/2: rays exactly along y and x, and along the diagonal (a tie
  // between x and y); plus oblique ones.
  const geometry par = make_parallel_geometry(
      31, 21, 0.9, 0.8, {0.0, pi / 4, pi / 2, pi, 1.5 * pi, 0.37, 2.2}, {0.3}, {0.2});
  std::vector<view_vectors> tilted;
  for (int i = 0; i < 7; ++i) {
    const double a = 2 * pi * i / 7;
    tilted.push_back({{70 * std::sin(a), -70 * std::cos(a), 2.0 * i},
                      {-50 * std::sin(a), 50 * std::cos(a), 1.0 * i - 3},
                      {std::cos(a) * 1.1, std::sin(a) * 1.1, 0.1},
                      {0.05, 0.0, 1.2}});
  }
  const geometry vec = make_vec_geometry(beam_kind::cone, 27, 19, tilted);
  const geometry steep = ctforge::testing::steep_parallel_geometry(27, 21, 7);  // z dominant
  for (const volume* vol : {&rnd, &smooth}) {
    const std::string kind = vol == &rnd ? " (random)" : " (phantom)";
    expect_loops_agree(*vol, cone, "cone" + kind);
    expect_loops_agree(*vol, curved, "cylindrical" + kind);
    expect_loops_agree(*vol, par, "parallel" + kind);
    expect_loops_agree(*vol, vec, "cone_vec tilted" + kind);
    expect_loops_agree(*vol, steep, "steep parallel" + kind);
  }
}

TEST(ForwardVectorised, MatchesScalarOnDegenerateDetectorsAndVolumes) {
  SKIP_WITHOUT_VECTORISED_LOOP();
  const volume_geometry vg = odd_grid();
  const volume rnd = random_volume(vg, 2);
  // One row, one column, one view, a one-pixel detector.
  expect_loops_agree(rnd, make_cone_geometry(41, 1, 1.1, 1.0, 60, 120, angle_range(0, 0.5, 6)),
                     "one row");
  expect_loops_agree(rnd, make_cone_geometry(1, 23, 1.1, 1.0, 60, 120, angle_range(0, 0.5, 6)),
                     "one column");
  expect_loops_agree(rnd, make_cone_geometry(29, 13, 1.1, 1.0, 60, 120, {0.7}), "one view");
  expect_loops_agree(rnd, make_parallel_geometry(1, 1, 1.0, 1.0, {0.2, 1.3}), "one pixel");
  // Volumes one voxel thick along each axis, and a single voxel: no tap pair inside, the
  // masked branch on every plane.
  const geometry cone = make_cone_geometry(21, 17, 0.8, 0.8, 60, 120, angle_range(0.2, 0.9, 7));
  for (const auto [nx, ny, nz] :
       {std::array<std::int64_t, 3>{9, 7, 1}, std::array<std::int64_t, 3>{1, 8, 6},
        std::array<std::int64_t, 3>{7, 1, 5}, std::array<std::int64_t, 3>{1, 1, 1}}) {
    const volume thin = random_volume(volume_geometry::centered(nx, ny, nz, {1, 1, 1}), 3);
    expect_loops_agree(thin, cone,
                       std::to_string(nx) + "x" + std::to_string(ny) + "x" + std::to_string(nz));
  }
}

TEST(ForwardVectorised, MatchesScalarOnRaysMissingOrCutAndMixedGroups) {
  SKIP_WITHOUT_VECTORISED_LOOP();
  const volume_geometry vg = odd_grid();
  const volume rnd = random_volume(vg, 4);
  // A detector shifted sideways: its left columns see the volume, the right ones miss it, and
  // groups of 8 hold both (lanes without a ray).
  const geometry half_off =
      make_parallel_geometry(40, 9, 1.0, 1.0, angle_range(0.1, 0.4, 5), {20.0}, {0.0});
  expect_loops_agree(rnd, half_off, "partly missing");
  // A source inside the volume: rays start there, the first cell counts in part (weights < 1).
  const geometry inside =
      make_vec_geometry(beam_kind::cone, 19, 17,
                        {{{0.3, -2, 0.2}, {0, 60, 0}, {3, 0, 0}, {0, 0, 3}},
                         {{1.1, 0.4, -0.6}, {-55, 20, 5}, {0.6, 2.2, 0.1}, {0.1, 0, 2.5}}});
  expect_loops_agree(rnd, inside, "source inside");
  // Views near 45 degrees: in many groups of 8 columns the dominant axis changes between x and
  // y. Wide fan (60 mm from the source to the isocentre).
  const geometry diag =
      make_cone_geometry(45, 11, 1.4, 1.4, 60, 120, {pi / 4 - 0.05, pi / 4, 3 * pi / 4 + 0.1});
  const int mixed = mixed_groups(diag, vg);
  std::printf("    %d groups of 8 rays with different dominant axes\n", mixed);
  EXPECT_GE(mixed, 10);  // the case is exercised
  expect_loops_agree(rnd, diag, "mixed groups");
}

// The slab decomposition (the GPU's, for volumes larger than its memory): each slab reads its
// own planes only, z-dominant rays included; both loops project each slab the same way.
TEST(ForwardVectorised, MatchesScalarSlabBySlab) {
  SKIP_WITHOUT_VECTORISED_LOOP();
  const volume_geometry vg = odd_grid();
  const volume rnd = random_volume(vg, 5);
  const geometry cone =
      make_cone_geometry(29, 25, 1.3, 1.3, 60, 110, angle_range(0.1, 2 * pi / 7, 7));
  const geometry steep = ctforge::testing::steep_parallel_geometry(27, 21, 5);
  for (const geometry* g : {&cone, &steep})
    for (std::int64_t slab : {1, 3, 5, 17}) {
      const projection_stack ref =
          detail::forward_project_slabs(rnd, *g, slab, 2, detail::forward_path::scalar);
      const projection_stack fast =
          detail::forward_project_slabs(rnd, *g, slab, 2, detail::forward_path::vectorised);
      EXPECT_LE(max_diff_over_peak(fast, ref), k_tol)
          << (g == &cone ? "cone" : "steep") << ", slabs of " << slab;
    }
}

// Each ray is computed by one thread from its own inputs: the thread count cannot change a bit.
TEST(ForwardVectorised, SameResultForAnyThreadCount) {
  const volume rnd = random_volume(odd_grid(), 6);
  const geometry cone =
      make_cone_geometry(37, 29, 1.3, 1.2, 60, 120, angle_range(0.1, 2 * pi / 5, 5));
  const projection_stack one = project(rnd, cone, detail::forward_path::vectorised, 1);
  EXPECT_EQ(project(rnd, cone, detail::forward_path::vectorised, 2).data, one.data);
  EXPECT_EQ(project(rnd, cone, detail::forward_path::vectorised, 3).data, one.data);
  // ctforge::forward_project runs the vectorised loop where the CPU has it.
  if (detail::forward_project_vectorised()) EXPECT_EQ(forward_project(rnd, cone, 2).data, one.data);
}

// Negative control: the comparison catches (1) a single ray off by 3x the tolerance and (2) the
// projection of a volume with one voxel 1 % off, i.e. the tolerance is far below the effect of
// an error in one tap, one weight or one plane of the walk.
TEST(ForwardVectorised, NegativeControlCatchesSmallErrors) {
  const volume_geometry vg = odd_grid();
  const volume rnd = random_volume(vg, 7);
  const geometry cone =
      make_cone_geometry(37, 29, 1.3, 1.2, 60, 120, angle_range(0.1, 2 * pi / 5, 5));
  const projection_stack ref = project(rnd, cone, detail::forward_path::scalar);
  projection_stack fast = project(rnd, cone, detail::forward_path::vectorised);
  ASSERT_LE(max_diff_over_peak(fast, ref), k_tol);
  double peak = 0;
  for (float x : ref.data) peak = std::max(peak, static_cast<double>(std::abs(x)));
  fast.at(2, 14, 18) += static_cast<float>(3 * k_tol * peak);
  EXPECT_GT(max_diff_over_peak(fast, ref), k_tol) << "one perturbed ray";

  volume off = rnd;
  off.at(8, 9, 11) *= 1.01f;  // (z, y, x): a voxel near the centre, seen by every view
  const double d = max_diff_over_peak(project(off, cone, detail::forward_path::vectorised), ref);
  std::printf("    one voxel 1 %% off: max diff / peak = %.2e\n", d);
  EXPECT_GT(d, 10 * k_tol) << "one voxel 1 % off";
}

}  // namespace
}  // namespace ctforge

// FBP (circular parallel beam) on the CPU against the voxelized analytic phantom.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/recon_quality.hpp"

using namespace ctforge;
using ctforge::testing::project_pixel_integrated;
using ctforge::testing::span_of;

namespace {

recon_options fbp_options() {
  return ctforge::testing::cpu_options(algorithm::fbp);
}

void check_quality(const volume& rec, const volume& truth, const geometry& g,
                   const std::string& label) {
  const ctforge::testing::quality q = ctforge::testing::compare_in_fov(rec, truth, g, label);
  EXPECT_LT(q.mae, ctforge::testing::k_max_mae) << label;
  EXPECT_GT(q.psnr, ctforge::testing::k_min_psnr) << label;
}

}  // namespace

// 2D: one detector row, 180 views over 180 deg, 256 pixels of 0.5 mm (128 mm field), the
// central slice of a 120 mm Shepp-Logan reconstructed on 256 x 256 x 1 voxels of 0.5 mm.
struct scan_case {
  std::string name;
  double range_deg;
  std::int64_t views;
};
class Fbp2D : public ::testing::TestWithParam<scan_case> {};

TEST_P(Fbp2D, SheppLoganSlice) {
  const auto c = GetParam();
  const phantom ph = shepp_logan_phantom(120);
  const geometry g = make_parallel_geometry(
      256, 1, 0.5, 0.5, angle_range(0.1, deg_to_rad(c.range_deg / c.views), c.views));
  const projection_stack p = project_pixel_integrated(ph, g, 2);
  for (std::int64_t v = 0; v < p.views; ++v) {  // not truncated
    ASSERT_EQ(p.at(v, 0, 0), 0.0f);
    ASSERT_EQ(p.at(v, 0, p.cols - 1), 0.0f);
  }
  const auto vg = volume_geometry::centered(256, 256, 1, {0.5, 0.5, 0.5});
  const volume rec = reconstruct(p, g, vg, fbp_options());
  check_quality(rec, voxelize(ph, vg, 3), g, "fbp_2d_" + c.name);
}

INSTANTIATE_TEST_SUITE_P(Scans, Fbp2D,
                         // 1 degree steps in every case (the angular sampling of the half scan)
                         ::testing::Values(scan_case{"half_180", 180, 180},
                                           scan_case{"full_360", 360, 360},
                                           scan_case{"parker_210", 210, 210}),
                         [](const auto& info) { return info.param.name; });

// 3D parallel beam with several rows: every slice is an independent 2D problem.
TEST(Fbp, SheppLoganSeveralRows) {
  const phantom ph = shepp_logan_phantom(120);
  const std::int64_t rows = 9;
  // Rows of 1 mm centred on z = -15 mm (offset_v), through the phantom's lower ellipsoids.
  const geometry g =
      make_parallel_geometry(128, rows, 1, 1, angle_range(0, deg_to_rad(1), 180), {}, {-15.0});
  const projection_stack p = project_pixel_integrated(ph, g, 2);
  volume_geometry vg = volume_geometry::centered(128, 128, rows, {1, 1, 1});
  vg.origin_mm[2] -= 15.0;
  const volume rec = reconstruct(p, g, vg, fbp_options());
  check_quality(rec, voxelize(ph, vg, 3), g, "fbp_3d_rows");
}

// A uniform cylinder (long along z) reconstructs to its density.
TEST(Fbp, UniformCylinderMeanIsDensity) {
  const double rho = 0.05;
  phantom ph;
  ph.ellipsoids.push_back({{0, 0, 0}, {45, 45, 1000}, 0, rho});
  const geometry g = make_parallel_geometry(64, 3, 2, 2, angle_range(0, deg_to_rad(2), 90));
  const auto vg = volume_geometry::centered(64, 64, 3, {2, 2, 2});
  const volume rec = reconstruct(project_analytic(ph, g), g, vg, fbp_options());
  double sum = 0;
  int n = 0;
  for (int k = 0; k < 3; ++k)
    for (int j = 27; j < 37; ++j)
      for (int i = 27; i < 37; ++i, ++n) sum += rec.at(k, j, i);
  const double mean = sum / n;
  std::cout << "[ metric   ] fbp cylinder: centre mean " << mean << " /mm (density " << rho
            << ")\n";
  // 1 %: exact DC of the band-limited ramp; the rest is the sampling of the disc's edge.
  EXPECT_NEAR(mean, rho, 0.01 * rho);
}

TEST(Fbp, ScanShorterThan180IsRejected) {
  const geometry g = make_parallel_geometry(16, 1, 1, 1, angle_range(0, deg_to_rad(1), 170));
  try {
    reconstruct(projection_stack(170, 1, 16), g, volume_geometry::centered(8, 8, 1, {1, 1, 1}),
                fbp_options());
    FAIL() << "no exception";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("180 deg"), std::string::npos) << e.what();
  }
}

TEST(Fbp, ExactHalfScanNeedsNoParkerWeights) {
  // 180 deg covered exactly: every line measured once, so all weights equal the angular step.
  const geometry g = make_parallel_geometry(16, 1, 1, 1, angle_range(0, deg_to_rad(1), 180));
  const auto s = detail::make_fdk_setup(projection_stack(180, 1, 16), g, fbp_options());
  EXPECT_FALSE(s.distance_weighting);
  EXPECT_DOUBLE_EQ(s.filter_pixel_mm, 1.0);
  projection_stack ones(180, 1, 16);
  std::fill(ones.data.begin(), ones.data.end(), 1.0f);
  detail::apply_preweights(s, ones);
  for (float w : ones.data) EXPECT_NEAR(w, deg_to_rad(1), 1e-6);
}

// Parallel beam measures each line twice over 360 deg (view t + 180 deg is view t mirrored), so
// with 1 deg steps a 360 deg scan (redundancy 1/2) and a 210 deg scan (Parker weights, gamma = 0)
// contain exactly the lines of the 180 deg scan, and weights of duplicated lines sum to 1:
// the three reconstructions must agree up to float rounding (1e-5 of the peak, mean absolute),
// a direct check of the full-scan and Parker weights.
TEST(Fbp, RedundantScansEqualHalfScan) {
  const phantom ph = shepp_logan_phantom(60);
  const auto vg = volume_geometry::centered(64, 64, 1, {1, 1, 1});
  auto recon = [&](std::int64_t views) {
    const geometry g = make_parallel_geometry(64, 1, 1, 1, angle_range(0, deg_to_rad(1), views));
    return reconstruct(project_analytic(ph, g), g, vg, fbp_options());
  };
  const volume half = recon(180), full = recon(360), parker = recon(210);
  const double peak = ctforge::testing::peak_abs(half.data);
  const double d_full = mean_abs_error(span_of(full), span_of(half));
  const double d_parker = mean_abs_error(span_of(parker), span_of(half));
  std::cout << "[ metric   ] 360 vs 180 deg: " << d_full << ", Parker 210 vs 180 deg: " << d_parker
            << " (peak " << peak << ")\n";
  EXPECT_LT(d_full, 1e-5 * peak);
  EXPECT_LT(d_parker, 1e-5 * peak);
}

// Odd sizes, one row, a single view (treated as a full scan sampled once): runs, finite, and the
// fast path equals the double-precision reference (1e-5 of the peak, mean absolute difference:
// float vs double accumulation over at most a few hundred views).
struct fbp_size_case {
  std::int64_t cols, rows, views, nx, ny, nz;
  double range_deg;
};
class FbpSizes : public ::testing::TestWithParam<fbp_size_case> {};

TEST_P(FbpSizes, FastMatchesReference) {
  const auto c = GetParam();
  const geometry g = make_parallel_geometry(
      c.cols, c.rows, 1, 1, angle_range(0.4, deg_to_rad(c.range_deg / c.views), c.views));
  phantom ph;
  const double w = static_cast<double>(c.cols);
  ph.ellipsoids.push_back(
      {{0.05 * w, -0.05 * w, 0}, {0.4 * w, 0.3 * w, 0.4 * c.rows + 1}, 25, 0.05});
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {1, 1, 1});
  const projection_stack p = project_analytic(ph, g);
  recon_options opt = fbp_options();
  const volume fast = reconstruct(p, g, vg, opt);
  opt.reference = true;
  const volume ref = reconstruct(p, g, vg, opt);
  ctforge::testing::expect_fast_matches_reference(fast, ref);
}

INSTANTIATE_TEST_SUITE_P(Odd, FbpSizes,
                         ::testing::Values(fbp_size_case{37, 1, 1, 17, 9, 1, 360},  // single view
                                           fbp_size_case{1, 1, 1, 1, 1, 1, 360},    // 1 pixel
                                           fbp_size_case{45, 5, 91, 31, 29, 5, 180},
                                           fbp_size_case{29, 3, 70, 13, 1, 3, 233}
                                           // Parker, ny = 1
                                           ));

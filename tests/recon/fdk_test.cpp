// FDK (cone / fan beam) on the CPU: accuracy against the voxelized analytic phantom, scaling,
// Parker weights, fast vs reference path, validation, real data (HTC 2022).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "math/fdk_weights.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/recon_quality.hpp"

using namespace ctforge;
using ctforge::testing::compare_in_fov;
using ctforge::testing::k_max_mae;
using ctforge::testing::k_min_psnr;
using ctforge::testing::k_peak;
using ctforge::testing::project_pixel_integrated;
using ctforge::testing::quality;
using ctforge::testing::span_of;

namespace {

constexpr double k_pi = std::numbers::pi;

recon_options cpu_options(algorithm a = algorithm::fdk) {
  return ctforge::testing::cpu_options(a);
}

// Scanner of the Shepp-Logan tests: 128 x 128 pixels of 2 mm at SDD 1000, SID 500, so the
// pixel pitch at the isocentre is 1 mm and the detector sees a 128 mm wide field.
constexpr std::int64_t k_det = 128;
constexpr double k_sid = 500, k_sdd = 1000, k_du = 2;
// Phantom edge 120 mm: the outer ellipsoid's semi-axes are 41.4 x 55.2 x 54 mm.
constexpr double k_phantom_mm = 120;

// The phantom must be seen completely by every view (no truncation): the outermost pixels of
// the analytic projections are zero.
void expect_not_truncated(const projection_stack& p) {
  double border = 0;
  for (std::int64_t v = 0; v < p.views; ++v) {
    for (std::int64_t r = 0; r < p.rows; ++r)
      border = std::max({border, double(p.at(v, r, 0)), double(p.at(v, r, p.cols - 1))});
    if (p.rows > 1)
      for (std::int64_t c = 0; c < p.cols; ++c)
        border = std::max({border, double(p.at(v, 0, c)), double(p.at(v, p.rows - 1, c))});
  }
  ASSERT_EQ(border, 0.0) << "phantom truncated by the detector";
}

volume shepp_logan_fdk(const geometry& g, const recon_options& opt, const volume_geometry& vg,
                       const phantom& ph) {
  const projection_stack p = project_pixel_integrated(ph, g, 2);
  expect_not_truncated(p);
  return reconstruct(p, g, vg, opt);
}

}  // namespace

// ---- Shepp-Logan, 180 views over 360 deg -----------------------------------------------------

TEST(Fdk, SheppLoganFullScan) {
  const phantom ph = shepp_logan_phantom(k_phantom_mm);
  const geometry g = make_cone_geometry(k_det, k_det, k_du, k_du, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(2), 180));
  const auto vg = volume_geometry::centered(128, 128, 128, {1, 1, 1});
  const volume rec = shepp_logan_fdk(g, cpu_options(), vg, ph);
  const volume truth = voxelize(ph, vg, 2);
  const quality q = compare_in_fov(rec, truth, g, "fdk_full_scan");
  EXPECT_LT(q.mae, k_max_mae);
  EXPECT_GT(q.psnr, k_min_psnr);
}

TEST(Fdk, SheppLoganDetectorOffsets) {
  // Offsets of a few mm in u and v (per view, varying), small enough that the shifted detector
  // still covers the phantom (checked by expect_not_truncated).
  const std::int64_t n = 180;
  std::vector<double> ou(n), ov(n);
  for (std::int64_t i = 0; i < n; ++i) {
    ou[static_cast<std::size_t>(i)] = 4.0 + std::sin(0.1 * static_cast<double>(i));
    ov[static_cast<std::size_t>(i)] = -3.0;
  }
  const phantom ph = shepp_logan_phantom(k_phantom_mm);
  const geometry g = make_cone_geometry(k_det, k_det, k_du, k_du, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(2), n), ou, ov);
  const auto vg = volume_geometry::centered(128, 128, 128, {1, 1, 1});
  const volume rec = shepp_logan_fdk(g, cpu_options(), vg, ph);
  const quality q = compare_in_fov(rec, voxelize(ph, vg, 2), g, "fdk_offsets");
  EXPECT_LT(q.mae, k_max_mae);
  EXPECT_GT(q.psnr, k_min_psnr);
}

// Short scan: 180 deg + fan angle + a few degrees, Parker weights. Run with increasing and
// decreasing angles and a start angle away from 0: a wrong sign convention for gamma (conjugate
// ray) or for the scan direction leaves wedge-shaped streaks and fails the thresholds.
struct short_scan_case {
  double start_deg;
  double direction;  // +1 increasing angles, -1 decreasing
};
class FdkShortScan : public ::testing::TestWithParam<short_scan_case> {};

TEST_P(FdkShortScan, SheppLogan) {
  const auto c = GetParam();
  const double fan_deg = 2 * rad_to_deg(std::atan(0.5 * (k_det - 1) * k_du / k_sdd));
  const double range_deg = 180 + fan_deg + 6;  // covered arc = views * step
  const std::int64_t views = 110;
  const double step = deg_to_rad(range_deg / views) * c.direction;
  const phantom ph = shepp_logan_phantom(k_phantom_mm);
  const geometry g = make_cone_geometry(k_det, k_det, k_du, k_du, k_sid, k_sdd,
                                        angle_range(deg_to_rad(c.start_deg), step, views));
  const auto setup =
      detail::make_fdk_setup(projection_stack(views, k_det, k_det), g, cpu_options());
  ASSERT_FALSE(setup.full_scan);
  EXPECT_NEAR(rad_to_deg(setup.scan_range_rad), range_deg, 1e-9);
  EXPECT_NEAR(2 * rad_to_deg(setup.fan_half_angle_rad), fan_deg, 1e-9);
  const auto vg = volume_geometry::centered(128, 128, 128, {1, 1, 1});
  const volume rec = shepp_logan_fdk(g, cpu_options(), vg, ph);
  const quality q =
      compare_in_fov(rec, voxelize(ph, vg, 2), g,
                     c.direction > 0 ? "fdk_short_scan_increasing" : "fdk_short_scan_decreasing");
  // Short-scan FDK is exact only in the mid-plane: away from it the error grows (data
  // insufficiency of the circular short scan), so RTK's own short-scan test (rtkshortscantest)
  // relaxes its bounds to MAE < 0.09, PSNR > 22 dB at peak 2, i.e. 0.0045 and 22 dB for us.
  // We keep the full-scan PSNR bound and use MAE < 0.0025, both of which a reversed Parker
  // convention (gamma_sign flipped) fails: measured 0.0034 MAE and 24.2 dB with it.
  EXPECT_LT(q.mae, 0.0025);
  EXPECT_GT(q.psnr, k_min_psnr);
}

INSTANTIATE_TEST_SUITE_P(Directions, FdkShortScan,
                         ::testing::Values(short_scan_case{0, +1}, short_scan_case{37, -1}));

// ---- Parker weights: geometric check of the conjugate-ray convention ---------------------------
// For a ray of a short scan (source at angle t, detector column a), find the conjugate ray from
// the geometry itself: the line's second intersection with the source circle gives t', and the
// projection matrix of a view at t' gives the column a' where the line hits that detector.
// Parker weights of a ray and its conjugate must sum to 1 (0 for rays outside the scan), which
// holds only with the right conjugate convention in kernels::parker_weight.
TEST(FdkParker, ConjugateRaysSumToOne) {
  for (double dir : {+1.0, -1.0}) {
    const std::int64_t cols = 64;
    const double du = 4, sid = 300, sdd = 600;
    const double t0 = deg_to_rad(20);
    const geometry g =
        make_cone_geometry(cols, 1, du, du, sid, sdd, angle_range(t0, dir * deg_to_rad(2.5), 90));
    const auto setup = detail::make_fdk_setup(projection_stack(90, 1, cols), g, cpu_options());
    ASSERT_FALSE(setup.full_scan);
    const double half_step = 0.5 * setup.scan_range_rad / 90;
    const double delta = setup.params.parker_delta;
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> ub(0, k_pi + 2 * delta),
        ua(-0.5 * (cols - 1) * du, 0.5 * (cols - 1) * du);
    int checked = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      const double beta = ub(rng), a = ua(rng);
      const double t = t0 + dir * (beta - half_step);
      const geometry gt = make_cone_geometry(cols, 1, du, du, sid, sdd, {t});
      const vec3 s = gt.views[0].source;
      const vec3 px = gt.views[0].detector_center + (a / du) * gt.views[0].u;
      const vec3 d = px - s;
      // Second intersection of s + l d with the circle |x_xy| = sid (z = 0).
      const double l = -2 * (s.x * d.x + s.y * d.y) / (d.x * d.x + d.y * d.y);
      const vec3 s2 = s + l * d;
      double t2 = std::atan2(s2.x, -s2.y);  // source = sid (sin t, -cos t, 0)
      // beta' = dir * (t2 - t0) + half_step, reduced to [0, 2 pi)
      double beta2 = std::fmod(dir * (t2 - t0) + half_step, 2 * k_pi);
      if (beta2 < 0) beta2 += 2 * k_pi;
      const geometry g2 = make_cone_geometry(cols, 1, du, du, sid, sdd, {t2});
      const auto m = compute_projection_matrix(g2, 0);
      const vec3 mid = s + 0.5 * l * d;  // a point on the line between both sources
      const double p0 = m[0] * mid.x + m[1] * mid.y + m[2] * mid.z + m[3];
      const double p2 = m[8] * mid.x + m[9] * mid.y + m[10] * mid.z + m[11];
      const double a2 = (p0 / p2 - 0.5 * (cols - 1)) * du;
      const float gamma = setup.params.gamma_sign * std::atan(a / sdd);
      const float gamma2 = setup.params.gamma_sign * std::atan(a2 / sdd);
      const double w =
          kernels::parker_weight(static_cast<float>(beta), gamma, setup.params.parker_delta);
      const double w2 =
          kernels::parker_weight(static_cast<float>(beta2), gamma2, setup.params.parker_delta);
      // float evaluation of sin^2 and of beta near the region boundaries: 1e-4
      ASSERT_NEAR(w + w2, 1.0, 1e-4)
          << "dir " << dir << " beta " << beta << " a " << a << " beta' " << beta2 << " a' " << a2;
      ++checked;
    }
    EXPECT_EQ(checked, 2000);
  }
}

// ---- scaling: a uniform object reconstructs to its density -----------------------------------

struct uniform_case {
  std::string name;
  std::int64_t rows, nz;
  double range_deg;
  std::int64_t views;
};
class FdkUniform : public ::testing::TestWithParam<uniform_case> {};

TEST_P(FdkUniform, SphereMeanIsDensity) {
  const auto c = GetParam();
  const double rho = 0.02;  // water, 1/mm
  phantom ph;
  ph.ellipsoids.push_back({{0, 0, 0}, {40, 40, 40}, 0, rho});
  // 64 pixels of 4 mm at SDD 600, SID 300: 2 mm at the isocentre, 128 mm field.
  const geometry g = make_cone_geometry(64, c.rows, 4, 4, 300, 600,
                                        angle_range(0, deg_to_rad(c.range_deg / c.views), c.views));
  const auto vg = volume_geometry::centered(64, 64, c.nz, {2, 2, 2});
  const volume rec = reconstruct(project_analytic(ph, g), g, vg, cpu_options());
  // Mean over the central 10 x 10 (x nz <= 10) voxels, 20 mm wide: far from the sphere's edge.
  double sum = 0;
  std::int64_t n = 0;
  const std::int64_t kz0 = c.nz / 2 - std::min<std::int64_t>(5, c.nz / 2);
  const std::int64_t kz1 = std::min<std::int64_t>(c.nz, kz0 + 10);
  for (std::int64_t k = kz0; k < kz1; ++k)
    for (std::int64_t j = 27; j < 37; ++j)
      for (std::int64_t i = 27; i < 37; ++i, ++n) sum += rec.at(k, j, i);
  const double mean = sum / static_cast<double>(n);
  std::cout << "[ metric   ] " << c.name << ": centre mean " << mean << " /mm (density " << rho
            << ", rel. error " << (mean / rho - 1) << ")\n";
  // 1 %: the band-limited ramp filter has the exact DC term and the weights sum to the arc, so
  // the remaining error is the sampling of the sphere edge (a few 0.1 %).
  EXPECT_NEAR(mean, rho, 0.01 * rho);
}

INSTANTIATE_TEST_SUITE_P(Scans, FdkUniform,
                         ::testing::Values(uniform_case{"cone_full", 64, 64, 360, 120},
                                           uniform_case{"fan_full", 1, 1, 360, 120},
                                           uniform_case{"cone_short", 64, 64, 240, 100},
                                           uniform_case{"fan_short_odd_views", 1, 1, 215, 77}),
                         [](const auto& info) { return info.param.name; });

// ---- fast path vs reference path ------------------------------------------------------------

TEST(Fdk, FastMatchesReference) {
  const phantom ph = shepp_logan_phantom(120);
  const geometry g = make_cone_geometry(64, 64, 4, 4, 500, 1000, angle_range(0, deg_to_rad(4), 90));
  const auto vg = volume_geometry::centered(64, 64, 64, {2, 2, 2});
  const projection_stack p = project_analytic(ph, g);
  recon_options opt = cpu_options();
  const volume fast = reconstruct(p, g, vg, opt);
  opt.reference = true;
  const volume ref = reconstruct(p, g, vg, opt);
  const double mad = mean_abs_error(span_of(fast), span_of(ref));
  std::cout << "[ metric   ] fast vs reference: mean abs diff " << mad << " /mm\n";
  // Float matrices and float accumulation vs double: differences of order 1e-7 relative per
  // view; the criterion is 1e-5 of the phantom's peak (0.1 /mm).
  EXPECT_LT(mad, 1e-5 * k_peak);
}

// The fast path skips voxels whose projection misses the detector; a volume reaching well
// beyond the field of view (shifted origin, detector offsets, slices outside the cone) must
// still match the reference, which visits every voxel.
TEST(Fdk, FastMatchesReferenceBeyondFieldOfView) {
  const geometry g = make_cone_geometry(48, 40, 2, 2, 300, 600, angle_range(0.2, deg_to_rad(5), 72),
                                        {5.0}, {-3.0});
  phantom ph;
  ph.ellipsoids.push_back({{3, -2, 1}, {18, 14, 16}, 30, 0.04});
  volume_geometry vg = volume_geometry::centered(61, 47, 39, {1.5, 1.5, 1.5});
  vg.origin_mm[0] += 11;
  vg.origin_mm[2] -= 7;
  const projection_stack p = project_analytic(ph, g);
  recon_options opt = cpu_options();
  const volume fast = reconstruct(p, g, vg, opt);
  opt.reference = true;
  const volume ref = reconstruct(p, g, vg, opt);
  const double peak = ctforge::testing::peak_abs(ref.data);
  // Same criterion as FastMatchesReference: 1e-5 of the peak, mean absolute difference; and
  // no voxel far off (a skipped contributing voxel would differ by a sizeable fraction).
  EXPECT_LT(mean_abs_error(span_of(fast), span_of(ref)), 1e-5 * peak);
  double worst = 0;
  for (std::size_t i = 0; i < ref.data.size(); ++i)
    worst = std::max(worst, double(std::abs(fast.data[i] - ref.data[i])));
  EXPECT_LT(worst, 1e-3 * peak);
}

// Odd sizes, size-1 dimensions and a single view: runs, finite, and fast == reference.
struct size_case {
  std::int64_t cols, rows, views, nx, ny, nz;
  double range_deg;
};
class FdkSizes : public ::testing::TestWithParam<size_case> {};

TEST_P(FdkSizes, FastMatchesReference) {
  const auto c = GetParam();
  // 2 mm pixels at magnification 2: 1 mm at the isocentre; phantom fits in the smaller of the
  // detector width and height.
  const geometry g =
      make_cone_geometry(c.cols, c.rows, 2, 2, 500, 1000,
                         angle_range(0.3, deg_to_rad(c.range_deg / c.views), c.views));
  phantom ph;
  const double w = static_cast<double>(c.cols);
  ph.ellipsoids.push_back(
      {{0.05 * w, -0.05 * w, 0}, {0.4 * w, 0.3 * w, 0.4 * c.rows + 1}, 20, 0.05});
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {1, 1, 1});
  const projection_stack p = project_analytic(ph, g);
  recon_options opt = cpu_options();
  const volume fast = reconstruct(p, g, vg, opt);
  opt.reference = true;
  const volume ref = reconstruct(p, g, vg, opt);
  ASSERT_EQ(fast.data.size(), static_cast<std::size_t>(c.nx * c.ny * c.nz));
  ctforge::testing::expect_fast_matches_reference(fast, ref);
}

INSTANTIATE_TEST_SUITE_P(Odd, FdkSizes,
                         ::testing::Values(size_case{37, 23, 1, 17, 9, 5, 360},    // single view
                                           size_case{1, 1, 1, 1, 1, 1, 360},       // 1 pixel
                                           size_case{33, 1, 7, 15, 15, 1, 360},    // fan, 7 views
                                           size_case{41, 3, 45, 31, 1, 3, 360},    // ny = 1
                                           size_case{33, 1, 20, 15, 15, 4, 360},   // fan, nz = 4
                                           size_case{29, 17, 61, 13, 21, 11, 215}  // short scan
                                           ));

// ---- fan beam (rows = 1, nz = 1): the central slice of the Shepp-Logan -------------------------

TEST(Fdk, FanBeamSheppLogan2D) {
  const phantom ph = shepp_logan_phantom(k_phantom_mm);
  const geometry g = make_cone_geometry(k_det * 2, 1, k_du / 2, k_du / 2, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(1), 360));
  const auto vg = volume_geometry::centered(256, 256, 1, {0.5, 0.5, 0.5});
  const volume rec = shepp_logan_fdk(g, cpu_options(), vg, ph);
  const quality q = compare_in_fov(rec, voxelize(ph, vg, 3), g, "fdk_fan_2d");
  EXPECT_LT(q.mae, k_max_mae);
  EXPECT_GT(q.psnr, k_min_psnr);
}

// ---- determinism, threads and progress
// -----------------------------------------------------------

TEST(Fdk, ThreadsAndProgress) {
  const phantom ph = shepp_logan_phantom(60);
  const geometry g = make_cone_geometry(48, 40, 2, 2, 500, 1000, angle_range(0, deg_to_rad(6), 60));
  const auto vg = volume_geometry::centered(33, 35, 29, {1.5, 1.5, 1.5});
  const projection_stack p = project_analytic(ph, g);
  recon_options opt = cpu_options();
  std::vector<double> calls;
  opt.progress = [&](double f) { calls.push_back(f); };
  opt.threads = 1;
  const volume one = reconstruct(p, g, vg, opt);
  opt.threads = 2;
  const volume two = reconstruct(p, g, vg, opt);
  // Each voxel sums its views in the same order whatever the thread count: bitwise equal.
  EXPECT_EQ(one.data, two.data);
  ASSERT_GE(calls.size(), 4u);
  EXPECT_TRUE(std::is_sorted(calls.begin(), calls.begin() + static_cast<long>(calls.size() / 2)));
  EXPECT_DOUBLE_EQ(calls[calls.size() / 2 - 1], 1.0);
  EXPECT_DOUBLE_EQ(calls.back(), 1.0);
  for (double f : calls) EXPECT_TRUE(f >= 0 && f <= 1);
}

// ---- validation --------------------------------------------------------------------------------

namespace {
template <class F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const usage_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST(FdkValidation, RejectsBadInput) {
  const geometry g = make_cone_geometry(16, 8, 2, 2, 500, 1000, angle_range(0, deg_to_rad(10), 36));
  const auto vg = volume_geometry::centered(8, 8, 8, {1, 1, 1});
  projection_stack p(36, 8, 16);

  std::string m =
      usage_message([&] { reconstruct(projection_stack(36, 8, 15), g, vg, cpu_options()); });
  EXPECT_TRUE(contains(m, "36x8x15") && contains(m, "36x8x16")) << m;

  m = usage_message([&] { reconstruct(p, g, vg, cpu_options(algorithm::fbp)); });
  EXPECT_TRUE(contains(m, "parallel") && contains(m, "'cone'")) << m;

  const geometry par = make_parallel_geometry(16, 8, 1, 1, angle_range(0, deg_to_rad(5), 36));
  m = usage_message([&] { reconstruct(p, par, vg, cpu_options()); });
  EXPECT_TRUE(contains(m, "cone") && contains(m, "'parallel'")) << m;

  // A cone_vec scan whose sources climb (a helix) has no circular orbit: refused, naming the
  // type (circular cone_vec scans reconstruct: fdk_geometry_test.cpp).
  std::vector<view_vectors> vv(g.views.begin(), g.views.end());
  for (std::size_t i = 0; i < vv.size(); ++i) {
    const vec3 up{0, 0, 2.0 * static_cast<double>(i)};
    vv[i].source = vv[i].source + up;
    vv[i].detector_center = vv[i].detector_center + up;
  }
  const geometry vec = make_vec_geometry(beam_kind::cone, 16, 8, vv);
  m = usage_message([&] { reconstruct(p, vec, vg, cpu_options()); });
  EXPECT_TRUE(contains(m, "cone_vec") && contains(m, "circular orbit")) << m;

  for (double cutoff : {0.0, -0.5, 1.5, std::nan("")}) {
    recon_options o = cpu_options();
    o.cutoff = cutoff;
    m = usage_message([&] { reconstruct(p, g, vg, o); });
    EXPECT_TRUE(contains(m, "--cutoff")) << m;
  }

  projection_stack bad = p;
  bad.at(2, 3, 4) = std::numeric_limits<float>::quiet_NaN();
  bad.at(5, 0, 0) = std::numeric_limits<float>::infinity();
  m = usage_message([&] { reconstruct(bad, g, vg, cpu_options()); });
  EXPECT_TRUE(contains(m, "view 2, row 3, col 4")) << m;

  // Short scan below 180 deg + fan angle (fan = 2 atan(15 / 1000) = 1.72 deg).
  const geometry short_g =
      make_cone_geometry(16, 8, 2, 2, 500, 1000, angle_range(0, deg_to_rad(1), 181));
  m = usage_message([&] { reconstruct(projection_stack(181, 8, 16), short_g, vg, cpu_options()); });
  EXPECT_TRUE(contains(m, "181.000 deg") && contains(m, "fan angle")) << m;

  std::vector<double> zigzag = angle_range(0, deg_to_rad(10), 36);
  std::swap(zigzag[3], zigzag[4]);
  const geometry zz = make_cone_geometry(16, 8, 2, 2, 500, 1000, zigzag);
  m = usage_message([&] { reconstruct(p, zz, vg, cpu_options()); });
  EXPECT_TRUE(contains(m, "angles_deg") && contains(m, "strictly increasing") &&
              contains(m, "views 3 and 4"))
      << m;

  recon_options neg = cpu_options();
  neg.threads = -1;
  m = usage_message([&] { reconstruct(p, g, vg, neg); });
  EXPECT_TRUE(contains(m, "threads")) << m;
}

TEST(FdkValidation, ShortScanJustAboveMinimumIsAccepted) {
  // fan angle 2 atan(7.5 * 2 / 1000); range = 180 deg + fan + 0.5 deg.
  const double fan = 2 * std::atan(15.0 / 1000);
  const std::int64_t n = 100;
  const double range = k_pi + fan + deg_to_rad(0.5);
  const geometry g = make_cone_geometry(16, 8, 2, 2, 500, 1000, angle_range(0, range / n, n));
  const auto s = detail::make_fdk_setup(projection_stack(n, 8, 16), g, cpu_options());
  EXPECT_FALSE(s.full_scan);
  EXPECT_NEAR(s.params.parker_delta, 0.5 * (range - k_pi), 1e-6);
  EXPECT_NEAR(s.fan_half_angle_rad, 0.5 * fan, 1e-12);
  // Angular weights sum to the covered arc; cone scale includes (SID/SDD)^2 = 1/4.
  double sum = 0;
  for (const auto& v : s.views) sum += v.scale;
  EXPECT_NEAR(sum, 0.25 * range, 1e-5);
  EXPECT_NEAR(s.filter_pixel_mm, 1.0, 1e-12);  // 2 mm * 500 / 1000
}

TEST(FdkSetup, NonUniformFullScanWeightsSumToArc) {
  // Non-uniform angles covering 360 deg: the weights are half the distance between neighbours.
  std::vector<double> a;
  // Jittered steps; first and last at 0 and 99/100 of the turn, so the covered arc is 360 deg.
  for (int i = 0; i < 100; ++i)
    a.push_back(2 * k_pi * (i + (i > 0 && i < 99 ? 0.3 * std::sin(i) : 0.0)) / 100.0);
  const double mean_step = (a.back() - a.front()) / 99;
  const geometry g = make_cone_geometry(16, 1, 2, 2, 500, 1000, a);
  const auto s = detail::make_fdk_setup(projection_stack(100, 1, 16), g, cpu_options());
  double sum = 0;
  for (const auto& v : s.views) sum += v.scale;
  const double arc = a.back() - a.front() + mean_step;
  // full scan: redundancy 1/2, (SID/SDD)^2 = 1/4
  EXPECT_NEAR(sum, 0.125 * arc, 1e-5);
  EXPECT_NEAR(s.views[10].scale, 0.125 * 0.5 * (a[11] - a[9]), 1e-7);
  EXPECT_LT(s.params.parker_delta, 0);
}

// ---- backend selection and option parsing ------------------------------------------------------

// Without a usable device: auto falls back to the CPU with a notice; cuda is refused (a usage
// error in a CUDA-less build, a runtime error naming the reason in a CUDA build), by
// resolve_backend and by reconstruct alike. With a device (CUDA build), auto picks it.
TEST(FdkBackend, Resolve) {
  std::string notice = "stale";
  EXPECT_EQ(resolve_backend(backend::cpu, &notice), backend::cpu);
  EXPECT_TRUE(notice.empty());
  EXPECT_EQ(parse_backend("CUDA"), backend::cuda);
  EXPECT_EQ(parse_backend("auto"), backend::automatic);
  EXPECT_THROW(parse_backend("opencl"), usage_error);
  const geometry g = make_cone_geometry(8, 4, 2, 2, 500, 1000, angle_range(0, deg_to_rad(10), 36));
  recon_options o = cpu_options();
  o.where = backend::cuda;
  const auto run_cuda = [&] {
    (void)reconstruct(projection_stack(36, 4, 8), g, volume_geometry::centered(4, 4, 4, {1, 1, 1}),
                      o);
  };
#if defined(CTFORGE_WITH_CUDA)
  if (detail::cuda_device_available(nullptr, 0)) {
    EXPECT_EQ(resolve_backend(backend::automatic, &notice), backend::cuda);
    EXPECT_TRUE(notice.empty());
    GTEST_SKIP() << "a usable CUDA device is present: the fallback is not testable here";
  }
  EXPECT_EQ(resolve_backend(backend::automatic, &notice), backend::cpu);
  EXPECT_TRUE(notice.find("no usable CUDA device") != std::string::npos ||
              notice.find("no CUDA device found") != std::string::npos)
      << notice;
  EXPECT_NE(notice.find("using the CPU"), std::string::npos) << notice;
  try {
    resolve_backend(backend::cuda);
    ADD_FAILURE() << "expected ctforge::error";
  } catch (const usage_error& e) {
    ADD_FAILURE() << "not a usage error: " << e.what();
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("--backend cuda: no usable CUDA device"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(run_cuda(), ctforge::error);
  // No GPU call can have run: nothing to describe (the CLI prints nothing then).
  EXPECT_EQ(describe_last_gpu_call(gpu_call::reconstruction), "");
  EXPECT_EQ(describe_last_gpu_call(gpu_call::forward_projection), "");
#else
  const std::string m = usage_message([] { resolve_backend(backend::cuda); });
  EXPECT_EQ(m, "--backend cuda: this build has no CUDA backend");
  EXPECT_EQ(resolve_backend(backend::automatic, &notice), backend::cpu);
  EXPECT_FALSE(notice.empty());
  EXPECT_THROW(run_cuda(), usage_error);
  EXPECT_EQ(describe_last_gpu_call(gpu_call::reconstruction), "");
  EXPECT_EQ(describe_last_gpu_call(gpu_call::forward_projection), "");
#endif
}

// pinned_host_range without a usable device (or without the CUDA backend) pins nothing and
// is harmless to create, move and destroy; with a device, CudaPipeline.PageLockedInput* covers
// it.
TEST(PinnedHostRange, WithoutADeviceNothingIsPinned) {
#if defined(CTFORGE_WITH_CUDA)
  if (detail::cuda_device_available(nullptr, 0)) GTEST_SKIP() << "a usable CUDA device is present";
#endif
  std::vector<float> data(1000, 1.0f);
  pinned_host_range a(data.data(), data.size() * sizeof(float));
  EXPECT_FALSE(a.active());
  EXPECT_FALSE(a.why_not().empty()) << "the reason nothing was pinned";
  pinned_host_range b = std::move(a);
  EXPECT_FALSE(b.active());
  EXPECT_FALSE(b.why_not().empty());
  const pinned_host_range empty(nullptr, 0);
  EXPECT_FALSE(empty.active());
}

// The parallel scan for non-finite values: over several chunks (2.2 M floats, chunks of 1 M),
// with one or two threads, it names the first bad value (not the first bad chunk's scan order)
// and lets every finite value through (largest float, denormals, negative zero).
TEST(FdkValidation, NonFiniteScanNamesTheFirstBadValue) {
  projection_stack p(7, 450, 700);
  for (std::size_t i = 0; i < p.data.size(); ++i) p.data[i] = static_cast<float>(i % 97) - 40.0f;
  p.at(0, 0, 0) = std::numeric_limits<float>::max();
  p.at(0, 0, 1) = std::numeric_limits<float>::denorm_min();
  p.at(0, 0, 2) = -0.0f;
  for (int threads : {1, 2}) EXPECT_NO_THROW(detail::check_finite_values(p, threads)) << threads;
  p.at(6, 449, 699) = -std::numeric_limits<float>::infinity();  // last chunk
  EXPECT_TRUE(contains(usage_message([&] { detail::check_finite_values(p, 2); }),
                       "view 6, row 449, col 699"));
  p.at(4, 10, 3) = std::numeric_limits<float>::quiet_NaN();  // earlier chunk
  for (int threads : {1, 2}) {
    const std::string m = usage_message([&] { detail::check_finite_values(p, threads); });
    EXPECT_TRUE(contains(m, "view 4, row 10, col 3")) << m;
    EXPECT_TRUE(contains(m, "non-finite value (nan)")) << m;
  }
}

TEST(FdkOptions, Parse) {
  for (auto w : {filter_window::ram_lak, filter_window::shepp_logan, filter_window::cosine,
                 filter_window::hamming, filter_window::hann})
    EXPECT_EQ(parse_filter(to_string(w)), w);
  EXPECT_EQ(to_string(filter_window::shepp_logan), "shepp-logan");
  EXPECT_EQ(parse_filter("Ram_Lak"), filter_window::ram_lak);
  EXPECT_THROW(parse_filter("gauss"), usage_error);
  EXPECT_EQ(parse_algorithm("fdk"), algorithm::fdk);
  EXPECT_EQ(parse_algorithm("FBP"), algorithm::fbp);
  EXPECT_THROW(parse_algorithm("sart"), usage_error);
  EXPECT_EQ(parse_backend("auto"), backend::automatic);
  EXPECT_EQ(parse_backend("cpu"), backend::cpu);
  EXPECT_EQ(parse_backend("cuda"), backend::cuda);
  EXPECT_TRUE(contains(usage_message([] { parse_backend("opencl"); }), "opencl"));
}

// ---- real data: HTC 2022 acrylic disc (fan beam) vs the organisers' reference FBP --------------
// Data: Helsinki Tomography Challenge 2022, University of Helsinki Industrial Mathematics CT
// Laboratory, Zenodo record 8041800 (CC BY); see shared/data/README.md.
TEST(FdkRealData, Htc2022MatchesReferenceFbp) {
  const std::string dir = CTFORGE_DATA_DIR "/htc2022/";
  const io::projection_file pf = io::read_projections(dir + "htc2022_ta.h5");
  ASSERT_TRUE(pf.geom.has_value());
  const geometry& g = *pf.geom;
  ASSERT_EQ(g.rows, 1);
  const auto vg = volume_geometry::centered(128, 128, 1, {0.6, 0.6, 0.6});
  const volume rec = reconstruct(pf.projections, g, vg, cpu_options());
  const volume ref = io::read_volume(dir + "htc2022_ta_recon_fbp_reference.h5");
  ASSERT_EQ(ref.geom.nx, 512);
  ASSERT_EQ(ref.geom.ny, 512);
  // Reference downsampled 4x (mean of 4x4 blocks), rows flipped (its row 0 is at +y).
  std::vector<float> down(128 * 128);
  for (int j = 0; j < 128; ++j)
    for (int i = 0; i < 128; ++i) {
      double s = 0;
      for (int b = 0; b < 4; ++b)
        for (int a = 0; a < 4; ++a) s += ref.at(0, 4 * j + b, 4 * i + a);
      down[static_cast<std::size_t>((127 - j) * 128 + i)] = static_cast<float>(s / 16);
    }
  const double r = correlation(span_of(rec), down);
  std::cout << "[ metric   ] htc2022_ta: correlation with the reference FBP " << r << "\n";
  RecordProperty("htc2022_correlation", std::to_string(r));
  // The data README: a correct FDK at 0.6 mm on 128 x 128 correlates 0.96.
  EXPECT_GE(r, 0.95);
}

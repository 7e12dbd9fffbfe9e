// Scans as users bring them (recon/fdk_setup.cpp, recon/fdk_geometry.cpp): displaced (half-fan)
// detectors, alone and with a short scan; FDK for vector geometries with a circular orbit
// (cone_vec written from a cone scan, tilted / rotated / flipped / transposed detectors,
// calibration jitter); negative pixel pitches; refusals with the numbers.
#include "recon/fdk_geometry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numbers>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "math/fdk_weights.hpp"
#include "math/geometry.hpp"
#include "recon/backproject.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/fdk.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/filter.hpp"
#include "recon/recon_quality.hpp"

using namespace ctforge;
using ctforge::testing::compare_in_radius;
using ctforge::testing::cpu_options;
using ctforge::testing::k_peak;
using ctforge::testing::peak_abs;
using ctforge::testing::span_of;

namespace {

constexpr double k_pi = std::numbers::pi;

double max_abs_diff(const volume& a, const volume& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    d = std::max(d, std::abs(static_cast<double>(a.data[i]) - b.data[i]));
  return d;
}

// ---- displaced (half-fan) detectors: fan beam, 2D Shepp-Logan ------------------------------
//
// 128 pixels of 2 mm at SDD 1000, SID 500: 1 mm at the isocentre, a 128 mm wide field. The
// phantom (edge 120 mm, outer semi-axes 41.4 x 55.2 mm) fits inside 58 mm of the axis. Moving the
// detector by `offset` (mm on the detector) widens the field on one side to 64 + offset / 2 mm
// and truncates every view on the other: a half-fan scan.
constexpr std::int64_t k_cols = 128;
constexpr double k_du = 2, k_sid = 500, k_sdd = 1000;

struct fan_result {
  ctforge::testing::quality q;
  volume rec;
};

fan_result fan_scan(const phantom& ph, double offset_mm, double arc_deg, std::int64_t views,
                    const volume& truth, double radius, const std::string& label) {
  const double step = arc_deg / static_cast<double>(views);
  const geometry g = make_cone_geometry(k_cols, 1, k_du, k_du, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(step), views), {offset_mm});
  const projection_stack p = ctforge::testing::project_pixel_integrated(ph, g, 2);
  volume rec = reconstruct(p, g, truth.geom, cpu_options(algorithm::fdk));
  return {compare_in_radius(rec, truth, radius, label), std::move(rec)};
}

class HalfFan : public ::testing::TestWithParam<double> {};

// Offsets from small to 45% of the detector width: within 1.5 dB PSNR of the centred detector.
TEST_P(HalfFan, FullScanMatchesCentredDetector) {
  const phantom ph = shepp_logan_phantom(120);
  const auto vg = volume_geometry::centered(128, 128, 1, {1, 1, 1});
  const volume truth = voxelize(ph, vg, 4);
  const double offset = GetParam() * k_cols * k_du;
  const auto full = fan_scan(ph, 0, 360, 360, truth, 58, "centred detector");
  const auto half =
      fan_scan(ph, offset, 360, 360, truth, 58, "offset " + std::to_string(offset) + " mm");
  EXPECT_GT(full.q.psnr, 28.0);
  EXPECT_GE(half.q.psnr, full.q.psnr - 1.5) << "offset " << offset << " mm";
}

INSTANTIATE_TEST_SUITE_P(Offsets, HalfFan, ::testing::Values(0.02, 0.1, 0.25, 0.45));

// FDK with a given setup (pre-weights), the steps of the CPU path spelled out.
volume fdk_with_setup(const projection_stack& p, const geometry& g, const volume_geometry& vg,
                      const detail::fdk_setup& s) {
  projection_stack w = p;
  detail::apply_preweights(s, w);
  detail::ramp_filter(w.cols, s.filter_pixel_mm, filter_window::ram_lak, 1.0).apply(w, 0);
  const auto mats = kernels::float_matrices(g);
  volume out(vg);
  const auto padded = detail::make_padded_projections(w.data.data(), w.views, w.rows, w.cols);
  detail::backproject(
      detail::bp_job::flat(padded, mats.data(), vg, out.data.data(), s.distance_weighting, 0));
  return out;
}

// Negative controls: the same half-fan data (offset 45% of the width) with the weights of a
// centred detector (1/2 per ray, what FDK applied before displaced detectors were recognised),
// and with the right weights but without the zero columns on the narrow side, are both far
// worse, so the 1.5 dB criterion above tells right from wrong; the spelled-out steps with the
// right setup are reconstruct's result.
TEST(HalfFanWeights, CentredWeightsAndNoPaddingAreFarWorse) {
  const phantom ph = shepp_logan_phantom(120);
  const auto vg = volume_geometry::centered(128, 128, 1, {1, 1, 1});
  const volume truth = voxelize(ph, vg, 4);
  const double offset = 0.45 * k_cols * k_du;
  const geometry g = make_cone_geometry(k_cols, 1, k_du, k_du, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(1), 360), {offset});
  const projection_stack p = ctforge::testing::project_pixel_integrated(ph, g, 2);
  const recon_options opt = cpu_options(algorithm::fdk);
  const volume right = reconstruct(p, g, vg, opt);
  const detail::fdk_setup s0 = detail::make_fdk_setup(p, g, opt);
  ASSERT_TRUE(s0.displaced);
  const auto pad = detail::narrow_side_padding_for(s0, g);
  EXPECT_EQ(pad.columns, 116);  // (255 - 2 * 6.4) mm narrow-side shortfall / 2 mm, rounded up
  EXPECT_TRUE(pad.prepend);
  const geometry gp = detail::pad_narrow_side(g, pad);
  const projection_stack pp = detail::pad_narrow_side(p, pad);
  detail::fdk_setup s = detail::make_fdk_setup(pp, gp, opt, true, &s0);
  const volume same = fdk_with_setup(pp, gp, vg, s);
  EXPECT_LE(max_abs_diff(same, right), 1e-5 * peak_abs(span_of(right)));
  const volume unpadded = fdk_with_setup(p, g, vg, s0);
  s.params.overlap_mm = 0;
  for (auto& v : s.views) v.scale *= 0.5f;
  const volume centred = fdk_with_setup(pp, gp, vg, s);
  const double q_right = compare_in_radius(right, truth, 58, "Wang weights, padded").psnr;
  const double q_pad = compare_in_radius(unpadded, truth, 58, "Wang weights, unpadded").psnr;
  const double q_wrong = compare_in_radius(centred, truth, 58, "centred weights").psnr;
  EXPECT_GT(q_right, 28.0);
  EXPECT_LT(q_pad, q_right - 5.0);
  EXPECT_LT(q_wrong, q_right - 5.0);
}

// Half-fan with a short scan: Parker-like window and Wang's ramp combined. A short scan cannot
// complete the ring beyond the narrow side, so the phantom (edge 80 mm: outer semi-axes 27.6 x
// 36.8 mm) lies inside the overlap (64 - offset / 2 = 44.8 mm of the axis).
TEST(HalfFanShortScan, MatchesCentredShortScan) {
  const phantom ph = shepp_logan_phantom(80);
  const auto vg = volume_geometry::centered(96, 96, 1, {1, 1, 1});
  const volume truth = voxelize(ph, vg, 4);
  const double offset = 0.15 * k_cols * k_du;
  // 180 deg + fan angle of the wide side (atan((128 + 38.4) / 1000) = 9.45 deg) x 2 + margin.
  const double arc = 180 + 2 * rad_to_deg(std::atan((128 + offset) / k_sdd)) + 4;
  const auto full = fan_scan(ph, 0, arc, 220, truth, 40, "short scan, centred");
  const auto half = fan_scan(ph, offset, arc, 220, truth, 40, "short scan, half-fan");
  EXPECT_GT(full.q.psnr, 26.0);
  EXPECT_GE(half.q.psnr, full.q.psnr - 1.5);
}

// The weights of the two measurements of one line sum to 1 (displaced short scan): rays of
// view i at detector coordinate a and their conjugates at -a on the view nearest to
// beta + pi - 2 gamma.
TEST(HalfFanShortScan, RedundantWeightsSumToOne) {
  kernels::preweight_params p{};
  p.sdd = 1000;
  p.gamma_sign = 1;
  p.overlap_mm = 40;
  p.wide_sign = 1;
  p.parker_delta = 0.3f;
  p.scan_range = static_cast<float>(k_pi) + 0.6f;
  int checked = 0;
  for (float beta = 0.05f; beta < p.scan_range; beta += 0.05f)
    for (float a = -39.f; a <= 39.f; a += 3.f) {
      const float g1 = std::atan(a / p.sdd);
      const float b2 = beta + static_cast<float>(k_pi) - 2 * g1;
      const float b2w = b2 > p.scan_range ? b2 - 2 * static_cast<float>(k_pi) : b2;
      if (!(b2w > 0 && b2w < p.scan_range)) {
        // measured once: weight 1 where the window is non-zero
        const float w = kernels::displaced_redundancy(p, beta, a, g1);
        if (w > 0) EXPECT_NEAR(w, 1.0f, 1e-5f) << beta << " " << a;
        continue;
      }
      const float w1 = kernels::displaced_redundancy(p, beta, a, g1);
      const float w2 = kernels::displaced_redundancy(p, b2w, -a, -g1);
      EXPECT_NEAR(w1 + w2, 1.0f, 1e-4f) << "beta " << beta << " a " << a;
      ++checked;
    }
  EXPECT_GT(checked, 100);
}

TEST(HalfFan, NoOverlapIsRefusedWithTheNumbers) {
  const geometry g = make_cone_geometry(k_cols, 1, k_du, k_du, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(1), 360), {130.0});
  const projection_stack p(g.view_count(), 1, k_cols);
  try {
    (void)reconstruct(p, g, volume_geometry::centered(16, 16, 1, {1, 1, 1}),
                      cpu_options(algorithm::fdk));
    FAIL() << "no error";
  } catch (const usage_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no overlap"), std::string::npos) << m;
    EXPECT_NE(m.find("offset 130.000 mm"), std::string::npos) << m;
  }
}

TEST(HalfFan, SubPixelOffsetKeepsCentredWeights) {
  const geometry g = make_cone_geometry(k_cols, 1, k_du, k_du, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(1), 360), {0.9 * k_du / 2});
  const projection_stack p(g.view_count(), 1, k_cols);
  EXPECT_FALSE(detail::make_fdk_setup(p, g, cpu_options(algorithm::fdk)).displaced);
  const geometry g2 = make_cone_geometry(k_cols, 1, k_du, k_du, k_sid, k_sdd,
                                         angle_range(0, deg_to_rad(1), 360), {-3 * k_du});
  const auto s2 = detail::make_fdk_setup(p, g2, cpu_options(algorithm::fdk));
  EXPECT_TRUE(s2.displaced);
  EXPECT_EQ(s2.wide_sign, -1.0);
  EXPECT_NEAR(s2.overlap_mm, 63.5 * k_du - 3 * k_du, 1e-9);
}

// ---- vector geometries with a circular orbit (cone beam, 3D) -------------------------------

constexpr std::int64_t k_det = 64;
constexpr double k_dd = 2;  // 1 mm at the isocentre

geometry cone_scan(std::int64_t cols, std::int64_t rows, double offset_u = 0) {
  return make_cone_geometry(cols, rows, k_dd, k_dd, k_sid, k_sdd, angle_range(0, deg_to_rad(4), 90),
                            {offset_u});
}

const phantom& small_phantom() {
  static const phantom ph = shepp_logan_phantom(56);
  return ph;
}

const volume_geometry& small_grid() {
  static const volume_geometry vg = volume_geometry::centered(48, 48, 48, {1, 1, 1});
  return vg;
}

const volume& small_truth() {
  static const volume t = voxelize(small_phantom(), small_grid(), 3);
  return t;
}

// Pixel-integrated projections (s x s rays per pixel) of any geometry: point samples of the
// Shepp-Logan edges alias, and resampling them would then be judged by that aliasing.
projection_stack project_integrated(const phantom& ph, const geometry& g, int s = 2) {
  return ctforge::testing::project_pixel_integrated_vec(ph, g, s);
}

volume fdk(const projection_stack& p, const geometry& g) {
  return reconstruct(p, g, small_grid(), cpu_options(algorithm::fdk));
}

// Rotates vector x about unit axis k by angle t (Rodrigues).
vec3 rotate(vec3 x, vec3 k, double t) {
  return std::cos(t) * x + std::sin(t) * cross(k, x) + (1 - std::cos(t)) * dot(k, x) * k;
}

vec3 unit(vec3 a) {
  return (1.0 / norm(a)) * a;
}

// The same circular scan written as cone_vec: used as it is (no resampling) and reconstructed
// identically; with a half-fan offset too (an ASTRA-imported half-fan scan).
TEST(CircularVec, ConeVecOfAConeScanIsIdentical) {
  for (double offset : {0.0, 30.0}) {
    const geometry g = cone_scan(k_det + 8, k_det, offset);
    const geometry gv = make_vec_geometry(beam_kind::cone, g.cols, g.rows, g.views);
    const projection_stack p = project_analytic(small_phantom(), g);
    const auto eq = detail::make_circular_equivalent(gv, "fdk");
    EXPECT_FALSE(eq.needs_resampling) << offset;
    EXPECT_NEAR(eq.radius_mm, k_sid, 1e-6);
    const volume a = fdk(p, g), b = fdk(p, gv);
    EXPECT_LE(max_abs_diff(a, b), 1e-5 * peak_abs(span_of(a))) << "offset " << offset;
    EXPECT_EQ(default_algorithm(gv), algorithm::fdk);
  }
}

// A detector rotated in its plane (rows no longer perpendicular to the axis) and tilted out of
// it, a flipped detector (columns and rows reversed) and a transposed one (columns along the
// axis) all reconstruct as well as the plain detector.
TEST(CircularVec, TiltedRotatedFlippedTransposedDetectors) {
  const geometry g = cone_scan(k_det, k_det);
  const projection_stack p0 = project_integrated(small_phantom(), g);
  const volume& truth = small_truth();
  const double q0 = compare_in_radius(fdk(p0, g), truth, 22, "plain detector").psnr;
  EXPECT_GT(q0, 24.0);

  struct variant {
    std::string name;
    std::int64_t cols, rows;
    bool resampled;
  };
  const std::vector<variant> variants = {{"rotated 7 deg, tilted 10 deg", 80, 80, true},
                                         {"flipped", k_det, k_det, false},
                                         {"transposed", k_det, k_det + 2, true}};
  for (const auto& var : variants) {
    std::vector<view_vectors> views;
    for (std::int64_t i = 0; i < g.view_count(); ++i) {
      const view_vectors& w = g.views[static_cast<std::size_t>(i)];
      view_vectors x = w;
      const vec3 uh = unit(w.u), vh = unit(w.v), nh = unit(cross(w.u, w.v));
      if (var.name == "flipped") {
        x.u = -1.0 * w.u;
        x.v = -1.0 * w.v;
      } else if (var.name == "transposed") {
        x.u = k_dd * vh;  // columns run up the axis
        x.v = k_dd * uh;  // rows across it
      } else {
        const vec3 ur = rotate(uh, nh, deg_to_rad(7)), vr = rotate(vh, nh, deg_to_rad(7));
        x.u = k_dd * rotate(ur, ur, 0);
        x.v = k_dd * rotate(vr, ur, deg_to_rad(10));  // tilt about the (rotated) row direction
      }
      views.push_back(x);
    }
    const geometry gv = make_vec_geometry(beam_kind::cone, var.cols, var.rows, views);
    const projection_stack p = project_integrated(small_phantom(), gv);
    const auto eq = detail::make_circular_equivalent(gv, "fdk");
    EXPECT_EQ(eq.needs_resampling, var.resampled) << var.name;
    const volume rec = fdk(p, gv);
    const double q = compare_in_radius(rec, truth, 22, var.name).psnr;
    EXPECT_GE(q, q0 - 1.0) << var.name;
    if (var.name == "flipped") {
      const volume plain = fdk(p0, g);
      EXPECT_LE(max_abs_diff(rec, plain), 1e-5 * peak_abs(span_of(plain)));
    }
  }
}

// The views of scan `g` with the detector turned in its plane by `deg` about its centre.
std::vector<view_vectors> turned_views(const geometry& g, double deg) {
  std::vector<view_vectors> views = g.views;
  for (auto& w : views) {
    const vec3 nh = unit(cross(w.u, w.v));
    w.u = rotate(w.u, nh, deg_to_rad(deg));
    w.v = rotate(w.v, nh, deg_to_rad(deg));
  }
  return views;
}

// Mean of `rec` over the voxels within `radius` mm of the axis whose |z| lies in [z0, z1] mm.
double mean_in_band(const volume& rec, double radius, double z0, double z1) {
  const volume_geometry& vg = rec.geom;
  double sum = 0;
  std::int64_t n = 0;
  for (std::int64_t k = 0; k < vg.nz; ++k)
    for (std::int64_t j = 0; j < vg.ny; ++j)
      for (std::int64_t i = 0; i < vg.nx; ++i) {
        const vec3 p = vg.voxel_center(i, j, k);
        if (std::hypot(p.x, p.y) > radius || std::abs(p.z) < z0 || std::abs(p.z) > z1) continue;
        sum += rec.data[static_cast<std::size_t>((k * vg.ny + j) * vg.nx + i)];
        ++n;
      }
  return sum / static_cast<double>(n);
}

// A detector turned in its plane is resampled onto an upright virtual detector whose corners
// lie beyond the real one. (1) An object whose shadow lies on the real detector reconstructs as
// with the upright detector. (2) A tall cylinder (0.02 / mm, radius 18 mm, 600 mm long), whose
// shadow crosses the detector's top and bottom edges as on any long sample: the virtual rows
// near those edges reach past the turned edge inside the shadow. Read there as zeros (measured
// rays through nothing) they truncate those rows, whose filtered values then bias the slices
// they reconstruct (26 to 30 mm from the mid-plane: +2.3% against the upright detector);
// continued from the real detector's edge, as a truncated detector's rows are, the slices
// match the upright detector's within 0.1% (64 x 64 pixels of 1 mm at the axis: the field
// reaches |z| = 30.8 mm at 18 mm from the axis).
TEST(CircularVec, TurnedDetectorCornersAreNotMeasuredZeros) {
  const geometry g = cone_scan(k_det, k_det);
  const geometry gt = make_vec_geometry(beam_kind::cone, k_det, k_det, turned_views(g, 12));
  ASSERT_TRUE(detail::make_circular_equivalent(gt, "fdk").needs_resampling);
  // (1) the small Shepp-Logan (shadow within 26 pixels of the centre).
  const volume plain = fdk(project_integrated(small_phantom(), g), g);
  const volume turned = fdk(project_integrated(small_phantom(), gt), gt);
  const double q_plain = compare_in_radius(plain, small_truth(), 22, "upright").psnr;
  const double q_turned = compare_in_radius(turned, small_truth(), 22, "turned 12 deg").psnr;
  EXPECT_GE(q_turned, q_plain - 1.0);
  // (2) the tall cylinder, on a grid that reaches the top and bottom of the field.
  phantom rod;
  rod.ellipsoids.push_back({{0, 0, 0}, {18, 18, 300}, 0, 0.02});
  const auto vg = volume_geometry::centered(40, 40, 62, {1, 1, 1});
  const auto rec = [&](const geometry& geo) {
    return reconstruct(project_integrated(rod, geo), geo, vg, cpu_options(algorithm::fdk));
  };
  const volume up = rec(g), tu = rec(gt);
  const double mid_up = mean_in_band(up, 12, 0, 20), mid_tu = mean_in_band(tu, 12, 0, 20);
  const double edge_up = mean_in_band(up, 12, 26, 30), edge_tu = mean_in_band(tu, 12, 26, 30);
  std::cout << "rod, mean within 12 mm: |z| < 20 mm: upright " << mid_up << ", turned " << mid_tu
            << "; 26 <= |z| <= 30 mm: upright " << edge_up << ", turned " << edge_tu << "\n";
  EXPECT_NEAR(mid_up, 0.02, 0.02 * 0.02);
  EXPECT_NEAR(mid_tu, mid_up, 0.02 * 0.005);
  EXPECT_NEAR(edge_up, 0.02, 0.02 * 0.03);
  EXPECT_NEAR(edge_tu, edge_up, 0.02 * 0.005);
}

/// The byte count the message `what` gives after `label` ("need", "resampled copy (", ...).
std::int64_t bytes_after(const std::string& what, const std::string& label) {
  std::smatch m;
  const std::regex re(std::regex_replace(label, std::regex(R"([()])"), R"(\$&)") +
                      R"( ?(\d+) bytes)");
  if (!std::regex_search(what, m, re)) {
    ADD_FAILURE() << "no '" << label << " N bytes' in: " << what;
    return -1;
  }
  return std::stoll(m[1].str());
}

// recon_options::memory_limit_bytes: FDK refuses, before allocating, a limit below its
// estimated peak (the message names every copy's size), and with the limit at that peak runs
// and gives the same volume. The resampled copy is released once padded: the peak is below
// all copies held together.
TEST(HostMemoryLimit, RefusedBelowThePeakAndSameResultAtIt) {
  const geometry plain = cone_scan(k_det, k_det);
  const geometry half = cone_scan(k_det + 8, k_det, 30.0);  // padded on the narrow side
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> d(-0.5, 0.5);
  std::vector<view_vectors> views = half.views;
  for (auto& w : views) w.detector_center = w.detector_center + vec3{d(rng), d(rng), d(rng)};
  const geometry jittered = make_vec_geometry(beam_kind::cone, half.cols, half.rows, views);
  ASSERT_TRUE(detail::make_circular_equivalent(jittered, "fdk").needs_resampling);
  const volume_geometry vg = volume_geometry::centered(24, 24, 16, {2, 2, 2});
  struct scan_case {
    const char* name;
    const geometry& g;
    bool resampled, padded;
  };
  for (const scan_case& c :
       {scan_case{"plain", plain, false, false}, scan_case{"displaced", half, false, true},
        scan_case{"jittered, displaced", jittered, true, true}}) {
    SCOPED_TRACE(c.name);
    const projection_stack p = project_integrated(small_phantom(), c.g, 1);
    recon_options o = cpu_options(algorithm::fdk);
    const volume ref = reconstruct(p, c.g, vg, o);
    std::string what;
    o.memory_limit_bytes = 1;
    try {
      (void)reconstruct(p, c.g, vg, o);
      ADD_FAILURE() << "a 1-byte limit was not refused";
      continue;
    } catch (const usage_error& e) {
      what = e.what();
    }
    const std::int64_t in = p.size() * 4, vol = vg.voxel_count() * 4;
    EXPECT_EQ(bytes_after(what, "the projections ("), in) << what;
    EXPECT_EQ(bytes_after(what, "the volume ("), vol) << what;
    EXPECT_NE(what.find("the memory limit (1 bytes"), std::string::npos) << what;
    EXPECT_EQ(what.find("resampled copy") != std::string::npos, c.resampled) << what;
    EXPECT_EQ(what.find("padded copy") != std::string::npos, c.padded) << what;
    const std::int64_t peak = bytes_after(what, "need");
    EXPECT_GE(peak, in + vol);
    if (c.resampled && c.padded) {
      const std::int64_t all =
          in + vol + bytes_after(what, "resampled copy (") + bytes_after(what, "padded copy (");
      EXPECT_LT(peak, all) << "the resampled copy is held with the volume";
    }
    o.memory_limit_bytes = peak - 1;
    EXPECT_THROW((void)reconstruct(p, c.g, vg, o), usage_error);
    o.memory_limit_bytes = peak;
    const volume at = reconstruct(p, c.g, vg, o);
    EXPECT_EQ(at.data, ref.data);
  }
}

// Calibrated per-view jitter (sources and detectors off by up to 0.5 mm, detectors turned by
// up to 0.2 deg): still FDK, as good as the ideal orbit on the ideal data.
TEST(CircularVec, CalibrationJitter) {
  const geometry g = cone_scan(k_det + 8, k_det + 8);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(-0.5, 0.5), t(-deg_to_rad(0.2), deg_to_rad(0.2));
  std::vector<view_vectors> views = g.views;
  for (auto& w : views) {
    w.source = w.source + vec3{d(rng), d(rng), d(rng)};
    w.detector_center = w.detector_center + vec3{d(rng), d(rng), d(rng)};
    const vec3 nh = unit(cross(w.u, w.v));
    const double a = t(rng);
    w.u = rotate(w.u, nh, a);
    w.v = rotate(w.v, nh, a);
  }
  const geometry gv = make_vec_geometry(beam_kind::cone, g.cols, g.rows, views);
  EXPECT_EQ(default_algorithm(gv), algorithm::fdk);
  const auto eq = detail::make_circular_equivalent(gv, "fdk");
  EXPECT_TRUE(eq.needs_resampling);
  EXPECT_GT(eq.max_radial_deviation_mm, 0.0);
  EXPECT_LT(eq.max_radial_deviation_mm, 1.0);
  const double q0 =
      compare_in_radius(fdk(project_integrated(small_phantom(), g), g), small_truth(), 22, "ideal")
          .psnr;
  const double q = compare_in_radius(fdk(project_integrated(small_phantom(), gv), gv),
                                     small_truth(), 22, "jittered")
                       .psnr;
  EXPECT_GE(q, q0 - 1.0);
}

TEST(CircularVec, HelixIsRefusedWithAPointerToSirt) {
  std::vector<view_vectors> views;
  for (int i = 0; i < 60; ++i) {
    const double t = deg_to_rad(12.0 * i), z = 1.5 * i;
    const vec3 s{k_sid * std::sin(t), -k_sid * std::cos(t), z};
    const vec3 dc{-(k_sdd - k_sid) * std::sin(t), (k_sdd - k_sid) * std::cos(t), z};
    views.push_back({s, dc, {std::cos(t) * k_dd, std::sin(t) * k_dd, 0}, {0, 0, k_dd}});
  }
  const geometry g = make_vec_geometry(beam_kind::cone, 32, 16, views);
  EXPECT_EQ(default_algorithm(g), algorithm::sirt);
  const projection_stack p(60, 16, 32);
  try {
    (void)fdk(p, g);
    FAIL() << "no error";
  } catch (const usage_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("not on a circular orbit"), std::string::npos) << m;
    EXPECT_NE(m.find("--algorithm sirt"), std::string::npos) << m;
  }
  // Too few views to define an orbit, and a parallel geometry asked for FDK.
  const geometry two = make_vec_geometry(beam_kind::cone, 32, 16, {views[0], views[1]});
  EXPECT_THROW((void)fdk(projection_stack(2, 16, 32), two), usage_error);
}

// Parallel beam: a parallel_vec scan with its detector flipped reconstructs by FBP as the
// parallel scan does; a negative pitch in the JSON describes the same flipped detector.
TEST(CircularVec, ParallelVecAndNegativePitch) {
  const geometry g = make_parallel_geometry(k_det, 1, 1, 1, angle_range(0, deg_to_rad(1), 180));
  const auto vg = volume_geometry::centered(48, 48, 1, {1, 1, 1});
  const projection_stack p = project_analytic(small_phantom(), g);
  const volume ref = reconstruct(p, g, vg, cpu_options(algorithm::fbp));
  std::vector<view_vectors> views = g.views;
  for (auto& w : views) w.u = -1.0 * w.u;
  const geometry gv = make_vec_geometry(beam_kind::parallel, g.cols, 1, views);
  const projection_stack pv = project_analytic(small_phantom(), gv);
  EXPECT_EQ(default_algorithm(gv), algorithm::fbp);
  const volume rec = reconstruct(pv, gv, vg, cpu_options(algorithm::fbp));
  EXPECT_LE(max_abs_diff(rec, ref), 1e-5 * peak_abs(span_of(ref)));

  const geometry gj = geometry_from_json(
      R"({"type":"parallel","detector":{"cols":64,"rows":1,"pixel_mm":[-1,1]},
          "angles_deg":{"start":0,"step":1,"count":180}})");
  const volume recj = reconstruct(pv, gj, vg, cpu_options(algorithm::fbp));
  EXPECT_LE(max_abs_diff(recj, ref), 1e-5 * peak_abs(span_of(ref)));
  // Round trip of the sign through JSON.
  EXPECT_EQ(geometry_from_json(geometry_to_json(gj)).pixel_u_mm, -1.0);
  EXPECT_THROW((void)geometry_from_json(
                   R"({"type":"parallel","detector":{"cols":4,"rows":1,"pixel_mm":[0,1]},
                       "angles_deg":[0]})"),
               usage_error);
}

// A cone scan with a negative row pitch (first row at the top, as TIFF files store it) is the
// same scan as the data flipped upside down.
TEST(CircularVec, NegativeRowPitchIsAFlippedDetector) {
  const geometry g = cone_scan(k_det, k_det);
  const geometry gf = make_cone_geometry(k_det, k_det, k_dd, -k_dd, k_sid, k_sdd,
                                         angle_range(0, deg_to_rad(4), 90));
  const projection_stack p = project_analytic(small_phantom(), g);
  projection_stack pf = p;
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < p.rows; ++r)
      for (std::int64_t c = 0; c < p.cols; ++c) pf.at(v, r, c) = p.at(v, p.rows - 1 - r, c);
  const volume a = fdk(p, g), b = fdk(pf, gf);
  EXPECT_LE(max_abs_diff(a, b), 1e-5 * peak_abs(span_of(a)));
}

}  // namespace

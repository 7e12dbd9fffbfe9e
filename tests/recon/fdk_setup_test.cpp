// Displaced-detector weighting (recon/fdk_setup.cpp, math/fdk_weights.hpp): the weight of
// kernels::displaced_weight (1/2 in the overlap, smooth ramps of --offset-transition at its ends,
// conjugate rays summing to exactly 1), the options recon_options::displaced_detector and
// offset_transition_px, and what they do to noisy scans: a small centre offset (5.5 pixels on a
// 201-pixel detector) must cost no noise against the uniform 1/2 weights of a centred detector,
// while Wang's ramp across the whole overlap (the weighting before --offset-transition) is
// measurably noisier; a half-fan scan (offset 40% of the detector) still reconstructs the whole
// object.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "math/fdk_weights.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/recon_quality.hpp"

using namespace ctforge;
using ctforge::testing::compare_in_radius;
using ctforge::testing::cpu_options;

namespace {

constexpr double k_pi = std::numbers::pi;

// ---- the weight function ---------------------------------------------------------------------

// Overlap half-widths m (mm) and transition widths t (mm, as fractions of m below) covering
// narrow ramps, ramps that meet (t = m), merged ramps (m < t < 2m), Wang's ramp (t = 2m) and
// the clamped cases (t > 2m, t = 0).
const std::vector<float> k_overlaps = {1.0f, 3.7f, 19.6f, 40.0f, 94.5f, 245.5f};
const std::vector<float> k_fractions = {0.01f, 0.1f, 0.17f, 0.5f, 1.0f, 1.3f, 2.0f, 3.0f, 0.0f};

// W(x) + W(-x) == 1 exactly (in float) for conjugate rays, over a fine grid of x across and
// beyond the overlap and over random x; W in [0, 1] and non-decreasing in x.
TEST(DisplacedWeight, ConjugateRaysSumToExactlyOne) {
  std::mt19937 rng(7);
  std::int64_t checked = 0;
  for (float m : k_overlaps)
    for (float f : k_fractions) {
      const float t = f * m;
      std::vector<float> xs;
      for (int i = -601; i <= 601; ++i) xs.push_back(1.2f * m * static_cast<float>(i) / 601.0f);
      std::uniform_real_distribution<float> u(-1.1f * m, 1.1f * m);
      for (int i = 0; i < 2001; ++i) xs.push_back(u(rng));
      std::sort(xs.begin(), xs.end());
      float prev = 0;
      for (float x : xs) {
        const float w = kernels::displaced_weight(x, m, t);
        const float wc = kernels::displaced_weight(-x, m, t);
        ASSERT_EQ(w + wc, 1.0f) << "m " << m << " t " << t << " x " << x;
        ASSERT_GE(w, 0.0f);
        ASSERT_LE(w, 1.0f);
        ASSERT_GE(w, prev) << "m " << m << " t " << t << " x " << x;  // monotone
        prev = w;
        ++checked;
      }
    }
  EXPECT_GT(checked, 100000);
}

// 1/2 exactly in the overlap away from the transitions (|x| <= m - t), 1 beyond the overlap on
// the wide side, 0 beyond it on the narrow side; the ramp rises from 1/2 to 1 within the last
// t of the overlap (so the 1/2 plateau really ends there), with slope at most pi / (4t).
TEST(DisplacedWeight, HalfInTheOverlapAwayFromTheTransition) {
  for (float m : k_overlaps)
    for (float f : {0.01f, 0.1f, 0.17f, 0.5f, 1.0f}) {
      const float t = f * m;
      for (int i = 0; i <= 400; ++i) {
        const float x = (m - t) * static_cast<float>(i) / 400.0f;
        EXPECT_EQ(kernels::displaced_weight(x, m, t), 0.5f) << "m " << m << " t " << t;
        EXPECT_EQ(kernels::displaced_weight(-x, m, t), 0.5f) << "m " << m << " t " << t;
      }
      EXPECT_EQ(kernels::displaced_weight(m, m, t), 1.0f);
      EXPECT_EQ(kernels::displaced_weight(1.5f * m, m, t), 1.0f);
      EXPECT_EQ(kernels::displaced_weight(-m, m, t), 0.0f);
      EXPECT_EQ(kernels::displaced_weight(-1.5f * m, m, t), 0.0f);
      // Inside the transition: strictly between 1/2 and 1, the midpoint at 3/4.
      EXPECT_NEAR(kernels::displaced_weight(m - 0.5f * t, m, t), 0.75f, 1e-6f);
      const float h = t / 512.0f;
      double steepest = 0;
      for (float x = m - t; x < m; x += h) {
        const float x2 = x + h;  // the step as float arithmetic makes it
        const double dw = static_cast<double>(kernels::displaced_weight(x2, m, t)) -
                          kernels::displaced_weight(x, m, t);
        steepest = std::max(steepest, dw / (static_cast<double>(x2) - x));
      }
      EXPECT_LE(steepest, k_pi / (4 * t) * (1 + 1e-3) + 2e-7 / h) << "m " << m << " t " << t;
      EXPECT_GE(steepest, k_pi / (4 * t) * 0.99) << "m " << m << " t " << t;
    }
}

// A transition as wide as the overlap (2m) is Wang's ramp sin^2(pi/4 (x/m + 1)), the weighting
// before the option existed; wider ones and 0 are clamped to it.
TEST(DisplacedWeight, FullOverlapTransitionIsWangsRamp) {
  for (float m : k_overlaps)
    for (int i = -500; i <= 500; ++i) {
      const float x = 1.1f * m * static_cast<float>(i) / 500.0f;
      const double xc = std::clamp(static_cast<double>(x) / m, -1.0, 1.0);
      const double s = std::sin(k_pi / 4 * (xc + 1));
      EXPECT_NEAR(kernels::displaced_weight(x, m, 2 * m), s * s, 2e-6) << m << " " << x;
      EXPECT_EQ(kernels::displaced_weight(x, m, 5 * m), kernels::displaced_weight(x, m, 2 * m));
      EXPECT_EQ(kernels::displaced_weight(x, m, 0), kernels::displaced_weight(x, m, 2 * m));
    }
}

// Displaced short scans (Parker-like window times the displaced weight, normalised over the
// line's measurements) with the narrow transition: the two measurements of a line still sum
// to 1, and a line measured once gets 1 wherever the window is non-zero.
TEST(DisplacedWeight, ShortScanWithTransitionSumsToOne) {
  kernels::preweight_params p{};
  p.sdd = 1000;
  p.gamma_sign = 1;
  p.overlap_mm = 40;
  p.transition_mm = 8;
  p.wide_sign = 1;
  p.parker_delta = 0.3f;
  p.scan_range = static_cast<float>(k_pi) + 0.6f;
  int checked = 0, once = 0;
  for (float beta = 0.02f; beta < p.scan_range; beta += 0.02f)
    for (float a = -39.f; a <= 39.f; a += 1.5f) {
      const float g1 = std::atan(a / p.sdd);
      const float b2 = beta + static_cast<float>(k_pi) - 2 * g1;
      const float b2w = b2 > p.scan_range ? b2 - 2 * static_cast<float>(k_pi) : b2;
      const float w1 = kernels::displaced_redundancy(p, beta, a, g1);
      if (!(b2w > 0 && b2w < p.scan_range)) {
        if (w1 > 0) EXPECT_NEAR(w1, 1.0f, 1e-5f) << "beta " << beta << " a " << a;
        ++once;
        continue;
      }
      const float w2 = kernels::displaced_redundancy(p, b2w, -a, -g1);
      EXPECT_NEAR(w1 + w2, 1.0f, 1e-5f) << "beta " << beta << " a " << a;
      ++checked;
    }
  EXPECT_GT(checked, 500);
  EXPECT_GT(once, 500);
}

// ---- the options -----------------------------------------------------------------------------

constexpr std::int64_t k_cols = 201;  // odd: a pixel centre on the detector's middle

geometry parallel_scan(double offset_px, std::int64_t cols = k_cols, std::int64_t views = 360) {
  return make_parallel_geometry(cols, 1, 1.0, 1.0,
                                angle_range(0, 2 * k_pi / static_cast<double>(views), views),
                                {offset_px});
}

// 2 mm pixels at SDD 1000, SID 500: 1 mm at the isocentre.
geometry fan_scan(double offset_px, std::int64_t cols = k_cols, std::int64_t views = 360) {
  return make_cone_geometry(cols, 1, 2.0, 2.0, 500, 1000,
                            angle_range(0, 2 * k_pi / static_cast<double>(views), views),
                            {2.0 * offset_px});
}

recon_options with_mode(algorithm a, displaced_detector_mode m, double transition_px = 16) {
  recon_options o = cpu_options(a);
  o.displaced_detector = m;
  o.offset_transition_px = transition_px;
  return o;
}

TEST(DisplacedDetectorOption, ModesAndTransitionWidth) {
  const geometry g = parallel_scan(5.5);
  const projection_stack p(g.view_count(), 1, k_cols);
  const auto fbp = algorithm::fbp;
  // auto: 11 pixels of asymmetry > 1 pixel: displaced; overlap 100 - 5.5 pixels; 16 pixels.
  const auto s_auto = detail::make_fdk_setup(p, g, cpu_options(fbp));
  ASSERT_TRUE(s_auto.displaced);
  EXPECT_NEAR(s_auto.overlap_mm, 94.5, 1e-9);
  EXPECT_NEAR(s_auto.transition_mm, 16.0, 1e-9);
  EXPECT_EQ(s_auto.params.transition_mm, 16.0f);
  // off: a centred detector's weights, the 1/2 in the view scale and no displaced weights.
  const auto s_off = detail::make_fdk_setup(p, g, with_mode(fbp, displaced_detector_mode::off));
  EXPECT_FALSE(s_off.displaced);
  EXPECT_EQ(s_off.params.overlap_mm, 0.0f);
  EXPECT_NEAR(s_off.views[3].scale, 0.5 * s_auto.views[3].scale, 1e-7);
  EXPECT_EQ(detail::narrow_side_padding_for(s_off, g).columns, 0);
  // A transition wider than the overlap is clamped to it (Wang's ramp).
  const auto s_wide =
      detail::make_fdk_setup(p, g, with_mode(fbp, displaced_detector_mode::automatic, 1000));
  EXPECT_NEAR(s_wide.transition_mm, 2 * 94.5, 1e-9);
  // on: a centred detector is weighted as displaced (overlap = the whole half-width).
  const geometry c = parallel_scan(0);
  EXPECT_FALSE(detail::make_fdk_setup(p, c, cpu_options(fbp)).displaced);
  const auto s_on = detail::make_fdk_setup(p, c, with_mode(fbp, displaced_detector_mode::on));
  EXPECT_TRUE(s_on.displaced);
  EXPECT_NEAR(s_on.overlap_mm, 100.0, 1e-9);
  // Fan beam: the transition in detector pixels (2 mm), the overlap on the detector.
  const geometry f = fan_scan(5.5);
  const auto s_fan = detail::make_fdk_setup(p, f, cpu_options(algorithm::fdk));
  ASSERT_TRUE(s_fan.displaced);
  EXPECT_NEAR(s_fan.overlap_mm, 2 * 94.5, 1e-9);
  EXPECT_NEAR(s_fan.transition_mm, 32.0, 1e-9);
}

TEST(DisplacedDetectorOption, BadValuesAreRefusedNamingTheOption) {
  const geometry g = parallel_scan(5.5);
  const projection_stack p(g.view_count(), 1, k_cols);
  for (double t : {0.5, 0.0, -3.0, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    try {
      (void)detail::make_fdk_setup(
          p, g, with_mode(algorithm::fbp, displaced_detector_mode::automatic, t));
      ADD_FAILURE() << "no error for " << t;
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("--offset-transition"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_displaced_detector("auto"), displaced_detector_mode::automatic);
  EXPECT_EQ(parse_displaced_detector("ON"), displaced_detector_mode::on);
  EXPECT_EQ(parse_displaced_detector("off"), displaced_detector_mode::off);
  EXPECT_EQ(to_string(displaced_detector_mode::automatic), "auto");
  try {
    (void)parse_displaced_detector("maybe");
    ADD_FAILURE() << "no error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("--displaced-detector"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(detector_is_displaced(g));
  EXPECT_FALSE(detector_is_displaced(parallel_scan(0.4)));
  EXPECT_TRUE(detector_is_displaced(fan_scan(-0.4 * k_cols)));
}

// ---- noise and accuracy on simulated scans ---------------------------------------------------

// A water disc of radius 90 mm (inside the 92.9 mm the narrow side of the fan scan reaches at
// the isocentre, so every line through it is measured twice and uniform 1/2 weights are
// exact) with three inserts; 2D (one detector row, z semi-axes far larger than a voxel).
phantom disc_phantom() {
  phantom ph;
  ph.ellipsoids.push_back({{0, 0, 0}, {90, 90, 1000}, 0, 0.02});
  ph.ellipsoids.push_back({{30, 20, 0}, {12, 12, 1000}, 0, 0.01});
  ph.ellipsoids.push_back({{-35, -25, 0}, {8, 8, 1000}, 0, 0.02});
  ph.ellipsoids.push_back({{0, -55, 0}, {6, 6, 1000}, 0, -0.01});
  return ph;
}

// The flat region: within 80 mm of the axis and at least 6 mm (the ramp filter's ringing of an
// edge) outside every insert.
bool in_flat_region(const vec3& x) {
  if (x.x * x.x + x.y * x.y > 80.0 * 80.0) return false;
  const phantom ph = disc_phantom();
  for (std::size_t i = 1; i < ph.ellipsoids.size(); ++i) {
    const ellipsoid& e = ph.ellipsoids[i];
    const double dx = x.x - e.center.x, dy = x.y - e.center.y;
    if (std::sqrt(dx * dx + dy * dy) < e.semi_axes.x + 6) return false;
  }
  return true;
}

// Standard deviation of `v` over the flat region (minus `ref` when given: the noise alone).
double flat_std(const volume& v, const volume* ref = nullptr) {
  double sum = 0, sum2 = 0;
  std::int64_t n = 0;
  const volume_geometry& vg = v.geom;
  for (std::int64_t j = 0; j < vg.ny; ++j)
    for (std::int64_t i = 0; i < vg.nx; ++i) {
      if (!in_flat_region(vg.voxel_center(static_cast<double>(i), static_cast<double>(j), 0)))
        continue;
      const auto k = static_cast<std::size_t>(j * vg.nx + i);
      const double d = static_cast<double>(v.data[k]) - (ref ? ref->data[k] : 0.0f);
      sum += d;
      sum2 += d * d;
      ++n;
    }
  EXPECT_GT(n, 10000);
  const double mean = sum / static_cast<double>(n);
  return std::sqrt(sum2 / static_cast<double>(n) - mean * mean);
}

struct weighting_result {
  double std_flat;   ///< std over the flat region of the noisy reconstruction
  double std_noise;  ///< std over the flat region of (noisy - noise-free) reconstruction
  double psnr;       ///< noisy reconstruction against the voxelized phantom, within 88 mm
};

class SmallOffset : public ::testing::TestWithParam<beam_kind> {};

// The user's case scaled down: a 5.5-pixel centre offset on a 201-pixel detector over 360 deg,
// Poisson (I0 = 1e4 photons) plus Gaussian (sigma 5 photons) noise with a fixed seed. The
// default weighting (1/2 in the overlap, 16-pixel ramps at its ends) must be within 1% of the
// uniform 1/2 weights of --displaced-detector off in background noise and within 0.1 dB in
// PSNR; the negative control, Wang's ramp across the whole overlap (a transition as wide as
// the overlap: the weighting before the option), must be measurably noisier (> 3%).
TEST_P(SmallOffset, DefaultTransitionCostsNoNoiseButWangsRampDoes) {
  const bool parallel = GetParam() == beam_kind::parallel;
  const geometry g = parallel ? parallel_scan(5.5) : fan_scan(5.5);
  const algorithm algo = parallel ? algorithm::fbp : algorithm::fdk;
  const phantom ph = disc_phantom();
  const auto vg = volume_geometry::centered(k_cols, k_cols, 1, {1, 1, 1});
  const volume truth = voxelize(ph, vg, 4);
  const projection_stack clean = ctforge::testing::project_pixel_integrated(ph, g, 2);
  projection_stack noisy = clean;
  noise_options no;
  no.incident_photons = 1e4;
  no.electronic_sigma = 5;
  no.seed = 20261203;
  EXPECT_EQ(add_noise(noisy, no).non_positive, 0);
  const auto run = [&](displaced_detector_mode m, double t, const std::string& label) {
    const recon_options o = with_mode(algo, m, t);
    const volume rec = reconstruct(noisy, g, vg, o);
    const volume ref = reconstruct(clean, g, vg, o);
    const weighting_result r{flat_std(rec), flat_std(rec, &ref),
                             compare_in_radius(rec, truth, 88, label).psnr};
    std::cout << "[ metric   ] " << label << ": background std " << r.std_flat
              << " /mm, noise-only std " << r.std_noise << " /mm, PSNR " << r.psnr << " dB\n";
    ::testing::Test::RecordProperty(label + "_std", std::to_string(r.std_flat));
    ::testing::Test::RecordProperty(label + "_psnr_db", std::to_string(r.psnr));
    return r;
  };
  const auto uniform = run(displaced_detector_mode::off, 16, "uniform 1/2 (off)");
  const auto fresh = run(displaced_detector_mode::automatic, 16, "default (16-px transition)");
  const auto wang = run(displaced_detector_mode::automatic, 1e4, "Wang (whole overlap)");
  std::cout << "[ metric   ] background std relative to uniform: default "
            << fresh.std_flat / uniform.std_flat << ", Wang " << wang.std_flat / uniform.std_flat
            << "\n";
  EXPECT_LE(fresh.std_flat, 1.01 * uniform.std_flat);
  EXPECT_GE(fresh.std_flat, 0.99 * uniform.std_flat);
  EXPECT_GE(fresh.psnr, uniform.psnr - 0.1);
  EXPECT_GT(wang.std_flat, 1.03 * uniform.std_flat);
  EXPECT_GT(wang.std_noise, 1.03 * fresh.std_noise);
  EXPECT_LT(wang.psnr, fresh.psnr);
}

INSTANTIATE_TEST_SUITE_P(Beams, SmallOffset,
                         ::testing::Values(beam_kind::parallel, beam_kind::cone),
                         [](const auto& info) {
                           return std::string(info.param == beam_kind::parallel ? "Parallel"
                                                                                : "Fan");
                         });

class LargeOffset : public ::testing::TestWithParam<beam_kind> {};

// Half-fan: the detector displaced by 40% of its width (80.4 of 201 pixels; the narrow side
// reaches 19.6 pixels, so the 16-pixel ramps nearly meet). A Shepp-Logan filling the wide
// circle (outer semi-axes 114 x 152 mm) reconstructs within 1.5 dB of a centred detector wide
// enough to cover it (361 pixels), the criterion of HalfFan in fdk_geometry_test; the
// negative control, --displaced-detector off, truncates the ring beyond the narrow side and is
// far worse (> 5 dB).
TEST_P(LargeOffset, HalfFanReconstructsTheWholeObject) {
  const bool parallel = GetParam() == beam_kind::parallel;
  const double offset = 0.4 * k_cols;
  const geometry half = parallel ? parallel_scan(offset) : fan_scan(offset);
  const geometry wide = parallel ? parallel_scan(0, 361) : fan_scan(0, 361);
  const algorithm algo = parallel ? algorithm::fbp : algorithm::fdk;
  const phantom ph = shepp_logan_phantom(330);
  const auto vg = volume_geometry::centered(341, 341, 1, {1, 1, 1});
  const volume truth = voxelize(ph, vg, 4);
  const auto quality = [&](const geometry& g, displaced_detector_mode m, const std::string& l) {
    const projection_stack p = ctforge::testing::project_pixel_integrated(ph, g, 2);
    return compare_in_radius(reconstruct(p, g, vg, with_mode(algo, m)), truth, 160, l).psnr;
  };
  const double centred = quality(wide, displaced_detector_mode::automatic, "centred, 361 px");
  const double displaced = quality(half, displaced_detector_mode::automatic, "half-fan, 40%");
  const double off = quality(half, displaced_detector_mode::off, "half-fan, 40%, off");
  EXPECT_GT(centred, 26.0);
  EXPECT_GE(displaced, centred - 1.5);
  EXPECT_LT(off, displaced - 5.0);
}

INSTANTIATE_TEST_SUITE_P(Beams, LargeOffset,
                         ::testing::Values(beam_kind::parallel, beam_kind::cone),
                         [](const auto& info) {
                           return std::string(info.param == beam_kind::parallel ? "Parallel"
                                                                                : "Fan");
                         });

}  // namespace

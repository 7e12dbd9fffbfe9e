// Helical cone beam: the geometry (views, JSON, coverage, refusals) and the weighted FBP
// against the phantom's voxelization, circular FDK of the same detector and SIRT, with a
// negative control without the redundancy weighting.
#include "math/helical.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <numbers>
#include <random>

#include "ctforge/checkpoint.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "math/backproject.hpp"
#include "recon/filter.hpp"
#include "recon/helical.hpp"
#include "recon/recon_quality.hpp"
#include "test_support.hpp"

using namespace ctforge;

namespace {

constexpr double k_pi = std::numbers::pi;
constexpr double k_sid = 300, k_sdd = 600;

struct scan {
  std::int64_t cols, rows;
  double du, dv, pitch_factor;
  detector_shape shape;
};

// Width of the rows at the axis (mm).
double collimation(const scan& s) {
  return static_cast<double>(s.rows) * s.dv * k_sid / k_sdd;
}

// A helix whose source runs from z_lo to z_hi (mm) in steps of step_deg.
geometry helix(const scan& s, double z_lo, double z_hi, double step_deg) {
  const double feed = s.pitch_factor * collimation(s);
  const auto views =
      static_cast<std::int64_t>(std::ceil((z_hi - z_lo) / feed * 360 / step_deg)) + 1;
  return make_helical_geometry(s.cols, s.rows, s.du, s.dv, k_sid, k_sdd,
                               angle_range(0, deg_to_rad(step_deg), views), feed, z_lo, 0, 0,
                               s.shape);
}

}  // namespace

// ---- geometry -------------------------------------------------------------------------------

TEST(HelicalGeometry, ViewsFollowTheHelix) {
  const geometry g = make_helical_geometry(33, 5, 0.8, 1.1, k_sid, k_sdd,
                                           angle_range(0.3, -0.05, 400), 12.5, -7, 1.5, 0.25);
  ASSERT_EQ(g.type_name(), "helical");
  ASSERT_EQ(g.view_count(), 400);
  for (std::int64_t i : {0, 1, 125, 399}) {
    const double t = 0.3 - 0.05 * static_cast<double>(i);
    // Decreasing angles: the source still advances by the feed per turn travelled.
    const double z = -7 + 12.5 * 0.05 * static_cast<double>(i) / (2 * k_pi);
    const view_vectors& w = g.views[static_cast<std::size_t>(i)];
    EXPECT_NEAR(w.source.x, k_sid * std::sin(t), 1e-9);
    EXPECT_NEAR(w.source.y, -k_sid * std::cos(t), 1e-9);
    EXPECT_NEAR(w.source.z, z, 1e-9);
    const vec3 centre{-(k_sdd - k_sid) * std::sin(t) + 1.5 * std::cos(t),
                      (k_sdd - k_sid) * std::cos(t) + 1.5 * std::sin(t), z + 0.25};
    EXPECT_NEAR(norm(w.detector_center - centre), 0, 1e-9);
    EXPECT_NEAR(norm(w.v - vec3{0, 0, 1.1}), 0, 1e-12);
  }
}

TEST(HelicalGeometry, JsonRoundTripAndPitchFactor) {
  const std::string text = R"({"type": "helical", "detector": {"cols": 64, "rows": 16,
    "pixel_mm": [1.0, 1.2], "shape": "cylindrical", "offset_mm": [0.5, -0.3]},
    "source_to_isocenter_mm": 570, "source_to_detector_mm": 1040,
    "angles_deg": {"start": 10, "step": 0.5, "count": 1500},
    "pitch_factor": 1.25, "z_start_mm": -40})";
  const geometry g = geometry_from_json(text, "scan.json");
  ASSERT_TRUE(g.helix.has_value());
  EXPECT_TRUE(g.curved());
  // pitch factor: feed / (rows x pitch_v x SID / SDD).
  EXPECT_NEAR(g.helix->pitch_mm_per_turn, 1.25 * 16 * 1.2 * 570 / 1040, 1e-12);
  const geometry back = geometry_from_json(geometry_to_json(g), "round trip");
  ASSERT_TRUE(back.helix.has_value());
  EXPECT_EQ(back.shape, g.shape);
  EXPECT_NEAR(back.helix->pitch_mm_per_turn, g.helix->pitch_mm_per_turn, 1e-12);
  EXPECT_EQ(back.helix->z_start_mm, -40);
  for (std::int64_t i = 0; i < g.view_count(); i += 97) {
    const auto& a = g.views[static_cast<std::size_t>(i)];
    const auto& b = back.views[static_cast<std::size_t>(i)];
    EXPECT_NEAR(norm(a.source - b.source), 0, 1e-6);
    EXPECT_NEAR(norm(a.detector_center - b.detector_center), 0, 1e-6);
  }
  const helical_coverage c = helical_coverage_of(g);
  EXPECT_NEAR(c.pitch_factor, 1.25, 1e-12);
  EXPECT_NEAR(c.source_z_min_mm, -40, 1e-9);
  EXPECT_NEAR(c.source_z_max_mm, -40 + g.helix->pitch_mm_per_turn * 1499 * 0.5 / 360, 1e-9);
  EXPECT_GT(c.full_z_min_mm, c.source_z_min_mm);
  EXPECT_LT(c.full_z_max_mm, c.source_z_max_mm);
}

TEST(HelicalGeometry, RefusesWhatIsNoHelix) {
  const std::string head = R"({"type": "helical", "detector": {"cols": 8, "rows": 4,
    "pixel_mm": [1, 1]}, "source_to_isocenter_mm": 300, "source_to_detector_mm": 600, )";
  using ctforge::testing::expect_usage_error_naming;
  expect_usage_error_naming([&] { (void)geometry_from_json(head + R"("angles_deg": [0, 1, 2]})"); },
                            "pitch_mm_per_turn");
  expect_usage_error_naming(
      [&] {
        (void)geometry_from_json(
            head + R"("angles_deg": [0, 1], "pitch_factor": 1, "pitch_mm_per_turn": 2})");
      },
      "not both");
  expect_usage_error_naming(
      [&] { (void)geometry_from_json(head + R"("angles_deg": [0, 1, 0.5], "pitch_factor": 1})"); },
      "angles_deg");
  expect_usage_error_naming(
      [&] {
        (void)geometry_from_json(R"({"type": "cone", "detector": {"cols": 8, "rows": 4,
    "pixel_mm": [1, 1]}, "source_to_isocenter_mm": 300, "source_to_detector_mm": 600,
    "angles_deg": [0, 1], "pitch_factor": 1})");
      },
      "pitch_factor");
}

// ---- reconstruction ------------------------------------------------------------------------

namespace {

using ctforge::testing::compare_in_radius;
using ctforge::testing::quality;

constexpr double k_radius = 27;  // mm: the compared cylinder, inside every detector's fan

// A long object: a 120 mm body of water-like density with 40 random ellipsoids inside it
// (densities +-0.01 to 0.03 / mm), reaching beyond every helix below at both ends.
phantom long_phantom() {
  std::mt19937 rng(2026);
  std::uniform_real_distribution<double> u(-1, 1), a(2, 8), d(0.01, 0.03);
  phantom p;
  p.ellipsoids.push_back({{0, 0, 0}, {24, 20, 70}, 0, 0.02});
  for (int i = 0; i < 40; ++i)
    p.ellipsoids.push_back({{10 * u(rng), 8 * u(rng), 55 * u(rng)},
                            {a(rng), a(rng), a(rng)},
                            180 * u(rng),
                            (i % 3 == 0 ? -0.5 : 1.0) * d(rng)});
  return p;
}

// The slab of heights a circular scan of detector `s` reconstructs at radius k_radius: where
// the rows' cone still covers that radius on both sides, (rows - 1) dv / 2 (R - r) / SDD.
double circular_half_slab(const scan& s) {
  return 0.5 * static_cast<double>(s.rows - 1) * s.dv * (k_sid - k_radius) / k_sdd;
}

// Grid of nz slices of 1 mm centred on z = 0 (64 x 64 x 0.875 mm across).
volume_geometry grid(std::int64_t nz) {
  return volume_geometry::centered(64, 64, nz, {0.875, 0.875, 1.0});
}

// Helical FBP of `ph` over `nz` slices, with a helix that covers them.
volume helical_recon(const phantom& ph, const scan& s, std::int64_t nz, const recon_options& o,
                     geometry* used = nullptr, double step_deg = 1.0) {
  const double c = collimation(s), feed = s.pitch_factor * c, half = 0.5 * static_cast<double>(nz);
  const geometry g = helix(s, -half - c - feed, half + c + feed, step_deg);
  if (used) *used = g;
  return reconstruct(project_analytic(ph, g), g, grid(nz), o);
}

// Circular FDK of the same detector over the slab it covers (odd slice count about z = 0).
quality circular_fdk(const phantom& ph, const scan& s, const std::string& label) {
  const auto nz = 2 * static_cast<std::int64_t>(std::floor(circular_half_slab(s))) + 1;
  const geometry g = make_cone_geometry(s.cols, s.rows, s.du, s.dv, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(1.0), 360), {}, {}, s.shape);
  const volume rec = reconstruct(project_analytic(ph, g), g, grid(nz),
                                 ctforge::testing::cpu_options(algorithm::fdk));
  return compare_in_radius(rec, voxelize(ph, grid(nz)), k_radius, label);
}

// The central `nz` slices of `v` (odd counts on both).
volume central_slices(const volume& v, std::int64_t nz) {
  volume out(grid(nz));
  const std::int64_t k0 = (v.geom.nz - nz) / 2, plane = v.geom.nx * v.geom.ny;
  std::copy(v.data.begin() + k0 * plane, v.data.begin() + (k0 + nz) * plane, out.data.begin());
  return out;
}

struct helical_case {
  scan s;
  bool shepp_logan;
  const char* name;
};

class HelicalFbp : public ::testing::TestWithParam<helical_case> {};

}  // namespace

// Over a long range of heights (25 slices, several turns), helical FBP is within 1.5 dB of what
// circular FDK of the same detector reaches on the slab a single turn covers, and so is the
// same reconstruction restricted to that slab.
TEST_P(HelicalFbp, AsGoodAsCircularFdkOfTheSameDetector) {
  const helical_case& hc = GetParam();
  const scan s = hc.s;
  const phantom ph = hc.shepp_logan ? shepp_logan_phantom(56) : long_phantom();
  constexpr std::int64_t k_slices = 25;
  const volume rec =
      helical_recon(ph, s, k_slices, ctforge::testing::cpu_options(algorithm::helical_fbp));
  const std::string name = hc.name;
  const quality whole =
      compare_in_radius(rec, voxelize(ph, grid(k_slices)), k_radius, name + " helical, 25 slices");
  const auto nz = 2 * static_cast<std::int64_t>(std::floor(circular_half_slab(s))) + 1;
  const quality slab = compare_in_radius(central_slices(rec, nz), voxelize(ph, grid(nz)), k_radius,
                                         name + " helical, circular FDK's slab");
  const quality fdk = circular_fdk(ph, s, name + " circular FDK");
  EXPECT_GT(whole.psnr, fdk.psnr - 1.5);
  EXPECT_GT(slab.psnr, fdk.psnr - 1.5);
  EXPECT_GT(whole.psnr, 30);
}

INSTANTIATE_TEST_SUITE_P(
    Pitches, HelicalFbp,
    ::testing::Values(
        helical_case{{128, 16, 1.0, 1.0, 0.5, detector_shape::flat}, true, "flat16_p05"},
        helical_case{{128, 16, 1.0, 1.0, 1.0, detector_shape::flat}, true, "flat16_p10"},
        helical_case{{128, 16, 1.0, 1.0, 1.4, detector_shape::flat}, true, "flat16_p14"},
        helical_case{{128, 16, 1.0, 1.0, 1.0, detector_shape::cylindrical}, true, "curved16_p10"},
        helical_case{{128, 64, 1.0, 0.5, 0.5, detector_shape::cylindrical}, true, "curved64_p05"},
        helical_case{{128, 64, 1.0, 0.5, 1.4, detector_shape::cylindrical}, true, "curved64_p14"},
        helical_case{{128, 64, 1.0, 0.5, 1.0, detector_shape::flat}, true, "flat64_p10"},
        helical_case{{128, 16, 1.0, 1.0, 1.4, detector_shape::flat}, false, "long_flat16_p14"},
        helical_case{
            {128, 64, 1.0, 0.5, 1.0, detector_shape::cylindrical}, false, "long_curved64_p10"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- negative control -------------------------------------------------------------------------

namespace {

// The same rebinned, filtered data and window, but each voxel's samples divided by the window's
// sum over every view that sees the voxel (times pi), as one averages the views of a voxel,
// instead of over the measurements of each line: lines measured more often than others then
// weigh more. (At pitch 0.5 each line is measured so often that this averaging comes close:
// 33.3 dB against 34.2 per line, circular FDK 31.2; at pitch 1.0 and 1.4 it falls to 25.7 and
// 27.2 dB.)
volume per_voxel_normalised(const projection_stack& p, const geometry& g,
                            const volume_geometry& vg) {
  const recon_options o = ctforge::testing::cpu_options(algorithm::helical_fbp);
  const detail::helical_setup s = detail::make_helical_setup(p, g, vg, o);
  const std::int64_t views = p.views, rows = p.rows, ct = s.cols_t;
  std::vector<float> work(static_cast<std::size_t>(views * rows * ct));
  detail::rebin_views(p, s, 0, views, work.data(), 0);
  detail::ramp_filter(ct, s.params.dt, o.filter, o.cutoff).apply(work.data(), views * rows, 0);
  volume out(vg);
  const kernels::helical_params& P = s.params;
#pragma omp parallel for schedule(dynamic, 8)
  for (std::int64_t n = 0; n < vg.voxel_count(); ++n) {
    const std::int64_t k = n / (vg.nx * vg.ny), j = (n / vg.nx) % vg.ny, i = n % vg.nx;
    const vec3 x =
        vg.voxel_center(static_cast<double>(i), static_cast<double>(j), static_cast<double>(k));
    double num = 0, den = 0;
    for (std::int64_t v = 0; v < views; ++v) {
      const kernels::helical_view& V = s.views[static_cast<std::size_t>(v)];
      const kernels::helical_ray r =
          kernels::helical_ray_of(P, V, static_cast<float>(x.x), static_cast<float>(x.y));
      if (!r.valid) continue;
      const float q = r.qa[0] * static_cast<float>(x.z) + r.qb[0];
      const float w = kernels::wfbp_window(q, P.q);
      if (w == 0.0f) continue;
      const float row = q * P.half_h / P.dv + P.r0;
      num += V.scale * w *
             kernels::sample_bilinear_border(work.data() + v * rows * ct, static_cast<int>(ct),
                                             static_cast<int>(rows), r.col, row);
      den += V.scale * w;
    }
    out.data[static_cast<std::size_t>(n)] = den > 0 ? static_cast<float>(k_pi * num / den) : 0;
  }
  return out;
}

}  // namespace

TEST(HelicalFbpControl, WithoutTheConjugateNormalisationMissesTheBound) {
  for (const double pitch : {1.0, 1.4}) {
    const scan s{128, 16, 1.0, 1.0, pitch, detector_shape::flat};
    const phantom ph = shepp_logan_phantom(56);
    geometry g;
    const volume good =
        helical_recon(ph, s, 25, ctforge::testing::cpu_options(algorithm::helical_fbp), &g);
    const volume bad = per_voxel_normalised(project_analytic(ph, g), g, grid(25));
    const volume truth = voxelize(ph, grid(25));
    const std::string name = "pitch " + std::to_string(pitch);
    const quality q_good = compare_in_radius(good, truth, k_radius, name + " per line");
    const quality q_bad = compare_in_radius(bad, truth, k_radius, name + " per voxel");
    const quality fdk = circular_fdk(ph, s, name + " circular FDK");
    EXPECT_GT(q_good.psnr, fdk.psnr - 1.5);
    EXPECT_LT(q_bad.psnr, fdk.psnr - 1.5);
  }
}

// ---- against SIRT on the same data ------------------------------------------------------------

// Helical FBP beats 20 and 50 SIRT iterations on the same helical projections (2-degree steps,
// 15 slices scored). SIRT must explain every ray, so its grid reaches every height the rays
// cross (with the grid of the FBP alone, the object beyond it would be pushed into it); it is
// scored on the same 15 slices. SIRT's 50 are its 20 continued from their result: SIRT's state
// is its volume alone.
TEST(HelicalFbpVsSirt, BeatsTwentyAndFiftyIterations) {
  const scan s{128, 16, 1.0, 1.0, 1.0, detector_shape::flat};
  const phantom ph = shepp_logan_phantom(56);
  geometry g;
  const volume fbp =
      helical_recon(ph, s, 15, ctforge::testing::cpu_options(algorithm::helical_fbp), &g, 2.0);
  const projection_stack p = project_analytic(ph, g);
  const volume truth = voxelize(ph, grid(15));
  const helical_coverage c = helical_coverage_of(g);
  const double reach = 0.5 * static_cast<double>(s.rows) * s.dv * (k_sid + 32) / k_sdd;
  const auto half =
      static_cast<std::int64_t>(std::ceil(std::max(c.source_z_max_mm, -c.source_z_min_mm) + reach));
  const volume_geometry wide = grid(2 * half + 1);
  recon_options o = ctforge::testing::cpu_iterative(algorithm::sirt, 20);
  const volume sirt20 = reconstruct(p, g, wide, o);
  o.iterations = 30;
  o.initial = sirt20.data;
  const volume sirt50 = reconstruct(p, g, wide, o);
  const quality q = compare_in_radius(fbp, truth, k_radius, "helical FBP");
  EXPECT_GT(q.psnr, compare_in_radius(central_slices(sirt20, 15), truth, k_radius, "SIRT 20").psnr);
  EXPECT_GT(q.psnr, compare_in_radius(central_slices(sirt50, 15), truth, k_radius, "SIRT 50").psnr);
}

// ---- slab units --------------------------------------------------------------------------

// A long helix cut into slabs of 5 planes: each unit reads a fraction of the views (those whose
// rays reach its planes, two more each side), and its planes equal the one-shot volume's up to
// float rounding (1e-5 of the peak); the negative control, the middle unit without 12 views at
// each end of its range (24 degrees), differs by more than 1e-3 of the peak (measured 6e-3).
TEST(HelicalUnits, ReadOnlyTheViewsThatReachThemAndEqualOneShot) {
  const scan s{96, 16, 1.0, 1.0, 1.0, detector_shape::cylindrical};
  const phantom ph = long_phantom();
  geometry g;
  const volume whole =
      helical_recon(ph, s, 25, ctforge::testing::cpu_options(algorithm::helical_fbp), &g, 2.0);
  const projection_stack p = project_analytic(ph, g);
  const volume_geometry vg = grid(25);
  const std::vector<slab_unit> units = plan_slab_units(g, vg, 5);
  ASSERT_EQ(units.size(), 5u);
  double peak = 0;
  for (float v : whole.data) peak = std::max(peak, static_cast<double>(std::abs(v)));
  const std::int64_t plane = vg.nx * vg.ny;
  const auto band_of = [&](std::int64_t v0, std::int64_t v1) {
    projection_stack b(v1 - v0, p.rows, p.cols);
    std::copy(p.data.begin() + v0 * p.rows * p.cols, p.data.begin() + v1 * p.rows * p.cols,
              b.data.begin());
    return b;
  };
  const recon_options o = ctforge::testing::cpu_options(algorithm::helical_fbp);
  // Largest |unit - one-shot| over the unit's planes.
  const auto unit_error = [&](const slab_unit& u) {
    const volume slab = reconstruct_unit(band_of(u.v0, u.v1), g, vg, o, u);
    double worst = 0;
    for (std::int64_t i = 0; i < (u.k1 - u.k0) * plane; ++i)
      worst = std::max(
          worst,
          static_cast<double>(std::abs(slab.data[static_cast<std::size_t>(i)] -
                                       whole.data[static_cast<std::size_t>(u.k0 * plane + i)])));
    return worst;
  };
  for (const slab_unit& u : units) {
    EXPECT_EQ(u.r0, 0);
    EXPECT_EQ(u.r1, g.rows);
    EXPECT_LT(u.v1 - u.v0, g.view_count() * 3 / 4) << u.name();
    EXPECT_LE(unit_error(u), 1e-5 * peak) << u.name();
  }
  // Negative control: the middle unit without 12 of its views at each end.
  slab_unit cut = units[2];
  cut.v0 += 12;
  cut.v1 -= 12;
  EXPECT_GT(unit_error(cut), 1e-3 * peak);
}

// Analytic phantom: exact chord lengths against closed forms, JSON round trip and errors,
// voxelization mass and point membership, noise statistics and reproducibility.
#include "ctforge/phantom.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

// Double-precision chord lengths of O(100 mm): the quadratic's roots lose a few ulps relative
// to the chord, so 1e-10 relative is far above rounding and far below any real error.
constexpr double k_chord_rel = 1e-10;

phantom one(ellipsoid e) {
  return phantom{{e}};
}

vec3 normalized(vec3 a) {
  return (1.0 / norm(a)) * a;
}

// A unit vector orthogonal to d.
vec3 orthogonal(vec3 d) {
  const vec3 t = std::abs(d.x) < 0.9 ? vec3{1, 0, 0} : vec3{0, 1, 0};
  return normalized(cross(d, t));
}

TEST(PhantomLineIntegral, SphereChordAtImpactParameter) {
  const double r = 17.5, rho = 0.03;
  const vec3 c{3, -4, 2.5};
  const phantom p = one({c, {r, r, r}, 33, rho});  // rotation is irrelevant for a sphere
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int trial = 0; trial < 50; ++trial) {
    const vec3 d = normalized({u(gen), u(gen), u(gen)});
    const vec3 n = orthogonal(d);
    const double b = r * std::abs(u(gen));  // impact parameter in [0, r)
    // Point on the line anywhere: closest point c + b n, shifted along d.
    const vec3 point = c + b * n + (40.0 * u(gen)) * d;
    const double expected = rho * 2.0 * std::sqrt(r * r - b * b);
    // Direction scale must not matter.
    const double scale = 0.1 + 10.0 * std::abs(u(gen));
    EXPECT_NEAR(line_integral(p, point, scale * d), expected, k_chord_rel * 2 * r * rho)
        << "b = " << b;
  }
}

TEST(PhantomLineIntegral, RotatedEllipsoidClosedForms) {
  const double a = 20, b = 8, c = 5, phi = 30, rho = 0.5;
  const vec3 ctr{-2, 1, 3};
  const phantom p = one({ctr, {a, b, c}, phi, rho});
  const double t = deg_to_rad(phi);
  // Body axes in the world: counter-clockwise rotation about +z by phi.
  const vec3 ex{std::cos(t), std::sin(t), 0}, ey{-std::sin(t), std::cos(t), 0}, ez{0, 0, 1};
  EXPECT_NEAR(line_integral(p, ctr, ex), rho * 2 * a, k_chord_rel * rho * a);
  EXPECT_NEAR(line_integral(p, ctr, ey), rho * 2 * b, k_chord_rel * rho * a);
  EXPECT_NEAR(line_integral(p, ctr, ez), rho * 2 * c, k_chord_rel * rho * a);
  // Parallel to the body x axis at body-y offset y0: chord 2a sqrt(1 - y0^2/b^2).
  for (double y0 : {0.0, 2.0, 5.5, 7.9}) {
    const double expected = rho * 2 * a * std::sqrt(1 - y0 * y0 / (b * b));
    EXPECT_NEAR(line_integral(p, ctr + y0 * ey, ex), expected, k_chord_rel * rho * a) << y0;
  }
  // Through the centre along a body-frame unit direction w: chord 2 / |diag(1/a,1/b,1/c) w|.
  std::mt19937_64 gen(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const vec3 w = normalized({u(gen), u(gen), u(gen)});
    const vec3 world = w.x * ex + w.y * ey + w.z * ez;
    const double q = std::sqrt(w.x * w.x / (a * a) + w.y * w.y / (b * b) + w.z * w.z / (c * c));
    EXPECT_NEAR(line_integral(p, ctr + 3.0 * world, world), rho * 2 / q, k_chord_rel * rho * a);
  }
  // The same ellipsoid unrotated gives a different chord along ex (checks the sign of phi).
  const phantom p0 = one({ctr, {a, b, c}, 0, rho});
  const phantom pm = one({ctr, {a, b, c}, -phi, rho});
  EXPECT_GT(std::abs(line_integral(p0, ctr, ex) - 2 * a * rho), 1.0);
  EXPECT_GT(std::abs(line_integral(pm, ctr, ex) - 2 * a * rho), 1.0);
}

TEST(PhantomLineIntegral, MissesAndTangentsGiveZero) {
  const phantom p = one({{0, 0, 0}, {10, 6, 4}, 0, 1.0});
  EXPECT_EQ(line_integral(p, {0, 6.5, 0}, {1, 0, 0}), 0.0);  // passes above in y
  EXPECT_EQ(line_integral(p, {0, 0, 4}, {1, 0, 0}), 0.0);    // tangent to the top (z = c)
  EXPECT_EQ(line_integral(p, {50, 50, 50}, {1, 1, -0.1}), 0.0);
  EXPECT_EQ(line_integral(p, {0, 0, 0}, {0, 0, 0}), 0.0);  // degenerate direction
  EXPECT_GT(line_integral(p, {0, 5.9, 0}, {1, 0, 0}), 0.0);
}

TEST(PhantomLineIntegral, OverlappingEllipsoidsAdd) {
  const ellipsoid e1{{0, 0, 0}, {10, 10, 10}, 0, 0.2};
  const ellipsoid e2{{4, 0, 0}, {5, 5, 5}, 0, -0.05};
  const phantom both{{e1, e2}};
  // Along x through both centres: 20 mm of e1 and 10 mm of e2 (e2 lies inside e1).
  EXPECT_NEAR(line_integral(both, {-30, 0, 0}, {1, 0, 0}), 0.2 * 20 - 0.05 * 10, 1e-12);
  // Along y through x = 4: chords 2 sqrt(100 - 16) and 10.
  EXPECT_NEAR(line_integral(both, {4, 0, 0}, {0, 1, 0}), 0.2 * 2 * std::sqrt(84.0) - 0.05 * 10,
              1e-12);
}

TEST(SheppLogan, TableAndScaling) {
  const double size = 120;
  const phantom p = shepp_logan_phantom(size);
  ASSERT_EQ(p.ellipsoids.size(), 10u);
  EXPECT_DOUBLE_EQ(p.ellipsoids[0].semi_axes.y, 0.92 * 60);
  EXPECT_DOUBLE_EQ(p.ellipsoids[2].center.x, -0.22 * 60);
  EXPECT_DOUBLE_EQ(p.ellipsoids[2].rotation_deg, 108);
  EXPECT_DOUBLE_EQ(p.ellipsoids[0].density + p.ellipsoids[1].density, 0.02);  // water inside
  // The z ray through the centre crosses only the skull (a) and brain (b) ellipsoids:
  // 0.1 * 2 * 0.9 s - 0.08 * 2 * 0.88 s with s = size / 2 (hand-checked against the table).
  const double s = size / 2;
  EXPECT_NEAR(line_integral(p, {0, 0, 0}, {0, 0, 1}), 0.1 * 1.8 * s - 0.08 * 1.76 * s, 1e-12);
  EXPECT_THROW(shepp_logan_phantom(0), usage_error);
  EXPECT_THROW(shepp_logan_phantom(std::nan("")), usage_error);
}

TEST(PhantomJson, RoundTripIsExact) {
  phantom p = shepp_logan_phantom(97.3);
  p.ellipsoids[3].rotation_deg = 0.1 + 1e-13;  // digits that a short printout would lose
  const phantom q = phantom_from_json(phantom_to_json(p));
  ASSERT_EQ(q.ellipsoids.size(), p.ellipsoids.size());
  for (std::size_t i = 0; i < p.ellipsoids.size(); ++i) {
    EXPECT_EQ(q.ellipsoids[i].center, p.ellipsoids[i].center);
    EXPECT_EQ(q.ellipsoids[i].semi_axes, p.ellipsoids[i].semi_axes);
    EXPECT_EQ(q.ellipsoids[i].rotation_deg, p.ellipsoids[i].rotation_deg);
    EXPECT_EQ(q.ellipsoids[i].density, p.ellipsoids[i].density);
  }
}

TEST(PhantomJson, RotationDefaultsToZero) {
  const phantom p = phantom_from_json(
      R"({"ellipsoids": [{"center": [1, 2, 3], "semi_axes": [4, 5, 6], "density": -0.5}]})");
  ASSERT_EQ(p.ellipsoids.size(), 1u);
  EXPECT_EQ(p.ellipsoids[0].rotation_deg, 0.0);
  EXPECT_EQ(p.ellipsoids[0].density, -0.5);
  EXPECT_EQ(p.ellipsoids[0].semi_axes, (vec3{4, 5, 6}));
}

// Each bad input throws usage_error whose message names the origin and the field.
TEST(PhantomJson, ErrorsNameTheField) {
  const std::string ok = R"({"center": [0, 0, 0], "semi_axes": [1, 1, 1], "density": 1})";
  struct bad_case {
    std::string text, needle;
  };
  const bad_case cases[] = {
      {"{", "invalid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"shapes": []})", "'ellipsoids'"},
      {R"({"ellipsoids": []})", "'ellipsoids'"},
      {R"({"ellipsoids": {}})", "'ellipsoids'"},
      {R"({"ellipsoids": [)" + ok + R"(, 3]})", "'ellipsoids[1]'"},
      {R"({"ellipsoids": [)" + ok + "," + ok +
           R"(, {"center": [0,0,0], "semi_axes": [1, -1, 1], "density": 1}]})",
       "field 'ellipsoids[2].semi_axes': expected 3 positive numbers"},
      {R"({"ellipsoids": [{"center": [0,0,0], "semi_axes": [1, 0, 1], "density": 1}]})",
       "'ellipsoids[0].semi_axes'"},
      {R"({"ellipsoids": [{"center": [0,0,0], "semi_axes": [1, 1], "density": 1}]})",
       "'ellipsoids[0].semi_axes'"},
      {R"({"ellipsoids": [{"center": [0,0], "semi_axes": [1, 1, 1], "density": 1}]})",
       "'ellipsoids[0].center'"},
      {R"({"ellipsoids": [{"center": [0,"a",0], "semi_axes": [1, 1, 1], "density": 1}]})",
       "'ellipsoids[0].center'"},
      {R"({"ellipsoids": [{"semi_axes": [1, 1, 1], "density": 1}]})", "'ellipsoids[0].center'"},
      {R"({"ellipsoids": [{"center": [0,0,0], "semi_axes": [1, 1, 1]}]})",
       "'ellipsoids[0].density'"},
      {R"({"ellipsoids": [{"center": [0,0,0], "semi_axes": [1, 1, 1], "density": "x"}]})",
       "'ellipsoids[0].density'"},
      {R"({"ellipsoids": [{"center": [0,0,0], "semi_axes": [1, 1, 1], "density": 1,
           "rotation_deg": null}]})",
       "'ellipsoids[0].rotation_deg'"},
      // JSON has no NaN / Inf literals; an overflowing number is the way to write one.
      {R"({"ellipsoids": [{"center": [0,0,1e999], "semi_axes": [1, 1, 1], "density": 1}]})",
       "1e999"},
  };
  for (const auto& c : cases) {
    try {
      phantom_from_json(c.text, "phantom.json");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const usage_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("phantom.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << "'" << msg << "' lacks " << c.needle;
    }
  }
}

// Independent point-membership oracle (written from the header's definition of rotation).
double density_at(const phantom& p, vec3 x) {
  double sum = 0;
  for (const auto& e : p.ellipsoids) {
    const double t = deg_to_rad(e.rotation_deg);
    const vec3 d = x - e.center;
    const double bx = std::cos(t) * d.x + std::sin(t) * d.y;
    const double by = -std::sin(t) * d.x + std::cos(t) * d.y;
    const double q = bx * bx / (e.semi_axes.x * e.semi_axes.x) +
                     by * by / (e.semi_axes.y * e.semi_axes.y) +
                     d.z * d.z / (e.semi_axes.z * e.semi_axes.z);
    if (q <= 1) sum += e.density;
  }
  return sum;
}

TEST(Voxelize, SupersampleOneMatchesPointMembership) {
  // Odd, anisotropic, off-centre grid.
  volume_geometry vg;
  vg.nx = 37;
  vg.ny = 30;
  vg.nz = 21;
  vg.spacing_mm = {1.7, 2.1, 2.9};
  vg.origin_mm = {-30.3, -31.1, -29.7};
  const phantom p = shepp_logan_phantom(60);
  const volume v = voxelize(p, vg, 1, 2);
  std::int64_t mismatches = 0;
  for (std::int64_t k = 0; k < vg.nz; ++k)
    for (std::int64_t j = 0; j < vg.ny; ++j)
      for (std::int64_t i = 0; i < vg.nx; ++i) {
        const double expected = density_at(p, vg.voxel_center(i, j, k));
        // Float storage of sums of a few densities of O(0.1): 1e-6 absolute.
        if (std::abs(v.at(k, j, i) - expected) > 1e-6) ++mismatches;
      }
  // A sample point exactly on a surface may be classified either way by rounding; none of
  // these grid points is (the grid is deliberately irregular), so require zero mismatches.
  EXPECT_EQ(mismatches, 0);
}

// Approximate surface area of an ellipsoid (Knud Thomsen, relative error < 1.1 %).
double ellipsoid_area(vec3 s) {
  const double pw = 1.6075;
  const double ab = std::pow(s.x * s.y, pw), ac = std::pow(s.x * s.z, pw),
               bc = std::pow(s.y * s.z, pw);
  return 4 * pi * std::pow((ab + ac + bc) / 3, 1 / pw);
}

TEST(Voxelize, TotalMassMatchesEllipsoidVolumes) {
  const phantom p = shepp_logan_phantom(56);
  for (int S : {2, 3}) {
    const volume_geometry vg = volume_geometry::centered(64, 63, 61, {1, 1, 1});
    const volume v = voxelize(p, vg, S, 0);
    double mass = 0;
    for (float x : v.data) mass += x;  // voxel volume is 1 mm^3
    double expected = 0, bound = 0;
    const double h = 1.0 / S;  // sub-sample spacing (mm)
    for (const auto& e : p.ellipsoids) {
      expected += e.density * 4.0 / 3.0 * pi * e.semi_axes.x * e.semi_axes.y * e.semi_axes.z;
      // Counting sub-points approximates the volume with cubes of side h around them; a cube
      // counted wrongly meets the surface, so it lies within h*sqrt(3)/2 of it. The error is
      // thus at most |rho| times the volume of that shell, ~ area * h * sqrt(3) (x1.1 for the
      // area formula's error).
      bound += std::abs(e.density) * 1.1 * ellipsoid_area(e.semi_axes) * h * std::sqrt(3.0);
    }
    EXPECT_NEAR(mass, expected, bound) << "supersample " << S;
    // The bound is loose (errors of opposite sign cancel); the error is in practice far
    // smaller: also require 1/4 of it to catch systematic offsets such as half-voxel shifts.
    EXPECT_NEAR(mass, expected, 0.25 * bound) << "supersample " << S;
  }
}

TEST(Voxelize, InteriorVoxelIsExactAndThreadCountIrrelevant) {
  const phantom p = shepp_logan_phantom(50);
  const volume_geometry vg = volume_geometry::centered(33, 33, 33, {1.5, 1.5, 1.5});
  const volume a = voxelize(p, vg, 4, 1);
  const volume b = voxelize(p, vg, 4, 2);
  EXPECT_EQ(a.data, b.data);
  // The centre voxel lies wholly inside the skull and brain ellipsoids only: 0.1 - 0.08.
  EXPECT_NEAR(a.at(16, 16, 16), 0.02, 1e-7);
  // Corners are outside everything.
  EXPECT_EQ(a.at(0, 0, 0), 0.0f);
  EXPECT_THROW(voxelize(p, vg, 0), usage_error);
}

TEST(Voxelize, SizeOneDimensions) {
  // A single slice through the centre of a cylinder-like ellipsoid (huge z semi-axis).
  const phantom p = one({{0, 0, 0}, {10, 10, 1e6}, 0, 0.5});
  const volume_geometry vg = volume_geometry::centered(31, 1, 1, {1, 1, 1});
  const volume v = voxelize(p, vg, 3, 0);
  for (std::int64_t i = 0; i < 31; ++i) {
    const double x = std::abs(static_cast<double>(i) - 15);
    if (x <= 9) EXPECT_NEAR(v.at(0, 0, i), 0.5, 1e-7) << i;  // every sub-point inside
    if (x >= 11) EXPECT_EQ(v.at(0, 0, i), 0.0f) << i;        // every sub-point outside
  }
}

projection_stack constant_stack(std::int64_t views, std::int64_t rows, std::int64_t cols,
                                float value) {
  projection_stack s(views, rows, cols);
  for (auto& x : s.data) x = value;
  return s;
}

/// Sample mean and (unbiased) sample variance.
std::pair<double, double> mean_and_variance(const std::vector<float>& v) {
  const double n = static_cast<double>(v.size());
  double mean = 0, var = 0;
  for (float x : v) mean += x;
  mean /= n;
  for (float x : v) var += (x - mean) * (x - mean);
  return {mean, var / (n - 1)};
}

TEST(Noise, ReproducibleForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  projection_stack base = constant_stack(9, 7, 11, 0.0f);
  for (std::int64_t i = 0; i < base.size(); ++i) base.data[i] = 0.01f * static_cast<float>(i % 300);
  noise_options opt;
  opt.incident_photons = 5e3;
  opt.electronic_sigma = 3;
  opt.seed = 1234;
  std::vector<std::vector<float>> results;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    projection_stack s = base;
    add_noise(s, opt);
    results.push_back(s.data);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_NE(results[0], base.data);

  projection_stack other = base;
  opt.seed = 1235;
  add_noise(other, opt);
  std::int64_t differing = 0;
  for (std::size_t i = 0; i < other.data.size(); ++i) differing += other.data[i] != results[0][i];
  // Counts of mean ~ 5e3 with std ~ 70: two seeds coincide on a pixel with probability < 1 %.
  EXPECT_GT(differing, static_cast<std::int64_t>(0.9 * static_cast<double>(other.data.size())));
}

TEST(Noise, StatisticsOfPoissonCounts) {
  const double p = 1.0, i0 = 1e4;
  projection_stack s = constant_stack(16, 32, 64, static_cast<float>(p));  // 32768 pixels
  noise_options opt;
  opt.incident_photons = i0;
  opt.seed = 99;
  const noise_report rep = add_noise(s, opt);
  EXPECT_EQ(rep.non_positive, 0);
  const double lambda = i0 * std::exp(-p);  // mean count ~ 3679
  const double n = static_cast<double>(s.size());
  const auto [mean, var] = mean_and_variance(s.data);
  // Delta method: -log(N/I0) has mean p + 1/(2 lambda) + O(lambda^-2) and variance 1/lambda.
  // The sample mean's standard error is sqrt(1/(lambda n)) ~ 9e-5: allow 5 of them.
  EXPECT_NEAR(mean, p + 1 / (2 * lambda), 5 * std::sqrt(1 / (lambda * n)));
  // Sample variance: relative standard error sqrt(2/n) ~ 0.8 %; allow 5 % (6 sigma).
  EXPECT_NEAR(var * lambda, 1.0, 0.05);
}

TEST(Noise, ElectronicNoiseAddsVariance) {
  const double i0 = 1e3, sigma = 20;  // lambda = 1000 at p = 0
  projection_stack s = constant_stack(8, 32, 64, 0.0f);
  noise_options opt;
  opt.incident_photons = i0;
  opt.electronic_sigma = sigma;
  add_noise(s, opt);
  const auto [mean, var] = mean_and_variance(s.data);
  // Count variance lambda + sigma^2 = 1400, so Var(-log(N/I0)) ~ 1400 / lambda^2 = 1.4e-3
  // (delta method; the next-order correction is ~ 1e-3 relative). Relative standard error of
  // the sample variance ~ sqrt(2/n) ~ 1.1 %: allow 6 %.
  EXPECT_NEAR(var / ((i0 + sigma * sigma) / (i0 * i0)), 1.0, 0.06);
}

TEST(Noise, ZeroCountsAreClampedAndCounted) {
  // Mean count 10 exp(-40) ~ 4e-17 (and exactly 0 for p = 1e6): every count is 0.
  projection_stack s = constant_stack(3, 4, 5, 40.0f);
  for (std::int64_t i = 0; i < 20; ++i) s.data[i] = 1e6f;
  s.data[59] = 0.0f;  // one ordinary pixel: Poisson(10) is 0 with probability 4.5e-5
  noise_options opt;
  opt.incident_photons = 10;
  opt.seed = 5;
  const noise_report rep = add_noise(s, opt);
  EXPECT_GE(rep.non_positive, 59);
  EXPECT_LE(rep.non_positive, 60);
  for (std::int64_t i = 0; i < 59; ++i) {
    ASSERT_TRUE(std::isfinite(s.data[i]));
    EXPECT_FLOAT_EQ(s.data[i], static_cast<float>(-std::log(0.5 / 10)));  // clamped: 0.5 photon
  }
  EXPECT_TRUE(std::isfinite(s.data[59]));
}

TEST(Noise, InvalidInputs) {
  projection_stack s = constant_stack(1, 1, 2, 1.0f);
  noise_options opt;
  opt.incident_photons = 0;
  EXPECT_THROW(add_noise(s, opt), usage_error);
  opt.incident_photons = 100;
  opt.electronic_sigma = -1;
  EXPECT_THROW(add_noise(s, opt), usage_error);
  opt.electronic_sigma = 0;
  s.data[1] = std::nanf("");
  try {
    add_noise(s, opt);
    ADD_FAILURE() << "NaN input accepted";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("col 1"), std::string::npos) << e.what();
  }
}

TEST(ProjectAnalytic, MatchesLineIntegralPerPixel) {
  const phantom p = shepp_logan_phantom(40);
  const geometry cone =
      make_cone_geometry(9, 5, 1.3, 1.1, 60, 110, angle_range(0.3, 0.7, 3), {0.4}, {-0.2});
  const geometry par = make_parallel_geometry(8, 1, 0.9, 1.0, {0.0, 1.0});
  for (const geometry* g : {&cone, &par}) {
    const projection_stack s = project_analytic(p, *g, 2);
    ASSERT_EQ(s.views, g->view_count());
    ASSERT_EQ(s.rows, g->rows);
    ASSERT_EQ(s.cols, g->cols);
    for (std::int64_t v = 0; v < s.views; ++v)
      for (std::int64_t r = 0; r < s.rows; ++r)
        for (std::int64_t c = 0; c < s.cols; ++c) {
          const vec3 px = pixel_center(*g, v, c, r);
          const vec3 src = g->views[v].source;
          const double expected = g->beam == beam_kind::cone ? line_integral(p, src, px - src)
                                                             : line_integral(p, px, src);
          // Float storage of values up to ~4: 1e-6 relative.
          EXPECT_NEAR(s.at(v, r, c), expected, 1e-6 * (1 + std::abs(expected)));
        }
  }
  // Parallel beam through the centre (view 0 is along +y, centre column at x = 0): the z = 0
  // central ray's integral equals the closed form for the y-chords of a and b at x = 0.
  const projection_stack c1 = project_analytic(one({{0, 0, 0}, {10, 10, 10}, 0, 0.1}),
                                               make_parallel_geometry(3, 3, 4, 4, {0.0}));
  EXPECT_NEAR(c1.at(0, 1, 1), 2.0, 1e-6);                              // 0.1 * 20
  EXPECT_NEAR(c1.at(0, 1, 0), 0.1 * 2 * std::sqrt(100 - 16.0), 1e-6);  // impact 4 mm
  EXPECT_NEAR(c1.at(0, 0, 0), 0.1 * 2 * std::sqrt(100 - 32.0), 1e-6);  // impact 4 sqrt 2
}

TEST(ProjectAnalytic, ConeRaysStartAtTheSource) {
  // Source inside a sphere (radius 20, centre at the origin) at y = -5, detector at y = 100:
  // the central ray runs from the source to the far surface, 25 mm, not the whole 40 mm chord.
  const phantom p = one({{0, 0, 0}, {20, 20, 20}, 0, 0.01});
  const geometry g =
      make_vec_geometry(beam_kind::cone, 3, 3, {{{0, -5, 0}, {0, 100, 0}, {1, 0, 0}, {0, 0, 1}}});
  const projection_stack s = project_analytic(p, g, 1);
  EXPECT_NEAR(s.at(0, 1, 1), 0.01 * 25, 1e-7);
}

// Scale: an ellipsoid of semi-axes 1e200 mm and density 1e-200 / mm has line integrals of
// order 1 (|d|^2 in its unit frame underflows: they came out 0); one of 1e-30 mm sits between
// the rays and is counted as missed.
TEST(ProjectAnalytic, HugeAndTinyEllipsoidsComputedHonestly) {
  const geometry g =
      make_vec_geometry(beam_kind::parallel, 3, 3, {{{0, 1, 0}, {0, 0, 0}, {1, 0, 0}, {0, 0, 1}}});
  const phantom huge = one({{0, 0, 0}, {1e200, 1e200, 1e200}, 0, 1e-200});
  analytic_report rep;
  const projection_stack s = project_analytic(huge, g, 1, &rep);
  EXPECT_NEAR(s.at(0, 1, 1), 2.0, 1e-6);  // 2 x 1e200 mm x 1e-200 / mm
  ASSERT_EQ(rep.rays_hit.size(), 1u);
  EXPECT_EQ(rep.rays_hit[0], 9);
  const phantom both{
      {{{0.5, 0, 0.5}, {1e-30, 1e-30, 1e-30}, 0, 0.02}, {{0, 0, 0}, {1, 1, 1}, 0, 0.02}}};
  project_analytic(both, g, 2, &rep);
  EXPECT_EQ(rep.rays_hit[0], 0);
  EXPECT_EQ(rep.rays_hit[1], 1);  // only the central ray meets the unit sphere
}

TEST(PhantomRange, LineIntegralsBeyondSinglePrecisionNameTheField) {
  const auto check = [](ellipsoid e, const std::string& field) {
    phantom p{{{{0, 0, 0}, {1, 1, 1}, 0, 0.02}, e}};
    testing::expect_error_naming([&] { require_representable(p, "ph.json"); },
                                 "ph.json: field 'ellipsoids[1]." + field + "'");
  };
  check({{0, 0, 0}, {1e30, 1e30, 1e200}, 0, 0.02}, "semi_axes");       // overflows
  check({{0, 0, 0}, {1e-200, 1e-200, 1e-200}, 0, 0.02}, "semi_axes");  // vanishes
  check({{0, 0, 0}, {10, 10, 10}, 0, 1e38}, "density");
  check({{0, 0, 0}, {10, 10, 10}, 0, -1e-45}, "density");
  // Large but representable, and density 0 whatever the size, pass.
  EXPECT_NO_THROW(require_representable(
      phantom{{{{0, 0, 0}, {1e30, 1e30, 1e30}, 0, 0.02}, {{0, 0, 0}, {1e300, 1, 1}, 0, 0}}},
      "ph.json"));
}

}  // namespace
}  // namespace ctforge

namespace ctforge {
namespace {

// A sphere projected analytically onto a cylindrical detector: each pixel holds the chord of
// the ray from the source to that pixel's centre on the cylinder, computed here from first
// principles (pixel at fan angle gamma = (col - c0) du / SDD and height (row - r0) dv, the chord
// 2 sqrt(r^2 - b^2) for the ray's distance b from the sphere's centre).
TEST(PhantomProjection, SphereThroughCylindricalDetector) {
  const double r = 30, rho = 0.02, sid = 300, sdd = 700, du = 2.0, dv = 1.5;
  const vec3 c{8, -5, 6};
  const phantom p = one({c, {r, r, r}, 0, rho});
  const std::int64_t cols = 96, rows = 40;
  const std::vector<double> angles{0.2, 1.9, 4.0};
  const geometry g =
      make_cone_geometry(cols, rows, du, dv, sid, sdd, angles, {}, {}, detector_shape::cylindrical);
  const projection_stack proj = project_analytic(p, g);
  double checked_inside = 0;
  for (std::size_t v = 0; v < angles.size(); ++v) {
    const double t = angles[v];
    const vec3 s{sid * std::sin(t), -sid * std::cos(t), 0};
    for (std::int64_t row = 0; row < rows; ++row)
      for (std::int64_t col = 0; col < cols; ++col) {
        const double gamma = (static_cast<double>(col) - 0.5 * (cols - 1)) * du / sdd;
        const double h = (static_cast<double>(row) - 0.5 * (rows - 1)) * dv;
        // Central ray direction (-sin t, cos t) turned by gamma towards the tangent u_hat =
        // (cos t, sin t) (columns grow along +u as on the flat detector) is (-sin a, cos a).
        const double a = t - gamma;
        const vec3 pix = s + vec3{-sdd * std::sin(a), sdd * std::cos(a), h};
        const vec3 d = (1.0 / norm(pix - s)) * (pix - s);
        const vec3 w = c - s;
        const double along = dot(w, d);
        const double b2 = dot(w, w) - along * along;
        const double expected = b2 < r * r ? rho * 2 * std::sqrt(r * r - b2) : 0.0;
        if (expected > 0) ++checked_inside;
        EXPECT_NEAR(proj.at(static_cast<std::int64_t>(v), row, col), expected, 1e-5)
            << "view " << v << " row " << row << " col " << col;
      }
  }
  EXPECT_GT(checked_inside, 1000);
  // The flat detector of the same pitch puts the sphere elsewhere off-centre (the test above
  // would fail with it): its projections differ.
  const projection_stack flat =
      project_analytic(p, make_cone_geometry(cols, rows, du, dv, sid, sdd, angles));
  double diff = 0;
  for (std::size_t i = 0; i < flat.data.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::abs(flat.data[i] - proj.data[i])));
  EXPECT_GT(diff, 0.05);
}

}  // namespace
}  // namespace ctforge

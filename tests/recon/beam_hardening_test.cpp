// Beam-hardening correction of a simulated polychromatic scan of a water cylinder: the cupping
// of the uncorrected reconstruction, and its removal by the coefficients of fit_linearisation
// (ctforge/preprocess.hpp) and of fit_water_precorrection (ctforge/beam_hardening.hpp).
#include "ctforge/beam_hardening.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/preprocess.hpp"
#include "ctforge/recon.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

using testing::expect_runtime_error_naming;
using testing::expect_usage_error_naming;

// The spectrum: bins at 30, 40, 50, 60, 80 and 100 keV with detected weights shaped like a
// 100 kVp tungsten spectrum behind a few mm of aluminium. The weights are illustrative (not a
// measured spectrum); the energies are grid points of NIST's table below.
const std::vector<double> energies_kev{30, 40, 50, 60, 80, 100};
const std::vector<double> weights{0.10, 0.22, 0.26, 0.20, 0.15, 0.07};
// Water's mass attenuation coefficients mu/rho (cm^2/g) at those energies, from NIST's X-Ray
// Mass Attenuation Coefficients tables (Hubbell and Seltzer, NIST Standard Reference Database
// 126, "Water, Liquid"), times the density 1 g/cm^3, divided by 10 for 1/mm.
const std::vector<double> mu_water_per_mm{0.03756, 0.02683, 0.02269, 0.02059, 0.01837, 0.01707};

constexpr double radius_mm = 100;  // the water cylinder, centred on the rotation axis

/// -ln(sum_E w_E exp(-mu_E t) / sum_E w_E) for a path of t mm of water.
double poly_integral(double t) {
  double num = 0, den = 0;
  for (std::size_t e = 0; e < weights.size(); ++e) {
    num += weights[e] * std::exp(-mu_water_per_mm[e] * t);
    den += weights[e];
  }
  return -std::log(num / den);
}

double mean_mu() {
  double num = 0, den = 0;
  for (std::size_t e = 0; e < weights.size(); ++e) {
    num += weights[e] * mu_water_per_mm[e];
    den += weights[e];
  }
  return num / den;
}

struct scan_case {
  std::string name;
  bool fan;
};

/// Parallel: 321 columns of 0.8 mm, 360 views over 180 deg. Fan: a flat detector of 401
/// columns of 1 mm at 800 mm from the source, the axis at 500 mm (0.625 mm at the axis),
/// 720 views over 360 deg. One detector row. Both cover the 200 mm disc with air around it.
geometry scan_geometry(const scan_case& c) {
  if (!c.fan) return make_parallel_geometry(321, 1, 0.8, 0.8, angle_range(0, deg_to_rad(0.5), 360));
  return make_cone_geometry(401, 1, 1.0, 1.0, 500, 800, angle_range(0, deg_to_rad(0.5), 720));
}

/// The distance from the axis of the ray through detector coordinate u (mm from the central
/// column): u for parallel beams, SID sin(atan(u / SDD)) for the fan.
double ray_distance(const scan_case& c, double u) {
  return c.fan ? 500 * std::sin(std::atan(u / 800)) : u;
}

/// The polychromatic scan: each pixel averages the transmitted intensity of 8 rays across its
/// width (the detector integrates intensity), then -ln. The chord of the centred disc is
/// 2 sqrt(R^2 - d^2) for a ray at distance d from the axis, the same in every view.
projection_stack water_scan(const scan_case& c, const geometry& g) {
  const double pitch = c.fan ? 1.0 : 0.8;
  projection_stack p(g.view_count(), 1, g.cols);
  std::vector<float> profile(static_cast<std::size_t>(p.cols));
  for (std::int64_t col = 0; col < p.cols; ++col) {
    double transmitted = 0;
    for (int s = 0; s < 8; ++s) {
      const double u =
          (static_cast<double>(col) - 0.5 * static_cast<double>(p.cols - 1) + (s + 0.5) / 8 - 0.5) *
          pitch;
      const double d = std::abs(ray_distance(c, u));
      const double chord = d < radius_mm ? 2 * std::sqrt(radius_mm * radius_mm - d * d) : 0;
      transmitted += std::exp(-poly_integral(chord)) / 8;
    }
    profile[static_cast<std::size_t>(col)] = static_cast<float>(-std::log(transmitted));
  }
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t col = 0; col < p.cols; ++col)
      p.at(v, 0, col) = profile[static_cast<std::size_t>(col)];
  return p;
}

/// 277 x 277 voxels of 0.8 mm (221.6 mm across: air around the 200 mm disc).
volume_geometry water_grid() {
  return volume_geometry::centered(277, 277, 1, {0.8, 0.8, 0.8});
}

struct cupping_figures {
  double centre = 0, edge = 0;
  double cupping() const { return (edge - centre) / edge; }  // > 0: darker centre
};

/// Means over r < 0.2 R (the centre) and 0.7 R < r < 0.85 R (the ring inside the edge, clear
/// of the edge's blur).
cupping_figures cupping_of(const volume& v) {
  cupping_figures f;
  double n_c = 0, n_e = 0;
  for (std::int64_t j = 0; j < v.geom.ny; ++j)
    for (std::int64_t i = 0; i < v.geom.nx; ++i) {
      const vec3 p = v.geom.voxel_center(static_cast<double>(i), static_cast<double>(j), 0);
      const double r = std::hypot(p.x, p.y) / radius_mm;
      if (r < 0.2) {
        f.centre += v.at(0, j, i);
        ++n_c;
      } else if (r > 0.7 && r < 0.85) {
        f.edge += v.at(0, j, i);
        ++n_e;
      }
    }
  f.centre /= n_c;
  f.edge /= n_e;
  return f;
}

recon_options analytic(const scan_case& c) {
  recon_options o;
  o.algo = c.fan ? algorithm::fdk : algorithm::fbp;
  o.where = backend::cpu;
  o.threads = 2;
  return o;
}

class WaterCylinder : public ::testing::TestWithParam<scan_case> {};

TEST_P(WaterCylinder, CuppingIsRemovedByBothFits) {
  const scan_case c = GetParam();
  ASSERT_EQ(energies_kev.size(), weights.size());
  const geometry g = scan_geometry(c);
  const projection_stack scan = water_scan(c, g);
  const volume_geometry vg = water_grid();
  const recon_options ro = analytic(c);

  // Negative control: the uncorrected reconstruction is clearly cupped (measured 2.8%, the
  // centre 2.8% below the ring inside the edge; the corrected images below are flat to 0.2%).
  const cupping_figures raw = cupping_of(reconstruct(scan, g, vg, ro));
  std::cout << c.name << ": cupping uncorrected " << 100 * raw.cupping() << "%\n";
  EXPECT_GT(raw.cupping(), 0.02);

  // Linearisation from the spectrum: paths up to the diameter and a little more.
  linearisation_options lo;
  lo.degree = 4;
  lo.max_thickness_mm = 2 * radius_mm * 1.05;
  const std::vector<double> lin = fit_linearisation(weights, mu_water_per_mm, lo);
  projection_stack q = scan;
  correct_beam_hardening(q, lin, 2);
  const cupping_figures after_lin = cupping_of(reconstruct(q, g, vg, ro));
  std::cout << c.name << ": cupping after fit_linearisation " << 100 * after_lin.cupping()
            << "%, centre " << after_lin.centre << " /mm against mu_ref " << mean_mu() << "\n";
  // The requirement: below 1% (measured 0.009% parallel, 0.007% fan).
  EXPECT_LT(std::abs(after_lin.cupping()), 0.01);
  // The values are water's spectrum-weighted mean attenuation (up to the reconstruction's
  // discretisation, well under 2% at this sampling).
  EXPECT_NEAR(after_lin.centre / mean_mu(), 1.0, 0.02);

  // The empirical cupping correction from the scan itself.
  water_precorrection_options wo;
  wo.degree = 3;
  wo.recon = ro;
  const std::vector<double> ecc = fit_water_precorrection(scan, g, vg, wo);
  ASSERT_EQ(ecc.size(), 4u);
  EXPECT_EQ(ecc[0], 0.0);
  projection_stack e = scan;
  correct_beam_hardening(e, ecc, 2);
  const cupping_figures after_ecc = cupping_of(reconstruct(e, g, vg, ro));
  std::cout << c.name << ": cupping after fit_water_precorrection " << 100 * after_ecc.cupping()
            << "%, coefficients";
  for (double x : ecc) std::cout << " " << x;
  std::cout << "\n";
  EXPECT_LT(std::abs(after_ecc.cupping()), 0.01);  // measured 0.07% parallel, 0.16% fan
  // Independent of any reconstruction: the ECC polynomial nearly linearises the water line
  // integrals themselves, poly(P(t)) proportional to t over paths of 10 mm to the diameter.
  // Measured: within 0.8% (parallel) and 2.4% (fan); the fit is made on the image, where the
  // long central paths weigh most, so the short paths deviate most. 3% is the bound.
  const auto poly = [&](double x) {
    double s = 0;
    for (std::size_t k = 0; k < ecc.size(); ++k) s += ecc[k] * std::pow(x, static_cast<double>(k));
    return s;
  };
  const double slope = poly(poly_integral(2 * radius_mm)) / (2 * radius_mm);
  double worst = 0;
  for (double t = 10; t <= 2 * radius_mm; t += 10)
    worst = std::max(worst, std::abs(poly(poly_integral(t)) / (slope * t) - 1));
  std::cout << c.name << ": ECC polynomial off proportional by " << 100 * worst << "% at most\n";
  EXPECT_LT(worst, 0.03);
}

INSTANTIATE_TEST_SUITE_P(Beams, WaterCylinder,
                         ::testing::Values(scan_case{"parallel", false}, scan_case{"fan", true}),
                         [](const auto& info) { return info.param.name; });

TEST(WaterPrecorrection, RefusesBadOptionsNamingThem) {
  const scan_case c{"parallel", false};
  const geometry g = scan_geometry(c);
  const projection_stack scan = water_scan(c, g);
  const volume_geometry vg = water_grid();
  const auto fit = [&](water_precorrection_options o) {
    return [&, o] { fit_water_precorrection(scan, g, vg, o); };
  };
  water_precorrection_options o;
  o.degree = 0;
  expect_usage_error_naming(fit(o), "degree");
  o = {};
  o.threshold = 1;
  expect_usage_error_naming(fit(o), "threshold");
  o = {};
  o.margin = -1;
  expect_usage_error_naming(fit(o), "margin");
  o = {};
  o.recon = analytic(c);
  o.recon->algo = algorithm::sirt;
  expect_usage_error_naming(fit(o), "recon");
  // A margin wider than the object's radius leaves nothing inside it.
  o = {};
  o.margin = 150;
  expect_runtime_error_naming(fit(o), "margin");
  // Empty projections reconstruct to zero: no object.
  const projection_stack zero(scan.views, scan.rows, scan.cols);
  expect_runtime_error_naming([&] { fit_water_precorrection(zero, g, vg); }, "positive");
}

}  // namespace
}  // namespace ctforge

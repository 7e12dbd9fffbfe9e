// Beam-hardening correction and single-material linearisation (include/ctforge/preprocess.hpp).
// The cupping tests, which reconstruct, are in tests/recon/beam_hardening_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "preprocess/least_squares.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

using testing::expect_runtime_error_naming;
using testing::expect_usage_error_naming;

/// Random line integrals in [-0.5, 6] (negative ones occur in noisy air), with -0 and 0.
projection_stack random_scan(std::int64_t v, std::int64_t r, std::int64_t c, unsigned seed) {
  projection_stack p(v, r, c);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-0.5f, 6.0f);
  for (float& x : p.data) x = u(gen);
  p.data[0] = -0.0f;
  if (p.data.size() > 1) p.data[1] = 0.0f;
  return p;
}

/// sum_k c_k x^k written term by term with std::pow (independent of Horner's rule).
double power_sum(const std::vector<double>& c, double x) {
  double s = 0;
  for (std::size_t k = 0; k < c.size(); ++k) s += c[k] * std::pow(x, static_cast<double>(k));
  return s;
}

using shape = testing::scan_shape;
class BeamHardeningShapes : public ::testing::TestWithParam<shape> {};

TEST_P(BeamHardeningShapes, EqualsThePolynomialWithinFloatRounding) {
  const shape s = GetParam();
  projection_stack p = random_scan(s.views, s.rows, s.cols, 7);
  const projection_stack in = p;
  const std::vector<double> c{0.013, 1.02, 0.031, -0.0042, 0.00037};
  correct_beam_hardening(p, c, 2);
  for (std::size_t i = 0; i < p.data.size(); ++i) {
    const double ref = power_sum(c, static_cast<double>(in.data[i]));
    // Both are computed in double (relative differences ~1e-15) and rounded to float: they may
    // round to neighbouring floats, so one float step of the reference is the tolerance.
    const double ulp = std::nextafter(static_cast<float>(std::abs(ref)), INFINITY) -
                       static_cast<float>(std::abs(ref));
    ASSERT_LE(std::abs(static_cast<double>(p.data[i]) - ref), ulp) << "value " << i;
  }
}

TEST_P(BeamHardeningShapes, IdentityCoefficientsLeaveEveryBitAlone) {
  const shape s = GetParam();
  projection_stack p = random_scan(s.views, s.rows, s.cols, 11);
  const projection_stack in = p;
  const std::vector<double> identity{0.0, 1.0};
  correct_beam_hardening(p, identity);
  ASSERT_EQ(std::memcmp(p.data.data(), in.data.data(), p.data.size() * sizeof(float)), 0);
  // Negative control: a coefficient one part in 1e6 off changes values.
  const std::vector<double> almost{0.0, 1.000001};
  correct_beam_hardening(p, almost);
  EXPECT_NE(std::memcmp(p.data.data(), in.data.data(), p.data.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(OddAndSingleSizes, BeamHardeningShapes,
                         ::testing::Values(shape{7, 5, 13}, shape{1, 1, 9}, shape{3, 1, 1},
                                           shape{1, 4, 1}, shape{2, 1, 2}));

TEST(BeamHardening, ConstantAndOneThreadAgreeWithAllThreads) {
  projection_stack a = random_scan(5, 3, 17, 3), b = a;
  const std::vector<double> c{0.0, 0.97, 0.02};
  correct_beam_hardening(a, c, 1);
  correct_beam_hardening(b, c, 0);
  EXPECT_EQ(a.data, b.data);
  const std::vector<double> constant{2.5};
  correct_beam_hardening(a, constant);
  for (float x : a.data) ASSERT_EQ(x, 2.5f);
}

TEST(BeamHardening, RefusesBadCoefficientsAndValues) {
  projection_stack p = random_scan(2, 3, 4, 5);
  expect_usage_error_naming([&] { correct_beam_hardening(p, std::vector<double>{}); },
                            "coefficients");
  expect_usage_error_naming(
      [&] {
        correct_beam_hardening(p, std::vector<double>{0.0, 1.0, NAN});
      },
      "coefficients", "c_2");
  expect_usage_error_naming(
      [&] {
        correct_beam_hardening(p, std::vector<double>{0.0, INFINITY});
      },
      "coefficients");
  expect_usage_error_naming(
      [&] {
        correct_beam_hardening(p, std::vector<double>{0, 1}, -1);
      },
      "threads");
  projection_stack bad = p;
  bad.at(1, 2, 3) = NAN;
  expect_usage_error_naming(
      [&] {
        correct_beam_hardening(bad, std::vector<double>{0, 1});
      },
      "view 1, row 2, col 3");
}

TEST(BeamHardening, AResultBeyondFloatIsAnErrorNamingItAndChangesNothing) {
  projection_stack p(2, 3, 4);
  for (float& x : p.data) x = 1.0f;
  p.at(1, 0, 2) = 1e5f;  // (1e5)^8 x 1e-3 = 1e37 fits a float; x 1e10 = 1e50 does not
  const projection_stack in = p;
  expect_runtime_error_naming(
      [&] {
        correct_beam_hardening(p, std::vector<double>{0, 1, 0, 0, 0, 0, 0, 0, 1e10});
      },
      "view 1, row 0, col 2");
  EXPECT_EQ(p.data, in.data);
  correct_beam_hardening(p, std::vector<double>{0, 1, 0, 0, 0, 0, 0, 0, 1e-3});  // fits
  EXPECT_FLOAT_EQ(p.at(1, 0, 2), static_cast<float>(1e5 + 1e37));
}

// ---- the least-squares solver of the fits

TEST(LeastSquares, RecoversAnExactSolutionAndRefusesDependentColumns) {
  // 6 x 3, columns 1, x, x^2 scaled by 1, 1e3, 1e-3 (very different sizes), b = A (2, -1, 0.5):
  // consistent, so the solution is exact up to rounding: coefficient j to about eps ||b|| /
  // ||a_j|| times a small condition factor, i.e. 1e-12 for the first two and, with ||b|| = 3.7e3
  // and ||a_2|| = 0.01, 8e-11 for the third (1.7e-10 seen with another compiler's rounding).
  std::vector<double> a, b;
  const std::vector<double> xs{0.0, 0.5, 1.0, 1.5, 2.0, 3.0};
  for (double s : {1.0, 1e3, 1e-3})
    for (double x : xs) a.push_back(s * (s == 1.0 ? 1.0 : s == 1e3 ? x : x * x));
  for (double x : xs) b.push_back(2.0 - 1.0 * 1e3 * x + 0.5 * 1e-3 * x * x);
  const std::vector<double> sol = detail::least_squares(a, b, 6, 3);
  EXPECT_NEAR(sol[0], 2.0, 1e-12);
  EXPECT_NEAR(sol[1], -1.0, 1e-12);
  EXPECT_NEAR(sol[2], 0.5, 1e-9);
  // The third column twice the first: no unique solution.
  std::vector<double> dep = a;
  for (std::size_t i = 0; i < 6; ++i) dep[12 + i] = 2 * dep[i];
  EXPECT_THROW(detail::least_squares(dep, b, 6, 3), error);
}

// ---- fit_linearisation

/// A two-energy beam: weights (0.6, 0.4), mu (0.04, 0.02) per mm.
const std::vector<double> two_weights{0.6, 0.4};
const std::vector<double> two_mu{0.04, 0.02};

double two_energy_integral(double t) {
  return -std::log(0.6 * std::exp(-0.04 * t) + 0.4 * std::exp(-0.02 * t));
}

TEST(Linearisation, MapsThePolychromaticIntegralToTheMeanAttenuationTimesThickness) {
  linearisation_options o;
  o.degree = 4;
  o.max_thickness_mm = 200;
  const std::vector<double> c = fit_linearisation(two_weights, two_mu, o);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0], 0.0);
  const double mu_ref = 0.6 * 0.04 + 0.4 * 0.02;  // 0.032 / mm
  // The line integral through 200 mm is 4.89 against mu_ref t = 6.4: the uncorrected value is
  // 24% low (negative control); a degree-4 polynomial of this smooth, monotone curve is
  // within 0.5% of mu_ref t over [20, 200] mm (measured with numpy's lstsq: 0.05%), and
  // within 0.002 absolute (measured 0.0003) below 20 mm, where the relative error grows as
  // t -> 0.
  EXPECT_GT(1 - two_energy_integral(200) / (mu_ref * 200), 0.2);
  for (double t = 1; t <= 200; t += 1) {
    const double corrected = power_sum(c, two_energy_integral(t));
    if (t >= 20)
      EXPECT_NEAR(corrected / (mu_ref * t), 1.0, 5e-3) << "t = " << t;
    else
      EXPECT_NEAR(corrected, mu_ref * t, 0.002) << "t = " << t;
  }
  // The slope at 0 of P is mu_ref, so thin paths keep their values: c_1 near 1.
  EXPECT_NEAR(c[1], 1.0, 0.05);
}

TEST(Linearisation, AMonochromaticBeamNeedsNoCorrection) {
  linearisation_options o;
  o.degree = 3;
  o.max_thickness_mm = 100;
  const std::vector<double> c =
      fit_linearisation(std::vector<double>{1.0, 2.0}, std::vector<double>{0.02, 0.02}, o);
  // P(t) = 0.02 t exactly: the fit is the identity up to the solver's rounding.
  EXPECT_NEAR(c[1], 1.0, 1e-9);
  EXPECT_NEAR(c[2], 0.0, 1e-9);
  EXPECT_NEAR(c[3], 0.0, 1e-9);
}

TEST(Linearisation, RefusesBadInputsNamingThem) {
  linearisation_options o;
  o.max_thickness_mm = 100;
  const auto fit = [&](std::vector<double> w, std::vector<double> mu, linearisation_options opt) {
    return [w, mu, opt] { fit_linearisation(w, mu, opt); };
  };
  expect_usage_error_naming(fit({}, {}, o), "weights");
  expect_usage_error_naming(fit({1, 1}, {0.02}, o), "mu_per_mm");
  expect_usage_error_naming(fit({1, -1}, {0.02, 0.03}, o), "weights");
  expect_usage_error_naming(fit({0, 0}, {0.02, 0.03}, o), "weights");
  expect_usage_error_naming(fit({1, 1}, {0.02, NAN}, o), "mu_per_mm");
  expect_usage_error_naming(fit({1, 1}, {0, 0}, o), "mu_per_mm");
  linearisation_options d = o;
  d.degree = 0;
  expect_usage_error_naming(fit({1, 1}, {0.02, 0.03}, d), "degree");
  d.degree = 11;
  expect_usage_error_naming(fit({1, 1}, {0.02, 0.03}, d), "degree");
  linearisation_options t = o;
  t.max_thickness_mm = 0;
  expect_usage_error_naming(fit({1, 1}, {0.02, 0.03}, t), "max_thickness_mm");
  t.max_thickness_mm = 1e6;  // exp(-0.02e6) underflows: the line integral is infinite
  expect_usage_error_naming(fit({1, 1}, {0.02, 0.03}, t), "max_thickness_mm");
  linearisation_options s = o;
  s.samples = 3;
  expect_usage_error_naming(fit({1, 1}, {0.02, 0.03}, s), "samples");
}

}  // namespace
}  // namespace ctforge

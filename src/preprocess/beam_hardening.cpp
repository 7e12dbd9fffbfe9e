// Beam-hardening correction and single-material linearisation: include/ctforge/preprocess.hpp.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "math/polynomial.hpp"
#include "preprocess/common.hpp"
#include "preprocess/least_squares.hpp"

namespace ctforge {

namespace {

void check_coefficients(std::span<const double> c) {
  CTFORGE_EXPECTS(!c.empty(), "coefficients: at least one is needed (c_0, c_1, ...)");
  for (std::size_t k = 0; k < c.size(); ++k)
    CTFORGE_EXPECTS(std::isfinite(c[k]),
                    fmt::format("coefficients: c_{} must be finite (got {})", k, c[k]));
}

[[noreturn]] void throw_beam_hardening_failure(const projections_ref& p, std::int64_t i) {
  const std::int64_t plane = p.rows * p.cols;
  throw error(fmt::format(
      "beam hardening: the corrected value at view {}, row {}, col {} is not a finite float "
      "(value {}); check the coefficients",
      i / plane, i % plane / p.cols, i % p.cols, p.data[static_cast<std::size_t>(i)]));
}

}  // namespace

void correct_beam_hardening(projections_ref p, std::span<const double> coefficients, int threads) {
  check_coefficients(coefficients);
  const int nt = detail::thread_count(threads);
  detail::require_finite(p, "beam hardening", nt);
  const auto n = static_cast<std::int64_t>(coefficients.size());
  const double* c = coefficients.data();
  const auto count = static_cast<std::int64_t>(p.data.size());
  // A first pass finds a value whose result does not fit a float, so that a failure leaves
  // the projections unchanged.
  std::int64_t first_bad = count;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(min : first_bad)
  for (std::int64_t i = 0; i < count; ++i)
    if (!kernels::fits_float(
            kernels::polynomial(c, n, static_cast<double>(p.data[static_cast<std::size_t>(i)]))))
      first_bad = std::min(first_bad, i);
  if (first_bad < count) throw_beam_hardening_failure(p, first_bad);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    float& x = p.data[static_cast<std::size_t>(i)];
    x = static_cast<float>(kernels::polynomial(c, n, static_cast<double>(x)));
  }
}

namespace {

void check_linearisation(std::span<const double> w, std::span<const double> mu,
                         const linearisation_options& o) {
  CTFORGE_EXPECTS(!w.empty(), "weights: at least one energy bin is needed");
  CTFORGE_EXPECTS(
      mu.size() == w.size(),
      fmt::format("mu_per_mm: one value per energy bin ({} weights, got {})", w.size(), mu.size()));
  double sum = 0;
  for (std::size_t e = 0; e < w.size(); ++e) {
    CTFORGE_EXPECTS(std::isfinite(w[e]) && w[e] >= 0,
                    fmt::format("weights: must be finite and >= 0 (got {} at bin {})", w[e], e));
    CTFORGE_EXPECTS(std::isfinite(mu[e]) && mu[e] >= 0,
                    fmt::format("mu_per_mm: must be finite and >= 0 (got {} at bin {})", mu[e], e));
    sum += w[e];
  }
  CTFORGE_EXPECTS(sum > 0, "weights: their sum must be positive");
  CTFORGE_EXPECTS(o.degree >= 1 && o.degree <= 10,
                  fmt::format("degree: must be in [1, 10] (got {})", o.degree));
  CTFORGE_EXPECTS(std::isfinite(o.max_thickness_mm) && o.max_thickness_mm > 0,
                  fmt::format("max_thickness_mm: must be positive (got {})", o.max_thickness_mm));
  CTFORGE_EXPECTS(o.samples > o.degree && o.samples <= 1000000,
                  fmt::format("samples: must exceed the degree ({}) and be at most 1e6 (got {})",
                              o.degree, o.samples));
}

/// -ln(sum_E w_E exp(-mu_E t) / sum_E w_E): the polychromatic line integral of thickness t.
double polychromatic_line_integral(std::span<const double> w, std::span<const double> mu,
                                   double t) {
  double num = 0, den = 0;
  for (std::size_t e = 0; e < w.size(); ++e) {
    num += w[e] * std::exp(-mu[e] * t);
    den += w[e];
  }
  return -std::log(num / den);
}

}  // namespace

std::vector<double> fit_linearisation(std::span<const double> weights,
                                      std::span<const double> mu_per_mm,
                                      const linearisation_options& opt) {
  check_linearisation(weights, mu_per_mm, opt);
  double mu_ref = 0, wsum = 0;
  for (std::size_t e = 0; e < weights.size(); ++e) {
    mu_ref += weights[e] * mu_per_mm[e];
    wsum += weights[e];
  }
  mu_ref /= wsum;
  CTFORGE_EXPECTS(mu_ref > 0, "mu_per_mm: the spectrum-weighted mean attenuation must be positive");
  const std::int64_t m = opt.samples, n = opt.degree;
  // Columns (P / P_max)^k, k = 1..n (c_0 = 0: no attenuation maps to 0); the scaling by P_max
  // keeps the powers near 1, undone on the coefficients below.
  const double p_max = polychromatic_line_integral(weights, mu_per_mm, opt.max_thickness_mm);
  CTFORGE_EXPECTS(std::isfinite(p_max) && p_max > 0,
                  fmt::format("max_thickness_mm: the line integral through {} mm is not finite "
                              "(got {}): the path is too thick for these attenuations",
                              opt.max_thickness_mm, p_max));
  std::vector<double> a(static_cast<std::size_t>(m * n)), b(static_cast<std::size_t>(m));
  for (std::int64_t i = 0; i < m; ++i) {
    const double t = opt.max_thickness_mm * static_cast<double>(i + 1) / static_cast<double>(m);
    const double x = polychromatic_line_integral(weights, mu_per_mm, t) / p_max;
    double xk = 1;
    for (std::int64_t k = 0; k < n; ++k) a[static_cast<std::size_t>(k * m + i)] = xk *= x;
    b[static_cast<std::size_t>(i)] = mu_ref * t;
  }
  const std::vector<double> x = detail::least_squares(std::move(a), std::move(b), m, n);
  std::vector<double> c(static_cast<std::size_t>(n + 1), 0.0);
  for (std::int64_t k = 1; k <= n; ++k)
    c[static_cast<std::size_t>(k)] = x[static_cast<std::size_t>(k - 1)] / std::pow(p_max, k);
  return c;
}

}  // namespace ctforge
